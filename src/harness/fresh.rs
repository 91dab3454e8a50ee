//! The fresh-input stage, the benchmark's last: the time a run records must be the time
//! of launches that computed their result from the inputs they were given.
//!
//! Why: the timed rounds give every buffer set its own workspace and never change a
//! set's inputs while it is timed. A kernel that keeps a memo of its output in the
//! workspace (or leaves C as it is), keyed by a sample or a hash of its inputs, answers
//! every timed launch from the memo; its outputs are right, so neither the re-check nor
//! the timed-sequence check sees anything, and one such kernel showed 16× where there
//! was nothing (a memo keyed by a sample is also wrong whenever the inputs change only
//! outside the sample: the binary test's last run catches that one).
//!
//! The stage times, for each regime, three CUDA graphs over the regime's buffer sets,
//! each of the timed sequence's length `R` (launch `i` on set `i mod sets`, as timed):
//!
//! - `same`: the candidate's launches alone, exactly the timed graph, replayed right
//!   after an untimed replay of itself, so that whatever it keeps from one launch on a
//!   set to the next is in place (as in the timed rounds);
//! - `fresh`: before every launch, a refresh of that set's inputs: all of A rewritten
//!   with new values and [`B_TOUCHES`] random elements of B changed, from seeds no launch
//!   repeats (`kaas_refresh_inputs`): no memo, sampled or hashed, ever matches, and an
//!   incremental update of the previous product costs a whole product (A changed
//!   everywhere). Where rewriting all of A would cost more than [`REFRESH_SHARE`] of
//!   the kernel (a large A against little work), about one 32-byte sector in `s` is
//!   rewritten instead, picked at random each launch ([`sector_stride`]): a memo still
//!   misses or answers stale (and the output check refuses it), and finding which
//!   sectors changed means reading all of A, which is most of such a kernel's traffic;
//! - `refresh`: the refreshes alone, whose time is subtracted from `fresh`.
//!
//! The fresh-input figure `(fresh − refresh) / R` must not exceed the timed one
//! `same / R` by more than [`TOLERANCE`] of it plus [`REFRESH_TOLERANCE`] of the
//! subtracted refresh, nor by more than [`SLACK_US`] per launch (medians over [`ROUNDS`]
//! rounds, each round's three replays side by side); otherwise the verdict is
//! `repeat_dependent`, naming both times. After the rounds one more `fresh` replay runs
//! and the output of its last launch must be within the deviation bound on the inputs
//! it was given. The refresh writes A just before the launch that reads it, so for an
//! honest kernel the fresh figure is, if anything, the faster one (A sits in the L2):
//! the test is one-sided.

use serde::Serialize;

use super::pipeline::{BoundOn, Judged};
use super::stages::StageFailure;
use super::Job;
use crate::gpu::{Contender, DeviceBuffer, Gpu, GpuError, GraphTimer, Operands, PreparedManifest, a_len, b_len, checks};
use crate::verify::Verdict;
use crate::verify::rng::derive_seed;

const STAGE: &str = "fresh-input timing";

/// Elements of B each refresh changes (A is rewritten whole): a memo keyed by A alone
/// then gives a stale product in the columns these reach.
pub const B_TOUCHES: u32 = 64;

/// Rounds of the three timed replays.
pub const ROUNDS: usize = 5;

/// How much slower per launch than the timed figure the fresh-input one may be, as a
/// fraction, before the run is refused (beyond [`SLACK_US`] as well). The timed figures
/// resolve about ±1%; the subtraction of the refresh adds its own noise.
pub const TOLERANCE: f64 = 0.10;

/// Absolute slack per launch, µs: graph nodes of a few µs carry a fraction of a µs of
/// scheduling noise that no ratio should be judged on.
pub const SLACK_US: f64 = 0.5;

/// The share of the subtracted refresh that may show as excess: the rewrite's dirty
/// lines are written back while the next launch runs, so the two do not add exactly
/// (catalog kernels on an H200 read 1.11× with a refresh 2.5× their own time).
pub const REFRESH_TOLERANCE: f64 = 0.1;

/// The most of the kernel's time a refresh may take; a larger A is rewritten in part.
pub const REFRESH_SHARE: f64 = 0.25;

/// The sparsest partial rewrite: about one 32-byte sector in this many.
pub const MAX_SECTOR_STRIDE: u32 = 16;

/// One sector in how many a refresh rewrites, given what a full rewrite and the timed
/// sequence took (any common unit): the smallest power of two that brings the rewrite
/// within [`REFRESH_SHARE`] of the kernel, at most [`MAX_SECTOR_STRIDE`].
pub fn sector_stride(full_refresh: f64, same: f64) -> u32 {
    // A comparison with NaN is no fit: the sparsest rewrite then.
    let fits = |stride: u32| (full_refresh / f64::from(stride)).partial_cmp(&(REFRESH_SHARE * same)).is_some_and(|o| o.is_le());
    let mut stride = 1;
    while stride < MAX_SECTOR_STRIDE && !fits(stride) {
        stride *= 2;
    }
    stride
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Same,
    Fresh,
    Refresh,
}

/// One of the stage's sequences as a [`Contender`]: `enqueue` queues all `launches` of
/// it, so that it is captured into a graph as it stands.
struct Sequence<'s, 'a> {
    kind: Kind,
    prepared: &'s [PreparedManifest<'a>],
    ops: &'s [Operands],
    launches: usize,
    counter: &'s DeviceBuffer,
    secret: u64,
    lens: (usize, usize),
    stride: u32,
}

impl Contender for Sequence<'_, '_> {
    fn label(&self) -> String {
        self.prepared.first().map(|p| p.label()).unwrap_or_default()
    }

    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        // Launch `i` on set `i mod sets`, as the timed graph (at least one set: see
        // check_fresh_inputs).
        for i in 0..self.launches {
            let s = i % self.ops.len();
            if self.kind != Kind::Same {
                let ops = &self.ops[s];
                checks::refresh_inputs(gpu, &ops.a, self.lens.0, self.stride, &ops.b, self.lens.1, B_TOUCHES, self.counter, self.secret)?;
            }
            if self.kind != Kind::Refresh {
                self.prepared[s].enqueue(gpu)?;
            }
        }
        Ok(())
    }
}

/// One round's three replays, µs per whole sequence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RoundTimes {
    pub same_us: f64,
    pub fresh_us: f64,
    pub refresh_us: f64,
}

/// What the rounds say, per launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Median over rounds of the timed sequence, per launch.
    pub same_us: f64,
    /// Median over rounds of `fresh − refresh`, per launch.
    pub fresh_us: f64,
    /// Median over rounds of the refreshes alone, per launch.
    pub refresh_us: f64,
    /// Median over rounds of `(fresh − refresh) / same`.
    pub ratio: f64,
    /// Each round's ratio, for the record.
    pub ratios: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Figures {
    pub fn of(rounds: &[RoundTimes], launches: usize) -> Figures {
        let r = launches.max(1) as f64;
        let ratios: Vec<f64> = rounds.iter().map(|t| (t.fresh_us - t.refresh_us) / t.same_us).collect();
        Figures {
            same_us: median(rounds.iter().map(|t| t.same_us / r).collect()),
            fresh_us: median(rounds.iter().map(|t| (t.fresh_us - t.refresh_us) / r).collect()),
            refresh_us: median(rounds.iter().map(|t| t.refresh_us / r).collect()),
            ratio: median(ratios.clone()),
            ratios,
        }
    }

    /// The excess per launch fresh inputs may show: [`TOLERANCE`] of the timed figure
    /// and [`REFRESH_TOLERANCE`] of the refresh, or [`SLACK_US`] if that is more.
    pub fn allowed_excess_us(&self) -> f64 {
        (TOLERANCE * self.same_us + REFRESH_TOLERANCE * self.refresh_us).max(SLACK_US)
    }

    /// Whether the timed figure holds: fresh inputs cost at most
    /// [`Figures::allowed_excess_us`] more per launch. A figure that is not a number
    /// fails (fail closed).
    pub fn holds(&self) -> bool {
        let excess = self.fresh_us - self.same_us;
        self.ratio.is_finite() && excess.is_finite() && excess <= self.allowed_excess_us()
    }
}

/// What the stage found in one regime, for `bench.fresh_inputs`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub regime: &'static str,
    pub buffer_sets: usize,
    pub launches: usize,
    pub b_touches: u32,
    /// About one 32-byte sector of A in this many was rewritten before each launch.
    pub sector_stride: u32,
    /// What rewriting all of A took, µs per launch (what chose the stride).
    pub full_refresh_us: f64,
    pub figures: Figures,
    pub passed: bool,
    pub max_abs_deviation: Option<f64>,
    pub bound: Option<f64>,
    pub detail: String,
}

/// Runs the stage for one regime: `ops` and `prepared` are its buffer sets (the
/// candidate's own), `launches` the timed sequence's length. The sets' A and B are
/// left changed. A failure is the stage's verdict, with the report that explains it.
pub fn check_fresh_inputs(gpu: &Gpu, job: &Job, regime: &'static str, ops: &[Operands], prepared: &[PreparedManifest], launches: u32) -> Result<(Report, Option<StageFailure>), StageFailure> {
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, STAGE, format!("the harness failed: {e}"));
    let crashed = |e: GpuError| StageFailure::new(Verdict::Crashed, STAGE, format!("the candidate failed in a sequence of fresh inputs: {e}"));
    let sets = ops.len().min(prepared.len());
    if sets == 0 {
        return Err(StageFailure::new(Verdict::InternalError, STAGE, "the harness failed: no buffer set to time"));
    }
    let launches = (launches.max(1) as usize).max(sets);
    let counter = gpu.alloc(8).map_err(harness)?;
    counter.zero(gpu).map_err(harness)?;
    let secret = derive_seed(job.secret_seed, 0xF5E5);
    let seq = |kind, stride| Sequence { kind, prepared: &prepared[..sets], ops: &ops[..sets], launches, counter: &counter, secret, lens: (a_len(&p), b_len(&p)), stride };
    let same = seq(Kind::Same, 1);
    let same_graph = GraphTimer::capture(gpu, &same, 1).map_err(crashed)?;
    // How long the kernel and a full rewrite of A take decides how much of A to rewrite.
    same_graph.replay(gpu).map_err(crashed)?;
    let same_probe = same_graph.replay(gpu).map_err(crashed)?;
    let full = GraphTimer::capture(gpu, &seq(Kind::Refresh, 1), 1).map_err(harness)?;
    full.replay(gpu).map_err(harness)?;
    let full_refresh = full.replay(gpu).map_err(harness)?;
    drop(full);
    let stride = sector_stride(full_refresh, same_probe);
    let (fresh, refresh) = (seq(Kind::Fresh, stride), seq(Kind::Refresh, stride));
    let fresh_graph = GraphTimer::capture(gpu, &fresh, 1).map_err(crashed)?;
    let refresh_graph = GraphTimer::capture(gpu, &refresh, 1).map_err(harness)?;
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        // Alternate which of fresh and refresh goes first, against drift.
        let (fresh_us, refresh_us) = if round % 2 == 0 {
            let f = fresh_graph.replay(gpu).map_err(crashed)?;
            (f, refresh_graph.replay(gpu).map_err(harness)?)
        } else {
            let r = refresh_graph.replay(gpu).map_err(harness)?;
            (fresh_graph.replay(gpu).map_err(crashed)?, r)
        };
        // The inputs just changed: one untimed replay puts whatever the kernel keeps
        // between launches back in place, as it is when timed.
        same_graph.replay(gpu).map_err(crashed)?;
        let same_us = same_graph.replay(gpu).map_err(crashed)?;
        rounds.push(RoundTimes { same_us, fresh_us, refresh_us });
    }
    let figures = Figures::of(&rounds, launches);
    let rewritten = if stride == 1 { "all of A".to_string() } else { format!("about one 32-byte sector of A in {stride}") };
    let timed = format!(
        "timed on unchanged inputs {:.2} µs per launch; on fresh inputs {:.2} µs ({rewritten} rewritten and {B_TOUCHES} elements of B changed before each launch: {:.2} µs with the rewrite, whose {:.2} µs alone are subtracted), {:.3}× the timed figure (median of {ROUNDS} rounds, {launches} launches over {sets} buffer sets)",
        figures.same_us,
        figures.fresh_us,
        figures.fresh_us + figures.refresh_us,
        figures.refresh_us,
        figures.ratio
    );
    let full_refresh_us = full_refresh / launches as f64;
    let report = |passed, dev: Option<f64>, bound: Option<f64>, detail: String, figures: Figures| Report {
        regime,
        buffer_sets: sets,
        launches,
        b_touches: B_TOUCHES,
        sector_stride: stride,
        full_refresh_us,
        figures,
        passed,
        max_abs_deviation: dev,
        bound,
        detail,
    };
    if !figures.holds() {
        let msg = format!(
            "{regime}: {timed}. The kernel is much faster on inputs it has seen before than on fresh ones, beyond what the measurement explains (at most {:.2} µs a launch): its timed figure is not the time of launches that computed their result",
            figures.allowed_excess_us()
        );
        return Ok((report(false, None, None, msg.clone(), figures), Some(StageFailure::new(Verdict::RepeatDependent, STAGE, msg))));
    }

    // The output of a launch on fresh inputs: one more replay, its last launch judged.
    fresh_graph.replay(gpu).map_err(crashed)?;
    gpu.synchronize().map_err(harness)?;
    let set = (launches - 1) % sets;
    let what = format!("{regime}: launch {launches} of {launches} on buffer set {set}, its inputs refreshed right before it");
    let (passed, dev, bound, detail) = match Judged::output(gpu, &p, &ops[set], derive_seed(job.secret_seed, 0xF5E6), STAGE)? {
        Judged::NotFinite(text) => (false, None, None, format!("{what}: {text}; {timed}")),
        Judged::Deviation(dev, bound) => {
            let detail = format!("{timed}; {what}: {}; bound {:.6}", BoundOn::describe(&dev, p.n), bound.bound.bound);
            (bound.bound.admits(dev.max_abs), Some(dev.max_abs), Some(bound.bound.bound), detail)
        }
    };
    let failure = (!passed).then(|| {
        StageFailure::new(Verdict::RepeatDependent, STAGE, format!("{detail}. Its output does not follow inputs that changed: it answers from what it kept of earlier launches"))
    });
    Ok((report(passed, dev, bound, detail, figures), failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(same: f64, fresh_work: f64, refresh: f64, launches: f64, noise: &[f64]) -> Vec<RoundTimes> {
        noise.iter().map(|e| RoundTimes { same_us: same * launches * (1.0 + e), fresh_us: (fresh_work + refresh) * launches * (1.0 - e), refresh_us: refresh * launches }).collect()
    }

    #[test]
    fn an_honest_kernel_holds_and_a_memo_does_not() {
        let noise = [0.0, 0.01, -0.01, 0.005, -0.02];
        // Honest: 100 µs a launch either way, a 30 µs rewrite of A subtracted.
        let f = Figures::of(&rounds(100.0, 100.0, 30.0, 3.0, &noise), 3);
        assert!((f.same_us - 100.0).abs() < 3.0 && (f.fresh_us - 100.0).abs() < 3.0, "{f:?}");
        assert!((f.refresh_us - 30.0).abs() < 1e-9);
        assert!(f.holds(), "{f:?}");
        // Faster on fresh inputs (A in the L2 after its rewrite): holds.
        assert!(Figures::of(&rounds(100.0, 90.0, 30.0, 3.0, &noise), 3).holds());
        // The workspace memo of the report: 18.8 µs timed, 300 µs when it must compute.
        let memo = Figures::of(&rounds(18.8, 300.0, 5.0, 40.0, &noise), 40);
        assert!(!memo.holds(), "{memo:?}");
        assert!(memo.ratio > 15.0, "{memo:?}");
        // 16% slower on fresh inputs, 16 µs a launch against 10 + 3 allowed: refused; the
        // same ratio on a 2 µs kernel is 0.32 µs, inside the slack.
        assert!(!Figures::of(&rounds(100.0, 116.0, 30.0, 3.0, &[0.0]), 3).holds());
        assert!(Figures::of(&rounds(2.0, 2.32, 1.5, 2000.0, &[0.0]), 2000).holds());
        // Just inside the tolerance holds; just past it does not.
        assert!(Figures::of(&rounds(100.0, 112.9, 30.0, 1.0, &[0.0]), 1).holds());
        assert!(!Figures::of(&rounds(100.0, 113.1, 30.0, 1.0, &[0.0]), 1).holds());
        // The two catalog kernels an H200 refused before the refresh's share was allowed
        // for (its write-back overlaps the next launch): 56 µs timed, 141 µs of rewrite.
        assert!(Figures::of(&rounds(55.96, 60.76, 141.4, 3.0, &[0.0]), 3).holds());
        assert!(Figures::of(&rounds(31.59, 35.26, 49.78, 4.0, &[0.0]), 4).holds());
    }

    #[test]
    fn the_median_is_taken_over_rounds_so_one_disturbed_round_decides_nothing() {
        let mut r = rounds(100.0, 100.0, 30.0, 3.0, &[0.0, 0.0, 0.0, 0.0, 0.0]);
        r[2].fresh_us *= 3.0;
        let f = Figures::of(&r, 3);
        assert!(f.holds(), "{f:?}");
        assert_eq!(f.ratios.len(), 5);
        assert!(f.ratios[2] > 2.0);
    }

    #[test]
    fn a_large_a_is_rewritten_in_part_so_that_the_rewrite_stays_a_small_share() {
        // A rewrite of a quarter of the kernel or less: all of A.
        assert_eq!(sector_stride(25.0, 100.0), 1);
        assert_eq!(sector_stride(3.3, 130.0), 1);
        // 141 µs of rewrite against 56 µs: one sector in 16 (8.8 µs ≤ 14).
        assert_eq!(sector_stride(141.4, 56.0), 16);
        assert_eq!(sector_stride(50.0, 100.0), 2);
        assert_eq!(sector_stride(60.0, 100.0), 4);
        // Never sparser than the limit, and a figure that is not a number gives the limit.
        assert_eq!(sector_stride(1e6, 1.0), MAX_SECTOR_STRIDE);
        assert_eq!(sector_stride(f64::NAN, 1.0), MAX_SECTOR_STRIDE);
    }

    #[test]
    fn figures_that_are_not_numbers_fail_closed() {
        let f = Figures::of(&[RoundTimes { same_us: 0.0, fresh_us: 10.0, refresh_us: 1.0 }], 1);
        assert!(!f.holds(), "{f:?}");
        assert!(!Figures::of(&[], 1).holds());
    }
}
