//! Tuning on demand: ask the service to tune problems (token), follow the request (JSON
//! or server-sent events), and read a problem's tune with its search trace.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, get, post, web};

use super::catalog::{DeviceQuery, ProblemPath, resolve_device};
use crate::api::{ApiError, State};
use crate::auth::Caller;
use crate::work::tune::{self, Asker, NewTuningRequest, TuneView, TuningRequestView};
use crate::problem::DeviceClass;

fn id_of(raw: &str) -> Result<i32, ApiError> {
    raw.parse::<i32>().ok().filter(|v| *v > 0).ok_or_else(|| ApiError::InvalidPath(format!("`{raw}` is not a tuning request id (a positive integer)")))
}

/// The device class a request or lookup is about: the one named (resolved as the kernel
/// routes resolve it), or the service's tuning class.
pub(crate) async fn tuning_class(state: &State, device: &Option<String>) -> Result<DeviceClass, ApiError> {
    Ok(match resolve_device(state, device).await? {
        Some(c) => c,
        None => state.settings.tune.device_class.clone(),
    })
}

#[utoipa::path(
    post, path = "/v1/tuning-requests", operation_id = "create_tuning_request", tag = "tuning",
    request_body = NewTuningRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created, with every problem's state: `served` (link to the kernel), `baseline_faster` (the measured baseline to use), `queued`/`tuning`/`verifying` (job id and queue position), `failed` or `refused` (with the reason). A problem already asked for by anyone shares that one tune and job", body = TuningRequestView,
            links(
                ("GetTuningRequest" = (operation_id = "get_tuning_request", parameters(("id" = "$response.body#/id")))),
                ("TuningRequestEvents" = (operation_id = "tuning_request_events", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 200, description = "Recorded, but nothing new was queued: every problem was answered, refused or already being tuned", body = TuningRequestView),
        (status = 400, description = "Malformed body (`invalid_body`), or an unknown device class (`unknown_device`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked token", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "`priority` or `budget_ms` set by someone not an admin", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "A problem outside the limits or listed twice, too many problems (`invalid_problem`, naming the item), or an unknown workload (`unknown_workload`): nothing is queued", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Over the submitter's quota of open tunes, or the token's rate limit: nothing is queued", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[post("/v1/tuning-requests")]
pub async fn create(state: State, caller: Caller, body: web::Bytes) -> Result<HttpResponse, ApiError> {
    let req: NewTuningRequest = crate::api::error::from_json_body(&body, "a tuning request")?;
    let device = tuning_class(&state, &req.device).await?;
    let created = tune::create(&state.db, Asker::Caller(&caller), &req, &device, &state.settings.tune).await?;
    state.metrics.submissions.with_label_values(&[if created.queued > 0 { "tuning_queued" } else { "tuning_answered" }]).inc();
    let v = created.view;
    let mut res = if created.queued > 0 { HttpResponse::Created() } else { HttpResponse::Ok() };
    Ok(res.insert_header((header::LOCATION, v.links.self_.clone())).insert_header((header::CACHE_CONTROL, "no-store")).json(v))
}

#[utoipa::path(
    get, path = "/v1/tuning-requests/{id}", operation_id = "get_tuning_request", tag = "tuning",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Tuning request id")),
    responses(
        (status = 200, description = "The request with every problem's state now", body = TuningRequestView),
        (status = 400, description = "The id is not a request id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such request", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/tuning-requests/{id}")]
pub async fn get(state: State, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    let v = tune::view(&state.db, id).await?.ok_or_else(|| ApiError::NotFound(format!("no tuning request {id}")))?;
    Ok(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(v))
}

#[utoipa::path(
    get, path = "/v1/tuning-requests/{id}/events", operation_id = "tuning_request_events", tag = "tuning",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Tuning request id")),
    responses(
        (status = 200, description = "`text/event-stream`: an event `snapshot` (the TuningRequestView as JSON) at once and on every change of a problem's state or stage; `done` with the final view when every problem is settled", content_type = "text/event-stream", body = crate::api::events::SseEvent),
        (status = 400, description = "The id is not a request id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such request", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Too many event streams open from this client (`quota_exceeded`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/tuning-requests/{id}/events")]
pub async fn events(req: HttpRequest, state: State, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    crate::api::events::open(&req, &state.into_inner(), crate::api::events::Watched::TuningRequest(id)).await
}

#[utoipa::path(
    get, path = "/v1/tunes/{arch}/{acc}/{layout}/{shape}", tag = "tuning",
    params(
        ("arch" = String, Path, pattern = "^sm_(80|86|89|90|90a)$", description = "PTX target family"), ("acc" = String, Path, pattern = "^f(16|32)$", description = "f16 or f32"),
        ("layout" = String, Path, pattern = "^(nn|tn)$", description = "nn or tn"), ("shape" = String, Path, pattern = "^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])$", description = "MxNxK"), DeviceQuery,
    ),
    responses(
        (status = 200, description = "The problem's tune on the device class (the service's tuning class when left out): state, queue position, result and the search's trace (codes tried, their times, the codes verified)", body = TuneView),
        (status = 400, description = "Malformed problem, or an unknown device class", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "Never asked for: POST /v1/tuning-requests asks for it", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/tunes/{arch}/{acc}/{layout}/{shape}")]
pub async fn get_tune(state: State, path: ProblemPath, q: web::Query<DeviceQuery>) -> Result<HttpResponse, ApiError> {
    let class = tuning_class(&state, &q.device).await?;
    let p = path.0;
    let v = tune::tune_view(&state.db, &p, &class)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("{p} was never asked to be tuned on {class}; POST /v1/tuning-requests with {{\"problems\": [\"{}\"]}} asks for it", p.path())))?;
    Ok(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(v))
}
