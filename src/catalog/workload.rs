//! A workload's problems as the catalog answers them (`GET /v1/workloads/{name}`): for each
//! GEMM of the model's layer and token count, whether a verified kernel that beats the
//! baselines is served, a measured baseline is faster, or the catalog has nothing yet.

use sea_orm::DatabaseConnection;
use serde::Serialize;
use utoipa::ToSchema;

use super::{CatalogError, Fallback, KernelLookup, best_kernel};
use crate::problem::{Acc, Arch, Problem};
use crate::workloads::{Linear, ModelConfig};
use crate::problem::DeviceClass;

/// The speedup a row reports: graph mode, against the faster layout of cuBLASLt's
/// autotuned choice (the catalog's headline baseline).
const HEADLINE: &str = "cublaslt_autotune_max";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    /// A verified kernel that beat every baseline it was timed against.
    Served,
    /// Kernels exist or were measured, but a baseline is faster: `use_instead` says which.
    BaselineFaster,
    /// Nothing in the catalog for this problem (a baseline may still be known).
    NotInCatalog,
}

/// One GEMM of the workload.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct WorkloadRow {
    /// The Linear(s) of the layer with this shape, e.g. `k_proj, v_proj`.
    pub linear: String,
    pub tokens: u32,
    pub problem: Problem,
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`, the path of the kernel URLs.
    pub path: String,
    pub state: WorkloadState,
    /// The device class the figures were measured on.
    pub device_class: Option<DeviceClass>,
    /// The served kernel's graph-mode median (µs).
    pub kernel_median_us: Option<f64>,
    /// The served kernel's graph-mode speedup over cuBLASLt autotuned (the faster layout).
    pub speedup: Option<f64>,
    /// The fastest measured baseline, where that is the answer: `library layout`.
    pub use_instead: Option<String>,
    pub baseline_median_us: Option<f64>,
    /// `not_in_catalog` rows someone asked to tune: the tune's state (`queued`, `tuning`,
    /// `verifying`, `failed`). Filled by the API, which sees the job queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tune: Option<String>,
}

/// Counts and geometric means over the rows.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct WorkloadSummary {
    pub problems: usize,
    pub served: usize,
    pub baseline_faster: usize,
    pub not_in_catalog: usize,
    /// Over the served rows with a measured speedup.
    pub served_geomean: Option<f64>,
    /// Over every measured row, a `baseline_faster` row counting 1.0 (the user runs the
    /// baseline there): what the workload gains from the catalog as it stands.
    pub measured_geomean: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct WorkloadView {
    pub name: String,
    pub title: String,
    pub config: ModelConfig,
    pub linears: Vec<Linear>,
    pub arch: Arch,
    pub acc: Acc,
    /// The device class asked for; any when absent.
    pub device: Option<String>,
    /// Classes whose kernels the kernel endpoint offers, labelled, where `device` has no
    /// answer of its own; not counted here (the rows are `device`'s own measurements).
    pub stand_ins: Vec<String>,
    pub rows: Vec<WorkloadRow>,
    pub summary: WorkloadSummary,
}

/// Looks every GEMM of `preset` up in the catalog.
pub async fn workload(db: &DatabaseConnection, preset: &ModelConfig, arch: Arch, acc: Acc, device: Option<&str>) -> Result<WorkloadView, CatalogError> {
    let mut rows = Vec::new();
    for g in preset.gemms(arch, acc) {
        let mut row = WorkloadRow {
            linear: g.linear,
            tokens: g.tokens,
            problem: g.problem,
            path: g.problem.path(),
            state: WorkloadState::NotInCatalog,
            device_class: None,
            kernel_median_us: None,
            speedup: None,
            use_instead: None,
            baseline_median_us: None,
            tune: None,
        };
        // Only what was measured on the class asked for: a workload's figures never mix
        // in another class's stand-in.
        match best_kernel(db, &g.problem, device, Fallback::None).await? {
            KernelLookup::Kernel(k) => {
                row.state = WorkloadState::Served;
                row.kernel_median_us = k.run.timings.as_ref().and_then(|t| t.pointer("/graph/median_us")).and_then(|v| v.as_f64());
                row.speedup = super::ranked_speedups(k.run.speedups.as_ref()).and_then(|s| s.get(HEADLINE)?.as_f64());
                row.device_class = Some(k.device_class);
            }
            KernelLookup::BaselineFaster { device_class, use_instead, .. } => {
                row.state = WorkloadState::BaselineFaster;
                row.device_class = Some(device_class);
                row.use_instead = Some(format!("{} {}", use_instead.library, use_instead.layout));
                row.baseline_median_us = Some(use_instead.median_us);
            }
            KernelLookup::None { use_instead } => {
                if let Some((device_class, b)) = use_instead {
                    row.device_class = Some(device_class);
                    row.use_instead = Some(format!("{} {}", b.library, b.layout));
                    row.baseline_median_us = Some(b.median_us);
                }
            }
        }
        rows.push(row);
    }
    let summary = summarise(&rows);
    Ok(WorkloadView {
        name: preset.name.to_string(),
        title: preset.title.to_string(),
        config: *preset,
        linears: preset.linears(),
        arch,
        acc,
        device: device.map(str::to_string),
        stand_ins: device.map(super::overview::stand_ins_for).unwrap_or_default(),
        rows,
        summary,
    })
}

fn geomean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
}

/// Counts and geometric means over `rows` (again after the API fills in tune states).
pub fn summarise(rows: &[WorkloadRow]) -> WorkloadSummary {
    let count = |s: WorkloadState| rows.iter().filter(|r| r.state == s).count();
    let served: Vec<f64> = rows.iter().filter(|r| r.state == WorkloadState::Served).filter_map(|r| r.speedup).filter(|x| x.is_finite() && *x > 0.0).collect();
    let mut measured = served.clone();
    measured.extend(std::iter::repeat_n(1.0, count(WorkloadState::BaselineFaster)));
    WorkloadSummary {
        problems: rows.len(),
        served: count(WorkloadState::Served),
        baseline_faster: count(WorkloadState::BaselineFaster),
        not_in_catalog: count(WorkloadState::NotInCatalog),
        served_geomean: geomean(&served),
        measured_geomean: geomean(&measured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Layout, Shape};

    fn row(state: WorkloadState, speedup: Option<f64>) -> WorkloadRow {
        let problem = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(1, 8, 8).expect("shape"));
        WorkloadRow {
            linear: "q_proj".into(),
            tokens: 1,
            problem,
            path: problem.path(),
            state,
            device_class: None,
            kernel_median_us: None,
            speedup,
            use_instead: None,
            baseline_median_us: None,
            tune: None,
        }
    }

    #[test]
    fn the_summary_counts_states_and_takes_baseline_rows_as_one() {
        let rows = [
            row(WorkloadState::Served, Some(1.21)),
            row(WorkloadState::Served, Some(1.0)),
            row(WorkloadState::BaselineFaster, None),
            row(WorkloadState::NotInCatalog, None),
        ];
        let s = summarise(&rows);
        assert_eq!((s.problems, s.served, s.baseline_faster, s.not_in_catalog), (4, 2, 1, 1));
        assert!((s.served_geomean.expect("served") - 1.1).abs() < 1e-12);
        assert!((s.measured_geomean.expect("measured") - 1.21f64.powf(1.0 / 3.0)).abs() < 1e-12);
        assert_eq!(summarise(&[row(WorkloadState::NotInCatalog, None)]).served_geomean, None);
    }
}
