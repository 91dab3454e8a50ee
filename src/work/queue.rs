//! The job queue in the database. Every change is one short write transaction, so many
//! workers (and API replicas) can share one Postgres; SQLite works the same way for one
//! machine, its writers serialised by `BEGIN IMMEDIATE`.
//!
//! Times come from the worker's clock (leases are tens of seconds; keep hosts in NTP).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType, OnConflict, Query};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};

use super::{TuneResult, state, tune_state};
use crate::db::entities::{artifact, baseline, catalog_entry, device_class, job, manifest, problem, run, submission, tune, worker};
use crate::gpu::DeviceFacts;
use crate::harness::RunOutcome;
use crate::manifest::Manifest;
use crate::problem::{Arch, Problem};
use crate::verify::Verdict;

/// Who is claiming: the worker's id and what its GPU can run.
#[derive(Debug, Clone)]
pub struct Claimant {
    pub worker_id: String,
    pub facts: DeviceFacts,
}

impl Claimant {
    fn arches(&self) -> Vec<&'static str> {
        Arch::ALL.into_iter().filter(|a| a.runs_on(self.facts.cc())).map(|a| a.as_str()).collect()
    }
}

/// A job a worker holds the lease of, with everything the sandbox needs.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub job: job::Model,
    pub work: Work,
}

/// What a claimed job asks for, by its kind.
#[derive(Debug, Clone)]
pub enum Work {
    /// Verify (and benchmark) a submitted kernel.
    Verify { manifest: Manifest, ptx: String },
    /// Tune a problem (`super::tune`): its tune row, marked `tuning` by the claim.
    Tune { tune: Box<tune::Model>, problem: crate::problem::Problem },
}

fn corrupt(what: String) -> DbErr {
    DbErr::Custom(what)
}

/// A claimed tune job's tune, now `tuning`, and its problem (inside the claim's
/// transaction). The queue's side of a tune job; the rest is `super::tune`'s.
async fn tune_claimed<C: ConnectionTrait>(db: &C, j: &job::Model, worker_id: &str, now: DateTime<Utc>) -> Result<(tune::Model, Problem), DbErr> {
    let tid = j.tune_id.ok_or_else(|| DbErr::Custom(format!("tune job {} has no tune", j.id)))?;
    tune::Entity::update_many()
        .col_expr(tune::Column::State, Expr::value(tune_state::TUNING))
        .col_expr(tune::Column::JobId, Expr::value(j.id))
        .col_expr(tune::Column::Stage, Expr::value(format!("claimed by {worker_id}")))
        .col_expr(tune::Column::UpdatedAt, Expr::value(now))
        .filter(tune::Column::Id.eq(tid))
        .exec(db)
        .await?;
    let t = tune::Entity::find_by_id(tid).one(db).await?.ok_or_else(|| DbErr::Custom(format!("tune {tid} missing")))?;
    let prow = problem::Entity::find_by_id(j.problem_id).one(db).await?.ok_or_else(|| DbErr::Custom(format!("problem {} missing", j.problem_id)))?;
    let p = crate::catalog::problem_of(&prow).map_err(|e| DbErr::Custom(e.to_string()))?;
    Ok((t, p))
}

/// A tune whose job's attempts are used up: failed, with why.
async fn tune_lost<C: ConnectionTrait>(db: &C, j: &job::Model, message: &str, now: DateTime<Utc>) -> Result<(), DbErr> {
    let Some(tid) = j.tune_id else { return Ok(()) };
    let result = TuneResult { verdict: Some(Verdict::WorkerLost), message: message.to_string(), ..Default::default() };
    tune::Entity::update_many()
        .col_expr(tune::Column::State, Expr::value(tune_state::FAILED))
        .col_expr(tune::Column::Message, Expr::value(format!("worker_lost: {message}")))
        .col_expr(tune::Column::Result, Expr::value(serde_json::to_string(&result).ok()))
        .col_expr(tune::Column::Stage, Expr::value("failed".to_string()))
        .col_expr(tune::Column::UpdatedAt, Expr::value(now))
        .col_expr(tune::Column::FinishedAt, Expr::value(now))
        .filter(tune::Column::Id.eq(tid))
        .exec(db)
        .await?;
    Ok(())
}

/// Claims the most urgent job this worker can run: queued, or running with an expired
/// lease (its worker died). A job whose attempts are used up is failed instead, with the
/// verdict `worker_lost`, and the next one is tried.
pub async fn claim(db: &DatabaseConnection, who: &Claimant, lease: Duration, max_attempts: i32) -> Result<Option<Claimed>, DbErr> {
    loop {
        let now = Utc::now();
        let txn = crate::db::begin_write(db).await?;
        let runnable = Condition::any()
            .add(job::Column::State.eq(state::QUEUED))
            .add(Condition::all().add(job::Column::State.eq(state::RUNNING)).add(job::Column::LeaseExpiresAt.lt(now)));
        let class = Condition::any().add(job::Column::DeviceClass.is_null()).add(job::Column::DeviceClass.eq(&who.facts.device_class));
        let arches = Query::select().column(problem::Column::Id).from(problem::Entity).and_where(problem::Column::Arch.is_in(who.arches())).to_owned();
        // On Postgres the row is locked and skipped by other claimers; SQLite ignores the
        // clause (its write transaction already excludes them).
        let mut q = job::Entity::find()
            .filter(runnable)
            .filter(class)
            .filter(job::Column::ProblemId.in_subquery(arches))
            .order_by_desc(job::Column::Priority)
            .order_by_asc(job::Column::Id)
            .limit(1);
        if db.get_database_backend() == sea_orm::DbBackend::Postgres {
            QuerySelect::query(&mut q).lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        }
        let Some(j) = q.one(&txn).await? else {
            txn.commit().await?;
            return Ok(None);
        };
        if j.attempts >= max_attempts && j.kind == KIND_TUNE {
            let message = lost_message(&j);
            tune_lost(&txn, &j, &message, now).await?;
            finish_job(&txn, &j, state::FAILED, None, Some(message), now).await?;
            txn.commit().await?;
            continue;
        }
        if j.attempts >= max_attempts {
            let message = lost_message(&j);
            let class = j.device_class.clone().unwrap_or_else(|| who.facts.device_class.clone());
            ensure_device_class(&txn, &who.facts, &class).await?;
            let mid = j.manifest_id.ok_or_else(|| corrupt(format!("verify job {} has no manifest", j.id)))?;
            let r = insert_run(&txn, &j, mid, &class, Verdict::WorkerLost, &message, &Measured::default(), None, None, now).await?;
            finish_job(&txn, &j, state::FAILED, Some(r), Some(message), now).await?;
            txn.commit().await?;
            continue;
        }
        let res = job::Entity::update_many()
            .col_expr(job::Column::State, Expr::value(state::RUNNING))
            .col_expr(job::Column::LeaseOwner, Expr::value(who.worker_id.clone()))
            .col_expr(job::Column::LeaseExpiresAt, Expr::value(now + lease))
            .col_expr(job::Column::Attempts, Expr::col(job::Column::Attempts).add(1))
            .col_expr(job::Column::Stage, Expr::value(format!("claimed by {} ({})", who.worker_id, who.facts.device_class)))
            .col_expr(job::Column::UpdatedAt, Expr::value(now))
            .filter(job::Column::Id.eq(j.id))
            .filter(job::Column::UpdatedAt.eq(j.updated_at))
            .exec(&txn)
            .await?;
        if res.rows_affected != 1 {
            // Changed under us (SQLite cannot lock rows; this guards anyway).
            txn.rollback().await?;
            continue;
        }
        let work = if j.kind == KIND_TUNE {
            let (t, problem) = tune_claimed(&txn, &j, &who.worker_id, now).await?;
            Work::Tune { tune: Box::new(t), problem }
        } else {
            let mid = j.manifest_id.ok_or_else(|| corrupt(format!("verify job {} has no manifest", j.id)))?;
            let m = manifest::Entity::find_by_id(mid).one(&txn).await?.ok_or_else(|| corrupt(format!("manifest {mid} missing")))?;
            let a = artifact::Entity::find_by_id(m.artifact_sha256.clone()).one(&txn).await?.ok_or_else(|| corrupt(format!("artifact {} missing", m.artifact_sha256)))?;
            let manifest: Manifest = serde_json::from_str(&m.body).map_err(|e| corrupt(format!("manifest {}: {e}", m.id)))?;
            Work::Verify { manifest, ptx: a.ptx }
        };
        let job = job::Entity::find_by_id(j.id).one(&txn).await?.ok_or_else(|| corrupt(format!("job {} missing", j.id)))?;
        txn.commit().await?;
        return Ok(Some(Claimed { job, work }));
    }
}

/// The kind of a tune job (`jobs.kind`); submissions' jobs are [`KIND_VERIFY`].
pub const KIND_TUNE: &str = "tune";
pub const KIND_VERIFY: &str = "verify";

/// Why a job whose attempts are used up is given up.
fn lost_message(j: &job::Model) -> String {
    format!(
        "the job was started {} times and no attempt finished: its worker died, lost its lease or failed (last worker: {}; last error: {}); it will not be retried",
        j.attempts,
        j.lease_owner.as_deref().unwrap_or("unknown"),
        j.error.as_deref().unwrap_or("none recorded")
    )
}

/// The job, while it is running under this worker's lease.
fn held_by(job_id: i32, worker_id: &str) -> Condition {
    Condition::all().add(job::Column::Id.eq(job_id)).add(job::Column::LeaseOwner.eq(worker_id)).add(job::Column::State.eq(state::RUNNING))
}

/// Renews the lease and records the stage; `false` when the job is no longer this
/// worker's (cancelled, or taken over after the lease ran out): stop working on it.
pub async fn heartbeat(db: &DatabaseConnection, job_id: i32, worker_id: &str, lease: Duration, stage: Option<&str>) -> Result<bool, DbErr> {
    let now = Utc::now();
    let mut q = job::Entity::update_many()
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(now + lease))
        .col_expr(job::Column::UpdatedAt, Expr::value(now));
    if let Some(s) = stage {
        q = q.col_expr(job::Column::Stage, Expr::value(s.to_string()));
    }
    let res = q
        .filter(held_by(job_id, worker_id))
        .exec(db)
        .await?;
    Ok(res.rows_affected == 1)
}

/// Gives a job back after a failure of this worker (not of the kernel): it is queued
/// again, and its attempts still count.
pub async fn release(db: &DatabaseConnection, job_id: i32, worker_id: &str, error: &str) -> Result<bool, DbErr> {
    let now = Utc::now();
    let res = job::Entity::update_many()
        .col_expr(job::Column::State, Expr::value(state::QUEUED))
        .col_expr(job::Column::LeaseOwner, Expr::value(Option::<String>::None))
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(Option::<DateTime<Utc>>::None))
        .col_expr(job::Column::Error, Expr::value(error.to_string()))
        .col_expr(job::Column::Stage, Expr::value("waiting for a worker (retry)".to_string()))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(held_by(job_id, worker_id))
        .exec(db)
        .await?;
    Ok(res.rows_affected == 1)
}

/// Cancels a submission's unfinished jobs (inside the caller's transaction).
pub async fn cancel_jobs<C: ConnectionTrait>(db: &C, submission_id: i32, why: &str) -> Result<u64, DbErr> {
    let now = Utc::now();
    let res = job::Entity::update_many()
        .col_expr(job::Column::State, Expr::value(state::CANCELLED))
        .col_expr(job::Column::Stage, Expr::value(why.to_string()))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .col_expr(job::Column::FinishedAt, Expr::value(now))
        .filter(job::Column::SubmissionId.eq(submission_id))
        .filter(job::Column::State.is_in([state::QUEUED, state::RUNNING]))
        .exec(db)
        .await?;
    refresh_submission_status(db, submission_id).await?;
    Ok(res.rows_affected)
}

async fn refresh_submission_status<C: ConnectionTrait>(db: &C, submission_id: i32) -> Result<(), DbErr> {
    let Some(s) = submission::Entity::find_by_id(submission_id).one(db).await? else { return Ok(()) };
    let jobs = job::Entity::find().filter(job::Column::SubmissionId.eq(submission_id)).all(db).await?;
    let states: Vec<&str> = jobs.iter().map(|j| j.state.as_str()).collect();
    let status = super::submission_status(&states, s.deleted_at.is_some());
    if status != s.status {
        submission::Entity::update_many()
            .col_expr(submission::Column::Status, Expr::value(status))
            .filter(submission::Column::Id.eq(submission_id))
            .exec(db)
            .await?;
    }
    Ok(())
}

pub(crate) async fn ensure_device_class<C: ConnectionTrait>(db: &C, facts: &DeviceFacts, class: &str) -> Result<(), DbErr> {
    if device_class::Entity::find_by_id(class.to_string()).one(db).await?.is_none() {
        let (major, minor) = facts.cc();
        // Another worker may add the same class at the same moment.
        device_class::Entity::insert(device_class::ActiveModel {
            name: Set(class.to_string()),
            model: Set(facts.name.clone()),
            compute_capability: Set(format!("{major}.{minor}")),
            sm_count: Set(Some(facts.sm_count as i32)),
        })
        .on_conflict(OnConflict::column(device_class::Column::Name).do_nothing().to_owned())
        .exec_without_returning(db)
        .await?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn insert_run<C: ConnectionTrait>(
    db: &C,
    j: &job::Model,
    manifest_id: i32,
    class: &str,
    verdict: Verdict,
    message: &str,
    measured: &Measured,
    device: Option<String>,
    details: Option<String>,
    now: DateTime<Utc>,
) -> Result<i32, DbErr> {
    let r = run::ActiveModel {
        submission_id: Set(j.submission_id),
        manifest_id: Set(manifest_id),
        problem_id: Set(j.problem_id),
        device_class: Set(class.into()),
        verdict: Set(verdict.as_str().to_string()),
        message: Set(message.to_string()),
        timings: Set(measured.timings.as_ref().map(|v| v.to_string())),
        speedups: Set(measured.speedups.as_ref().map(|v| v.to_string())),
        regime: Set(measured.regime.clone()),
        regimes: Set(measured.regimes.as_ref().map(|v| v.to_string())),
        device: Set(device),
        details: Set(details),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(r.id)
}

pub(crate) async fn finish_job<C: ConnectionTrait>(db: &C, j: &job::Model, to: &str, run_id: Option<i32>, error: Option<String>, now: DateTime<Utc>) -> Result<(), DbErr> {
    let stage = match (to, run_id) {
        (state::DONE, _) => "finished".to_string(),
        _ => error.clone().unwrap_or_else(|| to.to_string()),
    };
    job::Entity::update_many()
        .col_expr(job::Column::State, Expr::value(to))
        .col_expr(job::Column::RunId, Expr::value(run_id))
        .col_expr(job::Column::Error, Expr::value(error))
        .col_expr(job::Column::Stage, Expr::value(stage))
        .col_expr(job::Column::LeaseOwner, Expr::value(Option::<String>::None))
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(Option::<DateTime<Utc>>::None))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .col_expr(job::Column::FinishedAt, Expr::value(now))
        .filter(job::Column::Id.eq(j.id))
        .exec(db)
        .await?;
    match j.submission_id {
        Some(id) => refresh_submission_status(db, id).await,
        None => Ok(()),
    }
}

/// What storing a finished job did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// The run was stored; `promoted` when it became the catalog entry.
    Run { run_id: i32, promoted: bool },
    /// The job was no longer this worker's (cancelled or taken over): nothing stored.
    Lost,
    /// A tune job ended without a kernel to store a run of (its tune says why).
    NoRun,
}

/// What a benchmark measured, as a run stores it: the ranked regime's timings and
/// speedups (per mode), that regime's name, and every regime's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    pub timings: Option<serde_json::Value>,
    pub speedups: Option<serde_json::Value>,
    pub regime: Option<String>,
    pub regimes: Option<serde_json::Value>,
}

impl Measured {
    /// From a run's `bench` object (`None`: not benchmarked).
    pub fn of(bench: Option<&serde_json::Value>) -> Measured {
        let get = |k: &str| bench.and_then(|b| b.get(k)).filter(|v| !v.is_null()).cloned();
        Measured {
            timings: get("timings"),
            speedups: get("speedups"),
            regime: get("regime").and_then(|v| v.as_str().map(str::to_string)),
            regimes: get("regimes"),
        }
    }

    /// The same from a stored run.
    pub fn of_run(r: &run::Model) -> Measured {
        let parse = |t: &Option<String>| t.as_deref().and_then(|t| serde_json::from_str(t).ok());
        Measured { timings: parse(&r.timings), speedups: parse(&r.speedups), regime: r.regime.clone(), regimes: parse(&r.regimes) }
    }

    /// Graph-mode (median, CI low, CI high).
    fn graph_ci(&self) -> Option<(f64, f64, f64)> {
        let g = self.timings.as_ref()?.get("graph")?;
        Some((g.get("median_us")?.as_f64()?, g.get("ci95_low_us")?.as_f64()?, g.get("ci95_high_us")?.as_f64()?))
    }

    /// Graph-mode speedup over cuBLASLt-autotune-max, measured side by side in the run.
    fn graph_autotune_max(&self) -> Option<f64> {
        self.speedups.as_ref()?.pointer(&format!("/graph/{}", crate::catalog::AUTOTUNE_MAX))?.as_f64()
    }
}

/// The catalog replacement rule, for a passing run of manifest `new_manifest` against the
/// current entry's run of `current_manifest`:
/// - the same kernel measured again in a named regime replaces its older figures (how
///   the catalog moves to the ranked regime: re-measuring never keeps a stale number);
/// - runs in the same regime: the new one must be faster beyond both confidence
///   intervals (its upper bound below the entry's lower bound);
/// - runs in different regimes (an entry measured before regimes were named): their
///   times do not compare, so each run's own graph speedup over cuBLASLt-autotune-max,
///   measured side by side, decides, and the new one must be higher.
///
/// A benchmarked run replaces an unbenchmarked entry; otherwise ties, overlaps and
/// unbenchmarked runs keep the older entry.
pub fn supersedes(new_manifest: i32, new: &Measured, current_manifest: i32, current: &Measured) -> bool {
    let Some((_, _, new_high)) = new.graph_ci() else { return false };
    if new_manifest == current_manifest && new.regime.is_some() {
        return true;
    }
    if new.regime != current.regime {
        return match (new.graph_autotune_max(), current.graph_autotune_max()) {
            (Some(n), Some(c)) => n > c,
            (Some(_), None) => true,
            (None, _) => current.graph_ci().is_none(),
        };
    }
    match current.graph_ci() {
        Some((_, cur_low, _)) => new_high < cur_low,
        None => true,
    }
}

/// Stores a finished job's outcome: the run, the baselines it was timed against, the
/// catalog entry when it wins, the job's and the submission's state; all in one
/// transaction, and only while the job is still this worker's.
pub async fn complete(db: &DatabaseConnection, job_id: i32, worker_id: &str, outcome: &RunOutcome, facts: &DeviceFacts) -> Result<Stored, DbErr> {
    let now = Utc::now();
    let txn = crate::db::begin_write(db).await?;
    let Some(j) = job::Entity::find_by_id(job_id).one(&txn).await? else {
        txn.rollback().await?;
        return Ok(Stored::Lost);
    };
    if j.state != state::RUNNING || j.lease_owner.as_deref() != Some(worker_id) {
        txn.rollback().await?;
        return Ok(Stored::Lost);
    }
    if j.kind == KIND_TUNE {
        txn.rollback().await?;
        return Err(corrupt(format!("job {job_id} is a tune job; its outcome is stored by tune::complete")));
    }
    let mid = j.manifest_id.ok_or_else(|| corrupt(format!("verify job {} has no manifest", j.id)))?;
    let device = outcome.device.as_ref().unwrap_or(facts);
    let class = device.device_class.clone();
    ensure_device_class(&txn, device, &class).await?;
    let bench = outcome.bench.as_ref();
    let measured = Measured::of(bench);
    let details = run_details(outcome, worker_id, j.attempts);
    let device_json = serde_json::to_string(device).ok();
    let run_id = insert_run(
        &txn,
        &j,
        mid,
        &class,
        outcome.verdict,
        &outcome.message,
        &measured,
        device_json,
        Some(details.to_string()),
        now,
    )
    .await?;
    store_baselines(&txn, j.problem_id, &class, bench, now).await?;
    let promoted = if outcome.verdict == Verdict::Pass {
        promote_if_faster(&txn, &class, j.problem_id, run_id, mid, &measured, now).await?
    } else {
        if outcome.verdict.is_kernel_fault() {
            withdraw_if_current(&txn, &class, j.problem_id, mid, run_id).await?;
        }
        false
    };
    finish_job(&txn, &j, state::DONE, Some(run_id), None, now).await?;
    txn.commit().await?;
    Ok(Stored::Run { run_id, promoted })
}

/// Makes a passing run the catalog entry of (class, problem) when it [`supersedes`] the
/// current one (or there is none); whether it did.
pub(crate) async fn promote_if_faster<C: ConnectionTrait>(db: &C, class: &str, problem_id: i32, run_id: i32, manifest_id: i32, measured: &Measured, now: DateTime<Utc>) -> Result<bool, DbErr> {
    let wins = match current_entry(db, class, problem_id).await? {
        None => true,
        Some(e) => match run::Entity::find_by_id(e.run_id).one(db).await? {
            Some(cur) => supersedes(manifest_id, measured, cur.manifest_id, &Measured::of_run(&cur)),
            None => true,
        },
    };
    if wins {
        catalog_entry::ActiveModel { device_class: Set(class.into()), problem_id: Set(problem_id), run_id: Set(run_id), created_at: Set(now), ..Default::default() }
            .insert(db)
            .await?;
    }
    Ok(wins)
}

async fn current_entry<C: ConnectionTrait>(db: &C, class: &str, problem_id: i32) -> Result<Option<catalog_entry::Model>, DbErr> {
    Ok(crate::catalog::current_entries_of(db, problem_id).await?.into_iter().find(|e| e.device_class == class))
}

/// A kernel the catalog serves that fails verification when run again (a stage added
/// since it was admitted caught it) stops being served: the entries of (class,
/// problem) that point at its runs are deleted, so the one before it, if any, is served
/// again. The runs stay, the failing one included, as the record of why.
pub(crate) async fn withdraw_if_current<C: ConnectionTrait>(db: &C, class: &str, problem_id: i32, manifest_id: i32, failing_run: i32) -> Result<bool, DbErr> {
    let Some(e) = current_entry(db, class, problem_id).await? else { return Ok(false) };
    let Some(cur) = run::Entity::find_by_id(e.run_id).one(db).await? else { return Ok(false) };
    if cur.manifest_id != manifest_id {
        return Ok(false);
    }
    let runs_of_kernel: Vec<i32> = run::Entity::find()
        .filter(run::Column::ManifestId.eq(manifest_id))
        .filter(run::Column::DeviceClass.eq(class))
        .all(db)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    let gone = catalog_entry::Entity::delete_many()
        .filter(catalog_entry::Column::DeviceClass.eq(class))
        .filter(catalog_entry::Column::ProblemId.eq(problem_id))
        .filter(catalog_entry::Column::RunId.is_in(runs_of_kernel))
        .exec(db)
        .await?;
    tracing::warn!(class, problem_id, manifest_id, failing_run, withdrawn = gone.rows_affected, "a served kernel failed verification when run again: withdrawn");
    Ok(gone.rows_affected > 0)
}

/// A run's `details`: the stage that decided, every check, ptxas and JIT reports, and the
/// benchmark's meta.
pub(crate) fn run_details(outcome: &RunOutcome, worker_id: &str, attempt: i32) -> serde_json::Value {
    let mut details = serde_json::json!({
        "stage": outcome.stage,
        "checks": outcome.checks,
        "ptxas": outcome.ptxas,
        "jit_log": outcome.jit_log,
        "duration_ms": outcome.duration_ms,
        "worker": worker_id,
        "attempt": attempt,
    });
    if let Some(b) = outcome.bench.as_ref() {
        for key in ["converged", "rounds", "elapsed_ms", "recheck", "device_start", "device_end", "settings", "launches_per_sample", "buffer_sets", "fresh_inputs", "fresh_ms", "sequence_ms", "total_ms"] {
            if let Some(v) = b.get(key) {
                details[key] = v.clone();
            }
        }
    }
    details
}

/// The baselines a benchmark timed beside its kernel, added to the problem's table.
pub(crate) async fn store_baselines<C: ConnectionTrait>(db: &C, problem_id: i32, class: &str, bench: Option<&serde_json::Value>, now: DateTime<Utc>) -> Result<usize, DbErr> {
    let mut stored = 0;
    for b in bench.and_then(|b| b.get("baselines")).and_then(|v| v.as_array()).into_iter().flatten() {
        let (Some(library), Some(layout), Some(mode), Some(median)) = (
            b.get("library").and_then(|v| v.as_str()),
            b.get("layout").and_then(|v| v.as_str()),
            b.get("mode").and_then(|v| v.as_str()),
            b.get("timing").and_then(|t| t.get("median_us")).and_then(|v| v.as_f64()),
        ) else {
            continue;
        };
        baseline::ActiveModel {
            problem_id: Set(problem_id),
            device_class: Set(class.into()),
            library: Set(library.to_string()),
            layout: Set(layout.to_string()),
            mode: Set(mode.to_string()),
            median_us: Set(median),
            timing: Set(b.get("timing").map(|v| v.to_string()).unwrap_or_else(|| "{}".into())),
            config: Set(b.get("config").map(|v| v.to_string()).unwrap_or_else(|| "{}".into())),
            created_at: Set(now),
            ..Default::default()
        }
        .insert(db)
        .await?;
        stored += 1;
    }
    Ok(stored)
}

/// Records a worker's presence (an upsert keyed by its id).
pub async fn worker_seen(db: &DatabaseConnection, id: &str, facts: Option<&DeviceFacts>, state_word: &str, job_id: Option<i32>, message: Option<&str>) -> Result<(), DbErr> {
    let now = Utc::now();
    let cc = facts.map(|f| format!("{}.{}", f.cc().0, f.cc().1));
    let existing = worker::Entity::find_by_id(id.to_string()).one(db).await?;
    let mut row = worker::ActiveModel {
        id: Set(id.to_string()),
        device_class: Set(facts.map(|f| f.device_class.clone())),
        gpu_name: Set(facts.map(|f| f.name.clone())),
        compute_capability: Set(cc),
        state: Set(state_word.to_string()),
        job_id: Set(job_id),
        message: Set(message.map(str::to_string)),
        started_at: Set(now),
        last_seen_at: Set(now),
    };
    match existing {
        Some(w) => {
            row.started_at = Set(w.started_at);
            row.id = sea_orm::ActiveValue::Unchanged(w.id);
            row.update(db).await?;
        }
        None => {
            row.insert(db).await?;
        }
    }
    Ok(())
}

/// A stable short id for a worker: host, GPU and process.
pub fn worker_id(gpu: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).unwrap_or_else(|| "host".into());
    format!("{host}/{gpu}/{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(regime: Option<&str>, median: f64, low: f64, high: f64, speedup: f64) -> Measured {
        Measured {
            timings: Some(serde_json::json!({"graph": {"median_us": median, "ci95_low_us": low, "ci95_high_us": high}})),
            speedups: Some(serde_json::json!({"graph": {"cublaslt_autotune_max": speedup}})),
            regime: regime.map(str::to_string),
            regimes: None,
        }
    }

    #[test]
    fn a_run_replaces_the_entry_only_beyond_both_intervals() {
        let cold = Some("l2_cold");
        let cur = m(cold, 100.0, 99.0, 101.0, 1.0);
        assert!(supersedes(2, &m(cold, 90.0, 89.5, 90.5, 1.1), 1, &cur));
        // Faster median, but the intervals overlap: the older entry stays.
        assert!(!supersedes(2, &m(cold, 98.9, 98.0, 99.5, 1.01), 1, &cur));
        // A tie keeps the older.
        assert!(!supersedes(2, &cur, 1, &cur));
        // Slower never wins.
        assert!(!supersedes(2, &m(cold, 120.0, 119.0, 121.0, 0.8), 1, &cur));
        // Benchmarked beats unbenchmarked; unbenchmarked never replaces.
        assert!(supersedes(2, &cur, 1, &Measured::default()));
        assert!(!supersedes(2, &Measured::default(), 1, &cur));
        assert!(!supersedes(2, &Measured::default(), 1, &Measured::default()));
    }

    #[test]
    fn the_same_kernel_measured_again_in_a_named_regime_replaces_its_figures() {
        // A legacy entry (no regime) re-measured cold: slower in µs and in speedup, and
        // still the newer, honest figure of the same kernel.
        let legacy = m(None, 50.0, 49.9, 50.1, 1.06);
        let again = m(Some("l2_cold"), 55.0, 54.9, 55.1, 1.01);
        assert!(supersedes(7, &again, 7, &legacy));
        // Another kernel, though, must win by the rules.
        assert!(!supersedes(8, &again, 7, &legacy));
        // A re-measure without a named regime is not a re-measure in the ranked regime.
        assert!(!supersedes(7, &m(None, 55.0, 54.9, 55.1, 1.01), 7, &legacy));
    }

    #[test]
    fn across_regimes_the_speedups_measured_side_by_side_decide_not_the_times() {
        let legacy = m(None, 50.0, 49.9, 50.1, 1.02);
        // Slower in µs (cold), but a higher speedup over its own baselines: it wins.
        assert!(supersedes(2, &m(Some("l2_cold"), 60.0, 59.9, 60.1, 1.05), 1, &legacy));
        // Faster in µs but a lower speedup: it does not.
        assert!(!supersedes(2, &m(Some("l2_cold"), 40.0, 39.9, 40.1, 1.01), 1, &legacy));
    }
}
