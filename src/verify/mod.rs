//! Verification of a candidate kernel's output, host side: the verdict words, the
//! binary exact test, the baseline-bounded deviation test, and the containment checks
//! (NaN poison, canaries, unchanged inputs). The GPU layer fills buffers, launches and
//! reads back; everything that decides pass or fail lives here and needs no GPU.

pub mod binary;
pub mod containment;
pub mod deviation;
pub mod rng;
pub mod spot;

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use binary::{BinaryReference, ExactReport, Mismatch, binary_density, fill_binary};
pub use containment::{Finding, GuardedLayout, POISON_BITS, canary_pattern, check_canary, find_changed, find_non_finite, find_unwritten};
pub use deviation::{CpuReference, Deviation, DeviationBound, ErrorNorms, error_norms, max_abs_deviation, ulp_f16};

/// The outcome of one run's verification. The names are stable: they are stored,
/// served by the API and counted in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    StaticInvalid,
    LoadFailed,
    ExactMismatch,
    DeviationExceeded,
    UnwrittenOutput,
    OutOfBoundsWrite,
    InputModified,
    NonFinite,
    Timeout,
    Crashed,
    LaunchFailed,
    Unstable,
    ScheduleDependent,
    TimingDependent,
    RepeatDependent,
    WorkerLost,
    InternalError,
}

impl Verdict {
    pub const ALL: [Verdict; 18] = [
        Verdict::Pass,
        Verdict::StaticInvalid,
        Verdict::LoadFailed,
        Verdict::ExactMismatch,
        Verdict::DeviationExceeded,
        Verdict::UnwrittenOutput,
        Verdict::OutOfBoundsWrite,
        Verdict::InputModified,
        Verdict::NonFinite,
        Verdict::Timeout,
        Verdict::Crashed,
        Verdict::LaunchFailed,
        Verdict::Unstable,
        Verdict::ScheduleDependent,
        Verdict::TimingDependent,
        Verdict::RepeatDependent,
        Verdict::WorkerLost,
        Verdict::InternalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::StaticInvalid => "static_invalid",
            Verdict::LoadFailed => "load_failed",
            Verdict::ExactMismatch => "exact_mismatch",
            Verdict::DeviationExceeded => "deviation_exceeded",
            Verdict::UnwrittenOutput => "unwritten_output",
            Verdict::OutOfBoundsWrite => "out_of_bounds_write",
            Verdict::InputModified => "input_modified",
            Verdict::NonFinite => "non_finite",
            Verdict::Timeout => "timeout",
            Verdict::Crashed => "crashed",
            Verdict::LaunchFailed => "launch_failed",
            Verdict::Unstable => "unstable",
            Verdict::ScheduleDependent => "schedule_dependent",
            Verdict::TimingDependent => "timing_dependent",
            Verdict::RepeatDependent => "repeat_dependent",
            Verdict::WorkerLost => "worker_lost",
            Verdict::InternalError => "internal_error",
        }
    }

    /// One line for people: what was observed.
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Pass => "passed every verification step",
            Verdict::StaticInvalid => "the PTX or manifest failed the static checks or ptxas",
            Verdict::LoadFailed => "the driver could not JIT-load the PTX",
            Verdict::ExactMismatch => "an output of the {0,1} exact test differs from the exact count",
            Verdict::DeviationExceeded => "the deviation from the fp32 reference exceeds the bound set by the baselines",
            Verdict::UnwrittenOutput => "some outputs were never written (NaN poison left in C)",
            Verdict::OutOfBoundsWrite => "a canary region next to a buffer was overwritten",
            Verdict::InputModified => "the kernel changed A or B",
            Verdict::NonFinite => "the output contains NaN or Inf",
            Verdict::Timeout => "a launch did not finish before the watchdog fired",
            Verdict::Crashed => "the sandbox process died (illegal address, trap or kill)",
            Verdict::LaunchFailed => "the driver refused the launch (configuration or resources)",
            Verdict::Unstable => "a timed iteration's output differs from the verified output",
            Verdict::ScheduleDependent => "the output changed with block scheduling (a race between blocks): wrong under a co-running kernel",
            Verdict::TimingDependent => "a launch inside a timed back-to-back sequence left a stale or wrong output",
            Verdict::RepeatDependent => "the output or the speed depends on having seen the same inputs before: wrong after part of the inputs changed, or much slower on fresh inputs than on repeated ones",
            Verdict::WorkerLost => "every attempt ended with its worker dead or its lease lost; the job was given up",
            Verdict::InternalError => "the service failed; the kernel was not judged",
        }
    }

    pub fn is_pass(self) -> bool {
        self == Verdict::Pass
    }

    /// Whether the kernel (its PTX or manifest) is to blame. Only a pass and the
    /// service's own failures are not; those runs may be retried, the others not.
    pub fn is_kernel_fault(self) -> bool {
        !matches!(self, Verdict::Pass | Verdict::InternalError)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| format!("unknown verdict `{s}`"))
    }
}

/// The harness handed a check inconsistent data: a service bug, never the kernel's
/// fault, so it becomes [`Verdict::InternalError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifyError {
    #[error("{what} has {got} elements, expected {expected}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("{operand}[{index}] = {value} is not 0 or 1 in a binary test input")]
    NotBinary { operand: &'static str, index: usize, value: f32 },
    #[error("{0}")]
    Invalid(String),
}

impl VerifyError {
    pub fn verdict(&self) -> Verdict {
        Verdict::InternalError
    }
}

pub(crate) fn expect_len(what: &'static str, got: usize, expected: usize) -> Result<(), VerifyError> {
    if got == expected { Ok(()) } else { Err(VerifyError::Length { what, expected, got }) }
}

/// Splits `0..len` into about one chunk per core, runs `f` on each in a scoped thread
/// and returns the results in chunk order. Host-side checks of a 16k×16k output are
/// seconds of work; the worker's cores are otherwise idle during verification.
pub(crate) fn par_chunks<T: Send>(len: usize, f: impl Fn(std::ops::Range<usize>) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(len.max(1));
    let chunk = len.div_ceil(threads.max(1)).max(1);
    if threads <= 1 {
        return vec![f(0..len)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..len)
            .step_by(chunk)
            .map(|start| {
                let f = &f;
                s.spawn(move || f(start..(start + chunk).min(len)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_names_are_stable_snake_case_and_round_trip() {
        assert_eq!(serde_json::to_string(&Verdict::OutOfBoundsWrite).unwrap(), "\"out_of_bounds_write\"");
        for v in Verdict::ALL {
            assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{v}\""));
            assert_eq!(v.as_str().parse::<Verdict>().unwrap(), v);
            assert!(!v.describe().is_empty());
        }
        assert!("passed".parse::<Verdict>().is_err());
    }

    #[test]
    fn only_pass_and_internal_errors_are_not_the_kernels_fault() {
        let blameless: Vec<Verdict> = Verdict::ALL.into_iter().filter(|v| !v.is_kernel_fault()).collect();
        assert_eq!(blameless, [Verdict::Pass, Verdict::InternalError]);
    }

    #[test]
    fn parallel_chunks_cover_the_range_in_order() {
        for len in [0, 1, 7, 1000] {
            let parts = par_chunks(len, |r| r.collect::<Vec<_>>());
            let all: Vec<usize> = parts.into_iter().flatten().collect();
            assert_eq!(all, (0..len).collect::<Vec<_>>());
        }
    }
}
