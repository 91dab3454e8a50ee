//! Prometheus metrics: HTTP requests and latency by route and status, cache hits and
//! misses, database pool state. Exposed as text at `GET /metrics`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};
use sea_orm::DatabaseConnection;

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    pub cache_requests: IntCounterVec,
    pub db_pool: IntGaugeVec,
    pub submissions: IntCounterVec,
    pub jobs: IntGaugeVec,
    pub runs: IntGaugeVec,
    pub workers: IntGaugeVec,
    pub event_reads: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("kaas".into()), None)?;
        let http_requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests answered, by method, route pattern and status"),
            &["method", "route", "status"],
        )?;
        let http_duration = HistogramVec::new(
            HistogramOpts::new("http_request_duration_seconds", "Time to answer an HTTP request, by method and route")
                .buckets(vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
            &["method", "route"],
        )?;
        let cache_requests = IntCounterVec::new(
            Opts::new("cache_requests_total", "Cache look-ups by cache and result (hit or miss)"),
            &["cache", "result"],
        )?;
        let db_pool = IntGaugeVec::new(
            Opts::new("db_pool_connections", "Database pool connections by state (idle, in_use, max)"),
            &["state"],
        )?;
        registry.register(Box::new(http_requests.clone()))?;
        registry.register(Box::new(http_duration.clone()))?;
        registry.register(Box::new(cache_requests.clone()))?;
        let submissions = IntCounterVec::new(
            Opts::new("submissions_total", "Submissions answered by this process, by result (accepted, duplicate)"),
            &["result"],
        )?;
        let jobs = IntGaugeVec::new(Opts::new("jobs", "Jobs in the database by state (read at scrape time)"), &["state"])?;
        let runs = IntGaugeVec::new(Opts::new("runs", "Stored runs by verdict (read at scrape time)"), &["verdict"])?;
        let workers = IntGaugeVec::new(
            Opts::new("workers", "Workers seen in the last ten minutes by device class and state"),
            &["device_class", "state"],
        )?;
        registry.register(Box::new(db_pool.clone()))?;
        registry.register(Box::new(submissions.clone()))?;
        registry.register(Box::new(jobs.clone()))?;
        registry.register(Box::new(runs.clone()))?;
        registry.register(Box::new(workers.clone()))?;
        let event_reads = IntCounterVec::new(
            Opts::new("event_feed_reads_total", "Database reads of the shared submission event feeds, by kind (marks: the change check; view: a whole submission)"),
            &["kind"],
        )?;
        registry.register(Box::new(event_reads.clone()))?;
        Ok(Metrics { registry, http_requests, http_duration, cache_requests, db_pool, submissions, jobs, runs, workers, event_reads })
    }

    pub fn cache(&self, cache: &str, hit: bool) {
        self.cache_requests.with_label_values(&[cache, if hit { "hit" } else { "miss" }]).inc();
    }

    /// Reads the queue, run outcomes and workers from the database (any process may have
    /// written them), for the gauges.
    pub async fn refresh_work(&self, db: &DatabaseConnection) {
        use sea_orm::sea_query::{Expr, ExprTrait};
        use sea_orm::{EntityTrait, FromQueryResult, QuerySelect};
        use crate::db::entities::{job, run};
        #[derive(FromQueryResult)]
        struct Count {
            key: String,
            n: i64,
        }
        let by = |rows: Result<Vec<Count>, sea_orm::DbErr>, gauge: &IntGaugeVec, keys: &[&str]| {
            let Ok(rows) = rows else { return };
            for k in keys {
                gauge.with_label_values(&[k]).set(0);
            }
            for r in rows {
                gauge.with_label_values(&[r.key.as_str()]).set(r.n);
            }
        };
        let jobs = job::Entity::find()
            .select_only()
            .column_as(job::Column::State, "key")
            .column_as(Expr::col(job::Column::Id).count(), "n")
            .group_by(job::Column::State)
            .into_model::<Count>()
            .all(db)
            .await;
        by(jobs, &self.jobs, &["queued", "running", "done", "failed", "cancelled"]);
        let runs = run::Entity::find()
            .select_only()
            .column_as(run::Column::Verdict, "key")
            .column_as(Expr::col(run::Column::Id).count(), "n")
            .group_by(run::Column::Verdict)
            .into_model::<Count>()
            .all(db)
            .await;
        by(runs, &self.runs, &["pass"]);
        if let Ok(ws) = crate::work::submit::workers(db).await {
            self.workers.reset();
            for w in ws {
                self.workers.with_label_values(&[w.device_class.as_deref().unwrap_or("none"), w.state.as_str()]).inc();
            }
        }
    }

    /// Reads the pool state now (at scrape time) and renders every metric.
    pub fn render(&self, db: &DatabaseConnection, max_connections: u32) -> String {
        let (size, idle) = pool_state(db);
        self.db_pool.with_label_values(&["idle"]).set(idle as i64);
        self.db_pool.with_label_values(&["in_use"]).set(size.saturating_sub(idle) as i64);
        self.db_pool.with_label_values(&["max"]).set(max_connections as i64);
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

fn pool_state(db: &DatabaseConnection) -> (u32, u32) {
    // The pool getters panic on the wrong backend, so ask which one this is first.
    match db.get_database_backend() {
        sea_orm::DbBackend::Sqlite => {
            let p = db.get_sqlite_connection_pool();
            (p.size(), p.num_idle() as u32)
        }
        sea_orm::DbBackend::Postgres => {
            let p = db.get_postgres_connection_pool();
            (p.size(), p.num_idle() as u32)
        }
        _ => (0, 0),
    }
}
