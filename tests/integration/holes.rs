//! Issue 38, item 7: the smaller holes, each as it was found and as it must be now.

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::problem::{Arch, Layout};

use crate::both_backends;
use crate::common::*;

fn authed(req: TestRequest, token: &str) -> TestRequest {
    req.insert_header(("Authorization", format!("Bearer {token}")))
}

async fn the_artifact_upload_keeps_the_per_artifact_quota(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let max = ApiSettings::default().quotas.max_artifact_bytes;
    // Under the 16 MiB body limit, over the 4 MiB artifact quota: was stored (201).
    let mut big = ptx("big");
    big.push_str(&"// padding\n".repeat((max - big.len()) / 11 + 1));
    assert!(big.len() > max && big.len() < ApiSettings::default().max_body_bytes);
    let r = call(&app, authed(TestRequest::post().uri("/v1/artifacts"), &t).set_payload(big.clone())).await;
    let j = r.assert_problem(413, "artifact_too_large");
    assert!(j["detail"].as_str().unwrap().contains(&max.to_string()), "{j}");
    assert_eq!(db.count("artifacts").await, 0, "nothing stored");
    // At the quota it is fine.
    let r = call(&app, authed(TestRequest::post().uri("/v1/artifacts"), &t).set_payload(ptx("small"))).await;
    assert_eq!(r.status, 201);
    db.cleanup().await;
}

/// Uploads and submissions of one submitter, together, within the storage quota: an
/// artifact already stored is free, another submitter and admins are not charged.
async fn what_a_submitter_stores_is_limited_in_all(backend: Backend) {
    let db = TestDb::new(backend).await;
    let one = ptx("quota-1").len() as u64;
    let mut settings = ApiSettings::default();
    settings.quotas.max_stored_bytes = 2 * one + one / 2;
    let app = test::init_service(create_app(state(&db, settings))).await;
    let alice = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let bob = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap().secret;
    let admin = auth::create_token(&db.db, "ops", Role::Admin).await.unwrap().secret;
    let upload = |token: &str, text: String| authed(TestRequest::post().uri("/v1/artifacts"), token).set_payload(text);
    assert_eq!(call(&app, upload(&alice, ptx("quota-1"))).await.status, 201);
    // A submission's PTX counts against the same quota.
    let body = serde_json::json!({"ptx": ptx("quota-2"), "manifests": [manifest(problem(256, 256, 256, Layout::Tn))], "name": "second"});
    assert_eq!(call(&app, authed(TestRequest::post().uri("/v1/submissions"), &alice).set_json(body)).await.status, 202);
    // The third is over: refused, naming the limit, storing nothing.
    let before = db.count("artifacts").await;
    let j = call(&app, upload(&alice, ptx("quota-3"))).await.assert_problem(429, "quota_exceeded");
    assert!(j["detail"].as_str().unwrap().contains(&(2 * one + one / 2).to_string()), "{j}");
    let body = serde_json::json!({"ptx": ptx("quota-3"), "manifests": [manifest(problem(256, 256, 256, Layout::Tn))], "name": "third"});
    call(&app, authed(TestRequest::post().uri("/v1/submissions"), &alice).set_json(body)).await.assert_problem(429, "quota_exceeded");
    assert_eq!(db.count("artifacts").await, before);
    // What is stored already costs nothing, whoever stored it.
    assert_eq!(call(&app, upload(&alice, ptx("quota-1"))).await.status, 200);
    // Bob and the admin have their own account.
    assert_eq!(call(&app, upload(&bob, ptx("quota-3"))).await.status, 201);
    assert_eq!(call(&app, upload(&alice, ptx("quota-3"))).await.status, 200, "stored by bob: free for alice");
    for i in 0..4 {
        assert_eq!(call(&app, upload(&admin, ptx(&format!("admin-{i}")))).await.status, 201);
    }
    db.cleanup().await;
}

both_backends!(the_artifact_upload_keeps_the_per_artifact_quota, what_a_submitter_stores_is_limited_in_all);

#[actix_web::test]
async fn requests_are_checked_as_the_issue_asks() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;

    // A cluster launch for Ampere (no clusters) is refused at submission, naming both.
    for arch in [Arch::Sm80, Arch::Sm86] {
        let mut m = manifest(problem(256, 256, 256, Layout::Tn));
        m.problem.arch = arch;
        m.launches[0].cluster = [2, 1, 1];
        let body = serde_json::json!({"ptx": ptx("ampere"), "manifests": [m], "name": "clustered"});
        let r = call(&app, authed(TestRequest::post().uri("/v1/submissions"), &t).set_json(body)).await;
        let j = r.assert_problem(422, "invalid_manifest");
        let detail = j["detail"].as_str().unwrap();
        assert!(detail.contains("cluster") && detail.contains(arch.as_str()), "{detail}");
    }
    assert_eq!(db.count("submissions").await, 0);

    // A type error names its field, not only a column.
    let mut m = serde_json::to_value(manifest(problem(256, 256, 256, Layout::Tn))).unwrap();
    m["launches"][0]["grid"][1] = "two".into();
    let body = serde_json::json!({"ptx": ptx("typed"), "manifests": [manifest(problem(128, 128, 128, Layout::Tn)), m], "name": "typed"});
    let r = call(&app, authed(TestRequest::post().uri("/v1/submissions"), &t).set_json(body)).await;
    let j = r.assert_problem(400, "invalid_body");
    assert!(j["detail"].as_str().unwrap().contains("manifests[1].launches[0].grid[1]"), "{j}");
    // An integer written as a float (`128.0`) is an integer to JSON Schema and to us; a
    // fraction is not, and is named.
    let mut m = serde_json::to_value(manifest(problem(128, 128, 128, Layout::Tn))).unwrap();
    m["problem"]["k"] = serde_json::json!(128.0);
    m["launches"][0]["grid"][0] = serde_json::json!(2.0);
    let body = serde_json::json!({"ptx": ptx("floats"), "manifests": [m.clone()], "name": "floats"});
    let r = call(&app, authed(TestRequest::post().uri("/v1/submissions"), &t).set_json(body)).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    m["problem"]["k"] = serde_json::json!(128.5);
    let body = serde_json::json!({"ptx": ptx("fraction"), "manifests": [m], "name": "fraction"});
    let r = call(&app, authed(TestRequest::post().uri("/v1/submissions"), &t).set_json(body)).await;
    let j = r.assert_problem(400, "invalid_body");
    assert!(j["detail"].as_str().unwrap().contains("manifests[0].problem.k"), "{j}");

    // The scheme of `Authorization` is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let r = call(&app, TestRequest::get().uri("/v1/whoami").insert_header(("Authorization", format!("{scheme} {t}")))).await;
        assert_eq!(r.status, 200, "{scheme}: {}", String::from_utf8_lossy(&r.body));
    }
    let r = call(&app, TestRequest::get().uri("/v1/whoami").insert_header(("Authorization", format!("Basic {t}")))).await;
    r.assert_problem(401, "invalid_token");

    // `limit` is bounded as the document says, not clamped.
    for bad in ["9223372036854775808", "0", "501", "18446744073709551616"] {
        get(&app, &format!("/v1/submissions?limit={bad}")).await.assert_problem(400, "invalid_query");
    }
    assert_eq!(get(&app, "/v1/submissions?limit=500").await.status, 200);

    // A 405 says what the resource answers.
    for (req, allow) in [
        (TestRequest::delete().uri("/v1/leaderboard"), "GET"),
        (TestRequest::put().uri("/v1/submissions/1"), "GET, DELETE"),
        (TestRequest::patch().uri("/v1/artifacts"), "POST"),
    ] {
        let r = call(&app, req).await;
        r.assert_problem(405, "method_not_allowed");
        assert_eq!(r.header("allow").as_deref(), Some(allow));
    }
    db.cleanup().await;
}

/// Every constraint the server enforces on a parameter is in the document: what it
/// refuses, the document refuses too (was: `device`, `id`, `limit`, the problem's path
/// segments documented as any string or integer).
#[actix_web::test]
async fn the_document_states_the_parameters_constraints() {
    let doc: serde_json::Value = serde_json::from_str(&kaas::api::openapi::document_text()).unwrap();
    let param = |path: &str, method: &str, name: &str| -> serde_json::Value {
        let params = doc["paths"][path][method]["parameters"].as_array().unwrap_or_else(|| panic!("{method} {path} has no parameters"));
        params.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{method} {path}: no parameter {name}"))["schema"].clone()
    };
    let limit = param("/v1/submissions", "get", "limit");
    assert_eq!((limit["minimum"].as_u64(), limit["maximum"].as_u64()), (Some(1), Some(500)), "{limit}");
    assert_eq!(param("/v1/submissions/{id}", "get", "id")["minimum"].as_u64(), Some(1));
    assert!(param("/v1/problems", "get", "device")["pattern"].is_string());
    assert!(doc["components"]["schemas"]["NewTuningRequest"]["properties"]["device"]["pattern"].is_string(), "the body's device too");
    // A shape's pattern takes 65536 and refuses 65537, as the server does.
    let shape = param("/v1/kernels/{arch}/{acc}/{layout}/{shape}", "get", "shape")["pattern"].as_str().unwrap().to_string();
    assert!(shape.contains("6553[0-6]") && !shape.contains("[0-9]{0,4}"), "{shape}");
    // M, N and K are bounded as the server bounds them, in a problem of a body too.
    let m = &doc["components"]["schemas"]["Problem"]["properties"]["m"];
    assert_eq!((m["minimum"].as_u64(), m["maximum"].as_u64()), (Some(1), Some(u64::from(kaas::problem::MAX_DIM))), "{m}");
    assert_eq!(doc["components"]["schemas"]["PtxText"]["minLength"], 1, "an empty upload is not PTX");
    let k = param("/v1/heatmap", "get", "k");
    assert_eq!((k["minimum"].as_u64(), k["maximum"].as_u64()), (Some(1), Some(u64::from(kaas::problem::MAX_DIM))), "{k}");
    for seg in ["arch", "acc", "layout", "shape"] {
        assert!(param("/v1/kernels/{arch}/{acc}/{layout}/{shape}", "get", seg)["pattern"].is_string(), "{seg}");
    }
    // The arch pattern lists every arch the server knows.
    let arch = param("/v1/kernels/{arch}/{acc}/{layout}/{shape}", "get", "arch")["pattern"].as_str().unwrap().to_string();
    for a in Arch::ALL {
        assert!(arch.contains(&a.as_str()["sm_".len()..]), "{arch} leaves out {a}");
    }
}
