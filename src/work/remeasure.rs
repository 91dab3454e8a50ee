//! Re-measuring the catalog: the kernels it serves, run again through today's
//! verification and benchmark (both timing regimes), as jobs of their own submissions.
//!
//! Each job runs the entry's own manifest, so its run replaces the entry's figures when
//! it passes ([`super::queue::supersedes`]: the same kernel measured again), withdraws
//! the entry when a stage added since it was admitted fails it
//! ([`super::queue::withdraw_if_current`]), and keeps its submitter.

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};

use super::{queue, state};
use crate::db::entities::{job, problem, run};
use crate::problem::DeviceClass;

/// Below every submitter's jobs (admins 0, others 10): re-measuring fills idle GPUs.
pub const PRIORITY: i32 = 20;

/// Which entries to queue.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Only this device class's entries (the jobs run on it).
    pub device_class: DeviceClass,
    /// Every `every`-th entry, from `offset`, in (layout, acc, M·N·K, M) order.
    pub every: usize,
    pub offset: usize,
    /// At most this many jobs.
    pub limit: Option<usize>,
    /// Only entries whose figures name no timing regime (timed before regimes were
    /// named), so a pass spread over several runs finishes what the earlier ones left.
    pub unmeasured_only: bool,
    /// Only served entries of problems the benchmark times paced as well
    /// ([`crate::harness::bench::PACED_FROM_FLOP`]) whose figures have no paced table
    /// (timed before it did), so that they are judged as new kernels are.
    pub unpaced_only: bool,
}

/// Whether a run's stored speedups (JSON text) lack a `paced` table while the
/// catalog serves its kernel: only a served kernel's answer can change when it is judged
/// paced too (the lower of two figures never turns a loss into a win).
fn served_unpaced(speedups: Option<&str>) -> bool {
    let Some(v) = speedups.and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok()) else { return false };
    v.get("paced").is_none() && crate::catalog::beats_all(&crate::catalog::ranked_speedups(Some(&v))) == Some(true)
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queued {
    pub entries: usize,
    pub queued: usize,
    /// Entries whose kernel already had a queued or running job.
    pub already_open: usize,
}

/// Queues a verify job for each selected catalog entry of `sel.device_class`, in one
/// transaction.
pub async fn queue_entries(db: &DatabaseConnection, sel: &Selection) -> Result<Queued, DbErr> {
    let now = Utc::now();
    let txn = crate::db::begin_write(db).await?;
    let entries: Vec<_> = crate::catalog::current_entries(&txn).await?.into_iter().filter(|e| e.device_class == sel.device_class).collect();
    let runs: HashMap<i32, run::Model> = run::Entity::find()
        .filter(run::Column::Id.is_in(entries.iter().map(|e| e.run_id)))
        .all(&txn)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    let problems: HashMap<i32, problem::Model> = problem::Entity::find()
        .filter(problem::Column::Id.is_in(entries.iter().map(|e| e.problem_id)))
        .all(&txn)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    let open: HashSet<i32> = job::Entity::find()
        .filter(job::Column::DeviceClass.eq(&sel.device_class))
        .filter(job::Column::State.is_in([state::QUEUED, state::RUNNING]))
        .all(&txn)
        .await?
        .into_iter()
        .filter_map(|j| j.manifest_id)
        .collect();
    let mut rows: Vec<(&problem::Model, &run::Model)> = entries
        .iter()
        .filter_map(|e| Some((problems.get(&e.problem_id)?, runs.get(&e.run_id)?)))
        .filter(|(_, r)| !sel.unmeasured_only || r.regime.is_none())
        .filter(|(p, r)| {
            !sel.unpaced_only
                || (crate::catalog::problem_of(p).is_ok_and(|p| p.shape().flops() >= crate::harness::bench::PACED_FROM_FLOP)
                    && served_unpaced(r.speedups.as_deref()))
        })
        .collect();
    rows.sort_by_key(|(p, _)| (p.layout.clone(), p.acc.clone(), p.m as i64 * p.n as i64 * p.k as i64, p.m));
    let mut out = Queued { entries: rows.len(), ..Queued::default() };
    for (p, r) in rows.into_iter().skip(sel.offset).step_by(sel.every.max(1)) {
        if sel.limit.is_some_and(|l| out.queued >= l) {
            break;
        }
        if open.contains(&r.manifest_id) {
            out.already_open += 1;
            continue;
        }
        job::ActiveModel {
            submission_id: Set(r.submission_id),
            manifest_id: Set(Some(r.manifest_id)),
            kind: Set(queue::KIND_VERIFY.into()),
            problem_id: Set(p.id),
            device_class: Set(Some(sel.device_class.clone())),
            state: Set(state::QUEUED.into()),
            priority: Set(PRIORITY),
            attempts: Set(0),
            created_at: Set(now),
            updated_at: Set(now),
            stage: Set(Some(format!("re-measure: waiting for a {} worker", sel.device_class))),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
        out.queued += 1;
    }
    txn.commit().await?;
    Ok(out)
}
