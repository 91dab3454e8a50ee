//! The browser UI: `static/` embedded in the binary, so `kaas serve` shows it from any
//! working directory and offline. `/` is the single page (hash routes, so every view
//! has a shareable URL without server-side routing); `/static/...` are its assets.
//! Assets revalidate on every load (`no-cache` + strong ETag), so a new binary's UI is
//! picked up at once and an unchanged one costs a 304.

use std::sync::LazyLock;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, get, web};

use crate::api::ApiError;

pub struct Asset {
    /// Path under `static/`, as served under `/static/`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $content_type:literal) => {
        Asset { path: $path, content_type: $content_type, body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/static/", $path)) }
    };
}

/// Everything under `static/` (a test checks that this list and the folder agree).
pub const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("lib.js", "text/javascript; charset=utf-8"),
    asset!("home.js", "text/javascript; charset=utf-8"),
    asset!("heatmap.js", "text/javascript; charset=utf-8"),
    asset!("problem.js", "text/javascript; charset=utf-8"),
    asset!("leaderboard.js", "text/javascript; charset=utf-8"),
    asset!("submission.js", "text/javascript; charset=utf-8"),
    asset!("workloads.js", "text/javascript; charset=utf-8"),
];

static ETAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| format!("\"{}\"", &crate::signing::sha256_hex(a.body)[..32])).collect());

/// Scripts may come only from this origin and no inline script runs: even if a
/// submitter's name slipped into markup, it could not execute.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' blob:; \
                   base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn serve(req: &HttpRequest, path: &str) -> Result<HttpResponse, ApiError> {
    let Some(i) = ASSETS.iter().position(|a| a.path == path) else {
        return Err(ApiError::NotFound(format!("no UI asset `{path}`; the UI is at /")));
    };
    let (asset, etag) = (&ASSETS[i], &ETAGS[i]);
    let etag_value = HeaderValue::from_str(etag).map_err(|e| ApiError::Internal(e.to_string()))?;
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == etag));
    let mut res = if matches { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    res.insert_header((header::ETAG, etag_value))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
    if asset.path == "index.html" {
        res.insert_header((header::CONTENT_SECURITY_POLICY, CSP));
    }
    if matches {
        return Ok(res.finish());
    }
    Ok(res.insert_header((header::CONTENT_TYPE, asset.content_type)).body(asset.body))
}

#[get("/")]
pub async fn index(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    serve(&req, "index.html")
}

#[get("/static/{path:.*}")]
pub async fn static_asset(req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    serve(&req, &path)
}
