//! The verification pipeline in its sandbox, against the adversarial suite
//! (`tests/kernels/hostile`).

use super::*;

// ---------------------------------------------------------------------------------------
// The verification pipeline in its sandbox, against hostile kernels

const HOSTILE_COMMON: &str = include_str!("../kernels/hostile/common.cuh");

/// The problem every hostile kernel is judged on: big enough that fp16 accumulation
/// shows (K = 2048), small enough that a CUDA-core kernel takes a millisecond.
fn hostile_problem(acc: Acc, layout: Layout) -> Problem {
    problem(acc, layout, (256, 256, 2048))
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
    suspect("hang", include_str!("../kernels/hostile/hang.cu"), "kaas_hang", &[Verdict::Timeout]),
    suspect("oob_write", include_str!("../kernels/hostile/oob_write.cu"), "kaas_oob_write", &[Verdict::OutOfBoundsWrite]),
    suspect("partial_c", include_str!("../kernels/hostile/partial_c.cu"), "kaas_partial_c", &[Verdict::UnwrittenOutput]),
    suspect("modify_a", include_str!("../kernels/hostile/modify_a.cu"), "kaas_modify_a", &[Verdict::InputModified]),
    suspect("cached", include_str!("../kernels/hostile/cached.cu"), "kaas_cached", &[Verdict::StaticInvalid]),
    Suspect { workspace: (10, 0), ..suspect("cached_ws", include_str!("../kernels/hostile/cached_ws.cu"), "kaas_cached_ws", &[Verdict::ExactMismatch]) },
    suspect("first_launch_only", include_str!("../kernels/hostile/first_launch_only.cu"), "kaas_first_launch_only", &[Verdict::StaticInvalid]),
    Suspect { workspace: (4, 0), ..suspect("first_launch_only_ws", include_str!("../kernels/hostile/first_launch_only_ws.cu"), "kaas_first_launch_only_ws", &[Verdict::UnwrittenOutput]) },
    suspect("fp16_accumulate", include_str!("../kernels/hostile/fp16_accumulate.cu"), "kaas_fp16_accumulate", &[Verdict::DeviationExceeded]),
    Suspect { split_k: 2, ..suspect("splitk_race", include_str!("../kernels/hostile/splitk_race.cu"), "kaas_splitk_race", RACE_CAUGHT) },
    Suspect { split_k: 2, ..suspect("splitk_late_read", include_str!("../kernels/hostile/splitk_late_read.cu"), "kaas_splitk_late_read", RACE_CAUGHT) },
    Suspect { split_k: 4, ..suspect("splitk_chain", include_str!("../kernels/hostile/splitk_chain.cu"), "kaas_splitk_chain", RACE_CAUGHT) },
    Suspect { extra_grid_rows: 2, ..suspect("unguarded_grid", include_str!("../kernels/hostile/unguarded_grid.cu"), "kaas_unguarded_grid", &[Verdict::OutOfBoundsWrite]) },
    suspect("timer_skip_global", include_str!("../kernels/hostile/timer_skip_global.cu"), "kaas_timer_skip_global", &[Verdict::StaticInvalid]),
    // A small problem, so that the benchmark launches it many times back to back.
    Suspect { workspace: (0, 32), bench: true, shape: Some((128, 128, 512)), ..suspect("timer_skip", include_str!("../kernels/hostile/timer_skip.cu"), "kaas_timer_skip", &[Verdict::TimingDependent]) },
    Suspect { bench: true, ..suspect("poison_reader", include_str!("../kernels/hostile/poison_reader.cu"), "kaas_poison_reader", &[Verdict::TimingDependent, Verdict::Unstable]) },
    // Memos of the output, kept between launches (docs/verification.md, "The fresh-input
    // stage"): keyed by a sample of the inputs (wrong once part of them changes), right
    // only where a sampled input reaches, keyed by a full hash of each block's inputs
    // (always right, only fast), and C itself as the memo.
    Suspect { workspace: (2, 65536), ..suspect("memo_sampled", include_str!("../kernels/hostile/memo_sampled.cu"), "kaas_memo_sampled", &[Verdict::RepeatDependent]) },
    Suspect { workspace: (2, 65536), ..suspect("memo_spots", include_str!("../kernels/hostile/memo_spots.cu"), "kaas_memo_spots", &[Verdict::RepeatDependent]) },
    Suspect { workspace: (2, 65536), bench: true, ..suspect("memo_hash", include_str!("../kernels/hostile/memo_hash.cu"), "kaas_memo_hash", &[Verdict::RepeatDependent]) },
    Suspect { workspace: (0, 131072), bench: true, ..suspect("memo_c", include_str!("../kernels/hostile/memo_c.cu"), "kaas_memo_c", &[Verdict::RepeatDependent]) },
    // Correct controls: a plain kernel, and atomic split-K, through the race stage and
    // the benchmark's timed-sequence check.
    Suspect { bench: true, ..suspect("correct_naive", include_str!("../kernels/hostile/correct_naive.cu"), "kaas_naive", &[Verdict::Pass]) },
    Suspect { split_k: 4, workspace: (8, 0), bench: true, ..suspect("splitk_atomic", include_str!("../kernels/hostile/splitk_atomic.cu"), "kaas_splitk_atomic", &[Verdict::Pass]) },
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
    if !gpu_and_nvrtc_here() {
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
    // KAAS_HOSTILE_ONLY=a,b judges only the suspects whose names start with one of these
    // (a short check of a few kernels; the whole suite is the default).
    let only: Vec<String> = std::env::var("KAAS_HOSTILE_ONLY").map(|v| v.split(',').map(str::to_string).collect()).unwrap_or_default();
    let chosen = |s: &&Suspect| only.is_empty() || only.iter().any(|o| s.name.starts_with(o.as_str()));
    for round in 1..=rounds {
        for s in SUSPECTS.iter().filter(chosen).filter(|s| round == 1 || s.name != "hang") {
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
    if !gpu_and_nvrtc_here() {
        return;
    }
    let p = problem(Acc::F32, Layout::Tn, (2048, 2048, 2048));
    let mut job = simple_job_for(p, SimpleConfig::LARGE).expect("compile simple");
    job.bench = Some(serde_json::json!({"modes": ["graph", "offline"], "budget_ms": 3000, "sets": 3}));
    let started = Instant::now();
    // `run_in_sandbox` with the staged `kaas` as the sandbox executable.
    let o = sandbox::run_with(&sandbox_command(), &job, job.wall_limit());
    let wall = started.elapsed();
    println!("{}", kaas::cli::run::table(&job, &o, wall));
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
    both_regimes_were_timed(bench, 2048 * 2048 * 2 * 3);
}

/// From 2^36 FLOP (here 4096×4096×2048, exactly that) the ranked regime is timed paced
/// too: `paced` mode's single launches after device-side pauses, for the candidate and
/// every baseline, beside graph mode's, and the regime beside stays graph only.
#[test]
fn a_large_run_is_also_timed_paced() {
    if !gpu_and_nvrtc_here() {
        return;
    }
    let p = problem(Acc::F32, Layout::Tn, (4096, 4096, 2048));
    assert!(2.0 * 4096.0 * 4096.0 * 2048.0 >= kaas::harness::bench::PACED_FROM_FLOP);
    let mut job = simple_job_for(p, SimpleConfig::LARGE).expect("compile simple");
    job.bench = Some(serde_json::json!({"budget_ms": 3000, "sets": 3, "autotune_max": 8}));
    let o = sandbox::run_with(&sandbox_command(), &job, job.wall_limit());
    assert_eq!(o.verdict, Verdict::Pass, "{}: {}", o.stage, o.message);
    let bench = o.bench.as_ref().expect("bench present after a pass");
    let us = |mode: &str| bench["timings"][mode]["median_us"].as_f64().unwrap_or(f64::NAN);
    assert!(us("paced").is_finite() && us("paced") > 0.0, "{}", bench["timings"]);
    for key in ["cublas_max", "cublaslt_heuristic_max", "cublaslt_autotune_max"] {
        let x = bench["speedups"]["paced"][key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "paced speedup {key} = {x}");
    }
    let paced = bench["baselines"].as_array().expect("baselines").iter().filter(|b| b["mode"] == "paced").count();
    assert_eq!(paced, 6, "every baseline timed paced too");
    assert!(bench["regimes"]["l2_warm"]["timings"].get("paced").is_none(), "the regime beside: graph only");
    // A paced launch starts after its pause, not behind the previous launch: it takes
    // about as long as one in a graph (at higher clocks, if anything), never twice.
    assert!(us("paced") < 1.5 * us("graph"), "graph {} µs, paced {} µs", us("graph"), us("paced"));
    println!(
        "RUNBENCH paced 4096x4096x2048: graph {:.1} µs, paced {:.1} µs; autotune-max {:.3}x graph, {:.3}x paced",
        us("graph"),
        us("paced"),
        bench["speedups"]["graph"]["cublaslt_autotune_max"].as_f64().unwrap_or(f64::NAN),
        bench["speedups"]["paced"]["cublaslt_autotune_max"].as_f64().unwrap_or(f64::NAN)
    );
}

/// The checks on a benchmark's two regimes: ranked L2-cold over a rotation spanning at
/// least twice the L2 and walked whole by every sample, L2-warm on one set; the baselines
/// in each; every algorithm the heuristic offered screened by the autotune; the timed
/// sequences of both checked. `set_bytes`: one buffer set's A, B and C.
fn both_regimes_were_timed(bench: &serde_json::Value, set_bytes: u64) {
    assert_eq!(bench["regime"], "l2_cold");
    let cold = &bench["regimes"]["l2_cold"];
    let warm = &bench["regimes"]["l2_warm"];
    assert_eq!(cold["timings"], bench["timings"], "the top-level figures are the ranked regime's");
    assert_eq!(cold["cache"], "l2_cold", "{cold}");
    assert!(cold["l2_multiple"].as_f64().is_some_and(|x| x >= 2.0), "{}", cold["l2_multiple"]);
    let sets = cold["buffer_sets"].as_u64().expect("sets");
    assert!(cold["launches_per_sample"].as_u64().is_some_and(|r| r >= sets), "every sample walks the rotation: {cold}");
    assert!(cold["footprint_bytes"].as_u64().is_some_and(|f| f >= sets * set_bytes));
    assert_eq!(warm["buffer_sets"], 1);
    assert!(warm["timings"]["graph"]["median_us"].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{warm}");
    assert!(warm["timings"].get("offline").is_none(), "the regime beside is timed in graph mode only");
    assert_eq!(warm["baselines"].as_array().map(Vec::len), Some(6), "six baselines, graph mode");
    for b in bench["baselines"].as_array().expect("baselines").iter().filter(|b| b["library"] == "cublaslt_autotune") {
        let a = &b["config"]["autotune"];
        assert_eq!(a["candidates_timed"], a["candidates_offered"], "every offered algorithm is screened: {a}");
    }
    for regime in ["l2_cold", "l2_warm"] {
        let checks = bench["sequence_checks"][regime].as_array().unwrap_or_else(|| panic!("{regime}: {}", bench["sequence_checks"]));
        assert_eq!(checks.len(), 4, "{regime}");
        assert!(checks.iter().all(|c| c["passed"] == true), "{regime}: {checks:?}");
    }
    let us = |r: &serde_json::Value| r["timings"]["graph"]["median_us"].as_f64().unwrap_or(f64::NAN);
    let speed = |r: &serde_json::Value| r["speedups"]["graph"]["cublaslt_autotune_max"].as_f64().unwrap_or(f64::NAN);
    println!(
        "RUNBENCH regimes: l2_cold {} sets ({:.1}× L2), R {}, {:.2} µs, {:.3}× autotune-max; l2_warm {:.2} µs, {:.3}×",
        sets,
        cold["l2_multiple"].as_f64().unwrap_or(f64::NAN),
        cold["launches_per_sample"],
        us(cold),
        speed(cold),
        us(warm),
        speed(warm)
    );
}

/// A small problem's L2-cold rotation needs thousands of buffer sets (64×256×128: 120 KiB
/// a set, about 900 on an H100), every one walked by each sample: it must still fit the
/// run's time and give both regimes.
#[test]
fn a_small_problem_is_timed_cold_over_a_rotation_of_thousands_of_sets() {
    if !gpu_and_nvrtc_here() {
        return;
    }
    let p = problem(Acc::F32, Layout::Tn, (64, 256, 128));
    let mut job = simple_job_for(p, SimpleConfig::SMALL).expect("compile simple");
    job.bench = Some(serde_json::json!({"modes": ["graph", "offline"], "budget_ms": 900}));
    let started = Instant::now();
    let o = sandbox::run_with(&sandbox_command(), &job, job.wall_limit());
    let wall = started.elapsed();
    println!("{}", kaas::cli::run::table(&job, &o, wall));
    assert_eq!(o.verdict, Verdict::Pass, "{}: {}", o.stage, o.message);
    let bench = o.bench.as_ref().expect("bench present after a pass");
    both_regimes_were_timed(bench, 2 * (64 * 128 + 128 * 256 + 64 * 256));
    println!("RUNBENCH small: whole run {:.2} s wall, setup {} ms, autotune {} ms, sequence checks {} ms", wall.as_secs_f64(), bench["setup_ms"], bench["autotune_ms"], bench["sequence_ms"]);
    assert!(wall < Duration::from_secs(30), "{wall:?}");
}
