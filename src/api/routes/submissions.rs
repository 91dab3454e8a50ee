//! Submissions: submit a kernel (token), follow it (JSON or server-sent events), cancel
//! or delete it (owner or admin), list them.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::{ApiError, State};
use crate::auth::Caller;
use crate::work::submit::{self, Created};
use crate::work::{NewSubmission, SubmissionSummary, SubmissionView};

fn id_of(raw: &str) -> Result<i32, ApiError> {
    raw.parse::<i32>().ok().filter(|v| *v > 0).ok_or_else(|| ApiError::InvalidPath(format!("`{raw}` is not a submission id (a positive integer)")))
}

#[utoipa::path(
    post, path = "/v1/submissions", operation_id = "create_submission", tag = "submissions",
    request_body = NewSubmission,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Accepted: one job per (problem, device class) queued", body = SubmissionView,
            links(
                ("GetSubmission" = (operation_id = "get_submission", parameters(("id" = "$response.body#/id")))),
                ("SubmissionEvents" = (operation_id = "submission_events", parameters(("id" = "$response.body#/id")))),
                ("CancelSubmission" = (operation_id = "cancel_submission", parameters(("id" = "$response.body#/id")))),
                ("DeleteSubmission" = (operation_id = "delete_submission", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 200, description = "The same submission was made before: here it is", body = SubmissionView),
        (status = 400, description = "Malformed body", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked token", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "`artifact_sha256` names no artifact", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "PTX over the artifact quota, or body over the limit", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "Not PTX, a bad manifest, or PTX that does not match its manifests (the first fault is named); or `compile_failed`: CUDA source that did not compile, with a `reason` (`compile_error` with NVRTC's `log`, `no_such_kernel`, `include_refused`, `source_too_large`, `bad_option`, `time_limit`/`cpu_limit`/`memory_limit` with the `limit`, …)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "CUDA source sent to a service without NVRTC, or the database is unavailable", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Rate limit or queued-jobs quota", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[post("/v1/submissions")]
pub async fn create(state: State, caller: Caller, body: web::Bytes) -> Result<HttpResponse, ApiError> {
    // Said plainly before JSON parsing would: PTX and CUDA source are UTF-8 text.
    if let Err(e) = std::str::from_utf8(&body) {
        return Err(ApiError::InvalidBody(format!("the body is not UTF-8 (invalid byte at offset {}); PTX and CUDA source must be UTF-8 text", e.valid_up_to())));
    }
    let req: NewSubmission = crate::api::error::from_json_body(&body, "a submission")?;
    let quotas = state.settings.quotas.clone();
    Ok(match submit::create(&state.db, &caller, req, &quotas).await? {
        Created::New(mut v) => {
            state.sign_submission(&mut v).await?;
            state.metrics.submissions.with_label_values(&["accepted"]).inc();
            HttpResponse::Accepted().insert_header((header::LOCATION, v.links.self_.clone())).json(v)
        }
        Created::Existing(mut v) => {
            state.sign_submission(&mut v).await?;
            state.metrics.submissions.with_label_values(&["duplicate"]).inc();
            HttpResponse::Ok().insert_header((header::LOCATION, v.links.self_.clone())).json(v)
        }
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this submitter's.
    pub submitter: Option<String>,
    /// At most this many, newest first [default 50, at most 500].
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u64>,
}

#[utoipa::path(
    get, path = "/v1/submissions", operation_id = "list_submissions", tag = "submissions", params(ListQuery),
    responses(
        (status = 200, description = "Submissions, newest first (deleted ones left out)", body = [SubmissionSummary]),
        (status = 400, description = "A query parameter out of range (`invalid_query`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/submissions")]
pub async fn list(state: State, q: web::Query<ListQuery>) -> Result<HttpResponse, ApiError> {
    // Refused, not clamped: a client asking for 2^63 rows should learn the bound (the
    // OpenAPI document states it) instead of silently getting 500.
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!("limit = {limit} is outside 1..=500")));
    }
    Ok(HttpResponse::Ok().json(submit::list(&state.db, q.submitter.as_deref(), limit).await?))
}

#[utoipa::path(
    get, path = "/v1/submissions/{id}", operation_id = "get_submission", tag = "submissions",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Submission id")),
    responses(
        (status = 200, description = "The submission with every job and run; each run carries its record signed by the service", body = SubmissionView),
        (status = 400, description = "The id is not a submission id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such submission", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/submissions/{id}")]
pub async fn get(state: State, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    let mut v = submit::view(&state.db, id).await?.ok_or_else(|| ApiError::NotFound(format!("no submission {id}")))?;
    state.sign_submission(&mut v).await?;
    Ok(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(v))
}

#[utoipa::path(
    get, path = "/v1/submissions/{id}/events", operation_id = "submission_events", tag = "submissions",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Submission id")),
    responses(
        (status = 200, description = "`text/event-stream`: an event `snapshot` (the SubmissionView as JSON) at once and on every change; `done` with the final view when no job will change any more, then the stream ends", content_type = "text/event-stream", body = crate::api::events::SseEvent),
        (status = 400, description = "The id is not a submission id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such submission", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Too many event streams open from this client (`quota_exceeded`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/submissions/{id}/events")]
pub async fn events(req: HttpRequest, state: State, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    crate::api::events::open(&req, &state.into_inner(), crate::api::events::Watched::Submission(id)).await
}

#[utoipa::path(
    post, path = "/v1/submissions/{id}/cancel", operation_id = "cancel_submission", tag = "submissions",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Submission id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Unfinished jobs cancelled; running sandboxes are killed at the next heartbeat", body = SubmissionView),
        (status = 400, description = "The id is not a submission id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "No token, or an invalid or revoked one", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "Not the owner or an admin", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Over the token's rate limit; `Retry-After` says when to retry", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such submission", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[post("/v1/submissions/{id}/cancel")]
pub async fn cancel(state: State, caller: Caller, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    let mut v = submit::cancel(&state.db, &caller, id).await?;
    state.sign_submission(&mut v).await?;
    Ok(HttpResponse::Ok().json(v))
}

#[utoipa::path(
    delete, path = "/v1/submissions/{id}", operation_id = "delete_submission", tag = "submissions",
    params(("id" = i32, Path, minimum = 1, maximum = 2147483647, description = "Submission id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted: jobs cancelled, hidden from lists and leaderboards (kept as history)"),
        (status = 400, description = "The id is not a submission id (`invalid_path`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "No token, or an invalid or revoked one", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Over the token's rate limit; `Retry-After` says when to retry", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "Not the owner or an admin", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such submission", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "One of its runs is the catalog entry for a problem", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[delete("/v1/submissions/{id}")]
pub async fn remove(state: State, caller: Caller, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    submit::delete(&state.db, &caller, id).await?;
    state.caches.catalog_changed();
    Ok(HttpResponse::NoContent().finish())
}
