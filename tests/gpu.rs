//! GPU tests: the harness against a real device. Every test asks `gpu::available()` first
//! and, on a machine without CUDA, prints `SKIP: no GPU (…)` and passes, so `cargo test`
//! runs anywhere. On a GPU: device facts, PTX loading, the manifest launcher with the
//! simple kernel, the cuBLAS / cuBLASLt baselines against a CPU reference, and timing.
//!
//! Run on a device with `--nocapture --test-threads=1` to see the tables.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use kaas::gpu::{self, Contender, CublasGemm, Gpu, GpuError, LoadedPtx, LtGemm, Operands, PreparedManifest};
use kaas::kernels::{self, SimpleConfig};
use kaas::manifest::{L2Promotion, Operand, Param, Swizzle, TensorMapSpec};
use kaas::problem::{Acc, Arch, Layout, Problem, Shape};

/// Reports a test that cannot run here. With `KAAS_REQUIRE_GPU` set (the device
/// machine's runs set it: `scripts/gpu-check.sh remote`), a skip is a failure instead, so
/// a GPU run can never pass by skipping.
fn skip(why: String) {
    if std::env::var_os("KAAS_REQUIRE_GPU").is_some_and(|v| !v.is_empty()) {
        panic!("KAAS_REQUIRE_GPU is set, but this test would skip: {why}");
    }
    println!("SKIP: {why}");
}

fn gpu_or_skip() -> Option<Gpu> {
    if let Err(why) = gpu::available() {
        skip(format!("no GPU ({why})"));
        return None;
    }
    Some(Gpu::open(0).expect("open device 0"))
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

// ---------------------------------------------------------------------------------------
// Tests

/// The reference everything is judged by, against the definition (runs without a GPU).
#[test]
fn the_cpu_reference_is_the_product() {
    let (m, n, k) = (37usize, 23usize, 19usize);
    let case = Case::random((m as u32, n as u32, k as u32), 9);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| case.a[i * k + p].to_f64() * case.b_nk[j * k + p].to_f64()).sum();
            assert!((case.reference[i * n + j] - want).abs() <= 1e-12, "C[{i}][{j}]");
        }
    }
    let out: Vec<f16> = case.reference.iter().map(|&x| f16::from_f64(x)).collect();
    assert!(relative_error(&out, &case.reference) <= tolerance(Acc::F32));
    let mut broken = out.clone();
    broken[5] = f16::NAN;
    assert_eq!(relative_error(&broken, &case.reference), f64::INFINITY);
}

#[test]
fn device_facts_are_sane() {
    let Some(gpu) = gpu_or_skip() else { return };
    let f = gpu.facts();
    println!("{}", serde_json::to_string_pretty(f).expect("facts serialise"));
    assert!(!f.name.is_empty());
    assert!(!f.device_class.is_empty());
    assert!(f.compute_capability >= (8, 0), "the harness needs sm_80 or later, got {:?}", f.compute_capability);
    assert!(f.sm_count > 0);
    assert!(f.max_shared_mem_per_block_optin >= 48 * 1024);
    assert!(f.max_threads_per_block >= 1024);
    assert!(f.total_memory_bytes > 1 << 30);
    assert!(f.cuda_driver_api_version.contains('.'));
    assert!(f.cublas_version.split('.').count() == 3);
}

#[test]
fn broken_ptx_is_refused_with_the_jit_log() {
    let Some(gpu) = gpu_or_skip() else { return };
    let bad =
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry broken() {\n  frobnicate.u32 %r1;\n  ret;\n}\n";
    match gpu.load_ptx(bad) {
        Err(GpuError::Load { log, code, .. }) => {
            println!("JIT refused as expected: {code}\n{log}");
            assert!(!log.is_empty(), "the JIT error log came back empty");
        }
        other => panic!("broken PTX was not refused with a log: {other:?}"),
    }
    // Valid PTX loads, and a manifest naming an entry it lacks is refused by name.
    let good = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry nothing() {\n  ret;\n}\n";
    let loaded = gpu.load_ptx(good).expect("valid PTX loads");
    let p = problem(Acc::F32, Layout::Tn, (16, 16, 16));
    let ops = Operands::alloc(&gpu, &p, 0).expect("alloc");
    let err = PreparedManifest::new(&gpu, &loaded, &kernels::manifest_for(&p, &SimpleConfig::LARGE), &ops)
        .expect_err("missing entry must be refused");
    assert!(err.to_string().contains("no entry"), "{err}");
}

#[test]
fn the_launcher_refuses_params_that_do_not_match_the_entry() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let p = problem(Acc::F32, Layout::Nn, (64, 64, 64));
    let config = SimpleConfig::LARGE;
    let ptx = gpu.load_ptx(&kernels::compile_simple(&p, &config).expect("compile")).expect("load");
    let ops = Operands::alloc(&gpu, &p, 0).expect("alloc");

    let mut short = kernels::manifest_for(&p, &config);
    short.launches[0].params.pop();
    let err = PreparedManifest::new(&gpu, &ptx, &short, &ops).expect_err("5 params for a 6-param entry");
    assert!(err.to_string().contains("takes 6 parameters"), "{err}");

    let mut wrong = kernels::manifest_for(&p, &config);
    wrong.launches[0].params[3] = Param::Ptr(kaas::manifest::Buffer::A); // 8 bytes where the entry has 4
    let err = PreparedManifest::new(&gpu, &ptx, &wrong, &ops).expect_err("size mismatch");
    assert!(err.to_string().contains("param 3"), "{err}");

    let mut big = kernels::manifest_for(&p, &config);
    big.launches[0].block = [1024, 1, 1]; // the entry is built for 256 threads
    let err = PreparedManifest::new(&gpu, &ptx, &big, &ops).expect_err("too many threads");
    assert!(err.to_string().contains("threads"), "{err}");
}

#[test]
fn the_simple_kernel_matches_the_reference_on_awkward_shapes() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let mut cache = KernelCache::new();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (i, &shape) in AWKWARD_SHAPES.iter().enumerate() {
        let binary = Case::binary(shape, 1000 + i as u64);
        let random = Case::random(shape, 2000 + i as u64);
        for config in [SimpleConfig::LARGE, SimpleConfig::SMALL] {
            for layout in Layout::ALL {
                for acc in Acc::ALL {
                    let p = problem(acc, layout, shape);
                    let label = format!("simple {layout} {acc} {}x{}x{}", config.bm, config.bn, config.bk);
                    let outs = run_simple(&gpu, &mut cache, &p, &config, &binary)
                        .and_then(|b| run_simple(&gpu, &mut cache, &p, &config, &random).map(|r| (b, r)));
                    match outs {
                        Ok((b, r)) => {
                            let (row, ok) = judge(&label, acc, &binary, &b, &random, &r);
                            if !ok {
                                failures.push(row.clone());
                            }
                            rows.push(row);
                        }
                        Err(e) => {
                            let row = format!("{:<16} {label:<44} ERROR {e}", shape_text(shape));
                            failures.push(row.clone());
                            rows.push(row);
                        }
                    }
                }
            }
        }
    }
    println!("\nsimple kernel vs CPU reference ({})", gpu.facts().name);
    for r in &rows {
        println!("CHECK {r}");
    }
    assert!(failures.is_empty(), "{} of {} checks failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

#[test]
fn the_simple_kernel_runs_under_a_cluster_launch() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    if gpu.facts().compute_capability < (9, 0) {
        skip(format!("clusters need sm_90"));
        return;
    }
    let shape = (256, 512, 64);
    let case = Case::binary(shape, 7);
    let p = problem(Acc::F32, Layout::Tn, shape);
    let config = SimpleConfig::LARGE;
    let ptx = gpu.load_ptx(&kernels::compile_simple(&p, &config).expect("compile")).expect("load");
    let mut manifest = kernels::manifest_for(&p, &config);
    manifest.launches[0].cluster = [2, 1, 1];
    assert_eq!(manifest.launches[0].grid[0] % 2, 0);
    let ops = upload(&gpu, &p, &case).expect("upload");
    PreparedManifest::new(&gpu, &ptx, &manifest, &ops).expect("prepare").run(&gpu).expect("run");
    let out = ops.download_c(&gpu).expect("download");
    let (bad, first) = exact_mismatches(&out, &case.reference, shape.1 as usize);
    assert_eq!(bad, 0, "{first:?}");
}

#[test]
fn tensor_maps_encode_for_aligned_operands_and_refuse_misaligned_ones() {
    let Some(gpu) = gpu_or_skip() else { return };
    let spec = |operand| TensorMapSpec { operand, box_dims: [64, 128], swizzle: Swizzle::B128, l2_promotion: L2Promotion::B128 };
    let aligned = Operands::alloc(&gpu, &problem(Acc::F32, Layout::Tn, (256, 512, 128)), 0).expect("alloc");
    for operand in [Operand::A, Operand::B, Operand::C] {
        let words = gpu::encode_tensor_map(&aligned, &spec(operand)).expect("aligned operands encode");
        assert!(words.iter().any(|&w| w != 0), "{operand:?}: the encoded map is all zeros");
    }
    // K = 17: A's rows are 34 bytes apart, not a multiple of 16.
    let odd = Operands::alloc(&gpu, &problem(Acc::F32, Layout::Tn, (256, 512, 17)), 0).expect("alloc");
    let err = gpu::encode_tensor_map(&odd, &spec(Operand::A)).expect_err("misaligned rows");
    assert!(err.to_string().contains("multiple of 16"), "{err}");
}

/// A contender's label with its outputs on the binary and the random case.
type LabelledOutputs = (String, Vec<f16>, Vec<f16>);

const TMA_COPY: &str = include_str!("kernels/tma_copy.cu");

#[test]
fn tensor_maps_address_each_operand_as_the_layout_says() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    if gpu.facts().compute_capability < (9, 0) {
        skip(format!("tensor maps need sm_90"));
        return;
    }
    let ptx = gpu::nvrtc::compile(TMA_COPY, "tma_copy.cu", "compute_90", &[]).expect("compile the TMA copy kernel");
    let loaded = gpu.load_ptx(&ptx).expect("load");
    // (operand, layout, M×N×K): C (M×N) has the operand's shape, so the kernel copies into it.
    let cases = [
        (Operand::A, Layout::Tn, (200, 72, 72)),   // A: 200×72
        (Operand::B, Layout::Nn, (72, 200, 72)),   // B nn: K×N = 72×200
        (Operand::B, Layout::Tn, (136, 136, 136)), // B tn: N×K = 136×136
    ];
    for (i, (operand, layout, shape)) in cases.into_iter().enumerate() {
        let p = problem(Acc::F32, layout, shape);
        let case = Case::random(shape, 8000 + i as u64);
        let ops = upload(&gpu, &p, &case).expect("upload");
        let (rows, cols, want) = match (operand, layout) {
            (Operand::A, _) => (shape.0, shape.2, &case.a),
            (_, Layout::Nn) => (shape.2, shape.1, &case.b_kn),
            (_, Layout::Tn) => (shape.1, shape.2, &case.b_nk),
        };
        let (box_c, box_r) = (64, 32);
        // The L2 promotion changes how misses are fetched, never what is read.
        let l2_promotion = [L2Promotion::None, L2Promotion::B256, L2Promotion::B64][i];
        let mut manifest = kernels::manifest_for(&p, &SimpleConfig::LARGE);
        manifest.launches[0] = kaas::manifest::Launch {
            entry: "kaas_tma_copy".into(),
            grid: [cols.div_ceil(box_c), rows.div_ceil(box_r), 1],
            block: [128, 1, 1],
            cluster: [1, 1, 1],
            shared_mem_bytes: 0,
            params: vec![
                Param::TensorMap(TensorMapSpec { operand, box_dims: [box_c, box_r], swizzle: Swizzle::None, l2_promotion }),
                Param::Ptr(kaas::manifest::Buffer::C),
                Param::I32(kaas::manifest::I32Value::Const(rows as i32)),
                Param::I32(kaas::manifest::I32Value::Const(cols as i32)),
            ],
        };
        PreparedManifest::new(&gpu, &loaded, &manifest, &ops).expect("prepare").run(&gpu).expect("run");
        let got = ops.download_c(&gpu).expect("download");
        let bad = got.iter().zip(want.iter()).filter(|(g, w)| g.to_bits() != w.to_bits()).count();
        println!("tensor map over {operand:?} ({layout}, {rows}x{cols}, L2 promotion {l2_promotion:?}): {bad} of {} elements differ", got.len());
        assert_eq!(bad, 0, "tensor map over {operand:?} ({layout}) does not address the operand as stored");
    }
}

#[test]
fn cublas_and_cublaslt_match_the_reference() {
    let Some(gpu) = gpu_or_skip() else { return };
    let shapes = [(1, 1, 1), (17, 33, 65), (127, 129, 257), (64, 4096, 128), (1024, 1024, 1024)];
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (i, &shape) in shapes.iter().enumerate() {
        let binary = Case::binary(shape, 3000 + i as u64);
        let random = Case::random(shape, 4000 + i as u64);
        for layout in Layout::ALL {
            for acc in Acc::ALL {
                let p = problem(acc, layout, shape);
                let result = (|| -> Result<Vec<LabelledOutputs>, GpuError> {
                    let ob = upload(&gpu, &p, &binary)?;
                    let or = upload(&gpu, &p, &random)?;
                    let mut outs = Vec::new();
                    let (cb, cr) = (CublasGemm::new(&gpu, &ob)?, CublasGemm::new(&gpu, &or)?);
                    outs.push((cb.label(), run_contender(&gpu, &ob, &cb)?, run_contender(&gpu, &or, &cr)?));
                    let (lb, lr) = (LtGemm::top1(&gpu, &ob)?, LtGemm::top1(&gpu, &or)?);
                    outs.push((lb.label(), run_contender(&gpu, &ob, &lb)?, run_contender(&gpu, &or, &lr)?));
                    Ok(outs)
                })();
                match result {
                    Ok(outs) => {
                        for (label, b, r) in outs {
                            let label = label.replace(&format!(" {}", p.shape()), "");
                            let (row, ok) = judge(&label, acc, &binary, &b, &random, &r);
                            if !ok {
                                failures.push(row.clone());
                            }
                            rows.push(row);
                        }
                    }
                    Err(e) => {
                        let row = format!("{:<16} {layout} {acc} ERROR {e}", shape_text(shape));
                        failures.push(row.clone());
                        rows.push(row);
                    }
                }
            }
        }
    }
    println!("\nbaselines vs CPU reference");
    for r in &rows {
        println!("CHECK {r}");
    }
    assert!(failures.is_empty(), "{} of {} checks failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

#[test]
fn every_cublaslt_heuristic_algorithm_is_correct() {
    let Some(gpu) = gpu_or_skip() else { return };
    let shape = (512, 384, 256);
    let random = Case::random(shape, 5);
    for layout in Layout::ALL {
        let p = problem(Acc::F32, layout, shape);
        let ops = upload(&gpu, &p, &random).expect("upload");
        let algos = LtGemm::heuristics(&gpu, &ops, 16).expect("heuristics");
        println!("cuBLASLt {layout}: {} heuristic algorithms", algos.len());
        assert!(!algos.is_empty());
        for algo in &algos {
            let out = run_contender(&gpu, &ops, algo).expect("run");
            let rel = relative_error(&out, &random.reference);
            assert!(rel <= tolerance(Acc::F32), "{}: relative error {rel:e}", algo.label());
        }
    }
}

/// Median of a non-empty sample.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

#[test]
fn graph_timing_is_plausible() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let shapes = [(64, 4096, 128), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)];
    let (launches, replays) = (20, 10);
    let mut cache = KernelCache::new();
    let mut table = vec![format!(
        "{:<16} {:<6} {:>12} {:>12} {:>12} {:>12} {:>9} {:>9} {:>10}",
        "shape",
        "layout",
        "simple µs",
        "cuBLAS µs",
        "cuBLASLt µs",
        "simple ofl",
        "simple TF",
        "cuBLAS TF",
        "simple/cuBLAS"
    )];
    for (i, &shape) in shapes.iter().enumerate() {
        let (m, n, k) = (shape.0 as usize, shape.1 as usize, shape.2 as usize);
        let mut rng = StdRng::seed_from_u64(6000 + i as u64);
        let a: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.random_range(-1.0f32..=1.0))).collect();
        let b: Vec<f16> = (0..k * n).map(|_| f16::from_f32(rng.random_range(-1.0f32..=1.0))).collect();
        for layout in [Layout::Tn, Layout::Nn] {
            let p = problem(Acc::F32, layout, shape);
            let ops = Operands::alloc(&gpu, &p, 0).expect("alloc");
            // The same random values serve either layout: only the product's meaning differs.
            ops.upload(&gpu, &a, &b).expect("upload");
            let config = SimpleConfig::LARGE;
            let ptx = cache.get(&gpu, &p, &config).expect("compile and load");
            let simple = PreparedManifest::new(&gpu, ptx, &kernels::manifest_for(&p, &config), &ops).expect("prepare");
            let blas = CublasGemm::new(&gpu, &ops).expect("cuBLAS");
            let lt = LtGemm::top1(&gpu, &ops).expect("cuBLASLt");

            ops.poison_c(&gpu).expect("poison");
            let t_simple = median(&gpu::time_graph(&gpu, &simple, launches, replays).expect("time simple"));
            let out_simple = ops.download_c(&gpu).expect("download");
            let t_blas = median(&gpu::time_graph(&gpu, &blas, launches, replays).expect("time cuBLAS"));
            let out_blas = ops.download_c(&gpu).expect("download");
            let t_lt = median(&gpu::time_graph(&gpu, &lt, launches, replays).expect("time cuBLASLt"));
            let t_offline = gpu::time_direct(&gpu, &simple, launches).expect("offline timing");

            // What was timed still computes the product: the simple kernel agrees with cuBLAS.
            let reference: Vec<f64> = out_blas.iter().map(|x| x.to_f64()).collect();
            let agreement = relative_error(&out_simple, &reference);
            assert!(agreement <= 2e-3, "{p}: simple kernel and cuBLAS differ by {agreement:e}");

            let flops = p.shape().flops();
            let tflops = |us: f64| flops / (us * 1e-6) / 1e12;
            for (what, us) in
                [("simple", t_simple), ("cuBLAS", t_blas), ("cuBLASLt", t_lt), ("simple offline", t_offline)]
            {
                assert!(us.is_finite() && us > 0.0, "{p} {what}: {us} µs");
                assert!(tflops(us) < 2000.0, "{p} {what}: {:.0} TFLOP/s is beyond any GPU here", tflops(us));
            }
            // Offline includes launch overhead; it cannot be much faster than the graph.
            assert!(t_offline >= 0.5 * t_simple, "{p}: offline {t_offline} µs vs graph {t_simple} µs");
            table.push(format!(
                "{:<16} {:<6} {:>12.2} {:>12.2} {:>12.2} {:>12.2} {:>9.1} {:>9.1} {:>10.2}",
                shape_text(shape),
                layout.as_str(),
                t_simple,
                t_blas,
                t_lt,
                t_offline,
                tflops(t_simple),
                tflops(t_blas),
                t_simple / t_blas
            ));
        }
    }
    println!(
        "\ngraph timing, acc f32, {launches} launches per graph, median of {replays} replays ({})",
        gpu.facts().name
    );
    for row in &table {
        println!("TIMING {row}");
    }
}

/// Every kernel in a catalog bundle (the shipped `kernels/`, or `KAAS_SHIPPED_CATALOG`)
/// computes its problem: exact on three {0,1} seeds, within tolerance on random inputs
/// (with cuBLAS's error on the same inputs beside it), every element of a NaN-poisoned C
/// written. Prints one `REPORT {json}` line that `examples/simple_catalog.rs` turns into
/// the bundle's run records.
#[test]
fn the_shipped_catalog_kernels_are_correct() {
    let Some(gpu) = gpu_or_skip() else { return };
    let dir = std::env::var("KAAS_SHIPPED_CATALOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels"));
    let (index, ptx) = kaas::catalog::bundle::read_bundle(&dir).expect("a readable catalog bundle");
    assert!(!index.entries.is_empty(), "{} holds no kernels", dir.display());
    let facts = gpu.facts().clone();
    let mut results = serde_json::Map::new();
    let mut failed = vec![];
    for e in &index.entries {
        let p = e.problem;
        let shape = (p.m, p.n, p.k);
        let loaded = gpu.load_ptx(&ptx[&e.artifact]).expect("the shipped PTX loads");
        let run = |case: &Case| -> Vec<f16> {
            let ops = upload(&gpu, &p, case).expect("upload");
            PreparedManifest::new(&gpu, &loaded, &e.manifest, &ops).expect("manifest").run(&gpu).expect("launch");
            ops.download_c(&gpu).expect("download")
        };
        let mut ok = true;
        for seed in [11, 12, 13] {
            let case = Case::binary(shape, seed);
            let out = run(&case);
            let unwritten = out.iter().filter(|x| x.is_nan()).count();
            let (bad, first) = exact_mismatches(&out, &case.reference, p.n as usize);
            if bad > 0 || unwritten > 0 {
                ok = false;
                println!("CHECK FAIL {} seed {seed}: {bad} mismatches, {unwritten} unwritten; {first:?}", p.path());
            }
        }
        let random = Case::random(shape, 14);
        let rel = relative_error(&run(&random), &random.reference);
        let ops = upload(&gpu, &p, &random).expect("upload");
        let cublas = CublasGemm::new(&gpu, &ops).expect("cuBLAS");
        let rel_cublas = relative_error(&run_contender(&gpu, &ops, &cublas).expect("cuBLAS runs"), &random.reference);
        ok &= rel <= tolerance(p.acc);
        println!("CHECK {} {} rel {rel:.3e} (cuBLAS {rel_cublas:.3e}) {}", p.path(), e.name, if ok { "PASS" } else { "FAIL" });
        if !ok {
            failed.push(p.path());
            continue;
        }
        results.insert(
            p.path(),
            format!(
                "verified on {} ({}, driver {}, CUDA {}) by tests/gpu.rs: exact on 3 seeds of {{0,1}} inputs over all {} outputs; \
                 random inputs in [-1,1]: relative error {rel:.2e} (tolerance {:.0e}; cuBLAS {rel_cublas:.2e} on the same inputs); \
                 every element of a NaN-poisoned C written. Not benchmarked.",
                facts.device_class,
                facts.name,
                facts.driver_version.clone().unwrap_or_default(),
                facts.cuda_driver_api_version,
                p.m as u64 * p.n as u64,
                tolerance(p.acc),
            )
            .into(),
        );
    }
    let report = serde_json::json!({
        "device_class": facts.device_class,
        "model": facts.name,
        "compute_capability": format!("{}.{}", facts.compute_capability.0, facts.compute_capability.1),
        "sm_count": facts.sm_count,
        "measured_at": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "device": serde_json::to_value(&facts).expect("facts serialize"),
        "results": results,
    });
    println!("REPORT {report}");
    assert!(failed.is_empty(), "shipped kernels failed: {failed:?}");
}

// ---------------------------------------------------------------------------------------
// The verification pipeline in its sandbox, against hostile kernels

use std::time::{Duration, Instant};

use kaas::harness::{Job, RunOutcome};
use kaas::manifest::{ABI, Launch, Manifest};
use kaas::sandbox::{self, SandboxCommand};
use kaas::verify::Verdict;

const HOSTILE_COMMON: &str = include_str!("kernels/hostile/common.cuh");

/// The problem every hostile kernel is judged on: big enough that fp16 accumulation
/// shows (K = 2048), small enough that a CUDA-core kernel takes a millisecond.
fn hostile_problem(acc: Acc, layout: Layout) -> Problem {
    problem(acc, layout, (256, 256, 2048))
}

/// The `kaas` binary to spawn as the sandbox: `KAAS_SANDBOX_EXE` (set by gpu-check.sh on
/// the device) or the one cargo built beside this test.
fn sandbox_command() -> SandboxCommand {
    let exe = std::env::var_os(sandbox::EXE_ENV).filter(|p| !p.is_empty()).unwrap_or_else(|| env!("CARGO_BIN_EXE_kaas").into());
    SandboxCommand::new(exe, ["sandbox"])
}

/// One kernel of the suite: its source, entry, launch grid and the verdicts that count
/// as caught.
struct Suspect {
    name: &'static str,
    source: &'static str,
    entry: &'static str,
    acc: Acc,
    /// Extra rows of blocks beyond what C needs.
    extra_grid_rows: u32,
    split_k: u32,
    /// Workspace bytes per output of C, and beside that; passed as a last parameter
    /// when not zero.
    workspace: (u64, u64),
    /// Whether the job also asks for the benchmark (the timed-sequence check runs there).
    bench: bool,
    /// M, N, K, when not [`hostile_problem`]'s.
    shape: Option<(u32, u32, u32)>,
    expect: &'static [Verdict],
}

const fn suspect(name: &'static str, source: &'static str, entry: &'static str, expect: &'static [Verdict]) -> Suspect {
    Suspect { name, source, entry, acc: Acc::F32, extra_grid_rows: 0, split_k: 1, workspace: (0, 0), bench: false, shape: None, expect }
}

/// Verdicts that count as catching a race between blocks: the race stage's, or a wrong
/// output that already shows on an idle GPU.
const RACE_CAUGHT: &[Verdict] = &[Verdict::ScheduleDependent, Verdict::ExactMismatch, Verdict::NonFinite, Verdict::UnwrittenOutput];

const SUSPECTS: &[Suspect] = &[
    suspect("hang", include_str!("kernels/hostile/hang.cu"), "kaas_hang", &[Verdict::Timeout]),
    suspect("oob_write", include_str!("kernels/hostile/oob_write.cu"), "kaas_oob_write", &[Verdict::OutOfBoundsWrite]),
    suspect("partial_c", include_str!("kernels/hostile/partial_c.cu"), "kaas_partial_c", &[Verdict::UnwrittenOutput]),
    suspect("modify_a", include_str!("kernels/hostile/modify_a.cu"), "kaas_modify_a", &[Verdict::InputModified]),
    suspect("cached", include_str!("kernels/hostile/cached.cu"), "kaas_cached", &[Verdict::StaticInvalid]),
    Suspect { workspace: (10, 0), ..suspect("cached_ws", include_str!("kernels/hostile/cached_ws.cu"), "kaas_cached_ws", &[Verdict::ExactMismatch]) },
    suspect("first_launch_only", include_str!("kernels/hostile/first_launch_only.cu"), "kaas_first_launch_only", &[Verdict::StaticInvalid]),
    Suspect { workspace: (4, 0), ..suspect("first_launch_only_ws", include_str!("kernels/hostile/first_launch_only_ws.cu"), "kaas_first_launch_only_ws", &[Verdict::UnwrittenOutput]) },
    suspect("fp16_accumulate", include_str!("kernels/hostile/fp16_accumulate.cu"), "kaas_fp16_accumulate", &[Verdict::DeviationExceeded]),
    Suspect { split_k: 2, ..suspect("splitk_race", include_str!("kernels/hostile/splitk_race.cu"), "kaas_splitk_race", RACE_CAUGHT) },
    Suspect { split_k: 2, ..suspect("splitk_late_read", include_str!("kernels/hostile/splitk_late_read.cu"), "kaas_splitk_late_read", RACE_CAUGHT) },
    Suspect { split_k: 4, ..suspect("splitk_chain", include_str!("kernels/hostile/splitk_chain.cu"), "kaas_splitk_chain", RACE_CAUGHT) },
    Suspect { extra_grid_rows: 2, ..suspect("unguarded_grid", include_str!("kernels/hostile/unguarded_grid.cu"), "kaas_unguarded_grid", &[Verdict::OutOfBoundsWrite]) },
    suspect("timer_skip_global", include_str!("kernels/hostile/timer_skip_global.cu"), "kaas_timer_skip_global", &[Verdict::StaticInvalid]),
    // A small problem, so that the benchmark launches it many times back to back.
    Suspect { workspace: (0, 32), bench: true, shape: Some((128, 128, 512)), ..suspect("timer_skip", include_str!("kernels/hostile/timer_skip.cu"), "kaas_timer_skip", &[Verdict::TimingDependent]) },
    Suspect { bench: true, ..suspect("poison_reader", include_str!("kernels/hostile/poison_reader.cu"), "kaas_poison_reader", &[Verdict::TimingDependent, Verdict::Unstable]) },
    // Correct controls: a plain kernel, and atomic split-K, through the race stage and
    // the benchmark's timed-sequence check.
    Suspect { bench: true, ..suspect("correct_naive", include_str!("kernels/hostile/correct_naive.cu"), "kaas_naive", &[Verdict::Pass]) },
    Suspect { split_k: 4, workspace: (8, 0), bench: true, ..suspect("splitk_atomic", include_str!("kernels/hostile/splitk_atomic.cu"), "kaas_splitk_atomic", &[Verdict::Pass]) },
];

/// The manifest of a hostile kernel: block 16×16, one thread per output.
fn naive_manifest(p: &Problem, entry: &str, extra_grid_rows: u32, split_k: u32) -> Manifest {
    Manifest {
        abi: ABI.to_string(),
        problem: *p,
        workspace_bytes: 0,
        launches: vec![Launch {
            entry: entry.to_string(),
            grid: [p.n.div_ceil(16), p.m.div_ceil(16) + extra_grid_rows, split_k],
            block: [16, 16, 1],
            cluster: [1, 1, 1],
            shared_mem_bytes: 0,
            params: kaas::manifest::pointer_params(),
        }],
    }
}

/// A short benchmark: enough for the timed-sequence check, which runs after it.
fn short_bench() -> serde_json::Value {
    serde_json::json!({"modes": ["graph", "offline"], "budget_ms": 300, "sets": 3, "autotune_max": 8})
}

fn suspect_job(s: &Suspect) -> Result<Job, GpuError> {
    let p = match s.shape {
        Some(shape) => problem(s.acc, Layout::Tn, shape),
        None => hostile_problem(s.acc, Layout::Tn),
    };
    let source = format!("{HOSTILE_COMMON}\n{}", s.source);
    let ptx = gpu::nvrtc::compile(&source, &format!("{}.cu", s.name), kernels::SIMPLE_HGEMM_TARGET, &[])?;
    let mut manifest = naive_manifest(&p, s.entry, s.extra_grid_rows, s.split_k);
    let workspace = s.workspace.0 * p.m as u64 * p.n as u64 + s.workspace.1;
    if workspace > 0 {
        manifest.workspace_bytes = workspace;
        manifest.launches[0].params.push(kaas::manifest::Param::Ptr(kaas::manifest::Buffer::Workspace));
    }
    Ok(Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench: s.bench.then(short_bench) })
}

fn simple_job(acc: Acc, layout: Layout) -> Result<Job, GpuError> {
    simple_job_for(hostile_problem(acc, layout), SimpleConfig::SMALL)
}

fn simple_job_for(p: Problem, config: SimpleConfig) -> Result<Job, GpuError> {
    Ok(Job { ptx: kernels::compile_simple(&p, &config)?, manifest: kernels::manifest_for(&p, &config), secret_seed: rand::random(), watchdog_ms: None, bench: None })
}

/// PTX whose header and signature are fine but whose body the JIT refuses.
fn broken_body_job() -> Job {
    let p = hostile_problem(Acc::F32, Layout::Tn);
    let ptx = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry kaas_broken(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 m, .param .u32 n, .param .u32 k)\n{\n  frobnicate.u32 %r1;\n  ret;\n}\n";
    Job { ptx: ptx.into(), manifest: naive_manifest(&p, "kaas_broken", 0, 1), secret_seed: 1, watchdog_ms: None, bench: None }
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max { format!("{}…", line.chars().take(max).collect::<String>()) } else { line.to_string() }
}

/// Where NVRTC loads (no GPU needed): every hostile kernel compiles; those that keep
/// state in module memory are refused by the static checks, and the others pass them
/// against their manifests, so the suite tests the later stages.
#[test]
fn hostile_kernels_compile_and_match_their_manifests() {
    if let Err(why) = gpu::nvrtc::available() {
        skip(format!("no NVRTC ({why})"));
        return;
    }
    for s in SUSPECTS {
        let job = suspect_job(s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        // Limits as the worker would set them for the newest driver.
        let limits = kaas::ptx::StaticLimits { max_version: kaas::harness::max_ptx_version_for_driver("13.0"), ..Default::default() };
        let checked = kaas::ptx::check(job.ptx.as_bytes(), &job.manifest, &limits);
        if s.expect == [Verdict::StaticInvalid] {
            // Kernels that keep state in module memory are refused before any GPU work.
            match checked {
                Err(e @ kaas::ptx::StaticError::ModuleState { .. }) => println!("{}: refused: {e}", s.name),
                other => panic!("{}: expected the module-state refusal, got {other:?}", s.name),
            }
            continue;
        }
        checked.unwrap_or_else(|e| panic!("{}: {e}", s.name));
        match kaas::ptx::ptxas::check(&job.ptx, "sm_90") {
            Ok(report) => println!("{}: ptxas: {:?}", s.name, report.entry(s.entry).map(|r| r.registers)),
            Err(kaas::ptx::ptxas::PtxasError::NotAvailable(why)) => println!("{}: ptxas skipped ({why})", s.name),
            Err(e) => panic!("{}: {e}", s.name),
        }
    }
}

/// The real `kaas sandbox` binary: a malformed job is answered with an outcome, and a
/// job whose PTX is not PTX is refused at the static stage (or, without a GPU, the
/// sandbox says so).
#[test]
fn the_sandbox_binary_answers_every_job_with_an_outcome() {
    let cmd = sandbox_command();
    let mut child = std::process::Command::new(&cmd.program)
        .args(&cmd.args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn kaas sandbox");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"{ not json").expect("write job");
    }
    let out = child.wait_with_output().expect("sandbox output");
    assert!(out.status.success(), "kaas sandbox exits 0 with an outcome: {:?}", out.status);
    let o: RunOutcome = serde_json::from_slice(&out.stdout).expect("an outcome on stdout");
    assert_eq!(o.verdict, Verdict::InternalError);
    assert!(o.message.contains("not valid JSON"), "{}", o.message);

    let p = hostile_problem(Acc::F32, Layout::Tn);
    let job = Job { ptx: "not even PTX".into(), manifest: naive_manifest(&p, "kaas_naive", 0, 1), secret_seed: 3, watchdog_ms: None, bench: None };
    let o = sandbox::run_with(&cmd, &job, Duration::from_secs(60));
    match gpu::available() {
        Ok(()) => {
            assert_eq!(o.verdict, Verdict::StaticInvalid, "{o:?}");
            assert!(o.device.is_some());
        }
        Err(why) => {
            println!("no GPU ({why}): the sandbox must say so");
            assert_eq!(o.verdict, Verdict::InternalError, "{o:?}");
            assert!(o.message.contains("no GPU"), "{}", o.message);
        }
    }
}

/// Every hostile kernel through `run_in_sandbox`, each in a fresh process, with correct
/// kernels before, in between and after: each gets its verdict, and the next job runs.
#[test]
fn hostile_kernels_get_their_verdicts_and_the_next_job_still_runs() {
    if let Err(why) = gpu::available() {
        skip(format!("no GPU ({why})"));
        return;
    }
    if let Err(why) = gpu::nvrtc::available() {
        skip(format!("no NVRTC ({why})"));
        return;
    }
    let cmd = sandbox_command();
    let mut jobs: Vec<(String, Job, Vec<Verdict>)> = vec![
        ("simple f32 tn".into(), simple_job(Acc::F32, Layout::Tn).expect("compile simple"), vec![Verdict::Pass]),
        ("simple f16 nn".into(), simple_job(Acc::F16, Layout::Nn).expect("compile simple"), vec![Verdict::Pass]),
        ("simple f16 tn".into(), simple_job(Acc::F16, Layout::Tn).expect("compile simple"), vec![Verdict::Pass]),
        ("simple f32 nn".into(), simple_job(Acc::F32, Layout::Nn).expect("compile simple"), vec![Verdict::Pass]),
    ];
    // The same broken PTX twice: ptxas (where the device has one) refuses it at the static
    // stage; without ptxas the driver's JIT refuses it at load.
    let with_ptxas = kaas::ptx::ptxas::locate().is_ok();
    jobs.push(("broken_body".into(), broken_body_job(), vec![if with_ptxas { Verdict::StaticInvalid } else { Verdict::LoadFailed }]));
    let no_ptxas = cmd.clone().env(kaas::ptx::ptxas::PTXAS_ENV, "/nonexistent/ptxas");
    jobs.push(("broken_body, no ptxas".into(), broken_body_job(), vec![Verdict::LoadFailed]));
    // KAAS_HOSTILE_ROUNDS=N judges the suite N times (each round with fresh seeds); the
    // hang, which costs its whole watchdog, only in the first.
    let rounds: usize = std::env::var("KAAS_HOSTILE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    for round in 1..=rounds {
        for s in SUSPECTS.iter().filter(|s| round == 1 || s.name != "hang") {
            let name = if rounds > 1 { format!("{} (round {round})", s.name) } else { s.name.to_string() };
            jobs.push((name, suspect_job(s).unwrap_or_else(|e| panic!("{}: {e}", s.name)), s.expect.to_vec()));
            if s.name == "hang" {
                // Right after a hung kernel was abandoned, the GPU serves the next job.
                jobs.push(("simple after hang".into(), simple_job(Acc::F32, Layout::Tn).expect("compile simple"), vec![Verdict::Pass]));
            }
        }
    }
    jobs.push(("simple f32 tn again".into(), simple_job(Acc::F32, Layout::Tn).expect("compile simple"), vec![Verdict::Pass]));
    // Whole verifications of larger problems, for the harness's own speed: 4096³ checks
    // every output; 8192³ samples lines (binary) and outputs (deviation).
    for size in [4096, 8192] {
        let p = problem(Acc::F32, Layout::Tn, (size, size, size));
        jobs.push((format!("simple f32 tn {size}³"), simple_job_for(p, SimpleConfig::LARGE).expect("compile simple"), vec![Verdict::Pass]));
    }

    let mut rows = Vec::new();
    let mut wrong = Vec::new();
    for (name, job, expect) in &jobs {
        let started = Instant::now();
        let cmd = if name.ends_with("no ptxas") { &no_ptxas } else { &cmd };
        let o = sandbox::run_with(cmd, job, Duration::from_secs(120));
        let secs = started.elapsed().as_secs_f64();
        let expected = expect.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(" or ");
        let ok = expect.contains(&o.verdict);
        println!("---- {name}: {} in {secs:.2} s (stage {})\n{}", o.verdict, o.stage, o.message);
        if o.verdict == Verdict::Pass {
            for c in &o.checks {
                println!("     {:<60} {:>8.1} ms  {}", c.name, c.duration_ms, first_line(&c.detail, 160));
            }
        }
        rows.push(format!("| {name} | {expected} | {}{} | {:.2} | {} |", o.verdict, if ok { "" } else { " ✗" }, secs, first_line(&o.message, 240).replace('|', "\\|")));
        if !ok {
            wrong.push(format!("{name}: expected {expected}, got {} ({})", o.verdict, o.message));
        }
        if o.verdict != Verdict::Pass && o.verdict != Verdict::StaticInvalid && o.verdict != Verdict::LoadFailed {
            assert!(!o.message.is_empty());
        }
        assert!(!o.message.contains(&format!("{:#018x}", job.secret_seed)), "{name}: the secret seed leaked into the message");
    }
    println!("\nHOSTILE | kernel | expected | got | seconds | message |");
    println!("HOSTILE |---|---|---|---:|---|");
    for row in &rows {
        println!("HOSTILE {row}");
    }
    assert!(wrong.is_empty(), "wrong verdicts:\n{}", wrong.join("\n"));
}

#[test]
fn cublaslt_algorithms_are_recreated_from_their_recorded_configuration() {
    let Some(gpu) = gpu_or_skip() else { return };
    for layout in Layout::ALL {
        let p = problem(Acc::F32, layout, (512, 384, 256));
        let ops = Operands::alloc(&gpu, &p, 0).expect("alloc");
        for algo in LtGemm::heuristics(&gpu, &ops, 16).expect("heuristics") {
            let config = algo.config().expect("read configuration");
            assert!(config.attributes.contains_key("algo_id"), "{config:?}");
            let again = LtGemm::from_config(&gpu, &ops, &config).expect("re-create");
            assert_eq!(again.algo_words(), algo.algo_words(), "{}: {config:?}", algo.label());
        }
    }
}

/// One whole run as a worker does it, in a sandbox process: the simple kernel on
/// 2048³ tn f32 verified, then benchmarked side by side with cuBLAS, cuBLASLt heuristic
/// and cuBLASLt autotuned (NN and TN). The simple kernel is slower than cuBLAS: the
/// speedups are printed, not asserted.
#[test]
fn a_whole_run_verifies_then_benchmarks_against_the_baselines() {
    if let Err(why) = gpu::available() {
        skip(format!("no GPU ({why})"));
        return;
    }
    if let Err(why) = gpu::nvrtc::available() {
        skip(format!("no NVRTC ({why})"));
        return;
    }
    let p = problem(Acc::F32, Layout::Tn, (2048, 2048, 2048));
    let mut job = simple_job_for(p, SimpleConfig::LARGE).expect("compile simple");
    job.bench = Some(serde_json::json!({"modes": ["graph", "offline"], "budget_ms": 3000, "sets": 3}));
    let started = Instant::now();
    // `run_in_sandbox` with the staged `kaas` as the sandbox executable.
    let o = sandbox::run_with(&sandbox_command(), &job, sandbox::default_wall_limit(&job));
    let wall = started.elapsed();
    println!("{}", kaas::harness::run_cmd::table(&job, &o, wall));
    println!("RUNBENCH whole run (verification + benchmark) {:.2} s wall", wall.as_secs_f64());
    assert_eq!(o.verdict, Verdict::Pass, "{}: {}", o.stage, o.message);
    let bench = o.bench.as_ref().expect("bench present after a pass");
    let graph = bench["timings"]["graph"]["median_us"].as_f64().expect("graph median");
    assert!(graph.is_finite() && graph > 0.0, "{graph}");
    assert!(bench["timings"]["offline"]["median_us"].as_f64().is_some_and(f64::is_finite));
    for key in ["cublas_nn", "cublas_tn", "cublas_max", "cublaslt_heuristic_max", "cublaslt_autotune_max"] {
        let x = bench["speedups"]["graph"][key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "speedup {key} = {x}");
    }
    assert_eq!(bench["baselines"].as_array().map(Vec::len), Some(12), "six baselines × two modes");
    assert_eq!(bench["recheck"]["passed"], serde_json::json!(true), "{}", bench["recheck"]);
    println!("RUNBENCH recheck {}", bench["recheck"]["detail"]);
    println!("RUNBENCH setup {} ms, autotune {} ms, timing {} ms, recheck {} ms, rounds {}, converged {}",
        bench["setup_ms"], bench["autotune_ms"], bench["elapsed_ms"], bench["recheck_ms"], bench["rounds"], bench["converged"]);
}

// ---------------------------------------------------------------------------------------
// The verifier's GPU checks against their host models (src/verify)

/// Every GPU check of the verifier on the same data as its host model, at shapes tiles
/// do not divide, both layouts: generators bit for bit, exact counts, fp32 reference,
/// the reductions, the transpose, the fp16 chain.
#[test]
fn the_gpu_checks_agree_with_the_host_models() {
    use kaas::gpu::checks;
    use kaas::verify::{self, binary, containment, deviation, spot};
    let Some(gpu) = gpu_or_skip() else { return };
    let upload = |v: &[f16]| {
        let buf = gpu.alloc(v.len() * 2).expect("alloc");
        buf.upload_f16(&gpu, v).expect("upload");
        buf
    };
    for (m, n, k) in [(1, 1, 1), (37, 53, 71), (128, 96, 2100), (300, 7, 4097)] {
        for layout in [Layout::Nn, Layout::Tn] {
            let p = problem(Acc::F32, layout, (m, n, k));
            let s = p.shape();
            let (a_len, b_len, c_len) = ((m * k) as usize, (k * n) as usize, (m * n) as usize);
            let (a, b) = (gpu.alloc(a_len * 2).expect("alloc"), gpu.alloc(b_len * 2).expect("alloc"));

            // Binary inputs and exact counts.
            let density = binary::binary_density(k);
            checks::fill_binary(&gpu, &a, a_len, 11, density).expect("fill");
            checks::fill_binary(&gpu, &b, b_len, 12, density).expect("fill");
            let (ha, hb) = (binary::fill_binary(11, a_len, density), binary::fill_binary(12, b_len, density));
            assert_eq!(a.download_f16(&gpu, a_len).expect("download"), ha, "binary A {s}");
            assert_eq!(b.download_f16(&gpu, b_len).expect("download"), hb, "binary B {s}");
            let counts = checks::exact_counts(&gpu, &p, &a, &b).expect("counts");
            let host = verify::BinaryReference::new(s, layout, &ha, &hb).expect("host reference");
            let exact: Vec<f32> = (0..c_len).map(|i| host.count(i / n as usize, i % n as usize) as f32).collect();
            let all: Vec<u64> = (0..c_len as u64).collect();
            assert_eq!(checks::gather_f32(&gpu, &counts, &all).expect("gather"), exact, "exact counts {s} {layout}");

            // A C with three wrong outputs, one unwritten and one infinite.
            let mut c: Vec<f16> = exact.iter().map(|&x| f16::from_f32(x)).collect();
            let mut wrong = vec![c_len / 3, c_len / 2, c_len - 1];
            wrong.dedup();
            for &i in &wrong {
                c[i] = f16::from_f32(c[i].to_f32() + 1.0);
            }
            let c_buf = upload(&c);
            let report = checks::compare_exact(&gpu, &c_buf, &counts, c_len, n as usize, binary::EXACT_LIMIT).expect("compare");
            assert_eq!(report.mismatches as usize, wrong.len(), "{s}");
            assert_eq!(report.checked as usize, c_len);
            let first = report.first_mismatch.expect("a mismatch");
            assert_eq!((first.row as usize * n as usize + first.col as usize), wrong[0]);
            assert_eq!(first.got, first.expected as f32 + 1.0);

            let mut scanned = c.clone();
            scanned[c_len / 2] = containment::poison();
            scanned[c_len - 1] = f16::INFINITY;
            let (unwritten, non_finite) = checks::scan_output(&gpu, &upload(&scanned), c_len, containment::POISON_BITS).expect("scan");
            assert_eq!(unwritten, containment::find_unwritten(&scanned), "{s}");
            if c_len > 1 && c_len / 2 != c_len - 1 {
                assert_eq!(non_finite.map(|f| f.first), Some(c_len - 1));
            }
            assert_eq!(checks::find_changed(&gpu, &c_buf, &upload(&scanned), c_len).expect("changed"), containment::find_changed(&c, &scanned));
            assert_eq!(checks::find_changed(&gpu, &c_buf, &c_buf, c_len).expect("changed"), None);

            // Uniform inputs, the fp32 reference and the largest deviation.
            checks::fill_uniform(&gpu, &a, a_len, 21, -1.0, 1.0).expect("fill");
            checks::fill_uniform(&gpu, &b, b_len, 22, -1.0, 1.0).expect("fill");
            let (ua, ub) = (binary::fill_uniform(21, a_len, -1.0, 1.0), binary::fill_uniform(22, b_len, -1.0, 1.0));
            let (ga, gb) = (a.download_f16(&gpu, a_len).expect("download"), b.download_f16(&gpu, b_len).expect("download"));
            let differ = ga.iter().zip(&ua).filter(|(x, y)| x != y).count() + gb.iter().zip(&ub).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "uniform inputs {s}: {differ} values differ from the host generator");
            let reference = checks::fp32_reference(&gpu, &p, &a, &b).expect("reference");
            let host = deviation::CpuReference::new(s, layout, &ua, &ub).expect("host reference").full();
            let got = checks::gather_f32(&gpu, &reference, &all).expect("gather");
            for (i, (&g, &h)) in got.iter().zip(&host).enumerate() {
                let (row, col) = (i / n as usize, i % n as usize);
                let a_row = &ua[row * k as usize..(row + 1) * k as usize];
                let b_col: Vec<f16> = (0..k as usize).map(|kk| if layout == Layout::Nn { ub[kk * n as usize + col] } else { ub[col * k as usize + kk] }).collect();
                assert_eq!(spot::check_reference(spot::ReferenceKind::Fp32, a_row, &b_col, g), Ok(()), "fp32 reference {s} {layout} at {i} (host {h})");
            }
            let c16: Vec<f16> = host.iter().map(|&x| f16::from_f32(x)).collect();
            let c16_buf = upload(&c16);
            let dev = checks::max_abs_deviation(&gpu, Some(&c16_buf), &reference, c_len).expect("deviation");
            let host_dev = verify::max_abs_deviation(&c16, &got).expect("host deviation");
            assert_eq!(dev.max_abs, host_dev.max_abs, "{s}");
            assert_eq!(dev.index, host_dev.index, "{s}");
            let max_ref = checks::max_abs_deviation(&gpu, None, &reference, c_len).expect("max |ref|");
            assert_eq!(max_ref.max_abs, deviation::max_abs(&got), "{s}");

            // The transpose gives B in the other layout's storage.
            let (rows, cols) = if layout == Layout::Nn { (k as usize, n as usize) } else { (n as usize, k as usize) };
            let t = checks::transpose(&gpu, &b, rows, cols).expect("transpose").download_f16(&gpu, b_len).expect("download");
            for r in [0, rows / 2, rows - 1] {
                for cc in [0, cols / 3, cols - 1] {
                    assert_eq!(t[cc * rows + r], ub[r * cols + cc], "transpose {s} {layout} at {r},{cc}");
                }
            }

            // The fp16 chain, at a few outputs and everywhere.
            let picks: Vec<u64> = vec![0, (c_len / 2) as u64, (c_len - 1) as u64];
            let chain = checks::fp16_chain(&gpu, &p, &a, &b, Some(&picks)).expect("chain").download_f16(&gpu, picks.len()).expect("download");
            let idx: Vec<usize> = picks.iter().map(|&i| i as usize).collect();
            assert_eq!(chain, deviation::fp16_chain_at(s, layout, &ua, &ub, &idx), "fp16 chain {s} {layout}");
            if c_len * (k as usize) < 1 << 24 {
                let everywhere = checks::fp16_chain(&gpu, &p, &a, &b, None).expect("chain").download_f16(&gpu, c_len).expect("download");
                assert_eq!(everywhere, deviation::fp16_chain_at(s, layout, &ua, &ub, &(0..c_len).collect::<Vec<_>>()), "fp16 chain {s} {layout}");
            }
        }
    }
    println!("the GPU checks agree with the host models on 4 shapes × 2 layouts");
}

// ---------------------------------------------------------------------------------------
// The Hopper template's split-K entries through the whole verifier

/// Runs kernels through the sandboxed verifier, prints each verdict under a tag, and keeps
/// the ones that did not pass for one assertion at the end.
struct VerifierRuns {
    tag: &'static str,
    runs: usize,
    failed: Vec<String>,
}

impl VerifierRuns {
    fn new(tag: &'static str) -> Self {
        VerifierRuns { tag, runs: 0, failed: Vec::new() }
    }

    fn run(&mut self, what: &str, ptx: String, manifest: Manifest) {
        let job = Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None };
        let o = sandbox::run_with(&sandbox_command(), &job, sandbox::default_wall_limit(&job));
        self.runs += 1;
        println!("{} {what}: {:?} {}", self.tag, o.verdict, first_line(&o.message, 160));
        if o.verdict != Verdict::Pass {
            self.failed.push(format!("{what}: {:?} at {}: {}", o.verdict, o.stage, o.message));
        }
    }

    /// A Hopper code on `p` with its own manifest.
    fn run_code(&mut self, p: &Problem, cfg: &kaas::tuner::hopper::HopperConfig, ptx: &str) {
        self.run(&format!("{p} {}", cfg.label()), ptx.to_string(), cfg.manifest(p, 132));
    }

    /// A Hopper code on `p` with its grid capped at `blocks` (a short persistent grid).
    fn run_capped(&mut self, p: &Problem, cfg: &kaas::tuner::hopper::HopperConfig, ptx: &str, blocks: u32) {
        let mut manifest = cfg.manifest(p, 132);
        manifest.launches[0].grid[0] = manifest.launches[0].grid[0].min(blocks);
        self.run(&format!("{p} {} grid {}", cfg.label(), manifest.launches[0].grid[0]), ptx.to_string(), manifest);
    }

    /// A Hopper code on `p` once per grid: `None` one tile per CTA, `Some(b)` a persistent
    /// grid of at most `b` blocks, rounded down to whole clusters (at least one).
    fn run_grids(&mut self, p: &Problem, code: &kaas::tuner::hopper::HopperConfig, ptx: &str, grids: &[Option<u32>]) {
        for &blocks in grids {
            let cfg = kaas::tuner::hopper::HopperConfig { persistent: blocks.is_some(), ..*code };
            match blocks {
                None => self.run_code(p, &cfg, ptx),
                Some(b) => {
                    let cl = cfg.cluster_size();
                    self.run_capped(p, &cfg, ptx, (b / cl).max(1) * cl);
                }
            }
        }
    }

    /// A Hopper code with the f16 accumulator on one tn shape.
    fn run_f16_tn(&mut self, cfg: &kaas::tuner::hopper::HopperConfig, (m, n, k): (u32, u32, u32)) {
        let p = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        self.run(&format!("{p} {}", cfg.label()), kaas::tuner::hopper::compile(cfg, Acc::F16, Layout::Tn).expect("compile"), cfg.manifest(&p, 132));
    }

    fn assert_all_passed(self) {
        assert!(self.failed.is_empty(), "{} of {} failed: {:#?}", self.failed.len(), self.runs, self.failed);
    }
}

/// Each Hopper code with each layout it supports, on the shapes in turn (so the codes meet
/// different edges), compiled: (problem, code, PTX).
fn hopper_cases(codes: &[kaas::tuner::hopper::HopperConfig], shapes: &[(u32, u32, u32)]) -> Vec<(Problem, kaas::tuner::hopper::HopperConfig, String)> {
    let mut out = Vec::new();
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate().filter(|&(_, l)| code.supports(l)) {
            let (m, n, k) = shapes[(i + j) % shapes.len()];
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
            out.push((p, *code, kaas::tuner::hopper::compile(code, p.acc, layout).expect("compile")));
        }
    }
    out
}

/// A Hopper GPU and NVRTC are here (the sandbox opens its own context); else SKIP.
fn hopper_or_skip() -> bool {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return false };
    let cc = gpu.facts().compute_capability;
    if cc != (9, 0) {
        skip(format!("Hopper kernels need sm_90 ({cc:?})"));
    }
    cc == (9, 0)
}

/// Split-K Hopper kernels, both reductions (in order and atomic), pass every stage of the
/// verifier in the sandbox: shapes that tiles do not divide, uneven K slices, a slice
/// count close to the K-tile count, both layouts. The verifier launches each kernel five
/// times on one workspace zeroed once, so a kernel that left its counters or sums dirty
/// would fail here.
#[test]
fn split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let tile = |bm, bn| hopper::split_tiles().into_iter().find(|c| c.bm == bm && c.bn == bn).expect("a split-K tile");
    let cases: [((u32, u32, u32), HopperConfig, u32); 5] = [
        ((64, 64, 16384), tile(64, 64), 32),
        ((100, 200, 4104), tile(64, 128), 11),
        ((512, 256, 4096), tile(128, 128), 8),
        ((1000, 72, 3000), tile(128, 64), 23),
        ((256, 512, 2048), tile(128, 256), 3),
    ];
    let mut runs = VerifierRuns::new("SPLITK");
    for ((m, n, k), cfg, split) in cases {
        for (layout, atomic) in [(Layout::Tn, false), (Layout::Nn, false), (Layout::Tn, true), (Layout::Nn, true)] {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
            let cfg = HopperConfig { split, atomic, ..cfg };
            let ptx = hopper::compile(&cfg, p.acc, layout).expect("compile");
            runs.run_code(&p, &cfg, &ptx);
        }
    }
    runs.assert_all_passed();
}

/// Cluster split-K Hopper kernels (`_skc`: a tile's slices are the CTAs of one cluster and
/// reduce through distributed shared memory) pass every stage of the verifier: every
/// cluster code of the search, both layouts, 2, 4, 8 and 16 slices (16 is a non-portable
/// cluster), shapes that tiles do not divide, uneven slices and slices with no K-tile at
/// all (K = 200 has 4). A grid that is not tiles × S must write nothing, not hang: the
/// verifier fails it.
#[test]
fn cluster_split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(64, 64, 4096), (100, 200, 4104), (256, 256, 2048), (1000, 72, 3000), (130, 72, 200)];
    // The short grid: one cluster of 4 short.
    let short = HopperConfig { split: 4, ..hopper::cluster_tiles()[0] };
    split_codes_pass_the_verifier("SPLITK-CLUSTER", &hopper::cluster_tiles(), &[2, 4, 8, 16], &shapes, (&short, (128, 64, 1024), 4));
}

/// Atomic split-K in multicast clusters (`_m2…_ska` sharing B, `_n2…_ska` sharing A, and the
/// clusters of four), in the search's descriptor mode, passes every stage of the verifier,
/// which launches each five times on one workspace: every such code, both layouts, 3 and 16
/// slices, shapes whose tile rows or columns do not fill the cluster (its other CTAs hold
/// only rows or columns past C, and still count their units) or that tiles do not divide,
/// and slices with no K-tile (K = 200 has 4). The split-K loop strides over the grid's
/// clusters, so a grid one cluster short is still correct: it must pass too.
#[test]
fn multicast_split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<HopperConfig> = hopper::multicast_split_all().into_iter().map(hopper::searched_modes).collect();
    let shapes = [(1000, 1000, 4104), (200, 520, 2048), (640, 384, 4104), (130, 72, 200), (1024, 1024, 8192)];
    let mut runs = VerifierRuns::new("SPLITK-MULTICAST");
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = hopper::compile(code, Acc::F32, layout).expect("compile");
            for (q, split) in [3, 16].into_iter().enumerate() {
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                runs.run_code(&p, &HopperConfig { split, ..*code }, &ptx);
            }
        }
    }
    // A grid one cluster short: its first cluster takes the last unit as well.
    let short = HopperConfig { split: 4, ..codes[0] };
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(512, 512, 1024).expect("shape"));
    let grid = short.manifest(&p, 132).launches[0].grid[0] - short.cluster_size();
    runs.run_capped(&p, &short, &hopper::compile(&short, Acc::F32, Layout::Tn).expect("compile"), grid);
    runs.assert_all_passed();
}

/// Stream-K Hopper kernels (`_sks`: the tiles' K-iterations cut into one equal range per
/// block, across tile boundaries, shared tiles summed with the atomic split-K's workspace)
/// pass every stage of the verifier, which launches each five times on one workspace:
/// every stream-K code, both layouts, grids of 2, 7, 132 and 264 blocks, shapes the tiles
/// do not divide, a block range shorter than a tile and longer than several, and fewer
/// K-iterations than blocks (640×384×136 has 90 with 64×128 tiles: the manifest launches 90
/// blocks). A grid that is not S must write nothing.
#[test]
fn stream_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(1000, 1000, 4104), (100, 200, 4104), (640, 384, 136), (64, 64, 16384), (2048, 2048, 2048)];
    // The short grid: one block short of S.
    let codes = hopper::stream_k_codes(132);
    split_codes_pass_the_verifier("STREAMK", &codes, &[2, 7, 132, 264], &shapes, (&codes[0], (512, 512, 1024), 1));
}

/// Hybrid stream-K (`_skh`: whole tiles on the persistent order but for the last full wave
/// and the partial one, whose K-iterations are cut into equal ranges) passes the verifier:
/// the large cooperative tiles alone and in multicast pairs along M and N, in the search's
/// descriptor mode, both layouts, on grids where every tile is whole (2: one unit), where
/// tiles are whole and cut (8, and 132 on the large shapes) and where every tile is cut (264);
/// then a grid one block short of S must fail fast.
#[test]
fn hybrid_stream_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(4000, 4104, 520), (1000, 1000, 4104), (4096, 4096, 512), (300, 600, 4104), (2000, 3000, 1000)];
    let codes: Vec<_> = hopper::stream_k_trial_codes(132).into_iter().filter(|c| c.sk_hybrid).map(hopper::searched_modes).collect();
    assert_eq!(codes.len(), 9);
    split_codes_pass_the_verifier("STREAMK-HYBRID", &codes, &[2, 8, 132, 264], &shapes, (&codes[0], (4096, 4096, 512), 1));
}

/// Every code × layout × split count (the slices, the cluster size or the stream-K grid)
/// through the verifier, the shapes taken in turn so that each code meets several; then
/// `short_grid` (a code, a tn shape, how many blocks short) must fail fast.
fn split_codes_pass_the_verifier(tag: &'static str, codes: &[kaas::tuner::hopper::HopperConfig], splits: &[u32], shapes: &[(u32, u32, u32)], short_grid: (&kaas::tuner::hopper::HopperConfig, (u32, u32, u32), u32)) {
    let mut runs = VerifierRuns::new(tag);
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = kaas::tuner::hopper::compile(code, Acc::F32, layout).expect("compile");
            for (q, &split) in splits.iter().enumerate() {
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                let cfg = kaas::tuner::hopper::HopperConfig { split, ..*code };
                runs.run_code(&p, &cfg, &ptx);
            }
        }
    }
    let (cfg, (m, n, k), short) = short_grid;
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
    short_grid_fails_fast(tag, cfg, &p, short);
    runs.assert_all_passed();
}

/// A Hopper code launched `short` blocks under its manifest's grid: every block returns at
/// once, C stays unwritten, and the verifier says so without a timeout.
fn short_grid_fails_fast(tag: &str, cfg: &kaas::tuner::hopper::HopperConfig, p: &Problem, short: u32) {
    let mut manifest = cfg.manifest(p, 132);
    manifest.launches[0].grid[0] -= short;
    let ptx = kaas::tuner::hopper::compile(cfg, p.acc, p.layout).expect("compile");
    let o = sandbox::run_with(&sandbox_command(), &Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None }, Duration::from_secs(60));
    println!("{tag} short grid: {:?} {}", o.verdict, first_line(&o.message, 160));
    assert!(o.verdict != Verdict::Pass && o.verdict != Verdict::Timeout, "a short grid must fail fast: {:?} {}", o.verdict, o.message);
}

/// Hopper kernels in clusters of two along M (`_m2`: each CTA loads half of the B tile and
/// multicasts it to both) pass the verifier: every such code of the search, both layouts,
/// shapes whose tile rows are odd (the cluster's second CTA has only rows past M) or that
/// tiles do not divide, one tile per pair and persistent grids of 2, 6 and 132 blocks.
#[test]
fn multicast_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<_> = hopper::multicast_codes().into_iter().filter(|c| !c.persistent).collect();
    assert!(!codes.is_empty());
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (640, 384, 4104)];
    let mut runs = VerifierRuns::new("MULTICAST");
    // (Clusters of two: every cap is whole clusters already.)
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(2), Some(6), Some(132)]);
    }
    runs.assert_all_passed();
}

/// The TMA-store epilogue (`_ts`: stmatrix into swizzled staging, bulk tensor stores that
/// clip at C's edges) passes the verifier: cooperative tiles of one and two consumers,
/// ping-pong, clusters along M and N, both layouts, on shapes the tiles do not divide; one
/// tile per CTA, persistent grids of 1, 3 and 132 blocks (each warp's two staging buffers
/// reused across tiles), and the f16 accumulator.
#[test]
fn tma_store_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base = [
        HopperConfig::new(128, 256, 4, 2),
        HopperConfig::new(256, 128, 4, 2),
        HopperConfig::new(128, 128, 6, 2),
        HopperConfig::new(64, 128, 8, 1),
        HopperConfig::new(64, 64, 8, 1),
        HopperConfig { pingpong: true, ..HopperConfig::new(64, 256, 5, 2) },
        HopperConfig { pingpong: true, ..HopperConfig::new(128, 128, 6, 2) },
        HopperConfig { cluster_m: 2, ..HopperConfig::new(128, 128, 6, 2) },
        HopperConfig { cluster_n: 2, ..HopperConfig::new(128, 256, 4, 2) },
    ];
    let codes: Vec<HopperConfig> = base.iter().map(|c| hopper::tma_store_twin(c).expect("a twin")).collect();
    // N a multiple of 8: C's rows must be 16-byte aligned for its tensor map.
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (640, 384, 4104), (65, 72, 64)];
    let mut runs = VerifierRuns::new("TMA-STORE");
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(1), Some(3), Some(132)]);
    }
    for code in [codes[2], codes[5]] {
        for layout in Layout::ALL {
            let p = Problem::new(Arch::Sm90, Acc::F16, layout, Shape::new(1000, 1000, 1000).expect("shape"));
            let ptx = hopper::compile(&code, Acc::F16, layout).expect("compile");
            runs.run_code(&p, &HopperConfig { persistent: true, ..code }, &ptx);
        }
    }
    runs.assert_all_passed();
}

/// K-128 ring slots (`KAAS_BK=128`: two swizzle atoms per slot, two TMA boxes of A and of
/// tn's B, nn's B boxes 128 rows deep) pass the verifier: the narrow and 64-column tiles of
/// one and two consumers, accumulator chains, the atomic split-K with uneven slices, a
/// cluster along N, the TMA store; both layouts where they build, on shapes whose K is no
/// multiple of 128 (the second atom of the last slot is past K: zeros) and that the tiles
/// do not divide; one tile per CTA and persistent grids of 3 blocks. fp32 accumulators, the
/// only ones the tuner offers K 128 with.
#[test]
fn bk128_hopper_kernels_pass_the_verifier() {
    wide_slot_kernels_pass_the_verifier(128);
}

/// The same for K 256 per slot (four swizzle atoms; nn's B boxes 256 rows deep), where its
/// three slots fit: the 64-row tiles. K of 4104 leaves the last slot 8 deep.
#[test]
fn bk256_hopper_kernels_pass_the_verifier() {
    wide_slot_kernels_pass_the_verifier(256);
}

fn wide_slot_kernels_pass_the_verifier(bk: u32) {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base = [
        HopperConfig::new(64, 16, 4, 1),
        HopperConfig::new(64, 32, 16, 1),
        HopperConfig::new(64, 64, 8, 1),
        HopperConfig::new(128, 64, 8, 2),
        HopperConfig { chains: 2, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { cluster_n: 2, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { tma_store: true, ..HopperConfig::new(64, 64, 8, 1) },
    ];
    let codes: Vec<HopperConfig> = base.iter().filter_map(|c| hopper::bk_twin(c, bk)).collect();
    assert!(codes.len() >= 6, "K {bk}: {codes:?}");
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (64, 512, 4104), (130, 264, 200)];
    let mut runs = VerifierRuns::new(if bk == 128 { "K128" } else { "K256" });
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(3)]);
    }
    // The atomic split-K: 5 and 16 slices of 4200 (33 K-tiles of 128, 17 of 256; the last
    // one partial).
    for split in [5, 16] {
        let code = hopper::bk_twin(&HopperConfig { split, atomic: true, ..HopperConfig::new(64, 32, 16, 1) }, bk).expect("a twin");
        for layout in Layout::ALL.into_iter().filter(|&l| code.supports(l)) {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(100, 264, 4200).expect("shape"));
            runs.run_code(&p, &code, &hopper::compile(&code, p.acc, layout).expect("compile"));
        }
    }
    runs.assert_all_passed();
}

/// The 64×8 tiles (`--trial narrow8`; tn only) pass the verifier: every unsplit code, two
/// accumulator chains included, on shapes whose N is no multiple of 8 or 64 and whose K is
/// no multiple of 64, one tile per CTA and a persistent grid of 3; the atomic split-K of 5
/// and 16 slices; and the f16 accumulator.
#[test]
fn narrow8_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("N8");
    let unsplit: Vec<HopperConfig> = hopper::narrow8_codes().into_iter().filter(|c| c.split <= 1).collect();
    assert!(unsplit.len() >= 3, "{unsplit:?}");
    for code in &unsplit {
        let ptx = hopper::compile(code, Acc::F32, Layout::Tn).expect("compile");
        for (m, n, k) in [(200, 520, 136), (64, 60, 4104), (130, 13, 200), (1000, 1000, 1000)] {
            let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
            runs.run_grids(&p, code, &ptx, &[None, Some(3)]);
        }
    }
    let split = hopper::narrow8_codes().into_iter().find(|c| c.split > 1).expect("a split-K code");
    let ptx = hopper::compile(&split, Acc::F32, Layout::Tn).expect("compile");
    for slices in [5, 16] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(100, 36, 4200).expect("shape"));
        runs.run_code(&p, &HopperConfig { split: slices, ..split }, &ptx);
    }
    let plain = unsplit.iter().find(|c| c.chains == 1).expect("an unsplit code");
    let p = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(200, 520, 136).expect("shape"));
    runs.run_code(&p, plain, &hopper::compile(plain, Acc::F16, Layout::Tn).expect("compile"));
    runs.assert_all_passed();
}

/// The skinny shapes' clusters (2, 4 and 8 CTAs along N multicasting A, or along M
/// multicasting B) pass the verifier: every such code of the search, both layouts where it
/// builds, on shapes whose tiles leave a cluster partly past the edge (the CTAs there load
/// and multicast their share, and store nothing); a 2×4 cluster that multicasts both
/// operands; persistent grids of one cluster and of 132 blocks; and the f16 accumulator.
#[test]
fn skinny_cluster_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::skinny_cluster_codes();
    assert_eq!(codes.len(), 30);
    let along_n = [(64, 1000, 520), (100, 200, 136), (64, 4096, 1024), (130, 520, 4104)];
    // (N a multiple of 8: nn's B rows must be 16-byte aligned for its tensor map.)
    let along_m = [(1000, 64, 520), (200, 104, 136), (4096, 64, 1024), (520, 136, 4104)];
    let mut runs = VerifierRuns::new("SKINNY-CLUSTER");
    let (n_codes, m_codes): (Vec<HopperConfig>, Vec<HopperConfig>) = codes.iter().partition(|c| c.cluster_n > 1);
    for (codes, shapes) in [(&n_codes, &along_n), (&m_codes, &along_m)] {
        for (p, cfg, ptx) in hopper_cases(codes, shapes) {
            runs.run_code(&p, &cfg, &ptx);
        }
    }
    // Both operands multicast: rank r at tile row r % 2, column r / 2.
    let both = HopperConfig { cluster_m: 2, cluster_n: 4, ..HopperConfig::new(64, 64, 8, 1) };
    for (p, cfg, ptx) in hopper_cases(&[both], &[(200, 1000, 520), (1000, 200, 4104)]) {
        runs.run_code(&p, &cfg, &ptx);
        for blocks in [8, 132] {
            runs.run_capped(&p, &HopperConfig { persistent: true, ..cfg }, &ptx, blocks);
        }
    }
    for cfg in codes.iter().filter(|c| c.stages == 4 && c.cluster_size() == 8) {
        runs.run_f16_tn(cfg, (130, 1000, 520));
    }
    println!("{} skinny cluster runs", runs.runs);
    runs.assert_all_passed();
}

/// K split across the two consumer warpgroups (`_kw`: each takes the ring's slots of its
/// parity, consumer 1 hands its fp32 partial to consumer 0) passes the verifier: every such
/// code, both layouts where it builds, on shapes with an odd count of K-tiles and with one
/// (consumer 1 then adds zeros), and persistent grids of 1, 3, 7 and 132 blocks, so a
/// block's tiles start at either parity of the ring and consumer 1 must wait for consumer
/// 0 to take each partial before it stores the next.
#[test]
fn ksplit_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<_> = hopper::ksplit_codes().into_iter().filter(|c| !c.persistent).collect();
    assert_eq!(codes.len(), 8);
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64), (64, 512, 1024)];
    let mut runs = VerifierRuns::new("KSPLIT");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
        for blocks in [1, 3, 7, 132] {
            runs.run_capped(&p, &hopper::HopperConfig { persistent: true, ..cfg }, &ptx, blocks);
        }
    }
    println!("{} k-split runs", runs.runs);
    runs.assert_all_passed();
}

/// K split across consumers in multicast pairs (`_m2…_kw`, `_n2_kw`) passes the verifier:
/// every such code, both layouts, shapes whose tile rows or columns do not fill the pair
/// or that tiles do not divide, one tile per CTA and persistent grids of 2, 6 and 132.
#[test]
fn ksplit_pair_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    // In the search's descriptor mode (stepped descriptors), as the trial times them.
    let codes: Vec<_> = hopper::ksplit_pair_codes().into_iter().filter(|c| !c.persistent).map(hopper::searched_modes).collect();
    assert_eq!(codes.len(), 4);
    let shapes = [(1024, 1024, 8192), (100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("KSPLIT-PAIR");
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(2), Some(6), Some(132)]);
    }
    runs.assert_all_passed();
}

/// Consumers that split the tile's columns (`_cs`) pass the verifier: every such code, both
/// layouts, shapes the tiles do not divide, whose tile rows or
/// columns do not fill a pair, with one K-tile and a ragged K; one tile per CTA and
/// persistent grids of 2, 6 and 132 (their wait0 twins one tile per CTA and 6); the split-K
/// ones with 3 and 16 slices.
#[test]
fn col_split_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<HopperConfig> = hopper::col_split_codes().into_iter().filter(|c| !c.persistent).collect();
    assert_eq!(codes.len(), 22);
    let shapes = [(1024, 1024, 8192), (100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("COL-SPLIT");
    let (split, unsplit): (Vec<HopperConfig>, Vec<HopperConfig>) = codes.into_iter().partition(|c| c.split > 1);
    for (p, code, ptx) in hopper_cases(&unsplit, &shapes) {
        // (The wait0 twins on fewer grids: they change only when a slot is freed.)
        let grids: &[Option<u32>] = if code.wait0 { &[None, Some(6)] } else { &[None, Some(2), Some(6), Some(132)] };
        runs.run_grids(&p, &code, &ptx, grids);
    }
    let sliced: Vec<HopperConfig> = split.iter().flat_map(|c| [3, 16].map(|s| HopperConfig { split: s, ..*c })).collect();
    for (p, code, ptx) in hopper_cases(&sliced, &shapes) {
        runs.run_code(&p, &code, &ptx);
    }
    println!("{} col-split runs", runs.runs);
    runs.assert_all_passed();
}

/// Accumulator chains (`_x2`, `_x4`: the k16 steps of a K-tile go round-robin to separate
/// accumulators, summed after the main loop) pass the verifier: every such code, both
/// layouts where it builds, on shapes with one K-tile, three, and a ragged K; and chains
/// combined with the atomic split-K, a cluster along N and a persistent grid.
#[test]
fn chains_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::chains_codes();
    assert_eq!(codes.len(), 20);
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64), (64, 512, 1024)];
    let mut runs = VerifierRuns::new("CHAINS");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
    }
    let combos = [
        HopperConfig { chains: 2, split: 8, atomic: true, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { chains: 2, cluster_n: 4, ..HopperConfig::new(64, 16, 16, 1) },
        HopperConfig { chains: 4, persistent: true, ..HopperConfig::new(64, 32, 4, 1) },
    ];
    for (p, cfg, ptx) in hopper_cases(&combos, &[(256, 256, 8192), (64, 1000, 520), (1000, 1000, 520)]) {
        runs.run_code(&p, &cfg, &ptx);
        if cfg.persistent {
            runs.run_capped(&p, &cfg, &ptx, 7);
        }
    }
    println!("{} chain runs", runs.runs);
    runs.assert_all_passed();
}

/// Ping-pong Hopper kernels (each consumer warpgroup owns whole tiles, their main loops
/// take turns) through the sandboxed verifier: every ping-pong tile of the search, both
/// layouts, shapes the tiles do not divide, and grids of 1, 3, 7 and 132 blocks, so blocks
/// loop over several tiles, the two consumers get unequal counts, and the ring wraps
/// across tiles mid-phase. The first version waited on a full barrier two phases ahead
/// and hung on exactly these grids.
#[test]
fn pingpong_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let tiles: Vec<_> = hopper::space().into_iter().filter(|c| c.pingpong).collect();
    assert!(!tiles.is_empty());
    let shapes = [(1000, 1000, 1000), (100, 200, 136), (4096, 520, 64), (640, 384, 4104)];
    let mut runs = VerifierRuns::new("PINGPONG");
    for (p, cfg, ptx) in hopper_cases(&tiles, &shapes) {
        for blocks in [1, 3, 7, 132] {
            runs.run_capped(&p, &cfg, &ptx, blocks);
        }
    }
    println!("{} ping-pong runs", runs.runs);
    runs.assert_all_passed();
}

/// Uniform descriptors (`_du`: each wgmma descriptor one 64-bit add to a warp-uniform base;
/// the search's mode before `_dr`, now `--trial du`'s twins) pass the verifier: each of the
/// search's own codes and its K-128 and TMA-store twins, the skinny chains and the 64×8
/// tiles in that mode, one ring depth of each kind, on shapes the tiles do not divide, tn
/// and nn in turn, and the split-K tiles with uneven atomic slices.
#[test]
fn uniform_descriptor_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base: Vec<HopperConfig> = hopper::space().into_iter().chain(hopper::skinny_chains_codes()).chain(hopper::narrow8_search_codes()).collect();
    let twins = hopper::twin_codes(&base, true, &[128], false);
    let split = hopper::split_tiles().into_iter().map(|c| HopperConfig { split: 5, atomic: true, ..c });
    let codes = one_of_each_kind(base.into_iter().chain(twins).chain(split).map(|c| hopper::in_desc_mode(&c, true, false)).collect());
    assert!(codes.len() > 20 && codes.iter().all(|c| c.desc_uniform), "{}", codes.len());
    let runs = verify_in_turn("DESC-UNIFORM", &codes);
    println!("{} uniform-descriptor runs", runs.runs);
    runs.assert_all_passed();
}

/// One ring depth of each kind of code (about 1.3 s a run in the sandbox; all of them would
/// take minutes).
fn one_of_each_kind(mut codes: Vec<kaas::tuner::hopper::HopperConfig>) -> Vec<kaas::tuner::hopper::HopperConfig> {
    codes.sort_by_key(code_kind);
    codes.dedup_by_key(|c| code_kind(c));
    codes
}

/// A code's kind: the code but for its ring depth and its launch choices (grid, L2 promotion).
fn code_kind(c: &kaas::tuner::hopper::HopperConfig) -> kaas::tuner::hopper::HopperConfig {
    kaas::tuner::hopper::HopperConfig { stages: 0, persistent: false, l2_256: false, ..*c }
}

/// The Hopper codes of every kind that builds its descriptors or tiles its own way: the
/// search's (cooperative, ping-pong, narrow, 64×8) and their K-128, K-256 and TMA-store
/// twins, the skinny chains, K split across consumers, the column split (and its wait0
/// twins) and the multicast pairs.
fn kinds_of_code() -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper;
    let base: Vec<hopper::HopperConfig> = hopper::space()
        .into_iter()
        .chain(hopper::skinny_chains_codes())
        .chain(hopper::narrow8_search_codes())
        .chain(hopper::ksplit_codes())
        .chain(hopper::col_split_codes())
        .chain(hopper::multicast_codes())
        .collect();
    let twins = hopper::twin_codes(&base, true, &[128, 256], false);
    base.into_iter().chain(twins).collect()
}

/// Each code through the verifier once, in one layout, tn and nn in turn, on shapes the tiles
/// do not divide (one K-tile, ragged K, long K), in turn too.
fn verify_in_turn(label: &'static str, codes: &[kaas::tuner::hopper::HopperConfig]) -> VerifierRuns {
    verify_in_turn_on(label, codes, &[(100, 200, 136), (1000, 1000, 1000), (64, 1000, 520), (640, 384, 4104), (300, 72, 4104), (256, 256, 8192)])
}

/// [`verify_in_turn`] on shapes of one's own, each code on the next.
fn verify_in_turn_on(label: &'static str, codes: &[kaas::tuner::hopper::HopperConfig], shapes: &[(u32, u32, u32)]) -> VerifierRuns {
    let mut runs = VerifierRuns::new(label);
    for (i, cfg) in codes.iter().enumerate() {
        let layout = [Layout::Tn, Layout::Nn].into_iter().cycle().skip(i).take(2).find(|&l| cfg.supports(l)).expect("a layout");
        let (m, n, k) = shapes[i % shapes.len()];
        let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
        runs.run_code(&p, cfg, &kaas::tuner::hopper::compile(cfg, p.acc, layout).expect("compile"));
    }
    runs
}

/// Stepped descriptors (`_dr`: one 32-bit add to the low word per wgmma operand) pass the
/// verifier in every kind of code that builds descriptors its own way: the search's codes
/// (cooperative, ping-pong, narrow, 64×8) and their K-128, K-256 and TMA-store twins, the
/// skinny chains, K split across consumers, the column split (and its wait0 twins), the
/// multicast pairs and the atomic split-K tiles with uneven slices; one ring depth of each,
/// tn and nn in turn, on shapes the tiles do not divide.
#[test]
fn stepped_descriptor_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let split = hopper::split_tiles().into_iter().map(|c| HopperConfig { split: 5, atomic: true, ..c });
    let codes = one_of_each_kind(kinds_of_code().into_iter().chain(split).map(|c| hopper::step_twin(&c)).collect());
    assert!(codes.len() > 40 && codes.iter().all(|c| c.desc_step && c.validate().is_ok()), "{}", codes.len());
    let runs = verify_in_turn("DESC-STEP", &codes);
    println!("{} stepped-descriptor runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// Every kind of code the stepped test covers, each in the search's modes (`_dr`, `_ec`),
/// plus split-K in order and hybrid stream-K (whose units take tiles their own way).
fn early_coords_codes() -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper::{self, HopperConfig};
    let split = hopper::split_tiles().into_iter().flat_map(|c| [HopperConfig { split: 5, atomic: true, ..c }, HopperConfig { split: 5, atomic: false, ..c }]);
    let stream_k = hopper::stream_k_trial_codes(132).into_iter().filter(|c| c.sk_hybrid);
    let codes = one_of_each_kind(kinds_of_code().into_iter().chain(split).chain(stream_k).map(hopper::searched_modes).collect());
    assert!(codes.len() > 100 && codes.iter().all(|c| c.early_coords && c.entry(Acc::F32, Layout::Tn).ends_with("_ec") && c.validate().is_ok()), "{}", codes.len());
    codes
}

/// The tile's origin computed before the K loop (`_ec`, which the search builds into every
/// code) passes the verifier in every kind of code ([`early_coords_codes`]), one tile per
/// CTA; tn and nn in turn, shapes the tiles do not divide.
#[test]
fn early_coords_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = early_coords_codes();
    let runs = verify_in_turn("EARLY-COORDS", &codes);
    println!("{} early-coordinates runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The same on the persistent grid, where a CTA takes several tiles and recomputes the
/// origin per tile: the unsplit codes of the search's own tiles (cooperative, ping-pong,
/// narrow) with one cluster size, one ring depth each.
#[test]
fn early_coords_persistent_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let searched: Vec<HopperConfig> = hopper::space().into_iter().map(|c| code_kind(&hopper::searched_modes(c))).collect();
    let codes: Vec<HopperConfig> =
        early_coords_codes().into_iter().filter(|c| c.split == 1 && searched.contains(&code_kind(c))).map(|c| HopperConfig { persistent: true, ..c }).collect();
    assert!(codes.len() >= 8, "{}", codes.len());
    let runs = verify_in_turn("EARLY-COORDS-PERSISTENT", &codes);
    println!("{} early-coordinates runs on the persistent grid over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The narrow Hopper tiles (64 × 16, 24, 32, 48; nn 16 and 32; C stored from registers)
/// pass the verifier: every width with the deepest and the 4-stage ring on shapes whose N
/// the widths do not divide, in each layout it builds for, both accumulators (tn), and the
/// 64×32 atomic split-K with uneven slices.
#[test]
fn narrow_hopper_tiles_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let narrow: Vec<HopperConfig> = hopper::space().into_iter().filter(|c| c.bn < 64).collect();
    assert_eq!(narrow.len(), 8, "{narrow:?}");
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("NARROW");
    for (p, cfg, ptx) in hopper_cases(&narrow, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
    }
    for cfg in narrow.iter().filter(|c| c.stages == 4) {
        runs.run_f16_tn(cfg, (130, 1000, 520));
    }
    let split: Vec<HopperConfig> = hopper::split_tiles().into_iter().filter(|c| c.bn < 64).collect();
    assert!(!split.is_empty());
    for (p, cfg, ptx) in hopper_cases(&split, &[(256, 256, 8192), (100, 200, 4104)]) {
        for s in [3, 8, 29] {
            let c = HopperConfig { split: s, ..cfg };
            runs.run_code(&p, &c, &ptx);
        }
    }
    println!("{} narrow runs", runs.runs);
    runs.assert_all_passed();
}

/// The 256×160 tile (tn; two consumers of 128 rows, 160 accumulators each, C stored from
/// registers) passes the verifier on shapes it does not divide, on both grids, a short
/// persistent grid, and with the f16 accumulator.
#[test]
fn wide_160_hopper_tiles_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::wide_160_codes();
    let shapes = [(1000, 1000, 1000), (300, 520, 4104), (4096, 330, 64)];
    let mut runs = VerifierRuns::new("WIDE160");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        // A short grid means something on the persistent grid only.
        let grids: &[u32] = if cfg.persistent { &[3, 132] } else { &[u32::MAX] };
        for &blocks in grids {
            runs.run_capped(&p, &cfg, &ptx, blocks);
        }
    }
    runs.run_f16_tn(&codes[0], (520, 1000, 520));
    println!("{} wide-160 runs", runs.runs);
    runs.assert_all_passed();
}

/// The mma family (mma.sync + cp.async) through the sandboxed verifier (binary exact test,
/// deviation bound, containment): every tile of the search, both layouts and both
/// accumulators on shapes the tiles do not divide, rows that are not 16-byte aligned
/// (K % 8 != 0: the element-by-element path), and split-K with both reductions, uneven
/// slices included. Built for the device's own arch.
#[test]
fn mma_family_kernels_pass_the_verifier() {
    use kaas::tuner::mma::{self, MmaConfig};
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let mut cases: Vec<((u32, u32, u32), MmaConfig, Acc)> = Vec::new();
    for (i, cfg) in mma::space().into_iter().enumerate() {
        cases.push(((100 + 37 * i as u32, 200 - 9 * i as u32, 136), cfg, if i % 2 == 0 { Acc::F32 } else { Acc::F16 }));
    }
    let small = mma::space()[0];
    cases.push(((33, 100, 70), small, Acc::F32));
    cases.push(((100, 72, 30), mma::space()[3], Acc::F32));
    let tile = |bm, bn, atomic| mma::split_tiles().into_iter().find(|c| c.bm == bm && c.bn == bn && c.atomic == atomic).expect("a split-K tile");
    cases.push(((64, 64, 16384), MmaConfig { split: 64, ..tile(32, 32, true) }, Acc::F32));
    cases.push(((100, 200, 1000), MmaConfig { split: 5, ..tile(32, 64, false) }, Acc::F32));
    cases.push(((1000, 72, 3000), MmaConfig { split: 23, ..tile(64, 32, true) }, Acc::F32));
    cases.push(((256, 512, 2048), MmaConfig { split: 3, ..tile(64, 64, false) }, Acc::F32));
    let mut runs = VerifierRuns::new("MMA");
    for ((m, n, k), cfg, acc) in cases {
        for layout in Layout::ALL {
            let p = Problem::new(arch, acc, layout, Shape::new(m, n, k).expect("shape"));
            let ptx = mma::compile(&cfg, arch, acc, layout).expect("compile");
            runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
        }
    }
    runs.assert_all_passed();
}

/// The mma family's split-K in a cluster (`_skc`: the slices of a tile are one cluster's
/// CTAs; ranks 1.. push their partials into rank 0's shared memory with st.async) passes
/// every stage of the verifier, which launches each kernel several times (a kernel that
/// left rank 0's barrier or inbox in a bad state fails the later runs): every code, both
/// layouts, 2, 4, 8 and 16 slices where rank 0's inbox fits (16 is a non-portable
/// cluster), shapes that tiles do not divide, uneven slices, slices with no K-tile (K 200
/// has 4 K-tiles), and rows that are not 16-byte aligned. A grid one cluster short, and a
/// launch with less shared memory than the inbox needs, must write nothing and fail fast.
#[test]
fn mma_cluster_split_kernels_pass_the_verifier() {
    use kaas::tuner::mma::{self, MmaConfig};
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(64, 64, 4096), (100, 200, 4104), (130, 72, 200), (256, 256, 2048), (33, 100, 1030)];
    let mut runs = VerifierRuns::new("MMA cluster");
    for (i, code) in mma::cluster_split_codes().into_iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = mma::compile(&code, Arch::Sm90, Acc::F32, layout).expect("compile");
            for (q, split) in [2, 4, 8, 16].into_iter().enumerate() {
                let cfg = MmaConfig { split, ..code };
                if cfg.validate().is_err() {
                    continue;  // rank 0's inbox would not fit
                }
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                runs.run(&format!("{p} {}", cfg.label()), ptx.clone(), cfg.manifest(&p));
            }
        }
    }
    let cfg = MmaConfig { split: 4, ..mma::cluster_split_codes()[0] };
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(128, 64, 1024).expect("shape"));
    let ptx = mma::compile(&cfg, Arch::Sm90, Acc::F32, Layout::Tn).expect("compile");
    let mut short = cfg.manifest(&p);
    short.launches[0].grid[0] -= 4;
    let mut cramped = cfg.manifest(&p);
    cramped.launches[0].shared_mem_bytes -= 16;
    for (what, manifest) in [("short grid", short), ("short shared memory", cramped)] {
        let o = sandbox::run_with(&sandbox_command(), &Job { ptx: ptx.clone(), manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None }, Duration::from_secs(60));
        println!("MMA cluster {what}: {:?} {}", o.verdict, first_line(&o.message, 160));
        assert!(o.verdict != Verdict::Pass && o.verdict != Verdict::Timeout, "{what} must fail fast: {:?} {}", o.verdict, o.message);
    }
    runs.assert_all_passed();
}

/// The mma family's deep-ring codes (`kaas tune --trial mma-deep`, 6 and 8 stages) through
/// the sandboxed verifier: every code, both layouts, on a shape no tile divides with K long
/// enough to wrap the ring twice; the accumulators alternate; one K that is not a multiple
/// of 8 (the element-by-element path). They stay out of the search until timed, but a
/// trial's winners are submitted like any other, so they must pass first.
#[test]
fn mma_deep_ring_kernels_pass_the_verifier() {
    use kaas::tuner::mma;
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let mut runs = VerifierRuns::new("MMA deep");
    for (i, cfg) in mma::deep_codes().into_iter().enumerate() {
        let acc = if i % 2 == 0 { Acc::F32 } else { Acc::F16 };
        let k = if i == 3 { 1203 } else { 16 * 64 + 40 };
        for layout in Layout::ALL {
            let p = Problem::new(arch, acc, layout, Shape::new(300 + 17 * i as u32, 264 - 8 * i as u32, k).expect("shape"));
            let ptx = mma::compile(&cfg, arch, acc, layout).expect("compile");
            runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
        }
    }
    runs.assert_all_passed();
}

/// nn's narrow tiles (B in one N-major box of 8, 16 or 32 columns, swizzled at that width)
/// pass the verifier in every kind of code the search offers them on skinny and small nn
/// shapes (each width, K 64, 128 and 256, chains, atomic split-K, clusters along M and N),
/// one ring depth each, in the search's modes, and the unsplit ones on the persistent grid
/// too; nn, on shapes the tiles do not divide.
#[test]
fn nn_narrow_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut offered = Vec::new();
    for (m, n, k) in [(64, 1024, 512), (256, 64, 1024), (64, 64, 16384), (128, 512, 4096), (64, 256, 256)] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(m, n, k).expect("shape"));
        // Split counts vary by problem: one count (uneven slices on these shapes) per kind.
        offered.extend(hopper::space_for(&p, 132).into_iter().filter(|c| c.bn < 64).map(|c| hopper::searched_modes(HopperConfig { split: c.split.min(5), ..c })));
    }
    let codes = one_of_each_kind(offered);
    for bn in [8, 16, 32] {
        assert!(codes.iter().any(|c| c.bn == bn), "width {bn}: {codes:?}");
    }
    assert!([128, 256].iter().all(|&bk| codes.iter().any(|c| c.bk == bk)) && codes.iter().any(|c| c.split > 1) && codes.iter().any(|c| c.cluster_size() > 1), "{codes:?}");
    let persistent: Vec<HopperConfig> = codes.iter().filter(|c| c.split == 1).map(|c| HopperConfig { persistent: true, ..*c }).collect();
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 1000), (200, 64, 256)];
    let mut runs = VerifierRuns::new("NN-NARROW");
    for (i, cfg) in codes.iter().chain(&persistent).enumerate() {
        assert!(cfg.supports(Layout::Nn) && cfg.early_coords && cfg.desc_step, "{cfg:?}");
        let (m, n, k) = shapes[i % shapes.len()];
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(m, n, k).expect("shape"));
        runs.run_code(&p, cfg, &hopper::compile(cfg, p.acc, p.layout).expect("compile"));
    }
    println!("{} nn narrow-tile runs over {} codes ({} of them persistent)", runs.runs, codes.len() + persistent.len(), persistent.len());
    runs.assert_all_passed();
}

/// Every kind of code that takes a one-tile grid (unsplit, no ping-pong, no cluster: the
/// early-coords codes' kinds, narrow and nn narrow tiles included), on the grid `on` puts
/// it on (`_2d` or `_2g`).
fn one_tile_grid_codes(on: fn(kaas::tuner::hopper::HopperConfig) -> kaas::tuner::hopper::HopperConfig) -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper::{self, HopperConfig};
    let nn_narrow = hopper::space().into_iter().filter(|c| c.bn < 64 && c.supports(Layout::Nn)).map(hopper::searched_modes);
    let codes = one_of_each_kind(early_coords_codes().into_iter().chain(nn_narrow).filter(HopperConfig::takes_grid2d).map(on).collect());
    assert!(codes.len() > 40 && codes.iter().all(|c| (c.grid2d || c.grid_grouped) && c.validate().is_ok()), "{}", codes.len());
    codes
}

/// The 2-D grid (`_2d`: one tile per CTA, the tile its block index) passes the verifier in
/// every kind of code that takes it, tn and nn in turn, on shapes the tiles do not divide.
#[test]
fn grid2d_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = one_tile_grid_codes(|c| kaas::tuner::hopper::HopperConfig { grid2d: true, ..c });
    let runs = verify_in_turn("GRID-2D", &codes);
    println!("{} 2-D grid runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The grouped grid (`_2g`: one tile per CTA, tile row z·16 + x, column y) passes the
/// verifier in every kind of code that takes it, tn and nn in turn, on shapes whose last
/// 16-row group is partial (the CTAs past M must write nothing) or whole, and that the
/// tiles do not divide.
#[test]
fn grouped_grid_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = one_tile_grid_codes(|c| kaas::tuner::hopper::HopperConfig { grid_grouped: true, ..c });
    // Tile rows of 64 / 128: 18 / 9, 33 / 17, 66 / 33, 2 / 1, 21 / 11, 16 / 8.
    let shapes = [(1100, 200, 136), (2100, 1000, 520), (4200, 136, 264), (100, 4000, 1000), (1300, 72, 4104), (1024, 384, 256)];
    let runs = verify_in_turn_on("GRID-GROUPED", &codes, &shapes);
    println!("{} grouped-grid runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}
