//! The verification pipeline: one candidate (PTX + `kaas.hgemm.v1` manifest) judged on
//! this process's GPU, in docs/verification.md's order — static checks, JIT load, the binary
//! exact test (fresh seeds, the secret seed, a repeat), the baseline-bounded deviation test,
//! the race stage —
//! with the containment checks after every launch sequence. The first failure ends the
//! run with its [`Verdict`] and a message that names the stage, the element and what was
//! expected. Untrusted PTX runs only in `kaas sandbox` (see [`crate::sandbox`]); this
//! module is what runs inside it.
//!
//! The GPU side of the benchmark is here too: the side-by-side timing of a candidate and
//! the baselines ([`runner`]), the baselines themselves ([`baselines`]) and cuBLASLt's
//! autotuning ([`autotune`]); their statistics and decisions are in [`crate::bench`].
//!
//! Types here ([`Job`], [`RunOutcome`]) are the sandbox's JSON protocol.

pub mod autotune;
pub mod baselines;
pub mod bench;
pub mod fresh;
pub mod guarded;
mod pipeline;
pub mod runner;
pub mod sequence;
mod stages;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::gpu::DeviceFacts;
use crate::manifest::Manifest;
use crate::problem::Problem;
use crate::ptx::ptxas::FunctionResources;
use crate::verify::Verdict;

pub use bench::{BenchSettings, bench_candidate};
pub use runner::{BaselineSlot, BenchConfig, BenchReport, ContenderTimings, DeviceState, Library, benchmark, speedups};
pub use pipeline::verify_candidate;
pub use stages::{device_limits, max_ptx_version_for_driver, ptxas_arch, static_checks};

/// One run to judge: what the sandbox reads on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The PTX text.
    pub ptx: String,
    /// How to launch it; its `problem` is the problem judged.
    pub manifest: Manifest,
    /// Seed of the one binary test the submitter cannot know. Never echoed in results.
    pub secret_seed: u64,
    /// Per-launch watchdog; [`watchdog_limit`] of the problem when absent.
    #[serde(default)]
    pub watchdog_ms: Option<u64>,
    /// Benchmark settings, passed through untouched for the benchmark runner.
    #[serde(default)]
    pub bench: Option<serde_json::Value>,
}

impl Job {
    pub fn problem(&self) -> &Problem {
        &self.manifest.problem
    }

    /// The watchdog that applies to each launch of this job.
    pub fn watchdog(&self) -> Duration {
        self.watchdog_ms.map_or_else(|| watchdog_limit(self.problem()), Duration::from_millis)
    }

    /// A wall-clock limit that covers a whole verification: start-up, the CPU references,
    /// and every launch sequence ([`VERIFY_LAUNCH_SEQUENCES`]) at its watchdog; plus the
    /// benchmark's time when the job asks for one (see [`BenchSettings::wall_time`]).
    pub fn wall_limit(&self) -> Duration {
        let bench = BenchSettings::of(self).ok().flatten().map_or(Duration::ZERO, |s| s.wall_time() + self.watchdog());
        Duration::from_secs(30) + self.watchdog() * VERIFY_LAUNCH_SEQUENCES + bench
    }
}

/// Launch sequences a verification runs (12 today: four of the binary exact test, one
/// deviation run, seven of the race stage), derived from the pipeline's own counts.
pub const VERIFY_LAUNCH_SEQUENCES: u32 = pipeline::LAUNCH_SEQUENCES;

/// One check that ran, for the run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// E.g. `static`, `ptxas`, `load`, `binary run 2 (secret seed)`, `deviation`.
    pub name: String,
    pub passed: bool,
    /// What was checked and found (or the failure message).
    pub detail: String,
    pub duration_ms: f64,
}

/// What `ptxas -v` reported, when ptxas was available.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PtxasSummary {
    /// The target it assembled for, e.g. `sm_90`.
    pub arch: String,
    pub functions: Vec<FunctionResources>,
    pub log: String,
}

/// The result of one run: what the sandbox writes on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub verdict: Verdict,
    /// The stage that decided, e.g. `static`, `binary exact test`, `sandbox`.
    pub stage: String,
    /// For the kernel's author: what failed, where, expected against found.
    pub message: String,
    /// The GPU it ran on; absent when no device was opened.
    #[serde(default)]
    pub device: Option<DeviceFacts>,
    #[serde(default)]
    pub checks: Vec<CheckReport>,
    #[serde(default)]
    pub ptxas: Option<PtxasSummary>,
    /// What the driver's JIT said while loading the PTX.
    #[serde(default)]
    pub jit_log: Option<String>,
    /// True when the device can no longer be used by this process (a launch hung or
    /// faulted): the sandbox then exits without tearing anything down.
    #[serde(default)]
    pub device_lost: bool,
    #[serde(default)]
    pub duration_ms: f64,
    /// Extension point: the benchmark runner's result, filled in after a `pass` by the
    /// caller that benchmarks (verification never sets it).
    #[serde(default)]
    pub bench: Option<serde_json::Value>,
}

impl RunOutcome {
    /// An outcome decided before any check ran (bad job, no device, sandbox failure).
    pub fn early(verdict: Verdict, stage: impl Into<String>, message: impl Into<String>) -> RunOutcome {
        RunOutcome {
            verdict,
            stage: stage.into(),
            message: message.into(),
            device: None,
            checks: Vec::new(),
            ptxas: None,
            jit_log: None,
            device_lost: false,
            duration_ms: 0.0,
            bench: None,
        }
    }
}

/// Fixed part of the per-launch watchdog: module load on first launch, clocks ramping.
pub const WATCHDOG_BASE: Duration = Duration::from_secs(2);
/// The slowest rate a launch is allowed: 0.5 TFLOP/s, a hundredth of what a plain
/// tensor-core kernel reaches on the GPUs served, so only a kernel that is stuck (or
/// built to stall) meets the watchdog.
pub const WATCHDOG_FLOOR_FLOPS_PER_SEC: f64 = 5e11;
/// No launch may take longer than this, whatever the problem.
pub const WATCHDOG_MAX: Duration = Duration::from_secs(120);

/// The per-launch watchdog for a problem: `2 s + 2·M·N·K / 0.5 TFLOP/s`, at most 120 s
/// (16384³: 19.6 s; 4096³: 2.3 s; anything under 1024³: about 2 s).
pub fn watchdog_limit(problem: &Problem) -> Duration {
    let secs = problem.shape().flops() / WATCHDOG_FLOOR_FLOPS_PER_SEC;
    (WATCHDOG_BASE + Duration::from_secs_f64(secs)).min(WATCHDOG_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Layout, Shape};

    fn problem(m: u32, n: u32, k: u32) -> Problem {
        Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"))
    }

    #[test]
    fn the_watchdog_grows_with_the_work_and_is_capped() {
        assert_eq!(watchdog_limit(&problem(64, 64, 64)).as_millis(), 2000);
        let big = watchdog_limit(&problem(16384, 16384, 16384));
        assert!((19.5..19.7).contains(&big.as_secs_f64()), "{big:?}");
        let mid = watchdog_limit(&problem(4096, 4096, 4096));
        assert!((2.2..2.4).contains(&mid.as_secs_f64()), "{mid:?}");
        assert_eq!(watchdog_limit(&problem(65536, 65536, 65536)), WATCHDOG_MAX);
        // Monotone in each extent.
        assert!(watchdog_limit(&problem(8192, 8192, 8192)) > mid);
    }

    #[test]
    fn a_job_round_trips_through_json_and_refuses_unknown_fields() {
        let p = problem(256, 256, 1024);
        let job = Job {
            ptx: ".version 8.0\n.target sm_90\n.address_size 64\n".into(),
            manifest: manifest_for(&p, &SimpleConfig::SMALL),
            secret_seed: u64::MAX - 5,
            watchdog_ms: Some(1500),
            bench: Some(serde_json::json!({"budget_s": 3})),
        };
        let text = serde_json::to_string(&job).expect("serialise");
        let back: Job = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, job);
        assert_eq!(back.secret_seed, u64::MAX - 5, "u64 seeds survive JSON exactly");
        assert_eq!(back.watchdog(), Duration::from_millis(1500));

        let mut value: serde_json::Value = serde_json::from_str(&text).expect("value");
        value["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<Job>(value).is_err());

        // Optional fields may be left out.
        let minimal = serde_json::json!({"ptx": "x", "manifest": job.manifest, "secret_seed": 7});
        let minimal: Job = serde_json::from_value(minimal).expect("minimal job");
        assert_eq!(minimal.watchdog(), watchdog_limit(&p));
        assert_eq!(minimal.bench, None);
    }

    #[test]
    fn an_outcome_round_trips_with_its_verdict_as_a_word() {
        let mut o = RunOutcome::early(Verdict::Timeout, "binary exact test", "launch 0 did not finish");
        o.checks.push(CheckReport { name: "static".into(), passed: true, detail: "ok".into(), duration_ms: 1.5 });
        let text = serde_json::to_string(&o).expect("serialise");
        assert!(text.contains("\"verdict\":\"timeout\""), "{text}");
        assert_eq!(serde_json::from_str::<RunOutcome>(&text).expect("parse"), o);
    }
}
