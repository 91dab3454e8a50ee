//! Submissions: submit a kernel (token), follow it (JSON or server-sent events), cancel
//! or delete it (owner or admin), list them.

use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, delete, get, post, web};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::{ApiError, State};
use crate::auth::Caller;
use crate::work::submit::{self, Created};
use crate::work::{NewSubmission, SubmissionSummary, SubmissionView};

/// How often the event stream looks for changes, and how long it lives (a client
/// reconnects after that).
const EVENTS_POLL: Duration = Duration::from_millis(400);
const EVENTS_MAX: Duration = Duration::from_secs(1800);
const EVENTS_KEEPALIVE: Duration = Duration::from_secs(15);

fn id_of(raw: &str) -> Result<i32, ApiError> {
    raw.parse::<i32>().ok().filter(|v| *v > 0).ok_or_else(|| ApiError::InvalidPath(format!("`{raw}` is not a submission id (a positive integer)")))
}

#[utoipa::path(
    post, path = "/v1/submissions", tag = "submissions",
    request_body = NewSubmission,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Accepted: one job per (problem, device class) queued", body = SubmissionView),
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
    let req: NewSubmission = serde_json::from_slice(&body).map_err(|e| ApiError::InvalidBody(format!("not a submission: {e}")))?;
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
    pub limit: Option<u64>,
}

#[utoipa::path(
    get, path = "/v1/submissions", tag = "submissions", params(ListQuery),
    responses((status = 200, description = "Submissions, newest first (deleted ones left out)", body = [SubmissionSummary]))
)]
#[get("/v1/submissions")]
pub async fn list(state: State, q: web::Query<ListQuery>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(submit::list(&state.db, q.submitter.as_deref(), q.limit.unwrap_or(50)).await?))
}

#[utoipa::path(
    get, path = "/v1/submissions/{id}", tag = "submissions",
    params(("id" = i32, Path, description = "Submission id")),
    responses(
        (status = 200, description = "The submission with every job and run; each run carries its record signed by the service", body = SubmissionView),
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

fn event(name: &str, data: &str, id: u64) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: {name}\ndata: {data}\n\n"))
}

#[utoipa::path(
    get, path = "/v1/submissions/{id}/events", tag = "submissions",
    params(("id" = i32, Path, description = "Submission id")),
    responses(
        (status = 200, description = "`text/event-stream`: an event `snapshot` (the SubmissionView as JSON) at once and on every change; `done` with the final view when no job will change any more, then the stream ends", content_type = "text/event-stream", body = String),
        (status = 404, description = "No such submission", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/submissions/{id}/events")]
pub async fn events(state: State, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = id_of(&id)?;
    let mut first = submit::view(&state.db, id).await?.ok_or_else(|| ApiError::NotFound(format!("no submission {id}")))?;
    state.sign_submission(&mut first).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let db = state.db.clone();
    let st = state.clone();
    // One task per stream polls the database (so it sees every replica's and worker's
    // writes) and sends a snapshot when anything changed.
    actix_web::rt::spawn(async move {
        let started = std::time::Instant::now();
        let mut last_sent = std::time::Instant::now();
        let mut seq = 0u64;
        let mut current = Some(first);
        let mut last_text = String::new();
        while started.elapsed() < EVENTS_MAX {
            if let Some(v) = current.take() {
                let text = serde_json::to_string(&v).unwrap_or_default();
                let done = v.finished();
                if text != last_text {
                    seq += 1;
                    if tx.send(event("snapshot", &text, seq)).await.is_err() {
                        return;
                    }
                    last_sent = std::time::Instant::now();
                    last_text = text;
                }
                if done {
                    seq += 1;
                    let _ = tx.send(event("done", &last_text, seq)).await;
                    return;
                }
            }
            if last_sent.elapsed() >= EVENTS_KEEPALIVE {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
                last_sent = std::time::Instant::now();
            }
            tokio::time::sleep(EVENTS_POLL).await;
            if tx.is_closed() {
                return;
            }
            match submit::view(&db, id).await {
                Ok(Some(mut v)) => {
                    if st.sign_submission(&mut v).await.is_err() {
                        continue;
                    }
                    current = Some(v)
                }
                Ok(None) => return,
                Err(_) => continue,
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, actix_web::Error>(b), rx)) });
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}

#[utoipa::path(
    post, path = "/v1/submissions/{id}/cancel", tag = "submissions",
    params(("id" = i32, Path, description = "Submission id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Unfinished jobs cancelled; running sandboxes are killed at the next heartbeat", body = SubmissionView),
        (status = 403, description = "Not the owner or an admin", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
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
    delete, path = "/v1/submissions/{id}", tag = "submissions",
    params(("id" = i32, Path, description = "Submission id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted: jobs cancelled, hidden from lists and leaderboards (kept as history)"),
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
