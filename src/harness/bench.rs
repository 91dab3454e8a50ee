//! The benchmark half of a run, in the sandbox process right after verification passed
//! (only when the job asks for it, [`Job::bench`]): the candidate — its manifest's
//! launches via [`PreparedManifest`] — side by side with cuBLAS, cuBLASLt heuristic top-1
//! and cuBLASLt autotuned, each in NN and TN, every contender's inputs rotating over
//! several buffer sets of random fp16 data (DESIGN.md, Benchmark).
//!
//! After timing, launches inside sequences shaped like the timed one are checked
//! ([`super::sequence`]: a kernel that skips its work when launched back to back gets
//! `timing_dependent`), and the output a timed launch left in one buffer set (picked at
//! random) is re-checked: it must be complete and finite and within the verification's deviation
//! bound, recomputed on that set's inputs from fresh baseline runs and an fp32
//! reference. A kernel whose timed output fails gets the verdict `unstable`. The same
//! inputs are also run once more untimed; whether the two outputs are bit-identical is
//! recorded (a nondeterministic but accurate kernel, e.g. split-K with atomics, passes).
//!
//! The result goes into [`RunOutcome::bench`]:
//! `{"timings": {mode: Timing}, "baselines": [{library, layout, mode, timing, config}],
//!   "speedups": {mode: {"cublas_nn": x, …, "cublaslt_autotune_max": x}}, "recheck": {…},
//!   "device_start", "device_end", "converged", "rounds", "elapsed_ms", …}`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::pipeline::bound_on;
use super::sequence;
use super::stages::{StageFailure, cell};
use super::{Job, RunOutcome};
use crate::bench::autotune::{self, AutotuneOptions};
use crate::bench::baselines::{Pool, SLOTS, SixBaselines, operand_sets, operand_sets_with};
use crate::bench::runner::{self, BaselineSlot, BenchConfig};
use crate::bench::stats::Mode;
use crate::gpu::{Contender, Gpu, GpuError, PreparedManifest, c_len, checks};
use crate::problem::{Layout, Problem};
use crate::verify::rng::derive_seed;
use crate::verify::Verdict;
use crate::verify::containment::POISON_BITS;

const BENCH: &str = "benchmark";
const RECHECK: &str = "benchmark re-check";

/// Buffer sets a run's contenders rotate over unless the settings say otherwise.
pub const DEFAULT_SETS: usize = 3;

/// What a job's `bench` object may say; every field is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BenchSettings {
    /// Modes to time; `graph` ranks.
    pub modes: Vec<Mode>,
    /// Stop once every median's 95% interval is within ± this fraction.
    pub target_rel: f64,
    /// Time limit of the side-by-side rounds (set-up and autotune not included).
    pub budget_ms: u64,
    /// Seeds the inputs and the order of contenders.
    pub seed: u64,
    /// Buffer sets every contender's inputs rotate over (at least 2).
    pub sets: usize,
    /// Heuristic algorithms the cuBLASLt autotune may time.
    pub autotune_max: usize,
    /// Time limit of each layout's autotune search; a fifth of `budget_ms` when absent.
    pub autotune_budget_ms: Option<u64>,
}

impl Default for BenchSettings {
    fn default() -> Self {
        BenchSettings {
            modes: vec![Mode::Graph, Mode::Offline],
            target_rel: crate::bench::stats::DEFAULT_TARGET_REL,
            budget_ms: 3000,
            seed: 1,
            sets: DEFAULT_SETS,
            autotune_max: 100,
            autotune_budget_ms: None,
        }
    }
}

impl BenchSettings {
    /// The job's settings: `None` when it asks for no benchmark.
    pub fn of(job: &Job) -> Result<Option<BenchSettings>, String> {
        match &job.bench {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| format!("the job's bench settings are invalid: {e}")),
        }
    }

    pub fn autotune_budget(&self) -> Duration {
        Duration::from_millis(self.autotune_budget_ms.unwrap_or(self.budget_ms / 5))
    }

    /// What the sandbox's wall-clock limit must add for the benchmark: the rounds, both
    /// autotune searches, and set-up and the re-check.
    pub fn wall_time(&self) -> Duration {
        Duration::from_millis(self.budget_ms) + self.autotune_budget() * 2 + Duration::from_secs(30)
    }

    fn config(&self) -> BenchConfig {
        BenchConfig {
            modes: self.modes.clone(),
            target_rel: self.target_rel,
            budget: Duration::from_millis(self.budget_ms),
            seed: self.seed,
            ..BenchConfig::default()
        }
    }
}

/// Benchmarks `job`'s candidate, which passed verification, and fills `outcome.bench`.
/// A timed output that fails the re-check makes the verdict `unstable`; a failure while
/// timing becomes the outcome's verdict (the candidate crashed, or the harness failed).
pub fn bench_candidate(gpu: &Gpu, job: &Job, settings: &BenchSettings, outcome: &mut RunOutcome) {
    let started = Instant::now();
    let result = run_bench(gpu, job, settings);
    let failure = match result {
        Ok((bench, failure)) => {
            outcome.bench = Some(bench);
            failure
        }
        Err(f) => Some(f),
    };
    if let Some(f) = failure {
        outcome.device_lost = f.device_lost();
        outcome.verdict = f.verdict;
        outcome.stage = f.stage;
        outcome.message = f.message;
    }
    outcome.duration_ms += started.elapsed().as_secs_f64() * 1e3;
}

/// A GPU error while timing: the candidate's fault when its launches failed (the device
/// is then unusable), else the harness's.
fn timing_failure(candidate: &str) -> impl Fn(GpuError) -> StageFailure + '_ {
    move |e| {
        let text = e.to_string();
        if text.contains(candidate) {
            StageFailure::new(Verdict::Crashed, BENCH, format!("the candidate failed while being timed: {text}"))
        } else {
            // Leave the process without teardown all the same: the candidate may be at fault.
            StageFailure::new(Verdict::Crashed, BENCH, format!("the benchmark failed: {text}"))
        }
    }
}

fn run_bench(gpu: &Gpu, job: &Job, settings: &BenchSettings) -> Result<(serde_json::Value, Option<StageFailure>), StageFailure> {
    let started = Instant::now();
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, BENCH, format!("the harness failed: {e}"));
    let sets = settings.sets.max(2);
    let loaded = gpu.load_ptx(&job.ptx).map_err(harness)?;
    let (a_len, b_len) = (p.m as usize * p.k as usize, p.k as usize * p.n as usize);
    let pool = Pool::new(gpu, a_len.max(b_len) + 4_000_037, settings.seed).map_err(harness)?;
    let cand_ops = operand_sets_with(gpu, &pool, &p, job.manifest.workspace_bytes, sets, 0).map_err(harness)?;
    let nn = operand_sets(gpu, &pool, &Problem { layout: Layout::Nn, ..p }, sets, 1).map_err(harness)?;
    let tn = operand_sets(gpu, &pool, &Problem { layout: Layout::Tn, ..p }, sets, 2).map_err(harness)?;
    let prepared = cand_ops
        .iter()
        .map(|ops| PreparedManifest::new(gpu, &loaded, &job.manifest, ops))
        .collect::<Result<Vec<_>, _>>()
        .map_err(harness)?;
    gpu.synchronize().map_err(harness)?;
    let setup_ms = started.elapsed().as_secs_f64() * 1e3;

    let at = Instant::now();
    let opts = AutotuneOptions { max_candidates: settings.autotune_max.max(1), budget: settings.autotune_budget(), ..AutotuneOptions::default() };
    let six = SixBaselines::build(gpu, &nn, &tn, &|ops| autotune::autotune(gpu, ops, &opts).map(|(lt, c)| (lt, c, false))).map_err(harness)?;
    let autotune_ms = at.elapsed().as_secs_f64() * 1e3;

    let candidate_label = prepared[0].label();
    let mut contenders: Vec<Vec<&dyn Contender>> = vec![prepared.iter().map(|c| c as &dyn Contender).collect()];
    contenders.extend(six.sets());
    let report = runner::benchmark(gpu, &contenders, p.shape().flops(), &settings.config()).map_err(timing_failure(&candidate_label))?;

    let slots: Vec<BaselineSlot> = SLOTS.iter().enumerate().map(|(i, &(library, layout))| BaselineSlot { contender: i + 1, library, layout }).collect();
    let mut baselines = Vec::new();
    for (i, &(library, layout)) in SLOTS.iter().enumerate() {
        let config = six.config(i, &Problem { layout, ..p }).map_err(harness)?;
        let Some(ct) = report.contenders.get(i + 1) else { continue };
        for (mode, timing) in &ct.timings {
            baselines.push(serde_json::json!({
                "library": library.as_str(), "layout": layout.as_str(), "mode": mode.as_str(),
                "timing": timing, "config": config, "launches_per_sample": ct.launches_per_sample,
            }));
        }
    }
    let candidate = &report.contenders[0];
    drop(contenders);

    // The re-check, on a buffer set picked at random after timing (first: the checks
    // below change the sets' outputs).
    let at = Instant::now();
    let set = rand::random_range(0..sets);
    let (recheck, recheck_failure) = recheck(gpu, job, &cand_ops[set], &prepared[set], set)?;
    let recheck_ms = at.elapsed().as_secs_f64() * 1e3;

    // Launches inside a sequence shaped like the timed one must do their work.
    let at = Instant::now();
    let (sequence_checks, sequence_failure) = sequence::check_timed_sequences(gpu, job, &cand_ops, &prepared, candidate.launches_per_sample)?;
    let sequence_ms = at.elapsed().as_secs_f64() * 1e3;
    let failure = recheck_failure.or(sequence_failure);

    let bench = serde_json::json!({
        "timings": candidate.timings,
        "baselines": baselines,
        "speedups": runner::speedups(&report, 0, &slots),
        "device_start": report.device_start,
        "device_end": report.device_end,
        "converged": report.converged,
        "rounds": report.rounds,
        "elapsed_ms": report.elapsed.as_secs_f64() * 1e3,
        "launches_per_sample": candidate.launches_per_sample,
        "buffer_sets": sets,
        "regime": regime(&p, job.manifest.workspace_bytes, sets, gpu.facts().l2_cache_bytes),
        "settings": settings,
        "recheck": recheck,
        "sequence_checks": sequence_checks,
        "sequence_ms": sequence_ms,
        "setup_ms": setup_ms,
        "autotune_ms": autotune_ms,
        "recheck_ms": recheck_ms,
        "total_ms": started.elapsed().as_secs_f64() * 1e3,
    });
    Ok((bench, failure))
}

/// The cache regime of the timings, from what one contender's rotation touches: every
/// contender's launches walk over `sets` buffer sets of A, B and C (and the workspace).
/// `l2_warm`: the whole rotation fits in the L2 cache, so a launch finds its inputs
/// there; `l2_cold`: it spans at least twice the L2, so a launch's inputs were evicted
/// since it last read them, as a layer's weights are in a real model; `l2_mixed`
/// between. Baselines and candidate share the regime: each rotates over as many sets of
/// the same sizes.
pub fn regime(p: &Problem, workspace_bytes: u64, sets: usize, l2_bytes: u64) -> serde_json::Value {
    let set_bytes = 2 * (p.m as u64 * p.k as u64 + p.k as u64 * p.n as u64 + p.m as u64 * p.n as u64) + workspace_bytes;
    let footprint = set_bytes.saturating_mul(sets as u64);
    let multiple = if l2_bytes > 0 { footprint as f64 / l2_bytes as f64 } else { f64::INFINITY };
    let name = if multiple <= 1.0 {
        "l2_warm"
    } else if multiple >= 2.0 {
        "l2_cold"
    } else {
        "l2_mixed"
    };
    serde_json::json!({"name": name, "buffer_sets": sets, "footprint_bytes": footprint, "l2_bytes": l2_bytes, "l2_multiple": multiple})
}

/// Re-checks the output a timed launch left in buffer set `set` (see the module docs).
/// Everything stays on the device: the timed output is kept in a copy, the untimed run
/// compared with it bit for bit, and both measured against the fp32 reference.
fn recheck(gpu: &Gpu, job: &Job, ops: &crate::gpu::Operands, prepared: &PreparedManifest, set: usize) -> Result<(serde_json::Value, Option<StageFailure>), StageFailure> {
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, RECHECK, format!("the harness failed: {e}"));
    let outputs = c_len(&p);
    gpu.synchronize().map_err(harness)?;
    let what = format!("the output of a timed launch (buffer set {set})");
    let (unwritten, non_finite) = checks::scan_output(gpu, &ops.c, outputs, POISON_BITS).map_err(harness)?;
    if let Some(f) = unwritten.or(non_finite) {
        let value = checks::read_f16(gpu, &ops.c, f.first).map_err(harness)?;
        let msg = format!("{what}: {} = {value} ({} outputs unwritten or non-finite) although verification passed", cell(f.first, p.n), f.count);
        return Ok((serde_json::json!({"set": set, "passed": false, "detail": msg}), Some(StageFailure::new(Verdict::Unstable, RECHECK, msg))));
    }
    let timed = gpu.alloc(outputs * 2).map_err(harness)?;
    timed.copy_range(gpu, 0, &ops.c, 0, outputs * 2).map_err(harness)?;

    // The same inputs once more, untimed.
    ops.poison_c(gpu).map_err(harness)?;
    gpu.synchronize().map_err(harness)?;
    prepared.enqueue(gpu).map_err(|e| StageFailure::new(Verdict::Crashed, RECHECK, format!("an untimed run after timing failed: {e}")))?;
    match gpu.wait_until(Instant::now() + job.watchdog()) {
        Ok(true) => {}
        Ok(false) => return Err(StageFailure::new(Verdict::Timeout, RECHECK, format!("an untimed run after timing did not finish within the watchdog's {} ms", job.watchdog().as_millis()))),
        Err(e) => return Err(StageFailure::new(Verdict::Crashed, RECHECK, format!("an untimed run after timing faulted: {e}"))),
    }
    let differing = checks::find_changed(gpu, &timed, &ops.c, outputs).map_err(harness)?.map_or(0, |f| f.count);

    let bound = bound_on(gpu, &p, &ops.a, &ops.b, derive_seed(job.secret_seed, 0xBE_5C), RECHECK)?;
    let dev = bound.deviation(gpu, &timed, RECHECK)?;
    let dev_untimed = bound.deviation(gpu, &ops.c, RECHECK)?;
    let passed = bound.bound.admits(dev.max_abs);
    let detail = format!(
        "{what}: max |C − fp32 reference| = {:.6} at {} over all {outputs} outputs; bound {:.6} (worst fresh baseline {:.6}, {}); untimed run: {:.6}, {} of {outputs} outputs differ bitwise from the timed one",
        dev.max_abs,
        cell(dev.index, p.n),
        bound.bound.bound,
        bound.worst.1,
        bound.worst.0,
        dev_untimed.max_abs,
        differing,
    );
    let value = serde_json::json!({
        "set": set,
        "passed": passed,
        "max_abs_deviation": dev.max_abs,
        "bound": bound.bound.bound,
        "untimed_max_abs_deviation": dev_untimed.max_abs,
        "identical_to_untimed": differing == 0,
        "differing_outputs": differing,
        "checked_outputs": outputs,
        "detail": detail,
    });
    let failure = (!passed).then(|| StageFailure::new(Verdict::Unstable, RECHECK, format!("{detail}. Its timed output is wrong although verification passed.")));
    Ok((value, failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Shape};

    fn job(bench: Option<serde_json::Value>) -> Job {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(64, 64, 64).expect("shape"));
        Job { ptx: String::new(), manifest: manifest_for(&p, &SimpleConfig::SMALL), secret_seed: 1, watchdog_ms: None, bench }
    }

    #[test]
    fn the_regime_follows_the_rotations_footprint_against_the_l2() {
        let l2 = 50 << 20;
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        // 1024³: 6 MiB a set, 18 MiB over three sets: warm.
        assert_eq!(regime(&p(1024, 1024, 1024), 0, 3, l2)["name"], "l2_warm");
        // 2048³: 24 MiB a set, 72 MiB: mixed.
        let r = regime(&p(2048, 2048, 2048), 0, 3, l2);
        assert_eq!(r["name"], "l2_mixed");
        assert_eq!(r["footprint_bytes"], 3 * 3 * 2 * 2048 * 2048);
        assert!((r["l2_multiple"].as_f64().expect("multiple") - 1.44).abs() < 1e-9);
        // 8192³: 384 MiB a set: cold; a workspace counts too.
        assert_eq!(regime(&p(8192, 8192, 8192), 0, 3, l2)["name"], "l2_cold");
        assert_eq!(regime(&p(1024, 1024, 1024), 100 << 20, 3, l2)["name"], "l2_cold");
    }

    #[test]
    fn bench_settings_default_per_field_and_refuse_unknown_ones() {
        assert_eq!(BenchSettings::of(&job(None)).expect("valid"), None);
        let s = BenchSettings::of(&job(Some(serde_json::json!({"budget_ms": 500, "modes": ["graph"]})))).expect("valid").expect("some");
        assert_eq!(s.budget_ms, 500);
        assert_eq!(s.modes, vec![Mode::Graph]);
        assert_eq!(s.sets, 3);
        assert_eq!(s.autotune_budget(), Duration::from_millis(100));
        assert_eq!(s.wall_time(), Duration::from_millis(500 + 200 + 30_000));
        let e = BenchSettings::of(&job(Some(serde_json::json!({"budjet_ms": 1})))).expect_err("unknown field");
        assert!(e.contains("budjet_ms"), "{e}");
        assert!(BenchSettings::of(&job(Some(serde_json::json!({"modes": ["fast"]})))).is_err());
        let c = BenchSettings::default().config();
        assert_eq!(c.modes, vec![Mode::Graph, Mode::Offline]);
        assert_eq!(c.budget, Duration::from_secs(3));
    }
}
