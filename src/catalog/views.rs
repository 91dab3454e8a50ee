//! What the read API answers with (`*View`), shared by the HTTP handlers, the bundle
//! exporter and the CLI. Free-form measurement blobs (timings, speedups, device state)
//! are kept as JSON values: their shape belongs to the harness that wrote them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::manifest::Manifest;
use crate::problem::Problem;
use crate::signing::{Record, RecordSignature};
use crate::problem::DeviceClass;

/// The content-addressed PTX of a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ArtifactView {
    pub sha256: String,
    pub size_bytes: i64,
    /// PTX ISA version from `.version`, e.g. `8.8`.
    pub ptx_version: String,
    /// PTX target from `.target`, e.g. `sm_90a`.
    pub target: String,
    /// Where to download it (immutable, strong ETag).
    pub url: String,
}

/// One verification + benchmark of a kernel on one problem on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    pub id: i32,
    pub device_class: DeviceClass,
    /// `pass` or the failing verdict.
    pub verdict: String,
    pub message: String,
    pub measured_at: DateTime<Utc>,
    /// Timing statistics per mode (graph, offline, server), as the harness wrote them;
    /// `null` when the kernel was verified but not benchmarked.
    #[schema(value_type = Option<Object>)]
    pub timings: Option<serde_json::Value>,
    /// `{mode: {baseline: speedup}}`, measured side by side in the same run.
    #[schema(value_type = Option<Object>)]
    pub speedups: Option<serde_json::Value>,
    /// The cache regime of `timings` and `speedups`: `l2_cold` (what the catalog ranks
    /// by), or `rotation_3_sets` for runs timed before regimes were named; `null` when
    /// not benchmarked.
    pub regime: Option<String>,
    /// Every regime the run was timed in: `{"l2_cold": {…}, "l2_warm": {…}}`, each with
    /// the candidate's `timings` and `speedups`, the `baselines` timed beside it, and its
    /// rotation (`buffer_sets`, `footprint_bytes`, `l2_multiple`, `cache`).
    #[schema(value_type = Option<Object>)]
    pub regimes: Option<serde_json::Value>,
    /// GPU model, driver, CUDA and cuBLAS versions, clocks and temperature.
    #[schema(value_type = Option<Object>)]
    pub device: Option<serde_json::Value>,
}

/// A cuBLAS or cuBLASLt timing for a problem on a device class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BaselineView {
    /// `cublas`, `cublaslt_heuristic` or `cublaslt_autotune`.
    pub library: String,
    /// The B layout the baseline ran with (`nn` or `tn`).
    pub layout: String,
    /// `graph`, `offline`, `server` or `paced`.
    pub mode: String,
    pub median_us: f64,
    #[schema(value_type = Object)]
    pub timing: serde_json::Value,
    /// How to reproduce it: compute type, algorithm, workspace.
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
}

/// The best kernel for a problem on one device class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelView {
    pub problem: Problem,
    /// The device class of the catalog entry served: where it was measured.
    pub device_class: DeviceClass,
    /// The device class every timing, speedup, `beats` and `baselines` in this answer was
    /// measured on (always `device_class`; named so that a fallback answer reads plainly).
    #[serde(default)]
    pub measured_on: DeviceClass,
    /// Set only when the device class asked for has no entry for this problem and this
    /// is another class's kernel offered instead (`?fallback=none` turns that off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackView>,
    pub submitter: String,
    pub name: String,
    pub manifest: Manifest,
    pub artifact: ArtifactView,
    pub run: RunView,
    /// Whether this kernel was timed side by side with the baselines.
    pub benchmarked: bool,
    /// Baselines (`name` of the speedup table) it ran faster than, in graph mode.
    pub beats: Vec<String>,
    /// The device class's baseline table for this problem.
    pub baselines: Vec<BaselineView>,
    /// Other device classes with a catalog entry for this problem.
    pub other_device_classes: Vec<DeviceClass>,
    /// What the service vouches for about this kernel's run (docs/signing.md).
    pub record: Record,
    /// The service's Ed25519 signature over `record`; the HTTP API always sets it.
    pub signature: Option<RecordSignature>,
}

/// Why a kernel answer serves another device class's entry, and what is known on the
/// class asked for. Invariant: nothing in an answer carrying this claims the kernel
/// beats the asked class's baselines; it was never timed there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FallbackView {
    /// The device class asked for (canonical name), which has no entry for the problem.
    pub requested_device: String,
    /// The device class the kernel was verified and timed on.
    pub measured_on: DeviceClass,
    /// The above in words, for people.
    pub note: String,
    /// The baselines it beat on `measured_on` (graph mode): evidence about that class
    /// only. The answer's own `beats` is empty.
    pub beats_on_measured_device: Vec<String>,
    /// The fastest graph-mode baseline measured on `requested_device`, if any was.
    pub requested_device_baseline: Option<BaselineView>,
    /// This same kernel's latest run on `requested_device` (it passed there: a kernel that
    /// failed there is never offered), where one was made without becoming that class's
    /// catalog entry: its figures there, which decide whether it is offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_device_run: Option<RunView>,
}

/// One line of `GET /v1/problems`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProblemView {
    pub problem: Problem,
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`, the path of the kernel URLs.
    pub path: String,
    /// The catalog entry per device class.
    pub best: Vec<BestSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BestSummary {
    pub device_class: DeviceClass,
    pub artifact_sha256: String,
    pub submitter: String,
    /// Graph-mode median, when benchmarked.
    pub median_us: Option<f64>,
    pub tflops: Option<f64>,
    /// Speedups over each baseline as the catalog judges them: graph mode's, each no
    /// higher than the paced mode's where that was timed (large problems).
    #[schema(value_type = Option<Object>)]
    pub speedups: Option<serde_json::Value>,
    /// True when it beat every baseline; `null` when not benchmarked.
    pub beats_baselines: Option<bool>,
}

/// One line of a per-problem leaderboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LeaderboardRow {
    pub rank: u32,
    pub submitter: String,
    pub submission_id: i32,
    pub run_id: i32,
    pub device_class: DeviceClass,
    pub median_us: f64,
    pub tflops: Option<f64>,
    /// Speedup over cuBLASLt-autotune-max (graph mode), when measured.
    pub speedup_vs_autotune_max: Option<f64>,
    pub measured_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProblemLeaderboardView {
    pub problem: Problem,
    pub rows: Vec<LeaderboardRow>,
}

/// One line of the global leaderboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmitterStanding {
    pub rank: u32,
    pub submitter: String,
    /// Catalog entries (device class, problem) currently held.
    pub problems_held: u32,
    /// Problems with at least one passing, benchmarked run.
    pub problems_entered: u32,
    /// Geometric mean of the best speedup over cuBLASLt-autotune-max per problem entered.
    pub geomean_speedup_vs_autotune_max: Option<f64>,
    /// The device classes of the entries held and the problems entered counted here.
    pub device_classes: Vec<DeviceClass>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LeaderboardView {
    /// The device class the standings count (`?device=`); every class when null.
    pub device_class: Option<DeviceClass>,
    /// The device classes with passing runs, to filter by.
    pub device_classes: Vec<DeviceClass>,
    pub submitters: Vec<SubmitterStanding>,
}
