//! Service state: health, metrics, and who a token belongs to.

use actix_web::{HttpResponse, get};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::{ApiError, State};
use crate::auth::Caller;
use crate::work::WorkerView;
use crate::work::submit;

use crate::api::error::RETRY_AFTER_SECS;

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthView {
    /// `ok` when ready (see `/v1/health/ready`), else `degraded`.
    pub status: String,
    /// Whether this replica can serve every route: the readiness verdict.
    pub ready: bool,
    pub version: String,
    pub database: DatabaseHealth,
    pub schema: SchemaHealth,
    pub catalog: CatalogHealth,
    /// GPU workers seen in the last ten minutes (any host sharing this database).
    pub workers_seen: u32,
    pub workers: Vec<WorkerView>,
    /// The GPU workers this process runs (`kaas serve --workers`), or why there are none.
    pub local_workers: String,
    pub queue: QueueHealth,
    pub uptime_secs: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueHealth {
    pub queued: u64,
    pub running: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DatabaseHealth {
    /// `sqlite` or `postgres`.
    pub backend: String,
    pub reachable: bool,
    pub latency_ms: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SchemaHealth {
    /// Every migration this build knows is applied.
    pub current: bool,
    /// Migrations this build expects that the database lacks (all when it has no schema).
    pub missing: Vec<String>,
    pub detail: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogHealth {
    /// The start-up import of the shipped catalog committed (it is all or nothing).
    pub complete: bool,
    pub detail: String,
    pub imported_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The bundles it imported, relative to the catalog directory.
    pub bundles: Vec<String>,
}

/// Readiness: whether this replica can serve every route now.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessView {
    /// `database.reachable && schema.current && catalog.complete`.
    pub ready: bool,
    pub database: DatabaseHealth,
    pub schema: SchemaHealth,
    pub catalog: CatalogHealth,
}

/// Liveness: the process answers; it says nothing about the database.
#[derive(Debug, Serialize, ToSchema)]
pub struct LivenessView {
    /// Always `alive`.
    pub status: String,
    pub version: String,
    pub uptime_secs: u64,
}

/// Checks the database, its schema and the shipped catalog's completion row.
/// While the breaker is open (`crate::api::breaker`) it says so at once, without a ping.
pub async fn readiness(state: &State) -> ReadinessView {
    let t = std::time::Instant::now();
    let ping = match state.breaker.outage() {
        Some((down_for, _)) => Err(format!(
            "it has been unreachable for {} s; a probe tries it every {} s",
            down_for.as_secs(),
            crate::api::breaker::PROBE_EVERY.as_secs()
        )),
        None => state.db.ping().await.map_err(|e| {
            if crate::db::is_unreachable(&e) {
                state.breaker.trip(&state.db, &e.to_string());
            }
            e.to_string()
        }),
    };
    let database = DatabaseHealth { backend: crate::db::backend_name(&state.db).into(), reachable: ping.is_ok(), latency_ms: t.elapsed().as_secs_f64() * 1e3 };
    if let Err(e) = ping {
        let why = format!("not checked: the database does not answer ({e})");
        return ReadinessView {
            ready: false,
            database,
            schema: SchemaHealth { current: false, missing: vec![], detail: why.clone() },
            catalog: CatalogHealth { complete: false, detail: why, imported_at: None, bundles: vec![] },
        };
    }
    let schema = match crate::db::missing_migrations(&state.db).await {
        Ok(missing) if missing.is_empty() => SchemaHealth { current: true, missing, detail: "every migration is applied".into() },
        Ok(missing) => {
            SchemaHealth { current: false, detail: format!("{} migration(s) not applied; a starting `kaas serve` applies them", missing.len()), missing }
        }
        Err(e) => SchemaHealth { current: false, missing: vec![], detail: format!("cannot read the applied migrations: {e}") },
    };
    let catalog = match crate::catalog::seed::marker(&state.db).await {
        Ok(Some(r)) => CatalogHealth {
            complete: true,
            detail: format!("imported from {} ({} bundle(s))", r.source, r.bundles.len()),
            imported_at: Some(r.completed_at),
            bundles: r.bundles,
        },
        Ok(None) => CatalogHealth {
            complete: false,
            detail: "the shipped catalog's import has not completed; a starting `kaas serve` imports it (all or nothing)".into(),
            imported_at: None,
            bundles: vec![],
        },
        Err(e) => CatalogHealth { complete: false, detail: format!("cannot read the catalog's completion row: {e}"), imported_at: None, bundles: vec![] },
    };
    ReadinessView { ready: database.reachable && schema.current && catalog.complete, database, schema, catalog }
}

/// 200 with `body`, or 503 with `Retry-After` when not ready.
fn verdict(is_ready: bool, body: &impl Serialize) -> HttpResponse {
    if is_ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().insert_header((actix_web::http::header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())).json(body)
    }
}

#[utoipa::path(
    get, path = "/v1/health", tag = "system",
    responses(
        (status = 200, description = "Ready: the database answers, its schema is current, the shipped catalog is complete", body = HealthView),
        (status = 503, description = "Not ready (see `database`, `schema`, `catalog`); `Retry-After` says when to ask again", body = HealthView),
    )
)]
#[get("/v1/health")]
pub async fn health(state: State) -> HttpResponse {
    let r = readiness(&state).await;
    let (workers, (queued, running)) = if r.database.reachable {
        (submit::workers(&state.db).await.unwrap_or_default(), submit::queue_depth(&state.db).await.unwrap_or_default())
    } else {
        (vec![], (0, 0))
    };
    let view = HealthView {
        status: if r.ready { "ok" } else { "degraded" }.into(),
        ready: r.ready,
        version: env!("CARGO_PKG_VERSION").into(),
        database: r.database,
        schema: r.schema,
        catalog: r.catalog,
        workers_seen: workers.iter().filter(|w| w.state != "stopped").count() as u32,
        workers,
        local_workers: state.local_workers(),
        queue: QueueHealth { queued, running },
        uptime_secs: state.started.elapsed().as_secs(),
    };
    verdict(view.ready, &view)
}

#[utoipa::path(
    get, path = "/v1/health/ready", tag = "system",
    responses(
        (status = 200, description = "Ready to serve every route", body = ReadinessView),
        (status = 503, description = "Not ready: the database does not answer, its schema is not current, or the shipped catalog is not complete; `Retry-After` says when to ask again", body = ReadinessView),
    )
)]
#[get("/v1/health/ready")]
pub async fn ready(state: State) -> HttpResponse {
    let r = readiness(&state).await;
    verdict(r.ready, &r)
}

#[utoipa::path(
    get, path = "/v1/health/live", tag = "system",
    responses((status = 200, description = "The process answers (the database is not consulted)", body = LivenessView))
)]
#[get("/v1/health/live")]
pub async fn live(state: State) -> HttpResponse {
    HttpResponse::Ok().json(LivenessView { status: "alive".into(), version: env!("CARGO_PKG_VERSION").into(), uptime_secs: state.started.elapsed().as_secs() })
}

#[utoipa::path(
    get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"))
)]
#[get("/metrics")]
pub async fn metrics(state: State) -> HttpResponse {
    // The queue gauges keep their last values while the database is unreachable.
    if state.breaker.outage().is_none() {
        state.metrics.refresh_work(&state.db).await;
    }
    let text = state.metrics.render(&state.db, state.settings.db_max_connections);
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(text)
}

#[utoipa::path(
    get, path = "/v1/whoami", tag = "system", security(("bearer" = [])),
    responses(
        (status = 200, description = "The token's submitter and role", body = Caller),
        (status = 401, description = "Missing, unknown or revoked token", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/whoami")]
pub async fn whoami(caller: Caller) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(caller))
}
