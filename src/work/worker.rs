//! `kaas worker`: one per GPU. Claims a job, runs it in a `kaas sandbox` child (the only
//! place untrusted PTX runs), renews the lease while the child works, then stores the
//! run. A cancelled job, or one whose lease was lost, has its child killed and its
//! result dropped. `kaas serve --workers auto` runs one of these per local GPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sea_orm::DatabaseConnection;

use super::queue::{self, Claimant, Stored};
use crate::gpu::DeviceFacts;
use crate::harness::{BenchSettings, Job};
use crate::sandbox::{self, SandboxCommand};
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
    let problem = claimed.manifest.problem;
    tracing::info!(worker = %cfg.id, job = job_id, %problem, attempt = claimed.job.attempts, "running job");
    let bench = match &cfg.bench {
        Some(b) => Some(serde_json::to_value(b)?),
        None => None,
    };
    let job = Job { ptx: claimed.ptx, manifest: claimed.manifest, secret_seed: rand::random(), watchdog_ms: None, bench };
    let wall = sandbox::default_wall_limit(&job);
    let cancel = Arc::new(AtomicBool::new(false));
    let stage = format!("running on {} ({}): verification{}", cfg.id, cfg.facts.device_class, if cfg.bench.is_some() { ", then benchmark" } else { "" });
    queue::heartbeat(db, job_id, &cfg.id, cfg.lease, Some(&stage)).await?;
    let _ = queue::worker_seen(db, &cfg.id, Some(&cfg.facts), "busy", Some(job_id), Some(&stage)).await;
    let mut child = {
        let (cmd, cancel) = (cfg.sandbox.clone(), cancel.clone());
        tokio::task::spawn_blocking(move || sandbox::run_with_cancel(&cmd, &job, wall, &cancel))
    };
    let beat = (cfg.lease / 3).max(Duration::from_millis(100));
    let mut lost = false;
    let outcome = loop {
        tokio::select! {
            res = &mut child => break res?,
            _ = tokio::time::sleep(beat) => {
                match queue::heartbeat(db, job_id, &cfg.id, cfg.lease, None).await {
                    Ok(true) => { let _ = queue::worker_seen(db, &cfg.id, Some(&cfg.facts), "busy", Some(job_id), Some(&stage)).await; }
                    Ok(false) => {
                        if !lost {
                            tracing::warn!(job = job_id, "job cancelled or its lease lost: killing its sandbox");
                        }
                        lost = true;
                        cancel.store(true, Ordering::Relaxed);
                    }
                    // The database may be back before the lease runs out.
                    Err(e) => tracing::warn!(error = %e, job = job_id, "lease renewal failed"),
                }
            }
        }
    };
    if lost {
        return Ok(());
    }
    if outcome.verdict == Verdict::InternalError {
        // The service failed, not the kernel: give the job back for another attempt.
        tracing::warn!(job = job_id, message = %outcome.message, "internal error; job released");
        queue::release(db, job_id, &cfg.id, &outcome.message).await?;
        tokio::time::sleep(cfg.poll).await;
        return Ok(());
    }
    match queue::complete(db, job_id, &cfg.id, &outcome, &cfg.facts).await? {
        Stored::Run { run_id, promoted } => {
            tracing::info!(job = job_id, run = run_id, verdict = %outcome.verdict, promoted, "job finished");
        }
        Stored::Lost => tracing::warn!(job = job_id, "job finished after it stopped being ours; result dropped"),
    }
    Ok(())
}
