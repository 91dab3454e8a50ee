//! `kaas tune`: the command around the tuner's search (`crate::tuner`). It reads the
//! problems asked for, loads or compiles every candidate code, runs the search problem by
//! problem against a resumable state file, and can submit the winners to a server; or it
//! compiles the codes for another machine (`--emit-ptx`), prints the search-efficiency
//! report (`--report`), or prints a code's template defines (`--defines`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

use crate::gpu::Gpu;
use crate::problem::{Acc, Arch, Layout, Problem, Shape};
use crate::tuner::search::UcbSettings;
use crate::tuner::{
    Candidate, Family, Modules, REPORT_SM_COUNT, Scope, Timing, Trial, TuneState, autotuned_algos, catalog_twins, codes_with, efficiency_report, kinds_report,
    missing_codes, order_seed, priors_for, ptx_for, retime_note, space_with, submission_groups, summary, tune_one,
};

#[derive(Debug, Clone, clap::Args)]
pub struct TuneArgs {
    /// Shapes: `grid` (the 1,000 shapes M, N, K ∈ {64 … 16384}), or MxNxK, comma-separated;
    /// `tn:MxNxK` or `nn:MxNxK` takes a shape in that layout only (where --layouts has it).
    #[arg(long, default_value = "grid")]
    pub problems: String,
    /// Only the shapes of at least 2^X FLOP (2·M·N·K), e.g. 30 for the mid buckets.
    #[arg(long, value_name = "X")]
    pub min_flops_log2: Option<f64>,
    /// Only the shapes of fewer than 2^X FLOP, e.g. 40 to leave out the largest.
    #[arg(long, value_name = "X")]
    pub max_flops_log2: Option<f64>,
    /// Layouts to tune, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "tn,nn")]
    pub layouts: Vec<String>,
    #[arg(long, default_value = "f32")]
    pub acc: String,
    /// The arch the catalog files them under (the Hopper family's code is sm_90a; the mma
    /// family is compiled for this arch).
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
    /// Template families to search, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "hopper,mma")]
    pub families: Vec<Family>,
    /// Search only the candidates whose entry name contains this text (e.g. `_pp`, the
    /// ping-pong codes), or one of these, comma-separated (`_nn_64x8x,_nn_64x16x`), to try
    /// a new part of the space on problems already tuned.
    #[arg(long)]
    pub only: Option<String>,
    /// Add codes the search leaves out, comma-separated (e.g. `ksplit`), to time them
    /// beside it; `--emit-ptx` compiles them too.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub trial: Vec<Trial>,
    /// Search state: results so far; problems already in it are skipped.
    #[arg(long, default_value = "tune-state.json")]
    pub state: PathBuf,
    /// PTX compiled beforehand (see --emit-ptx), one `<entry>.ptx` per configuration;
    /// configurations missing there are compiled with NVRTC.
    #[arg(long)]
    pub ptx_dir: Option<PathBuf>,
    /// Compile every configuration into this directory and exit (no GPU needed); with
    /// `--only`, those whose entry contains its text.
    #[arg(long)]
    pub emit_ptx: Option<PathBuf>,
    /// Also time every candidate three times on every n-th problem, for the search-efficiency study (0: never);
    /// such a problem's medians join the bandit's means in choosing the finalists.
    #[arg(long, default_value_t = 0)]
    pub exhaustive_every: usize,
    /// Most pulls of the bandit per problem.
    #[arg(long, default_value_t = 96)]
    pub max_pulls: usize,
    /// Pulls without a gain after which the bandit stops (once no untried arm's prior could
    /// beat its best); `--report` replays a live run with it, so a state with exhaustive
    /// samples shows what another value would have found.
    #[arg(long, default_value_t = UcbSettings::default().patience)]
    pub patience: usize,
    /// Tune at most this many problems in this run.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Stop starting new problems after this many seconds.
    #[arg(long)]
    pub time_limit_secs: Option<u64>,
    /// Submit the winners to this kaas server (with --token / KAAS_TOKEN) after tuning.
    #[arg(long)]
    pub submit: Option<String>,
    #[arg(long, env = "KAAS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Only winners at least this fast relative to cuBLASLt's heuristic choice are submitted.
    #[arg(long, default_value_t = 0.97)]
    pub submit_threshold: f64,
    /// Submit at most this many winners, the fastest relative to cuBLASLt first.
    #[arg(long)]
    pub submit_limit: Option<usize>,
    /// Print the search-efficiency report from the state file and exit.
    #[arg(long)]
    pub report: bool,
    /// Time against cuBLASLt's autotuned algorithm from this catalog bundle's baseline table
    /// (e.g. `kernels/h100`; the call of the problem's own layout, re-created from its
    /// recorded configuration) in place of its heuristic choice: for side-by-side checks
    /// and `device-run.sh profile` of that algorithm. Rewards then read × autotune, so such
    /// a state is not one to submit from or to mix with others.
    #[arg(long, value_name = "BUNDLE_DIR", conflicts_with = "submit")]
    pub reference_bundle: Option<PathBuf>,
    /// Instead of searching, time each problem's entry in this catalog bundle (its served
    /// Hopper code, launched as its manifest launches it) beside the same code in the
    /// latency modes: the tile's origin computed before the K loop (`_ec`, which the search
    /// builds into every code) and, for one unsplit tile per CTA without a cluster, the 2-D
    /// grid (`_2d`) and the grouped one (`_2g`): each three times, side by side, the fastest
    /// the winner. Problems whose entry is another family's or has no twin left are left
    /// out. With `--emit-ptx`, compiles the entries and their twins.
    #[arg(long, value_name = "BUNDLE_DIR")]
    pub twins_of: Option<PathBuf>,
    /// With `--emit-ptx`: compile the code of every entry of these catalog bundles
    /// (comma-separated; any family the tuner writes) instead of a search space, and
    /// report which rebuild their shipped artifact byte for byte (`rebuild.tsv`): the
    /// catalog's PTX is immutable, and this says which template revision it comes from.
    #[arg(long, value_name = "BUNDLE_DIR", value_delimiter = ',', requires = "emit_ptx")]
    pub entries_of: Vec<PathBuf>,
    /// Print the template's defines for these entry names (comma-separated; Hopper, mma or
    /// gemv), one line of `-DNAME=VALUE` flags each, and exit: the hopper-probe harness
    /// builds its kernels from them, so the name grammar lives in one table ([`crate::tuner::hopper::AXES`]).
    #[arg(long, value_name = "ENTRIES")]
    pub defines: Option<String>,
}

impl TuneArgs {
    /// The codes this run searches: `--families`, `--trial` and `--only`.
    fn scope(&self) -> Scope {
        Scope { families: self.families.clone(), trials: self.trial.clone(), only: self.only.clone() }
    }

    /// Whether `--only` lets this entry into the search.
    fn admits(&self, entry: &str) -> bool {
        crate::tuner::only_admits(self.only.as_deref(), entry)
    }

    /// The bandit's settings of a live run (and of `--report`'s replay of one).
    fn ucb(&self) -> UcbSettings {
        UcbSettings { max_pulls: self.max_pulls, patience: self.patience, ..Default::default() }
    }
}


fn parse_problems(args: &TuneArgs) -> anyhow::Result<Vec<Problem>> {
    let arch: Arch = args.arch.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let acc: Acc = args.acc.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    // Each shape with the one layout it is limited to (`tn:…`), or None: every layout.
    let shapes: Vec<(Option<Layout>, Shape)> = if args.problems == "grid" {
        crate::harness::baselines::grid_shapes().into_iter().map(|s| (None, s)).collect()
    } else {
        args.problems.split(',').map(|item| parse_problem_item(item.trim())).collect::<anyhow::Result<_>>()?
    };
    let in_range = |s: &Shape| {
        let f = s.flops().log2();
        args.min_flops_log2.is_none_or(|lo| f >= lo) && args.max_flops_log2.is_none_or(|hi| f < hi)
    };
    let shapes: Vec<(Option<Layout>, Shape)> = shapes.into_iter().filter(|(_, s)| in_range(s)).collect();
    if shapes.is_empty() {
        bail!("no shape of --problems {} lies within the FLOP range asked for", args.problems);
    }
    let mut out = Vec::new();
    for l in &args.layouts {
        let layout: Layout = l.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        out.extend(shapes.iter().filter(|(only, _)| only.is_none_or(|o| o == layout)).map(|&(_, s)| Problem::new(arch, acc, layout, s)));
    }
    if out.is_empty() {
        bail!("no shape of --problems is in a layout of --layouts {}", args.layouts.join(","));
    }
    // Small to large, so that neighbours are tuned before the shapes they seed.
    out.sort_by(|a, b| a.shape().flops().total_cmp(&b.shape().flops()).then(a.cmp(b)));
    Ok(out)
}

/// One `--problems` item: `MxNxK` (every layout), or `tn:MxNxK` / `nn:MxNxK` (that one).
fn parse_problem_item(item: &str) -> anyhow::Result<(Option<Layout>, Shape)> {
    let (layout, shape) = match item.split_once(':') {
        Some((l, s)) => (Some(l.parse::<Layout>().map_err(|e| anyhow::anyhow!("--problems item {item}: {e}"))?), s),
        None => (None, item),
    };
    Ok((layout, shape.parse::<Shape>().map_err(|e| anyhow::anyhow!("--problems item {item}: {e}"))?))
}

/// `-DNAME=VALUE` flags of each entry name in `entries` (comma-separated): the defines
/// the tuner compiles that entry with, whichever family's it is.
fn define_flags(entries: &str) -> anyhow::Result<Vec<String>> {
    entries
        .split(',')
        .map(|e| {
            let e = e.trim();
            let Some((cfg, acc, layout)) = Candidate::from_entry(e) else {
                bail!("`{e}` is not an entry name the tuner writes (kaas_wgmma_<acc>_<layout>_<BM>x<BN>x<BK>_s<S>_c<C>_m<M>_g16 and the suffixes of tuner::hopper::AXES in that order, kaas_mma_…, kaas_gemv_…)")
            };
            Ok(cfg.defines(acc, layout).into_iter().map(|(k, v)| format!("-D{k}={v}")).collect::<Vec<_>>().join(" "))
        })
        .collect()
}


/// `--emit-ptx DIR`: every configuration for the acc and layouts asked (with `--only`, each
/// whose entry contains its text), as `<entry>.ptx`.
fn emit_ptx(args: &TuneArgs, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    if !args.entries_of.is_empty() {
        return rebuild_entries(&args.entries_of, dir);
    }
    let acc: Acc = args.acc.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let arch: Arch = args.arch.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut done = std::collections::BTreeSet::new();
    let mut emitted = Vec::new();
    let twins = args.twins_of.as_deref().map(catalog_twins).transpose()?;
    for l in &args.layouts {
        let layout: Layout = l.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let candidates = match &twins {
            Some(t) => t.values().filter(|(p, _)| p.layout == layout && p.acc == acc).flat_map(|(_, pair)| pair.iter().copied()).collect(),
            None => codes_with(&args.families, &args.trial, arch, acc, layout),
        };
        for c in candidates {
            let entry = c.entry(acc, layout);
            if !args.admits(&entry) || !done.insert(entry.clone()) {
                continue;
            }
            let t = Instant::now();
            let ptx = c.compile(arch, acc, layout).with_context(|| format!("compiling {entry}"))?;
            std::fs::write(dir.join(format!("{entry}.ptx")), &ptx)?;
            eprintln!("{entry}: {} bytes in {:.0} ms", ptx.len(), t.elapsed().as_secs_f64() * 1e3);
            let target = match c {
                Candidate::Hopper(_) => Arch::Sm90a,
                Candidate::Mma(_) | Candidate::Gemv(_) => arch,
            };
            emitted.push(Emitted { entry, target, ptx });
        }
    }
    std::fs::write(dir.join(crate::tuner::TEMPLATES_STAMP), crate::tuner::templates_digest() + "\n")?;
    println!("{} PTX files in {}", done.len(), dir.display());
    match crate::ptx::ptxas::locate() {
        Ok(ptxas) => assemble_emitted(&ptxas, dir, &emitted),
        Err(why) => {
            println!("registers and spills not checked: {why}");
            Ok(())
        }
    }
}

/// `--emit-ptx DIR --entries-of BUNDLE,…`: each distinct (entry, artifact) of the bundles
/// whose entry name the tuner writes, compiled from this binary's templates into DIR, and
/// compared with the artifact: `rebuild.tsv` lists every artifact and whether its bytes
/// came back. Entries of names no family parses (a submitter's own kernels) are counted
/// apart.
fn rebuild_entries(bundles: &[PathBuf], dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut artifacts: std::collections::BTreeMap<(String, String), Problem> = std::collections::BTreeMap::new();
    let mut foreign = 0usize;
    for b in bundles {
        let (index, _) = crate::catalog::bundle::read_bundle(b).with_context(|| format!("reading the bundle {}", b.display()))?;
        for e in &index.entries {
            let [launch] = &e.manifest.launches[..] else {
                foreign += 1;
                continue;
            };
            if Candidate::from_entry(&launch.entry).is_none() {
                foreign += 1;
                continue;
            }
            artifacts.entry((launch.entry.clone(), e.artifact.clone())).or_insert(e.problem);
        }
    }
    let mut compiled: HashMap<String, String> = HashMap::new();
    let (mut same, mut table) = (0usize, String::from("entry\tartifact\trebuilt_sha256\tsame\n"));
    for ((entry, artifact), p) in &artifacts {
        if !compiled.contains_key(entry) {
            let (c, acc, layout) = Candidate::from_entry(entry).expect("parsed above");
            let ptx = c.compile(p.arch, acc, layout).with_context(|| format!("compiling {entry}"))?;
            std::fs::write(dir.join(format!("{entry}.ptx")), &ptx)?;
            compiled.insert(entry.clone(), crate::signing::sha256_hex(ptx.as_bytes()));
        }
        let rebuilt = &compiled[entry];
        same += usize::from(rebuilt == artifact);
        table += &format!("{entry}\t{artifact}\t{rebuilt}\t{}\n", rebuilt == artifact);
    }
    std::fs::write(dir.join("rebuild.tsv"), table)?;
    println!(
        "{same} of {} artifacts rebuild byte for byte from these templates ({} codes compiled into {}; rebuild.tsv){}",
        artifacts.len(),
        compiled.len(),
        dir.display(),
        if foreign > 0 { format!("; {foreign} entries are no family's") } else { String::new() }
    );
    Ok(())
}

/// One code `--emit-ptx` wrote, and the target it runs as.
struct Emitted {
    entry: String,
    target: Arch,
    ptx: String,
}

/// Assembles the emitted codes with ptxas (no GPU needed; all cores) and writes each
/// entry's registers, spills and static shared memory to `resources.tsv` beside them: a
/// code ptxas refuses would fail to load on the device, and one that spills is worth
/// knowing before a device call times it. Refused codes fail the run; spills are listed.
fn assemble_emitted(ptxas: &Path, dir: &Path, emitted: &[Emitted]) -> anyhow::Result<()> {
    use crate::ptx::ptxas::{self, FunctionResources};
    let t = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(emitted.len().max(1));
    let mut results: Vec<(usize, Result<FunctionResources, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(e) = emitted.get(i) else { break out };
                        let got = ptxas::run(ptxas, &e.ptx, e.target.as_str(), ptxas::DEFAULT_TIMEOUT)
                            .map_err(|err| err.to_string())
                            .and_then(|report| report.entry(&e.entry).cloned().ok_or_else(|| format!("ptxas reported no entry {}", e.entry)));
                        out.push((i, got));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a ptxas thread panicked")).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut table = String::from("entry\tregisters\tspill_store_bytes\tspill_load_bytes\tstatic_smem_bytes\n");
    let (mut failed, mut spilled, mut registers) = (Vec::new(), Vec::new(), Vec::new());
    for (i, got) in results {
        let entry = &emitted[i].entry;
        match got {
            Ok(f) => {
                table += &format!("{entry}\t{}\t{}\t{}\t{}\n", f.registers, f.spill_store_bytes, f.spill_load_bytes, f.shared_mem_bytes);
                if f.spill_store_bytes + f.spill_load_bytes > 0 {
                    spilled.push(format!("{entry} ({} B stored, {} B loaded)", f.spill_store_bytes, f.spill_load_bytes));
                }
                registers.push(f.registers);
            }
            Err(why) => failed.push(format!("{entry}: {why}")),
        }
    }
    std::fs::write(dir.join("resources.tsv"), table)?;
    let (lo, hi) = (registers.iter().min().copied().unwrap_or(0), registers.iter().max().copied().unwrap_or(0));
    let spills = if spilled.is_empty() { "no spills".to_string() } else { format!("{} spill: {}", spilled.len(), spilled.join(", ")) };
    println!("ptxas: {} of {} codes assembled in {:.1} s on {threads} thread(s), {lo}–{hi} registers; {spills}; resources.tsv", registers.len(), emitted.len(), t.elapsed().as_secs_f64());
    if !failed.is_empty() {
        anyhow::bail!("ptxas refused {} code(s), which would not load on the device:\n{}", failed.len(), failed.join("\n"));
    }
    Ok(())
}


pub fn run_cli(args: TuneArgs) -> anyhow::Result<()> {
    if let Some(entries) = &args.defines {
        for line in define_flags(entries)? {
            println!("{line}");
        }
        return Ok(());
    }
    if let Some(dir) = &args.emit_ptx {
        return emit_ptx(&args, dir);
    }
    if let Some(dir) = &args.ptx_dir {
        crate::tuner::check_ptx_dir(dir)?;
    }
    let mut state = TuneState::load(&args.state)?;
    if args.report {
        // write!, not print!: a reader that closes the pipe early (`| head`) ends the
        // report instead of panicking.
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), "{}{}", efficiency_report(&state, &args.ucb()), kinds_report(&state, REPORT_SM_COUNT));
        return Ok(());
    }
    let problems = parse_problems(&args)?;
    let todo: Vec<Problem> = problems.iter().filter(|p| !state.results.contains_key(&p.path())).copied().take(args.limit.unwrap_or(usize::MAX)).collect();
    eprintln!("{} problem(s), {} already tuned, {} to tune now; families {:?}", problems.len(), problems.len() - problems.iter().filter(|p| !state.results.contains_key(&p.path())).count(), todo.len(), args.families);
    if !todo.is_empty() {
        crate::gpu::available().map_err(|e| anyhow::anyhow!("no GPU: {e}"))?;
        let gpu = Gpu::open(0)?;
        state.device_class = gpu.facts().device_class.clone();
        state.gpu = gpu.facts().name.clone();
        let acc: Acc = args.acc.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let arch: Arch = args.arch.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut modules: Modules = HashMap::new();
        let twins = args.twins_of.as_deref().map(catalog_twins).transpose()?;
        let layouts: std::collections::BTreeSet<Layout> = todo.iter().map(|p| p.layout).collect();
        let t = Instant::now();
        for layout in layouts {
            // With --twins-of, only the twins of the problems to tune.
            let candidates = match &twins {
                Some(tw) => todo.iter().filter(|p| p.layout == layout).filter_map(|p| tw.get(&p.path())).flat_map(|(_, codes)| codes.iter().copied()).collect(),
                None => codes_with(&args.families, &args.trial, arch, acc, layout),
            };
            for c in candidates {
                let key = c.entry(acc, layout);
                if modules.contains_key(&key) || !args.admits(&key) {
                    continue;
                }
                let ptx = ptx_for(args.ptx_dir.as_deref(), &c, arch, acc, layout)?;
                let module = gpu.load_ptx(&ptx).with_context(|| format!("loading {key}"))?;
                modules.insert(key, module);
            }
        }
        eprintln!("{} modules loaded in {:.1} s", modules.len(), t.elapsed().as_secs_f64());
        // A candidate without a module would time as 0 on every problem: refuse to start.
        let missing = if twins.is_some() { Default::default() } else { missing_codes(&todo, &args.scope(), gpu.facts().sm_count, |e| modules.contains_key(e)) };
        if !missing.is_empty() {
            anyhow::bail!("{} candidate code(s) of the search have no module to load (not in tuner::codes): {}", missing.len(), missing.iter().take(5).cloned().collect::<Vec<_>>().join(", "));
        }
        let autotuned = args.reference_bundle.as_deref().map(autotuned_algos).transpose()?;
        let deadline = args.time_limit_secs.map(|s| Instant::now() + std::time::Duration::from_secs(s));
        let settings = args.ucb();
        for (n, p) in todo.iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                eprintln!("time limit reached; {} problem(s) left for the next run", todo.len() - n);
                break;
            }
            let mut space = match &twins {
                Some(tw) => tw.get(&p.path()).map(|(_, codes)| codes.clone()).unwrap_or_default(),
                None => space_with(p, &args.families, &args.trial, gpu.facts().sm_count),
            };
            space.retain(|c| args.admits(&c.entry(p.acc, p.layout)));
            if space.is_empty() {
                eprintln!("[{}/{}] {p}: no candidate of {:?} for this problem", n + 1, todo.len(), args.families);
                continue;
            }
            let priors = priors_for(p, &state, &space);
            // Twins are timed side by side, each three times.
            let exhaustive = twins.is_some() || (args.exhaustive_every > 0 && n % args.exhaustive_every == 0);
            let reference = match &autotuned {
                Some(table) => Some(table.get(&p.path()).with_context(|| format!("{p}: the reference bundle has no cuBLASLt-autotune baseline of this layout"))?),
                None => None,
            };
            match tune_one(&gpu, &modules, p, &space, &priors, UcbSettings { order_seed: Some(order_seed(p)), ..settings.clone() }, Timing { exhaustive, reference }) {
                Ok(r) => {
                    let against = if reference.is_some() { "cuBLASLt-autotune" } else { "cuBLASLt-heuristic" };
                    eprintln!("[{}/{}] {p}: {} {:.3}× {against} ({:.2} µs vs {:.2}), {} pulls, {}, {:.1} s", n + 1, todo.len(), r.winner.label(), r.reward, r.winner_us, r.reference_us, r.pulls, retime_note(&r), r.seconds);
                    state.results.insert(p.path(), r);
                    state.save(&args.state)?;
                }
                Err(e) => eprintln!("[{}/{}] {p}: failed: {e:#}", n + 1, todo.len()),
            }
        }
    }
    print!("{}", summary(&state));
    if let Some(url) = &args.submit {
        submit_winners(&args, &state, url)?;
    }
    Ok(())
}


/// Submits every winner at or above the threshold, one submission per code and
/// configuration ([`submission_groups`]).
fn submit_winners(args: &TuneArgs, state: &TuneState, url: &str) -> anyhow::Result<()> {
    let server = crate::client::Server { url: Some(url.to_string()), token: args.token.clone() };
    let client = crate::client::Client::new(&server);
    let sm = 132;
    let groups = submission_groups(state, args.submit_threshold, args.submit_limit);
    if groups.is_empty() {
        bail!("no winner at or above {} × cuBLASLt-heuristic to submit", args.submit_threshold);
    }
    for ((entry, cfg), problems) in groups {
        let (arch, acc, layout) = (problems[0].arch, problems[0].acc, problems[0].layout);
        let ptx = ptx_for(args.ptx_dir.as_deref(), &cfg, arch, acc, layout)?;
        let manifests: Vec<_> = problems.iter().map(|p| cfg.manifest(p, sm)).collect();
        let (family, source) = cfg.template();
        let req = crate::work::NewSubmission {
            ptx: Some(ptx),
            manifests,
            name: Some(format!("kaas-tuner {entry}")),
            description: Some(format!("{family} ({}), found by `kaas tune` on {}", cfg.label(), state.device_class)),
            source: Some(source.to_string()),
            ..Default::default()
        };
        let (status, v): (u16, crate::work::SubmissionView) = client.post("/v1/submissions", &req)?;
        eprintln!("{entry}: {} problem(s) → submission {} ({status})", problems.len(), v.id);
    }
    Ok(())
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::codes;
    use crate::tuner::hopper::HopperConfig;

    #[test]
    fn define_flags_are_the_tuners_own_and_refuse_other_names() {
        let flags = define_flags("kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_pp_du").unwrap();
        assert_eq!(flags.len(), 1);
        for want in ["-DKAAS_BM=64", "-DKAAS_BN=256", "-DKAAS_BK=64", "-DKAAS_PINGPONG=1", "-DKAAS_DESC_UNIFORM=1", "-DKAAS_LAYOUT_TN=1", "-DKAAS_ENTRY=kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_pp_du"] {
            assert!(flags[0].split(' ').any(|f| f == want), "{want} missing from {}", flags[0]);
        }
        // The same code as the tuner compiles it.
        let (cfg, acc, layout) = HopperConfig::from_entry("kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_pp_du").unwrap();
        assert_eq!(flags[0], cfg.defines(acc, layout).into_iter().map(|(k, v)| format!("-D{k}={v}")).collect::<Vec<_>>().join(" "));
        assert_eq!(define_flags("kaas_wgmma_f32_tn_64x64x64_s4_c1_m1_g16,kaas_wgmma_f16_nn_64x64x64_s4_c1_m1_g16").unwrap().len(), 2);
        // Suffixes out of the table's order, or unknown ones, are not names the tuner writes.
        assert!(define_flags("kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_du_pp").is_err());
        assert!(define_flags("kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_zz").is_err());
        // The other families' names too.
        let gemv = define_flags("kaas_gemv_f32_tn_m4_r2_w4_u8").unwrap();
        assert_eq!(gemv, ["-DKAAS_MT=4 -DKAAS_ROWS=2 -DKAAS_KWARPS=4 -DKAAS_UNROLL=8 -DKAAS_ENTRY=kaas_gemv_f32_tn_m4_r2_w4_u8"]);
        let mma = crate::tuner::mma::space()[0].entry(Acc::F16, Layout::Nn);
        assert!(define_flags(&mma).unwrap()[0].contains(&format!("-DKAAS_ENTRY={mma}")));
        assert!(define_flags("kaas_gemv_f32_tn_m3_r2_w4_u8").is_err(), "MT 3 is no code");
    }

    /// `--emit-ptx` assembles what it wrote: resources of each code in `resources.tsv`,
    /// and a run that fails naming the code ptxas refuses.
    #[test]
    fn emitted_codes_are_assembled_and_a_refused_one_fails_the_run() {
        let ptxas = match crate::ptx::ptxas::locate() {
            Ok(p) => p,
            Err(why) => return eprintln!("SKIP: {why}"),
        };
        if let Err(why) = crate::gpu::nvrtc::available() {
            return eprintln!("SKIP: no NVRTC ({why})");
        }
        let c = Candidate::Hopper(HopperConfig::new(64, 16, 4, 1));
        let entry = c.entry(Acc::F32, Layout::Tn);
        let ptx = c.compile(Arch::Sm90, Acc::F32, Layout::Tn).unwrap();
        let good = Emitted { entry: entry.clone(), target: Arch::Sm90a, ptx: ptx.clone() };
        let dir = tempfile::tempdir().unwrap();
        assemble_emitted(&ptxas, dir.path(), std::slice::from_ref(&good)).unwrap();
        let table = std::fs::read_to_string(dir.path().join("resources.tsv")).unwrap();
        let row: Vec<&str> = table.lines().nth(1).unwrap().split('\t').collect();
        assert_eq!(row[0], entry);
        assert!(row[1].parse::<u32>().unwrap() > 0, "{table}");
        assert_eq!(&row[2..4], ["0", "0"], "the 64x16 tile does not spill");
        let broken = Emitted { entry: "kaas_broken".into(), target: Arch::Sm90a, ptx: ptx.replace(&format!(".entry {entry}"), ".entry kaas_broken").replacen("ret;", "bogus.op;", 1) };
        let err = assemble_emitted(&ptxas, dir.path(), &[good, broken]).unwrap_err().to_string();
        assert!(err.contains("refused 1 code") && err.contains("kaas_broken"), "{err}");
    }

    /// `--entries-of` compiles each entry's code and says whether its artifact's bytes came
    /// back: an entry whose artifact this template built does, one whose artifact is another
    /// code's PTX does not (as a catalog built by an older template would read).
    #[test]
    fn entries_of_a_bundle_rebuild_or_say_they_do_not() {
        if let Err(why) = crate::gpu::nvrtc::available() {
            return eprintln!("SKIP: no NVRTC ({why})");
        }
        use crate::catalog::bundle::{describe_ptx, read_bundle, write_bundle};
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/h100");
        let (index, _) = read_bundle(&shipped).unwrap();
        let hopper: Vec<_> = index.entries.iter().filter(|e| e.manifest.launches[0].entry.starts_with("kaas_wgmma_f32_tn_")).collect();
        let first = hopper[0];
        let second = hopper.iter().find(|e| e.manifest.launches[0].entry != first.manifest.launches[0].entry).unwrap();
        let (c, acc, layout) = Candidate::from_entry(&first.manifest.launches[0].entry).unwrap();
        let ptx = c.compile(first.problem.arch, acc, layout).unwrap();
        let art = describe_ptx(ptx.as_bytes()).unwrap();
        let entries = vec![crate::catalog::bundle::EntryRecord { artifact: art.sha256.clone(), ..first.clone() }, crate::catalog::bundle::EntryRecord { artifact: art.sha256.clone(), ..(*second).clone() }];
        let small = crate::catalog::bundle::Index {
            problems: vec![first.problem, second.problem],
            artifacts: vec![art.clone()],
            entries,
            baselines: vec![],
            tunes: vec![],
            ..index.clone()
        };
        let dir = tempfile::tempdir().unwrap();
        write_bundle(&dir.path().join("b"), &small, &[(art.sha256.clone(), ptx)].into_iter().collect()).unwrap();
        rebuild_entries(&[dir.path().join("b")], &dir.path().join("out")).unwrap();
        let table = std::fs::read_to_string(dir.path().join("out/rebuild.tsv")).unwrap();
        let same: Vec<(&str, &str)> = table.lines().skip(1).map(|l| l.split('\t').collect::<Vec<_>>()).map(|r| (r[0], r[3])).collect();
        assert_eq!(same.len(), 2, "{table}");
        assert!(same.contains(&(first.manifest.launches[0].entry.as_str(), "true")), "{table}");
        assert!(same.contains(&(second.manifest.launches[0].entry.as_str(), "false")), "{table}");
    }

    #[test]
    fn the_state_survives_a_round_trip_and_problems_sort_small_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let mut s = TuneState { device_class: "H100-SXM".into(), ..Default::default() };
        s.save(&path).unwrap();
        assert_eq!(TuneState::load(&path).unwrap().device_class, "H100-SXM");
        s.device_class = Default::default();
        assert!(TuneState::load(&dir.path().join("missing.json")).unwrap().results.is_empty());
        let args = TuneArgs {
            problems: "4096x4096x4096,64x64x64".into(),
            min_flops_log2: None,
            max_flops_log2: None,
            layouts: vec!["tn".into(), "nn".into()],
            acc: "f32".into(),
            arch: "sm_90".into(),
            families: vec![Family::Hopper, Family::Mma],
            state: path,
            ptx_dir: None,
            emit_ptx: None,
            only: None,
            trial: vec![],
            exhaustive_every: 0,
            max_pulls: 10,
            patience: 16,
            limit: None,
            time_limit_secs: None,
            submit: None,
            token: None,
            submit_threshold: 0.97,
            submit_limit: None,
            report: false,
            reference_bundle: None,
            twins_of: None,
            entries_of: vec![],
            defines: None,
        };
        let ps = parse_problems(&args).unwrap();
        assert_eq!(ps.len(), 4);
        assert_eq!(ps[0].m, 64);
        assert_eq!(ps[3].m, 4096);
        let grid = parse_problems(&TuneArgs { problems: "grid".into(), ..args.clone() }).unwrap();
        assert_eq!(grid.len(), 2000);
        // The FLOP buckets: 648 shapes of 2^30–2^40 and 48 from 2^40 on, per layout.
        let mid = parse_problems(&TuneArgs { problems: "grid".into(), min_flops_log2: Some(30.0), max_flops_log2: Some(40.0), ..args.clone() }).unwrap();
        assert_eq!(mid.len(), 2 * 648);
        assert!(mid.iter().all(|p| (30.0..40.0).contains(&p.shape().flops().log2())));
        let big = parse_problems(&TuneArgs { problems: "grid".into(), min_flops_log2: Some(40.0), ..args.clone() }).unwrap();
        assert_eq!(big.len(), 2 * 48);
        // The tuner refuses to start while a candidate has no module: here the trial's codes
        // are searched but only the plain codes are loaded.
        let loaded = |args: &TuneArgs| -> std::collections::HashSet<String> {
            Layout::ALL.into_iter().flat_map(|l| codes(&args.families, Arch::Sm90, Acc::F32, l).into_iter().map(move |c| c.entry(Acc::F32, l))).collect()
        };
        let plain = loaded(&args);
        assert!(missing_codes(&ps, &args.scope(), 132, |e| plain.contains(e)).is_empty());
        let trial = TuneArgs { problems: "64x512x1024".into(), trial: vec![Trial::Ksplit], ..args.clone() };
        let skinny = parse_problems(&trial).unwrap();
        let missing = missing_codes(&skinny, &trial.scope(), 132, |e| plain.contains(e));
        // Per layout: 64×128 and 64×64 with two rings each and one pair along N (64 rows:
        // one tile row, so of the pairs only those along N), and the narrow 16 and 32 with
        // two rings each (nn too, now that it has them).
        assert_eq!(missing.len(), 2 * (6 + 4), "every k-split code, tn and nn: {missing:?}");
        assert!(missing.iter().filter(|e| e.contains("_n2_kw")).count() == 4 && !missing.iter().any(|e| e.contains("_m2_")), "{missing:?}");
        assert!(missing.iter().all(|e| e.ends_with("_kw_dr_ec")), "two consumers, each its own chains: in the search's modes");
        assert!(missing_codes(&skinny, &TuneArgs { only: Some("_pp".into()), ..trial.clone() }.scope(), 132, |e| plain.contains(e)).is_empty(), "--only leaves them out");
        // --only with several texts admits an entry that holds any one of them.
        let only = TuneArgs { only: Some("_nn_64x8x,_n2_kw".into()), ..trial.clone() };
        assert!(only.admits("kaas_wgmma_f32_nn_64x8x256_s4_c1_m1_g16_dr_ec") && only.admits("kaas_wgmma_f32_tn_64x64x64_s4_c1_m1_g16_n2_kw_dr_ec"));
        assert!(!only.admits("kaas_wgmma_f32_nn_64x16x256_s4_c1_m1_g16_dr_ec"));
        assert_eq!(missing_codes(&skinny, &only.scope(), 132, |e| plain.contains(e)).len(), 4, "the pairs' k-split codes along N");
        let err = parse_problems(&TuneArgs { min_flops_log2: Some(50.0), ..args.clone() }).unwrap_err().to_string();
        assert!(err.contains("FLOP range"), "{err}");
        // A layout before a shape takes it in that layout only.
        let mixed = parse_problems(&TuneArgs { problems: "tn:64x64x64, nn:128x128x128,256x256x256".into(), ..args.clone() }).unwrap();
        let got: Vec<(Layout, u32)> = mixed.iter().map(|p| (p.layout, p.m)).collect();
        assert_eq!(got, vec![(Layout::Tn, 64), (Layout::Nn, 128), (Layout::Nn, 256), (Layout::Tn, 256)]);
        let tn_only = TuneArgs { problems: "nn:128x128x128".into(), layouts: vec!["tn".into()], ..args.clone() };
        assert!(parse_problems(&tn_only).unwrap_err().to_string().contains("no shape of --problems is in a layout"));
        let err = parse_problems(&TuneArgs { problems: "64x64x64,xn:64x64x64".into(), ..args.clone() }).unwrap_err().to_string();
        assert!(err.contains("--problems item xn:64x64x64"), "{err}");
        let err = parse_problems(&TuneArgs { problems: "tn:64x64".into(), ..args }).unwrap_err().to_string();
        assert!(err.contains("--problems item tn:64x64"), "{err}");
    }
}
