//! The device, the launcher, the baselines and timing, and the shipped catalog's kernels.

use super::*;

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
        skip("clusters need sm_90");
        return;
    }
    let shape = (256, 512, 64);
    let case = Case::binary(shape, 7);
    // Clusters exist from sm_90, so the manifest names that arch (a cluster on an sm_80
    // problem is refused before any launch); the sm_80 PTX runs there as it is.
    let p = Problem { arch: Arch::Sm90, ..problem(Acc::F32, Layout::Tn, shape) };
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

const TMA_COPY: &str = include_str!("../kernels/tma_copy.cu");

#[test]
fn tensor_maps_address_each_operand_as_the_layout_says() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    if gpu.facts().compute_capability < (9, 0) {
        skip("tensor maps need sm_90");
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

/// The tune job's paired timing (`tuner::time_paired`): cuBLASLt paired with itself reads
/// even, and the simple kernel, several times slower, reads the ratio that timing each
/// alone gives, so a pull's reward is the speedup over the reference and not a constant.
#[test]
fn paired_timing_reads_the_ratio_to_the_reference() {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let p = problem(Acc::F32, Layout::Tn, (2048, 2048, 2048));
    // One buffer set: the reference's graph here runs on it alone, so the contenders must
    // too (over a rotation that outgrows the L2 they would read cold against a warm one).
    let sets = [Operands::alloc(&gpu, &p, 0).expect("alloc")];
    let top = LtGemm::top1(&gpu, &sets[0]).expect("cuBLASLt");
    let refs: Vec<LtGemm> = sets.iter().map(|ops| top.with_operands(ops).expect("bind")).collect();
    let reference = gpu::GraphTimer::capture(&gpu, &refs[0], 6).expect("the reference's graph");
    let (ref_us, even) = kaas::tuner::time_paired(&gpu, &refs, &reference).expect("paired with itself");
    println!("cuBLASLt paired with itself: {ref_us:.2} µs, ratio {even:.4}");
    assert!((0.97..=1.03).contains(&even), "the reference paired with itself read {even}");

    let config = SimpleConfig::LARGE;
    let ptx = gpu.load_ptx(&kernels::compile_simple(&p, &config).expect("compile")).expect("load");
    let simple: Vec<PreparedManifest> = sets.iter().map(|ops| PreparedManifest::new(&gpu, &ptx, &kernels::manifest_for(&p, &config), ops).expect("prepare")).collect();
    let (simple_us, reward) = kaas::tuner::time_paired(&gpu, &simple, &reference).expect("the simple kernel paired");
    let alone = median(&gpu::time_graph(&gpu, &refs[0], 6, 5).expect("reference alone")) / median(&gpu::time_graph(&gpu, &simple[0], 6, 5).expect("simple alone"));
    println!("simple kernel paired: {simple_us:.2} µs, reward {reward:.4}; timed alone: {alone:.4}");
    assert!(reward < 0.8, "the simple kernel read {reward} of cuBLASLt's speed");
    assert!((reward / alone - 1.0).abs() < 0.15, "paired {reward} against {alone} timed alone");
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
                "verified on {} ({}, driver {}, CUDA {}) by tests/gpu: exact on 3 seeds of {{0,1}} inputs over all {} outputs; \
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
