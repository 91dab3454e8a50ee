//! What the submission endpoints answer with.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::catalog::{ArtifactView, BaselineView, RunView};
use crate::manifest::Manifest;
use crate::manifest::template::ManifestTemplate;
use crate::problem::Problem;
use crate::signing::{Record, RecordSignature};
use crate::verify::Verdict;
use crate::problem::DeviceClass;

/// `POST /v1/submissions`: a PTX artifact and what to run it on.
///
/// Give the PTX inline (`ptx`), name one uploaded before (`artifact_sha256`), or give
/// CUDA C++ source for the service to compile (`cuda_source`, with `compile_options`);
/// and either one manifest per problem (`manifests`) or one `template` with the
/// `problems` it applies to (for kernels that read M, N, K at run time). With source,
/// each launch's `entry` is an `extern "C"` kernel's name or an NVRTC name expression
/// (`gemm<128, 128, 64>`), and the stored manifests name the compiled kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSubmission {
    /// PTX text.
    #[serde(default)]
    pub ptx: Option<String>,
    /// Or the sha256 of an artifact already stored (`POST /v1/artifacts`).
    #[serde(default)]
    pub artifact_sha256: Option<String>,
    /// One `kaas.hgemm.v1` manifest per target problem.
    #[serde(default)]
    pub manifests: Vec<Manifest>,
    /// Or one template (grid extents as expressions of M, N, K) …
    #[serde(default)]
    pub template: Option<ManifestTemplate>,
    /// … and the shapes it is for, as `MxNxK`.
    #[serde(default)]
    pub problems: Vec<String>,
    /// Device classes to run on; the classes of the workers seen lately when absent.
    #[serde(default)]
    pub device_classes: Option<Vec<String>>,
    /// No control characters but newline and tab.
    #[serde(default)]
    #[schema(pattern = "^[^\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F]*$")]
    pub name: Option<String>,
    /// No control characters but newline and tab.
    #[serde(default)]
    #[schema(pattern = "^[^\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F]*$")]
    pub description: Option<String>,
    /// The CUDA C++ source, shown with the kernel (never compiled by the service).
    #[serde(default)]
    pub source: Option<String>,
    /// CUDA C++ source the service compiles with NVRTC into PTX for the manifests' arch
    /// (instead of `ptx`/`artifact_sha256`; it is then also the shown `source`). Only the
    /// CUDA headers and CUTLASS/CuTe may be included.
    #[serde(default)]
    pub cuda_source: Option<String>,
    /// Options for compiling `cuda_source`.
    #[serde(default)]
    pub compile_options: Option<crate::compile::CompileOptions>,
}

/// One job: one problem on one device class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    pub id: i32,
    pub problem: Problem,
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub path: String,
    /// `null`: the first worker able to run the arch takes it.
    pub device_class: Option<DeviceClass>,
    /// `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// What it is doing now, e.g. `running on worker host/gpu0`.
    pub stage: Option<String>,
    pub attempts: i32,
    /// Why the last attempt ended without a run.
    pub error: Option<String>,
    pub updated_at: DateTime<Utc>,
    /// The run, once stored.
    pub run: Option<JobRunView>,
}

/// A stored run, with the verification details a kernel author needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobRunView {
    #[serde(flatten)]
    pub run: RunView,
    /// The stage that decided, every check, ptxas and JIT reports, benchmark meta.
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
    /// Whether this run became the catalog entry for its problem and device class.
    pub in_catalog: bool,
    /// What the service vouches for about this run (docs/signing.md).
    pub record: Record,
    /// The service's Ed25519 signature over `record`; the HTTP API always sets it.
    pub signature: Option<RecordSignature>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmissionLinks {
    #[serde(rename = "self")]
    pub self_: String,
    /// Server-sent events: a `snapshot` on every change, `done` at the end.
    pub events: String,
    pub artifact: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmissionView {
    pub id: i32,
    pub submitter: String,
    pub name: String,
    pub description: String,
    /// `queued`, `running`, `done`, `cancelled` or `deleted`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub artifact: ArtifactView,
    pub has_source: bool,
    /// The source the artifact was compiled from, when the service compiled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// How the service compiled `source` (enough to rebuild the same PTX); absent for
    /// PTX submissions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::compile::BuildInfo>,
    pub jobs: Vec<JobView>,
    pub links: SubmissionLinks,
}

impl SubmissionView {
    /// True when no job will change any more.
    pub fn finished(&self) -> bool {
        self.jobs.iter().all(|j| super::state::is_terminal(&j.state))
    }
}

/// A submitter's submissions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmissionSummary {
    pub id: i32,
    pub submitter: String,
    pub name: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub artifact_sha256: String,
    pub jobs: usize,
    pub passed: usize,
}

/// A worker as `/v1/health` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    pub id: String,
    pub device_class: Option<DeviceClass>,
    pub gpu_name: Option<String>,
    /// `idle`, `busy`, `stopped` or `no_gpu`.
    pub state: String,
    pub job_id: Option<i32>,
    pub message: Option<String>,
    pub last_seen_at: DateTime<Utc>,
}

/// What a tune stores as its result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TuneResult {
    /// The verdict of the last candidate verified (or why none was).
    pub verdict: Option<Verdict>,
    pub message: String,
    /// The code that was verified last, e.g. `128x256x64 c2`.
    pub code: Option<String>,
    /// Whether its run became the catalog entry.
    pub promoted: bool,
    /// Its graph-mode speedup over cuBLASLt-autotune-max.
    pub speedup: Option<f64>,
    /// `baseline_faster`: the fastest measured baseline, with the configuration to use.
    pub use_instead: Option<BaselineView>,
}
