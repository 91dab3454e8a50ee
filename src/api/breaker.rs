//! The database breaker (issue 52): once a request finds the database unreachable, every
//! route that needs it answers 503 `unavailable` with `Retry-After` at once, instead of
//! each waiting out the pool's acquire timeout; a background task pings the database
//! every [`PROBE_EVERY`] and closes the breaker when it answers.
//!
//! Why: during an outage each request held a worker and a client for the whole acquire
//! timeout (10 s then, 1 s now), so held requests piled up and probes with shorter
//! timeouts saw nothing. Only unreachability trips it (`crate::db::is_unreachable`): a
//! database that answers without the kaas schema is answered per request, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;

/// How often an open breaker pings the database.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long one probe may take before it counts as a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Marks a response that found the database unreachable; the breaker trips on it.
#[derive(Debug, Clone)]
pub struct DbUnreachable(pub String);

/// Whether the database was found unreachable, since when and why.
#[derive(Default)]
pub struct Breaker {
    open: AtomicBool,
    outage: Mutex<Option<(Instant, String)>>,
}

impl Breaker {
    pub fn new() -> Arc<Breaker> {
        Arc::new(Breaker::default())
    }

    /// While open: how long it has been open and why.
    pub fn outage(&self) -> Option<(Duration, String)> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let guard = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|(since, why)| (since.elapsed(), why.clone()))
    }

    /// Opens the breaker (once; later calls while it is open change nothing) and starts
    /// probing `db` in the background until it answers.
    pub fn trip(self: &Arc<Self>, db: &DatabaseConnection, why: &str) {
        if self.open.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.outage.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), why.to_string()));
        tracing::error!(error = %why, "the database is unreachable: answering 503 at once until a probe reaches it");
        tokio::spawn(probe(Arc::downgrade(self), db.clone()));
    }

    fn close(&self) {
        let was = self.outage.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.open.store(false, Ordering::Release);
        if let Some((since, _)) = was {
            tracing::warn!(after_secs = since.elapsed().as_secs_f64(), "the database answers again");
        }
    }
}

/// Pings until the database answers, then closes the breaker; ends early when the breaker
/// (its app) is gone.
async fn probe(breaker: Weak<Breaker>, db: DatabaseConnection) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(b) = breaker.upgrade() else { return };
        match tokio::time::timeout(PROBE_TIMEOUT, db.ping()).await {
            Ok(Ok(())) => return b.close(),
            Ok(Err(e)) => tracing::debug!(error = %e, "database probe failed"),
            Err(_) => tracing::debug!("database probe timed out"),
        }
    }
}

/// Whether a request to `path` needs the database: everything but liveness, the OpenAPI
/// document, its viewer and the UI's files (health and readiness ask the breaker
/// themselves, to say why they are not ready).
pub fn needs_database(path: &str) -> bool {
    let free = ["/v1/health", "/metrics", "/openapi.json"];
    !(free.iter().any(|p| path == *p || path.starts_with(&format!("{p}/"))) || path.starts_with("/docs") || path == "/" || path.starts_with("/static/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_routes_that_read_the_database_are_held_back() {
        for p in ["/v1/problems", "/v1/kernels/tn/1/2/3", "/v1/submissions", "/v1/artifacts/ab", "/v1/whoami", "/v1/healthz"] {
            assert!(needs_database(p), "{p}");
        }
        for p in ["/v1/health", "/v1/health/live", "/v1/health/ready", "/metrics", "/openapi.json", "/docs/", "/", "/static/app.js"] {
            assert!(!needs_database(p), "{p}");
        }
    }

    #[tokio::test]
    async fn a_tripped_breaker_stays_open_until_a_probe_reaches_the_database() {
        let db = crate::db::open(&crate::db::DbConfig::new("sqlite::memory:")).await.unwrap();
        let b = Breaker::new();
        assert!(b.outage().is_none());
        b.trip(&db, "connection refused");
        b.trip(&db, "a second trip changes nothing");
        let (_, why) = b.outage().expect("open");
        assert_eq!(why, "connection refused");
        // The in-memory database answers: the first probe closes it.
        tokio::time::sleep(PROBE_EVERY + Duration::from_millis(500)).await;
        assert!(b.outage().is_none(), "the probe did not close the breaker");

        db.clone().close().await.unwrap();
        b.trip(&db, "pool closed");
        tokio::time::sleep(PROBE_EVERY * 2 + Duration::from_millis(200)).await;
        assert!(b.outage().is_some(), "a database that stays unreachable keeps it open");
    }
}
