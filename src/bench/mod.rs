//! The benchmark, host side: the statistics that summarise timed samples, decide when
//! to stop, and compare a candidate with the baselines. The GPU layer takes the
//! samples; what they mean is decided here.

pub mod autotune;
pub mod baselines;
pub mod runner;
pub mod stats;

pub use runner::{BaselineSlot, BenchConfig, BenchReport, ContenderTimings, DeviceState, Library, benchmark, speedups};
pub use stats::{Interleaver, Mode, Speedup, Timing, converged, fastest, geomean, median_ci, quantile, speedup, tflops};
