//! The catalog at a glance, for the UI (cached with the other catalog answers):
//! `GET /v1/heatmap` (one K as an M×N grid, every timing mode) and `GET /v1/stats`
//! (headline figures).

use actix_web::{get, web};
use serde::Deserialize;
use utoipa::IntoParams;

use super::catalog::{cached, json, resolve_device, respond};
use crate::api::{ApiError, State};
use crate::catalog::overview::{self, HeatmapQuery};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HeatmapParams {
    /// PTX target family, e.g. `sm_90`; the first present when left out.
    #[param(pattern = "^sm_(80|86|89|90|90a)$")]
    pub arch: Option<String>,
    /// `f16` or `f32`; the first present when left out.
    #[param(pattern = "^f(16|32)$")]
    pub acc: Option<String>,
    /// `nn` or `tn`; the first present when left out.
    #[param(pattern = "^(nn|tn)$")]
    pub layout: Option<String>,
    /// K of the problems shown; the smallest present when left out.
    #[param(minimum = 1, maximum = 65536)]
    pub k: Option<u32>,
    /// Device class (common spellings accepted, as for the kernel answer); the one
    /// holding the most catalog entries when left out.
    #[param(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/heatmap", tag = "catalog", params(HeatmapParams),
    responses(
        (status = 200, description = "Every problem of one (arch, acc, layout, K) as an M×N cell with its catalog entry's figures per mode on one device class, and the choices available", body = overview::HeatmapView),
        (status = 400, description = "Unknown arch, acc, layout or device, or K out of range", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/v1/heatmap")]
pub async fn get_heatmap(state: State, q: web::Query<HeatmapParams>) -> Result<super::catalog::Answer, ApiError> {
    let bad = |e: crate::problem::ProblemError| ApiError::InvalidQuery(e.to_string());
    let query = HeatmapQuery {
        arch: q.arch.as_deref().map(str::parse).transpose().map_err(bad)?,
        acc: q.acc.as_deref().map(str::parse).transpose().map_err(bad)?,
        layout: q.layout.as_deref().map(str::parse).transpose().map_err(bad)?,
        k: q.k,
        device: resolve_device(&state, &q.device).await?.map(String::from),
    };
    if let Some(k) = query.k
        && !(1..=crate::problem::MAX_DIM).contains(&k)
    {
        return Err(ApiError::InvalidQuery(format!("k = {k} is not from 1 to {}", crate::problem::MAX_DIM)));
    }
    let key = format!("heatmap|{:?}|{:?}|{:?}|{:?}|{:?}", query.arch, query.acc, query.layout, query.k, query.device);
    let db = state.db.clone();
    let r = cached(&state, key, || async move { json(&overview::heatmap(&db, &query).await?) }).await?;
    Ok(respond(r))
}

#[utoipa::path(
    get, path = "/v1/stats", tag = "catalog",
    responses((status = 200, description = "Headline figures of the catalog: problems covered, kernels, device classes, geometric-mean speedup", body = overview::CatalogStats))
)]
#[get("/v1/stats")]
pub async fn get_stats(state: State) -> Result<super::catalog::Answer, ApiError> {
    let db = state.db.clone();
    let r = cached(&state, "stats".into(), || async move { json(&overview::stats(&db).await?) }).await?;
    Ok(respond(r))
}
