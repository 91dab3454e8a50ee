//! Statistics of timed samples: quantiles, a distribution-free confidence interval of
//! the median, the stopping rule, TFLOP/s, speedups with their bounds, and the random
//! interleaving of contenders per round.
//!
//! Kernel timings are skewed (clock changes, preemption, a cold L2 push a few samples
//! far to the right), so the summary is the median and its interval is one that
//! assumes nothing about the distribution.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Confidence of every interval reported.
pub const CONFIDENCE: f64 = 0.95;

/// The stopping rule's target: the median's interval within ±1%.
pub const DEFAULT_TARGET_REL: f64 = 0.01;

/// Fewest samples for which a 95% interval of the median exists: with n = 6 the
/// sample's extremes cover the median with probability 1 − 2/2⁶ ≈ 0.97; with 5 only 0.94.
pub const MIN_SAMPLES_FOR_CI: usize = 6;

/// How a time was taken (docs/verification.md, the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Device time per launch from replaying a CUDA graph of R launches; ranks results.
    Graph,
    /// Back-to-back direct launches, host overhead included.
    Offline,
    /// Single launches after random idle gaps, gaps not timed.
    Server,
    /// Single launches, each after a pause as long as the contender's own launch during
    /// which the device stays busy at next to no power (a one-thread sleep kernel), pauses
    /// not timed: the clocks a GEMM holds between other work in a model's layer, which
    /// back-to-back launches of a large one pull down to the power limit.
    Paced,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Graph, Mode::Offline, Mode::Server, Mode::Paced];
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Graph => "graph",
            Mode::Offline => "offline",
            Mode::Server => "server",
            Mode::Paced => "paced",
        }
    }
}

/// Summary of one contender's samples in one mode. Times are microseconds per GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Timing {
    pub median_us: f64,
    pub mean_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    /// 95% interval of the median; equal to the median when there are too few samples
    /// for one (see [`Timing::has_ci`]).
    pub ci95_low_us: f64,
    pub ci95_high_us: f64,
    pub samples: u64,
    /// At the median time.
    pub tflops: f64,
}

impl Timing {
    /// Summarises `samples_us` for a GEMM of `flops` operations. `None` when there are
    /// no samples or any is not a positive finite time (a broken timer).
    pub fn from_samples(samples_us: &[f64], flops: f64) -> Option<Timing> {
        if samples_us.is_empty() || samples_us.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return None;
        }
        let sorted = sorted(samples_us);
        let median_us = quantile(&sorted, 0.5)?;
        let (ci95_low_us, ci95_high_us) = median_ci(&sorted, CONFIDENCE).unwrap_or((median_us, median_us));
        Some(Timing {
            median_us,
            mean_us: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p10_us: quantile(&sorted, 0.1)?,
            p90_us: quantile(&sorted, 0.9)?,
            ci95_low_us,
            ci95_high_us,
            samples: sorted.len() as u64,
            tflops: tflops(flops, median_us * 1e-6),
        })
    }

    pub fn has_ci(&self) -> bool {
        self.samples as usize >= MIN_SAMPLES_FOR_CI
    }

    /// The larger side of the median's interval, relative to the median.
    pub fn rel_half_width(&self) -> f64 {
        if !self.has_ci() {
            return f64::INFINITY;
        }
        rel_half_width(self.median_us, self.ci95_low_us, self.ci95_high_us)
    }
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// The `q`-quantile of sorted samples by linear interpolation between closest ranks
/// (Hyndman–Fan type 7, numpy's and R's default): position `h = (n−1)·q`, value
/// `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

pub fn median(samples: &[f64]) -> Option<f64> {
    quantile(&sorted(samples), 0.5)
}

/// 1-based order statistics `(l, u)` whose interval `[x₍l₎, x₍u₎]` covers the
/// population median with probability at least `confidence`, for any continuous
/// distribution.
///
/// Method (binomial, distribution-free): the number of samples below the median is
/// Binomial(n, ½), so `P(x₍l₎ ≤ median ≤ x₍u₎) = P(l ≤ B ≤ u−1)`. Take the symmetric
/// `u = n+1−l` with the largest `l` such that `P(B ≤ l−1) ≤ (1−confidence)/2`. The
/// coverage is then at least `confidence` (a little more: B is discrete). `None` when
/// even the extremes do not reach it (n < 6 at 95%).
pub fn median_ci_ranks(n: usize, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 || !(0.0..1.0).contains(&confidence) {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    // Sum Binomial(n, ½) probabilities from 0 upwards in log space: 2⁻ⁿ underflows
    // for n > 1074, but the terms that matter here do not.
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0f64;
    let mut cdf = 0f64;
    let mut l = 0usize;
    for j in 0..=n / 2 {
        cdf += (ln_choose - ln2n).exp();
        if cdf > tail {
            break;
        }
        // P(B ≤ j) ≤ tail, so x₍j+1₎ may be the lower end.
        l = j + 1;
        ln_choose += ((n - j) as f64).ln() - ((j + 1) as f64).ln();
    }
    if l == 0 { None } else { Some((l, n + 1 - l)) }
}

/// The median's interval `(low, high)` from sorted samples; see [`median_ci_ranks`].
pub fn median_ci(sorted: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let (l, u) = median_ci_ranks(sorted.len(), confidence)?;
    Some((sorted[l - 1], sorted[u - 1]))
}

/// `max(median − low, high − median) / median`: the interval is asymmetric for
/// skewed samples, and "within ±1%" must hold on both sides.
pub fn rel_half_width(median: f64, low: f64, high: f64) -> f64 {
    if median <= 0.0 {
        return f64::INFINITY;
    }
    (median - low).max(high - median) / median
}

/// The stopping rule: every contender has enough samples for a 95% interval of its
/// median and that interval lies within `±target_rel` of the median. The time budget,
/// the other way to stop, is the caller's.
pub fn converged(samples_per_contender: &[&[f64]], target_rel: f64) -> bool {
    !samples_per_contender.is_empty()
        && samples_per_contender.iter().all(|samples| {
            let s = sorted(samples);
            match (quantile(&s, 0.5), median_ci(&s, CONFIDENCE)) {
                (Some(m), Some((lo, hi))) => rel_half_width(m, lo, hi) <= target_rel,
                _ => false,
            }
        })
}

/// Throughput in TFLOP/s (10¹² operations per second).
pub fn tflops(flops: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { flops / seconds / 1e12 } else { 0.0 }
}

/// How many times faster the candidate is than a baseline (> 1: faster), with bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Speedup {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// `baseline median / candidate median`. The bounds divide the ends of the two median
/// intervals crosswise (`baseline low / candidate high`, `baseline high / candidate
/// low`): whenever both intervals hold, so does this one, so for independent runs it
/// covers the true ratio with probability at least 0.95² ≈ 0.90. Conservative, but
/// needing nothing beyond the two intervals already reported.
pub fn speedup(candidate: &Timing, baseline: &Timing) -> Speedup {
    let ratio = |b: f64, c: f64| if c > 0.0 { b / c } else { f64::INFINITY };
    Speedup {
        value: ratio(baseline.median_us, candidate.median_us),
        low: ratio(baseline.ci95_low_us, candidate.ci95_high_us),
        high: ratio(baseline.ci95_high_us, candidate.ci95_low_us),
    }
}

/// The timing with the lowest median: a baseline's `-max` over its NN and TN runs.
pub fn fastest<'a>(timings: impl IntoIterator<Item = &'a Timing>) -> Option<&'a Timing> {
    timings.into_iter().min_by(|a, b| a.median_us.total_cmp(&b.median_us))
}

/// Geometric mean of positive values (speedups over many shapes); `None` if empty or
/// any value is not positive and finite.
pub fn geomean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return None;
    }
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

/// Orders contenders afresh each round, so that no contender always runs first (cold
/// caches, clocks ramping) or right after a particular other one.
#[derive(Debug, Clone)]
pub struct Interleaver {
    rng: StdRng,
}

impl Interleaver {
    pub fn new(seed: u64) -> Self {
        Interleaver { rng: StdRng::seed_from_u64(seed) }
    }

    /// A uniformly random permutation of `0..contenders`.
    pub fn next_round(&mut self, contenders: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..contenders).collect();
        order.shuffle(&mut self.rng);
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::rng::unit_at;

    fn exponential(seed: u64, n: usize) -> Vec<f64> {
        (0..n).map(|i| -(1.0 - unit_at(seed, i as u64)).ln()).collect()
    }

    #[test]
    fn quantiles_interpolate_between_closest_ranks() {
        let s = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(quantile(&s, 0.5), Some(3.0));
        assert_eq!(quantile(&s, 0.0), Some(1.0));
        assert_eq!(quantile(&s, 1.0), Some(10.0));
        let p90 = quantile(&s, 0.9).expect("non-empty");
        assert!((p90 - (4.0 + 0.6 * 6.0)).abs() < 1e-12, "{p90}");
        assert_eq!(quantile(&[1.0, 2.0], 0.5), Some(1.5));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    }

    #[test]
    fn median_ci_ranks_match_binomial_tables() {
        // Standard tables for the 95% sign-test interval.
        assert_eq!(median_ci_ranks(5, 0.95), None);
        assert_eq!(median_ci_ranks(6, 0.95), Some((1, 6)));
        assert_eq!(median_ci_ranks(10, 0.95), Some((2, 9)));
        assert_eq!(median_ci_ranks(20, 0.95), Some((6, 15)));
        assert_eq!(median_ci_ranks(100, 0.95), Some((40, 61)));
        // Large n: close to the normal approximation n/2 ± 1.96·√n/2.
        let (l, u) = median_ci_ranks(100_000, 0.95).expect("large n");
        assert!((l as f64 - (50_000.0 - 1.96 * 158.11)).abs() < 2.0, "{l}");
        assert_eq!(u, 100_001 - l);
    }

    #[test]
    fn the_median_interval_covers_the_true_median_about_95_percent_of_the_time() {
        // Exponential(1): skewed like kernel timings, median ln 2.
        let trials = 2000;
        let covered = (0..trials)
            .filter(|&t| {
                let s = sorted(&exponential(1000 + t, 31));
                let (lo, hi) = median_ci(&s, CONFIDENCE).expect("31 samples suffice");
                lo <= std::f64::consts::LN_2 && std::f64::consts::LN_2 <= hi
            })
            .count() as f64
            / trials as f64;
        // Exact coverage at n = 31 is 0.971; ±3 standard errors of 2000 trials.
        assert!((0.959..=0.983).contains(&covered), "coverage {covered}");
    }

    #[test]
    fn timings_summarise_samples_and_refuse_broken_ones() {
        let samples: Vec<f64> = (1..=100).map(|i| 100.0 + i as f64 / 10.0).collect();
        let t = Timing::from_samples(&samples, 2e9).expect("valid samples");
        assert!((t.median_us - 105.05).abs() < 1e-9);
        assert!(t.ci95_low_us < t.median_us && t.median_us < t.ci95_high_us);
        assert!((t.tflops - 2e9 / 105.05e-6 / 1e12).abs() < 1e-9);
        assert_eq!(t.samples, 100);
        assert!(t.p10_us < t.median_us && t.median_us < t.p90_us);
        assert!(Timing::from_samples(&[], 1.0).is_none());
        assert!(Timing::from_samples(&[1.0, f64::NAN], 1.0).is_none());
        assert!(Timing::from_samples(&[1.0, 0.0], 1.0).is_none());
        let few = Timing::from_samples(&[1.0, 2.0, 3.0], 1.0).expect("valid");
        assert!(!few.has_ci() && few.rel_half_width().is_infinite());
    }

    #[test]
    fn convergence_needs_every_contender_tight_and_sampled_enough() {
        let tight: Vec<f64> = (0..200).map(|i| 100.0 + (i % 7) as f64 * 0.1).collect();
        let loose = exponential(5, 200);
        assert!(converged(&[&tight], DEFAULT_TARGET_REL));
        assert!(!converged(&[&tight, &loose], DEFAULT_TARGET_REL));
        assert!(!converged(&[&tight[..5]], DEFAULT_TARGET_REL));
        assert!(!converged(&[], DEFAULT_TARGET_REL));
        assert!(converged(&[&loose], 10.0));
    }

    fn timing(median: f64, lo: f64, hi: f64) -> Timing {
        Timing { median_us: median, mean_us: median, p10_us: lo, p90_us: hi, ci95_low_us: lo, ci95_high_us: hi, samples: 100, tflops: 0.0 }
    }

    #[test]
    fn speedup_bounds_come_from_crossed_interval_ends() {
        let candidate = timing(100.0, 99.0, 101.0);
        let baseline = timing(110.0, 108.0, 112.0);
        let s = speedup(&candidate, &baseline);
        assert!((s.value - 1.1).abs() < 1e-12);
        assert!((s.low - 108.0 / 101.0).abs() < 1e-12);
        assert!((s.high - 112.0 / 99.0).abs() < 1e-12);
        assert!(s.low < s.value && s.value < s.high);
    }

    #[test]
    fn max_picks_the_faster_layout_and_geomean_multiplies() {
        let nn = timing(120.0, 119.0, 121.0);
        let tn = timing(110.0, 109.0, 111.0);
        assert_eq!(fastest([&nn, &tn]), Some(&tn));
        assert_eq!(fastest(std::iter::empty()), None);
        assert!((geomean(&[2.0, 8.0]).expect("positive") - 4.0).abs() < 1e-12);
        assert_eq!(geomean(&[1.0, 0.0]), None);
        assert_eq!(geomean(&[]), None);
    }

    #[test]
    fn rounds_are_fresh_permutations_reproducible_from_the_seed() {
        let mut a = Interleaver::new(9);
        let mut b = Interleaver::new(9);
        let rounds: Vec<Vec<usize>> = (0..600).map(|_| a.next_round(6)).collect();
        assert_eq!(rounds, (0..600).map(|_| b.next_round(6)).collect::<Vec<_>>());
        for r in &rounds {
            let mut s = r.clone();
            s.sort_unstable();
            assert_eq!(s, (0..6).collect::<Vec<_>>());
        }
        // Each contender leads about 1/6 of the rounds.
        for c in 0..6 {
            let first = rounds.iter().filter(|r| r[0] == c).count();
            assert!((60..=140).contains(&first), "contender {c} first in {first} of 600");
        }
        assert!(rounds.windows(2).any(|w| w[0] != w[1]));
        assert!(Interleaver::new(1).next_round(0).is_empty());
    }
}
