//! Timing regimes in storage and on the API, and re-measuring the catalog: a run's
//! figures name their regime, the same kernel measured again in the ranked regime
//! replaces its older figures under its own submitter, and a catalog kernel that fails
//! today's verification is withdrawn. Both backends, no GPU: outcomes are written here.

use std::time::Duration;

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::harness::RunOutcome;
use kaas::problem::Layout;
use kaas::verify::Verdict;
use kaas::work::queue::{self, Claimant, Stored};
use kaas::work::remeasure::{self, Selection};

use crate::both_backends;
use crate::common::*;
use crate::submissions::facts;

const KERNEL: &str = "/v1/kernels/sm_90/f32/tn/256x256x256";

fn timing(median: f64) -> serde_json::Value {
    serde_json::json!({"graph": {"median_us": median, "ci95_low_us": median - 0.1, "ci95_high_us": median + 0.1, "tflops": 100.0}})
}

/// A passing outcome timed before regimes were named (no `regime`).
fn legacy(median: f64, speedup: f64) -> RunOutcome {
    let mut o = RunOutcome::early(Verdict::Pass, "benchmark", "verified and benchmarked");
    o.device = Some(facts(DEVICE));
    o.bench = Some(serde_json::json!({
        "timings": timing(median), "speedups": {"graph": {"cublaslt_autotune_max": speedup, "cublas_max": speedup}},
        "baselines": [], "converged": true, "rounds": 20,
    }));
    o
}

/// A passing outcome in both regimes, ranked by L2-cold, as the benchmark writes it.
fn regimed(cold: f64, cold_speedup: f64, warm: f64, warm_speedup: f64) -> RunOutcome {
    let mut o = RunOutcome::early(Verdict::Pass, "benchmark", "verified and benchmarked");
    o.device = Some(facts(DEVICE));
    let speedups = |s: f64| serde_json::json!({"graph": {"cublaslt_autotune_max": s, "cublas_max": s}});
    let cold_view = serde_json::json!({"timings": timing(cold), "speedups": speedups(cold_speedup), "baselines": [], "buffer_sets": 267, "l2_multiple": 2.0, "cache": "l2_cold"});
    let warm_view = serde_json::json!({"timings": timing(warm), "speedups": speedups(warm_speedup), "baselines": [], "buffer_sets": 1, "l2_multiple": 0.01, "cache": "l2_warm"});
    o.bench = Some(serde_json::json!({
        "timings": timing(cold), "speedups": speedups(cold_speedup), "baselines": [],
        "regime": "l2_cold", "regimes": {"l2_cold": cold_view, "l2_warm": warm_view},
        "converged": true, "rounds": 20,
    }));
    o
}

async fn claim_one(db: &TestDb) -> queue::Claimed {
    let c = Claimant { worker_id: "w".into(), facts: facts(DEVICE) };
    queue::claim(&db.db, &c, Duration::from_secs(30), 3).await.unwrap().expect("a queued job")
}

/// Alice's kernel for tn 256³ submitted, verified and admitted with figures timed before
/// regimes were named; its job.
async fn alices_kernel_in_the_catalog(db: &TestDb) -> queue::Claimed {
    admitted(db, "alice", problem(256, 256, 256, Layout::Tn), &legacy(10.0, 1.06)).await
}

fn everything() -> Selection {
    Selection { device_class: DEVICE.into(), every: 1, offset: 0, limit: None, unmeasured_only: false, unpaced_only: false }
}

/// `who`'s kernel for `p` submitted and admitted with `outcome`'s figures; its job.
async fn admitted(db: &TestDb, who: &str, p: kaas::problem::Problem, outcome: &RunOutcome) -> queue::Claimed {
    let t = auth::create_token(&db.db, who, Role::Submitter).await.unwrap().secret;
    let app = test::init_service(create_app(state(db, ApiSettings::default()))).await;
    let body = serde_json::json!({"ptx": ptx(who), "manifests": [manifest(p)], "name": who});
    let req = TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {t}"))).set_json(body);
    assert_eq!(call(&app, req).await.status, 202);
    let j = claim_one(db).await;
    queue::complete(&db.db, j.job.id, "w", outcome, &facts(DEVICE)).await.unwrap();
    j
}

/// A large problem's kernel admitted before the benchmark timed it paced is picked by
/// `kaas remeasure --unpaced` (and the small one is not); measured again, it keeps its
/// entry only if it wins paced as well, and the pass does not pick it again.
async fn remeasure_unpaced_judges_large_kernels_paced_too(backend: Backend) {
    let db = TestDb::new(backend).await;
    let large = problem(4096, 4096, 4096, Layout::Tn);
    admitted(&db, "alice", large, &regimed(900.0, 1.04, 880.0, 1.05)).await;
    admitted(&db, "bob", problem(256, 256, 256, Layout::Tn), &regimed(10.0, 1.04, 9.0, 1.05)).await;
    let unpaced = Selection { unpaced_only: true, ..everything() };
    let q = remeasure::queue_entries(&db.db, &unpaced).await.unwrap();
    assert_eq!((q.entries, q.queued), (1, 1), "only the large problem's entry");
    let again = claim_one(&db).await;
    let queue::Work::Verify { manifest, .. } = &again.work else { panic!("a verify job") };
    assert_eq!(manifest.problem, large);
    // Back to back it still wins; paced it loses to cuBLASLt.
    let mut o = regimed(905.0, 1.04, 880.0, 1.05);
    let bench = o.bench.as_mut().unwrap();
    bench["speedups"]["paced"] = serde_json::json!({"cublaslt_autotune_max": 0.95, "cublas_max": 1.1});
    bench["baselines"] = serde_json::json!([{"library": "cublaslt_autotune", "layout": "tn", "mode": "graph", "timing": {"median_us": 930.0}, "config": {"algo": 3}}]);
    queue::complete(&db.db, again.job.id, "w", &o, &facts(DEVICE)).await.unwrap();
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let j = get(&app, &format!("/v1/kernels/{}", large.path())).await.assert_problem(404, "baseline_faster");
    assert_eq!(j["use_instead"]["library"], "cublaslt_autotune");
    assert_eq!(get(&app, KERNEL).await.status, 200, "the small problem's kernel is judged as before");
    let left = remeasure::queue_entries(&db.db, &unpaced).await.unwrap();
    assert_eq!((left.entries, left.queued), (0, 0), "timed paced now");
    db.cleanup().await;
}

async fn the_catalog_is_remeasured_in_the_ranked_regime_under_its_own_submitter(backend: Backend) {
    let db = TestDb::new(backend).await;
    let j = alices_kernel_in_the_catalog(&db).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let before = get(&app, KERNEL).await.json();
    assert_eq!(before["run"]["regime"], "rotation_3_sets", "a figure timed before regimes were named says so");
    assert!(before["run"]["regimes"].is_null());

    // Re-measure: one job, for alice's submission and the same manifest, below users'.
    // It names no regime, so a pass over what is not yet re-measured takes it.
    let q = remeasure::queue_entries(&db.db, &Selection { unmeasured_only: true, ..everything() }).await.unwrap();
    assert_eq!((q.entries, q.queued, q.already_open), (1, 1, 0));
    assert_eq!(remeasure::queue_entries(&db.db, &everything()).await.unwrap().already_open, 1, "queued once");
    let again = claim_one(&db).await;
    assert_eq!(again.job.submission_id, j.job.submission_id);
    assert_eq!(again.job.manifest_id, j.job.manifest_id);
    assert_eq!(again.job.priority, remeasure::PRIORITY);
    // Slower, and a smaller speedup, in the cold regime: still the newer figure of the same kernel.
    let stored = queue::complete(&db.db, again.job.id, "w", &regimed(11.0, 1.01, 9.5, 1.07), &facts(DEVICE)).await.unwrap();
    assert!(matches!(stored, Stored::Run { promoted: true, .. }), "{stored:?}");
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let k = get(&app, KERNEL).await.json();
    assert_eq!(k["submitter"], "alice");
    assert_eq!(k["run"]["regime"], "l2_cold");
    assert_eq!(k["run"]["timings"]["graph"]["median_us"], 11.0);
    assert_eq!(k["run"]["regimes"]["l2_warm"]["timings"]["graph"]["median_us"], 9.5);
    assert_eq!(k["run"]["regimes"]["l2_cold"]["buffer_sets"], 267);
    // A pass over what is left skips it now that its figures name their regime.
    let left = remeasure::queue_entries(&db.db, &Selection { unmeasured_only: true, ..everything() }).await.unwrap();
    assert_eq!((left.entries, left.queued, left.already_open), (0, 0, 0));
    assert_eq!(k["record"]["regime"], "l2_cold", "the signed record names the regime too");
    assert_eq!(k["record"]["regimes"]["l2_warm"]["speedups"]["graph"]["cublaslt_autotune_max"], 1.07);

    // Another kernel in the same regime must be faster beyond both intervals.
    let body = serde_json::json!({"ptx": ptx("b"), "manifests": [manifest(problem(256, 256, 256, Layout::Tn))], "name": "bob's"});
    let bob = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap().secret;
    let req = TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {bob}"))).set_json(body);
    assert_eq!(call(&app, req).await.status, 202);
    let b = claim_one(&db).await;
    let stored = queue::complete(&db.db, b.job.id, "w", &regimed(10.95, 1.015, 9.0, 1.1), &facts(DEVICE)).await.unwrap();
    assert!(matches!(stored, Stored::Run { promoted: false, .. }), "overlapping intervals keep the entry: {stored:?}");
    db.cleanup().await;
}

async fn a_catalog_kernel_that_fails_when_measured_again_is_withdrawn(backend: Backend) {
    let db = TestDb::new(backend).await;
    alices_kernel_in_the_catalog(&db).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    assert_eq!(get(&app, KERNEL).await.status, 200);

    // An infrastructure failure withdraws nothing.
    remeasure::queue_entries(&db.db, &everything()).await.unwrap();
    let again = claim_one(&db).await;
    queue::complete(&db.db, again.job.id, "w", &RunOutcome::early(Verdict::InternalError, "benchmark", "the harness failed"), &facts(DEVICE)).await.unwrap();
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    assert_eq!(get(&app, KERNEL).await.status, 200);

    // A stage added since it was admitted catches it.
    remeasure::queue_entries(&db.db, &everything()).await.unwrap();
    let again = claim_one(&db).await;
    let caught = RunOutcome::early(Verdict::TimingDependent, "timed-sequence check", "launch 10 of 10 back to back left 1.0 in C");
    queue::complete(&db.db, again.job.id, "w", &caught, &facts(DEVICE)).await.unwrap();
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let gone = get(&app, KERNEL).await;
    assert_eq!(gone.status, 404, "{:?}", gone.json());
    assert_eq!(db.count("runs").await, 3, "the runs stay, the failing one with them");
    db.cleanup().await;
}

both_backends!(
    the_catalog_is_remeasured_in_the_ranked_regime_under_its_own_submitter,
    a_catalog_kernel_that_fails_when_measured_again_is_withdrawn,
    remeasure_unpaced_judges_large_kernels_paced_too,
);
