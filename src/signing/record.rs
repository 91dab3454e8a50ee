//! The run record: what the service vouches for about one verification + benchmark run.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::manifest::Manifest;
use crate::problem::Problem;
use crate::problem::DeviceClass;

/// `format` of every record; a verifier refuses others.
pub const RECORD_FORMAT: &str = "kaas.record.v1";

/// One run as the service signs it. The signature covers the canonical JSON of exactly
/// these members (docs/signing.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Record {
    /// `kaas.record.v1`.
    pub format: String,
    pub run_id: i32,
    /// The submission the run belongs to; `null` for runs imported with a catalog bundle.
    pub submission_id: Option<i32>,
    /// sha256 of the PTX (`kernel.ptx` of `kaas pull`).
    pub artifact_sha256: String,
    /// The launch manifest the run used (`manifest.json` of `kaas pull`).
    pub manifest: Manifest,
    pub problem: Problem,
    pub device_class: DeviceClass,
    /// `pass` or the failing verdict.
    pub verdict: String,
    pub message: String,
    /// Every verification check that ran (name, passed, detail, ms), as the worker stored
    /// them; `null` for runs imported with a catalog bundle.
    #[schema(value_type = Option<Object>)]
    pub checks: Option<serde_json::Value>,
    /// Timing statistics per mode (`graph`, `offline`, `server`, `paced`), as stored.
    #[schema(value_type = Option<Object>)]
    pub timings: Option<serde_json::Value>,
    /// `{mode: {baseline: speedup}}`, as stored.
    #[schema(value_type = Option<Object>)]
    pub speedups: Option<serde_json::Value>,
    /// The cache regime of `timings` and `speedups` (`l2_cold`, or `rotation_3_sets` for
    /// runs timed before regimes were named); absent when not benchmarked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regime: Option<String>,
    /// The figures of every regime the run was timed in, as stored; absent for runs
    /// timed before regimes were named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub regimes: Option<serde_json::Value>,
    /// The GPU's facts: model, driver, CUDA and cuBLAS versions, clocks, temperature.
    #[schema(value_type = Option<Object>)]
    pub device: Option<serde_json::Value>,
    pub measured_at: DateTime<Utc>,
}

impl Record {
    /// The record as the JSON value that is signed and served.
    pub fn to_value(&self) -> serde_json::Value {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
