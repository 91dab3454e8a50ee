//! Service state: health, metrics, and who a token belongs to.

use actix_web::{HttpResponse, get};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::{ApiError, State};
use crate::auth::Caller;
use crate::work::WorkerView;
use crate::work::submit;

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthView {
    /// `ok`, or `degraded` when the database does not answer.
    pub status: String,
    pub version: String,
    pub database: DatabaseHealth,
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

#[utoipa::path(
    get, path = "/v1/health", tag = "system",
    responses(
        (status = 200, description = "Serving", body = HealthView),
        (status = 503, description = "The database does not answer", body = HealthView),
    )
)]
#[get("/v1/health")]
pub async fn health(state: State) -> HttpResponse {
    let t = std::time::Instant::now();
    let reachable = state.db.ping().await.is_ok();
    let latency_ms = t.elapsed().as_secs_f64() * 1e3;
    let (workers, (queued, running)) = if reachable {
        (submit::workers(&state.db).await.unwrap_or_default(), submit::queue_depth(&state.db).await.unwrap_or_default())
    } else {
        (vec![], (0, 0))
    };
    let view = HealthView {
        status: if reachable { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        database: DatabaseHealth { backend: crate::db::backend_name(&state.db).into(), reachable, latency_ms },
        workers_seen: workers.iter().filter(|w| w.state != "stopped").count() as u32,
        workers,
        local_workers: state.local_workers(),
        queue: QueueHealth { queued, running },
        uptime_secs: state.started.elapsed().as_secs(),
    };
    if reachable { HttpResponse::Ok().json(view) } else { HttpResponse::ServiceUnavailable().json(view) }
}

#[utoipa::path(
    get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"))
)]
#[get("/metrics")]
pub async fn metrics(state: State) -> HttpResponse {
    state.metrics.refresh_work(&state.db).await;
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
