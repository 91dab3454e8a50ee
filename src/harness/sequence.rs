//! The timed-sequence check, after the benchmark's rounds: launches *inside* a sequence
//! shaped like the timed one must do their work.
//!
//! Why: verification launches a kernel alone, with idle time before each launch and a
//! poisoned C; the benchmark launches it back to back over a few buffer sets whose
//! inputs never change. A kernel can tell the two apart (the global timer against the
//! time of its previous launch kept in its workspace, a C that already holds a result
//! instead of the poison) and skip its work when timed, leaving the result of an
//! earlier launch in place: that result is still right, so re-checking the output of a
//! timed launch afterwards shows nothing (a kernel did exactly this, and "won" 3.5×).
//!
//! The check re-creates the timed sequence — the candidate's launches back to back, in
//! its rotation over the buffer sets, captured into a CUDA graph (`graph` mode) or
//! queued directly (`offline`) — and changes the state the checked launch `q` must read,
//! after the previous launch on the same buffer set and before the launches in between:
//!
//! - `fill C`: C of that set is filled with 1.0 (not the poison pattern a kernel could
//!   test for): a launch that skips leaves 1.0 behind;
//! - `new A`: A of that set is overwritten with fresh random values: a launch that skips,
//!   or answers from a cache keyed by addresses, leaves the product of the old A.
//!
//! The gap before launch `q` is the timed sequence's own (no node sits between launch
//! `q − 1` and `q`), and the sequence holds the timed graph's launches in front of `q`,
//! so whatever the kernel keys on looks as it does when timed. The output of launch `q`
//! must then be fully written, finite, and within the verification's deviation bound on
//! the inputs it was given; otherwise the verdict is `timing_dependent`.

use serde::Serialize;

use super::pipeline::{BoundOn, Judged};
use super::stages::StageFailure;
use super::Job;
use crate::gpu::{Contender, DeviceBuffer, Gpu, GpuError, GraphTimer, Operands, PreparedManifest, a_len, c_len, checks};
use crate::verify::Verdict;
use crate::verify::rng::derive_seed;

const STAGE: &str = "timed-sequence check";

/// fp16 1.0: what `fill C` leaves in C.
const ONE_BITS: u16 = 0x3C00;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Perturbation {
    FillC,
    NewA,
}

impl Perturbation {
    fn describe(self) -> &'static str {
        match self {
            Perturbation::FillC => "C of its buffer set was filled with 1.0",
            Perturbation::NewA => "A of its buffer set was overwritten with fresh random values",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Replay {
    Graph,
    Direct,
}

/// Where the check sits in a sequence: launch `q` (0-based) of `len` launches that walk
/// the sets in order from `start`; the state of set `(start + q) % sets` is changed right
/// after launch `q − sets` (before the sequence when `q < sets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub len: usize,
    pub q: usize,
    pub start: usize,
    pub sets: usize,
}

impl Plan {
    /// The plan for a timed sequence of `launches` per sample over `sets` buffer sets:
    /// the timed launches first, then up to `launches` more, the last of them checked
    /// (`pick` in `0..launches` chooses how many). So the checked launch always follows
    /// another back to back, even when a sample is one launch.
    pub fn new(launches: u32, sets: usize, start: usize, pick: usize) -> Plan {
        let r = launches.max(1) as usize;
        let sets = sets.max(1);
        let q = r + pick % r;
        Plan { len: q + 1, q, start: start % sets, sets }
    }

    pub fn set_of(&self, i: usize) -> usize {
        (self.start + i) % self.sets
    }

    /// After which launch the state changes; `None`: before the first.
    pub fn perturb_after(&self) -> Option<usize> {
        self.q.checked_sub(self.sets)
    }
}

/// One check's sequence as a [`Contender`]: enqueue queues all of it, so that it can be
/// captured into a graph as it stands.
struct Sequence<'s, 'a> {
    plan: Plan,
    prepared: &'s [PreparedManifest<'a>],
    ops: &'s [Operands],
    kind: Perturbation,
    /// The set's own A (restored first) and the fresh one (`NewA`).
    a_orig: &'s DeviceBuffer,
    a_new: &'s DeviceBuffer,
    a_bytes: usize,
    c_len: usize,
}

impl Sequence<'_, '_> {
    fn perturb(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let ops = &self.ops[self.plan.set_of(self.plan.q)];
        match self.kind {
            Perturbation::FillC => ops.c.fill_f16_bits(gpu, ONE_BITS, self.c_len),
            Perturbation::NewA => ops.a.copy_range(gpu, 0, self.a_new, 0, self.a_bytes),
        }
    }
}

impl Contender for Sequence<'_, '_> {
    fn label(&self) -> String {
        self.prepared.first().map(|p| p.label()).unwrap_or_default()
    }

    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let checked = &self.ops[self.plan.set_of(self.plan.q)];
        // Every run starts from the set's own A, so the launches before `q` on that set
        // compute with the old one.
        checked.a.copy_range(gpu, 0, self.a_orig, 0, self.a_bytes)?;
        if self.plan.perturb_after().is_none() {
            self.perturb(gpu)?;
        }
        for i in 0..self.plan.len {
            self.prepared[self.plan.set_of(i)].enqueue(gpu)?;
            if self.plan.perturb_after() == Some(i) {
                self.perturb(gpu)?;
            }
        }
        Ok(())
    }
}

/// What one check found, for `bench.sequence_checks`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub replay: Replay,
    pub perturbation: Perturbation,
    pub plan: Plan,
    pub passed: bool,
    pub max_abs_deviation: Option<f64>,
    pub bound: Option<f64>,
    pub detail: String,
}

/// Runs the checks after the benchmark (see the module docs): for each replay kind and
/// perturbation, a random checked launch. `launches` is the candidate's launches per
/// timed sample. The operand sets are left as they were (A restored); C holds whatever
/// the last check left.
pub fn check_timed_sequences(gpu: &Gpu, job: &Job, ops: &[Operands], prepared: &[PreparedManifest], launches: u32) -> Result<(Vec<CheckReport>, Option<StageFailure>), StageFailure> {
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, STAGE, format!("the harness failed: {e}"));
    let sets = ops.len().min(prepared.len());
    if sets == 0 {
        return Ok((Vec::new(), None));
    }
    let a_bytes = a_len(&p) * 2;
    let a_orig = gpu.alloc(a_bytes).map_err(harness)?;
    let a_new = gpu.alloc(a_bytes).map_err(harness)?;
    checks::fill_uniform(gpu, &a_new, a_len(&p), derive_seed(job.secret_seed, 0x5E_9A), -1.0, 1.0).map_err(harness)?;
    let mut reports = Vec::new();
    for replay in [Replay::Graph, Replay::Direct] {
        for kind in [Perturbation::FillC, Perturbation::NewA] {
            let plan = Plan::new(launches, sets, rand::random_range(0..sets), rand::random_range(0..launches.max(1) as usize));
            let set = plan.set_of(plan.q);
            a_orig.copy_range(gpu, 0, &ops[set].a, 0, a_bytes).map_err(harness)?;
            let seq = Sequence { plan, prepared: &prepared[..sets], ops: &ops[..sets], kind, a_orig: &a_orig, a_new: &a_new, a_bytes, c_len: c_len(&p) };
            let ran = match replay {
                Replay::Graph => GraphTimer::capture(gpu, &seq, 1).and_then(|g| g.replay(gpu)).map(|_| ()),
                Replay::Direct => seq.enqueue(gpu).and_then(|()| gpu.synchronize()),
            };
            ran.map_err(|e| StageFailure::new(Verdict::Crashed, STAGE, format!("a back-to-back sequence of the candidate failed: {e}")))?;
            let report = judge(gpu, job, &ops[set], &seq, replay)?;
            // Put the set's own A back for whatever reads these sets next.
            ops[set].a.copy_range(gpu, 0, &a_orig, 0, a_bytes).map_err(harness)?;
            gpu.synchronize().map_err(harness)?;
            let failed = (!report.passed).then(|| {
                StageFailure::new(
                    Verdict::TimingDependent,
                    STAGE,
                    format!("{}. Verification launched this kernel alone and it passed: it behaves differently when launched back to back, as the benchmark launches it", report.detail),
                )
            });
            reports.push(report);
            if failed.is_some() {
                return Ok((reports, failed));
            }
        }
    }
    Ok((reports, None))
}

/// Judges the output launch `q` left in its set's C.
fn judge(gpu: &Gpu, job: &Job, ops: &Operands, seq: &Sequence, replay: Replay) -> Result<CheckReport, StageFailure> {
    let p = job.manifest.problem;
    let plan = seq.plan;
    let how = match replay {
        Replay::Graph => "captured in a CUDA graph",
        Replay::Direct => "launched directly",
    };
    let what = format!(
        "launch {} of {} back to back ({how}, buffer sets in turn), on buffer set {}, after {}",
        plan.q + 1,
        plan.len,
        plan.set_of(plan.q),
        seq.kind.describe()
    );
    let report = |passed, dev: Option<f64>, bound: Option<f64>, detail: String| CheckReport { replay, perturbation: seq.kind, plan, passed, max_abs_deviation: dev, bound, detail };
    Ok(match Judged::output(gpu, &p, ops, derive_seed(job.secret_seed, 0x5E_9B), STAGE)? {
        Judged::NotFinite(text) => report(false, None, None, format!("{what}: {text}")),
        Judged::Deviation(dev, bound) => {
            let detail = format!("{what}: {}; bound {:.6}", BoundOn::describe(&dev, p.n), bound.bound.bound);
            report(bound.bound.admits(dev.max_abs), Some(dev.max_abs), Some(bound.bound.bound), detail)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_launch_follows_the_timed_ones_and_its_set_changes_one_lap_before() {
        // 20 launches a sample over 3 sets: the check lands in the second lap of 20.
        for pick in 0..20 {
            let plan = Plan::new(20, 3, 1, pick);
            assert_eq!(plan.q, 20 + pick);
            assert_eq!(plan.len, plan.q + 1);
            let after = plan.perturb_after().expect("inside the sequence");
            assert_eq!(plan.set_of(after), plan.set_of(plan.q), "the previous launch on the same set");
            assert!((after + 1..plan.q).all(|i| plan.set_of(i) != plan.set_of(plan.q)), "no launch on that set in between");
        }
        // One launch a sample: the checked launch is the second, right behind the first,
        // and its set is untouched before it (so the change comes first).
        let plan = Plan::new(1, 3, 2, 0);
        assert_eq!((plan.q, plan.len, plan.perturb_after()), (1, 2, None));
        assert_ne!(plan.set_of(0), plan.set_of(1));
        // Two sets, two launches: launch 3 on set (start+1), changed after launch 1.
        let plan = Plan::new(2, 2, 0, 1);
        assert_eq!((plan.q, plan.perturb_after(), plan.set_of(3)), (3, Some(1), 1));
    }
}
