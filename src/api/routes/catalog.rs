//! Catalog reads: problems, the best kernel per problem, its PTX, and leaderboards.
//! Answers are rendered once and kept in the catalog cache until the catalog changes.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, get, web};
use serde::Deserialize;
use utoipa::IntoParams;

use super::artifacts::serve_artifact;
use crate::api::cache::Rendered;
use crate::api::{ApiError, State, accepts_gzip};
use crate::catalog::{self, KernelLookup, ProblemFilter};
use crate::problem::Problem;
use crate::work::error::WorkError;
use crate::problem::DeviceClass;

/// Reads `{arch}/{acc}/{layout}/{m}x{n}x{k}` path parameters; a fault is a bad path (400).
pub fn parse_problem(arch: &str, acc: &str, layout: &str, shape: &str) -> Result<Problem, ApiError> {
    Problem::from_segments(arch, acc, layout, shape).map_err(|e| ApiError::InvalidPath(e.to_string()))
}

/// A problem taken from the `{arch}/{acc}/{layout}/{shape}` path segments, validated.
pub struct ProblemPath(pub Problem);

impl actix_web::FromRequest for ProblemPath {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let m = req.match_info();
        let seg = |name| m.get(name).unwrap_or_default();
        std::future::ready(parse_problem(seg("arch"), seg("acc"), seg("layout"), seg("shape")).map(ProblemPath))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProblemQuery {
    /// PTX target family, e.g. `sm_90`.
    #[param(pattern = "^sm_(80|86|89|90|90a)$")]
    pub arch: Option<String>,
    /// `f16` or `f32`.
    #[param(pattern = "^f(16|32)$")]
    pub acc: Option<String>,
    /// `nn` or `tn`.
    #[param(pattern = "^(nn|tn)$")]
    pub layout: Option<String>,
    /// Device class, e.g. `H100-SXM` (common spellings accepted, as for the kernel
    /// answer): only problems with a kernel measured on it.
    #[param(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeviceQuery {
    /// Device class, e.g. `H100-SXM`; common spellings (`H100`, `h100`, `H100 SXM`,
    /// `NVIDIA H100 80GB HBM3`) name the same class. Unknown: 400 `unknown_device`.
    #[param(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KernelQuery {
    /// Device class, e.g. `H100-SXM` or `H200`; common spellings (`H100`, `h100`,
    /// `H100 SXM`, `NVIDIA H100 80GB HBM3`, `H200-SXM`) name the same class. Unknown: 400
    /// `unknown_device`, listing the known ones.
    #[param(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
    /// `stand_in` (the default): a device class with no entry for the problem may be
    /// offered a stand-in's kernel (H200: H100-SXM's, where its PTX loads), labelled in
    /// `fallback` and claiming no speedup on the class asked for. `none`: only the class's
    /// own entries.
    #[param(pattern = "^(stand_in|none)$")]
    pub fallback: Option<String>,
}

impl KernelQuery {
    fn fallback(&self) -> Result<catalog::Fallback, ApiError> {
        match self.fallback.as_deref() {
            None | Some("stand_in") => Ok(catalog::Fallback::StandIn),
            Some("none") => Ok(catalog::Fallback::None),
            Some(other) => Err(ApiError::InvalidQuery(format!("fallback `{other}` is neither `stand_in` (the default) nor `none`"))),
        }
    }
}

/// The `device` query parameter, checked to be something a device class could be
/// spelt as: a class (`H100-SXM`), words (`H100 SXM`) or a driver's model name
/// (`NVIDIA H100 80GB HBM3`).
pub(crate) fn checked_device(device: &Option<String>) -> Result<Option<String>, ApiError> {
    match device {
        Some(d) if d.trim().is_empty() || d.len() > 64 || !d.chars().all(|c| c.is_ascii_alphanumeric() || " -_.".contains(c)) => Err(
            ApiError::InvalidQuery(format!("device `{d}` is not a device class name (letters, digits, spaces, `-`, `_`, `.`; at most 64)")),
        ),
        _ => Ok(device.clone()),
    }
}

/// The known device classes and their compute capabilities, from the catalog cache (it
/// is dropped on every catalog change and ages out, so a new worker's class shows soon).
async fn known_devices(state: &State) -> Result<Vec<DeviceClass>, ApiError> {
    let db = state.db.clone();
    let r = cached(state, "device_classes".into(), || async move {
        let known: Vec<DeviceClass> = catalog::known_device_classes(&db).await?.into_keys().collect();
        json(&known)
    })
    .await?;
    serde_json::from_slice(&r.body).map_err(|e| ApiError::Internal(format!("cached device class list: {e}")))
}

/// The `device` query parameter as the canonical name of a known device class
/// (`h100`, `H100 SXM`, `NVIDIA H100 80GB HBM3` → `H100-SXM`). Every route that takes a
/// device goes through this, so answers and cache keys name the class one way only.
pub(crate) async fn resolve_device(state: &State, device: &Option<String>) -> Result<Option<DeviceClass>, ApiError> {
    let Some(asked) = checked_device(device)? else { return Ok(None) };
    let known = known_devices(state).await?;
    let listed = || {
        let mut extra = serde_json::Map::new();
        extra.insert("device".into(), asked.clone().into());
        extra.insert("known_device_classes".into(), known.clone().into());
        extra
    };
    let names = if known.is_empty() { "none yet".to_string() } else { DeviceClass::list(&known) };
    match crate::gpu::resolve_device_class(&asked, &known) {
        Ok(class) => Ok(Some(class)),
        // An empty list is a service with no catalog imported and no worker yet, which
        // is what the user needs to hear, not that their spelling is wrong.
        Err(crate::gpu::DeviceNameError::Unknown) if known.is_empty() => Err(ApiError::UnknownDevice {
            detail: format!(
                "device class `{asked}` is not known here, and neither is any other: this service's catalog is empty (no bundle imported; `GET /v1/health` says from where) and no GPU worker has registered"
            ),
            extra: listed(),
        }),
        Err(crate::gpu::DeviceNameError::Unknown) => Err(ApiError::UnknownDevice {
            detail: format!("device class `{asked}` is not known here; known device classes: {names} (in `known_device_classes`)"),
            extra: listed(),
        }),
        Err(crate::gpu::DeviceNameError::Ambiguous(of_model)) => Err(ApiError::AmbiguousDevice {
            detail: format!("device `{asked}` could be any of {}, which time differently: name one (known device classes: {names})", DeviceClass::list(&of_model)),
            extra: listed(),
        }),
    }
}

pub(crate) fn json(value: &impl serde::Serialize) -> Result<Rendered, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Rendered::new(200, "application/json", body))
}

fn problem_json(err: &ApiError) -> Rendered {
    let body = serde_json::to_vec(&err.details()).unwrap_or_default();
    Rendered::new(actix_web::ResponseError::status_code(err).as_u16(), "application/problem+json", body)
}

/// A cached answer on its way out: gzip for clients that take it.
pub(crate) struct Answer(pub Arc<Rendered>);

impl Answer {
    pub(crate) fn into_response(self, req: &HttpRequest) -> HttpResponse {
        let r = self.0;
        let mut res = HttpResponse::build(actix_web::http::StatusCode::from_u16(r.status).unwrap_or(actix_web::http::StatusCode::OK));
        res.insert_header((header::CONTENT_TYPE, r.content_type))
            .insert_header((header::CACHE_CONTROL, "public, max-age=10"))
            .insert_header((header::VARY, "Accept-Encoding"));
        match &r.gzip {
            Some(z) if accepts_gzip(req) => res.insert_header((header::CONTENT_ENCODING, "gzip")).body(z.clone()),
            _ => res.body(r.body.clone()),
        }
    }
}

impl actix_web::Responder for Answer {
    type Body = actix_web::body::BoxBody;
    fn respond_to(self, req: &HttpRequest) -> HttpResponse {
        self.into_response(req)
    }
}

pub(crate) fn respond(r: Arc<Rendered>) -> Answer {
    Answer(r)
}

/// Answers from the catalog cache, rendering on a miss. Concurrent misses for one key
/// render once.
pub(crate) async fn cached<F, Fut>(state: &State, key: String, render: F) -> Result<Arc<Rendered>, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Rendered, ApiError>>,
{
    let entry = state
        .caches
        .catalog
        .entry(key)
        .or_try_insert_with(async { render().await.map(Arc::new) })
        .await
        .map_err(|e: Arc<ApiError>| Arc::unwrap_or_clone(e))?;
    state.metrics.cache("catalog", !entry.is_fresh());
    Ok(entry.into_value())
}

#[utoipa::path(
    get, path = "/v1/problems", tag = "catalog", params(ProblemQuery),
    responses(
        (status = 200, description = "Problems with their best kernel per device class", body = Vec<catalog::ProblemView>),
        (status = 400, description = "Unknown arch, acc, layout or device", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/problems")]
pub async fn list_problems(state: State, q: web::Query<ProblemQuery>) -> Result<Answer, ApiError> {
    let bad = |e: crate::problem::ProblemError| ApiError::InvalidQuery(e.to_string());
    let filter = ProblemFilter {
        arch: q.arch.as_deref().map(str::parse).transpose().map_err(bad)?,
        acc: q.acc.as_deref().map(str::parse).transpose().map_err(bad)?,
        layout: q.layout.as_deref().map(str::parse).transpose().map_err(bad)?,
        device: q.device.clone(),
    };
    let filter = ProblemFilter { device: resolve_device(&state, &filter.device).await?.map(String::from), ..filter };
    let key = format!("problems|{:?}|{:?}|{:?}|{:?}", filter.arch, filter.acc, filter.layout, filter.device);
    let db = state.db.clone();
    let r = cached(&state, key, || async move { json(&catalog::list_problems(&db, &filter).await?) }).await?;
    Ok(respond(r))
}

/// The lookup rendered as the kernel endpoint answers it, its run record signed.
async fn render_kernel(state: &State, p: Problem, device: Option<DeviceClass>, fallback: catalog::Fallback) -> Result<Rendered, ApiError> {
    let lookup = catalog::best_kernel(&state.db, &p, device.as_deref(), fallback).await?;
    let on = device.as_deref().map(|d| format!(" on {d}")).unwrap_or_default();
    Ok(match lookup {
        KernelLookup::Kernel(mut view) => {
            view.signature = Some(state.signer().await?.sign(&view.record.to_value()));
            Rendered { artifact: Some(view.artifact.sha256.clone()), ..json(&view)? }
        }
        KernelLookup::BaselineFaster { device_class, use_instead, fallback } => {
            let mut extra = serde_json::Map::new();
            extra.insert("device_class".into(), device_class.clone().into());
            extra.insert("use_instead".into(), serde_json::to_value(&use_instead).unwrap_or_default());
            let detail = match &fallback {
                Some(f) => {
                    extra.insert("fallback".into(), serde_json::to_value(f).unwrap_or_default());
                    f.note.clone()
                }
                None => format!(
                    "no kernel in the catalog beats the baselines for {p} on {device_class}: use {} ({} layout, config in `use_instead`), {:.2} µs{}",
                    use_instead.library,
                    use_instead.layout,
                    use_instead.median_us,
                    catalog::layout_advice(p.layout, &use_instead.layout)
                ),
            };
            problem_json(&ApiError::BaselineFaster { detail, extra })
        }
        KernelLookup::None { use_instead } => {
            let mut extra = serde_json::Map::new();
            let detail = match &use_instead {
                Some((d, b)) => {
                    extra.insert("device_class".into(), d.clone().into());
                    extra.insert("use_instead".into(), serde_json::to_value(b).unwrap_or_default());
                    format!(
                        "no kernel for {p}{on} yet: use {} ({} layout, config in `use_instead`), {:.2} µs on {d}{}",
                        b.library,
                        b.layout,
                        b.median_us,
                        catalog::layout_advice(p.layout, &b.layout)
                    )
                }
                None => format!("no kernel for {p}{on} yet and no baseline measured: use cuBLASLt's heuristic (cublasLtMatmul) for this shape"),
            };
            problem_json(&ApiError::KernelNotFound { detail, extra })
        }
    })
}

/// The kernel endpoint's answer for a problem, from the cache; a miss is told where the
/// problem's tune stands (not cached: it moves while the catalog does not).
async fn kernel_answer(state: &State, p: Problem, q: &KernelQuery) -> Result<Arc<Rendered>, ApiError> {
    let fallback = q.fallback()?;
    let device = resolve_device(state, &q.device).await?;
    let class = device.clone();
    let r = cached(state, format!("kernel|{p}|{device:?}|{fallback:?}"), || async move { render_kernel(state, p, device, fallback).await }).await?;
    if r.status != 404 {
        return Ok(r);
    }
    with_tuning(state, p, class, r).await
}

/// A `kernel_not_found` answer with `tuning`: the problem's tune on the class asked (or
/// the tuning class) — its state, job and queue position, or `not_requested` — and the
/// request that asks for it. A tune that ended `baseline_faster` makes the answer
/// `baseline_faster` with the measured baseline. With `--tune-on-miss`, a problem never
/// asked for is queued here, within the miss limits.
async fn with_tuning(state: &State, p: Problem, device: Option<DeviceClass>, r: Arc<Rendered>) -> Result<Arc<Rendered>, ApiError> {
    use crate::work::tune::{self, Asker, NewTuningRequest, ProblemSpec};
    let Ok(mut body) = serde_json::from_slice::<serde_json::Value>(&r.body) else { return Ok(r) };
    if body.get("code").and_then(|c| c.as_str()) != Some("kernel_not_found") {
        return Ok(r);
    }
    let class = device.unwrap_or_else(|| state.settings.tune.device_class.clone());
    let mut found = tune::state_of(&state.db, &p, &class).await?;
    let mut note = None;
    if found.is_none() && state.settings.tune.on_miss {
        let req = NewTuningRequest { problems: vec![ProblemSpec::Text(p.path())], ..Default::default() };
        match tune::create(&state.db, Asker::Miss, &req, &class, &state.settings.tune).await {
            Ok(_) => found = tune::state_of(&state.db, &p, &class).await?,
            Err(e @ (WorkError::QuotaExceeded(_) | WorkError::InvalidProblem(_))) => note = Some(format!("not queued by this lookup: {e}")),
            Err(e) => return Err(e.into()),
        }
    }
    let ask = serde_json::json!({"method": "POST", "url": "/v1/tuning-requests", "body": {"problems": [p.path()], "device": class}});
    let mut tuning = serde_json::json!({"device_class": class, "request": ask});
    match &found {
        Some((t, pos)) => {
            tuning["state"] = t.state.clone().into();
            tuning["stage"] = t.stage.clone().into();
            tuning["tune"] = format!("/v1/tunes/{}?device={class}", p.path()).into();
            if tune::state::OPEN.contains(&t.state.as_str()) {
                tuning["job_id"] = t.job_id.into();
                tuning["queue_position"] = (*pos).into();
            }
            if let Some(m) = &t.message {
                tuning["message"] = m.clone().into();
            }
        }
        None => {
            let why = crate::tuner::ondemand::untunable(&p, 132);
            tuning["state"] = if why.is_some() { "refused" } else { "not_requested" }.into();
            if let Some(why) = why {
                tuning["reason"] = why.into();
            }
        }
    }
    if let Some(n) = note {
        tuning["note"] = n.into();
    }
    let state_word = tuning["state"].as_str().unwrap_or_default().to_string();
    if let Some(obj) = body.as_object_mut() {
        obj.insert("tuning".into(), tuning);
        if state_word == tune::state::BASELINE_FASTER && obj.contains_key("use_instead") {
            // Measured by the tune: say so as the catalog says it of its own entries.
            let e = ApiError::BaselineFaster { detail: String::new(), extra: Default::default() }.details();
            obj.insert("code".into(), e.code.into());
            obj.insert("type".into(), e.type_.into());
            obj.insert("title".into(), e.title.into());
            let detail = obj.get("detail").and_then(|d| d.as_str()).unwrap_or_default().replace("no kernel for", "the tuned kernel does not beat the baselines for").replace(" yet:", ":");
            obj.insert("detail".into(), detail.into());
        } else if let Some(d) = obj.get("detail").and_then(|d| d.as_str()).map(str::to_string) {
            let more = match state_word.as_str() {
                "not_requested" => " It has not been asked to be tuned: POST /v1/tuning-requests (see `tuning.request`) asks for it.".to_string(),
                "refused" => " The service cannot tune it (see `tuning.reason`).".to_string(),
                s => format!(" Its tune is {s} (see `tuning`)."),
            };
            // The sentence before ends without a full stop when it ends on a figure.
            let stop = if d.trim_end().ends_with('.') { "" } else { "." };
            obj.insert("detail".into(), format!("{}{stop}{more}", d.trim_end()).into());
        }
    }
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Arc::new(Rendered::new(r.status, r.content_type, bytes)))
}

#[utoipa::path(
    get, path = "/v1/kernels/{arch}/{acc}/{layout}/{shape}", tag = "catalog",
    params(
        ("arch" = String, Path, pattern = "^sm_(80|86|89|90|90a)$", description = "PTX target family, e.g. sm_90"),
        ("acc" = String, Path, pattern = "^f(16|32)$", description = "f16 or f32"),
        ("layout" = String, Path, pattern = "^(nn|tn)$", description = "nn or tn"),
        ("shape" = String, Path, pattern = "^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])$", description = "MxNxK, each 1..=65536"),
        KernelQuery,
    ),
    responses(
        (status = 200, description = "The best kernel: manifest, PTX link, timings, baselines, and its run record signed by the service (`record`, `signature`; keys at /.well-known/kaas-signing-keys). With `fallback` set, another device class's kernel, measured there only", body = catalog::KernelView),
        (status = 400, description = "Malformed problem or fallback, or a device class not known here (`unknown_device`, `ambiguous_device`; `known_device_classes` lists them)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No kernel (`kernel_not_found`) or a baseline is faster (`baseline_faster`); `use_instead` names it", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/kernels/{arch}/{acc}/{layout}/{shape}")]
pub async fn get_kernel(state: State, path: ProblemPath, q: web::Query<KernelQuery>) -> Result<Answer, ApiError> {
    let r = kernel_answer(&state, path.0, &q).await?;
    Ok(respond(r))
}

#[utoipa::path(
    get, path = "/v1/kernels/{arch}/{acc}/{layout}/{shape}/ptx", tag = "catalog",
    params(
        ("arch" = String, Path, pattern = "^sm_(80|86|89|90|90a)$", description = "PTX target family"), ("acc" = String, Path, pattern = "^f(16|32)$", description = "f16 or f32"),
        ("layout" = String, Path, pattern = "^(nn|tn)$", description = "nn or tn"), ("shape" = String, Path, pattern = "^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])$", description = "MxNxK"), KernelQuery,
    ),
    responses(
        (status = 200, description = "PTX of the best kernel (strong ETag = sha256); under the kernel answer's fallback rule, a stand-in device class's", body = String, content_type = "text/plain"),
        (status = 304, description = "Not modified (If-None-Match matched)"),
        (status = 400, description = "Malformed problem or fallback, or an unknown device class (`unknown_device`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No kernel, or a baseline is faster", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/kernels/{arch}/{acc}/{layout}/{shape}/ptx")]
pub async fn get_kernel_ptx(
    req: HttpRequest,
    state: State,
    path: ProblemPath,
    q: web::Query<KernelQuery>,
) -> Result<HttpResponse, ApiError> {
    let r = kernel_answer(&state, path.0, &q).await?;
    match &r.artifact {
        // The best kernel can change, so this URL is revalidated; the artifact URL is immutable.
        Some(sha) => serve_artifact(&req, &state, sha, "public, max-age=10").await,
        None => Ok(respond(r.clone()).into_response(&req)),
    }
}

#[utoipa::path(
    get, path = "/v1/leaderboard/{arch}/{acc}/{layout}/{shape}", tag = "leaderboard",
    params(
        ("arch" = String, Path, pattern = "^sm_(80|86|89|90|90a)$", description = "PTX target family"), ("acc" = String, Path, pattern = "^f(16|32)$", description = "f16 or f32"),
        ("layout" = String, Path, pattern = "^(nn|tn)$", description = "nn or tn"), ("shape" = String, Path, pattern = "^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])x(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])$", description = "MxNxK"), DeviceQuery,
    ),
    responses(
        (status = 200, description = "Each submitter's best passing run, fastest first, per device class", body = catalog::ProblemLeaderboardView),
        (status = 400, description = "Malformed problem, or an unknown device class (`unknown_device`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/leaderboard/{arch}/{acc}/{layout}/{shape}")]
pub async fn problem_leaderboard(state: State, path: ProblemPath, q: web::Query<DeviceQuery>) -> Result<Answer, ApiError> {
    let p = path.0;
    let device = resolve_device(&state, &q.device).await?;
    let db = state.db.clone();
    let r = cached(&state, format!("leaderboard|{p}|{device:?}"), || async move {
        json(&catalog::problem_leaderboard(&db, &p, device.as_deref()).await?)
    })
    .await?;
    Ok(respond(r))
}

#[utoipa::path(
    get, path = "/v1/leaderboard", tag = "leaderboard",
    params(DeviceQuery),
    responses(
        (status = 200, description = "Submitters by problems held, then geometric-mean speedup over cuBLASLt-autotune-max; on one device class with `device`", body = catalog::LeaderboardView),
        (status = 400, description = "An unknown device class (`unknown_device`)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/leaderboard")]
pub async fn global_leaderboard(state: State, q: web::Query<DeviceQuery>) -> Result<Answer, ApiError> {
    let device = resolve_device(&state, &q.device).await?;
    let db = state.db.clone();
    let r = cached(&state, format!("leaderboard|{device:?}"), || async move { json(&catalog::global_leaderboard(&db, device.as_deref()).await?) }).await?;
    Ok(respond(r))
}
