//! Re-measuring the catalog: the kernels it serves, run again through today's
//! verification and benchmark (both timing regimes), as jobs of their own submissions.
//!
//! Each job runs the entry's own manifest, so its run replaces the entry's figures when
//! it passes ([`super::queue::supersedes`]: the same kernel measured again), withdraws
//! the entry when a stage added since it was admitted fails it
//! ([`super::queue::withdraw_if_current`]), and keeps its submitter.

use chrono::Utc;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder};

use super::{queue, state};
use crate::db::entities::{catalog_entry, job, problem, run};

/// Below every submitter's jobs (admins 0, others 10): re-measuring fills idle GPUs.
pub const PRIORITY: i32 = 20;

/// Which entries to queue.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Only this device class's entries (the jobs run on it).
    pub device_class: String,
    /// Every `every`-th entry, from `offset`, in (layout, acc, M·N·K, M) order.
    pub every: usize,
    pub offset: usize,
    /// At most this many jobs.
    pub limit: Option<usize>,
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
    let entries = catalog_entry::Entity::find()
        .filter(catalog_entry::Column::DeviceClass.eq(&sel.device_class))
        .order_by_asc(catalog_entry::Column::Id)
        .all(&txn)
        .await?;
    // The current entry per problem is its newest row.
    let mut current = std::collections::BTreeMap::new();
    for e in entries {
        current.insert(e.problem_id, e.run_id);
    }
    let mut rows = Vec::new();
    for (problem_id, run_id) in current {
        let (Some(r), Some(p)) = (run::Entity::find_by_id(run_id).one(&txn).await?, problem::Entity::find_by_id(problem_id).one(&txn).await?) else { continue };
        rows.push((p, r));
    }
    rows.sort_by_key(|(p, _)| (p.layout.clone(), p.acc.clone(), p.m as i64 * p.n as i64 * p.k as i64, p.m));
    let mut out = Queued { entries: rows.len(), ..Queued::default() };
    for (p, r) in rows.into_iter().skip(sel.offset).step_by(sel.every.max(1)) {
        if sel.limit.is_some_and(|l| out.queued >= l) {
            break;
        }
        let open = job::Entity::find()
            .filter(job::Column::ManifestId.eq(r.manifest_id))
            .filter(job::Column::DeviceClass.eq(&sel.device_class))
            .filter(job::Column::State.is_in([state::QUEUED, state::RUNNING]))
            .one(&txn)
            .await?;
        if open.is_some() {
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
