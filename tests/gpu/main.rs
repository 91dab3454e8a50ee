//! GPU tests: the harness against a real device. Every test asks `gpu::available()` first
//! and, on a machine without CUDA, prints `SKIPPED <test>: no GPU (…)` (past the capture) and passes, so `cargo test`
//! runs anywhere. On a GPU: device facts, PTX loading, the manifest launcher with the
//! simple kernel, the cuBLAS / cuBLASLt baselines against a CPU reference, and timing.
//!
//! Run on a device with `--nocapture --test-threads=1` to see the tables.
//!
//! One test binary (`--test gpu`), one module per part: `device` (facts, launcher,
//! baselines, timing, the shipped catalog), `hostile` (the sandboxed pipeline against the
//! adversarial suite), `checks` (the verifier's GPU checks against their host models) and
//! `hopper` (the tuner's codes through the verifier). The shared helpers live here.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::{Duration, Instant};

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use kaas::gpu::{self, Contender, CublasGemm, Gpu, GpuError, LoadedPtx, LtGemm, Operands, PreparedManifest};
use kaas::kernels::{self, SimpleConfig};
use kaas::manifest::{L2Promotion, Operand, Param, Swizzle, TensorMapSpec};
use kaas::problem::{Acc, Arch, Layout, Problem, Shape};
use kaas::harness::{Job, RunOutcome};
use kaas::manifest::{ABI, Launch, Manifest};
use kaas::sandbox::{self, SandboxCommand};
use kaas::verify::Verdict;

/// Reports a test that cannot run here. With `KAAS_REQUIRE_GPU` set (the device
/// machine's runs set it: `scripts/gpu-check.sh remote`), a skip is a failure instead, so
/// a GPU run can never pass by skipping.
fn skip(why: impl std::fmt::Display) {
    if std::env::var_os("KAAS_REQUIRE_GPU").is_some_and(|v| !v.is_empty()) {
        panic!("KAAS_REQUIRE_GPU is set, but this test would skip: {why}");
    }
    // Straight to the process's stderr, past libtest's capture: cargo reports a skipped
    // test as passed, so the line that says it skipped must show where a reader looks.
    use std::io::Write;
    let test = std::thread::current().name().unwrap_or("a GPU test").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

fn gpu_or_skip() -> Option<Gpu> {
    if let Err(why) = gpu::available() {
        skip(format!("no GPU ({why})"));
        return None;
    }
    Some(Gpu::open(0).expect("open device 0"))
}

/// Whether a GPU and NVRTC are here (else it says why it skips), without opening the
/// device in this process: for tests whose GPU work runs in sandbox children.
fn gpu_and_nvrtc_here() -> bool {
    if let Err(why) = gpu::available() {
        skip(format!("no GPU ({why})"));
        return false;
    }
    if let Err(why) = gpu::nvrtc::available() {
        skip(format!("no NVRTC ({why})"));
        return false;
    }
    true
}

fn gpu_and_nvrtc_or_skip() -> Option<Gpu> {
    let gpu = gpu_or_skip()?;
    if let Err(why) = gpu::nvrtc::available() {
        skip(format!("no NVRTC ({why})"));
        return None;
    }
    Some(gpu)
}

fn problem(acc: Acc, layout: Layout, (m, n, k): (u32, u32, u32)) -> Problem {
    Problem::new(Arch::Sm80, acc, layout, Shape::new(m, n, k).expect("valid shape"))
}

// ---------------------------------------------------------------------------------------
// Inputs and the CPU reference

/// A (M×K), B as K×N and as N×K (row-major), and C = A·B computed exactly in f64.
struct Case {
    shape: (u32, u32, u32),
    a: Vec<f16>,
    b_kn: Vec<f16>,
    b_nk: Vec<f16>,
    reference: Vec<f64>,
}

impl Case {
    /// {0,1} inputs with a density that keeps most sums under 2048 (exact in fp16).
    fn binary(shape: (u32, u32, u32), seed: u64) -> Case {
        let p = (1000.0 / shape.2 as f64).sqrt().min(0.5);
        let mut rng = StdRng::seed_from_u64(seed);
        Case::build(shape, move || if rng.random_bool(p) { 1.0 } else { 0.0 })
    }

    /// Uniform values in [-1, 1], rounded to fp16.
    fn random(shape: (u32, u32, u32), seed: u64) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        Case::build(shape, move || rng.random_range(-1.0f32..=1.0))
    }

    fn build(shape: (u32, u32, u32), mut draw: impl FnMut() -> f32) -> Case {
        let (m, n, k) = (shape.0 as usize, shape.1 as usize, shape.2 as usize);
        let a: Vec<f16> = (0..m * k).map(|_| f16::from_f32(draw())).collect();
        let b_kn: Vec<f16> = (0..k * n).map(|_| f16::from_f32(draw())).collect();
        let mut b_nk = vec![f16::ZERO; n * k];
        for p in 0..k {
            for j in 0..n {
                b_nk[j * k + p] = b_kn[p * n + j];
            }
        }
        let reference = reference_product(m, n, k, &a, &b_kn);
        Case { shape, a, b_kn, b_nk, reference }
    }

    fn b(&self, layout: Layout) -> &[f16] {
        match layout {
            Layout::Nn => &self.b_kn,
            Layout::Tn => &self.b_nk,
        }
    }
}

/// Row-major C = A·B in f64, rows split over the CPU's threads.
fn reference_product(m: usize, n: usize, k: usize, a: &[f16], b_kn: &[f16]) -> Vec<f64> {
    let a: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let b: Vec<f64> = b_kn.iter().map(|x| x.to_f64()).collect();
    let mut c = vec![0.0f64; m * n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get()).min(32);
    let rows_per = m.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk_index, chunk) in c.chunks_mut(rows_per * n).enumerate() {
            let (a, b) = (&a, &b);
            s.spawn(move || {
                for (r, row) in chunk.chunks_mut(n).enumerate() {
                    let i = chunk_index * rows_per + r;
                    for p in 0..k {
                        let x = a[i * k + p];
                        if x != 0.0 {
                            for (cj, bj) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                                *cj += x * bj;
                            }
                        }
                    }
                }
            });
        }
    });
    c
}

/// Elements whose reference is below 2048 and that differ from it, with the first one.
fn exact_mismatches(out: &[f16], reference: &[f64], n: usize) -> (usize, Option<String>) {
    let mut count = 0;
    let mut first = None;
    for (idx, (o, r)) in out.iter().zip(reference).enumerate() {
        if *r < 2048.0 && o.to_f64() != *r {
            count += 1;
            if first.is_none() {
                first = Some(format!("C[{}][{}] = {} but should be {}", idx / n, idx % n, o, r));
            }
        }
    }
    (count, first)
}

/// ‖out − ref‖ / ‖ref‖ (Frobenius); infinite when any output is NaN or infinite.
fn relative_error(out: &[f16], reference: &[f64]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (o, r) in out.iter().zip(reference) {
        let o = o.to_f64();
        if !o.is_finite() {
            return f64::INFINITY;
        }
        diff += (o - r) * (o - r);
        norm += r * r;
    }
    if diff == 0.0 { 0.0 } else { diff.sqrt() / norm.sqrt().max(1e-30) }
}

/// Relative-error bound for random inputs: output rounding for fp32 accumulation; fp16
/// accumulation also rounds every partial sum.
fn tolerance(acc: Acc) -> f64 {
    match acc {
        Acc::F32 => 1e-3,
        Acc::F16 => 1e-2,
    }
}

// ---------------------------------------------------------------------------------------
// Running contenders

/// Compiled simple-kernel PTX per (acc, layout, config), loaded once.
struct KernelCache {
    loaded: HashMap<(Acc, Layout, SimpleConfig), LoadedPtx>,
}

impl KernelCache {
    fn new() -> Self {
        KernelCache { loaded: HashMap::new() }
    }

    fn get(&mut self, gpu: &Gpu, p: &Problem, config: &SimpleConfig) -> Result<&LoadedPtx, GpuError> {
        match self.loaded.entry((p.acc, p.layout, *config)) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(v) => Ok(v.insert(gpu.load_ptx(&kernels::compile_simple(p, config)?)?)),
        }
    }
}

fn upload(gpu: &Gpu, p: &Problem, case: &Case) -> Result<Operands, GpuError> {
    let ops = Operands::alloc(gpu, p, 0)?;
    ops.upload(gpu, &case.a, case.b(p.layout))?;
    ops.poison_c(gpu)?;
    Ok(ops)
}

fn run_simple(
    gpu: &Gpu,
    cache: &mut KernelCache,
    p: &Problem,
    config: &SimpleConfig,
    case: &Case,
) -> Result<Vec<f16>, GpuError> {
    let ops = upload(gpu, p, case)?;
    let ptx = cache.get(gpu, p, config)?;
    let prepared = PreparedManifest::new(gpu, ptx, &kernels::manifest_for(p, config), &ops)?;
    prepared.run(gpu)?;
    ops.download_c(gpu)
}

fn run_contender(gpu: &Gpu, ops: &Operands, c: &dyn Contender) -> Result<Vec<f16>, GpuError> {
    ops.poison_c(gpu)?;
    c.enqueue(gpu)?;
    gpu.synchronize()?;
    ops.download_c(gpu)
}

fn shape_text(s: (u32, u32, u32)) -> String {
    format!("{}x{}x{}", s.0, s.1, s.2)
}

/// Checks one contender's outputs on a binary and a random case; returns a table row and
/// whether it passed.
fn judge(label: &str, acc: Acc, binary: &Case, bin_out: &[f16], random: &Case, rnd_out: &[f16]) -> (String, bool) {
    let n = binary.shape.1 as usize;
    let (bad, first) = exact_mismatches(bin_out, &binary.reference, n);
    let rel = relative_error(rnd_out, &random.reference);
    let ok = bad == 0 && rel <= tolerance(acc);
    let row = format!(
        "{:<16} {:<44} exact {:>8} rel {:>10.3e} (tol {:.0e}) {}{}",
        shape_text(binary.shape),
        label,
        if bad == 0 { "ok".to_string() } else { format!("{bad} bad") },
        rel,
        tolerance(acc),
        if ok { "PASS" } else { "FAIL" },
        first.map(|f| format!(" — {f}")).unwrap_or_default()
    );
    (row, ok)
}

const AWKWARD_SHAPES: [(u32, u32, u32); 10] = [
    (1, 1, 1),
    (17, 33, 65),
    (127, 129, 257),
    (1024, 1024, 1024),
    (64, 4096, 128),
    (8, 8, 8),
    (129, 127, 8),
    (200, 72, 40),
    (1, 4096, 1),
    (3000, 17, 5),
];

/// The `kaas` binary to spawn as the sandbox: `KAAS_SANDBOX_EXE` (set by gpu-check.sh on
/// the device) or the one cargo built beside this test.
fn sandbox_command() -> SandboxCommand {
    let exe = std::env::var_os(sandbox::EXE_ENV).filter(|p| !p.is_empty()).unwrap_or_else(|| env!("CARGO_BIN_EXE_kaas").into());
    SandboxCommand::new(exe, ["sandbox"])
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max { format!("{}…", line.chars().take(max).collect::<String>()) } else { line.to_string() }
}

mod checks;
mod device;
mod hopper;
mod hostile;
