//! Workloads: the GEMMs of popular models' decoder layers (`crate::workloads`), and how
//! the catalog answers each of them.

use actix_web::{get, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::catalog::{Answer, cached, json, resolve_device, respond};
use crate::api::{ApiError, State};
use crate::problem::{Acc, Arch};
use crate::workloads::{self, Linear, ModelConfig};

/// One preset of `GET /v1/workloads`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkloadSummaryView {
    pub config: ModelConfig,
    pub linears: Vec<Linear>,
    /// Token counts (M) each Linear is listed at.
    pub tokens: Vec<u32>,
    pub problems: usize,
}

#[utoipa::path(
    get, path = "/v1/workloads", tag = "catalog",
    responses((status = 200, description = "The workload presets: each model's decoder-layer Linears (tn problems: N = out_features, K = in_features) at every token count", body = [WorkloadSummaryView]))
)]
#[get("/v1/workloads")]
pub async fn list() -> Result<web::Json<Vec<WorkloadSummaryView>>, ApiError> {
    Ok(web::Json(
        workloads::PRESETS
            .iter()
            .map(|p| {
                let linears = p.linears();
                WorkloadSummaryView { config: *p, problems: linears.len() * workloads::TOKENS.len(), linears, tokens: workloads::TOKENS.to_vec() }
            })
            .collect(),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WorkloadQuery {
    /// PTX target family; `sm_90` when left out.
    #[param(pattern = "^sm_(80|86|89|90|90a)$")]
    pub arch: Option<String>,
    /// `f16` or `f32`; `f32` when left out.
    #[param(pattern = "^f(16|32)$")]
    pub acc: Option<String>,
    /// Device class, e.g. `H100-SXM` (or a common spelling: `H100`, `h200`); the fastest
    /// entry on any class when left out. Only entries measured on that class count.
    #[param(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/workloads/{name}", tag = "catalog", params(("name" = String, Path, description = "A preset, e.g. `llama-3.1-8b`"), WorkloadQuery),
    responses(
        (status = 200, description = "Every GEMM of the workload with its catalog state (served, baseline_faster, not_in_catalog), figures and a summary", body = crate::catalog::workload::WorkloadView),
        (status = 400, description = "Unknown arch, acc or device", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such workload; the message lists the presets", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/workloads/{name}")]
pub async fn get(state: State, name: web::Path<String>, q: web::Query<WorkloadQuery>) -> Result<Answer, ApiError> {
    let preset = workloads::preset(&name).ok_or_else(|| ApiError::NotFound(format!("no workload `{}`; the presets are {}", name.as_str(), workloads::names())))?;
    let bad = |e: crate::problem::ProblemError| ApiError::InvalidQuery(e.to_string());
    let arch: Arch = q.arch.as_deref().map(str::parse).transpose().map_err(bad)?.unwrap_or(Arch::Sm90);
    let acc: Acc = q.acc.as_deref().map(str::parse).transpose().map_err(bad)?.unwrap_or(Acc::F32);
    let device = resolve_device(&state, &q.device).await?;
    let key = format!("workload|{}|{arch}|{acc}|{device:?}", preset.name);
    let db = state.db.clone();
    let tune_class = device.clone().unwrap_or_else(|| state.settings.tune.device_class.clone());
    let r = cached(&state, key, || async move {
        let mut view = crate::catalog::workload::workload(&db, preset, arch, acc, device.as_deref()).await?;
        // Problems the catalog holds no entry for but someone asked to tune: a tune that
        // ended `baseline_faster` answers them (the baselines it measured are the row's),
        // as the kernel endpoint answers; else where the tune stands.
        use crate::catalog::workload::{WorkloadState, summarise};
        use crate::work::tune::state;
        let tunes = crate::work::tune::tune_states(&db, &tune_class).await?;
        for row in view.rows.iter_mut().filter(|r| r.state == WorkloadState::NotInCatalog) {
            match tunes.get(&row.path).map(String::as_str) {
                Some(state::BASELINE_FASTER) if row.use_instead.is_some() => row.state = WorkloadState::BaselineFaster,
                Some(s) if state::OPEN.contains(&s) || s == state::FAILED => row.tune = Some(s.to_string()),
                _ => {}
            }
        }
        view.summary = summarise(&view.rows);
        json(&view)
    })
    .await?;
    Ok(respond(r))
}
