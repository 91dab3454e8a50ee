//! The read and write API through the real `create_app`, on both backends.

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};

use crate::both_backends;
use crate::common::*;

async fn health_answers_with_the_database(backend: Backend) {
    let (db, st, ..) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let r = get(&app, "/v1/health").await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["status"], "ok");
    assert_eq!(j["database"]["reachable"], true);
    assert_eq!(j["database"]["backend"], match backend { Backend::Sqlite => "sqlite", Backend::Postgres => "postgres" });
    assert_eq!(j["workers_seen"], 0);
    db.cleanup().await;
}

async fn problems_list_their_best_kernels_and_filter(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let all = get(&app, "/v1/problems").await.json();
    assert_eq!(all.as_array().unwrap().len(), 4);
    let fast = all.as_array().unwrap().iter().find(|p| p["path"] == f.fast.path()).unwrap();
    assert_eq!(fast["best"][0]["device_class"], DEVICE);
    assert_eq!(fast["best"][0]["beats_baselines"], true);
    assert_eq!(fast["best"][0]["median_us"], 900.0);
    let bare = all.as_array().unwrap().iter().find(|p| p["path"] == f.bare.path()).unwrap();
    assert!(bare["best"].as_array().unwrap().is_empty());

    let tn = get(&app, "/v1/problems?layout=tn").await.json();
    assert_eq!(tn.as_array().unwrap().len(), 2);
    assert_eq!(get(&app, "/v1/problems?arch=sm_80").await.json().as_array().unwrap().len(), 0);
    let on_device = get(&app, &format!("/v1/problems?device={DEVICE}")).await.json();
    assert_eq!(on_device.as_array().unwrap().len(), 3, "the baseline-only problem has no kernel on the device");
    // A device class nobody registered is a fault in the request, not an empty catalog.
    get(&app, "/v1/problems?device=B200").await.assert_problem(400, "unknown_device");

    // The same answer gzip-compressed for clients that take it.
    let z = call(&app, TestRequest::get().uri("/v1/problems").insert_header(("Accept-Encoding", "gzip, deflate"))).await;
    assert_eq!(z.header("content-encoding").as_deref(), Some("gzip"));
    assert_eq!(z.header("vary").as_deref(), Some("Accept-Encoding"));
    let unzipped: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(z.body.as_ref())).unwrap();
    assert_eq!(unzipped, all);

    get(&app, "/v1/problems?arch=sm_70").await.assert_problem(400, "invalid_query");
    get(&app, "/v1/problems?acc=f64").await.assert_problem(400, "invalid_query");
    get(&app, "/v1/problems?device=%3Cscript%3E").await.assert_problem(400, "invalid_query");
    db.cleanup().await;
}

async fn the_best_kernel_comes_with_manifest_timings_and_baselines(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let r = get(&app, &format!("/v1/kernels/{}", f.fast.path())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let k = r.json();
    assert_eq!(k["manifest"]["abi"], "kaas.hgemm.v1");
    assert_eq!(k["manifest"]["problem"]["m"], 4096);
    assert_eq!(k["device_class"], DEVICE);
    assert_eq!(k["submitter"], "kaas-tuner");
    assert_eq!(k["benchmarked"], true);
    assert_eq!(k["run"]["timings"]["graph"]["median_us"], 900.0);
    let sha = k["artifact"]["sha256"].as_str().unwrap().to_string();
    assert_eq!(k["artifact"]["url"], format!("/v1/artifacts/{sha}"));
    let beats: Vec<&str> = k["beats"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(beats.contains(&"cublaslt_autotune_max"), "{beats:?}");
    assert_eq!(k["baselines"].as_array().unwrap().len(), 2);
    // The same with the device named; a device class not known here is an error, not
    // "no kernel yet" (tests/integration/devices.rs has the rest).
    assert_eq!(get(&app, &format!("/v1/kernels/{}?device={DEVICE}", f.fast.path())).await.status, 200);
    get(&app, &format!("/v1/kernels/{}?device=B200", f.fast.path())).await.assert_problem(400, "unknown_device");

    // Verified but not benchmarked: served, and it says so.
    let u = get(&app, &format!("/v1/kernels/{}", f.unbenchmarked.path())).await;
    assert_eq!(u.status, 200);
    assert_eq!(u.json()["benchmarked"], false);
    assert_eq!(u.json()["run"]["timings"], serde_json::Value::Null);
    db.cleanup().await;
}

/// A kernel that wins back to back (graph) but not paced (timed for large
/// problems) is not served: the baseline is named instead. One that wins both is served,
/// with the lower of its two speedups as its figure.
async fn a_kernel_must_win_paced_as_well_as_back_to_back(backend: Backend) {
    for (paced, served) in [(0.95, false), (1.03, true)] {
        let db = TestDb::new(backend).await;
        let f = fixture();
        let (mut index, ptx) = fixture_index(&f);
        let e = index.entries.iter_mut().find(|e| e.problem == f.fast).unwrap();
        e.run.speedups.as_mut().unwrap()["paced"] = serde_json::json!({"cublas_max": paced, "cublaslt_autotune_max": paced});
        // The paced baselines travel in the bundle beside the graph ones.
        index.baselines.push(kaas::catalog::bundle::BaselineRecord { mode: "paced".into(), ..baseline(f.fast, "cublaslt_autotune", 1000.0) });
        index.baselines.sort_by(|a, b| (a.problem, &a.library, &a.mode).cmp(&(b.problem, &b.library, &b.mode)));
        let dir = tempfile::tempdir().unwrap();
        kaas::catalog::bundle::write_bundle(dir.path(), &index, &ptx).unwrap();
        kaas::catalog::seed::seed(&db.db, dir.path()).await.unwrap();
        let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
        let r = get(&app, &format!("/v1/kernels/{}", f.fast.path())).await;
        if served {
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            assert_eq!(r.json()["run"]["speedups"]["paced"]["cublaslt_autotune_max"], paced, "stored as measured");
            let listed = get(&app, "/v1/problems").await.json();
            let row = listed.as_array().unwrap().iter().find(|p| p["path"] == f.fast.path()).unwrap();
            assert_eq!(row["best"][0]["speedups"]["cublaslt_autotune_max"], paced, "ranked by the lower: {row}");
            assert_eq!(row["best"][0]["speedups"]["cublaslt_heuristic_max"], 1.08, "no paced figure: graph's");
        } else {
            let j = r.assert_problem(404, "baseline_faster");
            assert_eq!(j["use_instead"]["library"], "cublaslt_autotune");
        }
        db.cleanup().await;
    }
}

async fn a_faster_baseline_is_named_instead_of_a_slower_kernel(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let j = get(&app, &format!("/v1/kernels/{}", f.slow.path())).await.assert_problem(404, "baseline_faster");
    assert_eq!(j["use_instead"]["library"], "cublaslt_autotune");
    assert_eq!(j["use_instead"]["config"]["algo"], 7);
    assert!(j["detail"].as_str().unwrap().contains("cublaslt_autotune"));
    get(&app, &format!("/v1/kernels/{}/ptx", f.slow.path())).await.assert_problem(404, "baseline_faster");

    let j = get(&app, &format!("/v1/kernels/{}", f.bare.path())).await.assert_problem(404, "kernel_not_found");
    assert_eq!(j["use_instead"]["library"], "cublaslt_heuristic");
    let none = get(&app, "/v1/kernels/sm_90/f16/nn/77x77x77").await.assert_problem(404, "kernel_not_found");
    assert!(none.get("use_instead").is_none());
    db.cleanup().await;
}

async fn ptx_downloads_carry_strong_etags_and_answer_304(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let r = get(&app, &format!("/v1/kernels/{}/ptx", f.fast.path())).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.as_ref(), f.ptx_fast.as_bytes());
    let sha = kaas::signing::sha256_hex(f.ptx_fast.as_bytes());
    assert_eq!(r.header("etag"), Some(format!("\"{sha}\"")));
    assert!(!r.header("cache-control").unwrap().contains("immutable"), "the best kernel can change");

    let a = get(&app, &format!("/v1/artifacts/{sha}")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body.as_ref(), f.ptx_fast.as_bytes());
    assert_eq!(a.header("cache-control").as_deref(), Some("public, max-age=31536000, immutable"));
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));

    for etag in [format!("\"{sha}\""), format!("W/\"{sha}\""), format!("\"other\", \"{sha}\""), "*".to_string()] {
        let r = call(&app, TestRequest::get().uri(&format!("/v1/artifacts/{sha}")).insert_header(("If-None-Match", etag.as_str()))).await;
        assert_eq!(r.status, 304, "If-None-Match: {etag}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("etag"), Some(format!("\"{sha}\"")));
    }
    let miss = call(&app, TestRequest::get().uri(&format!("/v1/artifacts/{sha}")).insert_header(("If-None-Match", "\"nope\""))).await;
    assert_eq!(miss.status, 200);
    let r = call(&app, TestRequest::get().uri(&format!("/v1/kernels/{}/ptx", f.fast.path())).insert_header(("If-None-Match", format!("\"{sha}\"")))).await;
    assert_eq!(r.status, 304);

    // Clients that take gzip get the same PTX compressed, under its own strong ETag.
    for accept in ["gzip", "br, gzip;q=0.8", "*"] {
        let z = call(&app, TestRequest::get().uri(&format!("/v1/artifacts/{sha}")).insert_header(("Accept-Encoding", accept))).await;
        assert_eq!(z.status, 200);
        assert_eq!(z.header("content-encoding").as_deref(), Some("gzip"), "Accept-Encoding: {accept}");
        assert_eq!(z.header("etag"), Some(format!("\"{sha}-gzip\"")));
        assert_eq!(z.header("vary").as_deref(), Some("Accept-Encoding"));
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(z.body.as_ref()), &mut text).unwrap();
        assert_eq!(text, f.ptx_fast);
    }
    for refuse in ["gzip;q=0", "identity", "br"] {
        let r = call(&app, TestRequest::get().uri(&format!("/v1/artifacts/{sha}")).insert_header(("Accept-Encoding", refuse))).await;
        assert_eq!(r.header("content-encoding"), None, "Accept-Encoding: {refuse}");
        assert_eq!(r.body.as_ref(), f.ptx_fast.as_bytes());
    }
    let z304 = call(&app, TestRequest::get().uri(&format!("/v1/artifacts/{sha}")).insert_header(("Accept-Encoding", "gzip")).insert_header(("If-None-Match", format!("\"{sha}-gzip\"")))).await;
    assert_eq!(z304.status, 304);

    get(&app, &format!("/v1/artifacts/{}", "0".repeat(64))).await.assert_problem(404, "not_found");
    get(&app, "/v1/artifacts/xyz").await.assert_problem(400, "invalid_path");
    get(&app, &format!("/v1/artifacts/{}", "A".repeat(64))).await.assert_problem(400, "invalid_path");
    db.cleanup().await;
}

async fn malformed_paths_get_clear_400s(backend: Backend) {
    let (db, st, ..) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    for (path, needle) in [
        ("/v1/kernels/sm_90/f32/tn/0x1x1", "M = `0`"),
        ("/v1/kernels/sm_90/f32/tn/1x1", "MxNxK"),
        ("/v1/kernels/sm_90/f32/tn/99999999x1x1", "M = `99999999`"),
        ("/v1/kernels/sm_90/f32/tn/axbxc", "M = `a`"),
        ("/v1/kernels/sm_90/f32/tn/64x64x-1", "K = `-1`"),
        ("/v1/kernels/sm_90/f32/tn/65537x1x1", "65536"),
        ("/v1/kernels/sm_70/f32/tn/64x64x64", "unknown arch `sm_70`"),
        ("/v1/kernels/sm_90/f64/tn/64x64x64", "unknown accumulator `f64`"),
        ("/v1/kernels/sm_90/f32/tt/64x64x64", "unknown layout `tt`"),
        ("/v1/kernels/sm_90/f32/tn/0x1x1/ptx", "M = `0`"),
        ("/v1/leaderboard/sm_90/f32/tn/1x1", "MxNxK"),
    ] {
        let j = get(&app, path).await.assert_problem(400, "invalid_path");
        assert!(j["detail"].as_str().unwrap().contains(needle), "{path}: {j}");
    }
    get(&app, "/v1/nothing/here").await.assert_problem(404, "not_found");
    call(&app, TestRequest::delete().uri("/v1/problems")).await.assert_problem(405, "method_not_allowed");
    db.cleanup().await;
}

fn ptx_upload(token: Option<&str>, body: impl Into<actix_web::web::Bytes>) -> TestRequest {
    let mut req = TestRequest::post().uri("/v1/artifacts").insert_header(("content-type", "text/plain")).set_payload(body.into());
    if let Some(t) = token {
        req = req.insert_header(("Authorization", format!("Bearer {t}")));
    }
    req
}

async fn writes_need_a_valid_token_and_write_nothing_when_refused(backend: Backend) {
    let settings = ApiSettings { max_body_bytes: 4096, ..Default::default() };
    let (db, st, ..) = loaded(backend, settings).await;
    let app = test::init_service(create_app(st.clone())).await;
    let before = db.count("artifacts").await;
    let ptx = ptx("upload");

    call(&app, ptx_upload(None, ptx.clone())).await.assert_problem(401, "missing_token");
    call(&app, ptx_upload(Some("kaas_0000"), ptx.clone())).await.assert_problem(401, "invalid_token");
    let basic = call(&app, TestRequest::post().uri("/v1/artifacts").insert_header(("Authorization", "Basic Zm9vOmJhcg==")).set_payload(ptx.clone())).await;
    basic.assert_problem(401, "invalid_token");
    let revoked = auth::create_token(&db.db, "mallory", Role::Submitter).await.unwrap();
    auth::revoke_token(&db.db, &revoked.prefix).await.unwrap();
    call(&app, ptx_upload(Some(&revoked.secret), ptx.clone())).await.assert_problem(401, "revoked_token");

    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap();
    call(&app, ptx_upload(Some(&t.secret), vec![0xffu8, 0xfe, 0x00])).await.assert_problem(422, "invalid_artifact");
    call(&app, ptx_upload(Some(&t.secret), "hello, world")).await.assert_problem(422, "invalid_artifact");
    call(&app, ptx_upload(Some(&t.secret), vec![b'/'; 5000])).await.assert_problem(413, "payload_too_large");
    assert_eq!(db.count("artifacts").await, before, "refused uploads must write nothing");

    let ok = call(&app, ptx_upload(Some(&t.secret), ptx.clone())).await;
    assert_eq!(ok.status, 201, "{}", String::from_utf8_lossy(&ok.body));
    let sha = ok.json()["sha256"].as_str().unwrap().to_string();
    assert_eq!(sha, kaas::signing::sha256_hex(ptx.as_bytes()));
    assert_eq!(call(&app, ptx_upload(Some(&t.secret), ptx.clone())).await.status, 200, "the same PTX again is already there");
    assert_eq!(db.count("artifacts").await, before + 1);
    assert_eq!(get(&app, &format!("/v1/artifacts/{sha}")).await.body.as_ref(), ptx.as_bytes());

    let who = call(&app, TestRequest::get().uri("/v1/whoami").insert_header(("Authorization", format!("Bearer {}", t.secret)))).await;
    assert_eq!(who.json()["submitter"], "alice");
    assert_eq!(who.json()["role"], "submitter");
    db.cleanup().await;
}

async fn a_token_over_its_rate_gets_429_with_retry_after(backend: Backend) {
    let settings = ApiSettings { rate_limit_per_minute: 1, rate_limit_burst: 2, ..Default::default() };
    let (db, st, ..) = loaded(backend, settings).await;
    let app = test::init_service(create_app(st.clone())).await;
    let a = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap();
    let b = auth::create_token(&db.db, "bob", Role::Submitter).await.unwrap();
    let whoami = |t: &str| TestRequest::get().uri("/v1/whoami").insert_header(("Authorization", format!("Bearer {t}")));
    assert_eq!(call(&app, whoami(&a.secret)).await.status, 200);
    assert_eq!(call(&app, whoami(&a.secret)).await.status, 200);
    let limited = call(&app, whoami(&a.secret)).await;
    limited.assert_problem(429, "rate_limited");
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(call(&app, whoami(&b.secret)).await.status, 200, "limits are per token");
    db.cleanup().await;
}

async fn catalog_answers_are_cached_until_the_catalog_changes(backend: Backend) {
    let (db, st, ..) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    assert_eq!(get(&app, "/v1/problems").await.json().as_array().unwrap().len(), 4);
    assert_eq!(get(&app, "/v1/problems").await.json().as_array().unwrap().len(), 4);
    let hits = st.metrics.cache_requests.with_label_values(&["catalog", "hit"]).get();
    assert!(hits >= 1, "the second answer came from the cache");

    // A second bundle lands behind the cache's back: the cached answer stays...
    let extra = tempfile::tempdir().unwrap();
    let p = problem(8192, 8192, 8192, kaas::problem::Layout::Tn);
    let (mut index, ptx) = fixture_index(&fixture());
    index.problems = vec![p];
    index.entries.clear();
    index.baselines = vec![baseline(p, "cublas", 7000.0)];
    kaas::catalog::bundle::write_bundle(extra.path(), &index, &ptx).unwrap();
    kaas::catalog::bundle::import(&db.db, extra.path()).await.unwrap();
    assert_eq!(get(&app, "/v1/problems").await.json().as_array().unwrap().len(), 4);
    // ...until the catalog-change hook runs, as every catalog write path does.
    st.caches.catalog_changed();
    assert_eq!(get(&app, "/v1/problems").await.json().as_array().unwrap().len(), 5);
    // And AppState::import does both.
    let third = tempfile::tempdir().unwrap();
    let q = problem(12288, 12288, 12288, kaas::problem::Layout::Tn);
    index.problems = vec![q];
    index.baselines = vec![baseline(q, "cublas", 9000.0)];
    kaas::catalog::bundle::write_bundle(third.path(), &index, &ptx).unwrap();
    st.import_bundle(third.path()).await.unwrap();
    assert_eq!(get(&app, "/v1/problems").await.json().as_array().unwrap().len(), 6);
    db.cleanup().await;
}

async fn metrics_count_requests_cache_and_pool(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    get(&app, &format!("/v1/kernels/{}", f.fast.path())).await;
    get(&app, &format!("/v1/kernels/{}", f.fast.path())).await;
    get(&app, "/v1/kernels/sm_90/f32/tn/0x0x0").await;
    let text = String::from_utf8(get(&app, "/metrics").await.body.to_vec()).unwrap();
    assert!(text.contains(r#"kaas_http_requests_total{method="GET",route="/v1/kernels/{arch}/{acc}/{layout}/{shape}",status="200"} 2"#), "{text}");
    assert!(text.contains(r#"route="/v1/kernels/{arch}/{acc}/{layout}/{shape}",status="400"} 1"#));
    assert!(text.contains("kaas_http_request_duration_seconds_bucket"));
    assert!(text.contains(r#"kaas_cache_requests_total{cache="catalog",result="hit"} 1"#));
    assert!(text.contains(r#"kaas_cache_requests_total{cache="catalog",result="miss"} 1"#));
    assert!(text.contains(r#"kaas_db_pool_connections{state="idle"}"#));
    db.cleanup().await;
}

async fn leaderboards_rank_submitters(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;
    let lb = get(&app, &format!("/v1/leaderboard/{}", f.fast.path())).await.json();
    assert_eq!(lb["rows"][0]["submitter"], "kaas-tuner");
    assert_eq!(lb["rows"][0]["rank"], 1);
    assert_eq!(lb["rows"][0]["speedup_vs_autotune_max"], 1.08);
    let g = get(&app, "/v1/leaderboard").await.json();
    let rows = g["submitters"].as_array().unwrap();
    assert_eq!(rows[0]["submitter"], "kaas-tuner");
    assert_eq!(rows[0]["problems_held"], 2);
    assert_eq!(rows[1]["submitter"], "alice");
    assert_eq!(rows[1]["problems_held"], 1);
    assert!((rows[1]["geomean_speedup_vs_autotune_max"].as_f64().unwrap() - 0.8).abs() < 1e-12);
    assert_eq!(get(&app, "/v1/leaderboard/sm_90/f32/tn/3x3x3").await.json()["rows"].as_array().unwrap().len(), 0);
    db.cleanup().await;
}

both_backends!(
    health_answers_with_the_database,
    problems_list_their_best_kernels_and_filter,
    the_best_kernel_comes_with_manifest_timings_and_baselines,
    a_faster_baseline_is_named_instead_of_a_slower_kernel,
    a_kernel_must_win_paced_as_well_as_back_to_back,
    ptx_downloads_carry_strong_etags_and_answer_304,
    malformed_paths_get_clear_400s,
    writes_need_a_valid_token_and_write_nothing_when_refused,
    a_token_over_its_rate_gets_429_with_retry_after,
    catalog_answers_are_cached_until_the_catalog_changes,
    metrics_count_requests_cache_and_pool,
    leaderboards_rank_submitters,
);

#[actix_web::test]
async fn the_committed_openapi_document_is_what_is_served() {
    let db = TestDb::new(Backend::Sqlite).await;
    let st = state(&db, ApiSettings::default());
    let app = test::init_service(create_app(st.clone())).await;
    let served = get(&app, "/openapi.json").await.json();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json")).expect("openapi/openapi.json is committed"),
    )
    .unwrap();
    assert_eq!(served, committed, "openapi/openapi.json drifted: run `cargo run -- openapi --write openapi/openapi.json`");
    assert_eq!(kaas::api::openapi::document_text(), std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json")).unwrap());
    let docs = get(&app, "/docs/").await;
    assert_eq!(docs.status, 200);
    assert!(String::from_utf8_lossy(&docs.body).contains("swagger"));
    // The bare path people type goes to the same page.
    let bare = get(&app, "/docs").await;
    assert_eq!(bare.status, 308, "{}", String::from_utf8_lossy(&bare.body));
    assert_eq!(bare.headers.get("location").and_then(|v| v.to_str().ok()), Some("/docs/"));
}
