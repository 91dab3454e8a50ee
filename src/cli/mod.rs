//! The `kaas` command line: one binary for operators (serve, import, export, token,
//! remeasure, openapi), workers, kernel authors (`run`) and users. The commands live
//! here; what they call lives in the layers below.

pub mod baselines;
pub mod run;
pub mod tune;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::api::{AppState, create_app};
use crate::auth::Role;
use crate::catalog::bundle;
use crate::config::{DEFAULT_DATABASE, ServeArgs};
use crate::db::{self, DbConfig};
use crate::problem::DeviceClass;

#[derive(Debug, Parser)]
#[command(name = "kaas", version, about = "HGEMM kernels as a service: verified, benchmarked half-precision GEMM kernels per GPU and shape")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// One command is parsed per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (API, OpenAPI, metrics). Imports the shipped catalog once per database, in one transaction.
    Serve(ServeArgs),
    /// Import a catalog bundle (index.json + ptx/) into the database, all or nothing.
    Import {
        /// Bundle directory.
        dir: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Export the current catalog as a bundle directory.
    Export {
        /// Bundle directory (created if missing).
        dir: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Queue the catalog's own kernels again (every N-th entry of a device class), to be
    /// verified and benchmarked by today's workers in both timing regimes; a run that
    /// passes replaces the entry's figures, one that fails withdraws it.
    Remeasure {
        /// The device class whose entries to queue (the jobs run on it).
        #[arg(long, default_value = "H100-SXM")]
        device_class: DeviceClass,
        /// Every N-th entry in (layout, acc, M·N·K) order.
        #[arg(long, default_value_t = 1)]
        every: usize,
        /// Start at this entry (0-based), to spread a pass over several runs.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// At most this many jobs.
        #[arg(long)]
        limit: Option<usize>,
        /// Only entries whose figures name no timing regime (not yet re-measured).
        #[arg(long)]
        unmeasured: bool,
        /// Only served entries of problems of 2^36 FLOP and up whose figures have no
        /// `paced` timing, which the benchmark now takes there and ranks by.
        #[arg(long)]
        unpaced: bool,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Time the baselines (cuBLAS, cuBLASLt heuristic and autotuned; NN and TN) on this
    /// machine's GPU and write them as a catalog bundle; or run the null test (--calibrate).
    Baselines(baselines::BaselinesArgs),
    /// Verify one job in this process: reads a job as JSON on stdin, writes its outcome as JSON on stdout. Workers spawn it; untrusted PTX runs only here.
    Sandbox {
        /// Print the GPUs this process sees (as JSON) and exit.
        #[arg(long)]
        probe: bool,
        /// Run a tune job instead (a problem to search, verify and benchmark): reads it as
        /// JSON on stdin, writes its outcome as JSON on stdout, progress on stderr.
        #[arg(long, conflicts_with = "probe")]
        tune: bool,
    },
    /// Compile one CUDA C++ source in this process, under memory and CPU limits: reads a
    /// compile job as JSON on stdin, writes its outcome as JSON on stdout. The service
    /// spawns it; submitted source is compiled only here.
    #[command(name = "compile-sandbox", hide = true)]
    CompileSandbox,
    /// Compile CUDA C++ source to PTX here, exactly as the service would for a source
    /// submission (no server): prints the PTX, each kernel's name and its registers.
    Compile(crate::compile::CompileArgs),
    /// Verify one kernel (PTX + manifest) on this machine's GPU in a sandbox process; with
    /// --bench also time it side by side with cuBLAS and cuBLASLt.
    Run(run::RunArgs),
    /// Run a GPU worker: claim jobs from the database, run each in `kaas sandbox`, store the runs.
    Worker(WorkerArgs),
    /// Submit a kernel (PTX + manifests) and follow it until every run has its verdict.
    Submit {
        #[command(flatten)]
        args: crate::client::SubmitArgs,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Ask the service to tune problems (or a workload's) and follow them until each is
    /// served, baseline_faster, failed or refused.
    Request {
        #[command(flatten)]
        args: crate::client::RequestArgs,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Show a submission's jobs and runs.
    Status {
        id: i32,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Cancel a submission's unfinished jobs (owner or admin).
    Cancel {
        id: i32,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Download the best kernel for a problem: kernel.ptx, manifest.json, kernel.json.
    Pull {
        #[command(flatten)]
        args: crate::client::PullArgs,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Check a directory written by `kaas pull` offline: the record's signature against the
    /// service's public key, kernel.ptx's sha256 and manifest.json against the signed record.
    Verify(crate::client::VerifyArgs),
    /// Create a signing key file for `kaas serve --signing-key-file` (the 32-byte seed as
    /// hex, readable by its owner only); prints the key id and public key.
    Keygen {
        /// The key file to create (an existing file is never overwritten).
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
    },
    /// Print a leaderboard: one problem's ranking, or submitters overall.
    Leaderboard {
        #[command(flatten)]
        args: crate::client::LeaderboardArgs,
        #[command(flatten)]
        server: crate::client::Server,
    },
    /// Generate and search Hopper kernel variants per problem on this machine's GPU; submit the winners.
    Tune(tune::TuneArgs),
    /// Print the OpenAPI document, or write it to a file.
    Openapi {
        /// Write to this file instead of standard output (e.g. openapi/openapi.json).
        #[arg(long)]
        write: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// The GPU to work on, as the driver numbers them (within CUDA_VISIBLE_DEVICES when set).
    #[arg(long, env = "KAAS_GPU", default_value_t = 0)]
    pub gpu: u32,
    #[command(flatten)]
    pub flags: crate::config::WorkerFlags,
    #[command(flatten)]
    pub db: DbArgs,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for a submitter (created if new); prints the secret once.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, value_enum, default_value = "submitter")]
        role: Role,
    },
    /// Revoke the token whose prefix (as `token list` shows it) starts with PREFIX.
    Revoke { prefix: String },
    /// List tokens (prefixes only; secrets are never stored).
    List,
}

#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// Database: a SQLite path or URL, or `postgres://…` [default: sqlite://kaas.db?mode=rwc; `DATABASE_URL` is read too].
    #[arg(long, env = "KAAS_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
}

impl DbArgs {
    fn url(&self) -> String {
        self.database_url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| DEFAULT_DATABASE.into())
    }
    async fn connect(&self) -> anyhow::Result<sea_orm::DatabaseConnection> {
        let url = self.url();
        db::connect(&DbConfig::new(&url)).await.with_context(|| format!("connecting to {}", redact(&url)))
    }
    /// As `connect`, for commands that work on a service's database (tokens, workers,
    /// exports): the default SQLite file, when it does not exist here, is an error rather
    /// than a new empty database (run in the wrong folder, `kaas token create` would
    /// otherwise mint a token no server knows). A database named explicitly is opened as
    /// named, created if its URL says so.
    async fn connect_existing(&self) -> anyhow::Result<sea_orm::DatabaseConnection> {
        let named = self.database_url.is_some() || std::env::var("DATABASE_URL").is_ok_and(|s| !s.is_empty());
        if let Some(file) = db::sqlite_file(&db::normalize_url(&self.url())).filter(|f| !named && !f.exists()) {
            anyhow::bail!(
                "no database at {} (in {}): run this where `kaas serve` runs, or name the service's database with --database-url or KAAS_DATABASE_URL",
                file.display(),
                std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "this folder".into())
            );
        }
        self.connect().await
    }
}

/// Hides a password in a database URL before it is printed.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(colon) => format!("{}:***{}", &url[..s + 3 + colon], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Import { dir, db } => {
            let conn = db.connect().await?;
            let report = bundle::import(&conn, &dir).await.with_context(|| format!("importing {}", dir.display()))?;
            println!("imported {}: {} artifacts, {} problems, {} catalog entries, {} baselines, {} tunes added", dir.display(), report.artifacts, report.problems, report.entries, report.baselines, report.tunes);
            Ok(())
        }
        Command::Export { dir, db } => {
            let conn = db.connect_existing().await?;
            let index = bundle::export(&conn, &dir).await.with_context(|| format!("exporting to {}", dir.display()))?;
            println!("exported {} catalog entries, {} artifacts, {} baselines to {}", index.entries.len(), index.artifacts.len(), index.baselines.len(), dir.display());
            Ok(())
        }
        Command::Remeasure { device_class, every, offset, limit, unmeasured, unpaced, db } => {
            let conn = db.connect_existing().await?;
            let sel = crate::work::remeasure::Selection { device_class, every, offset, limit, unmeasured_only: unmeasured, unpaced_only: unpaced };
            let q = crate::work::remeasure::queue_entries(&conn, &sel).await?;
            println!("{} catalog entries of {}: {} queued, {} already had an open job", q.entries, sel.device_class, q.queued, q.already_open);
            Ok(())
        }
        Command::Token { command, db } => {
            let conn = db.connect_existing().await?;
            match command {
                TokenCommand::Create { name, role } => {
                    let t = crate::auth::create_token(&conn, &name, role).await?;
                    eprintln!("token for {} ({}), shown once; keep it secret:", t.submitter, t.role.as_str());
                    println!("{}", t.secret);
                }
                TokenCommand::Revoke { prefix } => {
                    let t = crate::auth::revoke_token(&conn, &prefix).await?;
                    println!("revoked {}", t.prefix);
                }
                TokenCommand::List => {
                    println!("{:<14} {:<24} {:<10} {:<8} created", "prefix", "submitter", "role", "state");
                    for t in crate::auth::list_tokens(&conn).await? {
                        let state = if t.revoked { "revoked" } else { "active" };
                        println!("{:<14} {:<24} {:<10} {:<8} {}", t.prefix, t.submitter, t.role, state, t.created_at.format("%Y-%m-%d %H:%M"));
                    }
                }
            }
            Ok(())
        }
        Command::Baselines(args) => {
            // GPU work stays off the async executor.
            let rt = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || baselines::run_cli(args, rt)).await?
        }
        Command::Sandbox { probe, tune } => crate::sandbox::sandbox_main(probe, tune),
        Command::CompileSandbox => tokio::task::spawn_blocking(crate::compile::sandbox_main).await?,
        Command::Compile(args) => tokio::task::spawn_blocking(move || crate::compile::compile_cli(&args)).await?,
        Command::Run(args) => tokio::task::spawn_blocking(move || run::run_cli(args)).await?,
        Command::Worker(args) => {
            let conn = args.db.connect_existing().await?;
            let settings = args.flags.resolve(&Default::default())?;
            let probe = crate::work::worker::probe(crate::sandbox::SandboxCommand::from_env()?).await;
            let cfg = worker_config(&probe, args.gpu, &settings)?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = stop.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("stopping after the current job (Ctrl-C again to kill)");
                    flag.store(true, std::sync::atomic::Ordering::Relaxed);
                    if tokio::signal::ctrl_c().await.is_ok() {
                        std::process::exit(130);
                    }
                }
            });
            crate::work::worker::run(conn, cfg, stop).await
        }
        Command::Submit { args, server } => tokio::task::spawn_blocking(move || crate::client::submit(&server, &args)).await?,
        Command::Request { args, server } => tokio::task::spawn_blocking(move || crate::client::request(&server, &args)).await?,
        Command::Status { id, json, server } => tokio::task::spawn_blocking(move || crate::client::status(&server, id, json)).await?,
        Command::Cancel { id, server } => tokio::task::spawn_blocking(move || crate::client::cancel(&server, id)).await?,
        Command::Pull { args, server } => tokio::task::spawn_blocking(move || crate::client::pull(&server, &args)).await?,
        Command::Verify(args) => tokio::task::spawn_blocking(move || crate::client::verify(&args)).await?,
        Command::Keygen { out } => keygen(&out),
        Command::Leaderboard { args, server } => tokio::task::spawn_blocking(move || crate::client::leaderboard(&server, &args)).await?,
        Command::Tune(args) => tokio::task::spawn_blocking(move || tune::run_cli(args)).await?,
        Command::Openapi { write } => {
            let text = crate::api::openapi::document_text();
            match write {
                Some(path) => std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?,
                None => print!("{text}"),
            }
            Ok(())
        }
    }
}

/// `kaas keygen`: a new key file, created with owner-only permissions and never over an
/// existing file.
fn keygen(out: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let key = crate::signing::KeyPair::generate();
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(out).with_context(|| format!("creating {} (an existing key file is never overwritten)", out.display()))?;
    f.write_all(format!("{}\n", key.seed_hex()).as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    let p = key.public();
    eprintln!("wrote {}: keep it secret; start the service with --signing-key-file {}", out.display(), out.display());
    println!("key_id {}", p.key_id());
    println!("public_key {}", p.to_base64());
    Ok(())
}

/// The sandbox command for one GPU: the GPU made the only one its child sees.
fn sandbox_for(gpu: u32) -> anyhow::Result<crate::sandbox::SandboxCommand> {
    let visible = match std::env::var("CUDA_VISIBLE_DEVICES").ok().filter(|v| !v.trim().is_empty()) {
        // Within an inherited list, the n-th entry is device n.
        Some(list) => list.split(',').nth(gpu as usize).map(|s| s.trim().to_string()).ok_or_else(|| anyhow::anyhow!("GPU {gpu} is not in CUDA_VISIBLE_DEVICES={list}"))?,
        None => gpu.to_string(),
    };
    Ok(crate::sandbox::SandboxCommand::from_env()?.env("CUDA_VISIBLE_DEVICES", visible))
}

/// A worker for GPU `gpu`, from a probe of every device.
fn worker_config(probe: &crate::sandbox::Probe, gpu: u32, s: &crate::config::WorkerSettings) -> anyhow::Result<crate::work::worker::WorkerConfig> {
    let Some(facts) = probe.devices.get(gpu as usize) else {
        anyhow::bail!("no GPU {gpu}: {}", probe.error.clone().unwrap_or_else(|| format!("the driver sees {} device(s)", probe.devices.len())));
    };
    let mut facts = facts.clone();
    facts.ordinal = gpu;
    let bench = (s.bench_budget_ms > 0).then(|| crate::harness::BenchSettings { budget_ms: s.bench_budget_ms, ..Default::default() });
    Ok(crate::work::worker::WorkerConfig {
        id: crate::work::queue::worker_id(&format!("gpu{gpu}")),
        sandbox: sandbox_for(gpu)?,
        facts,
        lease: s.lease,
        poll: s.poll,
        max_attempts: s.max_attempts,
        bench,
        tune_ptx_dir: s.tune_ptx_dir.clone(),
    })
}

/// The `kaas serve --workers` workers of this process, planned from one probe of its GPUs
/// before the API starts (their classes decide the default tuning class), or what health
/// says when there are none.
async fn plan_local_workers(count: crate::config::WorkerCount, s: &crate::config::WorkerSettings) -> Result<Vec<crate::work::worker::WorkerConfig>, String> {
    use crate::config::WorkerCount;
    if count == WorkerCount::Fixed(0) {
        return Err("none: started with --workers 0 (`--workers auto` runs one per GPU); submissions wait for a `kaas worker`".into());
    }
    let cmd = crate::sandbox::SandboxCommand::from_env().map_err(|e| format!("none: cannot find the sandbox executable: {e}"))?;
    let probe = crate::work::worker::probe(cmd).await;
    let n = match count {
        WorkerCount::Auto => probe.devices.len() as u32,
        WorkerCount::Fixed(n) => n.min(probe.devices.len() as u32),
    };
    if n == 0 {
        let why = probe.error.clone().unwrap_or_else(|| "the driver sees no device".into());
        tracing::warn!(%why, "no GPU: serving and queueing only");
        return Err(format!("none: no GPU on this host ({why}); submissions are queued until a worker connects"));
    }
    Ok((0..n)
        .filter_map(|gpu| worker_config(&probe, gpu, s).inspect_err(|e| tracing::error!(error = %e, gpu, "cannot start a worker")).ok())
        .collect())
}

/// Starts the planned workers as tasks of this process; returns what health says.
fn spawn_local_workers(conn: &sea_orm::DatabaseConnection, planned: Result<Vec<crate::work::worker::WorkerConfig>, String>) -> String {
    let configs = match planned {
        Ok(c) => c,
        Err(note) => return note,
    };
    let mut names = Vec::new();
    for cfg in configs {
        names.push(format!("{} ({})", cfg.id, cfg.facts.device_class));
        let db = conn.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(async move {
            if let Err(e) = crate::work::worker::run(db, cfg, stop).await {
                tracing::error!(error = %e, "worker stopped");
            }
        });
    }
    format!("{} worker(s): {}", names.len(), names.join(", "))
}

/// The class a tuning request that names none is tuned on: the one the operator named;
/// else, where this process's own workers are all of one class, that class (a server on
/// H200s tunes for H200, not for a class none of its GPUs is); else the configured default.
fn default_tuning_class(named: bool, configured: &DeviceClass, local: &[DeviceClass]) -> DeviceClass {
    match local.split_first() {
        Some((first, rest)) if !named && rest.iter().all(|c| c == first) => first.clone(),
        _ => configured.clone(),
    }
}

/// The downloads listener (`crate::api::downloads`) on its own runtime of `threads`
/// threads. Artifacts it has not opened yet are looked up through the API's artifact cache
/// and database, by a task on this (the API's) runtime.
fn start_downloads(state: &Arc<AppState>, bind: &str, dir: &std::path::Path, threads: usize, limits: crate::api::downloads::Limits) -> anyhow::Result<()> {
    type Ask = (String, tokio::sync::oneshot::Sender<Result<Option<Arc<crate::api::cache::ArtifactBody>>, String>>);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Ask>();
    let api = actix_web::web::Data::from(state.clone());
    actix_web::rt::spawn(async move {
        while let Some((sha, reply)) = rx.recv().await {
            let found = crate::api::routes::artifacts::load(&api, &sha).await.map_err(|e| match e {
                crate::api::ApiError::Unavailable(why) | crate::api::ApiError::DatabaseUnreachable(why) => format!("{}{why}", crate::api::downloads::UNAVAILABLE),
                other => other.to_string(),
            });
            let _ = reply.send(found);
        }
    });
    let resolve: crate::api::downloads::Resolver = Arc::new(move |sha| {
        let tx = tx.clone();
        Box::pin(async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            tx.send((sha, reply)).map_err(|_| "the API runtime is gone".to_string())?;
            answer.await.map_err(|_| "the API runtime dropped the lookup".to_string())?
        })
    });
    let downloads = crate::api::downloads::Downloads::with_limits(dir, resolve, limits).with_context(|| format!("creating {}", dir.display()))?;
    let listener = std::net::TcpListener::bind(bind).with_context(|| format!("binding the downloads listener {bind}"))?;
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).thread_name("kaas-downloads").enable_all().build()?;
    tracing::info!(bind, dir = %dir.display(), "downloads listener: GET /v1/artifacts/{{sha256}} with sendfile");
    std::thread::Builder::new().name("kaas-downloads".into()).spawn(move || {
        let result = runtime.block_on(async move { crate::api::downloads::serve(tokio::net::TcpListener::from_std(listener)?, downloads).await });
        if let Err(e) = result {
            tracing::error!(error = %e, "the downloads listener stopped");
        }
    })?;
    Ok(())
}

/// Raises the soft descriptor limit to the hard one (as nginx's `worker_rlimit_nofile`
/// would): the downloads listener budgets its connections against the soft limit, and
/// the common default of 1024 is far below what a host allows.
fn raise_nofile_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // An unlimited hard limit cannot be the soft one (Linux caps it at fs.nr_open): leave it.
    if limit.maximum.is_some() && limit.current != limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the descriptor limit to its hard limit");
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let s = args.resolve()?;
    raise_nofile_limit();
    let mut cfg = DbConfig::new(&s.database_url);
    cfg.max_connections = s.api.db_max_connections;
    cfg.acquire_timeout = s.db_acquire_timeout;
    // Migrations and the first import run in one process at a time; replicas started
    // together wait here, then find both done. Nothing is served before this is complete.
    // The lock comes before the pool: opening a fresh SQLite file switches it to WAL,
    // which fails with "database is locked" while another process migrates it.
    let lock = db::StartLock::acquire(&cfg).await.with_context(|| format!("locking {} for start-up", redact(&s.database_url)))?;
    let conn = db::open(&cfg).await.with_context(|| format!("connecting to {}", redact(&s.database_url)))?;
    db::migrate(&conn).await.with_context(|| format!("migrating {}", redact(&s.database_url)))?;
    // Started away from the repository's root, the default `kernels` is not there: serving
    // an empty catalog would answer every look-up `unknown_device`, which misleads.
    if !s.catalog_named && !s.catalog.is_dir() && crate::catalog::is_empty(&conn).await? {
        let here = std::env::current_dir().map(|d| format!(" in {}", d.display())).unwrap_or_default();
        anyhow::bail!(
            "no catalog to import: there is no `{}` folder{here}, and the database holds no catalog yet. Start `kaas serve` in the repository's root, where the shipped catalog is, or name it with --catalog PATH (KAAS_CATALOG); an empty folder there serves an empty catalog on purpose",
            s.catalog.display()
        );
    }
    let seeded = crate::catalog::seed::seed(&conn, &s.catalog).await.with_context(|| format!("importing the shipped catalog {}", s.catalog.display()))?;
    lock.release().await;
    match seeded {
        crate::catalog::seed::Seeded::Imported(r) if r.bundles.is_empty() => {
            tracing::warn!(catalog = %s.catalog.display(), "no catalog bundle to import; serving an empty catalog")
        }
        crate::catalog::seed::Seeded::Imported(r) => tracing::info!(added = ?r.added, bundles = ?r.bundles, catalog = %s.catalog.display(), "imported the shipped catalog"),
        crate::catalog::seed::Seeded::Already(r) => tracing::info!(at = %r.completed_at, "the shipped catalog was imported before"),
    }
    let planned = plan_local_workers(s.workers, &s.worker).await;
    let local: Vec<DeviceClass> = planned.iter().flatten().map(|w| w.facts.device_class.clone()).collect();
    let mut api = s.api.clone();
    api.tune.device_class = default_tuning_class(s.tune_class_named, &api.tune.device_class, &local);
    tracing::info!(class = %api.tune.device_class, named = s.tune_class_named, "tuning requests that name no device class tune for this class");
    let state = AppState::new(conn.clone(), api)?;
    // Load (or create) the signing key now, so a bad key shows at start and not on a read.
    state.signer().await.map_err(|e| anyhow::anyhow!("loading the signing key: {e}"))?;
    let note = spawn_local_workers(&conn, planned);
    tracing::info!(workers = %note, "GPU workers");
    state.set_local_workers(note);
    tracing::info!(bind = %s.bind, database = %redact(&s.database_url), backend = db::backend_name(&state.db), "kaas serving; API docs at /docs");
    if let Some((bind, dir)) = &s.downloads {
        start_downloads(&state, bind, dir, s.http_threads, s.downloads_limits.clone())?;
    }
    // actix-web's server with a front that answers a refused first request head with
    // problem+json and holds the port's connection limits (crate::api::front); TCP_NODELAY
    // on every connection, as nginx sets.
    let nofile = crate::api::downloads::nofile_limit();
    // The downloads listener's whole budget is not the API's to use.
    let downloads_fds = s.downloads.as_ref().map_or(0, |_| {
        let b = s.downloads_limits.budget(nofile);
        b.connections as u64 + 2 * b.open_artifacts + 1
    });
    let limits = s.api_limits.clone();
    // Each worker may hold a few accepted connections past its share, to refuse them.
    let headroom = (s.http_threads.max(1) * (crate::api::front::REFUSAL_HEADROOM + 1)) as u64;
    let connections = limits.connections(nofile, downloads_fds + headroom);
    let admission = crate::api::conns::Admission::new("the API port", connections, limits.max_connections_per_peer);
    let port = crate::api::front::Port { name: "kaas-api", bind: s.bind.clone(), threads: s.http_threads, limits, admission };
    let api_state = state.clone();
    let api = crate::api::front::server(port, move || create_app(api_state.clone())).with_context(|| {
        format!("cannot listen on {} (another kaas serve, or another program, may hold it; choose another address with --bind HOST:PORT or KAAS_BIND)", s.bind)
    })?;
    let Some(bind) = &s.health_bind else {
        api.await?;
        return Ok(());
    };
    // Probes get a port, a thread and connections of their own: a client that fills the
    // API port's connections, threads or per-address share cannot reach them here.
    let limits = crate::api::front::Limits { max_connections: HEALTH_CONNECTIONS, max_connections_per_peer: HEALTH_CONNECTIONS, ..s.api_limits.clone() };
    let admission = crate::api::conns::Admission::new("the health listener", HEALTH_CONNECTIONS, HEALTH_CONNECTIONS);
    let port = crate::api::front::Port { name: "kaas-health", bind: bind.clone(), threads: 1, limits, admission };
    tracing::info!(%bind, "health listener: /v1/health, /v1/health/ready, /v1/health/live, /metrics");
    let health = crate::api::front::server(port, move || crate::api::create_health_app(state.clone())).with_context(|| format!("cannot listen on {bind} for the health listener (choose another address with --health-bind)"))?;
    tokio::try_join!(api, health)?;
    Ok(())
}

/// Connections the health listener holds at once (within the API port's descriptor reserve).
const HEALTH_CONNECTIONS: usize = 16;

#[cfg(test)]
mod tests {
    #[test]
    fn the_database_flag_goes_after_the_subcommand_too() {
        use clap::Parser;
        let cli = super::Cli::try_parse_from(["kaas", "token", "create", "--name", "a", "--database-url", "x.db"]).unwrap();
        let super::Command::Token { db, .. } = cli.command else { panic!("not a token command") };
        assert_eq!(db.database_url.as_deref(), Some("x.db"));
        assert!(super::Cli::try_parse_from(["kaas", "serve", "--bnid", "x"]).is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(super::redact("postgres://kaas:s3cret@db:5432/kaas"), "postgres://kaas:***@db:5432/kaas");
        assert_eq!(super::redact("sqlite://kaas.db?mode=rwc"), "sqlite://kaas.db?mode=rwc");
    }

    #[test]
    fn a_server_whose_own_gpus_are_one_class_tunes_for_it_unless_a_class_was_named() {
        use super::{DeviceClass, default_tuning_class as pick};
        let (h100, h200): (DeviceClass, DeviceClass) = ("H100-SXM".into(), "H200".into());
        assert_eq!(pick(false, &h100, &[h200.clone(), h200.clone()]), h200, "two H200 workers");
        assert_eq!(pick(true, &h100, &[h200.clone()]), h100, "the operator's class wins");
        assert_eq!(pick(false, &h100, &[h200.clone(), h100.clone()]), h100, "a mixed host keeps the configured class");
        assert_eq!(pick(false, &h100, &[]), h100, "no local worker: the configured class");
    }

    #[test]
    fn the_tuning_class_counts_as_named_from_the_flag() {
        use clap::Parser;
        let named = |args: &[&str]| {
            let cli = super::Cli::try_parse_from(args).unwrap();
            let super::Command::Serve(a) = cli.command else { panic!("not serve") };
            a.resolve().unwrap().tune_class_named
        };
        assert!(!named(&["kaas", "serve"]));
        assert!(named(&["kaas", "serve", "--tune-device-class", "H200"]));
    }
}
