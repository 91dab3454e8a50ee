//! Accepting a submission: every check that needs no GPU, in the order a kernel author
//! fixes them, then one transaction that stores the artifact, the manifests, the
//! submission and its jobs (all or nothing). Also the reads (status, lists) and the
//! owner's actions (cancel, delete).

use std::collections::{BTreeSet, HashMap};

use chrono::Utc;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Set};

use super::views::*;
use super::{state, submission_status};
use super::error::WorkError;
use crate::auth::{Caller, Role};
use crate::catalog::bundle;
use crate::signing::sha256_hex;
use crate::catalog::{self, artifact_view, problem_of, run_view};
use crate::db::entities::{artifact, catalog_entry, device_class, job, manifest, problem, run, submission, submitter, worker};
use crate::manifest::Manifest;
use crate::problem::{Problem, Shape};
use crate::ptx::StaticLimits;
use crate::problem::DeviceClass;

/// Limits on what one submitter may ask for.
#[derive(Debug, Clone)]
pub struct Quotas {
    /// Largest PTX accepted as an artifact.
    pub max_artifact_bytes: usize,
    /// Jobs a submitter may have queued or running at once (admins are exempt).
    pub max_queued_jobs: u64,
    /// Problems one submission may target.
    pub max_problems: usize,
    /// Bytes of PTX a submitter's uploads and submissions may store in all (admins are
    /// exempt; an artifact already stored costs nothing).
    pub max_stored_bytes: u64,
    /// Limits on compiling submitted CUDA source.
    pub compile: crate::compile::CompileLimits,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas { max_artifact_bytes: 4 << 20, max_queued_jobs: 256, max_problems: 2000, max_stored_bytes: 256 << 20, compile: Default::default() }
    }
}

const MAX_NAME: usize = 100;
const MAX_DESCRIPTION: usize = 10_000;
const MAX_SOURCE: usize = 1 << 20;
/// Workers seen within this many seconds count as serving their device class.
pub const WORKER_FRESH_SECS: i64 = 600;

/// What a create answers: a new submission (202) or the same one submitted before (200).
pub enum Created {
    New(SubmissionView),
    Existing(SubmissionView),
}

fn invalid_manifest(what: impl std::fmt::Display) -> WorkError {
    WorkError::InvalidManifest(what.to_string())
}

/// The concrete manifests a request names, checked on their own (no PTX yet).
pub fn manifests_of(req: &NewSubmission, quotas: &Quotas) -> Result<Vec<Manifest>, WorkError> {
    let manifests: Vec<Manifest> = match (&req.template, req.manifests.is_empty()) {
        (Some(_), false) => return Err(invalid_manifest("give either `manifests` or a `template` with `problems`, not both")),
        (None, true) => return Err(invalid_manifest("no manifest: give `manifests` (one per problem) or a `template` with `problems`")),
        (None, false) => {
            if !req.problems.is_empty() {
                return Err(invalid_manifest("`problems` goes with a `template`; each manifest names its own problem"));
            }
            for (i, m) in req.manifests.iter().enumerate() {
                m.validate().map_err(|e| invalid_manifest(format!("manifests[{i}]: {e}")))?;
            }
            req.manifests.clone()
        }
        (Some(t), true) => {
            if req.problems.is_empty() {
                return Err(invalid_manifest("a template needs `problems`: the shapes it is for, as MxNxK"));
            }
            let mut out = Vec::with_capacity(req.problems.len());
            for (i, text) in req.problems.iter().enumerate() {
                let shape: Shape = text.parse().map_err(|e| invalid_manifest(format!("problems[{i}]: {e}")))?;
                out.push(t.instantiate(shape).map_err(|e| invalid_manifest(format!("template for {shape}: {e}")))?);
            }
            out
        }
    };
    if manifests.len() > quotas.max_problems {
        return Err(WorkError::QuotaExceeded(format!("{} problems in one submission; the limit is {}", manifests.len(), quotas.max_problems)));
    }
    let mut seen = BTreeSet::new();
    for m in &manifests {
        if !seen.insert(m.problem) {
            return Err(invalid_manifest(format!("problem {} is listed twice", m.problem)));
        }
    }
    Ok(manifests)
}

fn check_text(what: &str, value: &Option<String>, max: usize) -> Result<(), WorkError> {
    match value {
        Some(v) if v.len() > max => Err(WorkError::InvalidRequest(format!("`{what}` is {} bytes; at most {max}", v.len()))),
        Some(v) if what != "source" && v.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            Err(WorkError::InvalidRequest(format!("`{what}` holds control characters")))
        }
        _ => Ok(()),
    }
}

/// ptxas, when this host has it: assemble once per arch to catch what the parser cannot.
fn ptxas_check(ptx: &str, manifests: &[Manifest]) -> Result<(), WorkError> {
    use crate::ptx::ptxas;
    let arches: BTreeSet<_> = manifests.iter().map(|m| m.problem.arch).collect();
    for arch in arches {
        let target = crate::harness::ptxas_arch(arch, arch.compute_capability(), ptx);
        match ptxas::check(ptx, &target) {
            Ok(_) => {}
            Err(ptxas::PtxasError::Rejected { log }) if log.contains("Unsupported .version") => {
                tracing::debug!("ptxas here is older than the PTX; the worker's check decides");
            }
            Err(e) => {
                if let Some(err) = e.clone().into_static_error() {
                    return Err(WorkError::StaticInvalid(format!("ptxas ({target}): {err}")));
                }
                // Not installed, or older than the PTX: the worker's own check decides.
                tracing::debug!(error = %e, "ptxas skipped at submission");
            }
        }
    }
    Ok(())
}

/// Compiles at most this many submitted sources at once (each child takes up to its
/// memory limit and a core); the rest wait their turn.
static COMPILES: std::sync::LazyLock<tokio::sync::Semaphore> = std::sync::LazyLock::new(|| tokio::sync::Semaphore::new(2));

/// A source submission made into a PTX one: compiles `cuda_source` (in the compile
/// sandbox) for the manifests' one arch, and rewrites each launch's entry (a name
/// expression) to the kernel it became. Returns the request with `ptx` and `source`
/// set, and how it was built.
async fn compile_request(mut req: NewSubmission, quotas: &Quotas) -> Result<(NewSubmission, crate::compile::BuildInfo), WorkError> {
    let Some(source) = req.cuda_source.take() else { return Err(WorkError::Internal("no source to compile".into())) };
    if req.ptx.is_some() || req.artifact_sha256.is_some() {
        return Err(WorkError::InvalidRequest("give `cuda_source` or `ptx`/`artifact_sha256`, not both".into()));
    }
    if req.source.is_some() {
        return Err(WorkError::InvalidRequest("with `cuda_source`, leave `source` out: the compiled source is the one shown".into()));
    }
    // Faults that need no compile are answered before one.
    if req.template.is_some() && !req.manifests.is_empty() {
        return Err(invalid_manifest("give either `manifests` or a `template` with `problems`, not both"));
    }
    // The arch and the name expressions, from the template or the manifests.
    let (arches, mut exprs): (BTreeSet<crate::problem::Arch>, Vec<String>) = match &req.template {
        Some(t) => ([t.arch].into(), t.launches.iter().map(|l| l.entry.clone()).collect()),
        None => (req.manifests.iter().map(|m| m.problem.arch).collect(), req.manifests.iter().flat_map(|m| m.launches.iter().map(|l| l.entry.clone())).collect()),
    };
    let mut seen = BTreeSet::new();
    exprs.retain(|e| seen.insert(e.clone()));
    let arch = match arches.len() {
        0 => return Err(invalid_manifest("no manifest: give `manifests` (one per problem) or a `template` with `problems`")),
        1 => *arches.iter().next().unwrap_or(&crate::problem::Arch::Sm90),
        _ => {
            return Err(invalid_manifest(format!(
                "source is compiled for one arch per submission; these manifests name {}",
                arches.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
    };
    let options = req.compile_options.clone().unwrap_or_default();
    let limits = quotas.compile.clone();
    let _turn = COMPILES.acquire().await.map_err(|e| WorkError::Internal(format!("compile queue: {e}")))?;
    let src = source.clone();
    let compiled = tokio::task::spawn_blocking(move || crate::compile::compile_in_sandbox(&src, arch, &options, &exprs, &limits))
        .await
        .map_err(|e| WorkError::Internal(format!("compile: {e}")))??;
    let rename = |entry: &mut String| {
        if let Some(low) = compiled.build.kernels.get(entry.as_str()) {
            *entry = low.clone();
        }
    };
    if let Some(t) = req.template.as_mut() {
        t.launches.iter_mut().for_each(|l| rename(&mut l.entry));
    }
    for m in &mut req.manifests {
        m.launches.iter_mut().for_each(|l| rename(&mut l.entry));
    }
    req.ptx = Some(compiled.ptx);
    req.source = Some(source);
    Ok((req, compiled.build))
}

/// Checks a request and, when it passes, stores it and queues its jobs.
pub async fn create(db: &DatabaseConnection, caller: &Caller, req: NewSubmission, quotas: &Quotas) -> Result<Created, WorkError> {
    let (req, build) = match req.cuda_source {
        Some(_) => {
            // Size, includes and options are checked before the compiler starts.
            let (r, b) = compile_request(req, quotas).await?;
            (r, Some(b))
        }
        None if req.compile_options.is_some() => return Err(WorkError::InvalidRequest("`compile_options` goes with `cuda_source`".into())),
        None => (req, None),
    };
    check_text("name", &req.name, MAX_NAME)?;
    check_text("description", &req.description, MAX_DESCRIPTION)?;
    check_text("source", &req.source, MAX_SOURCE)?;
    // The artifact.
    let ptx = match (&req.ptx, &req.artifact_sha256) {
        (Some(_), Some(_)) => return Err(WorkError::InvalidRequest("give `ptx` or `artifact_sha256`, not both".into())),
        (None, None) => return Err(WorkError::InvalidRequest("no kernel: give `ptx` (the PTX text) or `artifact_sha256`".into())),
        (Some(p), None) => p.clone(),
        (None, Some(sha)) => match catalog::artifact(db, sha).await? {
            Some(a) => a.ptx,
            None => return Err(WorkError::NotFound(format!("no artifact with sha256 {sha}; upload it with POST /v1/artifacts"))),
        },
    };
    if ptx.len() > quotas.max_artifact_bytes {
        return Err(WorkError::ArtifactTooLarge(format!("the PTX is {} bytes; the limit per artifact is {}", ptx.len(), quotas.max_artifact_bytes)));
    }
    let record = bundle::describe_ptx(ptx.as_bytes()).map_err(WorkError::InvalidArtifact)?;
    // The manifests, alone and against the PTX.
    let manifests = manifests_of(&req, quotas)?;
    // Parsed once, checked against every manifest (a tuner submission has hundreds).
    let limits = StaticLimits::default();
    let info = crate::ptx::parse(ptx.as_bytes(), &limits).map_err(|e| WorkError::InvalidArtifact(e.to_string()))?;
    for m in &manifests {
        crate::ptx::check_against_manifest_with(&info, m, &limits).map_err(|e| WorkError::StaticInvalid(format!("{}: {e}", m.problem)))?;
    }
    let (ptx_owned, checked) = (ptx.clone(), manifests.clone());
    tokio::task::spawn_blocking(move || ptxas_check(&ptx_owned, &checked))
        .await
        .map_err(|e| WorkError::Internal(format!("ptxas check: {e}")))??;
    // Where to run.
    let classes = device_classes_for(db, req.device_classes.as_deref(), &manifests).await?;
    let new_jobs = (manifests.len() * classes.len()) as u64;
    // De-duplication: the same kernel, manifests and classes from the same submitter.
    let fingerprint = {
        let mut parts: Vec<String> = manifests.iter().map(|m| sha256_hex(serde_json::to_string(m).unwrap_or_default().as_bytes())).collect();
        parts.sort();
        parts.push(format!("{classes:?}"));
        // Compiled source is part of what was submitted: the same PTX sent as PTX, or from
        // other source, is another submission (it shows other source).
        if let Some(b) = &build {
            parts.push(format!("source {} {}", sha256_hex(req.source.as_deref().unwrap_or("").as_bytes()), serde_json::to_string(b).unwrap_or_default()));
        }
        sha256_hex(format!("{}\n{}", record.sha256, parts.join("\n")).as_bytes())
    };
    // The check for a duplicate, the quota's count and the insert are one transaction
    // that holds the submitter's lock, so concurrent submissions are decided one after
    // the other (on SQLite `BEGIN IMMEDIATE` alone serializes writers).
    let txn = crate::db::begin_write(db).await?;
    crate::db::lock_in_transaction(&txn, &format!("kaas.submit {}", caller.submitter_id)).await?;
    if let Some(s) = submission::Entity::find()
        .filter(submission::Column::SubmitterId.eq(caller.submitter_id))
        .filter(submission::Column::Fingerprint.eq(&fingerprint))
        .filter(submission::Column::DeletedAt.is_null())
        .one(&txn)
        .await?
    {
        txn.rollback().await?;
        return Ok(Created::Existing(view(db, s.id).await?.ok_or_else(|| WorkError::Internal("submission vanished".into()))?));
    }
    if caller.role != Role::Admin {
        let open = job::Entity::find()
            .filter(job::Column::State.is_in([state::QUEUED, state::RUNNING]))
            .filter(job::Column::SubmissionId.in_subquery(
                sea_orm::sea_query::Query::select()
                    .column(submission::Column::Id)
                    .from(submission::Entity)
                    .and_where(submission::Column::SubmitterId.eq(caller.submitter_id))
                    .to_owned(),
            ))
            .count(&txn)
            .await?;
        if open + new_jobs > quotas.max_queued_jobs {
            return Err(WorkError::QuotaExceeded(format!(
                "this submission adds {new_jobs} job(s) to the {open} you have queued or running; the limit is {}; wait for some to finish or cancel them",
                quotas.max_queued_jobs
            )));
        }
    }
    check_storage(&txn, caller, &record.sha256, ptx.len() as u64, quotas).await?;
    let now = Utc::now();
    bundle::store_artifact_for(&txn, &ptx, Some(caller.submitter_id), now).await?;
    let sub = submission::ActiveModel {
        submitter_id: Set(caller.submitter_id),
        artifact_sha256: Set(record.sha256.clone()),
        name: Set(req.name.clone().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| format!("{} {}", caller.submitter, &record.sha256[..12]))),
        description: Set(req.description.clone().unwrap_or_default()),
        source: Set(req.source.clone()),
        status: Set("queued".into()),
        created_at: Set(now),
        fingerprint: Set(Some(fingerprint)),
        deleted_at: Set(None),
        build: Set(build.as_ref().map(|b| serde_json::to_string(b).unwrap_or_default())),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    let mut added = 0;
    for m in &manifests {
        let pid = bundle::ensure_problem(&txn, &m.problem, &mut added).await?;
        let mid = bundle::ensure_manifest(&txn, &record.sha256, pid, m, now).await?;
        for class in &classes {
            job::ActiveModel {
                submission_id: Set(Some(sub.id)),
                manifest_id: Set(Some(mid)),
                kind: Set(super::queue::KIND_VERIFY.into()),
                problem_id: Set(pid),
                device_class: Set(class.clone()),
                state: Set(state::QUEUED.into()),
                priority: Set(if caller.role == Role::Admin { 0 } else { 10 }),
                attempts: Set(0),
                created_at: Set(now),
                updated_at: Set(now),
                stage: Set(Some(match class {
                    Some(c) => format!("waiting for a {c} worker"),
                    None => "waiting for a worker".into(),
                })),
                ..Default::default()
            }
            .insert(&txn)
            .await?;
        }
    }
    txn.commit().await?;
    Ok(Created::New(view(db, sub.id).await?.ok_or_else(|| WorkError::Internal("submission vanished".into()))?))
}

/// The per-submitter storage quota, checked inside `txn`, which holds the submitter's
/// lock (`kaas.submit {id}`) so that concurrent uploads are counted one after the other:
/// storing the new artifact `sha` of `bytes` must keep what the caller's uploads and
/// submissions stored within [`Quotas::max_stored_bytes`]. An artifact already stored
/// (by anyone) costs nothing; admins are exempt.
pub(crate) async fn check_storage<C: ConnectionTrait>(txn: &C, caller: &Caller, sha: &str, bytes: u64, quotas: &Quotas) -> Result<(), WorkError> {
    if caller.role == Role::Admin || artifact::Entity::find_by_id(sha.to_string()).one(txn).await?.is_some() {
        return Ok(());
    }
    // The sizes, summed here: SUM's type differs between SQLite and Postgres, and one
    // submitter's artifacts are few (the quota bounds them).
    let sizes: Vec<i64> = artifact::Entity::find()
        .select_only()
        .column(artifact::Column::SizeBytes)
        .filter(artifact::Column::UploaderId.eq(caller.submitter_id))
        .into_tuple()
        .all(txn)
        .await?;
    let stored: u64 = sizes.iter().map(|&s| s.max(0) as u64).sum();
    if stored + bytes > quotas.max_stored_bytes {
        return Err(WorkError::QuotaExceeded(format!(
            "storing this PTX ({bytes} bytes) would bring what your uploads and submissions stored to {} bytes; the limit per submitter is {} (--max-stored-bytes-per-submitter); an admin can raise it",
            stored + bytes,
            quotas.max_stored_bytes
        )));
    }
    Ok(())
}

/// The device classes to queue jobs for: those asked for (each must be known), or every
/// class with a worker seen lately that can run the arches; `[None]` (any worker) when
/// no worker was seen.
async fn device_classes_for(db: &DatabaseConnection, asked: Option<&[String]>, manifests: &[Manifest]) -> Result<Vec<Option<DeviceClass>>, WorkError> {
    let cutoff = Utc::now() - chrono::Duration::seconds(WORKER_FRESH_SECS);
    let workers = worker::Entity::find().filter(worker::Column::LastSeenAt.gt(cutoff)).all(db).await?;
    if let Some(asked) = asked {
        if asked.is_empty() {
            return Err(WorkError::InvalidRequest("`device_classes` is empty; leave it out to run on every class with a worker".into()));
        }
        let known: BTreeSet<DeviceClass> = device_class::Entity::find()
            .all(db)
            .await?
            .into_iter()
            .map(|d| DeviceClass::new(d.name))
            .chain(workers.iter().filter_map(|w| w.device_class.clone()))
            .collect();
        let mut out = BTreeSet::new();
        for c in asked {
            if !known.iter().any(|k| k == c) {
                return Err(WorkError::InvalidRequest(format!("device class `{c}` is not known here; known: {}", DeviceClass::list(&known.iter().cloned().collect::<Vec<_>>()))));
            }
            out.insert(DeviceClass::new(c.as_str()));
        }
        return Ok(out.into_iter().map(Some).collect());
    }
    let arches: BTreeSet<_> = manifests.iter().map(|m| m.problem.arch).collect();
    let classes: BTreeSet<DeviceClass> = workers
        .iter()
        .filter(|w| {
            let cc = w.compute_capability.as_deref().and_then(parse_cc);
            cc.is_some_and(|cc| arches.iter().all(|a| a.runs_on(cc)))
        })
        .filter_map(|w| w.device_class.clone())
        .collect();
    if classes.is_empty() {
        return Ok(vec![None]);
    }
    Ok(classes.into_iter().map(Some).collect())
}

/// `"9.0"` → `(9, 0)`.
pub fn parse_cc(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A submission with its jobs and runs; `None` when there is none with this id.
pub async fn view<C: ConnectionTrait>(db: &C, id: i32) -> Result<Option<SubmissionView>, WorkError> {
    let Some(s) = submission::Entity::find_by_id(id).one(db).await? else { return Ok(None) };
    let who = submitter::Entity::find_by_id(s.submitter_id).one(db).await?.map(|x| x.name).unwrap_or_default();
    let a = artifact::Entity::find_by_id(s.artifact_sha256.clone())
        .one(db)
        .await?
        .ok_or_else(|| WorkError::Internal(format!("artifact of submission {id} missing")))?;
    let jobs = job::Entity::find().filter(job::Column::SubmissionId.eq(id)).order_by_asc(job::Column::Id).all(db).await?;
    let problems: HashMap<i32, problem::Model> = problem::Entity::find()
        .filter(problem::Column::Id.is_in(jobs.iter().map(|j| j.problem_id).collect::<Vec<_>>()))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    let run_ids: Vec<i32> = jobs.iter().filter_map(|j| j.run_id).collect();
    let runs: HashMap<i32, run::Model> = run::Entity::find().filter(run::Column::Id.is_in(run_ids.clone())).all(db).await?.into_iter().map(|r| (r.id, r)).collect();
    let manifests: HashMap<i32, manifest::Model> = manifest::Entity::find()
        .filter(manifest::Column::Id.is_in(runs.values().map(|r| r.manifest_id).collect::<Vec<_>>()))
        .all(db)
        .await?
        .into_iter()
        .map(|m| (m.id, m))
        .collect();
    let held: BTreeSet<i32> = catalog_entry::Entity::find()
        .filter(catalog_entry::Column::RunId.is_in(run_ids))
        .all(db)
        .await?
        .into_iter()
        .map(|e| e.run_id)
        .collect();
    let mut views = Vec::with_capacity(jobs.len());
    for j in &jobs {
        let p = problems.get(&j.problem_id).ok_or_else(|| WorkError::Internal(format!("problem {} missing", j.problem_id)))?;
        let problem: Problem = problem_of(p)?;
        let run = match j.run_id.and_then(|r| runs.get(&r)) {
            None => None,
            Some(r) => {
                let m = manifests.get(&r.manifest_id).ok_or_else(|| WorkError::Internal(format!("manifest {} of run {} missing", r.manifest_id, r.id)))?;
                let body: Manifest = serde_json::from_str(&m.body).map_err(|e| WorkError::Internal(format!("manifest {} does not parse: {e}", m.id)))?;
                Some(JobRunView {
                    run: run_view(r),
                    details: r.details.as_deref().and_then(|d| serde_json::from_str(d).ok()),
                    in_catalog: held.contains(&r.id),
                    record: catalog::run_record(r, &body, &m.artifact_sha256),
                    signature: None,
                })
            }
        };
        views.push(JobView {
            id: j.id,
            path: problem.path(),
            problem,
            device_class: j.device_class.clone(),
            state: j.state.clone(),
            stage: j.stage.clone(),
            attempts: j.attempts,
            error: j.error.clone(),
            updated_at: j.updated_at,
            run,
        });
    }
    let states: Vec<&str> = jobs.iter().map(|j| j.state.as_str()).collect();
    Ok(Some(SubmissionView {
        id: s.id,
        submitter: who,
        name: s.name.clone(),
        description: s.description.clone(),
        status: submission_status(&states, s.deleted_at.is_some()).to_string(),
        created_at: s.created_at,
        artifact: artifact_view(&a),
        has_source: s.source.is_some(),
        source: s.build.as_ref().and(s.source.clone()),
        build: s.build.as_deref().and_then(|b| serde_json::from_str(b).ok()),
        jobs: views,
        links: SubmissionLinks {
            self_: format!("/v1/submissions/{}", s.id),
            events: format!("/v1/submissions/{}/events", s.id),
            artifact: format!("/v1/artifacts/{}", s.artifact_sha256),
        },
    }))
}

/// Submissions, newest first; one submitter's when `submitter` is given. Deleted ones
/// are left out.
pub async fn list(db: &DatabaseConnection, submitter_name: Option<&str>, limit: u64) -> Result<Vec<SubmissionSummary>, WorkError> {
    let mut q = submission::Entity::find().filter(submission::Column::DeletedAt.is_null());
    let people: HashMap<i32, String> = submitter::Entity::find().all(db).await?.into_iter().map(|s| (s.id, s.name)).collect();
    if let Some(name) = submitter_name {
        let Some((&id, _)) = people.iter().find(|(_, n)| n.as_str() == name) else { return Ok(vec![]) };
        q = q.filter(submission::Column::SubmitterId.eq(id));
    }
    let subs = q.order_by_desc(submission::Column::Id).paginate(db, limit.clamp(1, 500)).fetch_page(0).await?;
    let ids: Vec<i32> = subs.iter().map(|s| s.id).collect();
    let jobs = job::Entity::find().filter(job::Column::SubmissionId.is_in(ids)).all(db).await?;
    let passed_runs: BTreeSet<i32> = run::Entity::find()
        .filter(run::Column::Id.is_in(jobs.iter().filter_map(|j| j.run_id).collect::<Vec<_>>()))
        .filter(run::Column::Verdict.eq("pass"))
        .all(db)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    Ok(subs
        .into_iter()
        .map(|s| {
            let mine: Vec<&job::Model> = jobs.iter().filter(|j| j.submission_id == Some(s.id)).collect();
            let states: Vec<&str> = mine.iter().map(|j| j.state.as_str()).collect();
            SubmissionSummary {
                id: s.id,
                submitter: people.get(&s.submitter_id).cloned().unwrap_or_default(),
                name: s.name,
                status: submission_status(&states, false).into(),
                created_at: s.created_at,
                artifact_sha256: s.artifact_sha256,
                jobs: mine.len(),
                passed: mine.iter().filter(|j| j.run_id.is_some_and(|r| passed_runs.contains(&r))).count(),
            }
        })
        .collect())
}

/// Owners and admins only.
async fn owned(db: &DatabaseConnection, caller: &Caller, id: i32) -> Result<submission::Model, WorkError> {
    let Some(s) = submission::Entity::find_by_id(id).one(db).await? else {
        return Err(WorkError::NotFound(format!("no submission {id}")));
    };
    if s.submitter_id != caller.submitter_id && caller.role != Role::Admin {
        return Err(WorkError::Forbidden(format!("submission {id} belongs to someone else; only its owner or an admin may change it")));
    }
    Ok(s)
}

/// Cancels every job not yet finished; a worker running one sees it at its next
/// heartbeat and kills the sandbox. Returns the view after the change.
pub async fn cancel(db: &DatabaseConnection, caller: &Caller, id: i32) -> Result<SubmissionView, WorkError> {
    owned(db, caller, id).await?;
    let txn = crate::db::begin_write(db).await?;
    super::queue::cancel_jobs(&txn, id, &format!("cancelled by {}", caller.submitter)).await?;
    txn.commit().await?;
    view(db, id).await?.ok_or_else(|| WorkError::NotFound(format!("no submission {id}")))
}

/// Deletes a submission: its jobs are cancelled and it leaves every list and
/// leaderboard; the rows stay as history. Refused while one of its runs holds a catalog
/// entry (the catalog would otherwise serve a deleted kernel).
pub async fn delete(db: &DatabaseConnection, caller: &Caller, id: i32) -> Result<(), WorkError> {
    let s = owned(db, caller, id).await?;
    if s.deleted_at.is_some() {
        return Ok(());
    }
    let txn = crate::db::begin_write(db).await?;
    let run_ids: Vec<i32> = run::Entity::find().filter(run::Column::SubmissionId.eq(id)).all(&txn).await?.into_iter().map(|r| r.id).collect();
    let entries = catalog_entry::Entity::find().filter(catalog_entry::Column::RunId.is_in(run_ids)).all(&txn).await?;
    for e in &entries {
        // Only the current entry of its (device class, problem) matters.
        let newest = catalog_entry::Entity::find()
            .filter(catalog_entry::Column::DeviceClass.eq(&e.device_class))
            .filter(catalog_entry::Column::ProblemId.eq(e.problem_id))
            .order_by_desc(catalog_entry::Column::Id)
            .one(&txn)
            .await?;
        if newest.is_some_and(|n| n.id == e.id) {
            return Err(WorkError::Conflict(format!(
                "submission {id} holds the catalog entry for problem {} on {}; it cannot be deleted while it is served",
                e.problem_id, e.device_class
            )));
        }
    }
    super::queue::cancel_jobs(&txn, id, &format!("deleted by {}", caller.submitter)).await?;
    submission::Entity::update_many()
        .col_expr(submission::Column::DeletedAt, Expr::value(Utc::now()))
        .col_expr(submission::Column::Status, Expr::value("deleted"))
        .filter(submission::Column::Id.eq(id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// Workers seen lately, newest first.
pub async fn workers(db: &DatabaseConnection) -> Result<Vec<WorkerView>, WorkError> {
    let cutoff = Utc::now() - chrono::Duration::seconds(WORKER_FRESH_SECS);
    let rows = worker::Entity::find().filter(worker::Column::LastSeenAt.gt(cutoff)).order_by_desc(worker::Column::LastSeenAt).all(db).await?;
    Ok(rows
        .into_iter()
        .map(|w| WorkerView {
            id: w.id,
            device_class: w.device_class,
            gpu_name: w.gpu_name,
            state: w.state,
            job_id: w.job_id,
            message: w.message,
            last_seen_at: w.last_seen_at,
        })
        .collect())
}

/// Jobs per state, for health and metrics.
pub async fn queue_depth(db: &DatabaseConnection) -> Result<(u64, u64), WorkError> {
    let queued = job::Entity::find().filter(job::Column::State.eq(state::QUEUED)).count(db).await?;
    let running = job::Entity::find().filter(job::Column::State.eq(state::RUNNING)).count(db).await?;
    Ok((queued, running))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Layout};

    fn manifest(m: u32) -> Manifest {
        manifest_for(&Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, 256, 256).expect("shape")), &SimpleConfig::SMALL)
    }

    #[test]
    fn a_request_names_its_manifests_one_way() {
        let q = Quotas::default();
        let both = NewSubmission { manifests: vec![manifest(256)], template: None, problems: vec!["64x64x64".into()], ..Default::default() };
        assert!(manifests_of(&both, &q).unwrap_err().to_string().contains("goes with a `template`"));
        let none = NewSubmission::default();
        assert!(manifests_of(&none, &q).unwrap_err().to_string().contains("no manifest"));
        let twice = NewSubmission { manifests: vec![manifest(256), manifest(256)], ..Default::default() };
        assert!(manifests_of(&twice, &q).unwrap_err().to_string().contains("listed twice"));
        let ok = NewSubmission { manifests: vec![manifest(256), manifest(512)], ..Default::default() };
        assert_eq!(manifests_of(&ok, &q).expect("two").len(), 2);
        let few = Quotas { max_problems: 1, ..Quotas::default() };
        assert!(matches!(manifests_of(&ok, &few), Err(WorkError::QuotaExceeded(_))));
    }

    #[test]
    fn compute_capabilities_parse() {
        assert_eq!(parse_cc("9.0"), Some((9, 0)));
        assert_eq!(parse_cc("x"), None);
    }
}
