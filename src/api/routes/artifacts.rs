//! PTX artifacts: download by sha256 (immutable, strong ETag, 304 on a match) and upload
//! (a submitter's token; static checks answer at once).

use std::sync::Arc;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, get, post, web};
use chrono::Utc;

use crate::api::cache::ArtifactBody;
use crate::api::{ApiError, State, accepts_gzip};
use crate::auth::Caller;
use crate::catalog::{self, ArtifactView, bundle};

/// Whether an `If-None-Match` header matches either representation's ETag (weak
/// comparison, as RFC 9110 asks for If-None-Match): both hold the same PTX.
fn none_match(req: &HttpRequest, a: &ArtifactBody) -> bool {
    let Some(v) = req.headers().get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) else { return false };
    v.split(',').map(str::trim).map(|t| t.trim_start_matches("W/")).any(|t| t == "*" || t == a.etag || t == a.gzip_etag)
}

pub(crate) async fn load(state: &State, sha: &str) -> Result<Option<Arc<ArtifactBody>>, ApiError> {
    if let Some(hit) = state.caches.artifacts.get(sha).await {
        state.metrics.cache("artifacts", true);
        return Ok(Some(hit));
    }
    state.metrics.cache("artifacts", false);
    let Some(row) = catalog::artifact(&state.db, sha).await? else { return Ok(None) };
    let body = Arc::new(ArtifactBody::new(row.sha256, row.ptx));
    state.caches.artifacts.insert(sha.to_string(), body.clone()).await;
    Ok(Some(body))
}

/// Sends an artifact's PTX, or 304 when the client already has it. The header values come
/// prebuilt from the cache (`ArtifactBody`) or are static, so building the response
/// allocates nothing per request beyond actix's own.
pub async fn serve_artifact(req: &HttpRequest, state: &State, sha: &str, cache_control: &'static str) -> Result<HttpResponse, ApiError> {
    let Some(a) = load(state, sha).await? else {
        return Err(ApiError::NotFound(format!("no artifact with sha256 {sha}")));
    };
    let gzip = accepts_gzip(req);
    let etag = if gzip { a.gzip_etag_header.clone() } else { a.etag_header.clone() };
    let cache_control = HeaderValue::from_static(cache_control);
    let vary = HeaderValue::from_static("Accept-Encoding");
    if none_match(req, &a) {
        let mut res = HttpResponse::NotModified().finish();
        let h = res.headers_mut();
        h.insert(header::ETAG, etag);
        h.insert(header::CACHE_CONTROL, cache_control);
        h.insert(header::VARY, vary);
        return Ok(res);
    }
    let body = if gzip { a.gzip.clone() } else { a.body.clone() };
    // The cached `Bytes` itself (a reference count, no copy here); actix-http copies it
    // into the connection's write buffer once, in one piece (measured: handing it over in
    // 32 or 64 KiB slices costs more CPU per request, from the extra `send`s).
    let mut res = HttpResponse::Ok().body(body);
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, cache_control);
    h.insert(header::VARY, vary);
    h.insert(header::CONTENT_LOCATION, a.content_location.clone());
    h.insert(header::CONTENT_DISPOSITION, a.content_disposition.clone());
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    Ok(res)
}

#[utoipa::path(
    get, path = "/v1/artifacts/{sha256}", tag = "artifacts",
    params(("sha256" = String, Path, pattern = "^[0-9a-f]{64}$", description = "64 lowercase hex digits")),
    responses(
        (status = 200, description = "The PTX; `Cache-Control: public, immutable`, strong ETag", body = String, content_type = "text/plain"),
        (status = 304, description = "Not modified"),
        (status = 400, description = "Not a sha256", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "Unknown artifact", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/artifacts/{sha256}")]
pub async fn get_artifact(req: HttpRequest, state: State, sha: web::Path<String>) -> Result<HttpResponse, ApiError> {
    if !crate::catalog::bundle::is_sha256_hex(&sha) {
        return Err(ApiError::InvalidPath(format!("`{sha}` is not a sha256 (64 lowercase hex digits)")));
    }
    serve_artifact(&req, &state, &sha, "public, max-age=31536000, immutable").await
}

/// An upload's body in the document: PTX text, never empty. What else makes it PTX is the
/// parser's to say (422 `invalid_artifact`, naming the fault): no schema states a grammar.
pub struct PtxText;

impl utoipa::PartialSchema for PtxText {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::String).min_length(Some(1)).into()
    }
}

impl utoipa::ToSchema for PtxText {}

#[utoipa::path(
    post, path = "/v1/artifacts", tag = "artifacts",
    request_body(content = PtxText, content_type = "text/plain", description = "PTX text, e.g. a `.ptx` file as nvcc or NVRTC writes it"),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Stored", body = ArtifactView),
        (status = 200, description = "Already stored (content-addressed)", body = ArtifactView),
        (status = 401, description = "Missing, unknown or revoked token", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "Over the per-artifact quota (`artifact_too_large`) or the body size limit", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "Not PTX text", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "Rate limited (see Retry-After), or over the per-submitter storage quota (`quota_exceeded`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[post("/v1/artifacts")]
// Taking a `Caller` is what requires a valid, unrevoked, rate-limited token; any role
// may upload.
pub async fn upload_artifact(state: State, caller: Caller, body: web::Bytes) -> Result<HttpResponse, ApiError> {
    // The same per-artifact quota as a submission's PTX (the body limit is larger: it
    // bounds whole requests, not what may be stored).
    let max = state.settings.quotas.max_artifact_bytes;
    if body.len() > max {
        return Err(ApiError::ArtifactTooLarge(format!("the PTX is {} bytes; the limit per artifact is {max} (--max-artifact-bytes)", body.len())));
    }
    let rec = bundle::describe_ptx(&body).map_err(ApiError::InvalidArtifact)?;
    let text = std::str::from_utf8(&body).map_err(|e| ApiError::InvalidArtifact(e.to_string()))?;
    let existed = catalog::artifact(&state.db, &rec.sha256).await?.is_some();
    if !existed {
        // The submitter's lock, as a submission takes it: the storage quota is counted
        // one upload at a time.
        let txn = crate::db::begin_write(&state.db).await?;
        crate::db::lock_in_transaction(&txn, &format!("kaas.submit {}", caller.submitter_id)).await?;
        crate::work::submit::check_storage(&txn, &caller, &rec.sha256, body.len() as u64, &state.settings.quotas).await?;
        bundle::store_artifact_for(&txn, text, Some(caller.submitter_id), Utc::now()).await?;
        txn.commit().await?;
    }
    let view = ArtifactView {
        url: format!("/v1/artifacts/{}", rec.sha256),
        sha256: rec.sha256,
        size_bytes: rec.size_bytes,
        ptx_version: rec.ptx_version,
        target: rec.target,
    };
    Ok(if existed { HttpResponse::Ok().json(view) } else { HttpResponse::Created().json(view) })
}
