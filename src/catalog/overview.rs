//! The catalog at a glance, shaped for the UI.
//!
//! - `heatmap`: every problem of one (arch, acc, layout, K) selection as an M×N cell,
//!   with the figures of its catalog entry on one device class in every timing mode.
//!   `GET /v1/problems` carries graph-mode speedups only and every K at once; this
//!   answers one K in all modes, so the page stays small on a large catalog and the mode
//!   selector needs no further requests.
//! - `stats`: the headline figures of the whole catalog in a few hundred bytes, where
//!   computing them in the browser would download every problem.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{AUTOTUNE_MAX, CatalogError, EntryData, beats_all, current_entries, geomean, graph_figures, problem_of, run_view};
use crate::db::entities::{baseline, device_class, job, problem, run, tune};
use crate::problem::{Acc, Arch, Layout, Problem};
use crate::problem::DeviceClass;

/// What the heatmap is asked for; every field left out is chosen by the service.
#[derive(Debug, Clone, Default)]
pub struct HeatmapQuery {
    pub arch: Option<Arch>,
    pub acc: Option<Acc>,
    pub layout: Option<Layout>,
    pub k: Option<u32>,
    pub device: Option<String>,
}

/// What a device class holds for one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    /// A catalog entry timed side by side with the baselines.
    Kernel,
    /// A catalog entry that was verified but not timed.
    Unbenchmarked,
    /// No catalog entry; baselines were measured.
    BaselineOnly,
    /// Nothing measured on this device class.
    Empty,
}

/// Timing figures of a catalog entry in one mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModeFigures {
    pub median_us: Option<f64>,
    pub ci95_low_us: Option<f64>,
    pub ci95_high_us: Option<f64>,
    pub tflops: Option<f64>,
    /// Speedup over each baseline (`cublaslt_autotune_max`, …) in this mode.
    pub speedups: BTreeMap<String, f64>,
}

/// One problem of the selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HeatmapCell {
    pub m: u32,
    pub n: u32,
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`, the path of the kernel URLs.
    pub path: String,
    pub state: CellState,
    /// Who holds the catalog entry, when there is one.
    pub submitter: Option<String>,
    /// The catalog entry's figures by mode (`graph`, `offline`, `server`, `paced`).
    pub modes: BTreeMap<String, ModeFigures>,
    /// The fastest baseline's median by mode, when baselines were measured.
    pub fastest_baseline_us: BTreeMap<String, f64>,
    /// Whether the kernel endpoint serves this cell's entry: false for a kernel that some
    /// baseline beats (the answer is `baseline_faster`), which the page must not colour
    /// like one that is served.
    pub served: bool,
}

/// `GET /v1/heatmap`: the selection made (the service's choice where none was asked),
/// what could be chosen instead, and one cell per problem of the selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HeatmapView {
    pub arch: Option<Arch>,
    pub acc: Option<Acc>,
    pub layout: Option<Layout>,
    pub k: Option<u32>,
    pub device_class: Option<DeviceClass>,
    pub archs: Vec<Arch>,
    pub accs: Vec<Acc>,
    pub layouts: Vec<Layout>,
    /// K values of the problems with the chosen arch, acc and layout.
    pub ks: Vec<u32>,
    /// Device classes with catalog entries or baselines.
    pub device_classes: Vec<DeviceClass>,
    /// Classes whose kernels the kernel endpoint offers, labelled, for `device_class`'s
    /// problems without an answer of their own (`STAND_INS`); the grid shows only what
    /// was measured on `device_class`, so the page says so.
    pub stand_ins: Vec<String>,
    /// Baseline names found in the cells' speedup tables.
    pub baselines: Vec<String>,
    /// Modes found in the cells' timings.
    pub modes: Vec<String>,
    pub cells: Vec<HeatmapCell>,
}

/// The asked value when given, else the first of `preferred` that holds catalog entries
/// (`held`), else the value holding the most, else the first one present: what a page
/// opened without a selection shows is kernels, not an empty corner of the catalog.
fn choose<T: Copy + Ord>(asked: Option<T>, present: &BTreeSet<T>, held: &BTreeMap<T, usize>, preferred: &[T]) -> Option<T> {
    asked
        .or_else(|| preferred.iter().find(|v| present.contains(v) && held.get(v).is_some_and(|n| *n > 0)).copied())
        .or_else(|| present.iter().filter(|v| held.contains_key(v)).max_by(|a, b| held[*a].cmp(&held[*b]).then(b.cmp(a))).copied())
        .or_else(|| present.iter().next().copied())
}

/// How many of `entries` fall on each value of `key`.
fn tally<T: Copy + Ord>(entries: &[Problem], key: impl Fn(&Problem) -> Option<T>) -> BTreeMap<T, usize> {
    let mut n = BTreeMap::new();
    for p in entries {
        if let Some(v) = key(p) {
            *n.entry(v).or_default() += 1;
        }
    }
    n
}

fn number(v: Option<&serde_json::Value>, key: &str) -> Option<f64> {
    v.and_then(|v| v.get(key)).and_then(|x| x.as_f64()).filter(|x| x.is_finite())
}

/// Per-mode figures from a run's stored `timings` and `speedups` JSON.
fn mode_figures(timings: Option<&serde_json::Value>, speedups: Option<&serde_json::Value>) -> BTreeMap<String, ModeFigures> {
    let mut modes: BTreeMap<String, ModeFigures> = BTreeMap::new();
    let blank = || ModeFigures { median_us: None, ci95_low_us: None, ci95_high_us: None, tflops: None, speedups: BTreeMap::new() };
    if let Some(serde_json::Value::Object(t)) = timings {
        for (mode, stats) in t {
            let f = modes.entry(mode.clone()).or_insert_with(blank);
            f.median_us = number(Some(stats), "median_us");
            f.ci95_low_us = number(Some(stats), "ci95_low_us");
            f.ci95_high_us = number(Some(stats), "ci95_high_us");
            f.tflops = number(Some(stats), "tflops");
        }
    }
    if let Some(serde_json::Value::Object(s)) = speedups {
        for (mode, table) in s {
            let serde_json::Value::Object(table) = table else { continue };
            let f = modes.entry(mode.clone()).or_insert_with(blank);
            f.speedups = table.iter().filter_map(|(k, v)| v.as_f64().filter(|x| x.is_finite()).map(|x| (k.clone(), x))).collect();
        }
    }
    modes
}

pub async fn heatmap(db: &DatabaseConnection, q: &HeatmapQuery) -> Result<HeatmapView, CatalogError> {
    // A problem known only from work that never ran (a queued submission's job, a tuning
    // request's tune) adds no row, column or K; the catalog's own problems all show.
    let unmeasured = asked_but_unmeasured(db).await?;
    let rows = problem::Entity::find().all(db).await?;
    let mut problems = Vec::with_capacity(rows.len());
    for row in rows.iter().filter(|r| !unmeasured.contains(&r.id)) {
        problems.push((row.id, problem_of(row)?));
    }
    // Device classes: those registered, and any that hold entries or baselines.
    let entries = current_entries(db).await?;
    let mut held: BTreeMap<DeviceClass, usize> = BTreeMap::new();
    for e in &entries {
        *held.entry(e.device_class.clone()).or_default() += 1;
    }
    let mut devices: BTreeSet<DeviceClass> = device_class::Entity::find().all(db).await?.into_iter().map(|d| DeviceClass::new(d.name)).collect();
    devices.extend(held.keys().cloned());
    // The busiest device class by default, the first by name among equals.
    let device = q.device.as_deref().map(DeviceClass::from).or_else(|| {
        devices.iter().max_by(|a, b| held.get(*a).unwrap_or(&0).cmp(held.get(*b).unwrap_or(&0)).then(b.cmp(a))).cloned()
    });
    // The problems that device holds entries for, to choose a selection with kernels.
    let by_id: HashMap<i32, Problem> = problems.iter().copied().collect();
    let on_class: Vec<Problem> =
        entries.iter().filter(|e| Some(&e.device_class) == device.as_ref()).filter_map(|e| by_id.get(&e.problem_id).copied()).collect();

    let archs: BTreeSet<Arch> = problems.iter().map(|(_, p)| p.arch).collect();
    let arch = choose(q.arch, &archs, &tally(&on_class, |p| Some(p.arch)), &[]);
    let accs: BTreeSet<Acc> = problems.iter().filter(|(_, p)| Some(p.arch) == arch).map(|(_, p)| p.acc).collect();
    // fp32 accumulation is torch's fp16 matmul and the shipped catalog's.
    let acc = choose(q.acc, &accs, &tally(&on_class, |p| (Some(p.arch) == arch).then_some(p.acc)), &[Acc::F32]);
    let layouts: BTreeSet<Layout> =
        problems.iter().filter(|(_, p)| Some(p.arch) == arch && Some(p.acc) == acc).map(|(_, p)| p.layout).collect();
    // `tn` is `nn.Linear`'s weight layout: what most users came for.
    let layout =
        choose(q.layout, &layouts, &tally(&on_class, |p| (Some(p.arch) == arch && Some(p.acc) == acc).then_some(p.layout)), &[Layout::Tn]);
    let same_kind = |p: &Problem| Some(p.arch) == arch && Some(p.acc) == acc && Some(p.layout) == layout;
    let ks: BTreeSet<u32> = problems.iter().filter(|(_, p)| same_kind(p)).map(|(_, p)| p.k).collect();
    let k = choose(q.k, &ks, &tally(&on_class, |p| same_kind(p).then_some(p.k)), &[]);
    let selected: Vec<(i32, Problem)> = problems.into_iter().filter(|(_, p)| same_kind(p) && Some(p.k) == k).collect();

    let ids: Vec<i32> = selected.iter().map(|(id, _)| *id).collect();
    let id_set: BTreeSet<i32> = ids.iter().copied().collect();
    let on_device: HashMap<i32, i32> = entries
        .iter()
        .filter(|e| Some(&e.device_class) == device.as_ref() && id_set.contains(&e.problem_id))
        .map(|e| (e.problem_id, e.run_id))
        .collect();
    let data = EntryData::load(db, on_device.values().copied().collect()).await?;
    // The latest row per (problem, library, layout, mode), as the problem page shows them.
    let mut latest: BTreeMap<(i32, String, String, String), (i32, f64)> = BTreeMap::new();
    if let Some(d) = &device {
        for b in baseline::Entity::find()
            .filter(baseline::Column::DeviceClass.eq(d.as_str()))
            .filter(baseline::Column::ProblemId.is_in(ids.clone()))
            .all(db)
            .await?
        {
            let key = (b.problem_id, b.library, b.layout, b.mode);
            if latest.get(&key).is_none_or(|(id, _)| b.id > *id) {
                latest.insert(key, (b.id, b.median_us));
            }
        }
    }
    let mut fastest: HashMap<i32, BTreeMap<String, f64>> = HashMap::new();
    for ((problem_id, _, _, mode), (_, median)) in latest {
        let slot = fastest.entry(problem_id).or_default().entry(mode).or_insert(f64::INFINITY);
        *slot = slot.min(median);
    }

    let mut baselines = BTreeSet::new();
    let mut modes = BTreeSet::new();
    let mut cells = Vec::with_capacity(selected.len());
    for (id, p) in &selected {
        let run = on_device.get(id).and_then(|run_id| data.runs.get(run_id));
        let figures = run.map(|r| {
            let view = run_view(r);
            mode_figures(view.timings.as_ref(), view.speedups.as_ref())
        });
        let fastest_baseline_us = fastest.remove(id).unwrap_or_default();
        let graph_table = run.map(|r| graph_figures(&run_view(r)).2).unwrap_or_default();
        // The kernel endpoint's rule: a kernel that some baseline beats is not served
        // where a graph-mode baseline was measured (`best_kernel`).
        let served = run.is_some() && !(beats_all(&graph_table) == Some(false) && fastest_baseline_us.contains_key("graph"));
        let state = match (&figures, run) {
            (Some(f), Some(_)) if f.values().any(|m| m.median_us.is_some()) => CellState::Kernel,
            (_, Some(_)) => CellState::Unbenchmarked,
            (_, None) if !fastest_baseline_us.is_empty() => CellState::BaselineOnly,
            _ => CellState::Empty,
        };
        let figures = figures.unwrap_or_default();
        for (mode, f) in &figures {
            modes.insert(mode.clone());
            baselines.extend(f.speedups.keys().cloned());
        }
        cells.push(HeatmapCell {
            m: p.m,
            n: p.n,
            path: p.path(),
            state,
            submitter: run.map(|r| data.owner(r).0),
            modes: figures,
            fastest_baseline_us,
            served,
        });
    }
    cells.sort_by_key(|c| (c.m, c.n));
    Ok(HeatmapView {
        arch,
        acc,
        layout,
        k,
        archs: archs.into_iter().collect(),
        accs: accs.into_iter().collect(),
        layouts: layouts.into_iter().collect(),
        ks: ks.into_iter().collect(),
        stand_ins: device.as_deref().map(stand_ins_for).unwrap_or_default(),
        device_class: device,
        device_classes: devices.into_iter().collect(),
        baselines: baselines.into_iter().collect(),
        modes: modes.into_iter().collect(),
        cells,
    })
}

/// The classes whose kernels stand in for `device`'s missing answers ([`super::STAND_INS`]).
pub fn stand_ins_for(device: &str) -> Vec<String> {
    super::STAND_INS.iter().filter(|(asking, _)| *asking == device).flat_map(|(_, s)| s.iter().map(|c| c.to_string())).collect()
}

/// A catalog entry to show as an example: one the kernel endpoint serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExampleEntry {
    pub problem: Problem,
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub path: String,
    pub device_class: DeviceClass,
}

/// `GET /v1/stats`: headline figures of the catalog as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CatalogStats {
    /// Problems in the database (with kernels, baselines, or neither yet).
    pub problems: u32,
    /// Problems with a catalog entry on at least one device class.
    pub problems_covered: u32,
    /// Catalog entries: (device class, problem) pairs with a kernel.
    pub entries: u32,
    /// Distinct PTX artifacts among the catalog entries.
    pub kernels: u32,
    /// Device classes holding catalog entries.
    pub device_classes: Vec<DeviceClass>,
    /// Entries timed side by side with the baselines (graph mode).
    pub benchmarked_entries: u32,
    /// Geometric mean over benchmarked entries of the graph-mode speedup over
    /// cuBLASLt-autotune-max.
    pub geomean_speedup_vs_autotune_max: Option<f64>,
    /// An entry the kernel endpoint serves (it beats its baselines, or was not
    /// benchmarked), preferring the fastest relative to cuBLASLt-autotune-max.
    pub example: Option<ExampleEntry>,
}

pub async fn stats(db: &DatabaseConnection) -> Result<CatalogStats, CatalogError> {
    use sea_orm::PaginatorTrait;
    let problems = problem::Entity::find().count(db).await?;
    let entries = current_entries(db).await?;
    let data = EntryData::load(db, entries.iter().map(|e| e.run_id).collect()).await?;
    let mut covered = BTreeSet::new();
    let mut kernels = BTreeSet::new();
    let mut devices = BTreeSet::new();
    let mut speedups = Vec::new();
    // (served rank, speedup) of the best example so far: beats baselines > unbenchmarked.
    let mut example: Option<((u8, f64), i32, DeviceClass)> = None;
    for e in &entries {
        let Some(r) = data.runs.get(&e.run_id) else { continue };
        covered.insert(e.problem_id);
        devices.insert(e.device_class.clone());
        if let Some(m) = data.manifests.get(&r.manifest_id) {
            kernels.insert(m.artifact_sha256.clone());
        }
        let (median, _, table) = graph_figures(&run_view(r));
        let speedup = table.as_ref().and_then(|t| t.get(AUTOTUNE_MAX)).and_then(|v| v.as_f64()).filter(|x| x.is_finite() && *x > 0.0);
        if let (Some(_), Some(x)) = (median, speedup) {
            speedups.push(x);
        }
        let rank = match beats_all(&table) {
            Some(true) => (2, speedup.unwrap_or(0.0)),
            None => (1, 0.0),
            Some(false) => continue,
        };
        if example.as_ref().is_none_or(|(best, _, _)| rank.0 > best.0 || (rank.0 == best.0 && rank.1 > best.1)) {
            example = Some((rank, e.problem_id, e.device_class.clone()));
        }
    }
    let example = match example {
        Some((_, problem_id, device_class)) => match problem::Entity::find_by_id(problem_id).one(db).await? {
            Some(row) => {
                let p = problem_of(&row)?;
                Some(ExampleEntry { path: p.path(), problem: p, device_class })
            }
            None => None,
        },
        None => None,
    };
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(CatalogStats {
        problems: u32::try_from(problems).unwrap_or(u32::MAX),
        problems_covered: count(covered.len()),
        entries: count(entries.len()),
        kernels: count(kernels.len()),
        device_classes: devices.into_iter().collect(),
        benchmarked_entries: count(speedups.len()),
        geomean_speedup_vs_autotune_max: geomean(&speedups),
        example,
    })
}

/// Problems that jobs or tunes name but that have neither a run (every catalog entry has
/// one) nor a measured baseline.
async fn asked_but_unmeasured(db: &DatabaseConnection) -> Result<BTreeSet<i32>, sea_orm::DbErr> {
    let ids = |v: Vec<i32>| v.into_iter().collect::<BTreeSet<i32>>();
    let mut asked = ids(job::Entity::find().select_only().column(job::Column::ProblemId).distinct().into_tuple::<i32>().all(db).await?);
    asked.extend(tune::Entity::find().select_only().column(tune::Column::ProblemId).distinct().into_tuple::<i32>().all(db).await?);
    let mut measured = ids(run::Entity::find().select_only().column(run::Column::ProblemId).distinct().into_tuple::<i32>().all(db).await?);
    measured.extend(baseline::Entity::find().select_only().column(baseline::Column::ProblemId).distinct().into_tuple::<i32>().all(db).await?);
    Ok(asked.difference(&measured).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_per_mode_and_ignore_junk() {
        let t = serde_json::json!({"graph": {"median_us": 10.0, "ci95_low_us": 9.9, "ci95_high_us": 10.1, "tflops": 100.0},
                                   "offline": {"median_us": "fast"}});
        let s = serde_json::json!({"graph": {"cublaslt_autotune_max": 1.1, "cublas_max": null}, "offline": 3});
        let f = mode_figures(Some(&t), Some(&s));
        assert_eq!(f["graph"].median_us, Some(10.0));
        assert_eq!(f["graph"].ci95_high_us, Some(10.1));
        assert_eq!(f["graph"].speedups, BTreeMap::from([("cublaslt_autotune_max".to_string(), 1.1)]));
        assert_eq!(f["offline"].median_us, None);
        assert!(f["offline"].speedups.is_empty());
    }
}
