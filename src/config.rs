//! Configuration of `kaas serve`: flags, then `KAAS_*` environment variables, then an
//! optional TOML file (`--config`), then defaults. clap reads flags and environment;
//! the file fills what neither gave.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::api::ApiSettings;
use crate::problem::DeviceClass;

pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
pub const DEFAULT_DATABASE: &str = "sqlite://kaas.db?mode=rwc";
pub const DEFAULT_CATALOG: &str = "kernels";

/// Flags (and their environment variables) of `kaas serve`. Unset values fall back to
/// the TOML file, then to the defaults shown.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (keys as the long flags, with `_`).
    #[arg(long, env = "KAAS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "KAAS_BIND")]
    pub bind: Option<String>,
    /// Database: a SQLite path or URL, or `postgres://…` [default: sqlite://kaas.db?mode=rwc; `DATABASE_URL` is read too].
    #[arg(long, env = "KAAS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Catalog bundle tree imported at the first start against a database, once, in one transaction [default: kernels].
    #[arg(long, env = "KAAS_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// HTTP worker threads [default: number of CPUs].
    #[arg(long, env = "KAAS_HTTP_THREADS")]
    pub http_threads: Option<usize>,
    /// Also serve `GET /v1/artifacts/{sha256}` on this address with sendfile(2), for bulk
    /// downloads [default: off].
    #[arg(long, env = "KAAS_DOWNLOADS_BIND")]
    pub downloads_bind: Option<String>,
    /// Where the downloads listener keeps the artifact files [default: kaas-artifacts in the system's temporary directory].
    #[arg(long, env = "KAAS_DOWNLOADS_DIR")]
    pub downloads_dir: Option<PathBuf>,
    /// Seconds a request head may take to arrive on the downloads listener before 408 [default: 10].
    #[arg(long, env = "KAAS_DOWNLOADS_HEADER_TIMEOUT_SECS")]
    pub downloads_header_timeout_secs: Option<u64>,
    /// Seconds a downloads connection may sit without a request, or a response unread, before it is closed [default: 60].
    #[arg(long, env = "KAAS_DOWNLOADS_IDLE_TIMEOUT_SECS")]
    pub downloads_idle_timeout_secs: Option<u64>,
    /// Connections the downloads listener holds at once; fewer if the descriptor limit less the reserve is smaller [default: 4096].
    #[arg(long, env = "KAAS_DOWNLOADS_MAX_CONNECTIONS")]
    pub downloads_max_connections: Option<usize>,
    /// Connections the downloads listener holds at once from one IP address [default: 64].
    #[arg(long, env = "KAAS_DOWNLOADS_MAX_CONNECTIONS_PER_PEER")]
    pub downloads_max_connections_per_peer: Option<usize>,
    /// File descriptors the downloads listener leaves to the API, database and logs [default: 256].
    #[arg(long, env = "KAAS_DOWNLOADS_RESERVE_FDS")]
    pub downloads_reserve_fds: Option<u64>,
    /// Largest request body in bytes [default: 16777216].
    #[arg(long, env = "KAAS_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Seconds a request body may go without a byte before 408 and the connection closed [default: 5].
    #[arg(long, env = "KAAS_BODY_TIMEOUT_SECS")]
    pub body_timeout_secs: Option<u64>,
    /// Seconds a request body may take in all before 408 and the connection closed [default: 60].
    #[arg(long, env = "KAAS_BODY_DEADLINE_SECS")]
    pub body_deadline_secs: Option<u64>,
    /// Seconds an API connection may sit without a request, or a response unread, before it is closed [default: 5].
    #[arg(long, env = "KAAS_IDLE_TIMEOUT_SECS")]
    pub idle_timeout_secs: Option<u64>,
    /// Connections the API port holds at once; fewer if the descriptor limit less the reserve (and the downloads listener's share) is smaller [default: 4096].
    #[arg(long, env = "KAAS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections the API port holds at once from one IP address [default: 64].
    #[arg(long, env = "KAAS_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: Option<usize>,
    /// Requests one API token may have in progress at once [default: 32].
    #[arg(long, env = "KAAS_MAX_REQUESTS_PER_TOKEN")]
    pub max_requests_per_token: Option<usize>,
    /// File descriptors the API port leaves to the database pool, the health listener, logs and files [default: 128].
    #[arg(long, env = "KAAS_RESERVE_FDS")]
    pub reserve_fds: Option<u64>,
    /// Also answer /v1/health, /v1/health/ready, /v1/health/live and /metrics on this
    /// address, on a thread and connection budget of their own, for probes: they answer
    /// there however saturated the API port is [default: off].
    #[arg(long, env = "KAAS_HEALTH_BIND")]
    pub health_bind: Option<String>,
    /// Requests per minute allowed per API token on authenticated endpoints [default: 120].
    #[arg(long, env = "KAAS_RATE_LIMIT_PER_MINUTE")]
    pub rate_limit_per_minute: Option<u32>,
    /// Requests a token may make in a burst before the per-minute rate applies [default: 30].
    #[arg(long, env = "KAAS_RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<u32>,
    /// Where the rate limit is counted: `fleet` (in the database, all replicas together) or `replica` (this process's memory) [default: fleet].
    #[arg(long, env = "KAAS_RATE_LIMIT_SCOPE")]
    pub rate_limit_scope: Option<String>,
    /// Bytes of PTX kept in the in-memory artifact cache [default: 268435456].
    #[arg(long, env = "KAAS_ARTIFACT_CACHE_BYTES")]
    pub artifact_cache_bytes: Option<u64>,
    /// Seconds a rendered catalog answer may be served from cache (other replicas' writes
    /// show up within this) [default: 10].
    #[arg(long, env = "KAAS_CATALOG_CACHE_TTL_SECS")]
    pub catalog_cache_ttl_secs: Option<u64>,
    /// Database connection pool size [default: 16].
    #[arg(long, env = "KAAS_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
    /// Milliseconds a request waits for a database connection before 503: how long an outage takes to be answered [default: 1000].
    #[arg(long, env = "KAAS_DB_ACQUIRE_TIMEOUT_MS")]
    pub db_acquire_timeout_ms: Option<u64>,
    /// Largest PTX a submission may carry, in bytes [default: 4194304].
    #[arg(long, env = "KAAS_MAX_ARTIFACT_BYTES")]
    pub max_artifact_bytes: Option<usize>,
    /// Jobs one submitter may have queued or running at once; admins are exempt [default: 256].
    #[arg(long, env = "KAAS_MAX_QUEUED_JOBS")]
    pub max_queued_jobs: Option<u64>,
    /// Bytes of PTX one submitter's uploads and submissions may store in all; admins are exempt [default: 268435456].
    #[arg(long, env = "KAAS_MAX_STORED_BYTES_PER_SUBMITTER")]
    pub max_stored_bytes_per_submitter: Option<u64>,
    /// Submission event streams (`/v1/submissions/{id}/events`) one client address may hold open at once [default: 8].
    #[arg(long, env = "KAAS_MAX_EVENT_STREAMS_PER_CLIENT")]
    pub max_event_streams_per_client: Option<usize>,
    /// Device class a tuning request that names none is tuned on [default: the class of this
    /// process's GPU workers (`--workers`) when they are all of one class, else H100-SXM].
    #[arg(long, env = "KAAS_TUNE_DEVICE_CLASS")]
    pub tune_device_class: Option<DeviceClass>,
    /// The tune job's search budget per problem, in ms (verification and benchmark come after it) [default: 60000].
    #[arg(long, env = "KAAS_TUNE_BUDGET_MS")]
    pub tune_budget_ms: Option<u64>,
    /// Tunes one submitter's requests may have queued or running at once; admins are exempt [default: 128].
    #[arg(long, env = "KAAS_MAX_OPEN_TUNES")]
    pub max_open_tunes: Option<u64>,
    /// Let a kernel lookup that finds nothing queue a tune of its problem itself (anonymous, rate-limited and capped) [default: false].
    #[arg(long, env = "KAAS_TUNE_ON_MISS")]
    pub tune_on_miss: Option<bool>,
    /// Tunes kernel lookups may queue per minute, all replicas together [default: 10].
    #[arg(long, env = "KAAS_TUNE_ON_MISS_PER_MINUTE")]
    pub tune_on_miss_per_minute: Option<u64>,
    /// Tunes queued by kernel lookups that may be open at once [default: 32].
    #[arg(long, env = "KAAS_TUNE_ON_MISS_MAX_OPEN")]
    pub tune_on_miss_max_open: Option<u64>,
    /// GPU workers to run in this process: `auto` (one per GPU the driver sees), or a number (0: none) [default: 0].
    #[arg(long, env = "KAAS_WORKERS")]
    pub workers: Option<String>,
    /// File holding the Ed25519 key run records are signed with: its 32-byte seed as 64 hex
    /// digits (what `kaas keygen` writes) or base64. Give every replica the same file
    /// [default: a key generated once and kept in the database].
    #[arg(long, env = "KAAS_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub worker: WorkerFlags,
}

/// Settings of a GPU worker, shared by `kaas worker` and `kaas serve --workers`.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerFlags {
    /// Seconds a job's lease lasts unless renewed; a worker renews it every third of that [default: 30].
    #[arg(long, env = "KAAS_LEASE_SECS")]
    pub lease_secs: Option<u64>,
    /// Milliseconds between claims while the queue is empty [default: 1000].
    #[arg(long, env = "KAAS_POLL_MS")]
    pub poll_ms: Option<u64>,
    /// Attempts before a job that never finishes is given up with the verdict `worker_lost` [default: 3].
    #[arg(long, env = "KAAS_MAX_ATTEMPTS")]
    pub max_attempts: Option<i32>,
    /// Time budget of the side-by-side benchmark rounds per job, in ms; 0 verifies without timing [default: 3000].
    #[arg(long, env = "KAAS_BENCH_BUDGET_MS")]
    pub bench_budget_ms: Option<u64>,
    /// PTX of the tuner's templates compiled beforehand (`kaas tune --emit-ptx DIR`), which tune
    /// jobs use before compiling with NVRTC: a GPU host without NVRTC still tunes. Built by a
    /// binary with the same templates (its `templates.sha256` is checked when the worker starts).
    #[arg(long, env = "KAAS_TUNE_PTX_DIR")]
    pub tune_ptx_dir: Option<PathBuf>,
}

/// Resolved worker settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    pub lease: Duration,
    pub poll: Duration,
    pub max_attempts: i32,
    pub bench_budget_ms: u64,
    pub tune_ptx_dir: Option<PathBuf>,
}

impl WorkerFlags {
    /// Flags first, then `file`, then defaults; a `--tune-ptx-dir` not built from this
    /// binary's templates is an error here, before any worker starts.
    pub fn resolve(&self, file: &WorkerFlags) -> anyhow::Result<WorkerSettings> {
        let tune_ptx_dir = self.tune_ptx_dir.clone().or_else(|| file.tune_ptx_dir.clone());
        if let Some(dir) = &tune_ptx_dir {
            crate::tuner::check_ptx_dir(dir).map_err(|e| anyhow::anyhow!("--tune-ptx-dir: {e:#}"))?;
        }
        Ok(WorkerSettings {
            lease: Duration::from_secs(self.lease_secs.or(file.lease_secs).unwrap_or(30).max(1)),
            poll: Duration::from_millis(self.poll_ms.or(file.poll_ms).unwrap_or(1000).max(10)),
            max_attempts: self.max_attempts.or(file.max_attempts).unwrap_or(3).max(1),
            bench_budget_ms: self.bench_budget_ms.or(file.bench_budget_ms).unwrap_or(3000),
            tune_ptx_dir,
        })
    }
}

/// How many workers `kaas serve` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerCount {
    Auto,
    Fixed(u32),
}

impl std::str::FromStr for WorkerCount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(WorkerCount::Auto),
            n => n.parse().map(WorkerCount::Fixed).map_err(|_| format!("--workers must be `auto` or a number, not `{s}`")),
        }
    }
}

/// The same settings as read from a TOML file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub bind: Option<String>,
    pub database_url: Option<String>,
    pub catalog: Option<PathBuf>,
    pub http_threads: Option<usize>,
    pub downloads_bind: Option<String>,
    pub downloads_dir: Option<PathBuf>,
    pub downloads_header_timeout_secs: Option<u64>,
    pub downloads_idle_timeout_secs: Option<u64>,
    pub downloads_max_connections: Option<usize>,
    pub downloads_max_connections_per_peer: Option<usize>,
    pub downloads_reserve_fds: Option<u64>,
    pub max_body_bytes: Option<usize>,
    pub body_timeout_secs: Option<u64>,
    pub body_deadline_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub max_connections: Option<usize>,
    pub max_connections_per_peer: Option<usize>,
    pub max_requests_per_token: Option<usize>,
    pub reserve_fds: Option<u64>,
    pub health_bind: Option<String>,
    pub rate_limit_per_minute: Option<u32>,
    pub rate_limit_burst: Option<u32>,
    pub rate_limit_scope: Option<String>,
    pub artifact_cache_bytes: Option<u64>,
    pub catalog_cache_ttl_secs: Option<u64>,
    pub db_max_connections: Option<u32>,
    pub db_acquire_timeout_ms: Option<u64>,
    pub max_artifact_bytes: Option<usize>,
    pub max_queued_jobs: Option<u64>,
    pub max_stored_bytes_per_submitter: Option<u64>,
    pub max_event_streams_per_client: Option<usize>,
    pub tune_device_class: Option<DeviceClass>,
    pub tune_budget_ms: Option<u64>,
    pub max_open_tunes: Option<u64>,
    pub tune_on_miss: Option<bool>,
    pub tune_on_miss_per_minute: Option<u64>,
    pub tune_on_miss_max_open: Option<u64>,
    pub workers: Option<String>,
    pub signing_key_file: Option<PathBuf>,
    #[serde(default)]
    pub worker: WorkerFlags,
}

/// Resolved settings of `kaas serve`.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub bind: String,
    pub database_url: String,
    pub catalog: PathBuf,
    /// Whether the catalog folder was named (flag, variable or file) rather than the
    /// default `kernels`: a named folder that is missing is an empty catalog on purpose.
    pub catalog_named: bool,
    /// Whether the tuning class was named (flag, variable or file): unnamed, a server whose
    /// own GPU workers are all of one class tunes for that class (`cli::serve`).
    pub tune_class_named: bool,
    pub http_threads: usize,
    /// The downloads listener's address and directory, when it is on.
    pub downloads: Option<(String, PathBuf)>,
    pub downloads_limits: crate::api::downloads::Limits,
    /// The API port's connection limits.
    pub api_limits: crate::api::front::Limits,
    /// The health listener's address, when it is on.
    pub health_bind: Option<String>,
    pub db_acquire_timeout: Duration,
    pub api: ApiSettings,
    pub workers: WorkerCount,
    pub worker: WorkerSettings,
}

impl ServeArgs {
    pub fn resolve(&self) -> anyhow::Result<ServeSettings> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
                toml::from_str::<FileSettings>(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?
            }
            None => FileSettings::default(),
        };
        let d = ApiSettings::default();
        let dl = crate::api::downloads::Limits::default();
        // Zero timeouts would close every connection at once: at least a second.
        let secs = |v: Option<u64>, default: Duration| v.map(|s| Duration::from_secs(s.max(1))).unwrap_or(default);
        let downloads_limits = crate::api::downloads::Limits {
            header_timeout: secs(self.downloads_header_timeout_secs.or(file.downloads_header_timeout_secs), dl.header_timeout),
            idle_timeout: secs(self.downloads_idle_timeout_secs.or(file.downloads_idle_timeout_secs), dl.idle_timeout),
            max_connections: self.downloads_max_connections.or(file.downloads_max_connections).unwrap_or(dl.max_connections).max(1),
            max_connections_per_peer: self.downloads_max_connections_per_peer.or(file.downloads_max_connections_per_peer).unwrap_or(dl.max_connections_per_peer).max(1),
            reserve_fds: self.downloads_reserve_fds.or(file.downloads_reserve_fds).unwrap_or(dl.reserve_fds),
        };
        let fl = crate::api::front::Limits::default();
        let api_limits = crate::api::front::Limits {
            idle_timeout: secs(self.idle_timeout_secs.or(file.idle_timeout_secs), fl.idle_timeout),
            max_connections: self.max_connections.or(file.max_connections).unwrap_or(fl.max_connections).max(1),
            max_connections_per_peer: self.max_connections_per_peer.or(file.max_connections_per_peer).unwrap_or(fl.max_connections_per_peer).max(1),
            reserve_fds: self.reserve_fds.or(file.reserve_fds).unwrap_or(fl.reserve_fds),
        };
        let database_url = self
            .database_url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty()))
            .or(file.database_url)
            .unwrap_or_else(|| DEFAULT_DATABASE.into());
        Ok(ServeSettings {
            bind: self.bind.clone().or(file.bind).unwrap_or_else(|| DEFAULT_BIND.into()),
            database_url,
            catalog_named: self.catalog.is_some() || file.catalog.is_some(),
            tune_class_named: self.tune_device_class.is_some() || file.tune_device_class.is_some(),
            catalog: self.catalog.clone().or(file.catalog).unwrap_or_else(|| DEFAULT_CATALOG.into()),
            http_threads: self
                .http_threads
                .or(file.http_threads)
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)),
            downloads: self.downloads_bind.clone().or(file.downloads_bind).map(|bind| {
                let dir = self.downloads_dir.clone().or(file.downloads_dir).unwrap_or_else(|| std::env::temp_dir().join("kaas-artifacts"));
                (bind, dir)
            }),
            downloads_limits,
            api_limits,
            health_bind: self.health_bind.clone().or(file.health_bind),
            db_acquire_timeout: self
                .db_acquire_timeout_ms
                .or(file.db_acquire_timeout_ms)
                .map(|ms| Duration::from_millis(ms.max(50)))
                .unwrap_or(crate::db::DEFAULT_ACQUIRE_TIMEOUT),
            api: ApiSettings {
                max_body_bytes: self.max_body_bytes.or(file.max_body_bytes).unwrap_or(d.max_body_bytes),
                body_timeout: secs(self.body_timeout_secs.or(file.body_timeout_secs), d.body_timeout),
                body_deadline: secs(self.body_deadline_secs.or(file.body_deadline_secs), d.body_deadline),
                max_requests_per_token: self.max_requests_per_token.or(file.max_requests_per_token).unwrap_or(d.max_requests_per_token).max(1),
                rate_limit_per_minute: self.rate_limit_per_minute.or(file.rate_limit_per_minute).unwrap_or(d.rate_limit_per_minute),
                rate_limit_burst: self.rate_limit_burst.or(file.rate_limit_burst).unwrap_or(d.rate_limit_burst),
                rate_limit_scope: self
                    .rate_limit_scope
                    .clone()
                    .or(file.rate_limit_scope)
                    .map(|s| s.parse())
                    .transpose()
                    .map_err(anyhow::Error::msg)?
                    .unwrap_or(d.rate_limit_scope),
                artifact_cache_bytes: self.artifact_cache_bytes.or(file.artifact_cache_bytes).unwrap_or(d.artifact_cache_bytes),
                catalog_cache_ttl: self
                    .catalog_cache_ttl_secs
                    .or(file.catalog_cache_ttl_secs)
                    .map(Duration::from_secs)
                    .unwrap_or(d.catalog_cache_ttl),
                db_max_connections: self.db_max_connections.or(file.db_max_connections).unwrap_or(d.db_max_connections),
                quotas: crate::work::submit::Quotas {
                    max_artifact_bytes: self.max_artifact_bytes.or(file.max_artifact_bytes).unwrap_or(d.quotas.max_artifact_bytes),
                    max_queued_jobs: self.max_queued_jobs.or(file.max_queued_jobs).unwrap_or(d.quotas.max_queued_jobs),
                    max_stored_bytes: self.max_stored_bytes_per_submitter.or(file.max_stored_bytes_per_submitter).unwrap_or(d.quotas.max_stored_bytes),
                    ..d.quotas.clone()
                },
                max_event_streams_per_client: self
                    .max_event_streams_per_client
                    .or(file.max_event_streams_per_client)
                    .unwrap_or(d.max_event_streams_per_client)
                    .max(1),
                signing_key: self.signing_key_file.clone().or(file.signing_key_file).map(|p| crate::signing::KeyPair::from_file(&p)).transpose()?,
                tune: crate::work::tune::TuneLimits {
                    device_class: self.tune_device_class.clone().or(file.tune_device_class).unwrap_or(d.tune.device_class.clone()),
                    budget_ms: self.tune_budget_ms.or(file.tune_budget_ms).unwrap_or(d.tune.budget_ms).clamp(1000, d.tune.max_budget_ms),
                    max_open_per_submitter: self.max_open_tunes.or(file.max_open_tunes).unwrap_or(d.tune.max_open_per_submitter),
                    on_miss: self.tune_on_miss.or(file.tune_on_miss).unwrap_or(d.tune.on_miss),
                    on_miss_per_minute: self.tune_on_miss_per_minute.or(file.tune_on_miss_per_minute).unwrap_or(d.tune.on_miss_per_minute),
                    on_miss_max_open: self.tune_on_miss_max_open.or(file.tune_on_miss_max_open).unwrap_or(d.tune.on_miss_max_open),
                    ..d.tune.clone()
                },
            },
            workers: self.workers.clone().or(file.workers).map(|w| w.parse::<WorkerCount>()).transpose().map_err(anyhow::Error::msg)?.unwrap_or(WorkerCount::Fixed(0)),
            worker: self.worker.resolve(&file.worker)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kaas.toml");
        std::fs::write(&path, "bind = \"0.0.0.0:9000\"\nrate_limit_per_minute = 5\ncatalog = \"elsewhere\"\n").unwrap();
        let args = ServeArgs { config: Some(path.clone()), bind: Some("127.0.0.1:1".into()), ..Default::default() };
        let s = args.resolve().unwrap();
        assert_eq!(s.bind, "127.0.0.1:1");
        assert_eq!(s.api.rate_limit_per_minute, 5);
        assert_eq!(s.catalog, PathBuf::from("elsewhere"));
        assert_eq!(s.api.rate_limit_burst, ApiSettings::default().rate_limit_burst);
        assert_eq!(s.workers, WorkerCount::Fixed(0));
        assert_eq!(s.worker.lease, Duration::from_secs(30));
    }

    #[test]
    fn worker_settings_come_from_a_table_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kaas.toml");
        std::fs::write(&path, "workers = \"auto\"\n[worker]\nlease_secs = 5\nmax_attempts = 2\n").unwrap();
        let args = ServeArgs { config: Some(path), worker: WorkerFlags { lease_secs: Some(7), ..Default::default() }, ..Default::default() };
        let s = args.resolve().unwrap();
        assert_eq!(s.workers, WorkerCount::Auto);
        assert_eq!(s.worker.lease, Duration::from_secs(7), "the flag wins");
        assert_eq!(s.worker.max_attempts, 2, "the file fills the rest");
        assert!(ServeArgs { workers: Some("many".into()), ..Default::default() }.resolve().is_err());
    }

    #[test]
    fn a_tune_ptx_dir_from_other_templates_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let from_file = |text: &str| {
            let path = dir.path().join("kaas.toml");
            std::fs::write(&path, text).unwrap();
            ServeArgs { config: Some(path), ..Default::default() }.resolve()
        };
        let ptx = dir.path().join("ptx");
        std::fs::create_dir(&ptx).unwrap();
        let table = format!("[worker]\ntune_ptx_dir = \"{}\"\n", ptx.display());
        let e = from_file(&table).expect_err("no stamp");
        assert!(format!("{e:#}").contains("--tune-ptx-dir") && format!("{e:#}").contains("templates.sha256"), "{e:#}");
        std::fs::write(ptx.join(crate::tuner::TEMPLATES_STAMP), "f".repeat(64)).unwrap();
        assert!(format!("{:#}", from_file(&table).expect_err("another revision")).contains("compiled from other templates"));
        std::fs::write(ptx.join(crate::tuner::TEMPLATES_STAMP), crate::tuner::templates_digest()).unwrap();
        assert_eq!(from_file(&table).expect("this binary's").worker.tune_ptx_dir, Some(ptx.clone()));
    }

    #[test]
    fn the_signing_key_comes_from_its_file_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = crate::signing::KeyPair::generate();
        let key_path = dir.path().join("signing.key");
        std::fs::write(&key_path, format!("{}\n", key.seed_hex())).unwrap();
        let path = dir.path().join("kaas.toml");
        std::fs::write(&path, format!("signing_key_file = {:?}\n", key_path.display().to_string())).unwrap();
        let s = ServeArgs { config: Some(path), ..Default::default() }.resolve().unwrap();
        assert_eq!(s.api.signing_key.map(|k| k.key_id()), Some(key.key_id()));
        assert!(ServeArgs::default().resolve().unwrap().api.signing_key.is_none());

        std::fs::write(&key_path, "not a key").unwrap();
        let err = ServeArgs { signing_key_file: Some(key_path.clone()), ..Default::default() }.resolve().unwrap_err().to_string();
        assert!(err.contains("signing.key") && err.contains("neither"), "{err}");
        let err = ServeArgs { signing_key_file: Some(dir.path().join("missing")), ..Default::default() }.resolve().unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }

    #[test]
    fn unknown_keys_in_the_file_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kaas.toml");
        std::fs::write(&path, "bnid = \"x\"\n").unwrap();
        let err = ServeArgs { config: Some(path), ..Default::default() }.resolve().unwrap_err();
        assert!(err.to_string().contains("bnid"), "{err}");
    }
}
