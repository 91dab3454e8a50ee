//! The GPU stages of verification, run on the caller's thread (the sandbox's one GPU
//! thread): load, the binary exact test, the baseline-bounded deviation test, and the
//! containment checks after every launch sequence.
//!
//! Every launch sequence of the candidate goes through [`Run::launch`]: C poisoned, each
//! launch watched by its own watchdog, then canaries, A and B, unwritten and non-finite
//! outputs checked, in that order — so a kernel that writes out of bounds is reported as
//! such even when its C is also wrong.

use std::time::{Duration, Instant};

use super::guarded::GuardedOperands;
use super::stages::{CheckLog, DEVIATION_FULL_MACS, StageFailure, cell, static_checks};
use super::{Job, RunOutcome};
use crate::gpu::pressure::{self, Pressure};
use crate::gpu::{Contender, CublasGemm, DeviceBuffer, Gpu, GpuError, LtGemm, Operands, PreparedManifest, a_len, b_len, c_len, checks};
use crate::problem::{Layout, Problem};
use crate::verify::binary::{EXACT_LIMIT, operand_seeds};
use crate::verify::containment::{DEFAULT_CANARY_BYTES, POISON_BITS};
use crate::verify::rng::{SplitMix64, derive_seed};
use crate::verify::spot::{ReferenceKind, check_reference, spot_cells};
use crate::verify::{DeviationBound, Verdict, binary_density, max_abs_deviation};

/// Fresh (unpredictable) binary seeds per run, besides the secret one.
pub const FRESH_BINARY_SEEDS: usize = 2;

/// Elements of A and of B the binary test's last run flips: few enough that a memo keyed
/// by a sample of the inputs almost surely misses them, enough that the product changes.
pub const PARTIAL_FLIPS: u32 = 16;

/// cuBLASLt heuristic algorithms whose deviation counts toward the bound, per layout.
/// The autotuned baseline picks among the heuristic's list; taking its first few
/// covers that choice without timing anything here.
pub const BOUND_LT_ALGOS: usize = 8;

const LOAD: &str = "load";
const BINARY: &str = "binary exact test";
const DEVIATION: &str = "deviation test";
const RACE: &str = "race stage";

/// Runs of the race stage's copy with held-back blocks, each holding back another half.
const HELD_BACK_ROUNDS: u32 = 2;

/// Launch sequences one verification runs: the binary exact test's (fresh seeds, the
/// secret seed, the repeat, the partial change), the deviation run, and the race stage's (idle, one per
/// co-running kernel, the held-back rounds).
pub(super) const LAUNCH_SEQUENCES: u32 =
    (FRESH_BINARY_SEEDS as u32 + 3) + 1 + (1 + pressure::STAGE_PRESSURES as u32 + HELD_BACK_ROUNDS);

/// Judges `job` on `gpu`. Never panics on input; every failure is a verdict. When the
/// outcome says `device_lost`, the device is unusable (a launch hung or faulted) and GPU
/// resources of this run were leaked on purpose: the caller should exit the process
/// without dropping `gpu` (see [`crate::gpu::exit_now`]).
pub fn verify_candidate(gpu: &Gpu, job: &Job) -> RunOutcome {
    let started = Instant::now();
    let mut run = Run { gpu, job, log: CheckLog::default(), ptxas: None, jit_log: None };
    let result = run.stages();
    let (verdict, stage, message, device_lost) = match result {
        Ok(summary) => (Verdict::Pass, "verification".to_string(), summary, false),
        Err(f) => {
            let lost = f.device_lost();
            (f.verdict, f.stage, f.message, lost)
        }
    };
    RunOutcome {
        verdict,
        stage,
        message,
        device: Some(gpu.facts().clone()),
        checks: run.log.checks,
        ptxas: run.ptxas,
        jit_log: run.jit_log,
        device_lost,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
        bench: None,
    }
}

struct Run<'g> {
    gpu: &'g Gpu,
    job: &'g Job,
    log: CheckLog,
    ptxas: Option<super::PtxasSummary>,
    jit_log: Option<String>,
}

/// The service failed (allocation, copies, cuBLAS): not the kernel's fault.
fn internal(stage: &str) -> impl Fn(GpuError) -> StageFailure + '_ {
    move |e| StageFailure::new(Verdict::InternalError, stage, format!("the harness failed: {e}"))
}

/// One launch sequence's inputs, as the checks need them: pristine device copies of A
/// and B, copied into the guarded buffers before each launch sequence and compared with
/// them after it.
struct Inputs<'a> {
    a: &'a DeviceBuffer,
    b: &'a DeviceBuffer,
    /// E.g. `run 2 of 4 (secret seed)`, for messages.
    what: String,
}

impl Run<'_> {
    fn problem(&self) -> &Problem {
        &self.job.manifest.problem
    }

    fn stages(&mut self) -> Result<String, StageFailure> {
        let facts = self.gpu.facts().clone();
        self.ptxas = static_checks(self.job, &facts, &mut self.log)?;

        let gpu = self.gpu;
        let loaded = self.log.run("load", || {
            let loaded = gpu.load_ptx(&self.job.ptx).map_err(|e| match e {
                GpuError::Load { code, log, .. } => StageFailure::new(
                    Verdict::LoadFailed,
                    LOAD,
                    format!("the driver could not JIT-load the PTX: {code}\nJIT log:\n{}", log.trim()),
                ),
                other => StageFailure::new(Verdict::LoadFailed, LOAD, other.to_string()),
            })?;
            Ok((loaded, "the driver JIT-loaded the PTX".to_string()))
        })?;
        self.jit_log = Some(loaded.jit_log.clone()).filter(|l| !l.trim().is_empty());

        let canary_seed = derive_seed(self.job.secret_seed, 0xCA_4A27);
        let guarded = GuardedOperands::alloc(gpu, self.problem(), self.job.manifest.workspace_bytes, DEFAULT_CANARY_BYTES, canary_seed)
            .map_err(internal("allocate"))?;
        let prepared = self.log.run("prepare launches", || {
            let prepared = PreparedManifest::new(gpu, &loaded, &self.job.manifest, guarded.operands())
                .map_err(|e| StageFailure::new(Verdict::LaunchFailed, LOAD, format!("the launches cannot be prepared: {e}")))?;
            let n = prepared.launch_count();
            Ok((prepared, format!("{n} launch(es) bound to guarded buffers")))
        })?;
        let p = *self.problem();
        let a = gpu.alloc(a_len(&p) * 2).map_err(internal("allocate"))?;
        let b = gpu.alloc(b_len(&p) * 2).map_err(internal("allocate"))?;

        let result = self.gpu_stages(&guarded, &prepared, (&a, &b));
        if result.as_ref().is_err_and(StageFailure::device_lost) {
            // Freeing memory or unloading the module would wait for the hung kernel.
            std::mem::forget((a, b));
            std::mem::forget(prepared);
            std::mem::forget(guarded);
            std::mem::forget(loaded);
        }
        result
    }

    fn gpu_stages(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest, inputs: (&DeviceBuffer, &DeviceBuffer)) -> Result<String, StageFailure> {
        let binary = self.binary_stage(guarded, prepared, inputs)?;
        let deviation = self.deviation_stage(guarded, prepared, inputs)?;
        let race = self.race_stage(guarded, prepared, inputs)?;
        Ok(format!("passed: static checks, JIT load, {binary}, {deviation}, {race}, containment after every run"))
    }

    /// The race stage: binary inputs of a fresh seed, run once on an idle GPU and then
    /// under each of [`Pressure::stage`] (a co-running kernel that slows or holds SMs, so the
    /// candidate's blocks are scheduled in another order); every run must give the exact
    /// counts, so every run agrees with the others too. A kernel whose blocks race (a
    /// split-K half that reads C before the other half wrote it, a reduction that assumes
    /// block order) can pass on an idle GPU, where low block indices run first, and fail
    /// here; and when the co-running kernels happen to leave the order alone, the runs
    /// with held-back blocks change it for certain. Atomic split-K is fine: its sums of
    /// whole numbers are exact in any order.
    fn race_stage(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest, (a, b): (&DeviceBuffer, &DeviceBuffer)) -> Result<String, StageFailure> {
        let p = *self.problem();
        let gpu = self.gpu;
        let harness = internal(RACE);
        let seed = rand::random::<u64>();
        let (sa, sb) = operand_seeds(seed);
        checks::fill_binary(gpu, a, a_len(&p), sa, binary_density(p.k)).map_err(&harness)?;
        checks::fill_binary(gpu, b, b_len(&p), sb, binary_density(p.k)).map_err(&harness)?;
        let counts = checks::exact_counts(gpu, &p, a, b).map_err(&harness)?;
        spot_check(gpu, &p, (a, b), &counts, ReferenceKind::Counts, derive_seed(seed, 0x7A), RACE)?;
        let inputs = |what: String| Inputs { a, b, what };
        let started = Instant::now();
        self.race_run(guarded, prepared, inputs(format!("fresh seed {seed:#018x}, idle GPU")), &counts, None, false)?;
        // The pressure outlasts the candidate's own time several times over, and is
        // bounded so that a kernel waiting for the SMs it holds is only delayed.
        let duration = (started.elapsed() * 4 + Duration::from_millis(5)).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let sms = gpu.facts().sm_count;
        let pressures = Pressure::stage(derive_seed(seed, 0x4_06));
        for kind in pressures {
            let what = format!("fresh seed {seed:#018x}, under {} for {} ms", kind.describe(sms), duration.as_millis());
            self.race_run(guarded, prepared, inputs(what), &counts, Some((kind, duration)), true)?;
        }
        // Then a copy of the module whose blocks, about half of them at random, start late
        // (crate::ptx::delay): the order the co-running kernels change only by chance,
        // changed for certain. The wait outlasts the kernel's own idle time.
        let delay = (started.elapsed() * 2).clamp(Duration::from_micros(20), Duration::from_millis(1));
        let held = crate::ptx::delay::hold_back_blocks(&self.job.ptx, delay)
            .map_err(|e| StageFailure::new(Verdict::InternalError, RACE, format!("the harness could not add the start delays: {e}")))?;
        let loaded = gpu
            .load_ptx(&held)
            .map_err(|e| StageFailure::new(Verdict::InternalError, RACE, format!("the copy with start delays did not load, although the PTX did: {e}")))?;
        let late = PreparedManifest::new(gpu, &loaded, &self.job.manifest, guarded.operands())
            .map_err(|e| StageFailure::new(Verdict::InternalError, RACE, format!("the copy with start delays cannot be prepared: {e}")))?;
        let mut result = Ok(());
        for round in 1..=HELD_BACK_ROUNDS {
            let what = format!("fresh seed {seed:#018x}, about half of the blocks held back {} µs at their start (round {round} of {HELD_BACK_ROUNDS})", delay.as_micros());
            result = self.race_run(guarded, &late, inputs(what), &counts, None, true);
            if result.is_err() {
                break;
            }
            // Launches a timer bucket apart hold back different blocks.
            std::thread::sleep(Duration::from_millis(2));
        }
        if result.as_ref().is_err_and(StageFailure::device_lost) {
            std::mem::forget(late);
            std::mem::forget(loaded);
        }
        result?;
        Ok(format!(
            "race stage (idle, under {} co-running kernels and with blocks held back {HELD_BACK_ROUNDS} times, exact every time)",
            pressures.len()
        ))
    }

    /// `perturbed`: the run's schedule was disturbed on purpose (co-running kernels, held
    /// back blocks), so a wrong output after an exact idle run is a race.
    fn race_run(
        &mut self,
        guarded: &GuardedOperands,
        prepared: &PreparedManifest,
        inputs: Inputs,
        counts: &DeviceBuffer,
        pressure: Option<(Pressure, Duration)>,
        perturbed: bool,
    ) -> Result<(), StageFailure> {
        let p = *self.problem();
        let (gpu, job) = (self.gpu, self.job);
        let name = format!("race {}", inputs.what);
        // A wrong output under a disturbed schedule, after the same kernel was exact on an
        // idle GPU, is the race's signature; canary and input violations keep their own
        // verdicts.
        let raced = |f: StageFailure| match f.verdict {
            Verdict::UnwrittenOutput | Verdict::NonFinite | Verdict::ExactMismatch if perturbed => StageFailure::new(
                Verdict::ScheduleDependent,
                RACE,
                format!("{}. The same kernel was exact on an idle GPU: its result depends on how its blocks are scheduled (a race between blocks)", f.message),
            ),
            _ => f,
        };
        self.log.run(name, || {
            let applied = launch(gpu, job, guarded, prepared, &inputs, RACE, pressure).map_err(raced)?;
            let what = &inputs.what;
            let report = checks::compare_exact(gpu, &guarded.operands().c, counts, c_len(&p), p.n as usize, EXACT_LIMIT).map_err(internal(RACE))?;
            if let Some(m) = report.first_mismatch {
                return Err(raced(exact_mismatch(what, &p, &m, &report, RACE)));
            }
            let spinning = applied.map(|a| format!("; {} of the co-running kernel's {} blocks seen spinning", a.spinning, a.expected)).unwrap_or_default();
            Ok(((), format!("{} outputs exact{spinning}", report.checked)))
        })
    }

    /// The binary exact test: fresh seeds and the secret seed, each on new inputs, then
    /// the last inputs once more, then those inputs with [`PARTIAL_FLIPS`] elements of A
    /// and of B flipped. A kernel that caches by address, or works only on its first
    /// launch, fails on the second run; one that answers from a memo keyed by a sample of
    /// its inputs fails on the last (`repeat_dependent`). Inputs are generated on the GPU
    /// and the exact counts come from cuBLAS with fp32 output (exact for whole numbers
    /// below 2^24), spot-checked on the host; every output of C is compared.
    fn binary_stage(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest, (a, b): (&DeviceBuffer, &DeviceBuffer)) -> Result<String, StageFailure> {
        let p = *self.problem();
        let gpu = self.gpu;
        let harness = internal(BINARY);
        let density = binary_density(p.k);
        let fresh: Vec<u64> = (0..FRESH_BINARY_SEEDS).map(|_| rand::random::<u64>()).collect();
        // Secret seed in the middle: fresh, secret, fresh, then the last inputs repeated,
        // then partly changed.
        let mut seeds: Vec<(u64, String)> = Vec::new();
        for (i, s) in fresh.iter().enumerate() {
            seeds.push((*s, format!("fresh seed {s:#018x}")));
            if i == 0 {
                seeds.push((self.job.secret_seed, "the secret seed".into()));
            }
        }
        let total = seeds.len() + 2;
        let mut last: Option<(DeviceBuffer, String)> = None;
        for (i, (seed, label)) in seeds.iter().enumerate() {
            let what = format!("run {} of {total} ({label})", i + 1);
            let (sa, sb) = operand_seeds(*seed);
            checks::fill_binary(gpu, a, a_len(&p), sa, density).map_err(&harness)?;
            checks::fill_binary(gpu, b, b_len(&p), sb, density).map_err(&harness)?;
            let counts = checks::exact_counts(gpu, &p, a, b).map_err(&harness)?;
            spot_check(gpu, &p, (a, b), &counts, ReferenceKind::Counts, derive_seed(*seed, 0x5A), BINARY)?;
            self.binary_run(guarded, prepared, Inputs { a, b, what }, &counts, None)?;
            last = Some((counts, label.clone()));
        }
        if let Some((counts, label)) = last {
            let what = format!("run {} of {total} (the inputs of the previous run again, {label})", total - 1);
            self.binary_run(guarded, prepared, Inputs { a, b, what }, &counts, None)?;
            // The same inputs with a few elements changed, at positions nobody can know
            // in advance: a memo keyed by a sample of the inputs still matches and hands
            // back the previous product.
            let seed = rand::random::<u64>();
            checks::flip_binary(gpu, a, a_len(&p), derive_seed(seed, 0xF1A), PARTIAL_FLIPS).map_err(&harness)?;
            checks::flip_binary(gpu, b, b_len(&p), derive_seed(seed, 0xF1B), PARTIAL_FLIPS).map_err(&harness)?;
            let counts = checks::exact_counts(gpu, &p, a, b).map_err(&harness)?;
            spot_check(gpu, &p, (a, b), &counts, ReferenceKind::Counts, derive_seed(seed, 0x5C), BINARY)?;
            let what = format!("run {total} of {total} (the previous inputs with {PARTIAL_FLIPS} elements of A and {PARTIAL_FLIPS} of B flipped between 0 and 1)");
            let why = "the kernel answered partly changed inputs with a stale product: its output depends on having seen nearly the same inputs before (a memo keyed by a sample of them)";
            self.binary_run(guarded, prepared, Inputs { a, b, what }, &counts, Some(why))?;
        }
        Ok(format!("binary exact test ({total} runs, density {density:.3})"))
    }

    /// One binary run, every output compared with the exact counts. `stale`: the run
    /// changed only part of the previous inputs; a mismatch is then `repeat_dependent`
    /// and the message says why.
    fn binary_run(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest, inputs: Inputs, counts: &DeviceBuffer, stale: Option<&str>) -> Result<(), StageFailure> {
        let p = *self.problem();
        let name = format!("binary {}", inputs.what);
        let (gpu, job) = (self.gpu, self.job);
        self.log.run(name, || {
            launch(gpu, job, guarded, prepared, &inputs, BINARY, None)?;
            let what = &inputs.what;
            let report = checks::compare_exact(gpu, &guarded.operands().c, counts, c_len(&p), p.n as usize, EXACT_LIMIT).map_err(internal(BINARY))?;
            if let Some(m) = report.first_mismatch {
                let failure = exact_mismatch(what, &p, &m, &report, BINARY);
                return Err(match stale {
                    Some(why) => StageFailure::new(Verdict::RepeatDependent, BINARY, format!("{}. Every earlier run was exact: {why}", failure.message)),
                    None => failure,
                });
            }
            Ok(((), format!("{} outputs exact (all of C; {} over 2048 skipped)", report.checked, report.over_limit)))
        })
    }

    /// The deviation test: random inputs in [-1, 1]; the candidate's largest deviation
    /// from the fp32 reference must not exceed the worst baseline's of the same `acc`
    /// (cuBLAS and cuBLASLt, `nn` and `tn`, same inputs) plus half an fp16 ulp. Every
    /// output is compared, on the GPU.
    fn deviation_stage(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest, (a, b): (&DeviceBuffer, &DeviceBuffer)) -> Result<String, StageFailure> {
        let p = *self.problem();
        let seed = rand::random::<u64>();
        let (sa, sb) = operand_seeds(seed);
        let (gpu, job) = (self.gpu, self.job);
        checks::fill_uniform(gpu, a, a_len(&p), sa, -1.0, 1.0).map_err(internal(DEVIATION))?;
        checks::fill_uniform(gpu, b, b_len(&p), sb, -1.0, 1.0).map_err(internal(DEVIATION))?;
        let what = format!("random inputs in [-1, 1], fresh seed {seed:#018x}");
        let inputs = Inputs { a, b, what: what.clone() };
        // The candidate first: should it hang, no baseline buffers exist to be freed.
        self.log.run("deviation run", || {
            launch(gpu, job, guarded, prepared, &inputs, DEVIATION, None)?;
            Ok(((), format!("{what}: ran, contained")))
        })?;
        self.log.run("deviation bound", || {
            let bound = bound_on(gpu, &p, a, b, derive_seed(seed, 0xD5), DEVIATION)?;
            let c = &guarded.operands().c;
            let dev = bound.deviation(gpu, c, DEVIATION)?;
            let line = format!(
                "{} over all {} outputs; bound {:.6} = worst baseline {:.6} ({}) + half an fp16 ulp {:.6}",
                BoundOn::describe(&dev, p.n),
                c_len(&p),
                bound.bound.bound,
                bound.bound.baseline_max,
                bound.worst.0,
                bound.bound.slack
            );
            if !bound.bound.admits(dev.max_abs) {
                let hint = if p.acc == crate::problem::Acc::F32 {
                    " A kernel filed under acc=f32 must accumulate in fp32; fp16 accumulation belongs under acc=f16."
                } else {
                    ""
                };
                return Err(StageFailure::new(Verdict::DeviationExceeded, DEVIATION, format!("{what}: {line}.{hint}")));
            }
            Ok(((), format!("{line}; {} baselines", bound.baselines)))
        })?;
        Ok("deviation within the baseline bound".to_string())
    }
}

/// The deviation bound of [`Run::deviation_stage`] on given inputs: the fp32 reference
/// (on the device) and the bound from fresh baseline runs (cuBLAS and cuBLASLt, NN and
/// TN, plus the fp16 chain for `acc = f16`) on the same inputs. The benchmark's re-check
/// of a timed output uses it.
pub(super) struct BoundOn {
    /// C = A·B in fp32 (row-major M×N), on the device.
    pub reference: DeviceBuffer,
    pub bound: DeviationBound,
    /// The baseline that deviated most, and by how much.
    pub worst: (String, f64),
    /// How many baselines set the bound.
    pub baselines: usize,
    outputs: usize,
}

impl BoundOn {
    /// The largest deviation of `c` (fp16, row-major M×N) from the reference, over all
    /// outputs.
    pub fn deviation(&self, gpu: &Gpu, c: &DeviceBuffer, stage: &str) -> Result<checks::Largest, StageFailure> {
        checks::max_abs_deviation(gpu, Some(c), &self.reference, self.outputs).map_err(internal(stage))
    }

    /// `dev` in words: the largest deviation, where, and the two values there (C has `n`
    /// columns).
    pub fn describe(dev: &checks::Largest, n: u32) -> String {
        format!("max |C − fp32 reference| = {:.6} at {} (got {}, reference {})", dev.max_abs, cell(dev.index, n), dev.got, dev.reference as f32)
    }
}

pub(super) fn bound_on(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer, seed: u64, stage: &str) -> Result<BoundOn, StageFailure> {
    let harness = internal(stage);
    let reference = checks::fp32_reference(gpu, p, a, b).map_err(&harness)?;
    spot_check(gpu, p, (a, b), &reference, ReferenceKind::Fp32, seed, stage)?;
    let mut baselines = baseline_deviations(gpu, p, a, b, &reference, stage)?;
    if p.acc == crate::problem::Acc::F16 {
        baselines.push((FP16_CHAIN.to_string(), fp16_chain_deviation(gpu, p, a, b, &reference, seed, stage)?));
    }
    let worst = baselines.iter().max_by(|x, y| x.1.total_cmp(&y.1)).cloned().unwrap_or_default();
    let devs: Vec<f64> = baselines.iter().map(|(_, d)| *d).collect();
    let max_ref = checks::max_abs_deviation(gpu, None, &reference, c_len(p)).map_err(&harness)?.max_abs;
    let bound = DeviationBound::new(&devs, max_ref).map_err(|e| StageFailure::new(Verdict::InternalError, stage, e.to_string()))?;
    Ok(BoundOn { reference, bound, worst, baselines: baselines.len(), outputs: c_len(p) })
}

/// What a C left by a launch holds against the inputs beside it (`ops`' A and B).
pub(super) enum Judged {
    /// An output still poisoned or not finite, in words (`C[i][j] = v (n outputs
    /// non-finite)`).
    NotFinite(String),
    /// Every output finite: the largest deviation from the fp32 reference, and the bound.
    Deviation(checks::Largest, BoundOn),
}

impl Judged {
    /// The output of `ops` (C fully written and finite, then within the deviation bound
    /// of fresh baseline runs on its A and B): the check of a launch inside a sequence.
    pub fn output(gpu: &Gpu, p: &Problem, ops: &Operands, seed: u64, stage: &str) -> Result<Judged, StageFailure> {
        let harness = internal(stage);
        let (unwritten, non_finite) = checks::scan_output(gpu, &ops.c, c_len(p), POISON_BITS).map_err(&harness)?;
        if let Some(f) = unwritten.or(non_finite) {
            let value = checks::read_f16(gpu, &ops.c, f.first).map_err(&harness)?;
            return Ok(Judged::NotFinite(format!("{} = {value} ({} outputs non-finite)", cell(f.first, p.n), f.count)));
        }
        let bound = bound_on(gpu, p, &ops.a, &ops.b, seed, stage)?;
        let dev = bound.deviation(gpu, &ops.c, stage)?;
        Ok(Judged::Deviation(dev, bound))
    }
}

/// Recomputes a few outputs of a reference product on the host from the rows of A and
/// columns of B on the device (see [`crate::verify::spot`]); a disagreement is the
/// harness's failure, never the kernel's.
fn spot_check(gpu: &Gpu, p: &Problem, (a, b): (&DeviceBuffer, &DeviceBuffer), reference: &DeviceBuffer, kind: ReferenceKind, seed: u64, stage: &str) -> Result<(), StageFailure> {
    let harness = internal(stage);
    let (n, k) = (p.n as u64, p.k as u64);
    let cells = spot_cells(p.shape(), seed, SPOT_CELLS);
    let rows: Vec<u64> = cells.iter().map(|&(r, _)| r as u64 * k).collect();
    let (col_starts, stride): (Vec<u64>, u64) = match p.layout {
        Layout::Nn => (cells.iter().map(|&(_, c)| c as u64).collect(), n),
        Layout::Tn => (cells.iter().map(|&(_, c)| c as u64 * k).collect(), 1),
    };
    let a_rows = checks::gather_lines(gpu, a, &rows, 1, k as usize).map_err(&harness)?;
    let b_cols = checks::gather_lines(gpu, b, &col_starts, stride, k as usize).map_err(&harness)?;
    let at: Vec<u64> = cells.iter().map(|&(r, c)| r as u64 * n + c as u64).collect();
    let got = checks::gather_f32(gpu, reference, &at).map_err(&harness)?;
    let k = k as usize;
    for (i, &(r, c)) in cells.iter().enumerate() {
        check_reference(kind, &a_rows[i * k..(i + 1) * k], &b_cols[i * k..(i + 1) * k], got[i]).map_err(|why| {
            StageFailure::new(Verdict::InternalError, stage, format!("the harness failed: its {kind:?} reference on the GPU disagrees with the host at C[{r}][{c}]: {why}"))
        })?;
    }
    Ok(())
}

/// The binary test's failure at its first wrong output.
fn exact_mismatch(what: &str, p: &Problem, m: &crate::verify::Mismatch, report: &crate::verify::ExactReport, stage: &str) -> StageFailure {
    StageFailure::new(
        Verdict::ExactMismatch,
        stage,
        format!(
            "{what}: {} = {} but the exact value is {} (inputs in {{0,1}}); {} of {} checked outputs are wrong",
            cell(m.row as usize * p.n.max(1) as usize + m.col as usize, p.n),
            m.got,
            m.expected,
            report.mismatches,
            report.checked
        ),
    )
}

/// Outputs of a reference the host recomputes, besides the four corners.
const SPOT_CELLS: usize = 12;

/// One launch sequence of the candidate on `inputs`, with every containment check. C
/// stays on the device, in the guarded buffer.
/// With `pressure`, the co-running kernel is started on the side stream (and seen
/// spinning) before the candidate's launches are queued; what it reported is returned.
fn launch(
    gpu: &Gpu,
    job: &Job,
    guarded: &GuardedOperands,
    prepared: &PreparedManifest,
    inputs: &Inputs,
    stage: &str,
    pressure: Option<(Pressure, Duration)>,
) -> Result<Option<pressure::Applied>, StageFailure> {
    let p = job.manifest.problem;
    let what = &inputs.what;
    let harness = internal(stage);
    let ops = guarded.operands();
    ops.a.copy_range(gpu, 0, inputs.a, 0, a_len(&p) * 2).map_err(&harness)?;
    ops.b.copy_range(gpu, 0, inputs.b, 0, b_len(&p) * 2).map_err(&harness)?;
    guarded.poison_c(gpu).map_err(&harness)?;
    gpu.synchronize().map_err(&harness)?;
    let hog = match pressure {
        Some((kind, duration)) => Some(pressure::apply(gpu, kind, duration).map_err(&harness)?),
        None => None,
    };
    let ran = launch_watched(gpu, job, prepared, what, stage);
    let applied = match hog {
        // A hung or faulted candidate leaves the device unusable: waiting on the side
        // stream could fault too, and the process exits without teardown anyway.
        Some((hog, applied)) if ran.is_ok() => {
            pressure::finish(gpu, hog).map_err(&harness)?;
            Some(applied)
        }
        Some((hog, _)) => {
            std::mem::forget(hog);
            None
        }
        None => None,
    };
    ran?;
    contained(gpu, guarded, inputs, stage)?;
    Ok(applied)
}

/// Queues the candidate's launches one by one, each watched by the watchdog.
fn launch_watched(gpu: &Gpu, job: &Job, prepared: &PreparedManifest, what: &str, stage: &str) -> Result<(), StageFailure> {
    let p = job.manifest.problem;
    let limit = job.watchdog();
    for i in 0..prepared.launch_count() {
        let label = prepared.launch_label(i).unwrap_or("launch").to_string();
        prepared.enqueue_launch(gpu, i).map_err(|e| {
            StageFailure::new(Verdict::LaunchFailed, stage, format!("{what}: the driver refused {label}: {e}"))
        })?;
        let deadline = Instant::now() + limit;
        match gpu.wait_until(deadline) {
            Ok(true) => {}
            Ok(false) => {
                return Err(StageFailure::new(
                    Verdict::Timeout,
                    stage,
                    format!("{what}: {label} did not finish within the watchdog's {} ms (2 s + 2·M·N·K at 0.5 TFLOP/s for {})", limit.as_millis(), p.shape()),
                ));
            }
            Err(e) => {
                return Err(StageFailure::new(
                    Verdict::Crashed,
                    stage,
                    format!("{what}: {label} faulted on the GPU ({e}); an illegal address usually means an access outside A, B, C or the workspace"),
                ));
            }
        }
    }
    Ok(())
}

/// The containment checks, most specific first: canaries, inputs, unwritten outputs,
/// non-finite outputs. All of them run on the device; only what a message quotes is
/// read back.
fn contained(gpu: &Gpu, guarded: &GuardedOperands, inputs: &Inputs, stage: &str) -> Result<(), StageFailure> {
    let ops = guarded.operands();
    let p = *ops.problem();
    let what = &inputs.what;
    let harness = internal(stage);
    if let Some(d) = guarded.check_canaries(gpu).map_err(&harness)? {
        return Err(StageFailure::new(
            Verdict::OutOfBoundsWrite,
            stage,
            format!("{what}: {} (its canary region was overwritten); write only inside C (and the workspace)", d.describe()),
        ));
    }
    let value = |buf: &DeviceBuffer, i: usize| checks::read_f16(gpu, buf, i).map_err(&harness);
    if let Some(f) = checks::find_changed(gpu, inputs.a, &ops.a, a_len(&p)).map_err(&harness)? {
        let (r, k) = (f.first / p.k as usize, f.first % p.k as usize);
        return Err(StageFailure::new(
            Verdict::InputModified,
            stage,
            format!(
                "{what}: A[{r}][{k}] was changed from {} to {} ({} element(s) of A changed); A and B are read-only",
                value(inputs.a, f.first)?,
                value(&ops.a, f.first)?,
                f.count
            ),
        ));
    }
    if let Some(f) = checks::find_changed(gpu, inputs.b, &ops.b, b_len(&p)).map_err(&harness)? {
        let cols = match p.layout {
            Layout::Nn => p.n as usize,
            Layout::Tn => p.k as usize,
        };
        let (r, col) = (f.first / cols, f.first % cols);
        return Err(StageFailure::new(
            Verdict::InputModified,
            stage,
            format!(
                "{what}: B[{r}][{col}] (as stored, {}) was changed from {} to {} ({} element(s) of B changed); A and B are read-only",
                p.layout,
                value(inputs.b, f.first)?,
                value(&ops.b, f.first)?,
                f.count
            ),
        ));
    }
    let (unwritten, non_finite) = checks::scan_output(gpu, &ops.c, c_len(&p), POISON_BITS).map_err(&harness)?;
    if let Some(f) = unwritten {
        return Err(StageFailure::new(
            Verdict::UnwrittenOutput,
            stage,
            format!(
                "{what}: {} of {} outputs were never written, first {} (it still holds the poison NaN {POISON_BITS:#06x} put there before the launch)",
                f.count,
                c_len(&p),
                cell(f.first, p.n)
            ),
        ));
    }
    if let Some(f) = non_finite {
        return Err(StageFailure::new(
            Verdict::NonFinite,
            stage,
            format!("{what}: {} = {} ({} non-finite output(s)); no output of these inputs is NaN or infinite", cell(f.first, p.n), value(&ops.c, f.first)?, f.count),
        ));
    }
    Ok(())
}

/// Each baseline's largest deviation from the reference: cuBLAS and the first
/// [`BOUND_LT_ALGOS`] cuBLASLt heuristic algorithms, in `nn` and `tn`, with the
/// problem's `acc`, on the same matrices (B transposed on the device for the other
/// layout).
fn baseline_deviations(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer, reference: &DeviceBuffer, stage: &str) -> Result<Vec<(String, f64)>, StageFailure> {
    let harness = internal(stage);
    let (k, n) = (p.k as usize, p.n as usize);
    let other_b = match p.layout {
        // Stored K×N → N×K, and back.
        Layout::Nn => checks::transpose(gpu, b, k, n),
        Layout::Tn => checks::transpose(gpu, b, n, k),
    }
    .map_err(&harness)?;
    let mut out = Vec::new();
    for layout in [Layout::Nn, Layout::Tn] {
        let q = Problem { layout, ..*p };
        let b_here = if layout == p.layout { b } else { &other_b };
        let c = gpu.alloc(c_len(p) * 2).map_err(&harness)?;
        let view = |buf: &DeviceBuffer, bytes: usize| buf.view(0, bytes);
        let ops = Operands::from_buffers(&q, view(a, a_len(p) * 2).map_err(&harness)?, view(b_here, b_len(p) * 2).map_err(&harness)?, c, None).map_err(&harness)?;
        let mut contenders: Vec<Box<dyn Contender + '_>> = vec![Box::new(CublasGemm::new(gpu, &ops).map_err(&harness)?)];
        match LtGemm::heuristics(gpu, &ops, BOUND_LT_ALGOS) {
            Ok(algos) => contenders.extend(algos.into_iter().map(|g| Box::new(g) as Box<dyn Contender>)),
            // cuBLAS alone still sets a bound.
            Err(e) => tracing::warn!(%layout, error = %e, "cuBLASLt offered no algorithm for the deviation bound"),
        }
        for contender in &contenders {
            ops.poison_c(gpu).map_err(&harness)?;
            contender.enqueue(gpu).map_err(&harness)?;
            let dev = checks::max_abs_deviation(gpu, Some(&ops.c), reference, c_len(p)).map_err(&harness)?;
            out.push((contender.label(), dev.max_abs));
        }
    }
    Ok(out)
}

const FP16_CHAIN: &str = "fp16 FMA chain over K";

/// For `acc = f16` only: the largest deviation from the reference of C as the plainest
/// fp16-accumulating kernel computes it — one accumulator per output, each product
/// added and rounded to fp16 in K order — at every output when M·N·K is at most
/// [`DEVIATION_FULL_MACS`], else at a seeded sample of that many multiply-adds.
///
/// Why it joins the bound (docs/verification.md, the deviation test): fp16
/// accumulation error depends on the summation structure, and NVIDIA's fp16 kernels
/// keep it low with structures a correct kernel need not share. On H100 at 256×256×2048
/// a plain `mma.sync` fp16-accumulating kernel deviated by 0.245 where the worst
/// baseline deviated by 0.115. Every fp16 summation order is an honest `acc = f16`
/// kernel; this model is the worst natural one. Wrong sums are the binary test's job.
fn fp16_chain_deviation(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer, reference: &DeviceBuffer, seed: u64, stage: &str) -> Result<f64, StageFailure> {
    let harness = internal(stage);
    let cells = c_len(p) as u64;
    let count = (DEVIATION_FULL_MACS / p.k.max(1) as u64).clamp(1, cells);
    let index: Option<Vec<u64>> = (count < cells).then(|| {
        let mut rng = SplitMix64::new(seed);
        (0..count).map(|_| rng.below(cells)).collect()
    });
    let chain = checks::fp16_chain(gpu, p, a, b, index.as_deref()).map_err(&harness)?;
    let Some(index) = index else {
        // Every output: the chain is C-shaped, compared on the device.
        return Ok(checks::max_abs_deviation(gpu, Some(&chain), reference, cells as usize).map_err(&harness)?.max_abs);
    };
    let got = chain.download_f16(gpu, index.len()).map_err(&harness)?;
    let expected = checks::gather_f32(gpu, reference, &index).map_err(&harness)?;
    Ok(max_abs_deviation(&got, &expected).map_err(|e| StageFailure::new(Verdict::InternalError, stage, e.to_string()))?.max_abs)
}
