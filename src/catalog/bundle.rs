//! Catalog bundles: a directory with `index.json` (device classes, problems, artifacts,
//! catalog entries with their manifests and runs, baselines, finished tunes with their
//! search traces) and `ptx/<sha256>.ptx`.
//!
//! `export` writes the current catalog canonically (sorted, pretty JSON), so exporting
//! what was imported gives the same bytes. `import` checks the whole bundle before it
//! writes anything, then writes it in one transaction: all or nothing. Importing the same
//! bundle twice adds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};

use super::{CatalogError, current_entries, problem_of};
use crate::db::entities::{artifact, baseline, catalog_entry, device_class, manifest, problem, run, submission, submitter, tune};
use crate::manifest::Manifest;
use crate::signing::sha256_hex;
use crate::problem::Problem;
use crate::problem::DeviceClass;

pub const FORMAT: &str = "kaas.catalog.v1";
/// Largest `index.json` accepted.
const MAX_INDEX_BYTES: u64 = 256 << 20;
/// Baseline rows per INSERT (nine parameters each: well inside SQLite's and Postgres's limits).
const BASELINE_BATCH: usize = 1000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: String,
    pub device_classes: Vec<DeviceClassRecord>,
    pub problems: Vec<Problem>,
    pub artifacts: Vec<ArtifactRecord>,
    pub entries: Vec<EntryRecord>,
    pub baselines: Vec<BaselineRecord>,
    /// Finished tunes (served, baseline_faster, failed): so a problem tuned elsewhere
    /// shows its search on its page. Absent in bundles without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunes: Vec<TuneRecord>,
}

/// A finished tune: its state, why, and the search's trace and result as the worker
/// stored them (`work::tune::Trace`, `work::TuneResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneRecord {
    pub device_class: DeviceClass,
    pub problem: Problem,
    pub state: String,
    pub budget_ms: i64,
    pub stage: Option<String>,
    pub message: Option<String>,
    pub trace: Option<serde_json::Value>,
    pub result: Option<serde_json::Value>,
    pub finished_at: DateTime<Utc>,
}

/// The tune states a bundle carries: the finished ones.
const FINISHED_TUNES: [&str; 3] = ["served", "baseline_faster", "failed"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceClassRecord {
    pub name: String,
    pub model: String,
    pub compute_capability: String,
    pub sm_count: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRecord {
    pub sha256: String,
    pub size_bytes: i64,
    pub ptx_version: String,
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryRecord {
    pub device_class: DeviceClass,
    pub problem: Problem,
    pub artifact: String,
    pub submitter: String,
    pub name: String,
    pub description: String,
    pub manifest: Manifest,
    pub run: RunRecord,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    pub verdict: String,
    pub message: String,
    pub measured_at: DateTime<Utc>,
    pub timings: Option<serde_json::Value>,
    pub speedups: Option<serde_json::Value>,
    /// The cache regime of `timings` and `speedups`; absent for runs timed before
    /// regimes were named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regime: Option<String>,
    /// Every regime's figures (the run's `regimes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regimes: Option<serde_json::Value>,
    pub device: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineRecord {
    pub device_class: DeviceClass,
    pub problem: Problem,
    pub library: String,
    pub layout: String,
    pub mode: String,
    pub median_us: f64,
    pub timing: serde_json::Value,
    pub config: serde_json::Value,
    pub measured_at: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl From<DbErr> for BundleError {
    fn from(e: DbErr) -> Self {
        BundleError::Catalog(CatalogError::Db(e))
    }
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> BundleError {
    BundleError::Invalid { path: path.into(), message: message.into() }
}

/// Whether `s` is a sha256 as artifacts are named: 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks PTX text offered as an artifact and describes it.
pub fn describe_ptx(bytes: &[u8]) -> Result<ArtifactRecord, String> {
    let info = crate::ptx::parse(bytes, &crate::ptx::StaticLimits::default()).map_err(|e| e.to_string())?;
    Ok(ArtifactRecord {
        sha256: sha256_hex(bytes),
        size_bytes: bytes.len() as i64,
        ptx_version: info.version.to_string(),
        target: info.target.to_string(),
    })
}

/// Stores PTX once by sha256 (inside the caller's transaction); returns its record.
pub async fn store_artifact<C: ConnectionTrait>(db: &C, ptx: &str, now: DateTime<Utc>) -> Result<ArtifactRecord, BundleError> {
    store_artifact_for(db, ptx, None, now).await
}

/// [`store_artifact`], charging a new artifact to `uploader` (a submitter id).
pub async fn store_artifact_for<C: ConnectionTrait>(db: &C, ptx: &str, uploader: Option<i32>, now: DateTime<Utc>) -> Result<ArtifactRecord, BundleError> {
    let rec = describe_ptx(ptx.as_bytes()).map_err(|m| invalid("ptx", m))?;
    if artifact::Entity::find_by_id(rec.sha256.clone()).one(db).await?.is_none() {
        // Content-addressed: a concurrent upload of the same PTX stores the same row.
        artifact::Entity::insert(artifact::ActiveModel {
            sha256: Set(rec.sha256.clone()),
            ptx: Set(ptx.to_string()),
            size_bytes: Set(rec.size_bytes),
            ptx_version: Set(rec.ptx_version.clone()),
            target: Set(rec.target.clone()),
            created_at: Set(now),
            uploader_id: Set(uploader),
        })
        .on_conflict(OnConflict::column(artifact::Column::Sha256).do_nothing().to_owned())
        .exec_without_returning(db)
        .await?;
    }
    Ok(rec)
}

fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, BundleError> {
    let io = |source| BundleError::Io { path: path.display().to_string(), source };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > limit {
        return Err(invalid(path.display().to_string(), format!("{len} bytes; the limit is {limit}")));
    }
    std::fs::read(path).map_err(io)
}

const LIBRARIES: [&str; 3] = ["cublas", "cublaslt_heuristic", "cublaslt_autotune"];

/// Reads and checks a bundle without touching the database.
/// Whether a directory holds a bundle index (`index.json`, or `index.json.gz`).
pub fn has_index(dir: &Path) -> bool {
    dir.join("index.json").is_file() || dir.join("index.json.gz").is_file()
}

/// The index text: `index.json`, or else `index.json.gz` (large baseline tables ship
/// compressed), with the same size limit on the decompressed text.
fn read_index(dir: &Path) -> Result<Vec<u8>, BundleError> {
    let plain = dir.join("index.json");
    let gz = dir.join("index.json.gz");
    if plain.exists() || !gz.exists() {
        return read_limited(&plain, MAX_INDEX_BYTES);
    }
    let io = |source| BundleError::Io { path: gz.display().to_string(), source };
    let file = std::fs::File::open(&gz).map_err(io)?;
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(flate2::read::GzDecoder::new(file), MAX_INDEX_BYTES + 1), &mut text)
        .map_err(|e| invalid("index.json.gz", format!("not gzip-compressed JSON: {e}")))?;
    if text.len() as u64 > MAX_INDEX_BYTES {
        return Err(invalid("index.json.gz", format!("decompresses to more than {MAX_INDEX_BYTES} bytes")));
    }
    Ok(text)
}

/// The bundle directories of a tree: `dir` itself when it holds an index, then every
/// bundle directly under it (e.g. `kernels/` and `kernels/baselines-h200/`), in name order.
pub fn tree_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>, BundleError> {
    let io = |source| BundleError::Io { path: dir.display().to_string(), source };
    let mut dirs = vec![];
    if has_index(dir) {
        dirs.push(dir.to_path_buf());
    }
    let mut subdirs: Vec<_> = std::fs::read_dir(dir).map_err(io)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir() && has_index(p)).collect();
    subdirs.sort();
    dirs.extend(subdirs);
    Ok(dirs)
}

/// A bundle read and checked, ready to write.
pub struct ReadBundle {
    pub dir: std::path::PathBuf,
    pub index: Index,
    pub ptx: BTreeMap<String, String>,
}

/// Reads and checks every bundle of a tree (see [`tree_dirs`]) without touching the
/// database; a fault names the bundle it is in.
pub fn read_tree(dir: &Path) -> Result<Vec<ReadBundle>, BundleError> {
    let mut out = vec![];
    for d in tree_dirs(dir)? {
        let (index, ptx) = read_bundle(&d).map_err(|e| match e {
            BundleError::Invalid { path, message } => BundleError::Invalid { path: format!("{}/{path}", d.display()), message },
            other => other,
        })?;
        out.push(ReadBundle { dir: d, index, ptx });
    }
    Ok(out)
}

/// Writes bundles read by [`read_tree`] inside the caller's transaction, in order.
/// Catalog entries whose (problem id, device class) is in `keep` are left as they are.
pub(crate) async fn write_tree<C: ConnectionTrait>(db: &C, bundles: &[ReadBundle], keep: &BTreeSet<(i32, DeviceClass)>) -> Result<ImportReport, BundleError> {
    let mut total = ImportReport::default();
    for b in bundles {
        let r = write_index(db, &b.index, &b.ptx, keep).await?;
        total.artifacts += r.artifacts;
        total.problems += r.problems;
        total.entries += r.entries;
        total.baselines += r.baselines;
        total.tunes += r.tunes;
    }
    Ok(total)
}

/// Imports a bundle directory and every bundle directly under it, all checked first, then
/// written in one transaction: all or nothing.
pub async fn import_tree(db: &DatabaseConnection, dir: &Path) -> Result<ImportReport, BundleError> {
    let bundles = read_tree(dir)?;
    let txn = crate::db::begin_write(db).await?;
    let report = write_tree(&txn, &bundles, &BTreeSet::new()).await?;
    txn.commit().await?;
    Ok(report)
}

/// Every bundle shipped under the repository's `kernels/` (for the tests that check
/// the shipped catalogs): its folder, index and PTX by sha256.
#[cfg(test)]
pub(crate) fn shipped_bundles() -> Vec<(std::path::PathBuf, Index, BTreeMap<String, String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).expect("kernels/").filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()) {
        if let Ok((index, ptx)) = read_bundle(&dir) {
            out.push((dir, index, ptx));
        }
    }
    out
}

pub fn read_bundle(dir: &Path) -> Result<(Index, BTreeMap<String, String>), BundleError> {
    let bytes = read_index(dir)?;
    let index: Index =
        serde_json::from_slice(&bytes).map_err(|e| invalid("index.json", format!("not a {FORMAT} index: {e}")))?;
    if index.format != FORMAT {
        return Err(invalid("index.json", format!("format is `{}`; expected `{FORMAT}`", index.format)));
    }
    let devices: BTreeSet<&str> = index.device_classes.iter().map(|d| d.name.as_str()).collect();
    let problems: BTreeSet<Problem> = index.problems.iter().copied().collect();
    for (i, p) in index.problems.iter().enumerate() {
        p.validate().map_err(|e| invalid(format!("index.json: problems[{i}]"), e.to_string()))?;
    }
    for (i, d) in index.device_classes.iter().enumerate() {
        if d.name.is_empty() || d.name.len() > 64 {
            return Err(invalid(format!("index.json: device_classes[{i}]"), "name must be 1 to 64 characters"));
        }
    }
    // What an entry, baseline or tune refers to must be listed in the index.
    let listed = |at: &str, p: &Problem, device: &str| -> Result<(), BundleError> {
        if !problems.contains(p) {
            return Err(invalid(at, format!("problem {p} is not listed in `problems`")));
        }
        if !devices.contains(device) {
            return Err(invalid(at, format!("device class `{device}` is not listed")));
        }
        Ok(())
    };
    let mut ptx = BTreeMap::new();
    for (i, a) in index.artifacts.iter().enumerate() {
        let at = format!("ptx/{}.ptx", a.sha256);
        if !is_sha256_hex(&a.sha256) {
            return Err(invalid(format!("index.json: artifacts[{i}]"), "sha256 must be 64 lowercase hex digits"));
        }
        let bytes = read_limited(&dir.join(&at), crate::ptx::MAX_PTX_BYTES as u64)?;
        let rec = describe_ptx(&bytes).map_err(|m| invalid(&at, m))?;
        if rec.sha256 != a.sha256 {
            return Err(invalid(&at, format!("content hashes to {}, not the name it is filed under", rec.sha256)));
        }
        if &rec != a {
            return Err(invalid(&at, format!("index says {a:?}, the file is {rec:?}")));
        }
        ptx.insert(a.sha256.clone(), String::from_utf8(bytes).map_err(|e| invalid(&at, e.to_string()))?);
    }
    for (i, e) in index.entries.iter().enumerate() {
        let at = format!("index.json: entries[{i}]");
        e.manifest.validate().map_err(|err| invalid(&at, format!("manifest: {err}")))?;
        if e.manifest.problem != e.problem {
            return Err(invalid(&at, "manifest.problem differs from the entry's problem"));
        }
        listed(&at, &e.problem, &e.device_class)?;
        if !ptx.contains_key(&e.artifact) {
            return Err(invalid(&at, format!("artifact {} is not listed in `artifacts`", e.artifact)));
        }
        if e.run.verdict != "pass" {
            return Err(invalid(&at, format!("a catalog entry needs a passing run, this one is `{}`", e.run.verdict)));
        }
        if e.submitter.is_empty() || e.submitter.len() > 64 {
            return Err(invalid(&at, "submitter must be 1 to 64 characters"));
        }
    }
    for (i, b) in index.baselines.iter().enumerate() {
        let at = format!("index.json: baselines[{i}]");
        listed(&at, &b.problem, &b.device_class)?;
        if !LIBRARIES.contains(&b.library.as_str()) || !crate::bench::stats::Mode::ALL.iter().any(|m| m.as_str() == b.mode) || !["nn", "tn"].contains(&b.layout.as_str()) {
            return Err(invalid(&at, format!("unknown library/layout/mode {}/{}/{}", b.library, b.layout, b.mode)));
        }
        if !(b.median_us.is_finite() && b.median_us > 0.0) {
            return Err(invalid(&at, "median_us must be a positive number"));
        }
    }
    let mut tuned = BTreeSet::new();
    for (i, t) in index.tunes.iter().enumerate() {
        let at = format!("index.json: tunes[{i}]");
        listed(&at, &t.problem, &t.device_class)?;
        if !FINISHED_TUNES.contains(&t.state.as_str()) {
            return Err(invalid(&at, format!("state `{}`: a bundle carries finished tunes only ({})", t.state, FINISHED_TUNES.join(", "))));
        }
        if !tuned.insert((t.problem, t.device_class.as_str())) {
            return Err(invalid(&at, format!("a second tune of {} on {}", t.problem, t.device_class)));
        }
    }
    Ok((index, ptx))
}

/// What an import added.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportReport {
    pub artifacts: usize,
    pub problems: usize,
    pub entries: usize,
    pub baselines: usize,
    #[serde(default)]
    pub tunes: usize,
}

/// Imports a bundle: checked in full first, then written in one transaction.
pub async fn import(db: &DatabaseConnection, dir: &Path) -> Result<ImportReport, BundleError> {
    let (index, ptx) = read_bundle(dir)?;
    let txn = crate::db::begin_write(db).await?;
    let report = write_index(&txn, &index, &ptx, &BTreeSet::new()).await?;
    txn.commit().await?;
    Ok(report)
}

pub(crate) async fn ensure_problem<C: ConnectionTrait>(db: &C, p: &Problem, added: &mut usize) -> Result<i32, DbErr> {
    if let Some(row) = super::find_problem(db, p).await? {
        return Ok(row.id);
    }
    // A concurrent writer (another API replica) may add the same problem: insert if
    // absent, then read whichever row won.
    let inserted = problem::Entity::insert(problem::ActiveModel {
        arch: Set(p.arch.to_string()),
        acc: Set(p.acc.to_string()),
        layout: Set(p.layout.to_string()),
        m: Set(p.m as i32),
        n: Set(p.n as i32),
        k: Set(p.k as i32),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::columns([problem::Column::Arch, problem::Column::Acc, problem::Column::Layout, problem::Column::M, problem::Column::N, problem::Column::K])
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    *added += inserted as usize;
    super::find_problem(db, p).await?.map(|r| r.id).ok_or_else(|| DbErr::RecordNotFound(format!("problem {p} after insert")))
}

pub async fn ensure_submitter<C: ConnectionTrait>(db: &C, name: &str, now: DateTime<Utc>) -> Result<i32, DbErr> {
    if let Some(s) = submitter::Entity::find().filter(submitter::Column::Name.eq(name)).one(db).await? {
        return Ok(s.id);
    }
    let row = submitter::ActiveModel { name: Set(name.to_string()), created_at: Set(now), ..Default::default() }.insert(db).await?;
    Ok(row.id)
}

pub async fn ensure_manifest<C: ConnectionTrait>(db: &C, sha: &str, problem_id: i32, m: &Manifest, now: DateTime<Utc>) -> Result<i32, DbErr> {
    let body = serde_json::to_string(m).map_err(|e| DbErr::Custom(e.to_string()))?;
    let body_sha = sha256_hex(body.as_bytes());
    let find = || {
        manifest::Entity::find()
            .filter(manifest::Column::ArtifactSha256.eq(sha))
            .filter(manifest::Column::ProblemId.eq(problem_id))
            .filter(manifest::Column::BodySha256.eq(body_sha.clone()))
            .one(db)
    };
    if let Some(row) = find().await? {
        return Ok(row.id);
    }
    manifest::Entity::insert(manifest::ActiveModel {
        artifact_sha256: Set(sha.to_string()),
        problem_id: Set(problem_id),
        body_sha256: Set(body_sha.clone()),
        body: Set(body),
        created_at: Set(now),
        ..Default::default()
    })
    .on_conflict(OnConflict::columns([manifest::Column::ArtifactSha256, manifest::Column::ProblemId, manifest::Column::BodySha256]).do_nothing().to_owned())
    .exec_without_returning(db)
    .await?;
    find().await?.map(|r| r.id).ok_or_else(|| DbErr::RecordNotFound(format!("manifest for problem {problem_id} after insert")))
}

fn json_text(v: &Option<serde_json::Value>) -> Option<String> {
    v.as_ref().map(|v| v.to_string())
}

async fn write_index<C: ConnectionTrait>(
    db: &C,
    index: &Index,
    ptx: &BTreeMap<String, String>,
    keep: &BTreeSet<(i32, DeviceClass)>,
) -> Result<ImportReport, BundleError> {
    let now = Utc::now();
    let mut report = ImportReport::default();
    for d in &index.device_classes {
        if device_class::Entity::find_by_id(d.name.clone()).one(db).await?.is_none() {
            device_class::ActiveModel {
                name: Set(d.name.clone()),
                model: Set(d.model.clone()),
                compute_capability: Set(d.compute_capability.clone()),
                sm_count: Set(d.sm_count),
            }
            .insert(db)
            .await?;
        }
    }
    for text in ptx.values() {
        if artifact::Entity::find_by_id(sha256_hex(text.as_bytes())).one(db).await?.is_none() {
            report.artifacts += 1;
        }
        store_artifact(db, text, now).await?;
    }
    let mut problem_ids = BTreeMap::new();
    for p in &index.problems {
        problem_ids.insert(*p, ensure_problem(db, p, &mut report.problems).await?);
    }
    let current: BTreeMap<(i32, DeviceClass), i32> =
        current_entries(db).await?.into_iter().map(|e| ((e.problem_id, e.device_class), e.run_id)).collect();
    for e in &index.entries {
        let problem_id = problem_ids[&e.problem];
        if keep.contains(&(problem_id, e.device_class.clone())) {
            continue;
        }
        let manifest_id = ensure_manifest(db, &e.artifact, problem_id, &e.manifest, now).await?;
        let submitter_id = ensure_submitter(db, &e.submitter, now).await?;
        let submission_id = match submission::Entity::find()
            .filter(submission::Column::SubmitterId.eq(submitter_id))
            .filter(submission::Column::ArtifactSha256.eq(&e.artifact))
            .filter(submission::Column::Name.eq(&e.name))
            // Entries of one artifact and name may come from submissions described apart
            // (the tuner's description names the code as the problem runs it): each keeps
            // its own.
            .filter(submission::Column::Description.eq(&e.description))
            .one(db)
            .await?
        {
            Some(s) => s.id,
            None => {
                submission::ActiveModel {
                    submitter_id: Set(submitter_id),
                    artifact_sha256: Set(e.artifact.clone()),
                    name: Set(e.name.clone()),
                    description: Set(e.description.clone()),
                    source: Set(None),
                    status: Set("imported".into()),
                    created_at: Set(e.run.measured_at),
                    ..Default::default()
                }
                .insert(db)
                .await?
                .id
            }
        };
        let existing = run::Entity::find()
            .filter(run::Column::ManifestId.eq(manifest_id))
            .filter(run::Column::DeviceClass.eq(&e.device_class))
            .filter(run::Column::CreatedAt.eq(e.run.measured_at))
            .one(db)
            .await?;
        let run_id = match existing {
            Some(r) => r.id,
            None => {
                run::ActiveModel {
                    submission_id: Set(Some(submission_id)),
                    manifest_id: Set(manifest_id),
                    problem_id: Set(problem_id),
                    device_class: Set(e.device_class.clone()),
                    verdict: Set(e.run.verdict.clone()),
                    message: Set(e.run.message.clone()),
                    timings: Set(json_text(&e.run.timings)),
                    speedups: Set(json_text(&e.run.speedups)),
                    regime: Set(e.run.regime.clone()),
                    regimes: Set(json_text(&e.run.regimes)),
                    device: Set(json_text(&e.run.device)),
                    created_at: Set(e.run.measured_at),
                    ..Default::default()
                }
                .insert(db)
                .await?
                .id
            }
        };
        if current.get(&(problem_id, e.device_class.clone())) != Some(&run_id) {
            catalog_entry::ActiveModel {
                device_class: Set(e.device_class.clone()),
                problem_id: Set(problem_id),
                run_id: Set(run_id),
                created_at: Set(now),
                ..Default::default()
            }
            .insert(db)
            .await?;
            report.entries += 1;
        }
    }
    // The baselines already stored for these device classes, by key (one query, not one
    // per row: a shipped baseline table has 24,000 rows); new rows go in batches.
    // Timestamps compare to the microsecond, as Postgres stores them.
    let classes: BTreeSet<&str> = index.baselines.iter().map(|b| b.device_class.as_str()).collect();
    let mut stored: BTreeSet<(i32, String, String, String, String, i64)> = BTreeSet::new();
    if !classes.is_empty() {
        let rows: Vec<(i32, String, String, String, String, DateTime<Utc>)> = baseline::Entity::find()
            .select_only()
            .columns([baseline::Column::ProblemId, baseline::Column::DeviceClass, baseline::Column::Library, baseline::Column::Layout, baseline::Column::Mode, baseline::Column::CreatedAt])
            .filter(baseline::Column::DeviceClass.is_in(classes))
            .into_tuple()
            .all(db)
            .await?;
        stored.extend(rows.into_iter().map(|(p, d, l, lay, m, at)| (p, d, l, lay, m, at.timestamp_micros())));
    }
    let mut batch = Vec::new();
    for b in &index.baselines {
        let problem_id = problem_ids[&b.problem];
        let key = (problem_id, b.device_class.to_string(), b.library.clone(), b.layout.clone(), b.mode.clone(), b.measured_at.timestamp_micros());
        if !stored.insert(key) {
            continue;
        }
        batch.push(baseline::ActiveModel {
            problem_id: Set(problem_id),
            device_class: Set(b.device_class.clone()),
            library: Set(b.library.clone()),
            layout: Set(b.layout.clone()),
            mode: Set(b.mode.clone()),
            median_us: Set(b.median_us),
            timing: Set(b.timing.to_string()),
            config: Set(b.config.to_string()),
            created_at: Set(b.measured_at),
            ..Default::default()
        });
        report.baselines += 1;
        if batch.len() == BASELINE_BATCH {
            baseline::Entity::insert_many(std::mem::take(&mut batch)).exec_without_returning(db).await?;
        }
    }
    if !batch.is_empty() {
        baseline::Entity::insert_many(batch).exec_without_returning(db).await?;
    }
    // A tune this database already has (open, or finished here) stays as it is (one query
    // for all of them, as for the baselines).
    let mut tuned: BTreeSet<(i32, String)> = BTreeSet::new();
    if !index.tunes.is_empty() {
        let classes: BTreeSet<&str> = index.tunes.iter().map(|t| t.device_class.as_str()).collect();
        let rows: Vec<(i32, String)> = tune::Entity::find()
            .select_only()
            .columns([tune::Column::ProblemId, tune::Column::DeviceClass])
            .filter(tune::Column::DeviceClass.is_in(classes))
            .into_tuple()
            .all(db)
            .await?;
        tuned.extend(rows);
    }
    for t in &index.tunes {
        let problem_id = problem_ids[&t.problem];
        if !tuned.insert((problem_id, t.device_class.to_string())) {
            continue;
        }
        tune::ActiveModel {
            problem_id: Set(problem_id),
            device_class: Set(t.device_class.clone()),
            state: Set(t.state.clone()),
            priority: Set(0),
            budget_ms: Set(t.budget_ms),
            job_id: Set(None),
            run_id: Set(None),
            requested_by: Set(None),
            stage: Set(t.stage.clone()),
            message: Set(t.message.clone()),
            trace: Set(json_text(&t.trace)),
            result: Set(json_text(&t.result)),
            created_at: Set(t.finished_at),
            updated_at: Set(t.finished_at),
            finished_at: Set(Some(t.finished_at)),
            ..Default::default()
        }
        .insert(db)
        .await?;
        report.tunes += 1;
    }
    Ok(report)
}

fn parse_json(text: &str, what: &str) -> Result<serde_json::Value, CatalogError> {
    serde_json::from_str(text).map_err(|e| CatalogError::Corrupt(format!("{what}: {e}")))
}

/// The current catalog as a canonical index, plus the PTX it references.
pub async fn snapshot(db: &DatabaseConnection) -> Result<(Index, BTreeMap<String, String>), CatalogError> {
    let entries = current_entries(db).await?;
    let problems: BTreeMap<i32, Problem> =
        problem::Entity::find().all(db).await?.iter().map(|p| Ok((p.id, problem_of(p)?))).collect::<Result<_, CatalogError>>()?;
    let data = super::EntryData::load(db, entries.iter().map(|e| e.run_id).collect()).await?;
    let mut records = Vec::new();
    let mut ptx = BTreeMap::new();
    let mut used_problems = BTreeSet::new();
    let mut used_devices = BTreeSet::new();
    for e in &entries {
        let missing = |what: &str| CatalogError::Corrupt(format!("catalog entry {}: {what} missing", e.id));
        let r = data.runs.get(&e.run_id).ok_or_else(|| missing("run"))?;
        let m = data.manifests.get(&r.manifest_id).ok_or_else(|| missing("manifest"))?;
        let a = data.artifacts.get(&m.artifact_sha256).ok_or_else(|| missing("artifact"))?;
        let sub = r.submission_id.and_then(|id| data.submissions.get(&id));
        let problem = *problems.get(&e.problem_id).ok_or_else(|| missing("problem"))?;
        used_problems.insert(problem);
        used_devices.insert(e.device_class.clone());
        ptx.insert(a.sha256.clone(), a.ptx.clone());
        records.push(EntryRecord {
            device_class: e.device_class.clone(),
            problem,
            artifact: a.sha256.clone(),
            submitter: data.owner(r).0,
            name: sub.map(|s| s.name.clone()).unwrap_or_default(),
            description: sub.map(|s| s.description.clone()).unwrap_or_default(),
            manifest: serde_json::from_str(&m.body).map_err(|err| CatalogError::Corrupt(format!("manifest {}: {err}", m.id)))?,
            run: RunRecord {
                verdict: r.verdict.clone(),
                message: r.message.clone(),
                measured_at: r.created_at,
                timings: r.timings.as_deref().map(|t| parse_json(t, "timings")).transpose()?,
                speedups: r.speedups.as_deref().map(|t| parse_json(t, "speedups")).transpose()?,
                regime: r.regime.clone(),
                regimes: r.regimes.as_deref().map(|t| parse_json(t, "regimes")).transpose()?,
                device: r.device.as_deref().map(|t| parse_json(t, "device")).transpose()?,
            },
        });
    }
    // Latest baseline per (problem, device, library, layout, mode).
    let mut latest: BTreeMap<(Problem, DeviceClass, String, String, String), baseline::Model> = BTreeMap::new();
    for b in baseline::Entity::find().all(db).await? {
        let p = *problems.get(&b.problem_id).ok_or_else(|| CatalogError::Corrupt(format!("baseline {}: problem", b.id)))?;
        let key = (p, b.device_class.clone(), b.library.clone(), b.layout.clone(), b.mode.clone());
        if latest.get(&key).is_none_or(|old| old.id < b.id) {
            latest.insert(key, b);
        }
    }
    let mut baselines = Vec::new();
    for ((p, ..), b) in latest {
        used_problems.insert(p);
        used_devices.insert(b.device_class.clone());
        baselines.push(BaselineRecord {
            device_class: b.device_class,
            problem: p,
            library: b.library,
            layout: b.layout,
            mode: b.mode,
            median_us: b.median_us,
            timing: parse_json(&b.timing, "baseline timing")?,
            config: parse_json(&b.config, "baseline config")?,
            measured_at: b.created_at,
        });
    }
    let mut tunes = Vec::new();
    for t in tune::Entity::find().filter(tune::Column::State.is_in(FINISHED_TUNES)).all(db).await? {
        let p = *problems.get(&t.problem_id).ok_or_else(|| CatalogError::Corrupt(format!("tune {}: problem", t.id)))?;
        used_problems.insert(p);
        used_devices.insert(t.device_class.clone());
        tunes.push(TuneRecord {
            device_class: t.device_class,
            problem: p,
            state: t.state,
            budget_ms: t.budget_ms,
            stage: t.stage,
            message: t.message,
            trace: t.trace.as_deref().map(|x| parse_json(x, "tune trace")).transpose()?,
            result: t.result.as_deref().map(|x| parse_json(x, "tune result")).transpose()?,
            finished_at: t.finished_at.unwrap_or(t.updated_at),
        });
    }
    tunes.sort_by(|a, b| (a.problem, &a.device_class).cmp(&(b.problem, &b.device_class)));
    records.sort_by(|a, b| (a.problem, &a.device_class).cmp(&(b.problem, &b.device_class)));
    let device_classes = device_class::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .filter(|d| used_devices.contains(&DeviceClass::new(d.name.as_str())))
        .map(|d| DeviceClassRecord { name: d.name, model: d.model, compute_capability: d.compute_capability, sm_count: d.sm_count })
        .collect::<BTreeSet<_>>();
    let artifacts = data
        .artifacts
        .values()
        .filter(|a| ptx.contains_key(&a.sha256))
        .map(|a| ArtifactRecord { sha256: a.sha256.clone(), size_bytes: a.size_bytes, ptx_version: a.ptx_version.clone(), target: a.target.clone() })
        .collect::<BTreeSet<_>>();
    let index = Index {
        format: FORMAT.into(),
        device_classes: device_classes.into_iter().collect(),
        problems: used_problems.into_iter().collect(),
        artifacts: artifacts.into_iter().collect(),
        entries: records,
        baselines,
        tunes,
    };
    Ok((index, ptx))
}

/// The canonical text of an index.
pub fn index_text(index: &Index) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(index)? + "\n")
}

/// Writes a bundle directory (created if missing; PTX files already there are kept).
pub fn write_bundle(dir: &Path, index: &Index, ptx: &BTreeMap<String, String>) -> Result<(), BundleError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| BundleError::Io { path, source }
    };
    let ptx_dir = dir.join("ptx");
    std::fs::create_dir_all(&ptx_dir).map_err(io(&ptx_dir))?;
    for (sha, text) in ptx {
        let p = ptx_dir.join(format!("{sha}.ptx"));
        std::fs::write(&p, text).map_err(io(&p))?;
    }
    let text = index_text(index).map_err(|e| invalid("index.json", e.to_string()))?;
    let p = dir.join("index.json");
    std::fs::write(&p, text).map_err(io(&p))
}

pub async fn export(db: &DatabaseConnection, dir: &Path) -> Result<Index, BundleError> {
    let (index, ptx) = snapshot(db).await?;
    write_bundle(dir, &index, &ptx)?;
    Ok(index)
}

impl PartialOrd for DeviceClassRecord {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DeviceClassRecord {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name).then_with(|| self.model.cmp(&other.model))
    }
}
impl PartialOrd for ArtifactRecord {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ArtifactRecord {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sha256.cmp(&other.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_oversized_ptx_is_refused() {
        for bad in [&b"\xff\xfe\x00"[..], b".version 8.8\n.target sm_90\n\0", b"hello"] {
            assert!(describe_ptx(bad).is_err(), "{bad:?} accepted");
        }
        assert!(describe_ptx(&vec![b' '; crate::ptx::MAX_PTX_BYTES + 1]).is_err());
        let ok = describe_ptx(b".version 8.8\n.target sm_90a\n.address_size 64\n").unwrap();
        assert_eq!((ok.ptx_version.as_str(), ok.target.as_str()), ("8.8", "sm_90a"));
    }
}
