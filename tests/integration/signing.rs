//! Signed results through the real app: kernel answers and submission runs carry a
//! record signed by the key at /.well-known/kaas-signing-keys; replicas agree on the
//! key; `kaas pull` + `kaas verify` pass on an untouched directory and fail, naming the
//! fault, once its PTX, manifest or record is changed.

use std::time::Duration;

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::harness::RunOutcome;
use kaas::problem::Layout;
use kaas::signing::{KeyPair, PublicKey, RecordSignature};
use kaas::verify::Verdict;
use kaas::work::queue::{self, Claimant};

use crate::both_backends;
use crate::common::*;
use crate::submissions::facts;

/// The keys the well-known URL lists, and the current one's id.
async fn well_known<S, B>(app: &S) -> (Vec<PublicKey>, String)
where
    S: actix_web::dev::Service<actix_http::Request, Response = actix_web::dev::ServiceResponse<B>, Error = actix_web::Error>,
    B: actix_web::body::MessageBody,
{
    let r = get(app, "/.well-known/kaas-signing-keys").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let doc = r.json();
    let keys = kaas::client::parse_public_keys(&doc.to_string()).unwrap();
    assert_eq!(doc["keys"][0]["current"], true, "{doc}");
    assert_eq!(doc["keys"][0]["alg"], "ed25519");
    (keys, doc["keys"][0]["key_id"].as_str().unwrap().to_string())
}

fn signature_of(v: &serde_json::Value) -> RecordSignature {
    serde_json::from_value(v["signature"].clone()).unwrap_or_else(|e| panic!("no signature ({e}): {v}"))
}

async fn kernel_answers_carry_a_record_the_well_known_key_verifies(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let (keys, current) = well_known(&app).await;
    let k = get(&app, &format!("/v1/kernels/{}", f.fast.path())).await.json();
    let record = &k["record"];
    let sig = signature_of(&k);
    assert_eq!(sig.key_id, current);
    keys[0].verify(record, &sig).unwrap();

    // The record holds what the answer says about the run.
    assert_eq!(record["format"], "kaas.record.v1");
    assert_eq!(record["artifact_sha256"], k["artifact"]["sha256"]);
    assert_eq!(record["manifest"], k["manifest"]);
    assert_eq!(record["problem"], k["problem"]);
    assert_eq!(record["device_class"], DEVICE);
    assert_eq!(record["verdict"], "pass");
    assert_eq!(record["timings"]["graph"]["median_us"], 900.0);
    assert_eq!(record["speedups"], k["run"]["speedups"]);
    assert_eq!(record["device"]["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(record["run_id"], k["run"]["id"]);

    // Any change to the record fails.
    for (pointer, value) in [("/timings/graph/median_us", serde_json::json!(850.0)), ("/verdict", "fail".into()), ("/manifest/launches/0/grid/0", 1.into())] {
        let mut changed = record.clone();
        *changed.pointer_mut(pointer).unwrap() = value;
        assert!(keys[0].verify(&changed, &sig).is_err(), "{pointer} changed and still verified");
    }

    // A second replica over the same database signs with the same (database-kept) key.
    let replica = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    assert_eq!(well_known(&replica).await.1, current);
    let again = get(&replica, &format!("/v1/kernels/{}", f.fast.path())).await.json();
    assert_eq!(signature_of(&again), sig, "Ed25519 is deterministic: same key, same record, same signature");

    // A configured key signs instead; the database-kept key stays listed, not current.
    let configured = KeyPair::generate();
    let settings = ApiSettings { signing_key: Some(configured.clone()), ..Default::default() };
    let other = test::init_service(create_app(state(&db, settings))).await;
    let (keys, now) = well_known(&other).await;
    assert_eq!(now, configured.key_id());
    assert!(keys.iter().any(|k| k.key_id() == current), "the earlier key is still published");
    let k = get(&other, &format!("/v1/kernels/{}", f.fast.path())).await.json();
    let sig = signature_of(&k);
    assert_eq!(sig.key_id, configured.key_id());
    configured.public().verify(&k["record"], &sig).unwrap();
    db.cleanup().await;
}

async fn submission_runs_carry_signed_records(backend: Backend) {
    let db = TestDb::new(backend).await;
    let st = state(&db, ApiSettings::default());
    let app = test::init_service(create_app(st.clone())).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let p = problem(256, 256, 256, Layout::Tn);
    let req = TestRequest::post()
        .uri("/v1/submissions")
        .insert_header(("Authorization", format!("Bearer {t}")))
        .set_json(serde_json::json!({"ptx": ptx("signed"), "manifests": [manifest(p)], "name": "signed"}));
    let sid = call(&app, req).await.json()["id"].as_i64().unwrap();
    let me = Claimant { worker_id: "w".into(), facts: facts(DEVICE) };
    let job = queue::claim(&db.db, &me, Duration::from_secs(30), 3).await.unwrap().unwrap();
    let mut outcome = RunOutcome::early(Verdict::Pass, "benchmark", "verified and benchmarked");
    outcome.device = Some(facts(DEVICE));
    outcome.bench =
        Some(serde_json::json!({"timings": {"graph": {"median_us": 12.5, "ci95_low_us": 12.4, "ci95_high_us": 12.6}, "server": {"median_us": 14.0}}}));
    queue::complete(&db.db, job.job.id, "w", &outcome, &facts(DEVICE)).await.unwrap();

    let (keys, _) = well_known(&app).await;
    let v = get(&app, &format!("/v1/submissions/{sid}")).await.json();
    let run = &v["jobs"][0]["run"];
    let record = &run["record"];
    keys[0].verify(record, &signature_of(run)).unwrap();
    assert_eq!(record["submission_id"], sid);
    assert_eq!(record["artifact_sha256"], v["artifact"]["sha256"]);
    assert_eq!(record["manifest"], serde_json::to_value(manifest(p)).unwrap());
    assert_eq!(record["timings"]["server"]["median_us"], 14.0, "every mode as stored");
    assert_eq!(record["checks"], run["details"]["checks"]);
    assert_eq!(record["device"]["name"], "NVIDIA H100 80GB HBM3");
    db.cleanup().await;
}

both_backends!(kernel_answers_carry_a_record_the_well_known_key_verifies, submission_runs_carry_signed_records);

/// Runs the `kaas` binary; returns (success, stdout + stderr).
fn kaas(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kaas")).args(args).env_remove("KAAS_PUBLIC_KEY").output().expect("run kaas");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[actix_web::test]
async fn kaas_verify_passes_on_a_pulled_kernel_and_fails_once_it_is_changed() {
    let f = fixture();
    let (index, ptx) = fixture_index(&f);
    let port = crate::ui::serve(index, ptx);
    let url = format!("http://127.0.0.1:{port}");
    let keys: serde_json::Value = ureq::get(&format!("{url}/.well-known/kaas-signing-keys")).call().unwrap().body_mut().read_json().unwrap();
    let public = keys["keys"][0]["public_key"].as_str().unwrap().to_string();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("k");
    let out_s = out.to_str().unwrap();
    let (ok, log) = kaas(&["pull", "--url", &url, "--problem", "4096x4096x4096", "--acc", "f32", "--layout", "tn", "-o", out_s]);
    assert!(ok, "{log}");
    assert!(out.join("record.json").is_file(), "{log}");

    // Untouched: passes with the key pinned (as text or in a file), or fetched with --url.
    let (ok, log) = kaas(&["verify", out_s, "--public-key", &public]);
    assert!(ok && log.contains("ok   signature"), "{log}");
    let key_file = dir.path().join("keys.json");
    std::fs::write(&key_file, keys.to_string()).unwrap();
    assert!(kaas(&["verify", out_s, "--public-key", key_file.to_str().unwrap()]).0);
    assert!(kaas(&["verify", out_s, "--url", &url]).0);
    // No key at all, or another key: refused.
    let (ok, log) = kaas(&["verify", out_s]);
    assert!(!ok && log.contains("--public-key"), "{log}");
    let (ok, log) = kaas(&["verify", out_s, "--public-key", &KeyPair::generate().public().to_base64()]);
    assert!(!ok && log.contains("FAIL signature") && log.contains("signed by key"), "{log}");

    // Each file changed in turn fails, naming it.
    let tamper = |file: &str, edit: &dyn Fn(String) -> String, fails: &str| {
        let path = out.join(file);
        let original = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, edit(original.clone())).unwrap();
        let (ok, log) = kaas(&["verify", out_s, "--public-key", &public]);
        assert!(!ok, "{file} changed and still verified: {log}");
        assert!(log.contains(&format!("FAIL {fails}")), "{file}: {log}");
        std::fs::write(&path, original).unwrap();
    };
    tamper("kernel.ptx", &|s| s.replacen("ret;", "ret; ", 1), "kernel.ptx");
    tamper(
        "manifest.json",
        &|s| {
            let mut m: serde_json::Value = serde_json::from_str(&s).unwrap();
            m["launches"][0]["grid"][0] = 33.into();
            serde_json::to_string_pretty(&m).unwrap()
        },
        "manifest.json",
    );
    tamper("record.json", &|s| s.replacen("900.0", "800.0", 1), "signature");
    assert!(kaas(&["verify", out_s, "--public-key", &public]).0, "restored: passes again");
}
