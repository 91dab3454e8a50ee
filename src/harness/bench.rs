//! The benchmark half of a run, in the sandbox process right after verification passed
//! (only when the job asks for it, [`Job::bench`]): the candidate — its manifest's
//! launches via [`PreparedManifest`] — side by side with cuBLAS, cuBLASLt heuristic top-1
//! and cuBLASLt autotuned, each in NN and TN, every contender's inputs filled with random
//! fp16 data, timed in two cache regimes ([`Regime`]): L2-cold (a rotation over buffer
//! sets spanning at least twice the L2 cache; the catalog ranks by it) and L2-warm (one
//! buffer set). The baselines and the candidate share each regime's rotation.
//!
//! After timing, the output a timed launch left in one buffer set (picked at random) is
//! re-checked: it must be complete and finite and within the verification's deviation
//! bound, recomputed on that set's inputs from fresh baseline runs and an fp32
//! reference. A kernel whose timed output fails gets the verdict `unstable`. The same
//! inputs are also run once more untimed; whether the two outputs are bit-identical is
//! recorded (a nondeterministic but accurate kernel, e.g. split-K with atomics, passes).
//! Then launches inside sequences shaped like each regime's timed one are checked
//! ([`super::sequence`]: a kernel that skips its work when launched back to back gets
//! `timing_dependent`), and each regime's timed figure against the same sequence with
//! every launch's inputs refreshed ([`super::fresh`]: a kernel much faster on inputs it
//! has seen before gets `repeat_dependent`).
//!
//! The result goes into [`RunOutcome::bench`]: the ranked regime's figures at the top,
//! `{"timings": {mode: Timing}, "baselines": [{library, layout, mode, timing, config}],
//!   "speedups": {mode: {"cublas_nn": x, …, "cublaslt_autotune_max": x}}, "regime":
//!   "l2_cold", "regimes": {"l2_cold": {…the same, with its rotation…}, "l2_warm": {…}},
//!   "recheck": {…}, "sequence_checks": {regime: […]}, "fresh_inputs": {regime: {…}},
//!   "device_start", "device_end", …}`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::pipeline::bound_on;
use super::{fresh, sequence};
use super::stages::{StageFailure, cell};
use super::{Job, RunOutcome};
use crate::harness::autotune::{self, AutotuneOptions};
use crate::harness::baselines::{Pool, SLOTS, SixBaselines, operand_sets, operand_sets_with};
use crate::harness::runner::{self, BaselineSlot, BenchConfig};
use crate::bench::stats::Mode;
use crate::gpu::{Contender, Gpu, GpuError, PreparedManifest, c_len, checks};
use crate::problem::{Layout, Problem};
use crate::verify::rng::derive_seed;
use crate::verify::Verdict;
use crate::verify::containment::POISON_BITS;

const BENCH: &str = "benchmark";
const RECHECK: &str = "benchmark re-check";

/// The fewest buffer sets of an L2-cold rotation unless the settings say otherwise.
pub const DEFAULT_SETS: usize = 3;

/// What a job's `bench` object may say; every field is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BenchSettings {
    /// Modes to time; `graph` ranks.
    pub modes: Vec<Mode>,
    /// Stop once every median's 95% interval is within ± this fraction.
    pub target_rel: f64,
    /// Time limit of the side-by-side rounds (set-up and autotune not included).
    pub budget_ms: u64,
    /// Seeds the inputs and the order of contenders.
    pub seed: u64,
    /// The fewest buffer sets of the L2-cold rotation (it takes as many more as it needs
    /// to span twice the L2 cache; at least 2).
    pub sets: usize,
    /// Heuristic algorithms the cuBLASLt autotune may time.
    pub autotune_max: usize,
    /// Safety limit of each layout's autotune screen, which otherwise times every
    /// algorithm the heuristic offers; 20 s when absent.
    pub autotune_budget_ms: Option<u64>,
}

impl Default for BenchSettings {
    fn default() -> Self {
        BenchSettings {
            modes: vec![Mode::Graph, Mode::Offline],
            target_rel: crate::bench::stats::DEFAULT_TARGET_REL,
            budget_ms: 3000,
            seed: 1,
            sets: DEFAULT_SETS,
            autotune_max: 100,
            autotune_budget_ms: None,
        }
    }
}

impl BenchSettings {
    /// The job's settings: `None` when it asks for no benchmark.
    pub fn of(job: &Job) -> Result<Option<BenchSettings>, String> {
        match &job.bench {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| format!("the job's bench settings are invalid: {e}")),
        }
    }

    pub fn autotune_limit(&self) -> Duration {
        self.autotune_budget_ms.map_or(AutotuneOptions::default().screen_limit, Duration::from_millis)
    }

    /// What the sandbox's wall-clock limit must add for the benchmark: the rounds (the
    /// paced ones of a large problem too), both autotune searches, and set-up and the
    /// re-check.
    pub fn wall_time(&self) -> Duration {
        Duration::from_millis(self.budget_ms).mul_f64(1.0 + PACED_SHARE) + self.autotune_limit() * 2 + Duration::from_secs(30)
    }

    /// The ranked regime's `paced` rounds for a problem of `flops` (from
    /// [`PACED_FROM_FLOP`], or when the job asks for the mode): a loop of their own after
    /// the other modes', so that each paced launch follows paced ones and the board has
    /// settled at their pace, not at the power limit that back-to-back samples leave it
    /// at; in [`PACED_SHARE`] of the budget, over the same rotation.
    fn paced_config(&self, sets: usize, flops: f64) -> Option<BenchConfig> {
        (flops >= PACED_FROM_FLOP || self.modes.contains(&Mode::Paced)).then(|| BenchConfig {
            modes: vec![Mode::Paced],
            budget: Duration::from_millis(self.budget_ms).mul_f64(PACED_SHARE),
            ..self.config_for(RANKED, sets)
        })
    }

    /// The round loop's settings for one regime over `sets` buffer sets: the ranked
    /// regime times every asked mode (but `paced`, which has rounds of its own:
    /// [`Self::paced_config`]) in two thirds of the budget; the one beside it times `graph`
    /// only, in the last third. A cold rotation is walked whole by every sample.
    fn config_for(&self, regime: Regime, sets: usize) -> BenchConfig {
        let (modes, share) = if regime == RANKED {
            (self.modes.iter().copied().filter(|m| *m != Mode::Paced).collect(), 2.0 / 3.0)
        } else {
            (vec![Mode::Graph], 1.0 / 3.0)
        };
        BenchConfig {
            modes,
            target_rel: self.target_rel,
            budget: Duration::from_millis(self.budget_ms).mul_f64(share),
            seed: self.seed,
            min_launches: if regime == Regime::L2Cold { u32::try_from(sets).unwrap_or(u32::MAX) } else { 1 },
            ..BenchConfig::default()
        }
    }
}

/// Benchmarks `job`'s candidate, which passed verification, and fills `outcome.bench`.
/// A timed output that fails the re-check makes the verdict `unstable`; a failure while
/// timing becomes the outcome's verdict (the candidate crashed, or the harness failed).
pub fn bench_candidate(gpu: &Gpu, job: &Job, settings: &BenchSettings, outcome: &mut RunOutcome) {
    let started = Instant::now();
    let result = run_bench(gpu, job, settings);
    let failure = match result {
        Ok((bench, failure)) => {
            outcome.bench = Some(bench);
            failure
        }
        Err(f) => Some(f),
    };
    if let Some(f) = failure {
        outcome.device_lost = f.device_lost();
        outcome.verdict = f.verdict;
        outcome.stage = f.stage;
        outcome.message = f.message;
    }
    outcome.duration_ms += started.elapsed().as_secs_f64() * 1e3;
}

/// A GPU error while timing: the candidate's fault when its launches failed (the device
/// is then unusable), else the harness's.
fn timing_failure(candidate: &str) -> impl Fn(GpuError) -> StageFailure + '_ {
    move |e| {
        let text = e.to_string();
        if text.contains(candidate) {
            StageFailure::new(Verdict::Crashed, BENCH, format!("the candidate failed while being timed: {text}"))
        } else {
            // Leave the process without teardown all the same: the candidate may be at fault.
            StageFailure::new(Verdict::Crashed, BENCH, format!("the benchmark failed: {text}"))
        }
    }
}

/// From this much work (2^36 FLOP: about 100 µs on an H100 or H200) the ranked regime
/// also times `paced` mode (each launch after a pause as long as itself, the device busy
/// at next to no power), and a kernel is judged by the lower of its graph and paced
/// speedups (`catalog::ranked_speedups`). Back to back, a long compute-bound GEMM holds
/// the board at its power limit and its clock falls (to about 1.4 GHz on an H200);
/// between other work in a model's layer the clock stays near 1.9 GHz, and the order of
/// two kernels can flip between the two: five served H200 kernels from 4096×4096×8192 up
/// won 1.01–1.05× back to back and lost 0.93–0.98× to torch's own call paced (BENCHMARKS.md,
/// "Clocks"). Below it the two agreed, and single launches of a few µs are too coarse
/// to time alone.
pub const PACED_FROM_FLOP: f64 = 68_719_476_736.0;

/// The paced rounds' time, as a share of the benchmark's budget, on top of it.
pub const PACED_SHARE: f64 = 1.0 / 3.0;

/// The cache regimes every benchmark times (docs/verification.md, "Timing regimes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// Every launch reads the same buffer set: its inputs are in the L2 cache when they
    /// fit there, as in a loop that multiplies the same operands again and again.
    L2Warm,
    /// The launches rotate over buffer sets spanning at least twice the L2 cache, so a
    /// launch's inputs were evicted since it last read them, as a layer's weights are in
    /// a model: what Triton's `do_bench` and nvbench measure by default.
    L2Cold,
}

impl Regime {
    pub fn as_str(self) -> &'static str {
        match self {
            Regime::L2Warm => "l2_warm",
            Regime::L2Cold => "l2_cold",
        }
    }
}

/// The regime the catalog ranks by: a run's top-level `timings`, `speedups` and
/// `baselines` are this regime's, and the other is stored beside them in `regimes`.
/// Cold, because it is the regime a model's layer runs in: a kernel that wins only
/// while its weights sit in the L2 cache loses inside the model.
pub const RANKED: Regime = Regime::L2Cold;

/// The regime shown beside the ranked one.
pub const SHOWN_BESIDE: Regime = Regime::L2Warm;

/// Buffer sets an L2-cold rotation needs: enough to span twice `l2_bytes`, and at least
/// `min_sets` (2 or more, so that consecutive launches never share a set); but never
/// more than three such rotations (candidate, NN and TN baselines) fit in
/// [`ROTATION_MEMORY_SHARE`] of `memory_bytes` (at least 2 sets). A rotation cut short
/// is named by its real footprint ([`regime_of`]'s `cache`).
pub fn cold_sets(p: &Problem, workspace_bytes: u64, l2_bytes: u64, memory_bytes: u64, min_sets: usize) -> usize {
    let set = crate::harness::baselines::set_bytes(p, workspace_bytes).max(1);
    let needed = usize::try_from((2 * l2_bytes).div_ceil(set)).unwrap_or(usize::MAX).max(min_sets.max(2));
    let fits = (memory_bytes as f64 * ROTATION_MEMORY_SHARE / (3 * set) as f64) as usize;
    needed.min(fits.max(2))
}

/// The share of the device's memory three rotations may take.
const ROTATION_MEMORY_SHARE: f64 = 0.3;

fn run_bench(gpu: &Gpu, job: &Job, settings: &BenchSettings) -> Result<(serde_json::Value, Option<StageFailure>), StageFailure> {
    let started = Instant::now();
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, BENCH, format!("the harness failed: {e}"));
    let ws = job.manifest.workspace_bytes;
    let l2 = gpu.facts().l2_cache_bytes;
    let sets = cold_sets(&p, ws, l2, gpu.facts().total_memory_bytes, settings.sets);
    let loaded = gpu.load_ptx(&job.ptx).map_err(harness)?;
    let (a_len, b_len) = (p.m as usize * p.k as usize, p.k as usize * p.n as usize);
    let pool = Pool::new(gpu, a_len.max(b_len) + 4_000_037, settings.seed).map_err(harness)?;
    let cand_ops = operand_sets_with(gpu, &pool, &p, ws, sets, 0).map_err(harness)?;
    let nn = operand_sets(gpu, &pool, &Problem { layout: Layout::Nn, ..p }, sets, 1).map_err(harness)?;
    let tn = operand_sets(gpu, &pool, &Problem { layout: Layout::Tn, ..p }, sets, 2).map_err(harness)?;
    let prepared = cand_ops
        .iter()
        .map(|ops| PreparedManifest::new(gpu, &loaded, &job.manifest, ops))
        .collect::<Result<Vec<_>, _>>()
        .map_err(harness)?;
    gpu.synchronize().map_err(harness)?;
    let setup_ms = started.elapsed().as_secs_f64() * 1e3;

    let at = Instant::now();
    let opts = AutotuneOptions { max_candidates: settings.autotune_max.max(1), screen_limit: settings.autotune_limit(), ..AutotuneOptions::default() };
    let six = SixBaselines::build(gpu, &nn, &tn, &|ops| autotune::autotune(gpu, ops, &opts).map(|(lt, c)| (lt, c, false))).map_err(harness)?;
    let autotune_ms = at.elapsed().as_secs_f64() * 1e3;

    let candidate_label = prepared[0].label();
    let slots: Vec<BaselineSlot> = SLOTS.iter().enumerate().map(|(i, &(library, layout))| BaselineSlot { contender: i + 1, library, layout }).collect();
    let sets_of = |regime: Regime| match regime {
        Regime::L2Warm => 1,
        Regime::L2Cold => sets,
    };
    let mut regimes = serde_json::Map::new();
    // Per regime timed: its sets and the candidate's launches per sample, which its
    // timed-sequence check re-creates.
    let mut timed: Vec<(Regime, usize, u32)> = Vec::new();
    let mut ranked = None;
    for regime in [RANKED, SHOWN_BESIDE] {
        let n = sets_of(regime);
        let mut contenders: Vec<Vec<&dyn Contender>> = vec![prepared[..n].iter().map(|c| c as &dyn Contender).collect()];
        contenders.extend(six.sets().into_iter().map(|mut s| {
            s.truncate(n);
            s
        }));
        let config = settings.config_for(regime, n);
        let mut report = runner::benchmark(gpu, &contenders, p.shape().flops(), &config).map_err(timing_failure(&candidate_label))?;
        if let Some(paced) = settings.paced_config(n, p.shape().flops()).filter(|_| regime == RANKED) {
            let more = runner::benchmark(gpu, &contenders, p.shape().flops(), &paced).map_err(timing_failure(&candidate_label))?;
            for (ct, extra) in report.contenders.iter_mut().zip(more.contenders) {
                ct.timings.extend(extra.timings);
            }
        }
        let mut baselines = Vec::new();
        for (i, &(library, layout)) in SLOTS.iter().enumerate() {
            let config = six.config(i, &Problem { layout, ..p }).map_err(harness)?;
            let Some(ct) = report.contenders.get(i + 1) else { continue };
            for (mode, timing) in &ct.timings {
                baselines.push(serde_json::json!({
                    "library": library.as_str(), "layout": layout.as_str(), "mode": mode.as_str(),
                    "timing": timing, "config": config, "launches_per_sample": ct.launches_per_sample,
                }));
            }
        }
        let candidate = &report.contenders[0];
        let mut summary = regime_of(&p, ws, n, l2);
        if let Some(map) = summary.as_object_mut() {
            map.insert("timings".into(), serde_json::json!(candidate.timings));
            map.insert("speedups".into(), runner::speedups(&report, 0, &slots));
            map.insert("baselines".into(), serde_json::Value::Array(baselines));
            map.insert("launches_per_sample".into(), candidate.launches_per_sample.into());
            map.insert("converged".into(), report.converged.into());
            map.insert("rounds".into(), report.rounds.into());
            map.insert("elapsed_ms".into(), (report.elapsed.as_secs_f64() * 1e3).into());
        }
        regimes.insert(regime.as_str().into(), summary);
        timed.push((regime, n, candidate.launches_per_sample));
        if regime == RANKED {
            ranked = Some(report);
        }
    }
    let report = ranked.ok_or_else(|| StageFailure::new(Verdict::InternalError, BENCH, "the ranked regime was not timed"))?;
    let ranked_view = regimes.get(RANKED.as_str()).cloned().unwrap_or_default();

    // The re-check, on a buffer set picked at random after timing (first: the checks
    // below change the sets' outputs).
    let at = Instant::now();
    let set = rand::random_range(0..sets);
    let (recheck, recheck_failure) = recheck(gpu, job, &cand_ops[set], &prepared[set], set)?;
    let recheck_ms = at.elapsed().as_secs_f64() * 1e3;

    // Launches inside a sequence shaped like each timed one must do their work: the cold
    // rotation, and the warm regime's one set launched back to back (where a kernel that
    // keeps state in its workspace finds its own previous launch right before it).
    let at = Instant::now();
    let mut sequence_checks = serde_json::Map::new();
    let mut sequence_failure = None;
    for &(regime, n, launches) in &timed {
        let (checks, failure) = sequence::check_timed_sequences(gpu, job, &cand_ops[..n], &prepared[..n], launches)?;
        sequence_checks.insert(regime.as_str().into(), serde_json::to_value(checks).unwrap_or_default());
        if failure.is_some() {
            sequence_failure = failure;
            break;
        }
    }
    let sequence_ms = at.elapsed().as_secs_f64() * 1e3;

    // The timed figures must be those of launches that did the work: each regime's timed
    // sequence against the same with every launch's inputs refreshed (last: it changes
    // the sets' inputs).
    let at = Instant::now();
    let mut fresh_inputs = serde_json::Map::new();
    let mut fresh_failure = None;
    if recheck_failure.is_none() && sequence_failure.is_none() {
        for &(regime, n, launches) in &timed {
            let (report, failure) = fresh::check_fresh_inputs(gpu, job, regime.as_str(), &cand_ops[..n], &prepared[..n], launches)?;
            fresh_inputs.insert(regime.as_str().into(), serde_json::to_value(report).unwrap_or_default());
            if failure.is_some() {
                fresh_failure = failure;
                break;
            }
        }
    }
    let fresh_ms = at.elapsed().as_secs_f64() * 1e3;
    let failure = recheck_failure.or(sequence_failure).or(fresh_failure);

    let bench = serde_json::json!({
        "timings": ranked_view["timings"],
        "baselines": ranked_view["baselines"],
        "speedups": ranked_view["speedups"],
        "device_start": report.device_start,
        "device_end": report.device_end,
        "converged": report.converged,
        "rounds": report.rounds,
        "elapsed_ms": report.elapsed.as_secs_f64() * 1e3,
        "launches_per_sample": ranked_view["launches_per_sample"],
        "buffer_sets": sets,
        "regime": RANKED.as_str(),
        "regimes": regimes,
        "settings": settings,
        "recheck": recheck,
        "sequence_checks": sequence_checks,
        "sequence_ms": sequence_ms,
        "fresh_inputs": fresh_inputs,
        "fresh_ms": fresh_ms,
        "setup_ms": setup_ms,
        "autotune_ms": autotune_ms,
        "recheck_ms": recheck_ms,
        "total_ms": started.elapsed().as_secs_f64() * 1e3,
    });
    Ok((bench, failure))
}

/// What one regime's rotation touches: every contender's launches walk over `sets`
/// buffer sets of A, B and C (and the workspace). `cache` names what that does to the
/// L2: `l2_warm`, the whole rotation fits in it; `l2_cold`, it spans at least twice the
/// L2; `l2_mixed` between. (The warm regime's one set of a large problem is itself
/// larger than the L2: its `cache` says so.) Baselines and candidate share the regime:
/// each rotates over as many sets of the same sizes.
pub fn regime_of(p: &Problem, workspace_bytes: u64, sets: usize, l2_bytes: u64) -> serde_json::Value {
    let footprint = crate::harness::baselines::set_bytes(p, workspace_bytes).saturating_mul(sets as u64);
    let multiple = if l2_bytes > 0 { footprint as f64 / l2_bytes as f64 } else { f64::INFINITY };
    let cache = if multiple <= 1.0 {
        "l2_warm"
    } else if multiple >= 2.0 {
        "l2_cold"
    } else {
        "l2_mixed"
    };
    serde_json::json!({"buffer_sets": sets, "footprint_bytes": footprint, "l2_bytes": l2_bytes, "l2_multiple": multiple, "cache": cache})
}

/// Re-checks the output a timed launch left in buffer set `set` (see the module docs).
/// Everything stays on the device: the timed output is kept in a copy, the untimed run
/// compared with it bit for bit, and both measured against the fp32 reference.
fn recheck(gpu: &Gpu, job: &Job, ops: &crate::gpu::Operands, prepared: &PreparedManifest, set: usize) -> Result<(serde_json::Value, Option<StageFailure>), StageFailure> {
    let p = job.manifest.problem;
    let harness = |e: GpuError| StageFailure::new(Verdict::InternalError, RECHECK, format!("the harness failed: {e}"));
    let outputs = c_len(&p);
    gpu.synchronize().map_err(harness)?;
    let what = format!("the output of a timed launch (buffer set {set})");
    let (unwritten, non_finite) = checks::scan_output(gpu, &ops.c, outputs, POISON_BITS).map_err(harness)?;
    if let Some(f) = unwritten.or(non_finite) {
        let value = checks::read_f16(gpu, &ops.c, f.first).map_err(harness)?;
        let msg = format!("{what}: {} = {value} ({} outputs unwritten or non-finite) although verification passed", cell(f.first, p.n), f.count);
        return Ok((serde_json::json!({"set": set, "passed": false, "detail": msg}), Some(StageFailure::new(Verdict::Unstable, RECHECK, msg))));
    }
    let timed = gpu.alloc(outputs * 2).map_err(harness)?;
    timed.copy_range(gpu, 0, &ops.c, 0, outputs * 2).map_err(harness)?;

    // The same inputs once more, untimed.
    ops.poison_c(gpu).map_err(harness)?;
    gpu.synchronize().map_err(harness)?;
    prepared.enqueue(gpu).map_err(|e| StageFailure::new(Verdict::Crashed, RECHECK, format!("an untimed run after timing failed: {e}")))?;
    match gpu.wait_until(Instant::now() + job.watchdog()) {
        Ok(true) => {}
        Ok(false) => return Err(StageFailure::new(Verdict::Timeout, RECHECK, format!("an untimed run after timing did not finish within the watchdog's {} ms", job.watchdog().as_millis()))),
        Err(e) => return Err(StageFailure::new(Verdict::Crashed, RECHECK, format!("an untimed run after timing faulted: {e}"))),
    }
    let differing = checks::find_changed(gpu, &timed, &ops.c, outputs).map_err(harness)?.map_or(0, |f| f.count);

    let bound = bound_on(gpu, &p, &ops.a, &ops.b, derive_seed(job.secret_seed, 0xBE_5C), RECHECK)?;
    let dev = bound.deviation(gpu, &timed, RECHECK)?;
    let dev_untimed = bound.deviation(gpu, &ops.c, RECHECK)?;
    let passed = bound.bound.admits(dev.max_abs);
    let detail = format!(
        "{what}: max |C − fp32 reference| = {:.6} at {} over all {outputs} outputs; bound {:.6} (worst fresh baseline {:.6}, {}); untimed run: {:.6}, {} of {outputs} outputs differ bitwise from the timed one",
        dev.max_abs,
        cell(dev.index, p.n),
        bound.bound.bound,
        bound.worst.1,
        bound.worst.0,
        dev_untimed.max_abs,
        differing,
    );
    let value = serde_json::json!({
        "set": set,
        "passed": passed,
        "max_abs_deviation": dev.max_abs,
        "bound": bound.bound.bound,
        "untimed_max_abs_deviation": dev_untimed.max_abs,
        "identical_to_untimed": differing == 0,
        "differing_outputs": differing,
        "checked_outputs": outputs,
        "detail": detail,
    });
    let failure = (!passed).then(|| StageFailure::new(Verdict::Unstable, RECHECK, format!("{detail}. Its timed output is wrong although verification passed.")));
    Ok((value, failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Shape};

    fn job(bench: Option<serde_json::Value>) -> Job {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(64, 64, 64).expect("shape"));
        Job { ptx: String::new(), manifest: manifest_for(&p, &SimpleConfig::SMALL), secret_seed: 1, watchdog_ms: None, bench }
    }

    #[test]
    fn the_regime_follows_the_rotations_footprint_against_the_l2() {
        let l2 = 50 << 20;
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        // 1024³: 6 MiB a set, 18 MiB over three sets: warm.
        assert_eq!(regime_of(&p(1024, 1024, 1024), 0, 3, l2)["cache"], "l2_warm");
        // 2048³: 24 MiB a set, 72 MiB: mixed.
        let r = regime_of(&p(2048, 2048, 2048), 0, 3, l2);
        assert_eq!(r["cache"], "l2_mixed");
        assert_eq!(r["footprint_bytes"], 3 * 3 * 2 * 2048 * 2048);
        assert!((r["l2_multiple"].as_f64().expect("multiple") - 1.44).abs() < 1e-9);
        // 8192³: 384 MiB a set: cold even alone; a workspace counts too.
        assert_eq!(regime_of(&p(8192, 8192, 8192), 0, 1, l2)["cache"], "l2_cold");
        assert_eq!(regime_of(&p(1024, 1024, 1024), 100 << 20, 3, l2)["cache"], "l2_cold");
    }

    #[test]
    fn a_cold_rotation_spans_twice_the_l2_whatever_the_problem() {
        const MEMORY: u64 = 80 << 30;
        let l2: u64 = 50 << 20;
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        for (m, n, k) in [(64, 64, 64), (1, 4096, 4096), (128, 512, 3584), (2048, 2048, 2048), (8192, 8192, 8192)] {
            let sets = cold_sets(&p(m, n, k), 0, l2, MEMORY, 3);
            assert!(sets >= 3, "{m}x{n}x{k}: {sets}");
            assert_eq!(regime_of(&p(m, n, k), 0, sets, l2)["cache"], "l2_cold", "{m}x{n}x{k} over {sets} sets");
            // And not wastefully more than needed (beyond the floor of 3).
            if sets > 3 {
                assert_ne!(regime_of(&p(m, n, k), 0, sets - 1, l2)["cache"], "l2_cold", "{m}x{n}x{k}: {sets} is more than needed");
            }
        }
        // 64³ needs thousands of 24 KiB sets, every one walked by each sample.
        assert_eq!(cold_sets(&p(64, 64, 64), 0, l2, MEMORY, 3), 4267);
        // A rotation three of which would not fit in 30% of the memory is cut, to 2 at least.
        assert_eq!(cold_sets(&p(64, 64, 64), 0, l2, 245_760_000, 3), 1000);
        assert_eq!(cold_sets(&p(8192, 8192, 8192), 0, l2, 1 << 30, 3), 2);
    }

    #[test]
    fn the_ranked_regime_gets_every_mode_and_the_other_graph_only() {
        let s = BenchSettings { budget_ms: 900, ..BenchSettings::default() };
        let cold = s.config_for(Regime::L2Cold, 4267);
        let warm = s.config_for(Regime::L2Warm, 1);
        assert_eq!(RANKED, Regime::L2Cold);
        assert_eq!(cold.modes, s.modes);
        assert_eq!(warm.modes, vec![Mode::Graph]);
        assert_eq!(cold.budget + warm.budget, Duration::from_millis(900));
        assert_eq!((cold.min_launches, warm.min_launches), (4267, 1));
    }

    #[test]
    fn large_problems_get_paced_rounds_of_their_own() {
        let s = BenchSettings { budget_ms: 900, ..BenchSettings::default() };
        let flops = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape")).shape().flops();
        let big = flops(4096, 4096, 4096);
        assert!(big >= PACED_FROM_FLOP);
        let paced = s.paced_config(3, big).expect("paced rounds");
        assert_eq!(paced.modes, vec![Mode::Paced]);
        assert_eq!(paced.budget, Duration::from_millis(300));
        assert_eq!(paced.min_launches, 3, "over the ranked regime's rotation");
        assert_eq!(s.config_for(RANKED, 3).modes, vec![Mode::Graph, Mode::Offline], "not among the others");
        // Just below the threshold (4096×4096×2047) none; a job that asks for paced gets it
        // at any size, in its own loop, never among the others.
        let small = flops(4096, 4096, 2047);
        assert!(s.paced_config(3, small).is_none());
        let asked = BenchSettings { modes: vec![Mode::Paced, Mode::Graph], ..BenchSettings::default() };
        assert_eq!(asked.paced_config(3, small).expect("asked for").modes, vec![Mode::Paced]);
        assert_eq!(asked.config_for(RANKED, 3).modes, vec![Mode::Graph]);
        assert!(s.wall_time().abs_diff(Duration::from_millis(1200 + 2 * 20_000 + 30_000)) < Duration::from_micros(1), "the paced third on top");
    }

    #[test]
    fn bench_settings_default_per_field_and_refuse_unknown_ones() {
        assert_eq!(BenchSettings::of(&job(None)).expect("valid"), None);
        let s = BenchSettings::of(&job(Some(serde_json::json!({"budget_ms": 500, "modes": ["graph"]})))).expect("valid").expect("some");
        assert_eq!(s.budget_ms, 500);
        assert_eq!(s.modes, vec![Mode::Graph]);
        assert_eq!(s.sets, 3);
        assert_eq!(s.autotune_limit(), Duration::from_secs(20), "a safety limit, not a budget");
        let want = Duration::from_millis(500).mul_f64(1.0 + PACED_SHARE) + Duration::from_millis(2 * 20_000 + 30_000);
        assert!(s.wall_time().abs_diff(want) < Duration::from_micros(1), "{:?}", s.wall_time());
        let e = BenchSettings::of(&job(Some(serde_json::json!({"budjet_ms": 1})))).expect_err("unknown field");
        assert!(e.contains("budjet_ms"), "{e}");
        assert!(BenchSettings::of(&job(Some(serde_json::json!({"modes": ["fast"]})))).is_err());
        let c = BenchSettings::default().config_for(RANKED, 3);
        assert_eq!(c.modes, vec![Mode::Graph, Mode::Offline]);
        assert_eq!(c.budget, Duration::from_secs(2));
    }
}
