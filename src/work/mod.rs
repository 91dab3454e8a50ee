//! The work side of the service: submissions, the GPU job queue and the workers that
//! drain it.
//!
//! - [`submit`]: `POST /v1/submissions` — checks that need no GPU, answered at once;
//!   accepted work becomes one job per (problem, device class), all in one transaction.
//! - [`queue`]: jobs in the database with a priority, attempts, a lease and a heartbeat.
//!   Workers claim with `FOR UPDATE SKIP LOCKED` on Postgres (SQLite serialises writers
//!   with `BEGIN IMMEDIATE`); a lease that expires puts the job back; a job that keeps
//!   losing its worker stops after `max_attempts` with the verdict `worker_lost`.
//! - [`tune`]: `POST /v1/tuning-requests` — problems to tune, one tune (and one job of
//!   kind `tune`) per (problem, device class) whoever asks; the tune job's outcome.
//! - [`worker`]: `kaas worker`, one per GPU: claims, runs the job in `kaas sandbox`,
//!   renews the lease while it runs, stores the run and promotes it into the catalog when
//!   it is faster than the current entry beyond both confidence intervals.
//!
//! Job states: `queued` → `running` → `done` (a run was stored) | `failed` (attempts
//! exhausted) | `cancelled` (by its owner or an admin). A submission's status follows its
//! jobs: `queued`, `running`, `done`, `cancelled`, or `deleted`.

pub mod error;
pub mod queue;
pub mod remeasure;
pub mod submit;
pub mod tune;
pub mod views;
pub mod worker;

pub use views::*;

/// Job states, as stored.
pub mod state {
    pub const QUEUED: &str = "queued";
    pub const RUNNING: &str = "running";
    pub const DONE: &str = "done";
    pub const FAILED: &str = "failed";
    pub const CANCELLED: &str = "cancelled";

    /// No worker will touch a job in these states again.
    pub fn is_terminal(s: &str) -> bool {
        matches!(s, DONE | FAILED | CANCELLED)
    }
}

/// Tune states, as stored; items of a request may also be `refused`.
pub mod tune_state {
    pub const QUEUED: &str = "queued";
    pub const TUNING: &str = "tuning";
    pub const VERIFYING: &str = "verifying";
    pub const SERVED: &str = "served";
    pub const BASELINE_FASTER: &str = "baseline_faster";
    pub const FAILED: &str = "failed";
    /// An item the service will not tune (the reason says why); never a tune's state.
    pub const REFUSED: &str = "refused";

    /// States a worker may still change.
    pub const OPEN: [&str; 3] = [QUEUED, TUNING, VERIFYING];

    pub fn is_terminal(s: &str) -> bool {
        !OPEN.contains(&s)
    }
}

/// The status of a submission from its jobs' states.
pub fn submission_status(job_states: &[&str], deleted: bool) -> &'static str {
    if deleted {
        return "deleted";
    }
    if job_states.contains(&state::RUNNING) {
        return "running";
    }
    if job_states.contains(&state::QUEUED) {
        // Some finished, some waiting: still running as far as the submitter can tell.
        return if job_states.iter().any(|s| state::is_terminal(s)) { "running" } else { "queued" };
    }
    if !job_states.is_empty() && job_states.iter().all(|s| *s == state::CANCELLED) {
        return "cancelled";
    }
    "done"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_is_done_only_when_every_job_is() {
        assert_eq!(submission_status(&["queued", "queued"], false), "queued");
        assert_eq!(submission_status(&["done", "queued"], false), "running");
        assert_eq!(submission_status(&["done", "running"], false), "running");
        assert_eq!(submission_status(&["done", "failed", "cancelled"], false), "done");
        assert_eq!(submission_status(&["cancelled", "cancelled"], false), "cancelled");
        assert_eq!(submission_status(&["done"], true), "deleted");
    }
}
