//! The `cublaslt_autotune` baseline: time up to 100 of cuBLASLt's heuristic algorithms
//! for a problem and keep the one with the best median; and the database cache of that
//! choice per (device class, driver, cuBLAS version, problem), stored as the algorithm's
//! configuration attributes so it can be re-created ([`LtGemm::from_config`]).
//!
//! Timing all candidates to ±1% would cost more than the benchmark itself, so the search
//! screens every candidate the heuristic offers with a short graph timing (best of a few
//! replays; none is skipped for time, so no algorithm that could win goes untried), then
//! times the few best side by side, interleaved, and keeps the best median. The record
//! says how many were offered and how many timed (they differ only when an algorithm
//! fails to run, or the screen reached its safety limit).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use serde::{Deserialize, Serialize};

use super::runner::launches_for;
use crate::bench::stats;
use crate::db::entities::autotune_choice;
use crate::gpu::{DeviceFacts, Gpu, GpuError, GraphTimer, LtAlgoConfig, LtGemm, Operands};
use crate::problem::Problem;
use crate::problem::DeviceClass;

/// How the search spends its time.
#[derive(Debug, Clone)]
pub struct AutotuneOptions {
    /// Heuristic algorithms asked for (up to 100); every one offered is timed.
    pub max_candidates: usize,
    /// Safety limit of the screen, well above what any problem needs (the heuristic
    /// offers at most a few dozen algorithms; a 16384³ product takes about 14 ms a
    /// launch): only a broken device reaches it, and the record then shows fewer
    /// algorithms timed than offered.
    pub screen_limit: Duration,
    /// Timed replays per candidate in the screen (after one warm-up replay).
    pub screen_replays: u32,
    /// Candidates that go on to the final.
    pub finalists: usize,
    /// Replays per finalist in the final, interleaved.
    pub final_replays: u32,
}

impl Default for AutotuneOptions {
    fn default() -> Self {
        AutotuneOptions {
            max_candidates: 100,
            screen_limit: Duration::from_secs(20),
            screen_replays: 2,
            finalists: 4,
            final_replays: 9,
        }
    }
}

/// The algorithm chosen for a problem, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutotuneChoice {
    pub config: LtAlgoConfig,
    /// Its median in the final (graph mode, µs per launch).
    pub median_us: f64,
    /// Algorithms the heuristic offered, and how many of them were timed.
    pub candidates_offered: usize,
    pub candidates_timed: usize,
    /// The heuristic's first choice, timed in the same final, for comparison.
    pub heuristic_top1_median_us: Option<f64>,
}

/// Time `ops`'s problem for up to `opts.max_candidates` heuristic algorithms and return
/// the fastest (bound to `ops`) with the record of the choice.
pub fn autotune<'a>(gpu: &Gpu, ops: &'a Operands, opts: &AutotuneOptions) -> Result<(LtGemm<'a>, AutotuneChoice), GpuError> {
    let started = Instant::now();
    let stage = format!("autotune {}", ops.problem());
    let mut algos = LtGemm::heuristics(gpu, ops, opts.max_candidates.max(1))?;
    let offered = algos.len();
    // Size the graphs on the heuristic's first choice; all candidates share R.
    let probe = GraphTimer::capture(gpu, &algos[0], 1)?;
    probe.replay(gpu)?;
    let launches = launches_for(probe.replay(gpu)?);
    drop(probe);

    // Screen: best of a few replays each, every offered algorithm, keeping the graphs of
    // the current best few.
    let finalists = opts.finalists.max(1);
    let mut best: Vec<(f64, usize, GraphTimer)> = Vec::new();
    let mut timed = 0;
    for (i, algo) in algos.iter().enumerate() {
        if i > 0 && started.elapsed() > opts.screen_limit {
            tracing::warn!(stage, offered, timed, "the autotune screen reached its safety limit");
            break;
        }
        // An algorithm the heuristic offers but that cannot be captured (or fails) is
        // skipped: the search needs the ones that run.
        let Ok(graph) = GraphTimer::capture(gpu, algo, launches) else { continue };
        let mut fastest = f64::INFINITY;
        let mut ok = graph.replay(gpu).is_ok();
        for _ in 0..opts.screen_replays.max(1) {
            match graph.replay(gpu) {
                Ok(t) => fastest = fastest.min(t),
                Err(_) => ok = false,
            }
        }
        if !ok || !fastest.is_finite() {
            continue;
        }
        timed += 1;
        best.push((fastest, i, graph));
        best.sort_by(|a, b| a.0.total_cmp(&b.0));
        if best.len() > finalists {
            // Keep the top-1 heuristic choice in the final whatever its screen time, so the
            // two baselines are compared side by side.
            if let Some(drop_at) = best.iter().rposition(|b| b.1 != 0) {
                best.remove(drop_at);
            }
        }
    }
    if best.is_empty() {
        return Err(GpuError::refused(stage, "no heuristic algorithm could be timed"));
    }

    // Final: interleaved replays of the finalists, best median wins.
    let mut samples = vec![Vec::new(); best.len()];
    let mut order = stats::Interleaver::new(ops.problem().m as u64 ^ ((ops.problem().k as u64) << 20));
    for _ in 0..opts.final_replays.max(1) {
        for f in order.next_round(best.len()) {
            samples[f].push(best[f].2.replay(gpu)?);
        }
    }
    let medians: Vec<f64> = samples.iter().map(|s| stats::median(s).unwrap_or(f64::INFINITY)).collect();
    let winner = medians
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(f, _)| f)
        .ok_or_else(|| GpuError::refused(&stage, "no finalist"))?;
    let top1 = best.iter().position(|b| b.1 == 0).map(|f| medians[f]);
    let chosen = algos.swap_remove(best[winner].1);
    let choice = AutotuneChoice {
        config: chosen.config()?,
        median_us: medians[winner],
        candidates_offered: offered,
        candidates_timed: timed,
        heuristic_top1_median_us: top1,
    };
    Ok((chosen, choice))
}

/// What an autotune choice is valid for: the same GPU model, driver and cuBLAS, and the
/// same problem (layout and accumulator included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutotuneKey {
    pub device_class: DeviceClass,
    pub driver_version: String,
    pub cublas_version: String,
    pub problem: Problem,
}

impl AutotuneKey {
    pub fn new(facts: &DeviceFacts, problem: &Problem) -> AutotuneKey {
        AutotuneKey {
            device_class: facts.device_class.clone(),
            // The kernel driver's release where the OS tells it, else the CUDA version the
            // driver implements (coarser, but never absent).
            driver_version: facts
                .driver_version
                .clone()
                .unwrap_or_else(|| format!("cuda {}", facts.cuda_driver_api_version)),
            cublas_version: format!("{} (lt {})", facts.cublas_version, facts.cublaslt_version),
            problem: *problem,
        }
    }
}

/// The cached choice for `key`, if any. A row whose configuration no longer parses is
/// treated as absent (the caller tunes again and overwrites it).
pub async fn load<C: ConnectionTrait>(db: &C, key: &AutotuneKey) -> Result<Option<AutotuneChoice>, DbErr> {
    use autotune_choice::Column as C;
    let p = &key.problem;
    let row = autotune_choice::Entity::find()
        .filter(C::DeviceClass.eq(&key.device_class))
        .filter(C::DriverVersion.eq(&key.driver_version))
        .filter(C::CublasVersion.eq(&key.cublas_version))
        .filter(C::Arch.eq(p.arch.as_str()))
        .filter(C::Acc.eq(p.acc.as_str()))
        .filter(C::Layout.eq(p.layout.as_str()))
        .filter(C::M.eq(p.m as i32))
        .filter(C::N.eq(p.n as i32))
        .filter(C::K.eq(p.k as i32))
        .one(db)
        .await?;
    Ok(row.and_then(|r| {
        let config: LtAlgoConfig = serde_json::from_str(&r.config).ok()?;
        Some(AutotuneChoice {
            config,
            median_us: r.median_us,
            candidates_offered: r.candidates_offered.max(0) as usize,
            candidates_timed: r.candidates_timed.max(0) as usize,
            heuristic_top1_median_us: r.heuristic_top1_median_us,
        })
    }))
}

/// Stores (or replaces) the choice for `key`.
pub async fn store<C: ConnectionTrait>(db: &C, key: &AutotuneKey, choice: &AutotuneChoice, now: DateTime<Utc>) -> Result<(), DbErr> {
    use autotune_choice::Column as C;
    let p = &key.problem;
    let config = serde_json::to_string(&choice.config).map_err(|e| DbErr::Custom(e.to_string()))?;
    let row = autotune_choice::ActiveModel {
        device_class: Set(key.device_class.clone()),
        driver_version: Set(key.driver_version.clone()),
        cublas_version: Set(key.cublas_version.clone()),
        arch: Set(p.arch.to_string()),
        acc: Set(p.acc.to_string()),
        layout: Set(p.layout.to_string()),
        m: Set(p.m as i32),
        n: Set(p.n as i32),
        k: Set(p.k as i32),
        config: Set(config),
        median_us: Set(choice.median_us),
        heuristic_top1_median_us: Set(choice.heuristic_top1_median_us),
        candidates_offered: Set(choice.candidates_offered.min(i32::MAX as usize) as i32),
        candidates_timed: Set(choice.candidates_timed.min(i32::MAX as usize) as i32),
        tuned_at: Set(now),
        ..Default::default()
    };
    autotune_choice::Entity::insert(row)
        .on_conflict(
            OnConflict::columns([
                C::DeviceClass,
                C::DriverVersion,
                C::CublasVersion,
                C::Arch,
                C::Acc,
                C::Layout,
                C::M,
                C::N,
                C::K,
            ])
            .update_columns([
                C::Config,
                C::MedianUs,
                C::HeuristicTop1MedianUs,
                C::CandidatesOffered,
                C::CandidatesTimed,
                C::TunedAt,
            ])
            .to_owned(),
        )
        .exec(db)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::db::{DbConfig, connect};
    use crate::problem::{Acc, Arch, Layout, Shape};

    fn facts(driver: Option<&str>) -> DeviceFacts {
        DeviceFacts {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            device_class: "H100-SXM".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_mem_per_block_optin: 232_448,
            max_shared_mem_per_sm: 233_472,
            max_threads_per_block: 1024,
            l2_cache_bytes: 50 << 20,
            total_memory_bytes: 80 << 30,
            driver_version: driver.map(str::to_string),
            cuda_driver_api_version: "13.0".into(),
            cublas_version: "13.1.0".into(),
            cublaslt_version: "130100".into(),
            nvrtc_version: None,
        }
    }

    fn choice(tile: u64, median: f64) -> AutotuneChoice {
        let attributes: BTreeMap<String, u64> =
            [("algo_id", 66), ("tile_id", tile), ("stages_id", 35), ("splitk_num", 1)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        AutotuneChoice {
            config: LtAlgoConfig { attributes, words: vec!["0000000000000042".into(); 8], workspace_bytes: 0, heuristic_rank: 3 },
            median_us: median,
            candidates_offered: 40,
            candidates_timed: 40,
            heuristic_top1_median_us: Some(median * 1.05),
        }
    }

    fn problem(layout: Layout) -> Problem {
        Problem::new(Arch::Sm90, Acc::F32, layout, Shape { m: 4096, n: 4096, k: 4096 })
    }

    #[actix_web::test]
    async fn a_choice_is_found_again_only_under_its_whole_key_and_a_new_one_replaces_it() {
        let db = connect(&DbConfig::new("sqlite::memory:")).await.expect("migrated database");
        let key = AutotuneKey::new(&facts(Some("580.159.04")), &problem(Layout::Tn));
        assert_eq!(load(&db, &key).await.expect("load"), None);
        let now = Utc::now();
        store(&db, &key, &choice(18, 180.0), now).await.expect("store");
        assert_eq!(load(&db, &key).await.expect("load"), Some(choice(18, 180.0)));

        // Another layout, driver or cuBLAS finds nothing.
        let other_layout = AutotuneKey::new(&facts(Some("580.159.04")), &problem(Layout::Nn));
        let other_driver = AutotuneKey::new(&facts(Some("575.1")), &problem(Layout::Tn));
        let mut newer_blas = key.clone();
        newer_blas.cublas_version = "13.2.0 (lt 130200)".into();
        for k in [&other_layout, &other_driver, &newer_blas] {
            assert_eq!(load(&db, k).await.expect("load"), None, "{k:?}");
        }

        // Storing again under the same key replaces, never duplicates.
        store(&db, &key, &choice(20, 175.0), now).await.expect("store again");
        assert_eq!(load(&db, &key).await.expect("load"), Some(choice(20, 175.0)));
        assert_eq!(autotune_choice::Entity::find().all(&db).await.expect("rows").len(), 1);
    }

    #[test]
    fn the_key_falls_back_to_the_cuda_version_when_the_driver_release_is_unknown() {
        let key = AutotuneKey::new(&facts(None), &problem(Layout::Tn));
        assert_eq!(key.driver_version, "cuda 13.0");
        assert_eq!(key.cublas_version, "13.1.0 (lt 130100)");
    }
}
