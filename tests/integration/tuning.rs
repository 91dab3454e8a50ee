//! Tuning requests and the tune job, on both backends, without a GPU: tune jobs are
//! claimed from the real queue and completed with outcomes the test writes (as a fake
//! sandbox would), or by a real `kaas worker` running the fake sandbox script.

use std::time::Duration;

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::harness::RunOutcome;
use kaas::tuner::ondemand::{Trace, Tried, TuneOutcome, Winner};
use kaas::verify::Verdict;
use kaas::work::queue::{self, Claimant, Work};
use kaas::work::tune::{self, TuneLimits};

use crate::both_backends;
use crate::common::*;
use crate::submissions::facts;

fn ask(token: &str, body: serde_json::Value) -> TestRequest {
    TestRequest::post().uri("/v1/tuning-requests").insert_header(("Authorization", format!("Bearer {token}"))).set_json(body)
}

fn settings(tune: TuneLimits) -> ApiSettings {
    ApiSettings { tune, rate_limit_burst: 1000, rate_limit_per_minute: 10_000, ..ApiSettings::default() }
}

fn claimant(name: &str) -> Claimant {
    Claimant { worker_id: name.into(), facts: facts(DEVICE) }
}

/// What a tune child would write: the winner (fixture PTX, a manifest for `p`) verified
/// with `verdict`, benchmarked at `speedup` over every baseline.
fn outcome(p: kaas::problem::Problem, verdict: Verdict, speedup: f64) -> TuneOutcome {
    let mut run = RunOutcome::early(verdict, "benchmark", "verified and benchmarked");
    run.device = Some(facts(DEVICE));
    if verdict == Verdict::Pass {
        let median = 10.0;
        run.bench = Some(serde_json::json!({
            "timings": {"graph": {"median_us": median, "ci95_low_us": median - 0.1, "ci95_high_us": median + 0.1, "tflops": 100.0}},
            "speedups": {"graph": {"cublaslt_autotune_max": speedup, "cublas_max": speedup}},
            "baselines": [{"library": "cublaslt_autotune", "layout": "tn", "mode": "graph", "timing": {"median_us": median * speedup}, "config": {"algo": 7}}],
        }));
    }
    let trace = Trace {
        reference: "cuBLASLt heuristic top-1".into(),
        reference_us: Some(12.0),
        space: 40,
        tried: vec![Tried { code: "128x128x64 c1".into(), entry: "hgemm_fixture".into(), us: Some(11.0), reward: Some(1.09), seeded: true, at_ms: 5.0, error: None }],
        budget_ms: 60_000,
        search_ms: 900.0,
        stopped: "converged".into(),
        ..Trace::default()
    };
    TuneOutcome {
        run,
        winner: Some(Winner { code: "128x128x64 c1".into(), entry: "hgemm_fixture".into(), ptx: ptx("tuned"), manifest: manifest(p), search_us: Some(11.0), search_reward: Some(1.09) }),
        trace,
    }
}

async fn claim_tune(db: &TestDb, worker: &str) -> (kaas::db::entities::job::Model, kaas::problem::Problem) {
    let c = queue::claim(&db.db, &claimant(worker), Duration::from_secs(30), 3).await.unwrap().expect("a tune job to claim");
    match c.work {
        Work::Tune { problem, .. } => (c.job, problem),
        Work::Verify { .. } => panic!("a verify job was claimed"),
    }
}

async fn counts(db: &TestDb) -> (i64, i64, i64) {
    (db.count("tunes").await, db.count("jobs").await, db.count("tuning_requests").await)
}

async fn a_problem_asked_by_anyone_is_one_tune_and_one_job(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let bob = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap().secret;

    let r = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:4096x14336x4096", {"layout": "tn", "m": 16, "n": 4096, "k": 4096}]}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let id = v["id"].as_i64().unwrap();
    assert_eq!(r.header("location").unwrap(), format!("/v1/tuning-requests/{id}"));
    assert_eq!(v["device_class"], "H100-SXM");
    assert_eq!(v["submitter"], "alice");
    assert_eq!(v["done"], false);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i["state"] == "queued" && i["job_id"].is_i64()), "{v}");
    assert_eq!(items[0]["problem"], "sm_90/f32/tn/4096x14336x4096");
    // Jobs are queued in problem order (16x… before 4096x…), so the second is claimed first.
    assert_eq!(items[1]["queue_position"], 1);
    assert_eq!(items[0]["queue_position"], 2);
    assert_eq!(items[0]["tune"], "/v1/tunes/sm_90/f32/tn/4096x14336x4096?device=H100-SXM");

    // Bob asks for one of them (spelt as a path) and a new one: the first is shared.
    let r = call(&app, ask(&bob, serde_json::json!({"problems": ["sm_90/f32/tn/16x4096x4096", "tn:1x4096x4096"]}))).await;
    assert_eq!(r.status, 201);
    let w = r.json();
    assert_eq!(w["items"][0]["job_id"], items[1]["job_id"], "the same problem is the same job");
    assert_eq!(w["items"][0]["tune_id"], items[1]["tune_id"]);
    assert_eq!(counts(&db).await, (3, 3, 2));
    // Asked again: recorded, nothing new queued (200).
    let again = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:4096x14336x4096"]}))).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["items"][0]["job_id"], items[0]["job_id"]);
    assert_eq!(db.count("jobs").await, 3);

    // A workload is its Linears at the token counts asked.
    let r = call(&app, ask(&alice, serde_json::json!({"workload": "llama-3.1-8b", "tokens": [1, 16]}))).await;
    let wl = r.json();
    assert_eq!(wl["workload"], "llama-3.1-8b");
    assert_eq!(wl["items"].as_array().unwrap().len(), 8);
    assert_eq!(wl["items"][0]["label"], "q_proj, o_proj @ 1 tokens");
    assert_eq!(wl["items"][0]["tune_id"], w["items"][1]["tune_id"], "1x4096x4096 is Bob's tune");
    assert_eq!(db.count("tunes").await, 3 + 8 - 2, "16x4096x4096 and 1x4096x4096 were asked before");

    // Polling: the same view; a missing one is 404.
    let polled = get(&app, &format!("/v1/tuning-requests/{id}")).await;
    assert_eq!(polled.status, 200);
    assert_eq!(polled.json()["items"][1]["tune_id"], items[1]["tune_id"]);
    get(&app, "/v1/tuning-requests/99999").await.assert_problem(404, "not_found");
    get(&app, "/v1/tuning-requests/x").await.assert_problem(400, "invalid_path");
    db.cleanup().await;
}

async fn concurrent_requests_on_two_replicas_make_one_job_per_problem(backend: Backend) {
    let (db, url) = TestDb::with_url(backend).await;
    // A second replica: its own connection pool and app state on the same database.
    let other = kaas::db::open(&kaas::db::DbConfig::new(&url)).await.unwrap();
    let app1 = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let app2 = test::init_service(create_app(kaas::api::AppState::new(other.clone(), settings(TuneLimits::default())).unwrap())).await;
    let mut tokens = vec![];
    for i in 0..8 {
        tokens.push(auth::create_token(&db.db, &format!("user{i}"), Role::Submitter).await.unwrap().secret);
    }
    let body = serde_json::json!({"problems": ["tn:2048x4096x4096", "tn:8x4096x4096", "tn:2x1024x4096"]});
    let replies = futures_util::future::join_all(tokens.iter().enumerate().map(|(i, t)| {
        let req = ask(t, body.clone());
        let (a1, a2) = (&app1, &app2);
        async move { if i % 2 == 0 { call(a1, req).await } else { call(a2, req).await } }
    }))
    .await;
    for r in &replies {
        assert!(r.status.is_success(), "{}: {}", r.status, String::from_utf8_lossy(&r.body));
    }
    assert_eq!(replies.iter().filter(|r| r.status == 201).count(), 1, "exactly one request queued the jobs");
    let jobs: std::collections::BTreeSet<i64> = replies.iter().flat_map(|r| r.json()["items"].as_array().unwrap().iter().map(|i| i["job_id"].as_i64().unwrap()).collect::<Vec<_>>()).collect();
    assert_eq!(jobs.len(), 3, "one job per problem whoever asked: {jobs:?}");
    assert_eq!(counts(&db).await, (3, 3, 8));
    other.close().await.ok();
    db.cleanup().await;
}

async fn a_tune_moves_from_queued_to_served_or_baseline_faster(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let r = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:16x4096x4096", "tn:32x4096x4096", "tn:64x4096x4096"]}))).await;
    let id = r.json()["id"].as_i64().unwrap();
    let view = || async { get(&app, &format!("/v1/tuning-requests/{id}")).await.json() };

    // Claimed: tuning. The child's progress: verifying.
    let (j1, p1) = claim_tune(&db, "w1").await;
    assert_eq!(p1.path(), "sm_90/f32/tn/16x4096x4096");
    let v = view().await;
    assert_eq!(v["items"][0]["state"], "tuning", "{v}");
    assert!(v["items"][0]["queue_position"].is_null());
    assert_eq!(v["items"][1]["queue_position"], 1, "the next one moved up");
    assert!(tune::progress(&db.db, j1.id, "w1", Duration::from_secs(30), "verifying", "128x128x64 c1").await.unwrap());
    let v = view().await;
    assert_eq!(v["items"][0]["state"], "verifying");
    assert_eq!(v["items"][0]["stage"], "verifying: 128x128x64 c1");
    // Another worker cannot report on it.
    assert!(!tune::progress(&db.db, j1.id, "w2", Duration::from_secs(30), "verifying", "x").await.unwrap());

    // Passed and beat every baseline: served, in the catalog.
    let stored = tune::complete(&db.db, j1.id, "w1", &outcome(p1, Verdict::Pass, 1.25), &facts(DEVICE)).await.unwrap();
    assert!(matches!(stored, queue::Stored::Run { promoted: true, .. }), "{stored:?}");
    let v = view().await;
    assert_eq!(v["items"][0]["state"], "served");
    assert_eq!(v["items"][0]["kernel"], "/v1/kernels/sm_90/f32/tn/16x4096x4096?device=H100-SXM");
    assert_eq!(v["items"][0]["speedup"], 1.25);
    let k = get(&app, "/v1/kernels/sm_90/f32/tn/16x4096x4096?device=H100-SXM").await;
    assert_eq!(k.status, 200, "{}", String::from_utf8_lossy(&k.body));
    // The trace is kept and shown with the tune.
    let t = get(&app, "/v1/tunes/sm_90/f32/tn/16x4096x4096").await.json();
    assert_eq!(t["state"], "served");
    assert_eq!(t["trace"]["tried"][0]["code"], "128x128x64 c1");
    assert_eq!(t["trace"]["tried"][0]["us"], 11.0);
    assert_eq!(t["result"]["promoted"], true);
    // The tuned kernel is the service's own, and its catalog exports as a bundle that
    // imports again (a bundle refuses an entry without a submitter).
    assert_eq!(k.json()["submitter"], "kaas", "{}", k.json());
    let out = tempfile::tempdir().unwrap();
    let index = kaas::catalog::bundle::export(&db.db, out.path()).await.unwrap();
    assert!(index.entries.iter().any(|e| e.submitter == "kaas" && e.problem.path() == "sm_90/f32/tn/16x4096x4096"), "{:?}", index.entries);
    let again = TestDb::new(Backend::Sqlite).await;
    let report = kaas::catalog::bundle::import(&again.db, out.path()).await.expect("the exported catalog imports");
    assert_eq!(report.entries, index.entries.len());
    // The finished tune travels with it: the problem shows its search where it is imported,
    // and a second import adds nothing.
    assert_eq!((index.tunes.len(), report.tunes), (1, 1), "{:?}", index.tunes);
    let app2 = test::init_service(create_app(state(&again, settings(TuneLimits::default())))).await;
    let t2 = get(&app2, "/v1/tunes/sm_90/f32/tn/16x4096x4096").await.json();
    assert_eq!((&t2["state"], &t2["trace"]["tried"][0]["code"], &t2["result"]["promoted"]), (&t["state"], &t["trace"]["tried"][0]["code"], &t["result"]["promoted"]), "{t2}");
    assert!(t2["job_id"].is_null() && t2["queue_position"].is_null());
    assert_eq!(kaas::catalog::bundle::import(&again.db, out.path()).await.unwrap().tunes, 0);
    // A bundle may carry finished tunes only.
    let text = std::fs::read_to_string(out.path().join("index.json")).unwrap().replacen("\"state\": \"served\"", "\"state\": \"queued\"", 1);
    std::fs::write(out.path().join("index.json"), text).unwrap();
    let err = kaas::catalog::bundle::import(&again.db, out.path()).await.expect_err("an open tune in a bundle").to_string();
    assert!(err.contains("tunes[0]") && err.contains("finished tunes only"), "{err}");
    again.cleanup().await;

    // Passed but slower than a baseline: not in the catalog; baseline_faster, measured.
    let (j2, p2) = claim_tune(&db, "w1").await;
    tune::complete(&db.db, j2.id, "w1", &outcome(p2, Verdict::Pass, 0.8), &facts(DEVICE)).await.unwrap();
    let v = view().await;
    assert_eq!(v["items"][1]["state"], "baseline_faster", "{v}");
    assert_eq!(v["items"][1]["use_instead"]["library"], "cublaslt_autotune");
    assert_eq!(v["items"][1]["use_instead"]["config"]["algo"], 7);
    let k = get(&app, "/v1/kernels/sm_90/f32/tn/32x4096x4096?device=H100-SXM").await;
    let j = k.assert_problem(404, "baseline_faster");
    assert_eq!(j["tuning"]["state"], "baseline_faster");
    assert_eq!(j["use_instead"]["config"]["algo"], 7);
    assert_eq!(db.count("catalog_entries").await, 1, "only the winner that beat the baselines entered the catalog");
    // The workload page says the same of it: measured, the baseline is the answer.
    let w = get(&app, "/v1/workloads/llama-3.1-8b").await.json();
    let row = w["rows"].as_array().unwrap().iter().find(|r| r["path"] == "sm_90/f32/tn/32x4096x4096").unwrap();
    assert_eq!((&row["state"], &row["use_instead"]), (&serde_json::json!("baseline_faster"), &serde_json::json!("cublaslt_autotune tn")), "{row}");
    assert!(row.get("tune").is_none(), "{row}");
    assert_eq!(w["summary"]["baseline_faster"], 1, "{}", w["summary"]);

    // A crashed child without a result: failed with its verdict; asked again, queued again.
    let (j3, _) = claim_tune(&db, "w1").await;
    let crashed = TuneOutcome::without_winner(RunOutcome::early(Verdict::Crashed, "sandbox", "the sandbox process was killed by signal 11 (SIGSEGV)"), Trace::default());
    assert_eq!(tune::complete(&db.db, j3.id, "w1", &crashed, &facts(DEVICE)).await.unwrap(), queue::Stored::NoRun);
    let v = view().await;
    assert_eq!(v["items"][2]["state"], "failed");
    assert!(v["items"][2]["reason"].as_str().unwrap().contains("SIGSEGV"), "{v}");
    assert_eq!(v["done"], true);
    assert_eq!(v["counts"]["served"], 1);
    let r = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x4096x4096"]}))).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["items"][0]["state"], "queued");
    assert_ne!(r.json()["items"][0]["job_id"], v["items"][2]["job_id"]);
    // Served and measured problems asked again are answered, not queued.
    let r = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:16x4096x4096", "tn:32x4096x4096"]}))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"][0]["state"], "served");
    assert_eq!(r.json()["items"][1]["state"], "baseline_faster");
    db.cleanup().await;
}

async fn bad_requests_name_the_fault_and_queue_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let limits = TuneLimits { max_open_per_submitter: 3, ..TuneLimits::default() };
    let app = test::init_service(create_app(state(&db, settings(limits)))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let before = counts(&db).await;
    call(&app, TestRequest::post().uri("/v1/tuning-requests").set_json(serde_json::json!({"problems": ["tn:64x64x64"]}))).await.assert_problem(401, "missing_token");
    let raw = TestRequest::post().uri("/v1/tuning-requests").insert_header(("Authorization", format!("Bearer {alice}"))).set_payload("[1, 2");
    call(&app, raw).await.assert_problem(400, "invalid_body");
    call(&app, ask(&alice, serde_json::json!({}))).await.assert_problem(400, "invalid_body");
    call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64"], "surprise": 1}))).await.assert_problem(400, "invalid_body");
    let j = call(&app, ask(&alice, serde_json::json!({"workload": "gpt-5"}))).await.assert_problem(422, "unknown_workload");
    assert!(j["detail"].as_str().unwrap().contains("llama-3.1-8b"), "{j}");
    let j = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64", "tn:64x0x64"]}))).await.assert_problem(422, "invalid_problem");
    assert!(j["detail"].as_str().unwrap().starts_with("problems[1]"), "{j}");
    let j = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64", "tn:65536x65536x65536"]}))).await.assert_problem(422, "invalid_problem");
    assert!(j["detail"].as_str().unwrap().contains("limit"), "{j}");
    call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64"], "priority": 50}))).await.assert_problem(403, "forbidden");
    call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64"], "device": "B300"}))).await.assert_problem(400, "unknown_device");
    // Over the quota (3 open tunes): refused whole.
    let j = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64", "tn:128x64x64", "tn:256x64x64", "tn:512x64x64"]}))).await.assert_problem(429, "quota_exceeded");
    assert!(j["detail"].as_str().unwrap().contains("limit is 3"), "{j}");
    assert_eq!(counts(&db).await, before, "a refused request writes nothing");

    // Exactly at the quota is fine, a large shape whose rows the TMA family cannot load
    // included (the mma family takes it at any size: queued, not refused); admins are
    // exempt and may set a priority.
    let r = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:64x64x64", "tn:128x64x64", "tn:4096x4100x4096"]}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["items"][2]["state"], "queued", "{v}");
    assert_eq!(v["counts"]["queued"], 3);
    call(&app, ask(&alice, serde_json::json!({"problems": ["tn:512x64x64"]}))).await.assert_problem(429, "quota_exceeded");
    let ops = auth::create_token(&db.db, "ops", Role::Admin).await.unwrap().secret;
    let r = call(&app, ask(&ops, serde_json::json!({"problems": ["tn:512x64x64", "tn:1024x64x64", "tn:2048x64x64", "tn:64x64x64"], "priority": 50}))).await;
    assert_eq!(r.status, 201);
    // The admin's priority put the shared tune first.
    let v = r.json();
    assert_eq!(v["items"][3]["job_id"], get(&app, &format!("/v1/tuning-requests/{}", v["id"])).await.json()["items"][3]["job_id"]);
    let (j, p) = claim_tune(&db, "w").await;
    assert_eq!(j.priority, 50);
    assert!(p.m == 512 || p.m == 1024 || p.m == 2048 || p.m == 64, "{p}");
    db.cleanup().await;
}

async fn a_kernel_miss_says_how_to_ask_and_may_queue_itself(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let j = get(&app, "/v1/kernels/sm_90/f32/tn/16x14336x4096").await.assert_problem(404, "kernel_not_found");
    assert_eq!(j["tuning"]["state"], "not_requested");
    // One sentence after another, each with its full stop.
    let detail = j["detail"].as_str().unwrap_or_default();
    let at = detail.find(" It has not been asked to be tuned").unwrap_or_else(|| panic!("{detail}"));
    assert!(detail[..at].ends_with('.'), "{detail}");
    assert_eq!(j["tuning"]["request"]["url"], "/v1/tuning-requests");
    assert_eq!(j["tuning"]["request"]["body"]["problems"][0], "sm_90/f32/tn/16x14336x4096");
    assert_eq!(db.count("tunes").await, 0, "off by default: a miss queues nothing");
    call(&app, ask(&alice, serde_json::json!({"problems": ["tn:16x14336x4096"]}))).await;
    let j = get(&app, "/v1/kernels/sm_90/f32/tn/16x14336x4096").await.assert_problem(404, "kernel_not_found");
    assert_eq!(j["tuning"]["state"], "queued");
    assert_eq!(j["tuning"]["queue_position"], 1);
    assert!(j["detail"].as_str().unwrap().contains("queued"), "{j}");

    // With the operator's setting, a miss queues its own tune, within the miss limits.
    let limits = TuneLimits { on_miss: true, on_miss_per_minute: 2, ..TuneLimits::default() };
    let app = test::init_service(create_app(state(&db, settings(limits)))).await;
    let j = get(&app, "/v1/kernels/sm_90/f32/tn/8x14336x4096").await.assert_problem(404, "kernel_not_found");
    assert_eq!(j["tuning"]["state"], "queued", "{j}");
    let j = get(&app, "/v1/kernels/sm_90/f32/tn/8x14336x4096").await.json();
    assert_eq!(j["tuning"]["state"], "queued");
    get(&app, "/v1/kernels/sm_90/f32/tn/4x14336x4096").await;
    let j = get(&app, "/v1/kernels/sm_90/f32/tn/2x14336x4096").await.json();
    assert_eq!(j["tuning"]["state"], "not_requested", "the per-minute limit holds: {j}");
    assert!(j["tuning"]["note"].as_str().unwrap().contains("limit"), "{j}");
    assert_eq!(db.count("tunes").await, 3);
    let anonymous = db.count("tuning_requests").await;
    assert_eq!(anonymous, 3, "one request of the user, two of misses");
    db.cleanup().await;
}

async fn the_event_stream_follows_a_request_to_its_end(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let id = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:16x4096x4096"]}))).await.json()["id"].as_i64().unwrap();
    let req = TestRequest::get().uri(&format!("/v1/tuning-requests/{id}/events")).to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers().get("content-type").unwrap(), "text/event-stream");
    let worker = {
        let db = db.db.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            let c = queue::claim(&db, &claimant("w"), Duration::from_secs(30), 3).await.unwrap().unwrap();
            let Work::Tune { problem, .. } = c.work else { panic!("not a tune job") };
            tokio::time::sleep(Duration::from_millis(600)).await;
            tune::complete(&db, c.job.id, "w", &outcome(problem, Verdict::Pass, 1.5), &facts(DEVICE)).await.unwrap();
        })
    };
    let body = tokio::time::timeout(Duration::from_secs(30), test::read_body(res)).await.expect("the stream ended");
    worker.await.unwrap();
    let text = String::from_utf8_lossy(&body);
    let states: Vec<String> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap()["items"][0]["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states.first().map(String::as_str), Some("queued"), "{text}");
    assert_eq!(states.last().map(String::as_str), Some("served"), "{text}");
    assert!(text.contains("event: done"), "{text}");
    db.cleanup().await;
}

/// A real `kaas worker` with a fake sandbox that answers `--tune` jobs: the tune goes
/// queued → tuning → verifying → served, the progress lines moving its state.
async fn a_worker_runs_tune_jobs_in_its_sandbox(backend: Backend) {
    let (db, url) = TestDb::with_url(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let id = call(&app, ask(&alice, serde_json::json!({"problems": ["tn:16x4096x4096"]}))).await.json()["id"].as_i64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = problem(16, 4096, 4096, kaas::problem::Layout::Tn);
    std::fs::write(dir.path().join("16x4096x4096.json"), serde_json::to_string(&outcome(p, Verdict::Pass, 1.2)).unwrap()).unwrap();
    let exe = env!("CARGO_BIN_EXE_kaas");
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-sandbox.sh");
    let mut w = std::process::Command::new(exe)
        .args(["worker", "--database-url", &url, "--lease-secs", "3", "--poll-ms", "100", "--bench-budget-ms", "0"])
        .env("KAAS_SANDBOX_EXE", fake)
        .env("FAKE_TUNE_DIR", dir.path())
        .env("FAKE_SANDBOX_SLEEP", "1")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start kaas worker");
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let mut seen = vec![];
    let v = loop {
        let v = get(&app, &format!("/v1/tuning-requests/{id}")).await.json();
        let s = v["items"][0]["state"].as_str().unwrap().to_string();
        if seen.last() != Some(&s) {
            seen.push(s);
        }
        if v["done"] == true {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "never finished: {v} after {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    w.kill().ok();
    w.wait().ok();
    assert_eq!(v["items"][0]["state"], "served", "{v}");
    assert_eq!(seen.first().map(String::as_str), Some("queued"));
    assert!(seen.contains(&"tuning".to_string()) && seen.contains(&"verifying".to_string()), "{seen:?}");
    db.cleanup().await;
}

/// The workload page's rows show where a requested problem's tune stands until the
/// catalog answers it.
async fn a_workload_shows_its_problems_tunes(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(TuneLimits::default())))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let r = call(&app, ask(&alice, serde_json::json!({"workload": "llama-3.1-8b", "tokens": [16]}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let (_job, p) = claim_tune(&db, "w1").await;
    let w = get(&app, "/v1/workloads/llama-3.1-8b").await.json();
    let rows: Vec<&serde_json::Value> = w["rows"].as_array().unwrap().iter().filter(|r| r["tokens"] == 16).collect();
    assert_eq!(rows.len(), 4, "{w}");
    for row in rows {
        let want = if row["path"] == p.path().as_str() { "tuning" } else { "queued" };
        assert_eq!(row["state"], "not_in_catalog", "{row}");
        assert_eq!(row["tune"], want, "{row}");
    }
    // A token count nobody asked for has no tune.
    let one = w["rows"].as_array().unwrap().iter().find(|r| r["tokens"] == 1).unwrap();
    assert!(one.get("tune").is_none(), "{one}");
    // Asked for and never measured, the problems add nothing to the heatmap.
    let h = get(&app, "/v1/heatmap").await.json();
    assert_eq!(h["ks"], serde_json::json!([]), "{h}");
    assert_eq!(h["cells"], serde_json::json!([]), "{h}");
    db.cleanup().await;
}

both_backends!(
    a_workload_shows_its_problems_tunes,
    a_problem_asked_by_anyone_is_one_tune_and_one_job,
    concurrent_requests_on_two_replicas_make_one_job_per_problem,
    a_tune_moves_from_queued_to_served_or_baseline_faster,
    bad_requests_name_the_fault_and_queue_nothing,
    a_kernel_miss_says_how_to_ask_and_may_queue_itself,
    the_event_stream_follows_a_request_to_its_end,
    a_worker_runs_tune_jobs_in_its_sandbox,
);

/// The first start imports the shipped catalog; a bundle shipped later (a tuned workload
/// bundle beside the grid) is imported by the next start, once.
#[actix_web::test]
async fn a_workload_bundle_shipped_later_is_imported_at_the_next_start() {
    let db = TestDb::new(Backend::Sqlite).await;
    let tree = tempfile::tempdir().unwrap();
    write_fixture(tree.path(), &fixture());
    let first = kaas::catalog::seed::seed(&db.db, tree.path()).await.unwrap();
    assert!(matches!(first, kaas::catalog::seed::Seeded::Imported(_)));
    let entries = db.count("catalog_entries").await;
    assert!(matches!(kaas::catalog::seed::seed(&db.db, tree.path()).await.unwrap(), kaas::catalog::seed::Seeded::Already(_)));
    // A workload bundle: one entry for a problem the grid lacks.
    let (mut index, ptx) = fixture_index(&fixture());
    let wl = problem(16, 4096, 4096, kaas::problem::Layout::Tn);
    index.entries.truncate(1);
    index.entries[0].problem = wl;
    index.entries[0].manifest = manifest(wl);
    index.problems = vec![wl];
    index.baselines.clear();
    kaas::catalog::bundle::write_bundle(&tree.path().join("workloads-h100"), &index, &ptx).unwrap();
    match kaas::catalog::seed::seed(&db.db, tree.path()).await.unwrap() {
        kaas::catalog::seed::Seeded::Imported(r) => assert_eq!(r.bundles, vec![".".to_string(), "workloads-h100".to_string()]),
        other => panic!("not imported: {other:?}"),
    }
    assert_eq!(db.count("catalog_entries").await, entries + 1);
    assert!(matches!(kaas::catalog::seed::seed(&db.db, tree.path()).await.unwrap(), kaas::catalog::seed::Seeded::Already(_)));
}
