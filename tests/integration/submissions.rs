//! Submissions, the job queue and the leaderboard write path, on both backends, without
//! a GPU: the sandbox's outcome is written by the test (or by a fake sandbox script).

use std::collections::BTreeSet;
use std::time::Duration;

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::gpu::DeviceFacts;
use kaas::harness::RunOutcome;
use kaas::problem::Layout;
use kaas::verify::Verdict;
use kaas::work::queue::{self, Claimant, Stored};
use kaas::work::submit::Quotas;

use crate::both_backends;
use crate::common::*;

pub const FACTS: &str = r#"{"ordinal":0,"name":"NVIDIA H100 80GB HBM3","device_class":"H100-SXM","compute_capability":[9,0],"sm_count":132,"max_shared_mem_per_block_optin":232448,"max_shared_mem_per_sm":233472,"max_threads_per_block":1024,"l2_cache_bytes":52428800,"total_memory_bytes":85520809984,"driver_version":"fake","cuda_driver_api_version":"13.0","cublas_version":"13.0.0","cublaslt_version":"130000","nvrtc_version":null}"#;

pub fn facts(class: &str) -> DeviceFacts {
    let mut f: DeviceFacts = serde_json::from_str(FACTS).unwrap();
    f.device_class = class.into();
    f
}

fn claimant(name: &str) -> Claimant {
    Claimant { worker_id: name.into(), facts: facts(DEVICE) }
}

fn submit_req(token: &str, body: serde_json::Value) -> TestRequest {
    TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {token}"))).set_json(body)
}

/// A submission body: the fixture PTX and one manifest per shape.
fn body(tag: &str, shapes: &[(u32, u32, u32)]) -> serde_json::Value {
    let manifests: Vec<_> = shapes.iter().map(|&(m, n, k)| manifest(problem(m, n, k, Layout::Tn))).collect();
    serde_json::json!({"ptx": ptx(tag), "manifests": manifests, "name": format!("kernel {tag}")})
}

/// A passing outcome with graph-mode timings (median and 95% CI) and a speedup.
fn passed(median: f64, half_ci: f64, speedup: f64) -> RunOutcome {
    let mut o = RunOutcome::early(Verdict::Pass, "benchmark", "verified and benchmarked");
    o.device = Some(facts(DEVICE));
    o.bench = Some(serde_json::json!({
        "timings": {"graph": {"median_us": median, "ci95_low_us": median - half_ci, "ci95_high_us": median + half_ci, "tflops": 100.0}},
        "speedups": {"graph": {"cublaslt_autotune_max": speedup, "cublas_max": speedup}},
        "baselines": [{"library": "cublaslt_autotune", "layout": "tn", "mode": "graph", "timing": {"median_us": median * speedup}, "config": {"algo": 1}}],
        "converged": true, "rounds": 20,
    }));
    o
}

async fn count_writes(db: &TestDb) -> (i64, i64, i64) {
    (db.count("submissions").await, db.count("jobs").await, db.count("artifacts").await)
}

async fn bad_submissions_are_refused_with_the_first_fault_and_write_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let settings = ApiSettings { quotas: Quotas { max_artifact_bytes: 2000, ..Quotas::default() }, ..ApiSettings::default() };
    let app = test::init_service(create_app(state(&db, settings))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let before = count_writes(&db).await;

    let unauth = TestRequest::post().uri("/v1/submissions").set_json(body("a", &[(256, 256, 256)]));
    call(&app, unauth).await.assert_problem(401, "missing_token");
    call(&app, submit_req("kaas_nope", body("a", &[(256, 256, 256)]))).await.assert_problem(401, "invalid_token");
    let raw = TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {t}"))).set_payload("{not json");
    call(&app, raw).await.assert_problem(400, "invalid_body");
    let mut unknown = body("a", &[(256, 256, 256)]);
    unknown["surprise"] = serde_json::json!(1);
    assert!(call(&app, submit_req(&t, unknown)).await.assert_problem(400, "invalid_body")["detail"].as_str().unwrap().contains("surprise"));

    // The manifest: wrong ABI, no manifest at all, a problem twice.
    let mut wrong_abi = body("a", &[(256, 256, 256)]);
    wrong_abi["manifests"][0]["abi"] = serde_json::json!("kaas.hgemm.v0");
    let j = call(&app, submit_req(&t, wrong_abi)).await.assert_problem(422, "invalid_manifest");
    assert!(j["detail"].as_str().unwrap().contains("manifests[0]"), "{j}");
    call(&app, submit_req(&t, serde_json::json!({"ptx": ptx("a")}))).await.assert_problem(422, "invalid_manifest");
    call(&app, submit_req(&t, body("a", &[(256, 256, 256), (256, 256, 256)]))).await.assert_problem(422, "invalid_manifest");

    // PTX that is not PTX text; an entry the PTX lacks; params that do not match.
    let mut not_ptx = body("a", &[(256, 256, 256)]);
    not_ptx["ptx"] = serde_json::json!("\u{0}\u{1}ELF binary");
    call(&app, submit_req(&t, not_ptx)).await.assert_problem(422, "invalid_artifact");
    let mut missing = body("a", &[(256, 256, 256)]);
    missing["manifests"][0]["launches"][0]["entry"] = serde_json::json!("hgemm_elsewhere");
    let j = call(&app, submit_req(&t, missing)).await.assert_problem(422, "static_invalid");
    assert!(j["detail"].as_str().unwrap().contains("hgemm_elsewhere"), "{j}");
    let mut params = body("a", &[(256, 256, 256)]);
    params["manifests"][0]["launches"][0]["params"].as_array_mut().unwrap().pop();
    call(&app, submit_req(&t, params)).await.assert_problem(422, "static_invalid");

    // Over the artifact quota (2000 bytes here).
    let mut big = body("a", &[(256, 256, 256)]);
    big["ptx"] = serde_json::json!(format!("{}{}", ptx("a"), "// padding\n".repeat(200)));
    call(&app, submit_req(&t, big)).await.assert_problem(413, "artifact_too_large");
    // An artifact named by a sha256 nobody uploaded.
    let by_sha = serde_json::json!({"artifact_sha256": "0".repeat(64), "manifests": [manifest(problem(256, 256, 256, Layout::Tn))]});
    call(&app, submit_req(&t, by_sha)).await.assert_problem(404, "not_found");
    // A device class nobody has.
    let mut class = body("a", &[(256, 256, 256)]);
    class["device_classes"] = serde_json::json!(["B300"]);
    call(&app, submit_req(&t, class)).await.assert_problem(400, "invalid_body");

    assert_eq!(count_writes(&db).await, before, "a refused submission writes nothing");
    db.cleanup().await;
}

async fn accepted_work_is_one_job_per_problem_and_device_class(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;

    // No worker seen yet: one job per problem, for any worker.
    let r = call(&app, submit_req(&t, body("a", &[(256, 256, 256), (512, 256, 256)]))).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let id = v["id"].as_i64().unwrap();
    assert_eq!(r.header("location").unwrap(), format!("/v1/submissions/{id}"));
    assert_eq!(v["status"], "queued");
    assert_eq!(v["submitter"], "alice");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    assert!(v["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "queued" && j["device_class"].is_null()));
    assert_eq!(v["links"]["events"], format!("/v1/submissions/{id}/events"));

    // The same submission again is answered with the first, and queues nothing.
    let again = call(&app, submit_req(&t, body("a", &[(512, 256, 256), (256, 256, 256)]))).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["id"], id);
    assert_eq!(db.count("jobs").await, 2);
    // Another submitter's identical kernel is their own submission.
    let bob = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap().secret;
    assert_eq!(call(&app, submit_req(&bob, body("a", &[(256, 256, 256)]))).await.status, 202);
    assert_eq!(db.count("artifacts").await, 1, "PTX is stored once by sha256");

    // With workers of two classes seen, a job per (problem, class).
    queue::worker_seen(&db.db, "w1", Some(&facts("H100-SXM")), "idle", None, None).await.unwrap();
    queue::worker_seen(&db.db, "w2", Some(&facts("H200")), "idle", None, None).await.unwrap();
    let r = call(&app, submit_req(&t, body("b", &[(256, 256, 256), (512, 256, 256), (1024, 256, 256)]))).await;
    assert_eq!(r.status, 202);
    let jobs = r.json()["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 6);
    let classes: BTreeSet<String> = jobs.iter().map(|j| j["device_class"].as_str().unwrap().to_string()).collect();
    assert_eq!(classes, BTreeSet::from(["H100-SXM".to_string(), "H200".to_string()]));
    // Or only the classes asked for.
    let mut only = body("c", &[(256, 256, 256)]);
    only["device_classes"] = serde_json::json!(["H200"]);
    let r = call(&app, submit_req(&t, only)).await;
    assert_eq!(r.json()["jobs"][0]["device_class"], "H200");

    // A template: one manifest for many shapes, grids computed per shape.
    let template = serde_json::json!({
        "abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn",
        "launches": [{"entry": "hgemm_fixture", "block": [256, 1, 1],
                      "grid": [{"ceil_div": ["N", 128]}, {"ceil_div": ["M", 64]}, 1],
                      "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]
    });
    let r = call(&app, submit_req(&t, serde_json::json!({"ptx": ptx("t"), "template": template, "problems": ["4096x1024x64", "64x64x64"]}))).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let sub = r.json();
    assert_eq!(sub["jobs"].as_array().unwrap().len(), 4, "2 shapes × 2 device classes");
    let paths: BTreeSet<String> = sub["jobs"].as_array().unwrap().iter().map(|j| j["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(paths, BTreeSet::from(["sm_90/f32/tn/4096x1024x64".to_string(), "sm_90/f32/tn/64x64x64".to_string()]));
    let claimed = queue::claim(&db.db, &claimant("w1"), Duration::from_secs(30), 3).await.unwrap();
    assert!(claimed.is_some());
    // A problem object is not a template: refused as a malformed body.
    let bad = serde_json::json!({"ptx": ptx("t"), "template": sub["jobs"][0]["problem"], "problems": ["4096x1024x64"]});
    call(&app, submit_req(&t, bad)).await.assert_problem(400, "invalid_body");

    // Reading: one submission, the list, a missing one.
    let one = get(&app, &format!("/v1/submissions/{id}")).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["jobs"].as_array().unwrap().len(), 2);
    get(&app, "/v1/submissions/999999").await.assert_problem(404, "not_found");
    get(&app, "/v1/submissions/abc").await.assert_problem(400, "invalid_path");
    let mine = get(&app, "/v1/submissions?submitter=bob").await.json();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    db.cleanup().await;
}

async fn queued_jobs_are_limited_per_submitter_but_not_for_admins(backend: Backend) {
    let db = TestDb::new(backend).await;
    let settings = ApiSettings { quotas: Quotas { max_queued_jobs: 3, ..Quotas::default() }, ..ApiSettings::default() };
    let app = test::init_service(create_app(state(&db, settings))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    assert_eq!(call(&app, submit_req(&t, body("a", &[(256, 256, 256), (512, 256, 256)]))).await.status, 202);
    let over = call(&app, submit_req(&t, body("b", &[(256, 256, 256), (512, 256, 256)]))).await;
    let j = over.assert_problem(429, "quota_exceeded");
    assert!(j["detail"].as_str().unwrap().contains("limit is 3"), "{j}");
    assert_eq!(call(&app, submit_req(&t, body("b", &[(256, 256, 256)]))).await.status, 202, "exactly at the limit is fine");
    let admin = auth::create_token(&db.db, "ops", Role::Admin).await.unwrap().secret;
    assert_eq!(call(&app, submit_req(&admin, body("c", &[(256, 256, 256), (512, 256, 256), (1024, 256, 256), (2048, 256, 256)]))).await.status, 202);
    // Finished jobs no longer count.
    let c = claimant("w");
    for _ in 0..3 {
        let claimed = queue::claim(&db.db, &c, Duration::from_secs(30), 3).await.unwrap().unwrap();
        // Admin (tuner) work runs after submitters'.
        assert!(claimed.job.priority > 0, "an admin job was claimed before a submitter's");
        queue::complete(&db.db, claimed.job.id, "w", &passed(10.0, 0.1, 1.0), &facts(DEVICE)).await.unwrap();
    }
    assert_eq!(call(&app, submit_req(&t, body("d", &[(256, 256, 256), (512, 256, 256), (1024, 256, 256)]))).await.status, 202);
    db.cleanup().await;
}

async fn a_job_moves_through_its_states(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let sub = call(&app, submit_req(&t, body("a", &[(256, 256, 256), (512, 256, 256)]))).await.json();
    let sid = sub["id"].as_i64().unwrap() as i32;
    let lease = Duration::from_millis(300);

    // A worker whose GPU cannot run sm_90 gets nothing.
    let mut old = facts("A100-SXM");
    old.compute_capability = (8, 0);
    let ampere = Claimant { worker_id: "ampere".into(), facts: old };
    assert!(queue::claim(&db.db, &ampere, lease, 3).await.unwrap().is_none());

    let a = claimant("worker-a");
    let first = queue::claim(&db.db, &a, lease, 3).await.unwrap().unwrap();
    assert_eq!(first.job.state, "running");
    assert_eq!(first.job.attempts, 1);
    assert_eq!(first.job.lease_owner.as_deref(), Some("worker-a"));
    let queue::Work::Verify { manifest, ptx } = &first.work else { panic!("a submission's job is a verify job") };
    assert_eq!(manifest.problem, problem(256, 256, 256, Layout::Tn));
    assert!(ptx.contains("hgemm_fixture"));
    assert!(queue::heartbeat(&db.db, first.job.id, "worker-a", lease, Some("verifying")).await.unwrap());
    assert!(!queue::heartbeat(&db.db, first.job.id, "worker-b", lease, None).await.unwrap(), "only the owner renews");
    let v = get(&app, &format!("/v1/submissions/{sid}")).await.json();
    assert_eq!(v["status"], "running");
    assert_eq!(v["jobs"][0]["stage"], "verifying");

    // The second job; then nothing left for anyone while leases hold.
    let second = queue::claim(&db.db, &a, lease, 3).await.unwrap().unwrap();
    let b = claimant("worker-b");
    assert!(queue::claim(&db.db, &b, lease, 3).await.unwrap().is_none());

    // worker-a finishes the first job.
    let stored = queue::complete(&db.db, first.job.id, "worker-a", &passed(50.0, 0.2, 1.1), &facts(DEVICE)).await.unwrap();
    assert!(matches!(stored, Stored::Run { promoted: true, .. }), "{stored:?}");
    // A second completion of the same job (a retry after a network blip) stores nothing.
    assert_eq!(queue::complete(&db.db, first.job.id, "worker-a", &passed(50.0, 0.2, 1.1), &facts(DEVICE)).await.unwrap(), Stored::Lost);

    // worker-a dies holding the second job: after the lease, worker-b takes it over.
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    let again = queue::claim(&db.db, &b, lease, 3).await.unwrap().unwrap();
    assert_eq!(again.job.id, second.job.id);
    assert_eq!(again.job.attempts, 2);
    // The old owner's late result is dropped; its heartbeat tells it to stop.
    assert!(!queue::heartbeat(&db.db, second.job.id, "worker-a", lease, None).await.unwrap());
    assert_eq!(queue::complete(&db.db, second.job.id, "worker-a", &passed(1.0, 0.1, 9.0), &facts(DEVICE)).await.unwrap(), Stored::Lost);
    // worker-b hits an internal error and gives it back; it counts as an attempt.
    assert!(queue::release(&db.db, second.job.id, "worker-b", "sandbox missing").await.unwrap());
    let third = queue::claim(&db.db, &b, lease, 3).await.unwrap().unwrap();
    assert_eq!(third.job.attempts, 3);
    assert_eq!(third.job.error.as_deref(), Some("sandbox missing"));
    // It dies again: attempts are used up, so the next claim fails the job for good.
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert!(queue::claim(&db.db, &b, lease, 3).await.unwrap().is_none());
    let v = get(&app, &format!("/v1/submissions/{sid}")).await.json();
    assert_eq!(v["status"], "done");
    assert_eq!(v["jobs"][0]["state"], "done");
    assert_eq!(v["jobs"][0]["run"]["verdict"], "pass");
    assert_eq!(v["jobs"][0]["run"]["in_catalog"], true);
    assert_eq!(v["jobs"][0]["run"]["details"]["worker"], "worker-a");
    assert_eq!(v["jobs"][1]["state"], "failed");
    assert_eq!(v["jobs"][1]["run"]["verdict"], "worker_lost");
    assert!(v["jobs"][1]["run"]["message"].as_str().unwrap().contains("3 times"), "{}", v["jobs"][1]);
    // The baselines timed beside the run joined the problem's table.
    let k = get(&app, "/v1/kernels/sm_90/f32/tn/256x256x256").await.json();
    assert_eq!(k["baselines"][0]["library"], "cublaslt_autotune");
    assert_eq!(k["submitter"], "alice");
    db.cleanup().await;
}

async fn owners_and_admins_cancel_and_delete(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let bob = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap().secret;
    let admin = auth::create_token(&db.db, "ops", Role::Admin).await.unwrap().secret;
    let sid = call(&app, submit_req(&alice, body("a", &[(256, 256, 256), (512, 256, 256)]))).await.json()["id"].as_i64().unwrap();
    let lease = Duration::from_secs(30);
    let running = queue::claim(&db.db, &claimant("w"), lease, 3).await.unwrap().unwrap();

    let cancel = |tok: &str| TestRequest::post().uri(&format!("/v1/submissions/{sid}/cancel")).insert_header(("Authorization", format!("Bearer {tok}")));
    call(&app, cancel(&bob)).await.assert_problem(403, "forbidden");
    let r = call(&app, cancel(&alice)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"], "cancelled");
    assert!(v["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "cancelled"));
    // The worker running one learns it at its next heartbeat, and its result is dropped.
    assert!(!queue::heartbeat(&db.db, running.job.id, "w", lease, None).await.unwrap());
    assert_eq!(queue::complete(&db.db, running.job.id, "w", &passed(5.0, 0.1, 2.0), &facts(DEVICE)).await.unwrap(), Stored::Lost);

    // A submission whose run holds a catalog entry cannot be deleted; others can, by an admin too.
    let held = call(&app, submit_req(&alice, body("b", &[(1024, 256, 256)]))).await.json()["id"].as_i64().unwrap();
    let j = queue::claim(&db.db, &claimant("w"), lease, 3).await.unwrap().unwrap();
    queue::complete(&db.db, j.job.id, "w", &passed(5.0, 0.1, 2.0), &facts(DEVICE)).await.unwrap();
    let del = |id: i64, tok: &str| TestRequest::delete().uri(&format!("/v1/submissions/{id}")).insert_header(("Authorization", format!("Bearer {tok}")));
    call(&app, del(held, &alice)).await.assert_problem(409, "conflict");
    call(&app, del(sid, &bob)).await.assert_problem(403, "forbidden");
    assert_eq!(call(&app, del(sid, &admin)).await.status, 204);
    assert_eq!(get(&app, &format!("/v1/submissions/{sid}")).await.json()["status"], "deleted");
    let listed = get(&app, "/v1/submissions?submitter=alice").await.json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "deleted submissions leave the list");
    db.cleanup().await;
}

async fn the_catalog_changes_only_for_a_faster_run_and_leaderboards_rank_it(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let shape = [(2048, 2048, 2048)];
    let lease = Duration::from_secs(30);
    let run_for = async |who: &str, tag: &str, outcome: RunOutcome| -> Stored {
        let tok = auth::create_token(&db.db, who, Role::Submitter).await.unwrap().secret;
        let r = call(&app, submit_req(&tok, body(tag, &shape))).await;
        assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
        let j = queue::claim(&db.db, &claimant("w"), lease, 3).await.unwrap().unwrap();
        queue::complete(&db.db, j.job.id, "w", &outcome, &facts(DEVICE)).await.unwrap()
    };
    let path = "/v1/kernels/sm_90/f32/tn/2048x2048x2048";
    assert!(matches!(run_for("alice", "a", passed(100.0, 1.0, 1.02)).await, Stored::Run { promoted: true, .. }));
    assert_eq!(get(&app, path).await.json()["submitter"], "alice");
    // bob is faster by a median, but the intervals overlap: alice keeps the entry.
    assert!(matches!(run_for("bob", "b", passed(99.0, 1.0, 1.03)).await, Stored::Run { promoted: false, .. }));
    // carol fails verification: never in the catalog.
    let mut failed = RunOutcome::early(Verdict::ExactMismatch, "binary exact test", "C[3,4] = 7, expected 8");
    failed.device = Some(facts(DEVICE));
    assert!(matches!(run_for("carol", "c", failed).await, Stored::Run { promoted: false, .. }));
    // dave is faster beyond both intervals: he takes it.
    assert!(matches!(run_for("dave", "d", passed(90.0, 0.5, 1.13)).await, Stored::Run { promoted: true, .. }));
    // The cached answer may be up to the TTL old; ask the database directly.
    let st = state(&db, ApiSettings::default());
    let fresh = test::init_service(create_app(st)).await;
    assert_eq!(get(&fresh, path).await.json()["submitter"], "dave");

    let board = get(&fresh, "/v1/leaderboard/sm_90/f32/tn/2048x2048x2048").await.json();
    let names: Vec<&str> = board["rows"].as_array().unwrap().iter().map(|r| r["submitter"].as_str().unwrap()).collect();
    assert_eq!(names, ["dave", "bob", "alice"], "fastest first; failing runs are not ranked");
    let global = get(&fresh, "/v1/leaderboard").await.json();
    assert_eq!(global["submitters"][0]["submitter"], "dave");
    assert_eq!(global["submitters"][0]["problems_held"], 1);
    assert_eq!(global["submitters"][1]["submitter"], "bob", "then by geometric-mean speedup");
    // History: every run and both catalog entries are kept.
    assert_eq!(db.count("runs").await, 4);
    assert_eq!(db.count("catalog_entries").await, 2);
    db.cleanup().await;
}

/// The first job's state in each event of an event stream's text.
fn job_states(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap()["jobs"][0]["state"].as_str().unwrap().to_string())
        .collect()
}

/// A worker that claims the one queued job after `pause`, then passes it after another.
fn work_through(conn: sea_orm::DatabaseConnection, pause: Duration) -> actix_web::rt::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        tokio::time::sleep(pause).await;
        let j = queue::claim(&conn, &claimant("w"), Duration::from_secs(30), 3).await.unwrap().unwrap();
        tokio::time::sleep(pause).await;
        queue::complete(&conn, j.job.id, "w", &passed(10.0, 0.1, 1.2), &facts(DEVICE)).await.unwrap();
    })
}

async fn the_event_stream_ends_with_the_final_state(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let sid = call(&app, submit_req(&t, body("a", &[(256, 256, 256)]))).await.json()["id"].as_i64().unwrap();
    get(&app, "/v1/submissions/424242/events").await.assert_problem(404, "not_found");
    let worker = work_through(db.db.clone(), Duration::from_millis(600));
    let r = get(&app, &format!("/v1/submissions/{sid}/events")).await;
    worker.await.unwrap();
    assert_eq!(r.header("content-type").as_deref(), Some("text/event-stream"));
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert!(events.len() >= 3, "queued, running, finished at least: {events:?}");
    assert_eq!(events.last(), Some(&"done"));
    let states = job_states(&text);
    assert_eq!(states.first().map(String::as_str), Some("queued"));
    assert!(states.iter().any(|s| s == "running"), "{states:?}");
    assert_eq!(states.last().map(String::as_str), Some("done"));
    db.cleanup().await;
}

async fn concurrent_workers_never_run_a_job_twice(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "ops", Role::Admin).await.unwrap().secret;
    let shapes: Vec<(u32, u32, u32)> = (1..=40).map(|i| (64 * i, 256, 256)).collect();
    assert_eq!(call(&app, submit_req(&t, body("many", &shapes))).await.status, 202);
    let workers = 8;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let conn = db.db.clone();
        tasks.push(actix_web::rt::spawn(async move {
            let me = claimant(&format!("w{w}"));
            let mut ran = Vec::new();
            while let Some(j) = queue::claim(&conn, &me, Duration::from_secs(30), 3).await.unwrap() {
                ran.push(j.job.id);
                // Hold the job a moment, as a real worker does: the others claim meanwhile,
                // so the claims really overlap (a bare yield let one task take every job on
                // a loaded machine, and the test then proved nothing about concurrency).
                tokio::time::sleep(Duration::from_millis(2)).await;
                let stored = queue::complete(&conn, j.job.id, &me.worker_id, &passed(10.0, 0.1, 1.0), &facts(DEVICE)).await.unwrap();
                assert!(matches!(stored, Stored::Run { .. }), "a claimed job was not ours: {stored:?}");
            }
            ran
        }));
    }
    let mut all = Vec::new();
    let mut busy = 0;
    for t in tasks {
        let ran = t.await.unwrap();
        busy += usize::from(!ran.is_empty());
        all.extend(ran);
    }
    let unique: BTreeSet<i32> = all.iter().copied().collect();
    assert_eq!(all.len(), 40, "every job ran exactly once");
    assert_eq!(unique.len(), 40);
    assert!(busy > 1, "the work was shared");
    assert_eq!(db.count("runs").await, 40);
    let left = get(&app, "/v1/health").await.json();
    assert_eq!(left["queue"]["queued"], 0);
    assert_eq!(left["queue"]["running"], 0);
    db.cleanup().await;
}

/// Starts `kaas worker` against `url` with the fake sandbox.
fn spawn_worker(url: &str, sleep_secs: u32) -> std::process::Child {
    let exe = env!("CARGO_BIN_EXE_kaas");
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-sandbox.sh");
    std::process::Command::new(exe)
        .args(["worker", "--database-url", url, "--lease-secs", "2", "--poll-ms", "100", "--bench-budget-ms", "0"])
        .env("KAAS_SANDBOX_EXE", fake)
        .env("FAKE_SANDBOX_SLEEP", sleep_secs.to_string())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start kaas worker")
}

async fn a_killed_workers_job_is_finished_by_another(backend: Backend) {
    let (db, url) = TestDb::with_url(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let sid = call(&app, submit_req(&t, body("a", &[(256, 256, 256)]))).await.json()["id"].as_i64().unwrap();

    // Worker A takes the job; its sandbox would take a minute.
    let mut a = spawn_worker(&url, 60);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let owner = loop {
        let v = get(&app, &format!("/v1/submissions/{sid}")).await.json();
        if v["jobs"][0]["state"] == "running" {
            break v["jobs"][0]["stage"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "worker A never claimed the job: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(owner.contains(&format!("/{}", a.id())), "A runs it: {owner}");
    // Kill the process, not a flag.
    a.kill().unwrap();
    a.wait().unwrap();

    // Worker B picks it up once A's lease (2 s) runs out, and finishes it.
    let mut b = spawn_worker(&url, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let v = loop {
        let v = get(&app, &format!("/v1/submissions/{sid}")).await.json();
        if v["status"] == "done" {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the job was never finished: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let b_pid = b.id();
    b.kill().ok();
    b.wait().ok();
    let job = &v["jobs"][0];
    assert_eq!(job["state"], "done");
    assert_eq!(job["attempts"], 2, "A's attempt and B's");
    assert_eq!(job["run"]["verdict"], "pass");
    let by = job["run"]["details"]["worker"].as_str().unwrap();
    assert!(by.ends_with(&format!("/{b_pid}")), "B stored the run: {by}");
    assert_eq!(db.count("runs").await, 1, "A stored nothing");
    // Both workers registered; health lists them.
    assert!(get(&app, "/v1/health").await.json()["workers"].as_array().unwrap().len() >= 2);
    db.cleanup().await;
}

/// Issue 38, item 6: each viewer of a submission's events re-read the whole submission
/// every 400 ms (300 viewers: a core). Now all of a submission's viewers share one feed:
/// whole reads per change, not per viewer and poll.
async fn many_viewers_of_a_submission_share_its_reads(backend: Backend) {
    let db = TestDb::new(backend).await;
    let st = state(&db, ApiSettings { max_event_streams_per_client: 1000, ..Default::default() });
    let app = test::init_service(create_app(st.clone())).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let sid = call(&app, submit_req(&t, body("shared", &[(256, 256, 256)]))).await.json()["id"].as_i64().unwrap();
    let reads = |kind: &str| st.metrics.event_reads.with_label_values(&[kind]).get();

    const VIEWERS: usize = 100;
    let mut bodies = Vec::new();
    for i in 0..VIEWERS {
        let req = TestRequest::get().uri(&format!("/v1/submissions/{sid}/events")).peer_addr(format!("10.0.{}.{}:4000", i / 200, i % 200 + 1).parse().unwrap());
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), 200);
        bodies.push(actix_web::rt::spawn(test::read_body(res)));
    }
    let worker = work_through(db.db.clone(), Duration::from_millis(900));
    for b in bodies {
        let text = String::from_utf8(b.await.unwrap().to_vec()).unwrap();
        let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(events.first(), Some(&"snapshot"), "{events:?}");
        assert_eq!(events.last(), Some(&"done"), "{events:?}");
        let states = job_states(&text);
        assert!(states.iter().any(|s| s == "running"), "every viewer sees every change: {states:?}");
    }
    worker.await.unwrap();
    // Two changes (claimed, completed): the first read, the feed's first poll, one read
    // per change, and a spare for a change that lands between poll and read.
    let (views, marks) = (reads("view"), reads("marks"));
    assert!(views <= 5, "{views} whole reads of the submission for {VIEWERS} viewers and 2 changes");
    // One small change check per poll for all viewers: ~2 s of polls at 400 ms.
    assert!(marks <= 15, "{marks} change checks for {VIEWERS} viewers");
    assert_eq!(st.events.feeds(), 0, "the feed stops with its submission");
    db.cleanup().await;
}

async fn event_streams_are_capped_per_client(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings { max_event_streams_per_client: 3, ..Default::default() }))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let sid = call(&app, submit_req(&t, body("capped", &[(256, 256, 256)]))).await.json()["id"].as_i64().unwrap();
    let open = |peer: &str| TestRequest::get().uri(&format!("/v1/submissions/{sid}/events")).peer_addr(peer.parse().unwrap()).to_request();
    let mut held = Vec::new();
    for port in 1..=3 {
        let res = test::call_service(&app, open(&format!("192.0.2.1:{port}"))).await;
        assert_eq!(res.status(), 200);
        held.push(res);
    }
    // A fourth from the same address, even from another port, is refused.
    let res = test::call_service(&app, open("192.0.2.1:9")).await;
    assert_eq!(res.status(), 429);
    let j: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(j["code"], "quota_exceeded", "{j}");
    assert!(j["detail"].as_str().unwrap().contains("event streams"), "{j}");
    // Another client is not affected; a closed stream frees its place.
    assert_eq!(test::call_service(&app, open("192.0.2.2:1")).await.status(), 200);
    held.pop();
    assert_eq!(test::call_service(&app, open("192.0.2.1:10")).await.status(), 200);
    drop(held);
    db.cleanup().await;
}

/// The OpenAPI document states the cross-field rules of a submission and of a tuning
/// request (`NewSubmission`'s and `NewTuningRequest`'s `allOf`): each body below is checked
/// against the served document (Python's jsonschema, draft 2020-12) and posted to the
/// server, and the two agree on every rule of shape. The data rules (an unknown artifact,
/// PTX that does not parse) stay the server's: those bodies are schema-valid and refused
/// with 404/422.
#[actix_web::test]
async fn the_document_states_the_submission_rules_the_server_enforces() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let ok = body("a", &[(256, 256, 256)]);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = ok.clone();
        f(&mut b);
        b
    };
    let sha = "0".repeat(64);
    // The PTX submission's manifest as a template for its one problem, with another grid.
    let grid = ok["manifests"][0]["launches"][0]["grid"].clone();
    let template = |b: &mut serde_json::Value, grid: serde_json::Value| {
        let m = b.as_object_mut().unwrap().remove("manifests").unwrap()[0].clone();
        let mut launch = m["launches"][0].clone();
        launch["grid"] = grid;
        let p = &m["problem"];
        b["template"] = serde_json::json!({"abi": m["abi"], "arch": p["arch"], "acc": p["acc"], "layout": p["layout"], "workspace_bytes": m["workspace_bytes"], "launches": [launch]});
        b["problems"] = serde_json::json!([format!("{}x{}x{}", p["m"], p["n"], p["k"])]);
    };
    let tune = |b: serde_json::Value| TestRequest::post().uri("/v1/tuning-requests").insert_header(("Authorization", format!("Bearer {t}"))).set_json(b);
    let tunes: Vec<(&str, serde_json::Value, bool, u16)> = vec![
        ("a tuning request", serde_json::json!({"problems": ["tn:64x64x64"]}), true, 201),
        ("a workload's", serde_json::json!({"workload": "llama-3.1-8b", "tokens": [1]}), true, 201),
        ("nothing to tune", serde_json::json!({"problems": []}), false, 400),
        ("problems and a workload", serde_json::json!({"problems": ["tn:64x64x64"], "workload": "llama-3.1-8b"}), false, 400),
        ("tokens without a workload", serde_json::json!({"problems": ["tn:64x64x64"], "tokens": [1]}), false, 400),
    ];
    for (what, b, _, status) in &tunes {
        let r = call(&app, tune(b.clone())).await;
        assert_eq!(r.status, *status, "{what}: {}", String::from_utf8_lossy(&r.body));
    }
    // (what, body, schema-valid, the server's status)
    let cases: Vec<(&str, serde_json::Value, bool, u16)> = vec![
        ("a PTX submission", ok.clone(), true, 202),
        ("ptx: null beside an artifact", with(&|b| { b["ptx"] = serde_json::Value::Null; b["artifact_sha256"] = sha.clone().into() }), true, 404),
        ("ptx and an artifact", with(&|b| b["artifact_sha256"] = sha.clone().into()), false, 400),
        ("no kernel", with(&|b| { b.as_object_mut().unwrap().remove("ptx"); }), false, 400),
        ("compile options without source", with(&|b| b["compile_options"] = serde_json::json!({})), false, 400),
        ("source text and cuda_source", serde_json::json!({"cuda_source": "__global__ void k() {}", "source": "x", "manifests": ok["manifests"].clone()}), false, 400),
        ("no manifest", with(&|b| b["manifests"] = serde_json::json!([])), false, 422),
        ("problems without a template", with(&|b| b["problems"] = serde_json::json!(["64x64x64"])), false, 422),
        ("a template beside manifests", with(&|b| b["template"] = serde_json::json!({"abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn", "launches": []})), false, 422),
        ("a template without problems", with(&|b| { b["manifests"] = serde_json::json!([]); b["template"] = serde_json::json!({"abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn", "launches": []}) }), false, 422),
        ("PTX that is not PTX", with(&|b| b["ptx"] = "not ptx".into()), true, 422),
        ("a description with a control character", with(&|b| b["description"] = "one\u{1}two".into()), false, 400),
        // Newline and tab are text (the same kernel and problem as the first: 200).
        ("a description of lines", with(&|b| b["description"] = "one\n\ttwo".into()), true, 200),
        // A template's grid holds integers, `M`/`N`/`K` and operator objects, nested (the
        // same kernel and problem as the first: the submission it made, 200).
        ("a template", with(&|b| template(b, serde_json::json!([{"min": [{"sum": [grid[0], 0]}, "M"]}, {"product": [grid[1], 1]}, grid[2]]))), true, 200),
        ("a template's empty product", with(&|b| template(b, serde_json::json!([{"product": []}, grid[1], grid[2]]))), false, 422),
        ("a template's operator of two keys", with(&|b| template(b, serde_json::json!([{"min": [1, 2], "max": [1]}, grid[1], grid[2]]))), false, 400),
    ];
    for (what, b, _, status) in &cases {
        let r = call(&app, submit_req(&t, b.clone())).await;
        assert_eq!(r.status, *status, "{what}: {}", String::from_utf8_lossy(&r.body));
    }
    let doc = get(&app, "/openapi.json").await.json();
    let check = r##"
import json, sys
try:
    import jsonschema
except ImportError:
    print("NO_JSONSCHEMA"); sys.exit(0)
doc, cases = json.load(sys.stdin)
def valid(name, body):
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "#/components/schemas/" + name, "components": doc["components"]}
    return jsonschema.Draft202012Validator(root).is_valid(body)
print(json.dumps([valid(name, b) for name, b in cases]))
"##;
    let named = cases.iter().map(|c| ("NewSubmission", c)).chain(tunes.iter().map(|c| ("NewTuningRequest", c)));
    let input = serde_json::json!([doc, named.clone().map(|(n, c)| serde_json::json!([n, c.1])).collect::<Vec<_>>()]).to_string();
    let out = std::process::Command::new("python3")
        .args(["-c", check])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(input.as_bytes())?;
            child.wait_with_output()
        });
    let Ok(out) = out else {
        crate::skipped!("no python3 to check bodies against the document");
        return db.cleanup().await;
    };
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text == "NO_JSONSCHEMA" {
        crate::skipped!("python3 has no jsonschema to check bodies against the document");
        return db.cleanup().await;
    }
    let valid: Vec<bool> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    for ((_, (what, _, want, _)), got) in named.zip(valid) {
        assert_eq!(got, *want, "{what}: the document says {}", if got { "valid" } else { "invalid" });
    }
    db.cleanup().await;
}

both_backends!(
    bad_submissions_are_refused_with_the_first_fault_and_write_nothing,
    accepted_work_is_one_job_per_problem_and_device_class,
    queued_jobs_are_limited_per_submitter_but_not_for_admins,
    a_job_moves_through_its_states,
    owners_and_admins_cancel_and_delete,
    the_catalog_changes_only_for_a_faster_run_and_leaderboards_rank_it,
    the_event_stream_ends_with_the_final_state,
    concurrent_workers_never_run_a_job_twice,
    a_killed_workers_job_is_finished_by_another,
    many_viewers_of_a_submission_share_its_reads,
    event_streams_are_capped_per_client,
);
