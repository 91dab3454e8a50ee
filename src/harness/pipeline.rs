//! The GPU stages of verification, run on the caller's thread (the sandbox's one GPU
//! thread): load, the binary exact test, the baseline-bounded deviation test, and the
//! containment checks after every launch sequence.
//!
//! Every launch sequence of the candidate goes through [`Run::launch`]: C poisoned, each
//! launch watched by its own watchdog, then canaries, A and B, unwritten and non-finite
//! outputs checked, in that order — so a kernel that writes out of bounds is reported as
//! such even when its C is also wrong.

use std::time::Instant;

use half::f16;

use super::guarded::GuardedOperands;
use super::stages::{CheckLog, DEVIATION_FULL_MACS, StageFailure, cell, deviation_sample, static_checks};
use super::{Job, RunOutcome};
use crate::gpu::{Contender, CublasGemm, Gpu, GpuError, LtGemm, Operands, PreparedManifest};
use crate::problem::{Layout, Problem};
use crate::verify::binary::{fill_uniform, operand_seeds};
use crate::verify::containment::{DEFAULT_CANARY_BYTES, POISON_BITS};
use crate::verify::deviation::max_abs;
use crate::verify::rng::derive_seed;
use crate::verify::{
    BinaryReference, CpuReference, DeviationBound, SamplePlan, Verdict, binary_density, fill_binary, find_changed, find_non_finite, find_unwritten,
    max_abs_deviation,
};

/// Fresh (unpredictable) binary seeds per run, besides the secret one.
pub const FRESH_BINARY_SEEDS: usize = 2;

/// cuBLASLt heuristic algorithms whose deviation counts toward the bound, per layout.
/// The autotuned baseline picks among the heuristic's list; taking its first few
/// covers that choice without timing anything here.
pub const BOUND_LT_ALGOS: usize = 8;

const LOAD: &str = "load";
const BINARY: &str = "binary exact test";
const DEVIATION: &str = "deviation test";

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

/// One launch sequence's inputs, as the checks need them.
struct Inputs<'a> {
    a: &'a [f16],
    b: &'a [f16],
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

        let result = self.gpu_stages(&guarded, &prepared);
        if result.as_ref().is_err_and(StageFailure::device_lost) {
            // Freeing memory or unloading the module would wait for the hung kernel.
            std::mem::forget(prepared);
            std::mem::forget(guarded);
            std::mem::forget(loaded);
        }
        result
    }

    fn gpu_stages(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest) -> Result<String, StageFailure> {
        let binary = self.binary_stage(guarded, prepared)?;
        let deviation = self.deviation_stage(guarded, prepared)?;
        Ok(format!("passed: static checks, JIT load, {binary}, {deviation}, containment after every run"))
    }

    /// The binary exact test: fresh seeds and the secret seed, each on new inputs, then
    /// the last inputs once more. A kernel that caches by address, or works only on its
    /// first launch, fails on the second run.
    fn binary_stage(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest) -> Result<String, StageFailure> {
        let p = *self.problem();
        let density = binary_density(p.k);
        let fresh: Vec<u64> = (0..FRESH_BINARY_SEEDS).map(|_| rand::random::<u64>()).collect();
        // Secret seed in the middle: fresh, secret, fresh, then the last inputs repeated.
        let mut seeds: Vec<(u64, String)> = Vec::new();
        for (i, s) in fresh.iter().enumerate() {
            seeds.push((*s, format!("fresh seed {s:#018x}")));
            if i == 0 {
                seeds.push((self.job.secret_seed, "the secret seed".into()));
            }
        }
        let total = seeds.len() + 1;
        let mut last: Option<(Vec<f16>, Vec<f16>, BinaryReference, SamplePlan, String)> = None;
        for (i, (seed, label)) in seeds.iter().enumerate() {
            let what = format!("run {} of {total} ({label})", i + 1);
            let (sa, sb) = operand_seeds(*seed);
            let a = fill_binary(sa, p.m as usize * p.k as usize, density);
            let b = fill_binary(sb, p.k as usize * p.n as usize, density);
            let reference = BinaryReference::new(p.shape(), p.layout, &a, &b).map_err(|e| StageFailure::new(Verdict::InternalError, BINARY, e.to_string()))?;
            let plan = SamplePlan::for_shape(p.shape(), derive_seed(*seed, 0x5A));
            self.binary_run(guarded, prepared, &a, &b, &reference, &plan, what.clone())?;
            last = Some((a, b, reference, plan, label.clone()));
        }
        if let Some((a, b, reference, plan, label)) = last {
            let what = format!("run {total} of {total} (the inputs of the previous run again, {label})");
            self.binary_run(guarded, prepared, &a, &b, &reference, &plan, what)?;
        }
        Ok(format!("binary exact test ({total} runs, density {density:.3})"))
    }

    #[allow(clippy::too_many_arguments)]
    fn binary_run(
        &mut self,
        guarded: &GuardedOperands,
        prepared: &PreparedManifest,
        a: &[f16],
        b: &[f16],
        reference: &BinaryReference,
        plan: &SamplePlan,
        what: String,
    ) -> Result<(), StageFailure> {
        let n = self.problem().n;
        let inputs = Inputs { a, b, what: what.clone() };
        let name = format!("binary {what}");
        let (gpu, job) = (self.gpu, self.job);
        self.log.run(name, || {
            let c = launch(gpu, job, guarded, prepared, &inputs, BINARY)?;
            let report = reference.check(&c, plan).map_err(|e| StageFailure::new(Verdict::InternalError, BINARY, e.to_string()))?;
            if let Some(m) = report.first_mismatch {
                return Err(StageFailure::new(
                    Verdict::ExactMismatch,
                    BINARY,
                    format!(
                        "{what}: {} = {} but the exact value is {} (inputs in {{0,1}}); {} of {} checked outputs are wrong",
                        cell(m.row as usize * n.max(1) as usize + m.col as usize, n),
                        m.got,
                        m.expected,
                        report.mismatches,
                        report.checked
                    ),
                ));
            }
            let sampled = if matches!(plan, SamplePlan::Full) { "all" } else { "sampled lines of" };
            Ok(((), format!("{} outputs exact ({sampled} C; {} over 2048 skipped)", report.checked, report.over_limit)))
        })
    }

    /// The deviation test: random inputs in [-1, 1]; the candidate's largest deviation
    /// from the fp32 reference must not exceed the worst baseline's of the same `acc`
    /// (cuBLAS and cuBLASLt, `nn` and `tn`, same inputs) plus half an fp16 ulp.
    fn deviation_stage(&mut self, guarded: &GuardedOperands, prepared: &PreparedManifest) -> Result<String, StageFailure> {
        let p = *self.problem();
        let seed = rand::random::<u64>();
        let (sa, sb) = operand_seeds(seed);
        let a = fill_uniform(sa, p.m as usize * p.k as usize, -1.0, 1.0);
        let b = fill_uniform(sb, p.k as usize * p.n as usize, -1.0, 1.0);
        let what = format!("random inputs in [-1, 1], fresh seed {seed:#018x}");
        let inputs = Inputs { a: &a, b: &b, what: what.clone() };
        let (gpu, job) = (self.gpu, self.job);
        // The candidate first: should it hang, no baseline buffers exist to be freed.
        let c = self.log.run("deviation run", || {
            let c = launch(gpu, job, guarded, prepared, &inputs, DEVIATION)?;
            Ok((c, format!("{what}: ran, contained")))
        })?;
        self.log.run("deviation bound", || {
            let sample = deviation_sample(p.shape(), derive_seed(seed, 0xD5), DEVIATION_FULL_MACS);
            let reference = CpuReference::new(p.shape(), p.layout, &a, &b).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
            let (indices, ref_values): (Vec<usize>, Vec<f32>) = match &sample {
                None => ((0..c.len()).collect(), reference.full()),
                Some(idx) => {
                    let values = reference.at_indices(idx).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
                    (idx.clone(), values)
                }
            };
            let mut baselines = baseline_deviations(gpu, &p, &a, &b, &indices, &ref_values)?;
            if p.acc == crate::problem::Acc::F16 {
                let chain = fp16_chain_at(&p, &a, &b, &indices);
                let dev = max_abs_deviation(&chain, &ref_values).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
                baselines.push((FP16_CHAIN.to_string(), dev.max_abs));
            }
            let worst = baselines.iter().max_by(|x, y| x.1.total_cmp(&y.1)).cloned().unwrap_or_default();
            let devs: Vec<f64> = baselines.iter().map(|(_, d)| *d).collect();
            let bound = DeviationBound::new(&devs, max_abs(&ref_values)).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
            let picked: Vec<f16> = indices.iter().map(|&i| c[i]).collect();
            let dev = max_abs_deviation(&picked, &ref_values).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
            let at = indices.get(dev.index).copied().unwrap_or(0);
            let scope = if sample.is_some() { format!("{} sampled outputs", indices.len()) } else { "all outputs".into() };
            let line = format!(
                "max |C − fp32 reference| = {:.6} at {} (got {}, reference {}) over {scope}; bound {:.6} = worst baseline {:.6} ({}) + half an fp16 ulp {:.6}",
                dev.max_abs,
                cell(at, p.n),
                c[at],
                ref_values.get(dev.index).copied().unwrap_or(f32::NAN),
                bound.bound,
                bound.baseline_max,
                worst.0,
                bound.slack
            );
            if !bound.admits(dev.max_abs) {
                let hint = if p.acc == crate::problem::Acc::F32 {
                    " A kernel filed under acc=f32 must accumulate in fp32; fp16 accumulation belongs under acc=f16."
                } else {
                    ""
                };
                return Err(StageFailure::new(Verdict::DeviationExceeded, DEVIATION, format!("{what}: {line}.{hint}")));
            }
            Ok(((), format!("{line}; {} baselines", baselines.len())))
        })?;
        Ok("deviation within the baseline bound".to_string())
    }
}

/// The deviation bound of [`Run::deviation_stage`] on given inputs: the sampled outputs,
/// their fp32 reference, and the bound from fresh baseline runs (cuBLAS and cuBLASLt,
/// NN and TN, plus the fp16 chain for `acc = f16`) on the same inputs. The benchmark's
/// re-check of a timed output uses it.
pub(super) struct BoundOn {
    pub indices: Vec<usize>,
    pub reference: Vec<f32>,
    pub bound: DeviationBound,
    /// The baseline that deviated most, and by how much.
    pub worst: (String, f64),
}

pub(super) fn bound_on(gpu: &Gpu, p: &Problem, a: &[f16], b: &[f16], seed: u64, stage: &str) -> Result<BoundOn, StageFailure> {
    let fail = |e: crate::verify::VerifyError| StageFailure::new(Verdict::InternalError, stage, e.to_string());
    let c_len = p.m as usize * p.n as usize;
    let sample = deviation_sample(p.shape(), seed, DEVIATION_FULL_MACS);
    let reference = CpuReference::new(p.shape(), p.layout, a, b).map_err(fail)?;
    let (indices, ref_values): (Vec<usize>, Vec<f32>) = match sample {
        None => ((0..c_len).collect(), reference.full()),
        Some(idx) => {
            let values = reference.at_indices(&idx).map_err(fail)?;
            (idx, values)
        }
    };
    let mut baselines = baseline_deviations(gpu, p, a, b, &indices, &ref_values)?;
    if p.acc == crate::problem::Acc::F16 {
        let chain = fp16_chain_at(p, a, b, &indices);
        let dev = max_abs_deviation(&chain, &ref_values).map_err(fail)?;
        baselines.push((FP16_CHAIN.to_string(), dev.max_abs));
    }
    let worst = baselines.iter().max_by(|x, y| x.1.total_cmp(&y.1)).cloned().unwrap_or_default();
    let devs: Vec<f64> = baselines.iter().map(|(_, d)| *d).collect();
    let bound = DeviationBound::new(&devs, max_abs(&ref_values)).map_err(fail)?;
    Ok(BoundOn { indices, reference: ref_values, bound, worst })
}

/// One launch sequence of the candidate on `inputs`, with every containment check.
/// Returns C.
fn launch(gpu: &Gpu, job: &Job, guarded: &GuardedOperands, prepared: &PreparedManifest, inputs: &Inputs, stage: &str) -> Result<Vec<f16>, StageFailure> {
    let p = job.manifest.problem;
    let what = &inputs.what;
    let harness = internal(stage);
    guarded.operands().upload(gpu, inputs.a, inputs.b).map_err(&harness)?;
    guarded.poison_c(gpu).map_err(&harness)?;
    gpu.synchronize().map_err(&harness)?;
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
    let c = guarded.operands().download_c(gpu).map_err(&harness)?;
    contained(gpu, guarded, inputs, &c, stage)?;
    Ok(c)
}

/// The containment checks, most specific first: canaries, inputs, unwritten outputs,
/// non-finite outputs.
fn contained(gpu: &Gpu, guarded: &GuardedOperands, inputs: &Inputs, c: &[f16], stage: &str) -> Result<(), StageFailure> {
    let p = *guarded.operands().problem();
    let what = &inputs.what;
    let harness = internal(stage);
    if let Some(d) = guarded.check_canaries(gpu).map_err(&harness)? {
        return Err(StageFailure::new(
            Verdict::OutOfBoundsWrite,
            stage,
            format!("{what}: {} (its canary region was overwritten); write only inside C (and the workspace)", d.describe()),
        ));
    }
    let a_now = guarded.download_a(gpu).map_err(&harness)?;
    if let Some(f) = find_changed(inputs.a, &a_now) {
        let (r, k) = (f.first / p.k as usize, f.first % p.k as usize);
        return Err(StageFailure::new(
            Verdict::InputModified,
            stage,
            format!("{what}: A[{r}][{k}] was changed from {} to {} ({} element(s) of A changed); A and B are read-only", inputs.a[f.first], a_now[f.first], f.count),
        ));
    }
    let b_now = guarded.download_b(gpu).map_err(&harness)?;
    if let Some(f) = find_changed(inputs.b, &b_now) {
        let cols = match p.layout {
            Layout::Nn => p.n as usize,
            Layout::Tn => p.k as usize,
        };
        let (r, col) = (f.first / cols, f.first % cols);
        return Err(StageFailure::new(
            Verdict::InputModified,
            stage,
            format!("{what}: B[{r}][{col}] (as stored, {}) was changed from {} to {} ({} element(s) of B changed); A and B are read-only", p.layout, inputs.b[f.first], b_now[f.first], f.count),
        ));
    }
    if let Some(f) = find_unwritten(c) {
        return Err(StageFailure::new(
            Verdict::UnwrittenOutput,
            stage,
            format!(
                "{what}: {} of {} outputs were never written, first {} (it still holds the poison NaN {POISON_BITS:#06x} put there before the launch)",
                f.count,
                c.len(),
                cell(f.first, p.n)
            ),
        ));
    }
    if let Some(f) = find_non_finite(c) {
        return Err(StageFailure::new(
            Verdict::NonFinite,
            stage,
            format!("{what}: {} = {} ({} non-finite output(s)); no output of these inputs is NaN or infinite", cell(f.first, p.n), c[f.first], f.count),
        ));
    }
    Ok(())
}

/// Each baseline's largest deviation from the reference at `indices`: cuBLAS and the
/// first [`BOUND_LT_ALGOS`] cuBLASLt heuristic algorithms, in `nn` and `tn`, with the
/// problem's `acc`, on the same matrices.
fn baseline_deviations(gpu: &Gpu, p: &Problem, a: &[f16], b: &[f16], indices: &[usize], reference: &[f32]) -> Result<Vec<(String, f64)>, StageFailure> {
    let harness = internal(DEVIATION);
    let other_b = transpose_b(p, b);
    let mut out = Vec::new();
    for layout in [Layout::Nn, Layout::Tn] {
        let q = Problem { layout, ..*p };
        let b_here = if layout == p.layout { b } else { &other_b };
        let ops = Operands::alloc(gpu, &q, 0).map_err(&harness)?;
        ops.upload(gpu, a, b_here).map_err(&harness)?;
        let mut contenders: Vec<Box<dyn Contender + '_>> = vec![Box::new(CublasGemm::new(gpu, &ops).map_err(&harness)?)];
        match LtGemm::heuristics(gpu, &ops, BOUND_LT_ALGOS) {
            Ok(algos) => contenders.extend(algos.into_iter().map(|g| Box::new(g) as Box<dyn Contender>)),
            // cuBLAS alone still sets a bound.
            Err(e) => tracing::warn!(%layout, error = %e, "cuBLASLt offered no algorithm for the deviation bound"),
        }
        for contender in &contenders {
            ops.poison_c(gpu).map_err(&harness)?;
            contender.enqueue(gpu).map_err(&harness)?;
            gpu.synchronize().map_err(&harness)?;
            let c = ops.download_c(gpu).map_err(&harness)?;
            let picked: Vec<f16> = indices.iter().map(|&i| c[i]).collect();
            let dev = max_abs_deviation(&picked, reference).map_err(|e| StageFailure::new(Verdict::InternalError, DEVIATION, e.to_string()))?;
            out.push((contender.label(), dev.max_abs));
        }
    }
    Ok(out)
}

const FP16_CHAIN: &str = "fp16 FMA chain over K (CPU model)";

/// For `acc = f16` only: C at `indices` as the plainest fp16-accumulating kernel computes
/// it — one accumulator per output, each product added and rounded to fp16 in K order.
///
/// Why it joins the bound (a deviation from DESIGN.md, see docs/verification.md): fp16
/// accumulation error depends on the summation structure, and NVIDIA's fp16 kernels
/// keep it low with structures a correct kernel need not share. On H100 at 256×256×2048
/// a plain `mma.sync` fp16-accumulating kernel deviated by 0.245 where the worst
/// baseline deviated by 0.115. Every fp16 summation order is an honest `acc = f16`
/// kernel; this model is the worst natural one. Wrong sums are the binary test's job.
fn fp16_chain_at(p: &Problem, a: &[f16], b: &[f16], indices: &[usize]) -> Vec<f16> {
    let (n, k) = (p.n as usize, p.k as usize);
    let b_at = |kk: usize, j: usize| match p.layout {
        Layout::Nn => b[kk * n + j],
        Layout::Tn => b[j * k + kk],
    };
    crate::verify::par_chunks(indices.len(), |range| {
        range
            .map(|s| {
                let (i, j) = (indices[s] / n, indices[s] % n);
                let mut acc = f16::ZERO;
                for kk in 0..k {
                    // The product of two fp16 values is exact in f64, so one rounding per step.
                    acc = f16::from_f64(acc.to_f64() + a[i * k + kk].to_f64() * b_at(kk, j).to_f64());
                }
                acc
            })
            .collect::<Vec<f16>>()
    })
    .concat()
}

/// B in the other layout's storage: K×N row-major ↔ N×K row-major.
fn transpose_b(p: &Problem, b: &[f16]) -> Vec<f16> {
    let (k, n) = (p.k as usize, p.n as usize);
    let mut t = vec![f16::ZERO; b.len()];
    match p.layout {
        // Stored K×N → N×K.
        Layout::Nn => {
            for kk in 0..k {
                for j in 0..n {
                    t[j * k + kk] = b[kk * n + j];
                }
            }
        }
        // Stored N×K → K×N.
        Layout::Tn => {
            for j in 0..n {
                for kk in 0..k {
                    t[kk * n + j] = b[j * k + kk];
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Acc, Arch, Shape};

    #[test]
    fn the_fp16_chain_rounds_every_step() {
        // 1 + 2^-11 (half an ulp at 1) added 4 times: each step rounds back to 1 (ties to
        // even), where an exact sum gives 1 + 2^-9.
        let p = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(1, 1, 5).expect("shape"));
        let tiny = f16::from_f64(2f64.powi(-11));
        let a = vec![f16::ONE, tiny, tiny, tiny, tiny];
        let b = vec![f16::ONE; 5];
        assert_eq!(fp16_chain_at(&p, &a, &b, &[0]), vec![f16::ONE]);
    }

    #[test]
    fn transposing_b_twice_gives_it_back() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(3, 5, 7).expect("shape"));
        let b: Vec<f16> = (0..35).map(|i| f16::from_f32(i as f32)).collect();
        let t = transpose_b(&p, &b);
        // B[kk=2][j=3] stored K×N sits at N×K [3][2].
        assert_eq!(t[3 * 7 + 2], b[2 * 5 + 3]);
        let back = transpose_b(&Problem { layout: Layout::Tn, ..p }, &t);
        assert_eq!(back, b);
    }
}
