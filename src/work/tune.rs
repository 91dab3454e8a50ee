//! Tuning on demand (issue 36): `POST /v1/tuning-requests` asks the service to tune
//! problems, the tune job does it on a GPU worker, and the outcome is stored as a catalog
//! entry (a verified kernel that beats the baselines) or as `baseline_faster` with the
//! measured baseline configuration.
//!
//! Invariants:
//! - One tune per (problem, device class), whoever asks and however often: the unique
//!   index `ux_tunes_key` decides, inserts being `ON CONFLICT DO NOTHING` followed by a
//!   read, so concurrent requests on any number of API replicas share one row; and
//!   `ux_jobs_open_tune` allows one queued or running job per tune.
//! - A request is all or nothing: it is checked whole before its transaction, and the
//!   quota is counted inside it (under the submitter's lock), so a refused request
//!   queues nothing.
//! - A tune's state moves `queued` → `tuning` (claimed) → `verifying` (the child's
//!   progress) → `served` | `baseline_faster` | `failed`; a failed tune is queued again
//!   by the next request for it.
//! - A tune's kernel enters the catalog only if it passed verification and its benchmark
//!   beat every baseline it was timed against (and the current entry, by the catalog's
//!   rule).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::queue::{self, KIND_TUNE, Stored};
use super::TuneResult;
use super::error::WorkError;
use crate::auth::{Caller, Role};
use crate::catalog::{self, BaselineView, Fallback, KernelLookup, bundle, problem_of};
use crate::db::entities::{device_class, job, problem, run, submitter, tune, tuning_request, tuning_request_item};
use crate::gpu::DeviceFacts;
use crate::problem::{Acc, Arch, Layout, Problem, Shape};
use crate::tuner::ondemand::{Seed, Trace, TuneOutcome};
use crate::verify::Verdict;
use crate::problem::DeviceClass;

/// Tune states (`super::tune_state`), under the name callers know them by.
pub use super::tune_state as state;

/// Limits and defaults of tuning requests (`kaas serve --tune-*`).
#[derive(Debug, Clone)]
pub struct TuneLimits {
    /// Problems one request may name.
    pub max_problems: usize,
    /// Tunes a submitter's requests may have queued or running at once (admins exempt).
    pub max_open_per_submitter: u64,
    /// The search's budget per problem.
    pub budget_ms: u64,
    /// The most an admin may give one problem.
    pub max_budget_ms: u64,
    /// Problems of more than 2^this FLOP (2·M·N·K) are outside the limits.
    pub max_flops_log2: f64,
    /// The device class tuned for when a request names none.
    pub device_class: DeviceClass,
    /// Whether a kernel lookup that misses queues a tune itself (anonymous).
    pub on_miss: bool,
    /// Tunes misses may queue per minute, all replicas together.
    pub on_miss_per_minute: u64,
    /// Tunes misses may have queued or running at once.
    pub on_miss_max_open: u64,
}

impl Default for TuneLimits {
    fn default() -> Self {
        TuneLimits {
            max_problems: 256,
            max_open_per_submitter: 128,
            budget_ms: 60_000,
            max_budget_ms: 600_000,
            max_flops_log2: 44.0,
            device_class: "H100-SXM".into(),
            on_miss: false,
            on_miss_per_minute: 10,
            on_miss_max_open: 32,
        }
    }
}

/// Default priorities: submissions' jobs run at 10 (admins' at 0); a tune is a GPU-minute,
/// so a requested one waits for submitted kernels, and a miss's for requests.
pub const PRIORITY_REQUEST: i32 = 5;
pub const PRIORITY_MISS: i32 = 1;
pub const MAX_PRIORITY: i32 = 100;

/// One problem of a request: `tn:MxNxK` (with the request's arch and acc), a kernel path
/// `sm_90/f32/tn/MxNxK`, or an object.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ProblemSpec {
    Text(String),
    Fields(ProblemFields),
}

/// A workload preset's name in the document: the presets are fixed in the build.
pub struct WorkloadName;

impl utoipa::PartialSchema for WorkloadName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new().schema_type(Type::String).enum_values(Some(crate::workloads::PRESETS.iter().map(|p| p.name))).into()
    }
}

impl utoipa::ToSchema for WorkloadName {
    fn name() -> std::borrow::Cow<'static, str> {
        "WorkloadName".into()
    }
}

/// [`ProblemSpec`] in the document: `layout:MxNxK`, `arch/acc/layout/MxNxK`, or the
/// fields, each bounded as the server bounds them.
pub struct ProblemSpecSchema;

/// One of M, N, K: a whole number from 1 to 65536, as a pattern.
const DIM: &str = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])";

impl utoipa::PartialSchema for ProblemSpecSchema {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        let shape = format!("{DIM}x{DIM}x{DIM}");
        let short = ObjectBuilder::new().schema_type(Type::String).pattern(Some(format!("^\\s*(nn|tn):{shape}\\s*$")));
        let path = ObjectBuilder::new().schema_type(Type::String).pattern(Some(format!("^\\s*sm_(80|86|89|90|90a)/f(16|32)/(nn|tn)/{shape}\\s*$")));
        OneOfBuilder::new().item(short).item(path).item(<ProblemFields as utoipa::PartialSchema>::schema()).into()
    }
}

impl utoipa::ToSchema for ProblemSpecSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        "ProblemSpec".into()
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemFields {
    #[schema(pattern = "^sm_(80|86|89|90|90a)$")]
    pub arch: Option<String>,
    #[schema(pattern = "^f(16|32)$")]
    pub acc: Option<String>,
    #[schema(pattern = "^(nn|tn)$")]
    pub layout: String,
    #[schema(minimum = 1, maximum = 65536)]
    pub m: u64,
    #[schema(minimum = 1, maximum = 65536)]
    pub n: u64,
    #[schema(minimum = 1, maximum = 65536)]
    pub k: u64,
}

/// `POST /v1/tuning-requests`: problems, or a workload preset.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTuningRequest {
    /// The problems to tune, e.g. `["tn:4096x14336x4096", "sm_90/f32/nn/16x4096x4096",
    /// {"layout": "tn", "m": 1, "n": 4096, "k": 4096}]`.
    #[serde(default)]
    #[schema(value_type = Vec<ProblemSpecSchema>)]
    pub problems: Vec<ProblemSpec>,
    /// A workload preset (`GET /v1/workloads`), e.g. `llama-3.1-8b`: every GEMM of its layer.
    #[schema(value_type = Option<WorkloadName>)]
    pub workload: Option<String>,
    /// With `workload`: only these token counts (M) [default: the preset's 1 … 8192].
    pub tokens: Option<Vec<u32>>,
    /// Arch of the problems that do not name one [default sm_90].
    #[schema(pattern = "^sm_(80|86|89|90|90a)$")]
    pub arch: Option<String>,
    /// Accumulator of the problems that do not name one [default f32].
    #[schema(pattern = "^f(16|32)$")]
    pub acc: Option<String>,
    /// Device class to tune on, e.g. `H100-SXM` [default: the service's tuning class].
    #[schema(pattern = "^[A-Za-z0-9 ._-]{1,64}$")]
    pub device: Option<String>,
    /// Admins only: the jobs' priority (higher first; requests get 5, submissions 10).
    pub priority: Option<i32>,
    /// Admins only: the search's budget per problem in ms.
    pub budget_ms: Option<u64>,
}

/// One problem of a request and where it stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TuningItemView {
    /// `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub problem: String,
    /// Its place in the workload, e.g. `k_proj, v_proj @ 16 tokens`.
    pub label: Option<String>,
    /// `served`, `baseline_faster`, `queued`, `tuning`, `verifying`, `failed` or `refused`.
    pub state: String,
    /// Why it is `refused` or `failed`.
    pub reason: Option<String>,
    pub tune_id: Option<i32>,
    /// The job tuning it, while queued or running.
    pub job_id: Option<i32>,
    /// 1 = next to be claimed by a worker of its class.
    pub queue_position: Option<u64>,
    /// What the job is doing.
    pub stage: Option<String>,
    /// `served`: the kernel's URL.
    pub kernel: Option<String>,
    /// `served`: graph-mode speedup over cuBLASLt-autotune-max.
    pub speedup: Option<f64>,
    /// `baseline_faster`: the measured baseline to use, with its configuration.
    pub use_instead: Option<BaselineView>,
    /// The tune (state, trace): `/v1/tunes/{path}?device=…`.
    pub tune: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TuningRequestLinks {
    #[serde(rename = "self")]
    pub self_: String,
    pub events: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TuningRequestView {
    pub id: i32,
    /// Who asked; null for a tune a kernel lookup queued.
    pub submitter: Option<String>,
    pub workload: Option<String>,
    pub device_class: DeviceClass,
    pub created_at: DateTime<Utc>,
    /// True when no item will change any more.
    pub done: bool,
    /// Items per state.
    pub counts: BTreeMap<String, usize>,
    pub items: Vec<TuningItemView>,
    pub links: TuningRequestLinks,
}

impl TuningRequestView {
    pub fn finished(&self) -> bool {
        self.done
    }
}


/// A tune: `GET /v1/tunes/{arch}/{acc}/{layout}/{shape}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TuneView {
    pub id: i32,
    pub problem: Problem,
    pub path: String,
    pub device_class: DeviceClass,
    pub state: String,
    pub stage: Option<String>,
    pub message: Option<String>,
    pub priority: i32,
    pub budget_ms: i64,
    pub job_id: Option<i32>,
    pub queue_position: Option<u64>,
    pub run_id: Option<i32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub result: Option<TuneResult>,
    /// The search: reference, every code tried with its time, the codes verified.
    pub trace: Option<Trace>,
    /// `served`: the kernel's URL.
    pub kernel: Option<String>,
}

fn invalid(what: impl std::fmt::Display) -> WorkError {
    WorkError::InvalidProblem(what.to_string())
}

/// One problem the request resolves to.
#[derive(Debug, Clone)]
struct Asked {
    problem: Problem,
    label: Option<String>,
}

fn parse_spec(i: usize, spec: &ProblemSpec, arch: Arch, acc: Acc) -> Result<Problem, WorkError> {
    let at = |e: &dyn std::fmt::Display| invalid(format!("problems[{i}]: {e}"));
    match spec {
        ProblemSpec::Text(t) => {
            let t = t.trim();
            let parts: Vec<&str> = t.split('/').collect();
            match parts[..] {
                [a, c, l, s] => Ok(Problem::new(a.parse().map_err(|e| at(&e))?, c.parse().map_err(|e| at(&e))?, l.parse().map_err(|e| at(&e))?, s.parse().map_err(|e| at(&e))?)),
                [one] => {
                    let Some((l, s)) = one.split_once(':') else {
                        return Err(at(&format!("`{t}` is neither `tn:MxNxK` nor `{{arch}}/{{acc}}/{{layout}}/MxNxK`")));
                    };
                    Ok(Problem::new(arch, acc, l.parse::<Layout>().map_err(|e| at(&e))?, s.parse::<Shape>().map_err(|e| at(&e))?))
                }
                _ => Err(at(&format!("`{t}` is neither `tn:MxNxK` nor `{{arch}}/{{acc}}/{{layout}}/MxNxK`"))),
            }
        }
        ProblemSpec::Fields(f) => {
            let arch = f.arch.as_deref().map(str::parse).transpose().map_err(|e: crate::problem::ProblemError| at(&e))?.unwrap_or(arch);
            let acc = f.acc.as_deref().map(str::parse).transpose().map_err(|e: crate::problem::ProblemError| at(&e))?.unwrap_or(acc);
            let layout: Layout = f.layout.parse().map_err(|e| at(&e))?;
            let dim = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let shape = Shape::new(dim(f.m), dim(f.n), dim(f.k)).map_err(|e| at(&e))?;
            Ok(Problem::new(arch, acc, layout, shape))
        }
    }
}

/// The problems a request names, checked whole: nothing is stored when one is wrong.
fn problems_of(req: &NewTuningRequest, limits: &TuneLimits) -> Result<Vec<Asked>, WorkError> {
    let bad = |e: crate::problem::ProblemError| WorkError::InvalidRequest(e.to_string());
    let arch: Arch = req.arch.as_deref().map(str::parse).transpose().map_err(bad)?.unwrap_or(Arch::Sm90);
    let acc: Acc = req.acc.as_deref().map(str::parse).transpose().map_err(bad)?.unwrap_or(Acc::F32);
    let asked: Vec<Asked> = match (&req.workload, req.problems.is_empty()) {
        (Some(_), false) => return Err(WorkError::InvalidRequest("give `problems` or a `workload`, not both".into())),
        (None, true) => return Err(WorkError::InvalidRequest("nothing to tune: give `problems` (e.g. [\"tn:4096x14336x4096\"]) or a `workload` (GET /v1/workloads lists them)".into())),
        (None, false) => {
            if req.tokens.is_some() {
                return Err(WorkError::InvalidRequest("`tokens` goes with a `workload`".into()));
            }
            req.problems.iter().enumerate().map(|(i, s)| parse_spec(i, s, arch, acc).map(|problem| Asked { problem, label: None })).collect::<Result<_, _>>()?
        }
        (Some(name), true) => {
            let preset = crate::workloads::preset(name).ok_or_else(|| WorkError::UnknownWorkload(format!("no workload `{name}`; the presets are {}", crate::workloads::names())))?;
            let tokens: Vec<u32> = match &req.tokens {
                None => crate::workloads::TOKENS.to_vec(),
                Some(t) if t.is_empty() => return Err(WorkError::InvalidRequest("`tokens` is empty; leave it out for every token count".into())),
                Some(t) => {
                    if let Some(bad) = t.iter().find(|&&x| x == 0 || x > crate::problem::MAX_DIM) {
                        return Err(invalid(format!("tokens: {bad} is outside 1..={}", crate::problem::MAX_DIM)));
                    }
                    t.clone()
                }
            };
            let mut out = Vec::new();
            for l in preset.linears() {
                for &m in &tokens {
                    let shape = Shape::new(m, l.n, l.k).map_err(|e| invalid(format!("{} at {m} tokens: {e}", l.names)))?;
                    out.push(Asked { problem: Problem::new(arch, acc, Layout::Tn, shape), label: Some(format!("{} @ {m} tokens", l.names)) });
                }
            }
            out
        }
    };
    if asked.len() > limits.max_problems {
        return Err(invalid(format!("{} problems in one request; at most {} (split it)", asked.len(), limits.max_problems)));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, a) in asked.iter().enumerate() {
        if !seen.insert(a.problem) {
            return Err(invalid(format!("problems[{i}]: {} is listed twice", a.problem)));
        }
        let log2 = a.problem.shape().flops().log2();
        if log2 > limits.max_flops_log2 {
            return Err(invalid(format!(
                "problems[{i}]: {} is 2^{log2:.1} FLOP, outside this service's tuning limit of 2^{} (2·M·N·K)",
                a.problem, limits.max_flops_log2
            )));
        }
    }
    Ok(asked)
}

/// SMs of a device class, for the candidate space (an H100 SXM's when unknown).
async fn sm_count<C: ConnectionTrait>(db: &C, class: &str) -> Result<u32, DbErr> {
    Ok(device_class::Entity::find_by_id(class.to_string()).one(db).await?.and_then(|d| d.sm_count).and_then(|n| u32::try_from(n).ok()).unwrap_or(132))
}

/// What the catalog already answers for a problem on a class, when that answer is measured
/// (a kernel that beats the baselines, or a faster baseline): no tune is needed then.
async fn measured_answer(db: &DatabaseConnection, p: &Problem, class: &str) -> Result<Option<(&'static str, Option<f64>, Option<BaselineView>)>, WorkError> {
    Ok(match catalog::best_kernel(db, p, Some(class), Fallback::None).await? {
        KernelLookup::Kernel(k) if k.benchmarked && catalog::beats_all(&catalog::ranked_speedups(k.run.speedups.as_ref())) == Some(true) => {
            Some((state::SERVED, k.run.speedups.as_ref().and_then(|s| s.pointer("/graph/cublaslt_autotune_max")).and_then(|v| v.as_f64()), None))
        }
        KernelLookup::BaselineFaster { use_instead, fallback: None, .. } => Some((state::BASELINE_FASTER, None, Some(use_instead))),
        _ => None,
    })
}

/// What a created request answers: new (201), or nothing new was queued (200).
pub struct CreatedRequest {
    pub queued: usize,
    pub view: TuningRequestView,
}

/// Who asks: a submitter (their quota), or a kernel lookup's miss (the miss limits).
#[derive(Clone, Copy)]
pub enum Asker<'a> {
    Caller(&'a Caller),
    Miss,
}

/// Checks a request and stores it: tunes inserted or shared, jobs queued, items recorded,
/// all in one transaction. `device` is the class, already resolved by the caller.
pub async fn create(db: &DatabaseConnection, who: Asker<'_>, req: &NewTuningRequest, device: &str, limits: &TuneLimits) -> Result<CreatedRequest, WorkError> {
    let admin = matches!(who, Asker::Caller(c) if c.role == Role::Admin);
    if let Some(p) = req.priority {
        if !admin {
            return Err(WorkError::Forbidden("only admins may set `priority`".into()));
        }
        if !(0..=MAX_PRIORITY).contains(&p) {
            return Err(WorkError::InvalidRequest(format!("priority {p} is outside 0..={MAX_PRIORITY}")));
        }
    }
    if let Some(b) = req.budget_ms {
        if !admin {
            return Err(WorkError::Forbidden("only admins may set `budget_ms`".into()));
        }
        if !(1000..=limits.max_budget_ms).contains(&b) {
            return Err(WorkError::InvalidRequest(format!("budget_ms {b} is outside 1000..={}", limits.max_budget_ms)));
        }
    }
    let asked = problems_of(req, limits)?;
    let priority = req.priority.unwrap_or(match who {
        Asker::Caller(_) => PRIORITY_REQUEST,
        Asker::Miss => PRIORITY_MISS,
    });
    let budget = req.budget_ms.unwrap_or(limits.budget_ms) as i64;
    // Decided before the transaction: refusals and what the catalog already answers.
    let sm = sm_count(db, device).await?;
    enum Plan {
        Refuse(String),
        Answered,
        Tune,
    }
    let mut plans = Vec::with_capacity(asked.len());
    for a in &asked {
        plans.push(if let Some(why) = crate::tuner::ondemand::untunable(&a.problem, sm) {
            Plan::Refuse(why)
        } else if measured_answer(db, &a.problem, device).await?.is_some() {
            Plan::Answered
        } else {
            Plan::Tune
        });
    }
    let now = Utc::now();
    let requester = match who {
        Asker::Caller(c) => Some(c.submitter_id),
        Asker::Miss => None,
    };
    let txn = crate::db::begin_write(db).await?;
    let lock = match who {
        Asker::Caller(c) => format!("kaas.tune {}", c.submitter_id),
        Asker::Miss => "kaas.tune anonymous".to_string(),
    };
    crate::db::lock_in_transaction(&txn, &lock).await?;
    if let Asker::Miss = who {
        let minute_ago = now - chrono::Duration::seconds(60);
        let recent = tuning_request::Entity::find().filter(tuning_request::Column::SubmitterId.is_null()).filter(tuning_request::Column::CreatedAt.gt(minute_ago)).count(&txn).await?;
        if recent >= limits.on_miss_per_minute {
            txn.rollback().await?;
            return Err(WorkError::QuotaExceeded(format!("kernel lookups queued {recent} tunes in the last minute; the limit is {}", limits.on_miss_per_minute)));
        }
    }
    let request = tuning_request::ActiveModel {
        submitter_id: Set(requester),
        workload: Set(req.workload.clone()),
        device_class: Set(device.into()),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    // Tunes are written in problem order, so two requests sharing problems lock their rows
    // in the same order on Postgres (no deadlock).
    let mut order: Vec<usize> = (0..asked.len()).collect();
    order.sort_by_key(|&i| asked[i].problem);
    let mut tune_of: HashMap<usize, i32> = HashMap::new();
    let mut queued = 0;
    let mut added = 0;
    for i in order {
        if !matches!(plans[i], Plan::Tune) {
            continue;
        }
        let pid = bundle::ensure_problem(&txn, &asked[i].problem, &mut added).await?;
        let (t, new_job) = ensure_tune(&txn, pid, device, priority, budget, requester, now).await?;
        queued += usize::from(new_job);
        tune_of.insert(i, t.id);
    }
    for (i, a) in asked.iter().enumerate() {
        tuning_request_item::ActiveModel {
            request_id: Set(request.id),
            position: Set(i as i32),
            problem: Set(a.problem.path()),
            label: Set(a.label.clone()),
            tune_id: Set(tune_of.get(&i).copied()),
            refusal: Set(match &plans[i] {
                Plan::Refuse(why) => Some(why.clone()),
                _ => None,
            }),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
    }
    // The quota, counted with this request's tunes in it.
    let open = |by: Option<i32>| {
        let q = tune::Entity::find().filter(tune::Column::State.is_in(state::OPEN));
        match by {
            Some(id) => q.filter(tune::Column::RequestedBy.eq(id)),
            None => q.filter(tune::Column::RequestedBy.is_null()),
        }
    };
    match who {
        Asker::Caller(c) if c.role != Role::Admin => {
            let n = open(Some(c.submitter_id)).count(&txn).await?;
            if n > limits.max_open_per_submitter {
                txn.rollback().await?;
                return Err(WorkError::QuotaExceeded(format!(
                    "this request would leave {n} of your tunes queued or running; the limit is {}; wait for some to finish",
                    limits.max_open_per_submitter
                )));
            }
        }
        Asker::Miss => {
            let n = open(None).count(&txn).await?;
            if n > limits.on_miss_max_open {
                txn.rollback().await?;
                return Err(WorkError::QuotaExceeded(format!("{n} tunes queued by kernel lookups would be open; the limit is {}", limits.on_miss_max_open)));
            }
        }
        Asker::Caller(_) => {}
    }
    txn.commit().await?;
    let view = view(db, request.id).await?.ok_or_else(|| WorkError::Internal("tuning request vanished".into()))?;
    Ok(CreatedRequest { queued, view })
}

/// The tune of (problem, class), inserted if absent, and whether a job was queued for it
/// now: for a new tune, or a failed one asked for again. A higher priority asked by an
/// admin raises a waiting job's.
async fn ensure_tune<C: ConnectionTrait>(db: &C, pid: i32, class: &str, priority: i32, budget: i64, requester: Option<i32>, now: DateTime<Utc>) -> Result<(tune::Model, bool), DbErr> {
    let inserted = tune::Entity::insert(tune::ActiveModel {
        problem_id: Set(pid),
        device_class: Set(class.into()),
        state: Set(state::QUEUED.into()),
        priority: Set(priority),
        budget_ms: Set(budget),
        requested_by: Set(requester),
        stage: Set(Some(format!("waiting for a {class} worker"))),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    })
    .on_conflict(OnConflict::columns([tune::Column::ProblemId, tune::Column::DeviceClass]).do_nothing().to_owned())
    .exec_without_returning(db)
    .await?;
    let find = || tune::Entity::find().filter(tune::Column::ProblemId.eq(pid)).filter(tune::Column::DeviceClass.eq(class)).one(db);
    let t = find().await?.ok_or_else(|| DbErr::RecordNotFound(format!("tune of problem {pid} on {class} after insert")))?;
    let queue_now = if inserted == 1 {
        true
    } else if t.state == state::FAILED {
        // Asked again after a failure: queued again, charged to this requester.
        let res = tune::Entity::update_many()
            .col_expr(tune::Column::State, Expr::value(state::QUEUED))
            .col_expr(tune::Column::Priority, Expr::value(priority))
            .col_expr(tune::Column::BudgetMs, Expr::value(budget))
            .col_expr(tune::Column::RequestedBy, Expr::value(requester))
            .col_expr(tune::Column::Stage, Expr::value(format!("waiting for a {class} worker (asked again after a failure)")))
            .col_expr(tune::Column::UpdatedAt, Expr::value(now))
            .col_expr(tune::Column::FinishedAt, Expr::value(Option::<DateTime<Utc>>::None))
            .filter(tune::Column::Id.eq(t.id))
            .filter(tune::Column::State.eq(state::FAILED))
            .exec(db)
            .await?;
        res.rows_affected == 1
    } else {
        if priority > t.priority && state::OPEN.contains(&t.state.as_str()) {
            tune::Entity::update_many().col_expr(tune::Column::Priority, Expr::value(priority)).filter(tune::Column::Id.eq(t.id)).exec(db).await?;
            if let Some(jid) = t.job_id {
                job::Entity::update_many()
                    .col_expr(job::Column::Priority, Expr::value(priority))
                    .filter(job::Column::Id.eq(jid))
                    .filter(job::Column::State.eq(super::state::QUEUED))
                    .filter(job::Column::Priority.lt(priority))
                    .exec(db)
                    .await?;
            }
        }
        false
    };
    if !queue_now {
        return Ok((t, false));
    }
    let j = job::ActiveModel {
        submission_id: Set(None),
        manifest_id: Set(None),
        problem_id: Set(pid),
        device_class: Set(Some(class.into())),
        state: Set(super::state::QUEUED.into()),
        priority: Set(priority),
        attempts: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
        stage: Set(Some(format!("waiting for a {class} worker to tune it"))),
        kind: Set(KIND_TUNE.into()),
        tune_id: Set(Some(t.id)),
        ..Default::default()
    }
    .insert(db)
    .await?;
    tune::Entity::update_many().col_expr(tune::Column::JobId, Expr::value(j.id)).filter(tune::Column::Id.eq(t.id)).exec(db).await?;
    let t = find().await?.ok_or_else(|| DbErr::RecordNotFound(format!("tune {}", t.id)))?;
    Ok((t, true))
}

/// Where a queued job stands among the jobs a worker of its class would claim: 1 = next.
async fn queue_position<C: ConnectionTrait>(db: &C, job_id: i32) -> Result<Option<u64>, DbErr> {
    let Some(j) = job::Entity::find_by_id(job_id).one(db).await? else { return Ok(None) };
    if j.state != super::state::QUEUED {
        return Ok(None);
    }
    let mut class = sea_orm::Condition::any().add(job::Column::DeviceClass.is_null());
    if let Some(c) = &j.device_class {
        class = class.add(job::Column::DeviceClass.eq(c.clone()));
    }
    let ahead = job::Entity::find()
        .filter(job::Column::State.eq(super::state::QUEUED))
        .filter(class)
        .filter(
            sea_orm::Condition::any()
                .add(job::Column::Priority.gt(j.priority))
                .add(sea_orm::Condition::all().add(job::Column::Priority.eq(j.priority)).add(job::Column::Id.lt(j.id))),
        )
        .count(db)
        .await?;
    Ok(Some(ahead + 1))
}

fn kernel_url(path: &str, class: &str) -> String {
    format!("/v1/kernels/{path}?device={class}")
}

fn tune_url(path: &str, class: &str) -> String {
    format!("/v1/tunes/{path}?device={class}")
}

fn parse_result(t: &tune::Model) -> Option<TuneResult> {
    t.result.as_deref().and_then(|r| serde_json::from_str(r).ok())
}

/// An item's view from its tune.
async fn item_of_tune<C: ConnectionTrait>(db: &C, item: &mut TuningItemView, t: &tune::Model) -> Result<(), DbErr> {
    item.state = t.state.clone();
    item.tune_id = Some(t.id);
    item.stage = t.stage.clone();
    item.tune = Some(tune_url(&item.problem, &t.device_class));
    if state::OPEN.contains(&t.state.as_str()) {
        item.job_id = t.job_id;
        if let Some(j) = t.job_id {
            item.queue_position = queue_position(db, j).await?;
        }
    }
    let result = parse_result(t);
    match t.state.as_str() {
        state::SERVED => {
            item.kernel = Some(kernel_url(&item.problem, &t.device_class));
            item.speedup = result.and_then(|r| r.speedup);
        }
        state::BASELINE_FASTER => item.use_instead = result.and_then(|r| r.use_instead),
        state::FAILED => item.reason = t.message.clone(),
        _ => {}
    }
    Ok(())
}

/// A request with each item's state now; `None` when there is no such request.
pub async fn view(db: &DatabaseConnection, id: i32) -> Result<Option<TuningRequestView>, WorkError> {
    let Some(r) = tuning_request::Entity::find_by_id(id).one(db).await? else { return Ok(None) };
    let who = match r.submitter_id {
        Some(s) => submitter::Entity::find_by_id(s).one(db).await?.map(|x| x.name),
        None => None,
    };
    let items = tuning_request_item::Entity::find().filter(tuning_request_item::Column::RequestId.eq(id)).order_by_asc(tuning_request_item::Column::Position).all(db).await?;
    let tunes: HashMap<i32, tune::Model> = tune::Entity::find()
        .filter(tune::Column::Id.is_in(items.iter().filter_map(|i| i.tune_id).collect::<Vec<_>>()))
        .all(db)
        .await?
        .into_iter()
        .map(|t| (t.id, t))
        .collect();
    let mut views = Vec::with_capacity(items.len());
    for it in &items {
        let mut v = TuningItemView {
            problem: it.problem.clone(),
            label: it.label.clone(),
            state: state::REFUSED.into(),
            reason: it.refusal.clone(),
            tune_id: None,
            job_id: None,
            queue_position: None,
            stage: None,
            kernel: None,
            speedup: None,
            use_instead: None,
            tune: None,
        };
        match (it.tune_id.and_then(|t| tunes.get(&t)), &it.refusal) {
            (Some(t), _) => item_of_tune(db, &mut v, t).await?,
            (None, Some(_)) => {}
            (None, None) => {
                // Answered by the catalog when asked: as the catalog answers now.
                let p = Problem::from_path(&it.problem).map_err(|e| WorkError::Internal(format!("a stored request item's problem: {e}")))?;
                match measured_answer(db, &p, &r.device_class).await? {
                    Some((s, speedup, use_instead)) => {
                        v.state = s.into();
                        v.speedup = speedup;
                        v.use_instead = use_instead;
                        if s == state::SERVED {
                            v.kernel = Some(kernel_url(&it.problem, &r.device_class));
                        }
                    }
                    None => v.reason = Some("the catalog's answer it was given is gone; request it again".into()),
                }
            }
        }
        views.push(v);
    }
    let mut counts = BTreeMap::new();
    for v in &views {
        *counts.entry(v.state.clone()).or_insert(0) += 1;
    }
    let done = views.iter().all(|v| state::is_terminal(&v.state));
    Ok(Some(TuningRequestView {
        id: r.id,
        submitter: who,
        workload: r.workload,
        device_class: r.device_class,
        created_at: r.created_at,
        done,
        counts,
        items: views,
        links: TuningRequestLinks { self_: format!("/v1/tuning-requests/{id}"), events: format!("/v1/tuning-requests/{id}/events") },
    }))
}

/// The change marks of a request's tunes and their jobs, for the event feed.
pub async fn marks(db: &DatabaseConnection, id: i32) -> Result<Vec<(i32, String, Option<String>, DateTime<Utc>)>, DbErr> {
    let ids: Vec<i32> = tuning_request_item::Entity::find().filter(tuning_request_item::Column::RequestId.eq(id)).all(db).await?.into_iter().filter_map(|i| i.tune_id).collect();
    let mut out: Vec<(i32, String, Option<String>, DateTime<Utc>)> =
        tune::Entity::find().filter(tune::Column::Id.is_in(ids.clone())).order_by_asc(tune::Column::Id).all(db).await?.into_iter().map(|t| (t.id, t.state, t.stage, t.updated_at)).collect();
    let jobs = job::Entity::find().filter(job::Column::TuneId.is_in(ids)).filter(job::Column::State.is_in([super::state::QUEUED, super::state::RUNNING])).order_by_asc(job::Column::Id).all(db).await?;
    out.extend(jobs.into_iter().map(|j| (-j.id, j.state, j.stage, j.updated_at)));
    Ok(out)
}

/// The tune of a problem on a class, with its trace; `None` when never asked for.
pub async fn tune_view<C: ConnectionTrait>(db: &C, p: &Problem, class: &str) -> Result<Option<TuneView>, WorkError> {
    let Some(prow) = catalog::find_problem(db, p).await? else { return Ok(None) };
    let Some(t) = tune::Entity::find().filter(tune::Column::ProblemId.eq(prow.id)).filter(tune::Column::DeviceClass.eq(class)).one(db).await? else { return Ok(None) };
    let queue_position = match (t.job_id, state::OPEN.contains(&t.state.as_str())) {
        (Some(j), true) => queue_position(db, j).await?,
        _ => None,
    };
    let problem = problem_of(&prow)?;
    Ok(Some(TuneView {
        id: t.id,
        path: problem.path(),
        problem,
        device_class: t.device_class.clone(),
        state: t.state.clone(),
        stage: t.stage.clone(),
        message: t.message.clone(),
        priority: t.priority,
        budget_ms: t.budget_ms,
        job_id: t.job_id,
        queue_position,
        run_id: t.run_id,
        created_at: t.created_at,
        updated_at: t.updated_at,
        finished_at: t.finished_at,
        result: parse_result(&t),
        trace: t.trace.as_deref().and_then(|x| serde_json::from_str(x).ok()),
        kernel: (t.state == state::SERVED).then(|| kernel_url(&problem.path(), &t.device_class)),
    }))
}

/// The child's progress (`tuning`, `verifying`) onto the tune, while the job is this
/// worker's; `false` when it is not any more.
pub async fn progress(db: &DatabaseConnection, job_id: i32, worker_id: &str, lease: std::time::Duration, stage: &str, detail: &str) -> Result<bool, DbErr> {
    let text = if detail.is_empty() { stage.to_string() } else { format!("{stage}: {detail}") };
    if !queue::heartbeat(db, job_id, worker_id, lease, Some(&text)).await? {
        return Ok(false);
    }
    let to = if stage == state::VERIFYING { state::VERIFYING } else { state::TUNING };
    tune::Entity::update_many()
        .col_expr(tune::Column::State, Expr::value(to))
        .col_expr(tune::Column::Stage, Expr::value(text))
        .col_expr(tune::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(tune::Column::JobId.eq(job_id))
        .filter(tune::Column::State.is_in([state::TUNING, state::VERIFYING]))
        .exec(db)
        .await?;
    Ok(true)
}

/// The winners of the catalog problems nearest `p` on `class` (same arch, acc, layout;
/// nearest in log M, N, K), nearest first: the search's seeds.
pub async fn seeds_for(db: &DatabaseConnection, p: &Problem, class: &str, max: usize) -> Result<Vec<Seed>, DbErr> {
    let entries: Vec<_> = catalog::current_entries(db).await?.into_iter().filter(|e| e.device_class == class).collect();
    let problems: HashMap<i32, Problem> = problem::Entity::find()
        .filter(problem::Column::Arch.eq(p.arch.as_str()))
        .filter(problem::Column::Acc.eq(p.acc.as_str()))
        .filter(problem::Column::Layout.eq(p.layout.as_str()))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|row| problem_of(&row).ok().map(|q| (row.id, q)))
        .collect();
    let octaves = |a: u32, b: u32| (f64::from(a).log2() - f64::from(b).log2()).abs();
    let mut near: Vec<(f64, Problem, i32)> = entries
        .iter()
        .filter_map(|e| problems.get(&e.problem_id).filter(|q| *q != p).map(|q| (octaves(p.m, q.m) + octaves(p.n, q.n) + octaves(p.k, q.k), *q, e.run_id)))
        .collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    near.truncate(max);
    let runs: HashMap<i32, run::Model> = run::Entity::find().filter(run::Column::Id.is_in(near.iter().map(|n| n.2).collect::<Vec<_>>())).all(db).await?.into_iter().map(|r| (r.id, r)).collect();
    let manifests: HashMap<i32, crate::db::entities::manifest::Model> = crate::db::entities::manifest::Entity::find()
        .filter(crate::db::entities::manifest::Column::Id.is_in(runs.values().map(|r| r.manifest_id).collect::<Vec<_>>()))
        .all(db)
        .await?
        .into_iter()
        .map(|m| (m.id, m))
        .collect();
    let mut out = Vec::new();
    for (distance, q, run_id) in near {
        let Some(r) = runs.get(&run_id) else { continue };
        let Some(m) = manifests.get(&r.manifest_id) else { continue };
        let Ok(body) = serde_json::from_str::<crate::manifest::Manifest>(&m.body) else { continue };
        let Some(entry) = body.launches.first().map(|l| l.entry.clone()) else { continue };
        let speedup = r.speedups.as_deref().and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok()).and_then(|s| s.pointer("/graph/cublaslt_autotune_max").and_then(|v| v.as_f64()));
        out.push(Seed { problem: q.path(), entry, speedup, distance });
    }
    Ok(out)
}

/// Stores a tune job's outcome, in one transaction and only while the job is this
/// worker's: the winner's artifact, manifest and run (with the baselines it was timed
/// against), the catalog entry when it passed and beat every baseline, and the tune's
/// state: `served`, `baseline_faster` (a measured baseline is the answer) or `failed`.
pub async fn complete(db: &DatabaseConnection, job_id: i32, worker_id: &str, outcome: &TuneOutcome, facts: &DeviceFacts) -> Result<Stored, DbErr> {
    let now = Utc::now();
    let txn = crate::db::begin_write(db).await?;
    let Some(j) = job::Entity::find_by_id(job_id).one(&txn).await? else {
        txn.rollback().await?;
        return Ok(Stored::Lost);
    };
    if j.state != super::state::RUNNING || j.lease_owner.as_deref() != Some(worker_id) || j.kind != KIND_TUNE {
        txn.rollback().await?;
        return Ok(Stored::Lost);
    }
    let tid = j.tune_id.ok_or_else(|| DbErr::Custom(format!("tune job {job_id} has no tune")))?;
    let t = tune::Entity::find_by_id(tid).one(&txn).await?.ok_or_else(|| DbErr::Custom(format!("tune {tid} missing")))?;
    let class = t.device_class.clone();
    let device = outcome.run.device.clone().unwrap_or_else(|| facts.clone());
    queue::ensure_device_class(&txn, &device, &class).await?;
    let run_out = &outcome.run;
    let bench = run_out.bench.as_ref();
    let measured = queue::Measured::of(bench);
    let graph_speedups = catalog::ranked_speedups(measured.speedups.as_ref());
    let mut result = TuneResult {
        verdict: Some(run_out.verdict),
        message: run_out.message.clone(),
        code: outcome.winner.as_ref().map(|w| w.code.clone()),
        speedup: graph_speedups.as_ref().and_then(|g| g.get(catalog::AUTOTUNE_MAX)).and_then(|v| v.as_f64()),
        ..Default::default()
    };
    let mut run_id = None;
    if let Some(w) = &outcome.winner {
        let rec = bundle::store_artifact(&txn, &w.ptx, now).await.map_err(|e| DbErr::Custom(format!("the tune's winner: {e}")))?;
        let mid = bundle::ensure_manifest(&txn, &rec.sha256, j.problem_id, &w.manifest, now).await?;
        let mut details = queue::run_details(run_out, worker_id, j.attempts);
        details["tune_id"] = tid.into();
        details["code"] = w.code.clone().into();
        let rid = queue::insert_run(
            &txn,
            &j,
            mid,
            &class,
            run_out.verdict,
            &run_out.message,
            &measured,
            serde_json::to_string(&device).ok(),
            Some(details.to_string()),
            now,
        )
        .await?;
        queue::store_baselines(&txn, j.problem_id, &class, bench, now).await?;
        // Into the catalog only when it passed and beat every baseline.
        if run_out.verdict == Verdict::Pass && catalog::beats_all(&graph_speedups) == Some(true) {
            result.promoted = queue::promote_if_faster(&txn, &class, j.problem_id, rid, mid, &measured, now).await?;
        }
        run_id = Some(rid);
    }
    let serves = current_entry_beats_all(&txn, j.problem_id, &class).await?;
    let fastest = catalog::fastest_baseline(&catalog::baselines_for(&txn, j.problem_id, &class).await?);
    let (to, message) = if serves {
        (state::SERVED, None)
    } else if let Some(b) = fastest {
        let why = match (run_out.verdict, &outcome.winner) {
            (Verdict::Pass, _) => format!("the tuned kernel did not beat every baseline; use {} ({} layout), {:.2} µs", b.library, b.layout, b.median_us),
            (v, Some(w)) => format!("{} failed verification ({v}): {}; use {} ({} layout), {:.2} µs", w.code, run_out.message, b.library, b.layout, b.median_us),
            (v, None) => format!("the search found no kernel to verify ({v}): {}; use {} ({} layout)", run_out.message, b.library, b.layout),
        };
        result.use_instead = Some(b);
        (state::BASELINE_FASTER, Some(why))
    } else {
        (state::FAILED, Some(format!("{}: {}", run_out.verdict, run_out.message)))
    };
    tune::Entity::update_many()
        .col_expr(tune::Column::State, Expr::value(to))
        .col_expr(tune::Column::RunId, Expr::value(run_id))
        .col_expr(tune::Column::Trace, Expr::value(serde_json::to_string(&outcome.trace).ok()))
        .col_expr(tune::Column::Result, Expr::value(serde_json::to_string(&result).ok()))
        .col_expr(tune::Column::Message, Expr::value(message.clone()))
        .col_expr(tune::Column::Stage, Expr::value(to.to_string()))
        .col_expr(tune::Column::UpdatedAt, Expr::value(now))
        .col_expr(tune::Column::FinishedAt, Expr::value(now))
        .filter(tune::Column::Id.eq(tid))
        .exec(&txn)
        .await?;
    let job_state = if run_id.is_some() { super::state::DONE } else { super::state::FAILED };
    queue::finish_job(&txn, &j, job_state, run_id, message.filter(|_| run_id.is_none()), now).await?;
    txn.commit().await?;
    Ok(match run_id {
        Some(run_id) => Stored::Run { run_id, promoted: result.promoted },
        None => Stored::NoRun,
    })
}

/// Whether (problem, class)'s current catalog entry was benchmarked and beat every baseline.
async fn current_entry_beats_all<C: ConnectionTrait>(db: &C, problem_id: i32, class: &str) -> Result<bool, DbErr> {
    let Some(e) = crate::db::entities::catalog_entry::Entity::find()
        .filter(crate::db::entities::catalog_entry::Column::DeviceClass.eq(class))
        .filter(crate::db::entities::catalog_entry::Column::ProblemId.eq(problem_id))
        .order_by_desc(crate::db::entities::catalog_entry::Column::Id)
        .one(db)
        .await?
    else {
        return Ok(false);
    };
    let speedups = run::Entity::find_by_id(e.run_id).one(db).await?.and_then(|r| r.speedups).and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
    Ok(catalog::beats_all(&catalog::ranked_speedups(speedups.as_ref())) == Some(true))
}

/// The state of every tune on `class`, by problem path: what a listing shows for the
/// problems the catalog holds no entry for (a tune that ended `baseline_faster` is the
/// answer there, with the baselines it measured). Two queries, however long the listing.
pub async fn tune_states(db: &DatabaseConnection, class: &str) -> Result<HashMap<String, String>, DbErr> {
    let tunes = tune::Entity::find().filter(tune::Column::DeviceClass.eq(class)).all(db).await?;
    if tunes.is_empty() {
        return Ok(HashMap::new());
    }
    let paths: HashMap<i32, String> = problem::Entity::find()
        .filter(problem::Column::Id.is_in(tunes.iter().map(|t| t.problem_id)))
        .all(db)
        .await?
        .iter()
        .filter_map(|row| problem_of(row).ok().map(|p| (row.id, p.path())))
        .collect();
    Ok(tunes.into_iter().filter_map(|t| paths.get(&t.problem_id).map(|path| (path.clone(), t.state))).collect())
}

/// For a kernel lookup that found nothing: the problem's tune on `class`, if any.
pub async fn state_of(db: &DatabaseConnection, p: &Problem, class: &str) -> Result<Option<(tune::Model, Option<u64>)>, DbErr> {
    let Some(prow) = catalog::find_problem(db, p).await? else { return Ok(None) };
    let Some(t) = tune::Entity::find().filter(tune::Column::ProblemId.eq(prow.id)).filter(tune::Column::DeviceClass.eq(class)).one(db).await? else { return Ok(None) };
    let pos = match (t.job_id, state::OPEN.contains(&t.state.as_str())) {
        (Some(j), true) => queue_position(db, j).await?,
        _ => None,
    };
    Ok(Some((t, pos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: serde_json::Value) -> NewTuningRequest {
        serde_json::from_value(v).expect("a request")
    }

    #[test]
    fn problems_are_read_in_every_spelling_and_checked_whole() {
        let l = TuneLimits::default();
        let r = req(serde_json::json!({"problems": ["tn:4096x14336x4096", "sm_90/f16/nn/16x4096x4096", {"layout": "tn", "m": 1, "n": 4096, "k": 4096}], "acc": "f32"}));
        let ps: Vec<String> = problems_of(&r, &l).expect("ok").into_iter().map(|a| a.problem.path()).collect();
        assert_eq!(ps, ["sm_90/f32/tn/4096x14336x4096", "sm_90/f16/nn/16x4096x4096", "sm_90/f32/tn/1x4096x4096"]);
        let e = problems_of(&req(serde_json::json!({"problems": ["tn:64x64x64", "tn:0x64x64"]})), &l).unwrap_err();
        assert!(e.to_string().starts_with("problems[1]"), "{e}");
        let e = problems_of(&req(serde_json::json!({"problems": ["tn:64x64x64", "tn:64x64x64"]})), &l).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        let e = problems_of(&req(serde_json::json!({"problems": ["tn:65536x65536x65536"]})), &l).unwrap_err();
        assert!(e.to_string().contains("outside this service's tuning limit"), "{e}");
        assert!(matches!(problems_of(&req(serde_json::json!({})), &l), Err(WorkError::InvalidRequest(_))));
        assert!(matches!(problems_of(&req(serde_json::json!({"workload": "gpt-5"})), &l), Err(WorkError::UnknownWorkload(_))));
        let w = problems_of(&req(serde_json::json!({"workload": "llama-3.1-8b", "tokens": [1, 16]})), &l).expect("workload");
        assert_eq!(w.len(), 8);
        assert_eq!(w[0].label.as_deref(), Some("q_proj, o_proj @ 1 tokens"));
        let few = TuneLimits { max_problems: 3, ..TuneLimits::default() };
        assert!(matches!(problems_of(&req(serde_json::json!({"workload": "llama-3.1-8b"})), &few), Err(WorkError::InvalidProblem(_))));
    }
}
