//! One error type for the HTTP API. Every variant has a stable snake_case `code`; one
//! table maps codes to statuses; every failure leaves as `application/problem+json`
//! (RFC 9457) with a message that says what to do next.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::catalog::CatalogError;
use crate::catalog::bundle::BundleError;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemDetails {
    /// `urn:kaas:error:<code>`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable machine-readable error code.
    pub code: String,
    /// Extra members, e.g. `use_instead` on `baseline_faster`.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidPath(String),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidBody(String),
    #[error("{0}")]
    InvalidArtifact(String),
    #[error("{0}")]
    InvalidManifest(String),
    #[error("{0}")]
    StaticInvalid(String),
    #[error("{0}")]
    ArtifactTooLarge(String),
    #[error("{0}")]
    QuotaExceeded(String),
    /// A problem of a tuning request outside the service's limits, or a list it cannot
    /// take (too long, a problem twice); the message names the item.
    #[error("{0}")]
    InvalidProblem(String),
    /// A tuning request names a workload that is not a preset.
    #[error("{0}")]
    UnknownWorkload(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{detail}")]
    KernelNotFound { detail: String, extra: serde_json::Map<String, serde_json::Value> },
    #[error("{detail}")]
    BaselineFaster { detail: String, extra: serde_json::Map<String, serde_json::Value> },
    /// `?device=` names no known device class; `extra` lists the known ones.
    #[error("{detail}")]
    UnknownDevice { detail: String, extra: serde_json::Map<String, serde_json::Value> },
    /// `?device=` names a model with several known form factors; `extra` lists them.
    #[error("{detail}")]
    AmbiguousDevice { detail: String, extra: serde_json::Map<String, serde_json::Value> },
    /// Submitted CUDA C++ source gave no PTX; `extra` names the `reason` (and carries
    /// NVRTC's `log`, or the `limit` that was hit).
    #[error("{detail}")]
    CompileFailed { detail: String, extra: serde_json::Map<String, serde_json::Value> },
    #[error("{0}")]
    MissingToken(String),
    #[error("{0}")]
    InvalidToken(String),
    #[error("{0}")]
    RevokedToken(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("rate limit exceeded for this token; retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// A token has as many requests in progress as it may have at once.
    #[error("{0}")]
    TooManyInFlight(String),
    /// The request body stopped arriving (or took too long in all).
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{0}")]
    Unavailable(String),
    /// The database cannot be reached: 503 like `Unavailable`, and the breaker trips on it.
    #[error("{0}")]
    DatabaseUnreachable(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The one table: (stable code, status, title).
    fn describe(&self) -> (&'static str, StatusCode, &'static str) {
        use ApiError::*;
        match self {
            InvalidPath(_) => ("invalid_path", StatusCode::BAD_REQUEST, "Invalid path parameter"),
            InvalidQuery(_) => ("invalid_query", StatusCode::BAD_REQUEST, "Invalid query parameter"),
            InvalidBody(_) => ("invalid_body", StatusCode::BAD_REQUEST, "Invalid request body"),
            InvalidArtifact(_) => ("invalid_artifact", StatusCode::UNPROCESSABLE_ENTITY, "Invalid PTX artifact"),
            InvalidManifest(_) => ("invalid_manifest", StatusCode::UNPROCESSABLE_ENTITY, "Invalid launch manifest"),
            StaticInvalid(_) => ("static_invalid", StatusCode::UNPROCESSABLE_ENTITY, "The PTX does not match its manifests"),
            ArtifactTooLarge(_) => ("artifact_too_large", StatusCode::PAYLOAD_TOO_LARGE, "Artifact over the size quota"),
            QuotaExceeded(_) => ("quota_exceeded", StatusCode::TOO_MANY_REQUESTS, "Quota exceeded"),
            InvalidProblem(_) => ("invalid_problem", StatusCode::UNPROCESSABLE_ENTITY, "A problem the service cannot take"),
            UnknownWorkload(_) => ("unknown_workload", StatusCode::UNPROCESSABLE_ENTITY, "Unknown workload"),
            Conflict(_) => ("conflict", StatusCode::CONFLICT, "Conflict"),
            NotFound(_) => ("not_found", StatusCode::NOT_FOUND, "Not found"),
            KernelNotFound { .. } => ("kernel_not_found", StatusCode::NOT_FOUND, "No kernel for this problem"),
            BaselineFaster { .. } => ("baseline_faster", StatusCode::NOT_FOUND, "A baseline is faster than every kernel"),
            // 400, not 404: a 404 from the kernel routes means "no kernel, use cuBLAS", and a
            // misspelt device must not read as that.
            UnknownDevice { .. } => ("unknown_device", StatusCode::BAD_REQUEST, "Unknown device class"),
            AmbiguousDevice { .. } => ("ambiguous_device", StatusCode::BAD_REQUEST, "Ambiguous device class"),
            CompileFailed { .. } => ("compile_failed", StatusCode::UNPROCESSABLE_ENTITY, "The CUDA source did not compile"),
            MissingToken(_) => ("missing_token", StatusCode::UNAUTHORIZED, "Authentication required"),
            InvalidToken(_) => ("invalid_token", StatusCode::UNAUTHORIZED, "Invalid token"),
            RevokedToken(_) => ("revoked_token", StatusCode::UNAUTHORIZED, "Revoked token"),
            Forbidden(_) => ("forbidden", StatusCode::FORBIDDEN, "Forbidden"),
            PayloadTooLarge(_) => ("payload_too_large", StatusCode::PAYLOAD_TOO_LARGE, "Payload too large"),
            UnsupportedMediaType(_) => ("unsupported_media_type", StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported media type"),
            MethodNotAllowed(_) => ("method_not_allowed", StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
            RateLimited { .. } => ("rate_limited", StatusCode::TOO_MANY_REQUESTS, "Too many requests"),
            TooManyInFlight(_) => ("too_many_in_flight", StatusCode::TOO_MANY_REQUESTS, "Too many requests in progress"),
            RequestTimeout(_) => ("request_timeout", StatusCode::REQUEST_TIMEOUT, "Request timeout"),
            Unavailable(_) | DatabaseUnreachable(_) => ("unavailable", StatusCode::SERVICE_UNAVAILABLE, "Service unavailable"),
            Internal(_) => ("internal", StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
        }
    }

    pub fn code(&self) -> &'static str {
        self.describe().0
    }

    pub fn details(&self) -> ProblemDetails {
        let (code, status, title) = self.describe();
        let extra = match self {
            ApiError::KernelNotFound { extra, .. }
            | ApiError::BaselineFaster { extra, .. }
            | ApiError::UnknownDevice { extra, .. }
            | ApiError::AmbiguousDevice { extra, .. }
            | ApiError::CompileFailed { extra, .. } => extra.clone(),
            _ => Default::default(),
        };
        ProblemDetails {
            type_: format!("urn:kaas:error:{code}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail: self.to_string(),
            code: code.to_string(),
            extra,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.describe().1
    }

    fn error_response(&self) -> HttpResponse {
        let details = self.details();
        let mut res = HttpResponse::build(self.status_code());
        res.insert_header((header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json")));
        match self {
            ApiError::RateLimited { retry_after_secs } => {
                res.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
            }
            ApiError::Unavailable(_) => {
                res.insert_header((header::RETRY_AFTER, RETRY_AFTER_SECS.to_string()));
            }
            ApiError::DatabaseUnreachable(why) => {
                res.insert_header((header::RETRY_AFTER, RETRY_AFTER_SECS.to_string()));
                res.extensions_mut().insert(super::breaker::DbUnreachable(why.clone()));
            }
            ApiError::TooManyInFlight(_) => {
                res.insert_header((header::RETRY_AFTER, "1"));
            }
            // The rest of the body may still come; the connection cannot be read past it.
            ApiError::RequestTimeout(_) => {
                res.insert_header((header::CONNECTION, "close"));
            }
            _ => {}
        }
        res.body(serde_json::to_string(&details).unwrap_or_else(|_| "{}".into()))
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        tracing::error!(error = %e, "database error");
        if crate::db::is_unreachable(&e) {
            ApiError::DatabaseUnreachable("the database is unreachable; this replica answers 503 at once until it reaches it again. Retry shortly, or ask another replica (see /v1/health/ready)".into())
        } else if crate::db::is_outage(&e) {
            ApiError::Unavailable("the database is unavailable (it refuses connections, or holds no kaas schema); retry shortly, or ask another replica (see /v1/health/ready)".into())
        } else {
            ApiError::Unavailable("the database failed this request; retry shortly".into())
        }
    }
}

impl From<crate::compile::CompileError> for ApiError {
    fn from(e: crate::compile::CompileError) -> Self {
        use crate::compile::CompileError as C;
        let mut extra = serde_json::Map::new();
        extra.insert("reason".into(), e.reason().into());
        match e {
            C::Unavailable(m) => ApiError::Unavailable(format!("this service cannot compile CUDA source now ({m}); submit PTX (`kaas compile` builds it locally)")),
            C::Internal(m) => {
                tracing::error!(error = %m, "compile sandbox");
                ApiError::Internal(format!("compiling failed on the service's side: {m}"))
            }
            C::Nvrtc { result, log } => {
                extra.insert("log".into(), log.clone().into());
                ApiError::CompileFailed { detail: format!("NVRTC could not compile the source ({result}):\n{log}"), extra }
            }
            C::Limit { limit, message } => {
                extra.insert("limit".into(), limit.into());
                ApiError::CompileFailed { detail: message, extra }
            }
            other => ApiError::CompileFailed { detail: other.to_string(), extra },
        }
    }
}

impl From<crate::work::error::WorkError> for ApiError {
    fn from(e: crate::work::error::WorkError) -> Self {
        use crate::work::error::WorkError as W;
        match e {
            W::InvalidRequest(m) => ApiError::InvalidBody(m),
            W::InvalidArtifact(m) => ApiError::InvalidArtifact(m),
            W::InvalidManifest(m) => ApiError::InvalidManifest(m),
            W::StaticInvalid(m) => ApiError::StaticInvalid(m),
            W::ArtifactTooLarge(m) => ApiError::ArtifactTooLarge(m),
            W::QuotaExceeded(m) => ApiError::QuotaExceeded(m),
            W::InvalidProblem(m) => ApiError::InvalidProblem(m),
            W::UnknownWorkload(m) => ApiError::UnknownWorkload(m),
            W::Conflict(m) => ApiError::Conflict(m),
            W::NotFound(m) => ApiError::NotFound(m),
            W::Forbidden(m) => ApiError::Forbidden(m),
            W::Internal(m) => ApiError::Internal(m),
            W::Db(e) => e.into(),
            W::Compile(e) => e.into(),
            W::Catalog(e) => e.into(),
            W::Bundle(e) => e.into(),
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::Db(e) => e.into(),
            CatalogError::Corrupt(m) => {
                tracing::error!(error = %m, "catalog inconsistency");
                ApiError::Internal("the catalog holds inconsistent data; operators were told".into())
            }
        }
    }
}

impl From<BundleError> for ApiError {
    fn from(e: BundleError) -> Self {
        match e {
            BundleError::Catalog(c) => c.into(),
            BundleError::Invalid { message, .. } => ApiError::InvalidArtifact(message),
            BundleError::Io { .. } => ApiError::Internal(e.to_string()),
        }
    }
}

/// Seconds a client or orchestrator is told to wait before asking again after a 503.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Maps actix's own extractor errors (JSON, path, query, payload) into problem+json.
pub fn from_actix(err: &actix_web::Error, what: &str) -> ApiError {
    let status = err.as_response_error().status_code();
    let msg = format!("{what}: {err}");
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(msg),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(msg),
        _ => match what {
            "path" => ApiError::InvalidPath(msg),
            "query" => ApiError::InvalidQuery(msg),
            _ => ApiError::InvalidBody(msg),
        },
    }
}

/// Parses a JSON request body into `T`; a fault names the field it is in (`manifests[2].
/// launches[0].grid[1]`), since a position alone ("column 105838") tells a client little.
///
/// A number with no fractional part written as a float (`256.0`, as some JSON encoders
/// write every number) is an integer to JSON Schema, so to the OpenAPI document; serde's
/// integer types refuse it, directly or, inside an untagged enum (`ProblemSpec`), as "no
/// variant matched". When a body that fails holds such numbers, it is read again with them
/// as integers: the document and the server agree (schemathesis's "schema-valid request
/// rejected"). `256.5` is still refused, naming its field.
pub fn from_json_body<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    let named = |path: String, inner: &dyn std::fmt::Display| {
        if path == "." { ApiError::InvalidBody(format!("not {what}: {inner}")) } else { ApiError::InvalidBody(format!("not {what}: field `{path}`: {inner}")) }
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = match serde_path_to_error::deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => {
            let first = named(e.path().to_string(), e.inner());
            let Ok(mut tree) = serde_json::from_slice::<serde_json::Value>(body) else { return Err(first) };
            if !integral_floats_as_integers(&mut tree) {
                return Err(first);
            }
            return serde_path_to_error::deserialize(tree).map_err(|e| named(e.path().to_string(), e.inner()));
        }
    };
    de.end().map_err(|e| ApiError::InvalidBody(format!("not {what}: {e}")))?;
    Ok(value)
}

/// Rewrites every float with no fractional part that an `i64` or `u64` holds exactly
/// (|x| ≤ 2^53) as that integer; whether it rewrote any.
fn integral_floats_as_integers(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Number(n) => {
            let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0) else { return false };
            *v = if f < 0.0 { Value::from(f as i64) } else { Value::from(f as u64) };
            true
        }
        // Every element visited (no short-circuit): `|`, not `||`.
        Value::Array(items) => items.iter_mut().fold(false, |any, x| integral_floats_as_integers(x) | any),
        Value::Object(fields) => fields.values_mut().fold(false, |any, x| integral_floats_as_integers(x) | any),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::tune::{NewTuningRequest, ProblemSpec};

    /// Whole numbers written as floats are integers, inside untagged enums too; a fraction
    /// is refused with its field named, and a body without floats fails as it did.
    #[test]
    fn whole_floats_are_integers_wherever_they_are() {
        let r: NewTuningRequest = from_json_body(br#"{"problems": [{"layout": "tn", "m": 64.0, "n": 128, "k": 256.0}]}"#, "a tuning request").unwrap();
        assert!(matches!(&r.problems[0], ProblemSpec::Fields(f) if (f.m, f.k) == (64, 256)), "{:?}", r.problems);
        let err = from_json_body::<NewTuningRequest>(br#"{"problems": [{"layout": "tn", "m": 64.5, "n": 128, "k": 256}]}"#, "a tuning request").unwrap_err();
        assert!(err.to_string().contains("problems[0]"), "{err}");
        let err = from_json_body::<NewTuningRequest>(br#"{"problems": [{"m": 64, "n": 128, "k": 256}]}"#, "a tuning request").unwrap_err();
        assert!(err.to_string().contains("problems[0]"), "{err}");
    }
}
