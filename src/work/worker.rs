//! `kaas worker`: one per GPU. Claims a job, runs it in a `kaas sandbox` child (the only
//! place untrusted PTX runs), renews the lease while the child works, then stores the
//! run. A cancelled job, or one whose lease was lost, has its child killed and its
//! result dropped. `kaas serve --workers auto` runs one of these per local GPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sea_orm::DatabaseConnection;

use super::queue::{self, Claimant, Stored, Work};
use crate::gpu::DeviceFacts;
use crate::harness::{BenchSettings, Job};
use crate::sandbox::{self, SandboxCommand};
use crate::tuner::ondemand::TuneJob;
use crate::verify::Verdict;

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub id: String,
    /// What to spawn per job, with the worker's GPU made visible to it.
    pub sandbox: SandboxCommand,
    pub facts: DeviceFacts,
    /// A lease lasts this long unless renewed; renewed every third of it.
    pub lease: Duration,
    /// Pause between claims when the queue is empty.
    pub poll: Duration,
    /// Attempts before a job that never finishes is given up (`worker_lost`).
    pub max_attempts: i32,
    /// Benchmark settings for every passing kernel; `None` verifies only.
    pub bench: Option<BenchSettings>,
    /// The tuner's PTX compiled beforehand, checked against this binary's templates
    /// (`--tune-ptx-dir`); tune jobs compile what it lacks.
    pub tune_ptx_dir: Option<std::path::PathBuf>,
}

impl WorkerConfig {
    pub fn claimant(&self) -> Claimant {
        Claimant { worker_id: self.id.clone(), facts: self.facts.clone() }
    }
}

/// The GPUs a sandbox sees, asked through `kaas sandbox --probe` so that this process
/// loads no CUDA library.
pub async fn probe(cmd: SandboxCommand) -> sandbox::Probe {
    tokio::task::spawn_blocking(move || sandbox::run_probe(&cmd, Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| sandbox::Probe { devices: vec![], error: Some(format!("probe task failed: {e}")) })
}

/// Works until `stop` is set: claim, run, store; sleeps `poll` when there is nothing.
pub async fn run(db: DatabaseConnection, cfg: WorkerConfig, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    tracing::info!(worker = %cfg.id, gpu = %cfg.facts.name, class = %cfg.facts.device_class, "worker started");
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = queue::worker_seen(&db, &cfg.id, Some(&cfg.facts), "idle", None, None).await {
            tracing::warn!(error = %e, "worker heartbeat failed");
        }
        match queue::claim(&db, &cfg.claimant(), cfg.lease, cfg.max_attempts).await {
            Ok(Some(claimed)) => {
                if let Err(e) = work_on(&db, &cfg, claimed).await {
                    tracing::error!(error = %e, "storing a job's result failed");
                    tokio::time::sleep(cfg.poll).await;
                }
            }
            Ok(None) => tokio::time::sleep(cfg.poll).await,
            Err(e) => {
                tracing::warn!(error = %e, "claiming a job failed; retrying");
                tokio::time::sleep(cfg.poll.max(Duration::from_secs(1))).await;
            }
        }
    }
    let _ = queue::worker_seen(&db, &cfg.id, Some(&cfg.facts), "stopped", None, None).await;
    Ok(())
}

/// Runs one claimed job to its end and stores what came of it.
async fn work_on(db: &DatabaseConnection, cfg: &WorkerConfig, claimed: queue::Claimed) -> anyhow::Result<()> {
    let job_id = claimed.job.id;
    let (manifest, ptx) = match claimed.work {
        Work::Verify { manifest, ptx } => (manifest, ptx),
        Work::Tune { tune, problem } => return tune_on(db, cfg, &claimed.job, &tune, problem).await,
    };
    let problem = manifest.problem;
    tracing::info!(worker = %cfg.id, job = job_id, %problem, attempt = claimed.job.attempts, "running job");
    let bench = match &cfg.bench {
        Some(b) => Some(serde_json::to_value(b)?),
        None => None,
    };
    let job = Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench };
    let wall = job.wall_limit();
    let cancel = Arc::new(AtomicBool::new(false));
    let stage = format!("running on {} ({}): verification{}", cfg.id, cfg.facts.device_class, if cfg.bench.is_some() { ", then benchmark" } else { "" });
    queue::heartbeat(db, job_id, &cfg.id, cfg.lease, Some(&stage)).await?;
    let _ = queue::worker_seen(db, &cfg.id, Some(&cfg.facts), "busy", Some(job_id), Some(&stage)).await;
    let child = {
        let (cmd, cancel) = (cfg.sandbox.clone(), cancel.clone());
        tokio::task::spawn_blocking(move || sandbox::run_with_cancel(&cmd, &job, wall, &cancel))
    };
    let Some(outcome) = supervise(db, cfg, job_id, child, &cancel, &stage, None).await? else { return Ok(()) };
    if outcome.verdict == Verdict::InternalError {
        // The service failed, not the kernel: give the job back for another attempt.
        tracing::warn!(job = job_id, message = %outcome.message, "internal error; job released");
        queue::release(db, job_id, &cfg.id, &outcome.message).await?;
        tokio::time::sleep(cfg.poll).await;
        return Ok(());
    }
    log_stored(job_id, outcome.verdict, queue::complete(db, job_id, &cfg.id, &outcome, &cfg.facts).await?);
    Ok(())
}

fn log_stored(job_id: i32, verdict: Verdict, stored: Stored) {
    match stored {
        Stored::Run { run_id, promoted } => tracing::info!(job = job_id, run = run_id, %verdict, promoted, "job finished"),
        Stored::NoRun => tracing::info!(job = job_id, %verdict, "tune job finished without a kernel"),
        Stored::Lost => tracing::warn!(job = job_id, "job finished after it stopped being ours; result dropped"),
    }
}

/// Progress a tune child reported last: (stage, detail).
type Progress = Arc<std::sync::Mutex<Option<(String, String)>>>;

/// Waits for a job's child while renewing the lease; kills the child when the job is
/// cancelled or its lease lost, and then answers `None` (its result must not be stored).
/// With `progress`, a tune child's new progress is written to the job and its tune.
async fn supervise<T>(
    db: &DatabaseConnection,
    cfg: &WorkerConfig,
    job_id: i32,
    mut child: tokio::task::JoinHandle<T>,
    cancel: &AtomicBool,
    stage: &str,
    progress: Option<&Progress>,
) -> anyhow::Result<Option<T>> {
    let beat = (cfg.lease / 3).max(Duration::from_millis(100));
    // Progress is looked at more often than the lease is renewed, so states show soon.
    let look = if progress.is_some() { beat.min(Duration::from_millis(500)) } else { beat };
    let mut lost = false;
    let mut shown: Option<(String, String)> = None;
    let mut last_beat = tokio::time::Instant::now();
    let outcome = loop {
        tokio::select! {
            res = &mut child => break res?,
            _ = tokio::time::sleep(look) => {
                let now = progress.and_then(|p| p.lock().ok().and_then(|g| g.clone()));
                let renewed = match now.filter(|n| shown.as_ref() != Some(n)) {
                    Some((st, detail)) => {
                        let r = super::tune::progress(db, job_id, &cfg.id, cfg.lease, &st, &detail).await;
                        shown = Some((st, detail));
                        Some(r)
                    }
                    None if last_beat.elapsed() >= beat => Some(queue::heartbeat(db, job_id, &cfg.id, cfg.lease, None).await),
                    None => None,
                };
                match renewed {
                    None => {}
                    Some(Ok(true)) => {
                        last_beat = tokio::time::Instant::now();
                        let _ = queue::worker_seen(db, &cfg.id, Some(&cfg.facts), "busy", Some(job_id), Some(stage)).await;
                    }
                    Some(Ok(false)) => {
                        if !lost {
                            tracing::warn!(job = job_id, "job cancelled or its lease lost: killing its sandbox");
                        }
                        lost = true;
                        cancel.store(true, Ordering::Relaxed);
                    }
                    // The database may be back before the lease runs out.
                    Some(Err(e)) => tracing::warn!(error = %e, job = job_id, "lease renewal failed"),
                }
            }
        }
    };
    Ok((!lost).then_some(outcome))
}

/// Seeds a tune job takes from the catalog.
pub const TUNE_SEEDS: usize = 8;

/// Runs a tune job (`kaas sandbox --tune`) and stores its outcome.
async fn tune_on(db: &DatabaseConnection, cfg: &WorkerConfig, j: &crate::db::entities::job::Model, tune: &crate::db::entities::tune::Model, problem: crate::problem::Problem) -> anyhow::Result<()> {
    let job_id = j.id;
    tracing::info!(worker = %cfg.id, job = job_id, %problem, attempt = j.attempts, budget_ms = tune.budget_ms, "tuning");
    let seeds = super::tune::seeds_for(db, &problem, &tune.device_class, TUNE_SEEDS).await?;
    let bench = match &cfg.bench {
        Some(b) => Some(serde_json::to_value(b)?),
        None => None,
    };
    let job = TuneJob { problem, seeds, budget_ms: tune.budget_ms.max(0) as u64, max_pulls: None, secret_seed: rand::random(), watchdog_ms: None, bench, ptx_dir: cfg.tune_ptx_dir.clone() };
    let wall = crate::tuner::ondemand::wall_limit(&job);
    let cancel = Arc::new(AtomicBool::new(false));
    let progress: Progress = Arc::new(std::sync::Mutex::new(None));
    let stage = format!("tuning on {} ({}) for {} ms, then verification and benchmark", cfg.id, cfg.facts.device_class, job.budget_ms);
    queue::heartbeat(db, job_id, &cfg.id, cfg.lease, Some(&stage)).await?;
    let _ = queue::worker_seen(db, &cfg.id, Some(&cfg.facts), "busy", Some(job_id), Some(&stage)).await;
    let child = {
        let (cmd, cancel, progress) = (cfg.sandbox.clone(), cancel.clone(), progress.clone());
        tokio::task::spawn_blocking(move || sandbox::run_tune_with_cancel(&cmd, &job, wall, &cancel, progress))
    };
    let Some(outcome) = supervise(db, cfg, job_id, child, &cancel, &stage, Some(&progress)).await? else { return Ok(()) };
    if outcome.run.verdict == Verdict::InternalError {
        tracing::warn!(job = job_id, message = %outcome.run.message, "internal error in a tune job; job released");
        queue::release(db, job_id, &cfg.id, &outcome.run.message).await?;
        tokio::time::sleep(cfg.poll).await;
        return Ok(());
    }
    log_stored(job_id, outcome.run.verdict, super::tune::complete(db, job_id, &cfg.id, &outcome, &cfg.facts).await?);
    Ok(())
}
