//! The benchmark, host side: the statistics that summarise timed samples, decide when
//! to stop, and compare a candidate with the baselines. The GPU side (timing the
//! contenders side by side, the baselines, cuBLASLt's autotuning) is in
//! [`crate::harness`]; what the samples mean is decided here, without a GPU.

pub mod stats;

pub use stats::{Interleaver, Mode, Speedup, Timing, converged, fastest, geomean, median_ci, quantile, speedup, tflops};
