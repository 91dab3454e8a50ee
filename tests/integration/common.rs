//! Test fixtures: fresh databases, the real app, request helpers, and catalog bundles.

/// Says a test skipped, with the test's name, straight to the process's stderr: libtest
/// captures `eprintln!` of a passing test, and cargo reports a skipped test as passed, so
/// the line must get past the capture to be seen.
#[macro_export]
macro_rules! skipped {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {}", format!($($arg)*));
    }};
}


use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test;
use chrono::{TimeZone, Utc};
use kaas::api::{ApiSettings, AppState};
use kaas::catalog::bundle::{self, ArtifactRecord, BaselineRecord, DeviceClassRecord, EntryRecord, Index, RunRecord, TuneRecord};
use kaas::db::{self, DbConfig};
use kaas::manifest::{ABI, Launch, Manifest};
use kaas::problem::{Acc, Arch, Layout, Problem, Shape};
use sea_orm::{ConnectionTrait, DatabaseConnection};

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs a test body once per backend.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[actix_web::test]
            async fn sqlite() {
                Box::pin(super::$name($crate::common::Backend::Sqlite)).await
            }
            #[actix_web::test]
            async fn postgres() {
                if $crate::common::skip_postgres() {
                    return;
                }
                Box::pin(super::$name($crate::common::Backend::Postgres)).await
            }
        }
    )*};
}

/// The URL of database `name` on the test server.
pub fn database_url(name: &str) -> String {
    let admin_url = postgres_url();
    match admin_url.rfind('/') {
        Some(i) => format!("{}/{name}", &admin_url[..i]),
        None => panic!("cannot place a database in {admin_url}"),
    }
}

pub fn postgres_url() -> String {
    std::env::var("KAAS_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Postgres tests run unless `KAAS_TEST_POSTGRES=skip` says otherwise, and fail loudly
/// when the server is missing: CI must not pass by skipping them.
pub fn skip_postgres() -> bool {
    if std::env::var("KAAS_TEST_POSTGRES").as_deref() == Ok("skip") {
        crate::skipped!("Postgres test (KAAS_TEST_POSTGRES=skip)");
        return true;
    }
    false
}

/// A fresh, migrated database that lives as long as this value.
pub struct TestDb {
    pub db: DatabaseConnection,
    pub schema: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("kaas.db").display());
                let db = db::connect(&DbConfig::new(&url)).await.unwrap();
                TestDb { db, schema: None, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let url = postgres_url();
                let schema = format!("kaas_t_{}", hex::encode(rand::random::<[u8; 6]>()));
                let admin = sea_orm::Database::connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("Postgres at {url} is not reachable ({e}); set KAAS_TEST_POSTGRES=skip to skip"));
                admin.execute_unprepared(&format!("CREATE SCHEMA {schema}")).await.unwrap();
                admin.close().await.ok();
                let mut cfg = DbConfig::new(&url);
                cfg.pg_schema = Some(schema.clone());
                cfg.max_connections = 4;
                let db = db::connect(&cfg).await.unwrap();
                TestDb { db, schema: Some(schema), _dir: None }
            }
        }
    }

    /// A fresh database of its own, and its URL, for tests that start `kaas` processes
    /// (they cannot be told a schema): a SQLite file, or a new Postgres database.
    pub async fn with_url(backend: Backend) -> (TestDb, String) {
        let (t, url) = TestDb::unmigrated(backend).await;
        db::migrate(&t.db).await.unwrap();
        (t, url)
    }

    /// A fresh database that nothing has migrated yet, and its URL (see `with_url`).
    pub async fn unmigrated(backend: Backend) -> (TestDb, String) {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("kaas.db").display());
                let db = db::open(&DbConfig::new(&url)).await.unwrap();
                (TestDb { db, schema: None, _dir: Some(dir) }, url)
            }
            Backend::Postgres => {
                let admin_url = postgres_url();
                let name = format!("kaas_t_{}", hex::encode(rand::random::<[u8; 6]>()));
                let admin = sea_orm::Database::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| panic!("Postgres at {admin_url} is not reachable ({e}); set KAAS_TEST_POSTGRES=skip to skip"));
                admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.unwrap();
                admin.close().await.ok();
                let url = database_url(&name);
                let db = db::open(&DbConfig::new(&url)).await.unwrap();
                (TestDb { db, schema: Some(format!("database:{name}")), _dir: None }, url)
            }
        }
    }

    /// Drops the Postgres schema or database (SQLite files go with their temp dir).
    pub async fn cleanup(self) {
        match self.schema.as_deref() {
            Some(s) if s.starts_with("database:") => {
                let name = &s["database:".len()..];
                self.db.close().await.ok();
                if let Ok(admin) = sea_orm::Database::connect(&postgres_url()).await {
                    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.ok();
                    admin.close().await.ok();
                }
            }
            Some(schema) => {
                self.db.execute_unprepared(&format!("DROP SCHEMA {schema} CASCADE")).await.ok();
            }
            None => {}
        }
    }

    pub async fn count(&self, table: &str) -> i64 {
        let row = self
            .db
            .query_one_raw(sea_orm::Statement::from_string(self.db.get_database_backend(), format!("SELECT COUNT(*) AS c FROM {table}")))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<i64>("", "c").unwrap()
    }
}

pub fn state(db: &TestDb, settings: ApiSettings) -> Arc<AppState> {
    AppState::new(db.db.clone(), settings).unwrap()
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: actix_web::http::header::HeaderMap,
    pub body: actix_web::web::Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap().to_string())
    }
    /// Asserts a problem+json error with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) -> serde_json::Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", String::from_utf8_lossy(&self.body));
        assert_eq!(self.header("content-type").as_deref(), Some("application/problem+json"));
        let j = self.json();
        assert_eq!(j["code"], code, "{j}");
        assert_eq!(j["status"], status);
        assert!(!j["detail"].as_str().unwrap_or("").is_empty());
        j
    }
}

pub async fn call<S, B>(app: &S, req: test::TestRequest) -> Reply
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req.to_request()).await;
    let status = res.status();
    let headers = res.headers().clone();
    let body = test::read_body(res).await;
    Reply { status, headers, body }
}

pub async fn get<S, B>(app: &S, uri: &str) -> Reply
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    call(app, test::TestRequest::get().uri(uri)).await
}

/// A small, syntactically real PTX module with one HGEMM-shaped entry.
pub fn ptx(tag: &str) -> String {
    format!(
        "// fixture {tag}\n.version 8.8\n.target sm_90\n.address_size 64\n\n.visible .entry hgemm_fixture(\n\t.param .u64 .ptr .global .align 1 a,\n\t.param .u64 .ptr .global .align 1 b,\n\t.param .u64 .ptr .global .align 1 c,\n\t.param .u32 m,\n\t.param .u32 n,\n\t.param .u32 k\n)\n{{\n\tret;\n}}\n"
    )
}

pub fn problem(m: u32, n: u32, k: u32, layout: Layout) -> Problem {
    Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap())
}

pub fn manifest(p: Problem) -> Manifest {
    Manifest {
        abi: ABI.into(),
        problem: p,
        workspace_bytes: 0,
        launches: vec![Launch {
            entry: "hgemm_fixture".into(),
            grid: [p.n.div_ceil(128), p.m.div_ceil(128), 1],
            block: [256, 1, 1],
            cluster: [1, 1, 1],
            shared_mem_bytes: 0,
            params: kaas::manifest::pointer_params(),
        }],
    }
}

pub const DEVICE: &str = "H100-SXM";

pub fn when(day: u32) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, day, 12, 0, 0).unwrap()
}

/// Graph-mode timings and speedups as the harness records them.
pub fn measured(median_us: f64, speedup: f64) -> RunRecord {
    RunRecord {
        verdict: "pass".into(),
        message: "verified and benchmarked".into(),
        measured_at: when(20),
        timings: Some(serde_json::json!({"graph": {"median_us": median_us, "tflops": 123.5}})),
        speedups: Some(serde_json::json!({"graph": {"cublas_max": speedup, "cublaslt_heuristic_max": speedup, "cublaslt_autotune_max": speedup}})),
        regime: None,
        regimes: None,
        device: Some(serde_json::json!({"model": "NVIDIA H100 80GB HBM3"})),
    }
}

pub fn baseline(p: Problem, library: &str, median_us: f64) -> BaselineRecord {
    BaselineRecord {
        device_class: DEVICE.into(),
        problem: p,
        library: library.into(),
        layout: "tn".into(),
        mode: "graph".into(),
        median_us,
        timing: serde_json::json!({"median_us": median_us}),
        config: serde_json::json!({"compute": "f32", "algo": 7}),
        measured_at: when(19),
    }
}

/// A finished tune of `p` on `device` that ended `baseline_faster`, as a bundle carries it:
/// the search found a kernel (its trace and result), and a baseline beat it.
pub fn baseline_faster_tune(device: &str, p: Problem, day: u32) -> TuneRecord {
    TuneRecord {
        device_class: device.into(),
        problem: p,
        state: "baseline_faster".into(),
        budget_ms: 20_000,
        stage: Some("baseline_faster".into()),
        message: Some("the tuned kernel did not beat every baseline; use cublaslt_autotune (tn layout)".into()),
        trace: Some(serde_json::json!({"tried": [{"code": "128x128 s4 c2", "us": 990.0}]})),
        result: Some(serde_json::json!({"code": "128x128 s4 c2", "speedup": 0.96, "verdict": "pass", "promoted": false})),
        finished_at: when(day),
    }
}

/// A bundle: `fast` beats its baselines, `slow` loses to them, `bare` has only baselines,
/// `unbenchmarked` is verified but not timed.
pub struct Fixture {
    pub fast: Problem,
    pub slow: Problem,
    pub bare: Problem,
    pub unbenchmarked: Problem,
    pub ptx_fast: String,
    pub ptx_slow: String,
}

pub fn fixture() -> Fixture {
    Fixture {
        fast: problem(4096, 4096, 4096, Layout::Tn),
        slow: problem(64, 64, 64, Layout::Tn),
        bare: problem(128, 128, 128, Layout::Nn),
        unbenchmarked: problem(1024, 1024, 1024, Layout::Nn),
        ptx_fast: ptx("fast"),
        ptx_slow: ptx("slow"),
    }
}

fn artifact(text: &str) -> ArtifactRecord {
    bundle::describe_ptx(text.as_bytes()).unwrap()
}

pub fn fixture_index(f: &Fixture) -> (Index, BTreeMap<String, String>) {
    let a_fast = artifact(&f.ptx_fast);
    let a_slow = artifact(&f.ptx_slow);
    let entry = |p: Problem, a: &ArtifactRecord, run: RunRecord, who: &str| EntryRecord {
        device_class: DEVICE.into(),
        problem: p,
        artifact: a.sha256.clone(),
        submitter: who.into(),
        name: format!("kernel-{}", p.shape()),
        description: "fixture".into(),
        manifest: manifest(p),
        run,
    };
    let mut unbenchmarked = measured(0.0, 0.0);
    unbenchmarked.timings = None;
    unbenchmarked.speedups = None;
    let mut entries = vec![
        entry(f.fast, &a_fast, measured(900.0, 1.08), "kaas-tuner"),
        entry(f.slow, &a_slow, measured(9.0, 0.8), "alice"),
        entry(f.unbenchmarked, &a_slow, unbenchmarked, "kaas-tuner"),
    ];
    entries.sort_by(|a, b| (a.problem, &a.device_class).cmp(&(b.problem, &b.device_class)));
    let mut problems = vec![f.fast, f.slow, f.bare, f.unbenchmarked];
    problems.sort();
    let mut baselines = vec![
        baseline(f.fast, "cublas", 980.0),
        baseline(f.fast, "cublaslt_autotune", 972.0),
        baseline(f.slow, "cublas", 8.0),
        baseline(f.slow, "cublaslt_autotune", 7.2),
        baseline(f.bare, "cublaslt_heuristic", 5.5),
    ];
    baselines.sort_by(|a, b| (a.problem, &a.library).cmp(&(b.problem, &b.library)));
    let mut artifacts = vec![a_fast.clone(), a_slow.clone()];
    artifacts.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord {
            name: DEVICE.into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: "9.0".into(),
            sm_count: Some(132),
        }],
        problems,
        artifacts,
        entries,
        baselines,
        tunes: vec![],
    };
    let ptx = BTreeMap::from([(a_fast.sha256, f.ptx_fast.clone()), (a_slow.sha256, f.ptx_slow.clone())]);
    (index, ptx)
}

/// Writes the fixture bundle into `dir`.
pub fn write_fixture(dir: &Path, f: &Fixture) {
    let (index, ptx) = fixture_index(f);
    bundle::write_bundle(dir, &index, &ptx).unwrap();
}

/// A database with the fixture imported as `kaas serve` imports its shipped catalog
/// (so readiness holds), and the app over it.
pub async fn loaded(backend: Backend, settings: ApiSettings) -> (TestDb, Arc<AppState>, Fixture, tempfile::TempDir) {
    let db = TestDb::new(backend).await;
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), &f);
    kaas::catalog::seed::seed(&db.db, dir.path()).await.unwrap();
    let st = state(&db, settings);
    (db, st, f, dir)
}
