//! The catalog store: for each (device class, problem) the fastest passing run, its
//! manifest and PTX, the baselines it was measured against, and the leaderboards.
//! Reads only; writes go through `bundle` (import) and, later, the job pipeline.

pub mod bundle;
pub mod overview;
pub mod seed;
pub mod views;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder};

use crate::db::entities::{artifact, baseline, catalog_entry, device_class, manifest, problem, run, submission, submitter, tune, worker};
use crate::bench::stats::geomean;
use crate::manifest::Manifest;
use crate::problem::{Acc, Arch, Layout, Problem};
use crate::signing::{RECORD_FORMAT, Record};
use crate::problem::DeviceClass;
pub use views::*;

/// Who a tune job's kernel belongs to: the service, as for the kernels it ships.
pub const TUNER_SUBMITTER: &str = "kaas";
/// The submission name shown for a tune job's kernel.
pub const TUNED_NAME: &str = "tuned on demand";
/// Speedup table key for cuBLASLt-autotune-max, the baseline kaas ranks against.
pub const AUTOTUNE_MAX: &str = "cublaslt_autotune_max";

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("database: {0}")]
    Db(#[from] DbErr),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
}

/// Filters of `GET /v1/problems`.
#[derive(Debug, Clone, Default)]
pub struct ProblemFilter {
    pub arch: Option<Arch>,
    pub acc: Option<Acc>,
    pub layout: Option<Layout>,
    pub device: Option<String>,
}

/// The answer to "which kernel should I use for this problem?".
#[derive(Debug, Clone)]
pub enum KernelLookup {
    /// A kernel that beat every baseline, or was not benchmarked (it says so); or, with
    /// `fallback` set in the view, another class's kernel offered as such.
    Kernel(Box<KernelView>),
    /// Kernels exist, but a baseline is faster: use it instead. `fallback` is set when the
    /// kernel compared is another class's (its time there against `use_instead`'s here).
    BaselineFaster { device_class: DeviceClass, use_instead: BaselineView, fallback: Option<Box<FallbackView>> },
    /// No catalog entry at all; the fastest known baseline, if any was measured.
    None { use_instead: Option<(DeviceClass, BaselineView)> },
}

pub(crate) fn problem_of(p: &problem::Model) -> Result<Problem, CatalogError> {
    let bad = |what: &str| CatalogError::Corrupt(format!("problem {}: {what}", p.id));
    Ok(Problem {
        arch: p.arch.parse().map_err(|_| bad("arch"))?,
        acc: p.acc.parse().map_err(|_| bad("acc"))?,
        layout: p.layout.parse().map_err(|_| bad("layout"))?,
        m: u32::try_from(p.m).map_err(|_| bad("m"))?,
        n: u32::try_from(p.n).map_err(|_| bad("n"))?,
        k: u32::try_from(p.k).map_err(|_| bad("k"))?,
    })
}

pub async fn find_problem<C: ConnectionTrait>(db: &C, p: &Problem) -> Result<Option<problem::Model>, DbErr> {
    problem::Entity::find()
        .filter(problem::Column::Arch.eq(p.arch.as_str()))
        .filter(problem::Column::Acc.eq(p.acc.as_str()))
        .filter(problem::Column::Layout.eq(p.layout.as_str()))
        .filter(problem::Column::M.eq(p.m as i32))
        .filter(problem::Column::N.eq(p.n as i32))
        .filter(problem::Column::K.eq(p.k as i32))
        .one(db)
        .await
}

fn json_opt(text: &Option<String>) -> Option<serde_json::Value> {
    text.as_deref().and_then(|t| serde_json::from_str(t).ok())
}

pub(crate) fn artifact_view(a: &artifact::Model) -> ArtifactView {
    ArtifactView {
        sha256: a.sha256.clone(),
        size_bytes: a.size_bytes,
        ptx_version: a.ptx_version.clone(),
        target: a.target.clone(),
        url: format!("/v1/artifacts/{}", a.sha256),
    }
}

pub(crate) fn run_view(r: &run::Model) -> RunView {
    RunView {
        id: r.id,
        device_class: r.device_class.clone(),
        verdict: r.verdict.clone(),
        message: r.message.clone(),
        measured_at: r.created_at,
        timings: json_opt(&r.timings),
        speedups: json_opt(&r.speedups),
        regime: match (&r.regime, &r.timings) {
            (Some(name), _) => Some(name.clone()),
            (None, Some(_)) => Some(LEGACY_REGIME.to_string()),
            (None, None) => None,
        },
        regimes: json_opt(&r.regimes),
        device: json_opt(&r.device),
    }
}

/// The signed record of a stored run, with the manifest and artifact it ran
/// (docs/signing.md): what the catalog, a pull and a submission's result vouch for.
pub fn run_record(r: &run::Model, manifest: &Manifest, artifact_sha256: &str) -> Record {
    let run = run_view(r);
    let details: Option<serde_json::Value> = r.details.as_deref().and_then(|d| serde_json::from_str(d).ok());
    Record {
        format: RECORD_FORMAT.into(),
        run_id: run.id,
        submission_id: r.submission_id,
        artifact_sha256: artifact_sha256.to_string(),
        manifest: manifest.clone(),
        problem: manifest.problem,
        device_class: run.device_class,
        verdict: run.verdict,
        message: run.message,
        checks: details.and_then(|d| d.get("checks").cloned()).filter(|c| !c.is_null()),
        timings: run.timings,
        speedups: run.speedups,
        regime: run.regime,
        regimes: run.regimes,
        device: run.device,
        measured_at: run.measured_at,
    }
}

/// The regime named for figures timed before regimes were: every contender rotated over
/// three buffer sets, which is L2-warm for small problems, cold for large ones and mixed
/// between (docs/verification.md, "Timing regimes").
pub const LEGACY_REGIME: &str = "rotation_3_sets";

pub(crate) fn baseline_view(b: &baseline::Model) -> BaselineView {
    BaselineView {
        library: b.library.clone(),
        layout: b.layout.clone(),
        mode: b.mode.clone(),
        median_us: b.median_us,
        timing: serde_json::from_str(&b.timing).unwrap_or(serde_json::Value::Null),
        config: serde_json::from_str(&b.config).unwrap_or(serde_json::Value::Null),
    }
}

/// Graph-mode figures of a run: (median µs, TFLOP/s, speedups by baseline as
/// [`ranked_speedups`] gives them).
pub(crate) fn graph_figures(r: &RunView) -> (Option<f64>, Option<f64>, Option<serde_json::Value>) {
    let graph = r.timings.as_ref().and_then(|t| t.get("graph"));
    let median = graph.and_then(|g| g.get("median_us")).and_then(|v| v.as_f64());
    let tflops = graph.and_then(|g| g.get("tflops")).and_then(|v| v.as_f64());
    (median, tflops, ranked_speedups(r.speedups.as_ref()))
}

/// The speedups a kernel is judged, served and ranked by, per baseline, from a run's
/// `speedups` ({mode: {baseline: x}}): graph mode's (launches back to back), each no
/// higher than the `paced` mode's (each launch after a pause as long as itself) where the
/// benchmark timed that, as it does for large problems
/// ([`crate::harness::bench::PACED_FROM_FLOP`]). A kernel must win both while the board
/// is held at its power limit and at the clocks it keeps between other work; figures
/// without a paced table are graph mode's as they are.
pub fn ranked_speedups(speedups: Option<&serde_json::Value>) -> Option<serde_json::Value> {
    let mut graph = speedups?.get("graph")?.clone();
    if let (Some(table), Some(serde_json::Value::Object(paced))) = (graph.as_object_mut(), speedups?.get("paced")) {
        for (baseline, x) in table.iter_mut() {
            if let (Some(g), Some(p)) = (x.as_f64(), paced.get(baseline).and_then(|v| v.as_f64())) {
                *x = g.min(p).into();
            }
        }
    }
    Some(graph)
}

/// Names of the baselines a graph-mode speedup table says the kernel beat.
fn beaten(speedups: &Option<serde_json::Value>) -> Vec<String> {
    let Some(serde_json::Value::Object(map)) = speedups else { return vec![] };
    map.iter().filter(|(_, v)| v.as_f64().is_some_and(|x| x >= SERVE_MARGIN)).map(|(k, _)| k.clone()).collect()
}

/// `Some(true)` when every baseline in the table was beaten; `None` when not benchmarked.
pub(crate) fn beats_all(speedups: &Option<serde_json::Value>) -> Option<bool> {
    let Some(serde_json::Value::Object(map)) = speedups else { return None };
    if map.is_empty() {
        return None;
    }
    Some(map.values().all(|v| v.as_f64().is_some_and(|x| x >= SERVE_MARGIN)))
}

/// How much faster than a baseline a kernel must measure to count as beating it (and
/// be served): the benchmark's resolution, its medians' 95% intervals being within ±1%.
/// Within it kernel and library are the same speed as far as the measurement can tell,
/// and the library is the safer answer: a kernel served at 1.003× ran 0.957× torch
/// inside a model's layer (BENCHMARKS.md, "PyTorch client").
pub const SERVE_MARGIN: f64 = 1.01;

/// The current catalog entries: the newest row per (device class, problem).
pub(crate) async fn current_entries<C: ConnectionTrait>(db: &C) -> Result<Vec<catalog_entry::Model>, DbErr> {
    Ok(newest_entries(catalog_entry::Entity::find().order_by_asc(catalog_entry::Column::Id).all(db).await?))
}

/// The current catalog entries of one problem (the kernel look-up's path: no full scan).
pub(crate) async fn current_entries_of<C: ConnectionTrait>(db: &C, problem_id: i32) -> Result<Vec<catalog_entry::Model>, DbErr> {
    Ok(newest_entries(
        catalog_entry::Entity::find()
            .filter(catalog_entry::Column::ProblemId.eq(problem_id))
            .order_by_asc(catalog_entry::Column::Id)
            .all(db)
            .await?,
    ))
}

/// Keeps the last row per (problem, device class) of rows ordered by id.
fn newest_entries(rows: Vec<catalog_entry::Model>) -> Vec<catalog_entry::Model> {
    let mut newest: BTreeMap<(i32, DeviceClass), catalog_entry::Model> = BTreeMap::new();
    for r in rows {
        newest.insert((r.problem_id, r.device_class.clone()), r);
    }
    newest.into_values().collect()
}

/// Everything needed to describe catalog entries, loaded in a few queries.
struct EntryData {
    runs: HashMap<i32, run::Model>,
    manifests: HashMap<i32, manifest::Model>,
    artifacts: HashMap<String, artifact::Model>,
    submissions: HashMap<i32, submission::Model>,
    submitters: HashMap<i32, submitter::Model>,
}

impl EntryData {
    async fn load<C: ConnectionTrait>(db: &C, run_ids: Vec<i32>) -> Result<Self, DbErr> {
        let runs: HashMap<i32, run::Model> =
            run::Entity::find().filter(run::Column::Id.is_in(run_ids)).all(db).await?.into_iter().map(|r| (r.id, r)).collect();
        let manifest_ids: Vec<i32> = runs.values().map(|r| r.manifest_id).collect();
        let manifests: HashMap<i32, manifest::Model> = manifest::Entity::find()
            .filter(manifest::Column::Id.is_in(manifest_ids))
            .all(db)
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
        let shas: Vec<String> = manifests.values().map(|m| m.artifact_sha256.clone()).collect();
        let artifacts = artifact::Entity::find()
            .filter(artifact::Column::Sha256.is_in(shas))
            .all(db)
            .await?
            .into_iter()
            .map(|a| (a.sha256.clone(), a))
            .collect();
        let sub_ids: Vec<i32> = runs.values().filter_map(|r| r.submission_id).collect();
        let submissions: HashMap<i32, submission::Model> = submission::Entity::find()
            .filter(submission::Column::Id.is_in(sub_ids))
            .all(db)
            .await?
            .into_iter()
            .map(|s| (s.id, s))
            .collect();
        let submitters = submitter::Entity::find().all(db).await?.into_iter().map(|s| (s.id, s)).collect();
        Ok(EntryData { runs, manifests, artifacts, submissions, submitters })
    }

    /// (submitter, submission name) of a run. A run without a submission is a tune
    /// job's: the service's own tuner made it, so it is the service's (`kaas`), as the
    /// kernels it ships are.
    fn owner(&self, r: &run::Model) -> (String, String) {
        let Some(sub) = r.submission_id.and_then(|id| self.submissions.get(&id)) else {
            return (TUNER_SUBMITTER.to_string(), TUNED_NAME.to_string());
        };
        let who = self.submitters.get(&sub.submitter_id).map(|s| s.name.clone()).unwrap_or_default();
        (who, sub.name.clone())
    }
}

pub async fn list_problems(db: &DatabaseConnection, filter: &ProblemFilter) -> Result<Vec<ProblemView>, CatalogError> {
    let mut q = problem::Entity::find();
    if let Some(a) = filter.arch {
        q = q.filter(problem::Column::Arch.eq(a.as_str()));
    }
    if let Some(a) = filter.acc {
        q = q.filter(problem::Column::Acc.eq(a.as_str()));
    }
    if let Some(l) = filter.layout {
        q = q.filter(problem::Column::Layout.eq(l.as_str()));
    }
    let problems = q.all(db).await?;
    let entries: Vec<catalog_entry::Model> = current_entries(db)
        .await?
        .into_iter()
        .filter(|e| filter.device.as_ref().is_none_or(|d| &e.device_class == d))
        .collect();
    let data = EntryData::load(db, entries.iter().map(|e| e.run_id).collect()).await?;
    let mut by_problem: HashMap<i32, Vec<BestSummary>> = HashMap::new();
    for e in &entries {
        let Some(r) = data.runs.get(&e.run_id) else { continue };
        let Some(m) = data.manifests.get(&r.manifest_id) else { continue };
        let (median_us, tflops, speedups) = graph_figures(&run_view(r));
        by_problem.entry(e.problem_id).or_default().push(BestSummary {
            device_class: e.device_class.clone(),
            artifact_sha256: m.artifact_sha256.clone(),
            submitter: data.owner(r).0,
            median_us,
            tflops,
            beats_baselines: beats_all(&speedups),
            speedups,
        });
    }
    let mut out = Vec::new();
    for p in problems {
        let best = by_problem.remove(&p.id).unwrap_or_default();
        if filter.device.is_some() && best.is_empty() {
            continue;
        }
        let problem = problem_of(&p)?;
        out.push(ProblemView { path: problem.path(), problem, best });
    }
    out.sort_by_key(|v| v.problem);
    Ok(out)
}

/// Latest baseline rows per (library, layout, mode) for a problem on a device class.
pub async fn baselines_for<C: ConnectionTrait>(db: &C, problem_id: i32, device: &str) -> Result<Vec<BaselineView>, DbErr> {
    let rows = baseline::Entity::find()
        .filter(baseline::Column::ProblemId.eq(problem_id))
        .filter(baseline::Column::DeviceClass.eq(device))
        .order_by_asc(baseline::Column::Id)
        .all(db)
        .await?;
    let mut latest: BTreeMap<(String, String, String), baseline::Model> = BTreeMap::new();
    for b in rows {
        latest.insert((b.library.clone(), b.layout.clone(), b.mode.clone()), b);
    }
    Ok(latest.values().map(baseline_view).collect())
}

/// What a baseline timed in another storage of B than the problem's means for a caller
/// of the problem's layout (empty when they agree): the time holds for B as the baseline
/// stored it, which a caller gets by storing its B transposed once, not per call.
pub fn layout_advice(problem: crate::problem::Layout, baseline_layout: &str) -> String {
    use crate::problem::Layout;
    match (problem, baseline_layout) {
        (Layout::Tn, "nn") => "; nn: that time is with B stored K×N row-major, so a tn caller (an N×K weight, as nn.Linear's) gets it by keeping the weight transposed once (W.t().contiguous()), not per call".into(),
        (Layout::Nn, "tn") => "; tn: that time is with B stored N×K row-major, so an nn caller (a K×N B) gets it by keeping B transposed once, not per call".into(),
        _ => String::new(),
    }
}

/// The fastest graph-mode baseline in a table.
pub(crate) fn fastest_baseline(table: &[BaselineView]) -> Option<BaselineView> {
    table.iter().filter(|b| b.mode == "graph").min_by(|a, b| a.median_us.total_cmp(&b.median_us)).cloned()
}

/// Device classes whose kernels may be offered, labelled, to a class with no catalog
/// entry for a problem: (asking class, stand-ins in order of preference). An H200 is the
/// H100's GH100 die (same SMs, same sm_90 ISA) with more and faster memory, so the H100
/// kernel runs there and its H100 timings are the nearest evidence — but evidence about
/// an H100 only, which is why such answers say so and claim nothing about the H200.
pub const STAND_INS: &[(&str, &[&str])] = &[("H200", &["H100-SXM"])];

/// Whether a kernel answer for a device class without an entry may offer a stand-in's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Offer a [`STAND_INS`] class's kernel, labelled, where its PTX loads on the asked class.
    #[default]
    StandIn,
    /// Only the asked class's own entries (`?fallback=none`).
    None,
}

/// The device classes this service knows, with their compute capability where
/// registered: every class a bundle import or a worker's run registered, and those of
/// workers seen (a worker may announce a class before its first run).
pub async fn known_device_classes<C: ConnectionTrait>(db: &C) -> Result<BTreeMap<DeviceClass, Option<(u32, u32)>>, DbErr> {
    let mut known: BTreeMap<DeviceClass, Option<(u32, u32)>> = BTreeMap::new();
    for w in worker::Entity::find().all(db).await? {
        if let Some(c) = w.device_class {
            known.insert(c, None);
        }
    }
    for c in device_class::Entity::find().all(db).await? {
        known.insert(DeviceClass::new(c.name), crate::gpu::parse_compute_capability(&c.compute_capability));
    }
    Ok(known)
}

/// The best kernel for a problem on `device` (or anywhere), or why there is none; with
/// [`Fallback::StandIn`], a device class without an entry is offered a stand-in's
/// kernel (see [`stand_in_kernel`]) instead of "no kernel yet".
pub async fn best_kernel(db: &DatabaseConnection, p: &Problem, device: Option<&str>, fallback: Fallback) -> Result<KernelLookup, CatalogError> {
    let lookup = measured_kernel(db, p, device).await?;
    if let (KernelLookup::None { use_instead }, Some(d), Fallback::StandIn) = (&lookup, device, fallback)
        && !tuned_to_baseline(db, p, d).await?
        && let Some(offered) = stand_in_kernel(db, p, d, use_instead).await?
    {
        return Ok(offered);
    }
    Ok(lookup)
}

/// The tune state (`work::tune::state::BASELINE_FASTER`; spelt here because the catalog
/// sits below `work`) of a tune whose measured answer is a baseline.
const TUNE_BASELINE_FASTER: &str = "baseline_faster";

/// Whether `device`'s own tune of `p` ended `baseline_faster`: its search ran on that
/// class and the baselines measured there beat the fastest kernel it found. That is
/// `device`'s answer for `p` (the kernel answer says so, with the tune), as much as a
/// catalog entry is, so no other class's kernel stands in for it.
async fn tuned_to_baseline(db: &DatabaseConnection, p: &Problem, device: &str) -> Result<bool, DbErr> {
    let Some(prow) = find_problem(db, p).await? else { return Ok(false) };
    Ok(tune::Entity::find()
        .filter(tune::Column::ProblemId.eq(prow.id))
        .filter(tune::Column::DeviceClass.eq(device))
        .filter(tune::Column::State.eq(TUNE_BASELINE_FASTER))
        .one(db)
        .await?
        .is_some())
}

/// The latest run on `device` of the kernel (same manifest, so same PTX and problem) that
/// run `stand_in_run` measured on another class, if `device` ever ran it.
async fn same_kernel_run_on(db: &DatabaseConnection, stand_in_run: i32, device: &str) -> Result<Option<run::Model>, DbErr> {
    let Some(there) = run::Entity::find_by_id(stand_in_run).one(db).await? else { return Ok(None) };
    run::Entity::find()
        .filter(run::Column::ManifestId.eq(there.manifest_id))
        .filter(run::Column::ProblemId.eq(there.problem_id))
        .filter(run::Column::DeviceClass.eq(device))
        .order_by_desc(run::Column::Id)
        .one(db)
        .await
}

/// A stand-in's kernel for `device`, which has no entry for `p`, labelled as measured on
/// the stand-in. Offered only where the stand-in's own answer is a kernel (not "a
/// baseline is faster" there), its PTX target loads on `device`'s compute capability, and
/// `device` never failed it: where `device` ran the same kernel (same manifest), that run
/// decides and is shown (`requested_device_run`), not the stand-in's timings.
///
/// Invariant: nothing in the answer claims the kernel beats `device`'s baselines. `beats`
/// is empty (the stand-in's list is under `fallback`), and where `device`'s fastest
/// baseline (`no_kernel`, measured on `device`) took less time than the kernel did on
/// the stand-in, or the kernel's own run on `device` lost to a baseline timed beside it,
/// the answer is `BaselineFaster` with that baseline.
async fn stand_in_kernel(
    db: &DatabaseConnection,
    p: &Problem,
    device: &str,
    no_kernel: &Option<(DeviceClass, BaselineView)>,
) -> Result<Option<KernelLookup>, CatalogError> {
    let Some((_, stand_ins)) = STAND_INS.iter().find(|(asking, _)| *asking == device) else { return Ok(None) };
    let cc = device_class::Entity::find_by_id(device.to_string())
        .one(db)
        .await?
        .and_then(|c| crate::gpu::parse_compute_capability(&c.compute_capability));
    let Some(cc) = cc else { return Ok(None) };
    // The fastest baseline measured on `device` itself (`None` looked there only).
    let here = no_kernel.as_ref().filter(|(d, _)| d == device).map(|(_, b)| b.clone());
    for stand_in in stand_ins.iter() {
        let KernelLookup::Kernel(mut view) = Box::pin(measured_kernel(db, p, Some(stand_in))).await? else { continue };
        if !crate::gpu::ptx_target_runs_on(&view.artifact.target, cc) {
            continue;
        }
        // A measurement of this very kernel on `device` outranks every figure from the
        // stand-in: failing verification there rules it out, and timings there are what
        // the answer is judged and shown by.
        let run_here = same_kernel_run_on(db, view.run.id, device).await?.map(|r| run_view(&r));
        if run_here.as_ref().is_some_and(|r| r.verdict != crate::verify::Verdict::Pass.as_str()) {
            continue;
        }
        let (us_here, _, speedups_here) = run_here.as_ref().map(graph_figures).unwrap_or((None, None, None));
        let kernel_us = graph_figures(&view.run).0;
        let slower_than_here = match (&speedups_here, &here, kernel_us) {
            (Some(_), _, _) => beats_all(&speedups_here) == Some(false),
            (None, Some(b), Some(us)) => b.median_us < us,
            _ => false,
        };
        let time_there = kernel_us.map_or_else(|| "was not benchmarked".to_string(), |us| format!("took {us:.2} µs (graph mode) there"));
        let about_here = match &here {
            Some(b) => format!("{device}'s fastest baseline, {} ({} layout), took {:.2} µs on {device}", b.library, b.layout, b.median_us),
            None => format!("no baseline was measured on {device}"),
        };
        let run_here_words = match (us_here, speedups_here.as_ref().and_then(|s| s.get(AUTOTUNE_MAX)).and_then(|v| v.as_f64())) {
            (Some(us), Some(x)) => format!(
                " The same kernel was also verified and timed on {device}: {us:.2} µs (graph mode), {x:.3}× {device}'s cuBLASLt-autotune-max side by side (`fallback.requested_device_run`)."
            ),
            (Some(us), None) => format!(" The same kernel was also verified and timed on {device}: {us:.2} µs (graph mode) (`fallback.requested_device_run`)."),
            _ if run_here.is_some() => format!(" The same kernel passed verification on {device}, unbenchmarked (`fallback.requested_device_run`)."),
            _ => String::new(),
        };
        let mut offered = FallbackView {
            requested_device: device.to_string(),
            measured_on: DeviceClass::new(*stand_in),
            note: String::new(),
            beats_on_measured_device: std::mem::take(&mut view.beats),
            requested_device_baseline: here.clone(),
            requested_device_run: run_here,
        };
        if slower_than_here && let Some(b) = &here {
            offered.note = format!(
                "no kernel has been measured on {device} for {p} as its catalog entry; the {stand_in} kernel {time_there}, and {about_here}: use the baseline.{run_here_words}"
            );
            return Ok(Some(KernelLookup::BaselineFaster { device_class: device.into(), use_instead: b.clone(), fallback: Some(Box::new(offered)) }));
        }
        offered.note = format!(
            "no kernel has been measured on {device} for {p} as its catalog entry: this is the {stand_in} catalog entry, offered because its PTX \
             (target {}) loads on {device} (compute capability {}.{}). Every timing, speedup and baseline in this answer outside \
             `fallback` was measured on {stand_in}; nothing here says it beats {device}'s baselines. On {stand_in} it {}; {about_here}.{run_here_words} \
             Ask with fallback=none for {device}'s own answer.",
            view.artifact.target,
            cc.0,
            cc.1,
            time_there.trim_end_matches(" there"),
        );
        view.fallback = Some(offered);
        return Ok(Some(KernelLookup::Kernel(view)));
    }
    Ok(None)
}

/// The best kernel measured on `device` (or anywhere), or why there is none.
async fn measured_kernel(db: &DatabaseConnection, p: &Problem, device: Option<&str>) -> Result<KernelLookup, CatalogError> {
    let Some(prow) = find_problem(db, p).await? else {
        return Ok(KernelLookup::None { use_instead: None });
    };
    let entries = current_entries_of(db, prow.id).await?;
    let all_devices: Vec<DeviceClass> = entries.iter().map(|e| e.device_class.clone()).collect();
    let candidates: Vec<&catalog_entry::Model> =
        entries.iter().filter(|e| device.is_none_or(|d| e.device_class == d)).collect();
    let data = EntryData::load(db, candidates.iter().map(|e| e.run_id).collect()).await?;
    // Without a device class, the fastest kernel anywhere; unbenchmarked ones last.
    let mut views = Vec::new();
    for e in candidates {
        let r = data.runs.get(&e.run_id).ok_or_else(|| CatalogError::Corrupt(format!("run {} missing", e.run_id)))?;
        views.push((e, r, graph_figures(&run_view(r)).0.unwrap_or(f64::INFINITY)));
    }
    views.sort_by(|a, b| a.2.total_cmp(&b.2).then_with(|| a.0.device_class.cmp(&b.0.device_class)));
    let Some((entry, r, _)) = views.first() else {
        // No kernel: point at the fastest baseline measured on the asked device (or any).
        let mut best: Option<(DeviceClass, BaselineView)> = None;
        let devices: Vec<DeviceClass> = match device {
            Some(d) => vec![d.into()],
            None => baseline_devices(db, prow.id).await?,
        };
        for d in devices {
            if let Some(b) = fastest_baseline(&baselines_for(db, prow.id, &d).await?)
                && best.as_ref().is_none_or(|(_, x)| b.median_us < x.median_us)
            {
                best = Some((d, b));
            }
        }
        return Ok(KernelLookup::None { use_instead: best });
    };
    let m = data.manifests.get(&r.manifest_id).ok_or_else(|| CatalogError::Corrupt(format!("manifest {} missing", r.manifest_id)))?;
    let a = data.artifacts.get(&m.artifact_sha256).ok_or_else(|| CatalogError::Corrupt(format!("artifact {} missing", m.artifact_sha256)))?;
    let manifest: Manifest =
        serde_json::from_str(&m.body).map_err(|e| CatalogError::Corrupt(format!("manifest {}: {e}", m.id)))?;
    let run = run_view(r);
    let (_, _, speedups) = graph_figures(&run);
    let baselines = baselines_for(db, prow.id, &entry.device_class).await?;
    if beats_all(&speedups) == Some(false)
        && let Some(b) = fastest_baseline(&baselines)
    {
        return Ok(KernelLookup::BaselineFaster { device_class: entry.device_class.clone(), use_instead: b, fallback: None });
    }
    let (submitter, name) = data.owner(r);
    let record = run_record(r, &manifest, &a.sha256);
    Ok(KernelLookup::Kernel(Box::new(KernelView {
        problem: *p,
        device_class: entry.device_class.clone(),
        measured_on: entry.device_class.clone(),
        fallback: None,
        submitter,
        name,
        manifest,
        artifact: artifact_view(a),
        benchmarked: speedups.is_some(),
        beats: beaten(&speedups),
        record,
        signature: None,
        run,
        baselines,
        other_device_classes: all_devices.into_iter().filter(|d| d != &entry.device_class).collect(),
    })))
}

async fn baseline_devices<C: ConnectionTrait>(db: &C, problem_id: i32) -> Result<Vec<DeviceClass>, DbErr> {
    let mut v: Vec<DeviceClass> = baseline::Entity::find()
        .filter(baseline::Column::ProblemId.eq(problem_id))
        .all(db)
        .await?
        .into_iter()
        .map(|b| b.device_class)
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

pub async fn artifact<C: ConnectionTrait>(db: &C, sha256: &str) -> Result<Option<artifact::Model>, DbErr> {
    artifact::Entity::find_by_id(sha256.to_string()).one(db).await
}

/// Per-problem ranking: each submitter's best passing, benchmarked run.
pub async fn problem_leaderboard(
    db: &DatabaseConnection,
    p: &Problem,
    device: Option<&str>,
) -> Result<ProblemLeaderboardView, CatalogError> {
    let Some(prow) = find_problem(db, p).await? else {
        return Ok(ProblemLeaderboardView { problem: *p, rows: vec![] });
    };
    let mut q = run::Entity::find().filter(run::Column::ProblemId.eq(prow.id)).filter(run::Column::Verdict.eq("pass"));
    if let Some(d) = device {
        q = q.filter(run::Column::DeviceClass.eq(d));
    }
    let runs = q.all(db).await?;
    let data = EntryData::load(db, runs.iter().map(|r| r.id).collect()).await?;
    // Best run per (submitter, device class).
    let mut best: HashMap<(i32, DeviceClass), (f64, &run::Model)> = HashMap::new();
    for r in &runs {
        let Some(sub) = r.submission_id.and_then(|id| data.submissions.get(&id)) else { continue };
        let Some(median) = graph_figures(&run_view(r)).0 else { continue };
        let key = (sub.submitter_id, r.device_class.clone());
        if best.get(&key).is_none_or(|(m, old)| median < *m || (median == *m && r.id < old.id)) {
            best.insert(key, (median, r));
        }
    }
    let mut rows: Vec<LeaderboardRow> = best
        .into_values()
        .map(|(median, r)| {
            let view = run_view(r);
            let (_, tflops, speedups) = graph_figures(&view);
            LeaderboardRow {
                rank: 0,
                submitter: data.owner(r).0,
                submission_id: r.submission_id.unwrap_or_default(),
                run_id: r.id,
                device_class: r.device_class.clone(),
                median_us: median,
                tflops,
                speedup_vs_autotune_max: speedups.as_ref().and_then(|s| s.get(AUTOTUNE_MAX)).and_then(|v| v.as_f64()),
                measured_at: r.created_at,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        a.device_class.cmp(&b.device_class).then(a.median_us.total_cmp(&b.median_us)).then(a.run_id.cmp(&b.run_id))
    });
    let mut rank = 0;
    let mut last_device = DeviceClass::default();
    for row in &mut rows {
        if row.device_class != last_device {
            rank = 0;
            last_device = row.device_class.clone();
        }
        rank += 1;
        row.rank = rank;
    }
    Ok(ProblemLeaderboardView { problem: *p, rows })
}

/// Submitters ranked by problems held, then by geometric-mean speedup over
/// cuBLASLt-autotune-max on the problems they entered; on one device class, or on all.
pub async fn global_leaderboard(db: &DatabaseConnection, device: Option<&str>) -> Result<LeaderboardView, CatalogError> {
    let on_class = |d: &str| device.is_none_or(|want| want == d);
    let entries: Vec<_> = current_entries(db).await?.into_iter().filter(|e| on_class(&e.device_class)).collect();
    let all_runs = run::Entity::find().filter(run::Column::Verdict.eq("pass")).all(db).await?;
    let device_classes: Vec<DeviceClass> = all_runs.iter().map(|r| r.device_class.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let runs: Vec<run::Model> = all_runs.into_iter().filter(|r| on_class(&r.device_class)).collect();
    let data = EntryData::load(db, runs.iter().map(|r| r.id).collect()).await?;
    let submitter_of = |r: &run::Model| r.submission_id.and_then(|id| data.submissions.get(&id)).map(|s| s.submitter_id);
    let mut held: HashMap<i32, u32> = HashMap::new();
    let mut classes: HashMap<i32, BTreeSet<DeviceClass>> = HashMap::new();
    for e in &entries {
        if let Some(who) = data.runs.get(&e.run_id).and_then(submitter_of) {
            *held.entry(who).or_default() += 1;
            classes.entry(who).or_default().insert(e.device_class.clone());
        }
    }
    // Best speedup per (submitter, device class, problem).
    let mut best: HashMap<(i32, DeviceClass, i32), Option<f64>> = HashMap::new();
    for r in &runs {
        let Some(who) = submitter_of(r) else { continue };
        let view = run_view(r);
        let (median, _, speedups) = graph_figures(&view);
        if median.is_none() {
            continue;
        }
        let s = speedups.as_ref().and_then(|s| s.get(AUTOTUNE_MAX)).and_then(|v| v.as_f64());
        let slot = best.entry((who, r.device_class.clone(), r.problem_id)).or_insert(None);
        if let Some(x) = s
            && slot.is_none_or(|y| x > y)
        {
            *slot = Some(x);
        }
    }
    let mut per: HashMap<i32, (u32, Vec<f64>)> = HashMap::new();
    for ((who, class, _), s) in best {
        classes.entry(who).or_default().insert(class);
        let e = per.entry(who).or_default();
        e.0 += 1;
        if let Some(x) = s {
            e.1.push(x);
        }
    }
    let mut standings: Vec<SubmitterStanding> = data
        .submitters
        .values()
        .filter(|s| held.contains_key(&s.id) || per.contains_key(&s.id))
        .map(|s| {
            let (entered, speedups) = per.get(&s.id).cloned().unwrap_or_default();
            SubmitterStanding {
                rank: 0,
                submitter: s.name.clone(),
                problems_held: held.get(&s.id).copied().unwrap_or(0),
                problems_entered: entered,
                geomean_speedup_vs_autotune_max: geomean(&speedups),
                device_classes: classes.get(&s.id).map(|c| c.iter().cloned().collect()).unwrap_or_default(),
            }
        })
        .collect();
    standings.sort_by(|a, b| {
        b.problems_held
            .cmp(&a.problems_held)
            .then(b.geomean_speedup_vs_autotune_max.unwrap_or(0.0).total_cmp(&a.geomean_speedup_vs_autotune_max.unwrap_or(0.0)))
            .then(a.submitter.cmp(&b.submitter))
    });
    for (i, s) in standings.iter_mut().enumerate() {
        s.rank = i as u32 + 1;
    }
    Ok(LeaderboardView { device_class: device.map(DeviceClass::from), device_classes, submitters: standings })
}

/// True when the database holds no catalog entries and no baselines.
pub async fn is_empty<C: ConnectionTrait>(db: &C) -> Result<bool, DbErr> {
    use sea_orm::PaginatorTrait;
    Ok(catalog_entry::Entity::find().count(db).await? == 0 && baseline::Entity::find().count(db).await? == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_speedups_cap_graph_by_paced_where_timed() {
        let s = serde_json::json!({
            "graph": {"cublas_max": 1.08, "cublaslt_autotune_max": 1.04, "cublaslt_heuristic_max": 1.06},
            "offline": {"cublas_max": 0.5},
            "server": {"cublas_max": 0.1},
            "paced": {"cublas_max": 1.02, "cublaslt_autotune_max": 0.95, "cublaslt_heuristic_max": null},
        });
        let r = ranked_speedups(Some(&s)).unwrap();
        assert_eq!(r, serde_json::json!({"cublas_max": 1.02, "cublaslt_autotune_max": 0.95, "cublaslt_heuristic_max": 1.06}));
        assert_eq!(beats_all(&Some(r)), Some(false), "loses paced: not served");
        // Paced faster than back to back: graph's figure stands; offline and server never count.
        let s = serde_json::json!({"graph": {"cublas_max": 1.03}, "paced": {"cublas_max": 1.2}, "offline": {"cublas_max": 0.5}, "server": {"cublas_max": 0.5}});
        assert_eq!(ranked_speedups(Some(&s)), Some(serde_json::json!({"cublas_max": 1.03})));
        assert_eq!(ranked_speedups(Some(&serde_json::json!({"paced": {"cublas_max": 1.2}}))), None, "no graph table");
        assert_eq!(ranked_speedups(None), None);
    }

    /// The committed cross-language fixture (`clients/python/tests/data/signed_record.json`)
    /// is what this code produces: the Python client's tests check its canonical bytes and
    /// signature against it. `KAAS_WRITE_FIXTURES=1` rewrites it.
    #[test]
    fn the_python_fixture_is_what_rust_signs() {
        // A TEST-ONLY seed, public on purpose: it signs nothing but this fixture.
        let key = crate::signing::KeyPair::from_seed(&[7u8; 32]);
        let ptx = ".version 8.8\n.target sm_90\n.address_size 64\n// fixture: signing\n";
        let manifest = crate::manifest::Manifest {
            abi: crate::manifest::ABI.into(),
            problem: crate::problem::Problem::new(
                crate::problem::Arch::Sm90,
                crate::problem::Acc::F32,
                crate::problem::Layout::Tn,
                crate::problem::Shape::new(4096, 4096, 4096).unwrap(),
            ),
            workspace_bytes: 0,
            launches: vec![crate::manifest::Launch {
                entry: "hgemm".into(),
                grid: [32, 32, 1],
                block: [256, 1, 1],
                cluster: [1, 1, 1],
                shared_mem_bytes: 49152,
                params: crate::manifest::pointer_params(),
            }],
        };
        let run = crate::db::entities::run::Model {
            id: 42,
            submission_id: Some(7),
            manifest_id: 3,
            problem_id: 1,
            device_class: "H100-SXM".into(),
            verdict: "pass".into(),
            message: "verified and benchmarked: \"quoted\", back\\slash, tab\t, bell\u{7}, é → 😀".into(),
            timings: Some(r#"{"graph": {"median_us": 900.0, "ci95_low_us": 899.5, "ci95_high_us": 900.25, "tflops": 152.7, "samples": 200}, "server": {"median_us": 1.5e-7, "p99_us": 1e21}}"#.into()),
            speedups: Some(r#"{"graph": {"cublaslt_autotune_max": 1.0823, "cublas_max": 1.1}}"#.into()),
            regime: Some("l2_cold".into()),
            regimes: Some(r#"{"l2_cold": {"buffer_sets": 3, "l2_multiple": 2.25, "cache": "l2_cold", "timings": {"graph": {"median_us": 900.0}}, "speedups": {"graph": {"cublaslt_autotune_max": 1.0823}}}, "l2_warm": {"buffer_sets": 1, "l2_multiple": 0.75, "cache": "l2_warm", "timings": {"graph": {"median_us": 880.5}}, "speedups": {"graph": {"cublaslt_autotune_max": 1.1}}}}"#.into()),
            device: Some(r#"{"model": "NVIDIA H100 80GB HBM3", "sm_clock_mhz": 1980, "temperature_c": 41.5, "tiny": 0.000015, "big": 1e16, "neg": -2.5, "zero": -0.0, "u64": 18446744073709551615, "i64": -9223372036854775808}"#.into()),
            created_at: chrono::DateTime::parse_from_rfc3339("2026-11-20T12:00:00.123456Z").unwrap().to_utc(),
            details: Some(r#"{"stage": "deviation", "checks": [{"name": "exact", "passed": true, "detail": "4 runs", "ms": 12.5}]}"#.into()),
        };
        let record = run_record(&run, &manifest, &crate::signing::sha256_hex(ptx.as_bytes())).to_value();
        let signature = key.sign(&record);
        key.public().verify(&record, &signature).unwrap();
        let fixture = serde_json::json!({
            "comment": "Made by the Rust test catalog::tests::the_python_fixture_is_what_rust_signs with a TEST-ONLY seed (32 bytes of 7); it signs nothing else.",
            "test_only_seed_hex": key.seed_hex(),
            "public_key": key.public().to_base64(),
            "key_id": key.key_id(),
            "ptx": ptx,
            "record": record,
            "canonical": crate::signing::canonical_json(&record),
            "signature": signature,
        });
        let text = serde_json::to_string_pretty(&fixture).unwrap() + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/tests/data/signed_record.json");
        if std::env::var("KAAS_WRITE_FIXTURES").as_deref() == Ok("1") {
            std::fs::write(path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(committed, text, "{path} is stale: rerun this test with KAAS_WRITE_FIXTURES=1");
    }
}
