//! `kaas baselines`: the baseline table of a device — cuBLAS, cuBLASLt heuristic top-1
//! and cuBLASLt autotuned, each in NN and TN, timed side by side per shape — written as
//! a catalog bundle (device class, problems, baselines) that `kaas import` reads. And
//! `--calibrate`: the null test (one contender entered twice must tie within ±1%) and
//! the speed of the harness itself.
//!
//! Inputs are uniform random fp16 in [-1, 1], copied on the device from one random pool
//! at a different offset per buffer (generating every buffer on the host would cost more
//! than timing it). Each shape gets its own budget, a share of what is left of the total
//! in proportion to its expected cost, so that a whole grid ends inside one limit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use serde::Serialize;

use crate::harness::autotune::{self, AutotuneChoice, AutotuneKey, AutotuneOptions};
use crate::harness::baselines::{Pool, SLOTS, SixBaselines, grid_shapes, operand_sets};
use crate::harness::runner::{self, BenchConfig, BenchReport, DeviceState, Library};
use crate::bench::stats::{Mode, Timing};
use crate::catalog::bundle::{self, BaselineRecord, DeviceClassRecord, Index};
use crate::gpu::{Contender, CublasGemm, DeviceFacts, Gpu, GpuError, LtGemm, Operands};
use crate::problem::{Acc, Arch, Layout, Problem, Shape};

#[derive(Debug, Clone, clap::Args)]
pub struct BaselinesArgs {
    /// Time the 1,000-shape grid (M, N, K each in 64 … 16384).
    #[arg(long, conflicts_with = "problems")]
    pub grid: bool,
    /// Time these shapes (MxNxK; repeat the flag).
    #[arg(long = "problem", value_name = "MxNxK")]
    pub problems: Vec<Shape>,
    /// Accumulator.
    #[arg(long, default_value = "f32")]
    pub acc: Acc,
    /// Modes to time, comma-separated: graph, offline, server.
    #[arg(long, value_delimiter = ',', default_value = "graph,offline")]
    pub modes: Vec<String>,
    /// Most time one shape's side-by-side benchmark may take, in ms.
    #[arg(long, default_value_t = 3000)]
    pub budget_ms: u64,
    /// Time for all shapes together, in s; each shape gets a share in proportion to its
    /// expected cost (never more than --budget-ms for its benchmark).
    #[arg(long)]
    pub total_budget_s: Option<u64>,
    /// Only every N-th shape starting at I (`I/N`), to split a grid over several runs.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Buffer sets the inputs rotate over.
    #[arg(long, default_value_t = 3)]
    pub sets: usize,
    /// Heuristic algorithms the autotune search may time.
    #[arg(long, default_value_t = 100)]
    pub autotune_max: usize,
    /// Cache autotune choices in this database (SQLite path or URL, or postgres://…).
    #[arg(long)]
    pub autotune_cache: Option<String>,
    /// Null test instead of the table: cuBLAS and cuBLASLt top-1 each entered twice.
    #[arg(long)]
    pub calibrate: bool,
    /// Agreement check instead of the table: per shape (TN), the autotune choice as the
    /// benchmark makes it, against every algorithm the heuristic offers timed side by
    /// side in the L2-cold regime for the whole --budget-ms (an exhaustive search);
    /// prints the choice's median over the exhaustive best, and the median and p90 of
    /// that ratio.
    #[arg(long, conflicts_with = "calibrate")]
    pub agreement: bool,
    /// Merge these bundles' baselines into --out instead of timing anything.
    #[arg(long, value_name = "DIR", num_args = 1..)]
    pub merge: Vec<PathBuf>,
    /// Seeds the inputs and the order of contenders.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Bundle directory to write (index.json and run.json).
    #[arg(long)]
    pub out: PathBuf,
}

pub(crate) fn parse_modes(words: &[String]) -> anyhow::Result<Vec<Mode>> {
    let mut modes = Vec::new();
    for w in words {
        let m = Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == w.trim())
            .with_context(|| format!("unknown mode `{w}`: expected graph, offline, server or paced"))?;
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    if modes.is_empty() {
        bail!("no mode given");
    }
    Ok(modes)
}

/// `I/N` → (I, N) with I < N.
pub fn parse_shard(text: &str) -> anyhow::Result<(usize, usize)> {
    let (i, n) = text.split_once('/').with_context(|| format!("shard `{text}` is not of the form I/N"))?;
    let (i, n): (usize, usize) = (i.trim().parse()?, n.trim().parse()?);
    if n == 0 || i >= n {
        bail!("shard `{text}`: need 0 ≤ I < N");
    }
    Ok((i, n))
}

/// The PTX target family a device's baselines are filed under.
pub fn arch_of(cc: (u32, u32)) -> anyhow::Result<Arch> {
    [Arch::Sm90, Arch::Sm89, Arch::Sm86, Arch::Sm80]
        .into_iter()
        .find(|a| a.compute_capability() == cc)
        .with_context(|| format!("no arch for compute capability {}.{}", cc.0, cc.1))
}

/// Expected cost of a shape in seconds, for sharing the total budget: a fixed part plus a
/// multiple of one product's time at ~600 TFLOP/s (autotune screen plus the rounds).
/// The fixed part is what an overhead-bound shape needs (H200, 2026-11-22): its `offline`
/// samples (host launch jitter of ±10%) take 300–400 rounds, about a second, to reach
/// ±1%; with 0.15 s, 67 of 500 small shapes stopped unconverged.
pub fn expected_cost_s(shape: &Shape) -> f64 {
    1.0 + 300.0 * shape.flops() / 600e12
}

/// This shape's budget: its share of what is left, by expected cost.
pub fn share(remaining: Duration, cost: f64, remaining_cost: f64) -> Duration {
    if remaining_cost <= 0.0 || !cost.is_finite() {
        return remaining;
    }
    remaining.mul_f64((cost / remaining_cost).clamp(0.0, 1.0))
}


/// Everything one shape's run produced, for run.json.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeRun {
    pub shape: String,
    pub budget_ms: u64,
    pub setup_ms: u64,
    pub autotune_ms: u64,
    pub bench_ms: u64,
    pub autotune: BTreeMap<String, AutotuneSummary>,
    pub autotune_reproduced: bool,
    pub report: Option<BenchReport>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AutotuneSummary {
    pub offered: usize,
    pub timed: usize,
    pub cached: bool,
    pub heuristic_rank: usize,
}

/// Context shared by every shape of a run.
struct Setup<'g> {
    gpu: &'g Gpu,
    facts: DeviceFacts,
    arch: Arch,
    acc: Acc,
    sets: usize,
    seed: u64,
    autotune_max: usize,
    modes: Vec<Mode>,
    cache: Option<(tokio::runtime::Handle, sea_orm::DatabaseConnection)>,
}

impl Setup<'_> {
    fn problem(&self, layout: Layout, shape: Shape) -> Problem {
        Problem::new(self.arch, self.acc, layout, shape)
    }

    /// The autotuned algorithm for `ops`'s problem: from the cache when it holds one that
    /// still re-creates, else searched (and stored).
    fn autotuned<'a>(&self, ops: &'a Operands) -> Result<(LtGemm<'a>, AutotuneChoice, bool), GpuError> {
        let key = AutotuneKey::new(&self.facts, ops.problem());
        if let Some((rt, db)) = &self.cache
            && let Ok(Some(choice)) = rt.block_on(autotune::load(db, &key))
            && let Ok(lt) = LtGemm::from_config(self.gpu, ops, &choice.config)
        {
            return Ok((lt, choice, true));
        }
        let opts = AutotuneOptions { max_candidates: self.autotune_max, ..AutotuneOptions::default() };
        let (lt, choice) = autotune::autotune(self.gpu, ops, &opts)?;
        if let Some((rt, db)) = &self.cache
            && let Err(e) = rt.block_on(autotune::store(db, &key, &choice, Utc::now()))
        {
            eprintln!("baselines: could not cache the autotune choice for {}: {e}", ops.problem());
        }
        Ok((lt, choice, false))
    }

    /// Times one shape: autotune both layouts, then the six contenders side by side.
    fn run_shape(&self, pool: &Pool, shape: Shape, salt: usize, budget: Duration, records: &mut Vec<BaselineRecord>) -> ShapeRun {
        let started = Instant::now();
        let mut run = ShapeRun {
            shape: shape.to_string(),
            budget_ms: budget.as_millis() as u64,
            setup_ms: 0,
            autotune_ms: 0,
            bench_ms: 0,
            autotune: BTreeMap::new(),
            autotune_reproduced: true,
            report: None,
            error: None,
        };
        if let Err(e) = self.time_shape(pool, shape, salt, budget, started, &mut run, records) {
            run.error = Some(e.to_string());
        }
        run
    }

    #[allow(clippy::too_many_arguments)]
    fn time_shape(
        &self,
        pool: &Pool,
        shape: Shape,
        salt: usize,
        budget: Duration,
        started: Instant,
        run: &mut ShapeRun,
        records: &mut Vec<BaselineRecord>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let nn = operand_sets(gpu, pool, &self.problem(Layout::Nn, shape), self.sets, 2 * salt)?;
        let tn = operand_sets(gpu, pool, &self.problem(Layout::Tn, shape), self.sets, 2 * salt + 1)?;
        gpu.synchronize()?;
        run.setup_ms = started.elapsed().as_millis() as u64;

        let at_start = Instant::now();
        let six = SixBaselines::build(gpu, &nn, &tn, &|ops| self.autotuned(ops))?;
        run.autotune_reproduced = six.reproduced;
        for (layout, (choice, cached)) in Layout::ALL.iter().zip(&six.auto_choice) {
            run.autotune.insert(
                layout.as_str().into(),
                AutotuneSummary {
                    offered: choice.candidates_offered,
                    timed: choice.candidates_timed,
                    cached: *cached,
                    heuristic_rank: choice.config.heuristic_rank,
                },
            );
        }
        run.autotune_ms = at_start.elapsed().as_millis() as u64;
        let sets = six.sets();
        let cfg = BenchConfig {
            modes: self.modes.clone(),
            budget: budget.saturating_sub(started.elapsed()).max(Duration::from_millis(1)),
            seed: self.seed ^ salt as u64,
            ..BenchConfig::default()
        };
        let bench_start = Instant::now();
        let report = runner::benchmark(gpu, &sets, shape.flops(), &cfg)?;
        run.bench_ms = bench_start.elapsed().as_millis() as u64;
        let measured_at = Utc::now();
        for (slot, (lib, layout)) in SLOTS.iter().enumerate() {
            let mut config = six.config(slot, &self.problem(*layout, shape))?;
            let Some(ct) = report.contenders.get(slot) else { continue };
            if let Some(map) = config.as_object_mut() {
                map.insert(
                    "measurement".into(),
                    serde_json::json!({
                        "launches_per_sample": ct.launches_per_sample,
                        "buffer_sets": self.sets,
                        "rounds": ct.rounds,
                        "converged": report.converged,
                    }),
                );
            }
            for (mode, timing) in &ct.timings {
                // Filed under both layouts' problems: `-max` compares NN and TN per shape.
                for filed in Layout::ALL {
                    records.push(record(&self.facts, self.problem(filed, shape), *lib, *layout, *mode, timing, &config, measured_at));
                }
            }
        }
        run.report = Some(report);
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn record(
    facts: &DeviceFacts,
    problem: Problem,
    lib: Library,
    layout: Layout,
    mode: Mode,
    timing: &Timing,
    config: &serde_json::Value,
    measured_at: chrono::DateTime<Utc>,
) -> BaselineRecord {
    BaselineRecord {
        device_class: facts.device_class.clone(),
        problem,
        library: lib.as_str().into(),
        layout: layout.as_str().into(),
        mode: mode.as_str().into(),
        median_us: timing.median_us,
        timing: serde_json::to_value(timing).unwrap_or_default(),
        config: config.clone(),
        measured_at,
    }
}

/// Sorts records as `kaas export` does: by problem, device, library, layout, mode.
fn canonical(records: &mut [BaselineRecord]) {
    records.sort_by(|a, b| {
        (a.problem, &a.device_class, &a.library, &a.layout, &a.mode).cmp(&(b.problem, &b.device_class, &b.library, &b.layout, &b.mode))
    });
}

fn device_record(facts: &DeviceFacts) -> DeviceClassRecord {
    DeviceClassRecord {
        name: facts.device_class.to_string(),
        model: facts.name.clone(),
        compute_capability: format!("{}.{}", facts.compute_capability.0, facts.compute_capability.1),
        sm_count: Some(facts.sm_count as i32),
    }
}

/// A bundle index holding only device classes, problems and baselines, canonical.
pub fn baseline_index(devices: Vec<DeviceClassRecord>, mut baselines: Vec<BaselineRecord>) -> Index {
    canonical(&mut baselines);
    let mut problems: Vec<Problem> = baselines.iter().map(|b| b.problem).collect();
    problems.sort();
    problems.dedup();
    let mut device_classes = devices;
    device_classes.sort();
    device_classes.dedup();
    Index { format: bundle::FORMAT.into(), device_classes, problems, artifacts: vec![], entries: vec![], baselines, tunes: vec![] }
}

/// Merges the baselines of several bundles (a grid run in shards) into one index.
pub fn merge_bundles(dirs: &[PathBuf]) -> anyhow::Result<Index> {
    let mut devices = Vec::new();
    let mut baselines = Vec::new();
    for d in dirs {
        let (index, _) = bundle::read_bundle(d).with_context(|| format!("reading {}", d.display()))?;
        devices.extend(index.device_classes);
        baselines.extend(index.baselines);
    }
    // Where two bundles time the same thing, the later measurement wins.
    let mut latest: BTreeMap<(Problem, crate::problem::DeviceClass, String, String, String), BaselineRecord> = BTreeMap::new();
    for b in baselines {
        let key = (b.problem, b.device_class.clone(), b.library.clone(), b.layout.clone(), b.mode.clone());
        if latest.get(&key).is_none_or(|old| old.measured_at <= b.measured_at) {
            latest.insert(key, b);
        }
    }
    Ok(baseline_index(devices, latest.into_values().collect()))
}

fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The CLI command. Blocking GPU work: call it off the async executor; `rt` runs the
/// autotune cache's queries.
pub fn run_cli(args: BaselinesArgs, rt: tokio::runtime::Handle) -> anyhow::Result<()> {
    if !args.merge.is_empty() {
        let index = merge_bundles(&args.merge)?;
        bundle::write_bundle(&args.out, &index, &BTreeMap::new())?;
        eprintln!("baselines: merged {} records of {} problems into {}", index.baselines.len(), index.problems.len(), args.out.display());
        return Ok(());
    }
    let modes = parse_modes(&args.modes)?;
    let mut shapes = if args.grid { grid_shapes() } else { args.problems.clone() };
    if shapes.is_empty() {
        bail!("nothing to time: give --grid or --problem MxNxK");
    }
    if let Some(s) = &args.shard {
        let (i, n) = parse_shard(s)?;
        shapes = shapes.into_iter().enumerate().filter(|(j, _)| j % n == i).map(|(_, s)| s).collect();
    }
    crate::gpu::available().map_err(|e| anyhow::anyhow!("no GPU: {e}"))?;
    let gpu = Gpu::open(0)?;
    let facts = gpu.facts().clone();
    let cache = match &args.autotune_cache {
        Some(url) => {
            let db = rt.block_on(crate::db::connect(&crate::db::DbConfig::new(url))).context("opening the autotune cache")?;
            Some((rt.clone(), db))
        }
        None => None,
    };
    let setup = Setup {
        gpu: &gpu,
        arch: arch_of(facts.compute_capability)?,
        facts: facts.clone(),
        acc: args.acc,
        sets: args.sets.clamp(1, 16),
        seed: args.seed,
        autotune_max: args.autotune_max.clamp(1, 1024),
        modes,
        cache,
    };
    eprintln!(
        "baselines: {} ({}), driver {}, CUDA {}, cuBLAS {}; {} shapes, acc {}, modes {:?}",
        facts.name,
        facts.device_class,
        facts.driver_version.as_deref().unwrap_or("?"),
        facts.cuda_driver_api_version,
        facts.cublas_version,
        shapes.len(),
        args.acc,
        setup.modes
    );
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let pool_elems = shapes.iter().map(|s| (s.m as usize * s.k as usize).max(s.k as usize * s.n as usize)).max().unwrap_or(1);
    let pool = Pool::new(&gpu, pool_elems + 4_000_037, args.seed)?;
    if args.calibrate {
        return calibrate(&setup, &pool, &shapes, &args);
    }
    if args.agreement {
        return agreement(&setup, &pool, &shapes, &args);
    }

    let started = Instant::now();
    let total = args.total_budget_s.map(Duration::from_secs);
    let per_shape_max = Duration::from_millis(args.budget_ms);
    let costs: Vec<f64> = shapes.iter().map(expected_cost_s).collect();
    let mut records = Vec::new();
    let mut runs = Vec::new();
    let device_start = DeviceState::read(facts.ordinal);
    for (i, shape) in shapes.iter().enumerate() {
        let budget = match total {
            Some(t) => share(t.saturating_sub(started.elapsed()), costs[i], costs[i..].iter().sum()).min(per_shape_max),
            None => per_shape_max,
        };
        let run = setup.run_shape(&pool, *shape, i, budget, &mut records);
        eprintln!("[{}/{}] {}", i + 1, shapes.len(), progress_line(&run, started.elapsed()));
        runs.push(run);
    }
    let index = baseline_index(vec![device_record(&facts)], records);
    bundle::write_bundle(&args.out, &index, &BTreeMap::new())?;
    let failed = runs.iter().filter(|r| r.error.is_some()).count();
    write_json(
        &args.out.join("run.json"),
        &serde_json::json!({
            "device": facts,
            "device_start": device_start,
            "device_end": DeviceState::read(facts.ordinal),
            "elapsed_s": started.elapsed().as_secs_f64(),
            "shapes": runs,
        }),
    )?;
    eprintln!(
        "baselines: {} records for {} problems in {:.1} s ({} shapes failed) → {}",
        index.baselines.len(),
        index.problems.len(),
        started.elapsed().as_secs_f64(),
        failed,
        args.out.display()
    );
    Ok(())
}

fn median_of(report: &BenchReport, slot: usize, mode: Mode) -> Option<f64> {
    report.contenders.get(slot)?.timings.get(&mode).map(|t| t.median_us)
}

fn progress_line(run: &ShapeRun, elapsed: Duration) -> String {
    let Some(report) = &run.report else {
        return format!("{} FAILED: {}", run.shape, run.error.as_deref().unwrap_or("?"));
    };
    let best = |lib: usize| -> f64 {
        [2 * lib, 2 * lib + 1].iter().filter_map(|&s| median_of(report, s, Mode::Graph)).fold(f64::INFINITY, f64::min)
    };
    let tuned: Vec<String> = run.autotune.iter().map(|(l, a)| format!("{l} #{} of {}/{}", a.heuristic_rank, a.timed, a.offered)).collect();
    format!(
        "{} graph max µs: cublas {:.2} heur {:.2} auto {:.2} | {} rounds{} | setup {} + autotune {} + bench {} ms of {} | autotune {}{} | t={:.0}s",
        run.shape,
        best(0),
        best(1),
        best(2),
        report.rounds,
        if report.converged { "" } else { " NOT converged" },
        run.setup_ms,
        run.autotune_ms,
        run.bench_ms,
        run.budget_ms,
        tuned.join(", "),
        if run.autotune_reproduced { "" } else { " NOT REPRODUCED" },
        elapsed.as_secs_f64()
    )
}

fn as_dyn<C: Contender>(v: &[C]) -> Vec<&dyn Contender> {
    v.iter().map(|c| c as &dyn Contender).collect()
}

/// One row of the null test.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationRow {
    pub shape: String,
    pub pair: String,
    pub mode: String,
    /// First entry's median / second entry's median.
    pub ratio: f64,
    pub rounds: usize,
    pub converged: bool,
    pub bench_ms: u64,
}

/// The null test: per shape, cuBLAS (TN) and cuBLASLt top-1 (TN) each entered twice as
/// separate contenders; every pair must tie within ±target. Then the harness's own
/// speed: the full six-contender run (autotune included) per shape, timed.
/// One shape of the agreement check.
#[derive(Debug, Clone, Serialize)]
struct AgreementRow {
    shape: String,
    offered: usize,
    buffer_sets: usize,
    /// The autotune choice's median over the exhaustive best's, both from the same
    /// side-by-side run (1.0: the choice is the best).
    ratio: f64,
    choice_rank: usize,
    rounds: usize,
    converged: bool,
}

/// See [`BaselinesArgs::agreement`]. The choice is made as the benchmark makes it (on one
/// buffer set, [`autotune::autotune`]); the exhaustive run times every offered algorithm
/// over an L2-cold rotation, each sample walking all of it, and ranks them by median.
fn agreement(setup: &Setup, pool: &Pool, shapes: &[Shape], args: &BaselinesArgs) -> anyhow::Result<()> {
    let gpu = setup.gpu;
    let mut rows = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let p = setup.problem(Layout::Tn, *shape);
        let sets = crate::harness::bench::cold_sets(&p, 0, setup.facts.l2_cache_bytes, setup.facts.total_memory_bytes, 3);
        let ops = operand_sets(gpu, pool, &p, sets, 11 * i)?;
        let (chosen, _) = autotune::autotune(gpu, &ops[0], &AutotuneOptions { max_candidates: setup.autotune_max, ..AutotuneOptions::default() })?;
        let chosen_words = chosen.algo_words();
        let algos = LtGemm::heuristics(gpu, &ops[0], setup.autotune_max)?;
        let bound: Vec<Vec<LtGemm>> = algos.iter().map(|a| ops.iter().map(|o| a.with_operands(o)).collect::<Result<Vec<_>, _>>()).collect::<Result<_, _>>()?;
        let contenders: Vec<Vec<&dyn Contender>> = bound.iter().map(|b| as_dyn(b)).collect();
        let cfg = BenchConfig {
            modes: vec![Mode::Graph],
            budget: Duration::from_millis(args.budget_ms),
            seed: args.seed ^ i as u64,
            min_launches: u32::try_from(sets).unwrap_or(u32::MAX),
            min_rounds: 5,
            ..BenchConfig::default()
        };
        let report = runner::benchmark(gpu, &contenders, shape.flops(), &cfg)?;
        let medians: Vec<f64> = (0..algos.len()).map(|c| median_of(&report, c, Mode::Graph).unwrap_or(f64::INFINITY)).collect();
        let best = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let Some(choice) = algos.iter().position(|a| a.algo_words() == chosen_words) else {
            eprintln!("AGREEMENT {shape}: the choice is not among the algorithms offered again; skipped");
            continue;
        };
        let rank = 1 + medians.iter().filter(|m| **m < medians[choice]).count();
        let row = AgreementRow { shape: shape.to_string(), offered: algos.len(), buffer_sets: sets, ratio: medians[choice] / best, choice_rank: rank, rounds: report.rounds, converged: report.converged };
        println!(
            "AGREEMENT {:<18} offered {:>3} sets {:>5} choice/best {:.4} rank {:>3} rounds {:>3} {}",
            row.shape,
            row.offered,
            row.buffer_sets,
            row.ratio,
            row.choice_rank,
            row.rounds,
            if row.converged { "converged" } else { "NOT converged" }
        );
        rows.push(row);
    }
    let mut ratios: Vec<f64> = rows.iter().map(|r| r.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios.get(((ratios.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    println!("AGREEMENT {} shapes: choice/best median {:.4}, p90 {:.4}, worst {:.4}", rows.len(), at(0.5), at(0.9), at(1.0));
    write_json(&args.out.join("agreement.json"), &serde_json::json!({ "device": setup.facts, "rows": rows }))?;
    Ok(())
}

fn calibrate(setup: &Setup, pool: &Pool, shapes: &[Shape], args: &BaselinesArgs) -> anyhow::Result<()> {
    let gpu = setup.gpu;
    let mut rows = Vec::new();
    let mut speed = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let p = setup.problem(Layout::Tn, *shape);
        let ops = operand_sets(gpu, pool, &p, setup.sets, 7 * i)?;
        let blas_a: Vec<CublasGemm> = ops.iter().map(|o| CublasGemm::new(gpu, o)).collect::<Result<_, _>>()?;
        let blas_b: Vec<CublasGemm> = ops.iter().map(|o| CublasGemm::new(gpu, o)).collect::<Result<_, _>>()?;
        let top1 = LtGemm::top1(gpu, &ops[0])?;
        let lt_a: Vec<LtGemm> = ops.iter().map(|o| top1.with_operands(o)).collect::<Result<_, _>>()?;
        let lt_b: Vec<LtGemm> = ops.iter().map(|o| top1.with_operands(o)).collect::<Result<_, _>>()?;
        let sets = vec![as_dyn(&blas_a), as_dyn(&blas_b), as_dyn(&lt_a), as_dyn(&lt_b)];
        let cfg = BenchConfig {
            modes: setup.modes.clone(),
            budget: Duration::from_millis(args.budget_ms),
            seed: args.seed ^ i as u64,
            ..BenchConfig::default()
        };
        let t = Instant::now();
        let report = runner::benchmark(gpu, &sets, shape.flops(), &cfg)?;
        let bench_ms = t.elapsed().as_millis() as u64;
        for (pair, a, b) in [("cublas_tn twice", 0, 1), ("cublaslt_heuristic_tn twice", 2, 3)] {
            for mode in &setup.modes {
                if let (Some(x), Some(y)) = (median_of(&report, a, *mode), median_of(&report, b, *mode)) {
                    let row = CalibrationRow {
                        shape: shape.to_string(),
                        pair: pair.into(),
                        mode: mode.as_str().into(),
                        ratio: x / y,
                        rounds: report.rounds,
                        converged: report.converged,
                        bench_ms,
                    };
                    println!(
                        "CALIBRATION {:<18} {:<28} {:<8} ratio {:.4} ({:+.2}%) rounds {} {} {} ms",
                        row.shape,
                        row.pair,
                        row.mode,
                        row.ratio,
                        (row.ratio - 1.0) * 100.0,
                        row.rounds,
                        if row.converged { "converged" } else { "NOT converged" },
                        row.bench_ms
                    );
                    rows.push(row);
                }
            }
        }
        // Harness speed: the full run of six contenders, autotune included.
        let mut records = Vec::new();
        let run = setup.run_shape(pool, *shape, 1000 + i, Duration::from_millis(args.budget_ms), &mut records);
        println!(
            "HARNESS {:<18} flops 2^{:.1} total {} ms (setup {}, autotune {}, bench {}) {}",
            shape.to_string(),
            shape.flops().log2(),
            run.setup_ms + run.autotune_ms + run.bench_ms,
            run.setup_ms,
            run.autotune_ms,
            run.bench_ms,
            progress_line(&run, Duration::ZERO)
        );
        speed.push(run);
    }
    write_json(&args.out.join("calibration.json"), &serde_json::json!({ "device": setup.facts, "null_test": rows, "harness": speed }))?;
    let worst = rows.iter().map(|r| (r.ratio - 1.0).abs()).fold(0.0, f64::max);
    println!("CALIBRATION worst |ratio − 1| = {:.3}% over {} pairs", worst * 100.0, rows.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;


    #[test]
    fn shards_split_the_grid_without_overlap() {
        assert_eq!(parse_shard("1/2").expect("valid"), (1, 2));
        for bad in ["2/2", "1", "a/b", "0/0", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn budgets_are_shared_by_expected_cost_and_use_what_is_left() {
        let total = Duration::from_secs(100);
        let costs = [1.0, 3.0];
        let first = share(total, costs[0], costs.iter().sum());
        assert_eq!(first, Duration::from_secs(25));
        // The last shape gets everything that is left.
        assert_eq!(share(Duration::from_secs(60), costs[1], costs[1]), Duration::from_secs(60));
        assert!(expected_cost_s(&Shape { m: 16384, n: 16384, k: 16384 }) > 4.0 * expected_cost_s(&Shape { m: 64, n: 64, k: 64 }));
    }

    #[test]
    fn modes_parse_and_unknown_ones_are_named() {
        assert_eq!(parse_modes(&["graph".into(), "offline".into(), "graph".into()]).expect("valid"), vec![Mode::Graph, Mode::Offline]);
        let err = parse_modes(&["fast".into()]).expect_err("unknown").to_string();
        assert!(err.contains("fast"), "{err}");
        assert!(parse_modes(&[]).is_err());
    }

    #[test]
    fn hopper_files_under_sm_90() {
        assert_eq!(arch_of((9, 0)).expect("known"), Arch::Sm90);
        assert_eq!(arch_of((8, 0)).expect("known"), Arch::Sm80);
        assert!(arch_of((7, 5)).is_err());
    }

    fn timing(median: f64) -> Timing {
        Timing::from_samples(&[median; 8], 1e9).expect("valid")
    }

    #[test]
    fn a_baseline_index_is_canonical_and_readable_as_a_bundle() {
        let facts_dev = DeviceClassRecord { name: "H100-SXM".into(), model: "NVIDIA H100 80GB HBM3".into(), compute_capability: "9.0".into(), sm_count: Some(132) };
        let shape = Shape { m: 128, n: 64, k: 256 };
        let now = Utc::now();
        let mut records = Vec::new();
        for (lib, layout) in SLOTS.iter().rev() {
            for filed in Layout::ALL {
                records.push(BaselineRecord {
                    device_class: "H100-SXM".into(),
                    problem: Problem::new(Arch::Sm90, Acc::F32, filed, shape),
                    library: lib.as_str().into(),
                    layout: layout.as_str().into(),
                    mode: "graph".into(),
                    median_us: 3.0,
                    timing: serde_json::to_value(timing(3.0)).expect("json"),
                    config: serde_json::json!({"api": "x"}),
                    measured_at: now,
                });
            }
        }
        let index = baseline_index(vec![facts_dev.clone(), facts_dev], records);
        assert_eq!(index.device_classes.len(), 1);
        assert_eq!(index.problems.len(), 2);
        assert_eq!(index.baselines.len(), 12);
        assert_eq!(index.baselines[0].library, "cublas");
        assert_eq!(index.baselines[0].layout, "nn");
        let dir = tempfile::tempdir().expect("tempdir");
        bundle::write_bundle(dir.path(), &index, &BTreeMap::new()).expect("write");
        let (back, ptx) = bundle::read_bundle(dir.path()).expect("a valid bundle");
        assert!(ptx.is_empty());
        assert_eq!(back, index);
        let merged = merge_bundles(&[dir.path().to_path_buf(), dir.path().to_path_buf()]).expect("merge");
        assert_eq!(merged, index, "merging a bundle with itself changes nothing");
    }
}
