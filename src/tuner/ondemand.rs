//! The tune job's GPU side (`kaas sandbox --tune`): one problem someone asked for,
//! searched within a time budget, then its best candidates verified and benchmarked
//! exactly as a submission's kernel is (`crate::harness`), until one passes.
//!
//! The child reads a [`TuneJob`] as JSON on stdin and writes one [`TuneOutcome`] on
//! stdout; progress goes to stderr as `kaas-progress <stage> <detail>` lines, which the
//! worker turns into the tune's state (`tuning`, `verifying`). Everything here runs in
//! the sandbox process: the candidates are the tuner's own templates, but their PTX is
//! judged like anyone's.
//!
//! The search is the tuner's bandit ([`super::search::Ucb`]) over the candidates of the
//! families that build code for the problem ([`candidates_for`]), seeded with the winners
//! of the nearest catalog problems ([`Seed`], chosen by the worker from the database),
//! timed as the benchmark ranks: CUDA graphs over an L2-cold rotation of buffer sets,
//! against cuBLASLt-autotune-max (the faster of the autotuned NN and TN calls), the bar
//! the kernel must clear to be served — so a reward is a speedup on the same scale as the
//! seeds' and the catalog's. Modules are compiled and loaded when first pulled, so the
//! budget covers compiling too and the search tries as much as fits. Then the best few
//! ([`FINALISTS`]) are re-timed side by side with the reference, and verified in the
//! order of that re-timing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::search::{Ucb, UcbSettings};
use super::{Candidate, Family};
use crate::gpu::{Gpu, LoadedPtx, LtGemm, PreparedManifest};
use crate::harness::{BenchSettings, Job, RunOutcome, bench_candidate, verify_candidate};
use crate::manifest::Manifest;
use crate::problem::Problem;
use crate::verify::Verdict;

/// Candidates verified, best first, before the job gives up on the search's ranking.
pub const VERIFY_AT_MOST: usize = 3;
/// Candidates re-timed side by side after the search, and how close to the best search
/// reward they must be.
pub const FINALISTS: usize = 5;
const FINALIST_WITHIN: f64 = 0.10;
/// Time for that re-timing.
const RETIME_BUDGET: Duration = Duration::from_millis(1500);
/// The prefix of a progress line on the child's stderr.
pub const PROGRESS: &str = "kaas-progress ";

/// What `kaas sandbox --tune` reads on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneJob {
    pub problem: Problem,
    /// Winners of the nearest catalog problems (same arch, acc and layout), nearest first.
    #[serde(default)]
    pub seeds: Vec<Seed>,
    /// Time for the search: compiling, loading and timing candidates.
    pub budget_ms: u64,
    /// Most candidates timed (pulls of the bandit), whatever the budget.
    #[serde(default)]
    pub max_pulls: Option<usize>,
    /// The verification's secret seed (never echoed).
    pub secret_seed: u64,
    #[serde(default)]
    pub watchdog_ms: Option<u64>,
    /// The side-by-side benchmark's settings, as a verify job's `bench`.
    #[serde(default)]
    pub bench: Option<serde_json::Value>,
    /// PTX compiled beforehand, `<entry>.ptx` (the worker's `--tune-ptx-dir`, checked
    /// against this binary's templates when it started); what it lacks is compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx_dir: Option<std::path::PathBuf>,
}

/// A catalog entry near the problem, whose code the search tries first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Seed {
    /// The neighbour's path, `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub problem: String,
    /// Its kernel's entry name (the tuner's entry names name the code).
    pub entry: String,
    /// Its graph-mode speedup over cuBLASLt-autotune-max, where benchmarked.
    pub speedup: Option<f64>,
    /// Octaves between the two shapes, summed over M, N and K.
    pub distance: f64,
}

/// One pull of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Tried {
    /// The code, e.g. `128x256x64 c2 ws`.
    pub code: String,
    pub entry: String,
    /// Its time (µs, graph mode, rotating buffer sets); absent where it failed to compile,
    /// load or run.
    pub us: Option<f64>,
    /// Speedup over the reference timed before the search.
    pub reward: Option<f64>,
    /// Whether a seed named this code.
    pub seeded: bool,
    /// Milliseconds into the search when it was timed.
    pub at_ms: f64,
    /// Why it has no time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A finalist's side-by-side time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Retimed {
    pub code: String,
    pub median_us: f64,
    /// The reference's median over its own in the same run (> 1: faster).
    pub speedup: f64,
}

/// A candidate that went through verification, and how that ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Verified {
    pub code: String,
    pub verdict: Verdict,
    pub message: String,
}

/// What the search did, kept with the tune and shown on the problem's page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Trace {
    /// What rewards are relative to.
    pub reference: String,
    pub reference_us: Option<f64>,
    /// Candidates the families have for this problem.
    pub space: usize,
    pub seeds: Vec<Seed>,
    /// Every pull, in order.
    pub tried: Vec<Tried>,
    /// The finalists re-timed side by side after the search, with the reference: code and
    /// graph median (µs), fastest first; verification follows this order.
    #[serde(default)]
    pub retimed: Vec<Retimed>,
    /// The candidates verified, in order, until one passed.
    pub verified: Vec<Verified>,
    pub budget_ms: u64,
    pub search_ms: f64,
    /// Why the search stopped: `budget`, `converged` or `max_pulls`.
    pub stopped: String,
}

/// The kernel the search picked and verification judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    pub code: String,
    pub entry: String,
    pub ptx: String,
    pub manifest: Manifest,
    /// Its time in the search and its reward there (not what is served: the benchmark is).
    pub search_us: Option<f64>,
    pub search_reward: Option<f64>,
}

/// What `kaas sandbox --tune` writes on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneOutcome {
    /// The last verified candidate's verification and benchmark, as a verify job's outcome;
    /// without a candidate to verify (nothing ran, the child crashed or was killed), the
    /// verdict that says why.
    pub run: RunOutcome,
    /// That candidate; `None` when none was verified.
    #[serde(default)]
    pub winner: Option<Winner>,
    #[serde(default)]
    pub trace: Trace,
}

impl TuneOutcome {
    /// An outcome without a verified candidate.
    pub fn without_winner(run: RunOutcome, trace: Trace) -> TuneOutcome {
        TuneOutcome { run, winner: None, trace }
    }
}

/// The template families that build code for `p`: the Hopper family (wgmma + TMA,
/// sm_90a) on sm_90 problems whose rows are 16-byte aligned (TMA needs N and K to be
/// multiples of 8 halves), the mma.sync family on every arch, and the decode family on
/// tn problems of at most 16 rows of A with fp32 accumulators, on every arch.
pub fn families_for(p: &Problem) -> Vec<Family> {
    let mut out = Vec::new();
    if super::hopper::builds(p) {
        out.push(Family::Hopper);
    }
    out.push(Family::Mma);
    if super::gemv::eligible(p) {
        out.push(Family::Gemv);
    }
    out
}

/// The candidates searched for `p` on a GPU of `sm_count` SMs.
pub fn candidates_for(p: &Problem, sm_count: u32) -> Vec<Candidate> {
    let mut out = super::space_for(p, &families_for(p), sm_count);
    out.retain(|c| c.supports(p.layout) && (!c.split() || p.acc == crate::problem::Acc::F32));
    out
}

/// Why `p` cannot be tuned, if it cannot: no template family builds code for it.
pub fn untunable(p: &Problem, sm_count: u32) -> Option<String> {
    if candidates_for(p, sm_count).is_empty() {
        let fams: Vec<String> = families_for(p).iter().map(|f| format!("{f:?}").to_lowercase()).collect();
        let aligned = if super::hopper::rows_aligned(p) { "" } else { " (N or K is not a multiple of 8, so the TMA family cannot load its rows)" };
        return Some(format!("no template family of the tuner builds code for {p}{aligned}; searched: {}", fams.join(", ")));
    }
    None
}

/// The search's priors from the seeds: every candidate in `space` with a seed's code (one
/// code may run on more than one grid), at the seed's speedup (1.0 where unbenchmarked),
/// weighted by closeness.
pub fn priors(space: &[Candidate], p: &Problem, seeds: &[Seed]) -> Vec<(usize, f64, f64)> {
    let mut index: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, c) in space.iter().enumerate() {
        index.entry(c.entry(p.acc, p.layout)).or_default().push(i);
    }
    seeds
        .iter()
        .flat_map(|s| {
            let prior = (s.speedup.filter(|x| x.is_finite() && *x > 0.0).unwrap_or(1.0), 1.0 / (1.0 + s.distance.max(0.0)));
            index.get(&s.entry).into_iter().flatten().map(move |&i| (i, prior.0, prior.1))
        })
        .collect()
}

/// Runs a tune job on `gpu`; `progress(stage, detail)` is told when the stage changes.
/// Never panics on input; every failure is an outcome.
pub fn run(gpu: &Gpu, job: &TuneJob, progress: &mut dyn FnMut(&str, &str)) -> TuneOutcome {
    let p = job.problem;
    let settings = match job.bench.as_ref().map(|v| serde_json::from_value::<BenchSettings>(v.clone())).transpose() {
        Ok(s) => s,
        Err(e) => return TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, "tune", format!("the job's bench settings are invalid: {e}")), Trace::default()),
    };
    progress("tuning", &format!("searching {p} for {} ms", job.budget_ms));
    let mut trace = Trace { budget_ms: job.budget_ms, seeds: job.seeds.clone(), ..Trace::default() };
    let ranked = match search(gpu, job, &mut trace) {
        Ok(r) => r,
        Err(why) => {
            let mut o = RunOutcome::early(Verdict::InternalError, "search", why);
            o.device = Some(gpu.facts().clone());
            return TuneOutcome::without_winner(o, trace);
        }
    };
    if ranked.is_empty() {
        let errors: Vec<&str> = trace.tried.iter().filter_map(|t| t.error.as_deref()).collect();
        let first = errors.first().map(|e| format!("; the first error: {e}")).unwrap_or_default();
        let mut o = RunOutcome::early(
            Verdict::LaunchFailed,
            "search",
            format!("none of the {} candidates for {p} compiled, loaded and ran ({} pulled, {} failed){first}", trace.space, trace.tried.len(), errors.len()),
        );
        o.device = Some(gpu.facts().clone());
        return TuneOutcome::without_winner(o, trace);
    }
    let sm = gpu.facts().sm_count;
    let mut last: Option<TuneOutcome> = None;
    for (cfg, ptx, us, reward) in ranked.into_iter().take(VERIFY_AT_MOST) {
        let code = cfg.label();
        progress("verifying", &code);
        let manifest = cfg.manifest(&p, sm);
        let vjob = Job { ptx: ptx.clone(), manifest: manifest.clone(), secret_seed: job.secret_seed, watchdog_ms: job.watchdog_ms, bench: job.bench.clone() };
        let mut outcome = verify_candidate(gpu, &vjob);
        if let (Verdict::Pass, Some(s)) = (outcome.verdict, &settings) {
            bench_candidate(gpu, &vjob, s, &mut outcome);
        }
        trace.verified.push(Verified { code: code.clone(), verdict: outcome.verdict, message: outcome.message.clone() });
        let passed = outcome.verdict == Verdict::Pass;
        let lost = outcome.device_lost;
        let winner = Winner { code, entry: cfg.entry(p.acc, p.layout), ptx, manifest, search_us: us, search_reward: reward };
        last = Some(TuneOutcome { run: outcome, winner: Some(winner), trace: trace.clone() });
        // A lost device ends the process: nothing more can run in it.
        if passed || lost {
            break;
        }
    }
    let mut out = last.unwrap_or_else(|| TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, "tune", "nothing verified"), Trace::default()));
    out.trace = trace;
    out
}

/// (candidate, PTX, search time, reward) of every candidate that ran, best first.
type Ranked = Vec<(Candidate, String, Option<f64>, Option<f64>)>;

/// Pulls the search makes even past its budget (see the loop in [`search`]).
const MIN_PULLS: usize = 4;

/// The budgeted search; the candidates that ran, best measured mean first.
fn search(gpu: &Gpu, job: &TuneJob, trace: &mut Trace) -> Result<Ranked, String> {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(job.budget_ms);
    let p = job.problem;
    let sm = gpu.facts().sm_count;
    let space = candidates_for(&p, sm);
    trace.space = space.len();
    if space.is_empty() {
        return Ok(vec![]);
    }
    let priors = priors(&space, &p, &job.seeds);
    let seeded: std::collections::BTreeSet<usize> = priors.iter().map(|(i, _, _)| *i).collect();
    let workspace = space.iter().map(|c| c.workspace_bytes(&p)).max().unwrap_or(0);
    let mut rotation = Rotation::new(gpu, &p, workspace).map_err(|e| format!("operands: {e}"))?;
    let (reference_us, label) = rotation.reference(gpu).map_err(|e| format!("the cuBLASLt-autotune reference: {e}"))?;
    let sets = &rotation.sets;
    trace.reference = label;
    trace.reference_us = Some(reference_us);
    // Every pull is timed paired with this graph of the reference (`time_paired`): its
    // reward is the pairs' ratio, not a time set against the reference timed once here.
    let launches = crate::harness::runner::launches_for(reference_us).max(u32::try_from(sets.len()).unwrap_or(u32::MAX));
    let (reference, _calls) = rotation.reference_timer(gpu, launches).map_err(|e| format!("the cuBLASLt-autotune reference: {e}"))?;
    let mut modules: HashMap<usize, Result<(LoadedPtx, String), String>> = HashMap::new();
    let settings = UcbSettings { max_pulls: job.max_pulls.unwrap_or(UcbSettings::default().max_pulls), order_seed: Some(super::order_seed(&p)), ..UcbSettings::default() };
    let mut ucb = Ucb::new(space.len(), &priors, settings);
    trace.stopped = "converged".into();
    loop {
        // The reference's exhaustive screen can take most of a small budget on the largest
        // shapes (8192×28672×8192: one call is 6 ms): the first pulls run regardless, so a
        // spent budget still ends in a measured answer.
        if Instant::now() >= deadline && ucb.pulls() >= MIN_PULLS {
            trace.stopped = "budget".into();
            break;
        }
        let Some(i) = ucb.next() else {
            if ucb.pulls() >= job.max_pulls.unwrap_or(UcbSettings::default().max_pulls) {
                trace.stopped = "max_pulls".into();
            }
            break;
        };
        let cfg = space[i];
        let module = modules.entry(i).or_insert_with(|| {
            let ptx = super::ptx_for(job.ptx_dir.as_deref(), &cfg, p.arch, p.acc, p.layout).map_err(|e| format!("compile: {e:#}"))?;
            let loaded = gpu.load_ptx(&ptx).map_err(|e| format!("load: {e}"))?;
            Ok((loaded, ptx))
        });
        let timed: Result<(f64, f64), String> = match module {
            Err(e) => Err(e.clone()),
            Ok((loaded, _)) => {
                let manifest = cfg.manifest(&p, sm);
                sets.iter()
                    .map(|ops| PreparedManifest::new(gpu, loaded, &manifest, ops))
                    .collect::<Result<Vec<_>, _>>()
                    .and_then(|preps| super::time_paired(gpu, &preps, &reference))
                    .map_err(|e| format!("run: {e}"))
            }
        };
        let (us, reward, error) = match timed {
            Ok((us, reward)) if us.is_finite() && us > 0.0 && reward.is_finite() => (Some(us), Some(reward), None),
            Ok((us, _)) => (None, None, Some(format!("timed {us}"))),
            Err(e) => (None, None, Some(e)),
        };
        ucb.record(i, reward.unwrap_or(f64::NAN));
        trace.tried.push(Tried {
            code: cfg.label(),
            entry: cfg.entry(p.acc, p.layout),
            us,
            reward,
            seeded: seeded.contains(&i),
            at_ms: started.elapsed().as_secs_f64() * 1e3,
            error,
        });
    }
    trace.search_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut means: Vec<(usize, f64)> = ucb.means().into_iter().map(|(i, m, _)| (i, m)).filter(|(_, m)| m.is_finite() && *m > 0.0).collect();
    means.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // The finalists, re-timed side by side with the reference: their order decides.
    let finalists: Vec<usize> = super::finalists(&means, FINALISTS, FINALIST_WITHIN).into_iter().filter(|i| matches!(modules.get(i), Some(Ok(_)))).collect();
    if finalists.len() > 1 {
        let loaded: Vec<(Candidate, &LoadedPtx)> = finalists.iter().filter_map(|&i| modules.get(&i).and_then(|m| m.as_ref().ok()).map(|(l, _)| (space[i], l))).collect();
        match rotation.retime(gpu, &p, &loaded, sm) {
            Ok(times) => {
                let order: Vec<usize> = times.iter().map(|(k, _, _)| finalists[*k]).collect();
                trace.retimed = times.iter().map(|&(k, us, speedup)| Retimed { code: space[finalists[k]].label(), median_us: us, speedup }).collect();
                let rest: Vec<(usize, f64)> = means.iter().copied().filter(|(i, _)| !order.contains(i)).collect();
                means = order.iter().map(|&i| (i, means.iter().find(|(j, _)| *j == i).map_or(f64::NAN, |(_, m)| *m))).chain(rest).collect();
            }
            Err(e) => tracing::warn!(problem = %p, "re-timing the finalists failed, keeping the search's order: {e}"),
        }
    }
    Ok(means
        .into_iter()
        .filter_map(|(i, m)| match modules.remove(&i) {
            Some(Ok((_, ptx))) => Some((space[i], ptx, Some(reference_us / m), Some(m))),
            _ => None,
        })
        .collect())
}

/// The search's buffer sets: an L2-cold rotation of the problem (as the benchmark ranks),
/// and the same for the other layout, whose autotuned call the reference may be.
struct Rotation {
    sets: Vec<crate::gpu::Operands>,
    other: Vec<crate::gpu::Operands>,
    /// The reference's call, once [`Rotation::reference`] chose it: whether it is the
    /// other layout's, and its algorithm.
    chosen: Option<(bool, crate::gpu::LtAlgoConfig)>,
}

impl Rotation {
    fn new(gpu: &Gpu, p: &Problem, workspace: u64) -> Result<Rotation, crate::gpu::GpuError> {
        use crate::harness::baselines::{Pool, operand_sets, operand_sets_with};
        let n = crate::harness::bench::cold_sets(p, workspace, gpu.facts().l2_cache_bytes, gpu.facts().total_memory_bytes, super::TUNE_SETS);
        let (a, b) = (p.m as usize * p.k as usize, p.k as usize * p.n as usize);
        let pool = Pool::new(gpu, a.max(b) + 4_000_037, super::order_seed(p))?;
        let other = Problem { layout: if p.layout == crate::problem::Layout::Tn { crate::problem::Layout::Nn } else { crate::problem::Layout::Tn }, ..*p };
        Ok(Rotation { sets: operand_sets_with(gpu, &pool, p, workspace, n, 0)?, other: operand_sets(gpu, &pool, &other, n, 1)?, chosen: None })
    }

    /// cuBLASLt-autotune-max over the rotation: the autotuned call (every heuristic
    /// algorithm screened) in each layout, timed as the candidates are; the faster one's
    /// time, and what it is.
    fn reference(&mut self, gpu: &Gpu) -> Result<(f64, String), crate::gpu::GpuError> {
        let mut best = (f64::INFINITY, String::new());
        for (other, sets) in [(false, &self.sets), (true, &self.other)] {
            let (tuned, choice) = crate::harness::autotune::autotune(gpu, &sets[0], &crate::harness::autotune::AutotuneOptions::default())?;
            let bound = sets.iter().map(|ops| tuned.with_operands(ops)).collect::<Result<Vec<_>, _>>()?;
            let us = super::time_us(gpu, &bound, 0.0)?;
            if us < best.0 {
                best = (us, format!("cuBLASLt autotune (max of NN and TN: {}), L2-cold rotation over {} buffer sets", sets[0].problem().layout, sets.len()));
                self.chosen = Some((other, choice.config));
            }
        }
        Ok(best)
    }

    /// The chosen reference's call on each buffer set of its layout's rotation.
    fn reference_calls(&self, gpu: &Gpu, stage: &str) -> Result<Vec<LtGemm<'_>>, crate::gpu::GpuError> {
        let (other, config) = self.chosen.as_ref().ok_or_else(|| crate::gpu::GpuError::refused(stage, "no reference chosen"))?;
        let ref_sets = if *other { &self.other } else { &self.sets };
        let tuned = LtGemm::from_config(gpu, &ref_sets[0], config)?;
        ref_sets.iter().map(|ops| tuned.with_operands(ops)).collect()
    }

    /// The chosen reference's graph over its rotation, `launches` per replay, for
    /// [`super::time_paired`], with the calls it captured (kept alive as long as the graph,
    /// as the benchmark keeps its contenders).
    fn reference_timer(&self, gpu: &Gpu, launches: u32) -> Result<(crate::gpu::GraphTimer, Vec<LtGemm<'_>>), crate::gpu::GpuError> {
        let refs = self.reference_calls(gpu, "the reference's graph")?;
        let members: Vec<&dyn crate::gpu::Contender> = refs.iter().map(|c| c as &dyn crate::gpu::Contender).collect();
        let timer = crate::gpu::GraphTimer::capture(gpu, &crate::harness::runner::Rotation::new(&members), launches)?;
        drop(members);
        Ok((timer, refs))
    }

    /// The finalists and the reference side by side in graph mode over the rotation:
    /// (index into `finalists`, median µs, reference median / its median), fastest first.
    fn retime(&self, gpu: &Gpu, p: &Problem, finalists: &[(Candidate, &LoadedPtx)], sm: u32) -> Result<Vec<(usize, f64, f64)>, crate::gpu::GpuError> {
        let prepared: Vec<Vec<PreparedManifest>> = finalists
            .iter()
            .map(|(c, loaded)| {
                let m = c.manifest(p, sm);
                self.sets.iter().map(|ops| PreparedManifest::new(gpu, loaded, &m, ops)).collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;
        let refs = self.reference_calls(gpu, "re-timing")?;
        let mut contenders: Vec<Vec<&dyn crate::gpu::Contender>> = vec![refs.iter().map(|c| c as &dyn crate::gpu::Contender).collect()];
        contenders.extend(prepared.iter().map(|v| v.iter().map(|c| c as &dyn crate::gpu::Contender).collect()));
        let cfg = crate::harness::runner::BenchConfig {
            modes: vec![crate::bench::stats::Mode::Graph],
            budget: RETIME_BUDGET,
            min_launches: u32::try_from(self.sets.len()).unwrap_or(u32::MAX),
            seed: super::order_seed(p),
            ..crate::harness::runner::BenchConfig::default()
        };
        let report = crate::harness::runner::benchmark(gpu, &contenders, p.shape().flops(), &cfg)?;
        let median = |c: usize| report.contenders.get(c).and_then(|t| t.timings.get(&crate::bench::stats::Mode::Graph)).map_or(f64::NAN, |t| t.median_us);
        let ref_us = median(0);
        let mut out: Vec<(usize, f64, f64)> = (0..finalists.len()).map(|k| (k, median(k + 1), ref_us / median(k + 1))).filter(|(_, us, _)| us.is_finite()).collect();
        out.sort_by(|a, b| a.1.total_cmp(&b.1));
        Ok(out)
    }
}

/// The wall-clock limit of a tune job's sandbox: start-up, the search's budget with room
/// for the pull under way, and [`VERIFY_AT_MOST`] verifications with their benchmarks.
pub fn wall_limit(job: &TuneJob) -> Duration {
    let verify = Job {
        ptx: String::new(),
        manifest: crate::kernels::manifest_for(&job.problem, &crate::kernels::SimpleConfig::SMALL),
        secret_seed: 0,
        watchdog_ms: job.watchdog_ms,
        bench: job.bench.clone(),
    };
    Duration::from_secs(30) + Duration::from_millis(job.budget_ms) + verify.wall_limit() * VERIFY_AT_MOST as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Acc, Arch, Layout, Shape};

    fn p(arch: Arch, m: u32, n: u32, k: u32) -> Problem {
        Problem::new(arch, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"))
    }

    #[test]
    fn the_tma_family_needs_aligned_rows_and_hopper() {
        assert_eq!(families_for(&p(Arch::Sm90, 32, 4096, 4096)), vec![Family::Hopper, Family::Mma]);
        assert_eq!(families_for(&p(Arch::Sm90, 32, 4100, 4096)), vec![Family::Mma]);
        assert_eq!(families_for(&p(Arch::Sm80, 32, 4096, 4096)), vec![Family::Mma]);
        // Decode shapes add the gemv family, aligned or not, tn with fp32 accumulators only.
        assert_eq!(families_for(&p(Arch::Sm90, 16, 4096, 4096)), vec![Family::Hopper, Family::Mma, Family::Gemv]);
        assert_eq!(families_for(&p(Arch::Sm80, 1, 4100, 4099)), vec![Family::Mma, Family::Gemv]);
        assert_eq!(families_for(&Problem { acc: Acc::F16, ..p(Arch::Sm90, 1, 4096, 4096) }), vec![Family::Hopper, Family::Mma]);
        assert_eq!(families_for(&Problem { layout: Layout::Nn, ..p(Arch::Sm90, 1, 4096, 4096) }), vec![Family::Hopper, Family::Mma]);
        // A decode shape of a preset has candidates.
        assert!(untunable(&p(Arch::Sm90, 1, 14336, 4096), 132).is_none());
        // A prefill over a vocabulary of 32001 (rows TMA cannot load) past the mma family's
        // size for aligned shapes: its unsplit codes all the same.
        let vocab = candidates_for(&p(Arch::Sm90, 128, 32001, 4096), 132);
        assert!(!vocab.is_empty() && vocab.iter().all(|c| matches!(c, Candidate::Mma(m) if m.split == 1)), "{vocab:?}");
        assert!(candidates_for(&p(Arch::Sm90, 4096, 4096, 4096), 132).iter().all(|c| !matches!(c, Candidate::Mma(_))), "aligned and large: the TMA family only");
    }

    /// A worker's `--tune-ptx-dir` comes from `kaas tune --emit-ptx --families
    /// hopper,mma,gemv`: those codes must hold every candidate a tune job searches on the
    /// grid's problems, or a worker without NVRTC fails pulls it should have timed.
    #[test]
    fn the_emitted_codes_hold_the_tune_jobs_space_on_the_grid() {
        use std::collections::BTreeSet;
        let families = [Family::Hopper, Family::Mma, Family::Gemv];
        for layout in [Layout::Tn, Layout::Nn] {
            let codes: BTreeSet<String> = super::super::codes_with(&families, &[], Arch::Sm90, Acc::F32, layout).iter().map(|c| c.entry(Acc::F32, layout)).collect();
            let mut searched = 0;
            // The grid, and the token counts of decoding and short prefills on model shapes.
            let models = [1, 8, 16, 32, 48, 64, 128, 512].into_iter().flat_map(|m| [(4096, 4096), (14336, 4096), (4096, 14336), (35840, 5120), (5120, 17920)].map(|(n, k)| Shape { m, n, k }));
            for s in crate::harness::baselines::grid_shapes().into_iter().chain(models) {
                let prob = Problem { layout, ..p(Arch::Sm90, s.m, s.n, s.k) };
                for c in candidates_for(&prob, 132) {
                    let entry = c.entry(prob.acc, prob.layout);
                    assert!(codes.contains(&entry), "{prob}: {entry} is searched but not emitted");
                    searched += 1;
                }
            }
            assert!(searched > 10_000, "{layout:?}: {searched} candidates over the grid");
        }
    }

    #[test]
    fn seeds_become_priors_only_for_codes_in_the_space() {
        let prob = p(Arch::Sm90, 256, 4096, 4096);
        let space = candidates_for(&prob, 132);
        let first = space[0].entry(prob.acc, prob.layout);
        let seeds = vec![
            Seed { problem: "x".into(), entry: first, speedup: Some(1.2), distance: 1.0 },
            Seed { problem: "y".into(), entry: "not_a_code".into(), speedup: Some(2.0), distance: 0.0 },
        ];
        let same: Vec<(usize, f64, f64)> = (0..space.len()).filter(|&i| space[i].entry(prob.acc, prob.layout) == space[0].entry(prob.acc, prob.layout)).map(|i| (i, 1.2, 0.5)).collect();
        assert!(same.first() == Some(&(0, 1.2, 0.5)), "{same:?}");
        assert_eq!(priors(&space, &prob, &seeds), same, "every grid of the seeded code, and nothing for a code not in the space");
    }

    #[test]
    fn a_tune_job_round_trips_and_refuses_unknown_fields() {
        let job = TuneJob { problem: p(Arch::Sm90, 16, 4096, 4096), seeds: vec![], budget_ms: 60_000, max_pulls: None, secret_seed: u64::MAX, watchdog_ms: None, bench: None, ptx_dir: None };
        let text = serde_json::to_string(&job).expect("json");
        assert_eq!(serde_json::from_str::<TuneJob>(&text).expect("back"), job);
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("value");
        v["surprise"] = 1.into();
        assert!(serde_json::from_value::<TuneJob>(v).is_err());
        assert!(wall_limit(&job) > Duration::from_secs(90));
    }
}
