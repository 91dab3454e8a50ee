//! Device classes as users name them, and H100 kernels offered to H200 clients: through
//! the real app, on both backends. The fixture catalog (H100-SXM entries and baselines)
//! plus an H200 bundle of baselines only, as the shipped `kernels/baselines-h200` is.

use actix_web::test;
use kaas::api::{ApiSettings, create_app};
use kaas::catalog::bundle::{self, BaselineRecord, DeviceClassRecord, Index};
use serde_json::Value;

use crate::both_backends;
use crate::common::*;

const H200: &str = "H200";

/// An H200 baseline (graph mode) for `p`.
fn h200_baseline(p: kaas::problem::Problem, library: &str, median_us: f64) -> BaselineRecord {
    BaselineRecord { device_class: H200.into(), ..baseline(p, library, median_us) }
}

/// Imports H200 baselines: `fast` at `fast_us` (the H100 kernel took 900 µs there),
/// `slow` and `bare` well apart from H100's.
async fn with_h200_baselines(db: &TestDb, f: &Fixture, fast_us: f64) {
    let mut problems = vec![f.fast, f.slow, f.bare];
    problems.sort();
    let mut baselines = vec![h200_baseline(f.fast, "cublaslt_autotune", fast_us), h200_baseline(f.slow, "cublas", 6.5), h200_baseline(f.bare, "cublas", 4.0)];
    baselines.sort_by(|a, b| (a.problem, &a.library).cmp(&(b.problem, &b.library)));
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord { name: H200.into(), model: "NVIDIA H200".into(), compute_capability: "9.0".into(), sm_count: Some(132) }],
        problems,
        artifacts: vec![],
        entries: vec![],
        baselines,
        tunes: vec![],
    };
    let dir = tempfile::tempdir().unwrap();
    bundle::write_bundle(dir.path(), &index, &Default::default()).unwrap();
    bundle::import(&db.db, dir.path()).await.unwrap();
}

fn names(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

async fn device_spellings_resolve_in_every_route(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    with_h200_baselines(&db, &f, 950.0).await;
    let app = test::init_service(create_app(st.clone())).await;
    let kernel = format!("/v1/kernels/{}", f.fast.path());
    for spelling in ["H100", "h100", "H100-SXM", "h100-sxm", "H100%20SXM", "H100_SXM5", "NVIDIA%20H100%2080GB%20HBM3", "NVIDIA+H100+80GB+HBM3"] {
        let r = get(&app, &format!("{kernel}?device={spelling}")).await;
        assert_eq!(r.status, 200, "{spelling}: {}", String::from_utf8_lossy(&r.body));
        let k = r.json();
        assert_eq!(k["device_class"], DEVICE, "{spelling}");
        assert_eq!(k["measured_on"], DEVICE, "{spelling}");
        assert!(k.get("fallback").is_none(), "{spelling}: {k}");
        let ptx = get(&app, &format!("{kernel}/ptx?device={spelling}")).await;
        assert_eq!(ptx.status, 200, "{spelling}");
        assert_eq!(String::from_utf8_lossy(&ptx.body), f.ptx_fast);
        let listed = get(&app, &format!("/v1/problems?device={spelling}")).await.json();
        assert_eq!(listed.as_array().unwrap().len(), 3, "{spelling}");
        let heat = get(&app, &format!("/v1/heatmap?device={spelling}&layout=tn&k=4096")).await.json();
        assert_eq!(heat["device_class"], DEVICE, "{spelling}");
        let board = get(&app, &format!("/v1/leaderboard/{}?device={spelling}", f.fast.path())).await;
        assert_eq!(board.status, 200, "{spelling}");
    }
    for spelling in ["H200", "h200", "H200-SXM", "H200%20SXM", "NVIDIA%20H200"] {
        let heat = get(&app, &format!("/v1/heatmap?device={spelling}&layout=tn&k=4096")).await.json();
        assert_eq!(heat["device_class"], H200, "{spelling}");
        // The H200 answers name H200 (here: a baseline-only problem, no stand-in kernel).
        let bare = get(&app, &format!("/v1/kernels/{}?device={spelling}", f.bare.path())).await.assert_problem(404, "kernel_not_found");
        assert_eq!(bare["device_class"], H200, "{spelling}");
        assert_eq!(bare["use_instead"]["median_us"], 4.0, "{spelling}");
    }
    db.cleanup().await;
}

async fn unknown_device_classes_are_a_client_error_listing_the_known(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    with_h200_baselines(&db, &f, 950.0).await;
    let app = test::init_service(create_app(st.clone())).await;
    let p = f.fast.path();
    for uri in [
        format!("/v1/kernels/{p}?device=A100"),
        format!("/v1/kernels/{p}/ptx?device=B200"),
        format!("/v1/kernels/{p}?device=H100-PCIe"),
        "/v1/problems?device=GeForce%20RTX%204090".to_string(),
        "/v1/heatmap?device=MI300X".to_string(),
        format!("/v1/leaderboard/{p}?device=H20"),
    ] {
        let e = get(&app, &uri).await.assert_problem(400, "unknown_device");
        assert_eq!(names(&e["known_device_classes"]), vec![DEVICE.to_string(), H200.to_string()], "{uri}");
        let detail = e["detail"].as_str().unwrap();
        assert!(detail.contains("H100-SXM, H200"), "{uri}: {detail}");
    }
    // Not a name at all is still a malformed query; so is an unknown fallback rule.
    get(&app, &format!("/v1/kernels/{p}?device=%3Cscript%3E")).await.assert_problem(400, "invalid_query");
    get(&app, &format!("/v1/kernels/{p}?device=H200&fallback=anything")).await.assert_problem(400, "invalid_query");
    db.cleanup().await;
}

async fn h200_gets_the_h100_kernel_labelled_and_no_speedup_claims(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    // H200's fastest baseline (950 µs) is slower than the kernel was on the H100 (900 µs).
    with_h200_baselines(&db, &f, 950.0).await;
    let app = test::init_service(create_app(st.clone())).await;
    let h100 = get(&app, &format!("/v1/kernels/{}?device=H100", f.fast.path())).await.json();
    let r = get(&app, &format!("/v1/kernels/{}?device=H200-SXM", f.fast.path())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let k = r.json();
    // The H100 entry, saying so wherever a device class is named.
    assert_eq!(k["artifact"], h100["artifact"]);
    assert_eq!(k["device_class"], DEVICE);
    assert_eq!(k["measured_on"], DEVICE);
    assert_eq!(k["run"]["device_class"], DEVICE);
    assert_eq!(k["record"]["device_class"], DEVICE);
    let fb = &k["fallback"];
    assert_eq!(fb["requested_device"], H200);
    assert_eq!(fb["measured_on"], DEVICE);
    let note = fb["note"].as_str().unwrap();
    assert!(note.contains("measured on H100-SXM") && note.contains("H200") && note.contains("sm_90"), "{note}");
    // No claim about H200: `beats` is empty, H100's list sits under a key naming the
    // measured device, and H200's own fastest baseline is shown as measured on H200.
    assert_eq!(k["beats"], serde_json::json!([]));
    assert_eq!(fb["beats_on_measured_device"], h100["beats"]);
    assert!(!h100["beats"].as_array().unwrap().is_empty());
    assert_eq!(fb["requested_device_baseline"]["median_us"], 950.0);
    // The PTX route follows the same rule.
    let ptx = get(&app, &format!("/v1/kernels/{}/ptx?device=H200", f.fast.path())).await;
    assert_eq!(ptx.status, 200);
    assert_eq!(String::from_utf8_lossy(&ptx.body), f.ptx_fast);

    // fallback=none: the old answer, H200's own (no kernel; its fastest baseline).
    for uri in [format!("/v1/kernels/{}?device=H200&fallback=none", f.fast.path()), format!("/v1/kernels/{}/ptx?device=H200&fallback=none", f.fast.path())] {
        let e = get(&app, &uri).await.assert_problem(404, "kernel_not_found");
        assert_eq!(e["device_class"], H200);
        assert_eq!(e["use_instead"]["median_us"], 950.0);
        assert!(e.get("fallback").is_none());
    }

    // A kernel that loses to H100's baselines is not offered: H200's own answer.
    let slow = get(&app, &format!("/v1/kernels/{}?device=H200", f.slow.path())).await.assert_problem(404, "kernel_not_found");
    assert_eq!(slow["device_class"], H200);
    assert_eq!(slow["use_instead"]["median_us"], 6.5);
    // The lists stay per device: nothing is measured on H200.
    assert_eq!(get(&app, "/v1/problems?device=H200").await.json(), serde_json::json!([]));
    db.cleanup().await;
}

async fn an_h200_baseline_faster_than_the_h100_kernel_wins(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    // H200's fastest baseline (850 µs) beat the kernel's H100 time (900 µs).
    with_h200_baselines(&db, &f, 850.0).await;
    let app = test::init_service(create_app(st.clone())).await;
    let e = get(&app, &format!("/v1/kernels/{}?device=H200", f.fast.path())).await.assert_problem(404, "baseline_faster");
    assert_eq!(e["device_class"], H200);
    assert_eq!(e["use_instead"]["median_us"], 850.0);
    assert_eq!(e["fallback"]["measured_on"], DEVICE);
    assert_eq!(e["fallback"]["requested_device"], H200);
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains("900.00 µs") && detail.contains("850.00 µs on H200") && detail.contains("use the baseline"), "{detail}");
    let ptx = get(&app, &format!("/v1/kernels/{}/ptx?device=H200", f.fast.path())).await;
    assert_eq!(ptx.status, 404);
    db.cleanup().await;
}

async fn a_bare_model_with_two_known_form_factors_is_ambiguous(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord { name: "H100-PCIe".into(), model: "NVIDIA H100 PCIe".into(), compute_capability: "9.0".into(), sm_count: Some(114) }],
        problems: vec![],
        artifacts: vec![],
        entries: vec![],
        baselines: vec![],
        tunes: vec![],
    };
    let dir = tempfile::tempdir().unwrap();
    bundle::write_bundle(dir.path(), &index, &Default::default()).unwrap();
    bundle::import(&db.db, dir.path()).await.unwrap();
    let app = test::init_service(create_app(st.clone())).await;
    let e = get(&app, &format!("/v1/kernels/{}?device=H100", f.fast.path())).await.assert_problem(400, "ambiguous_device");
    assert_eq!(names(&e["known_device_classes"]), vec!["H100-PCIe".to_string(), DEVICE.to_string()]);
    assert!(e["detail"].as_str().unwrap().contains("H100-PCIe, H100-SXM"), "{e}");
    // Named in full, each resolves; the PCIe class has no kernel of its own (and no stand-in).
    assert_eq!(get(&app, &format!("/v1/kernels/{}?device=H100%20SXM", f.fast.path())).await.status, 200);
    let pcie = get(&app, &format!("/v1/kernels/{}?device=NVIDIA%20H100%20PCIe", f.fast.path())).await.assert_problem(404, "kernel_not_found");
    assert!(pcie["detail"].as_str().unwrap().contains("on H100-PCIe"), "{pcie}");
    db.cleanup().await;
}

/// The kernels/h200 bundle a catalog build ships (scripts/h200-catalog.py): H200 entries
/// and baselines, and the tunes that ended `baseline_faster` there. Here: H200's
/// baselines for the fixture's problems (the H100 kernel for `fast` took 900 µs there,
/// its H200 baselines 950 µs, so today it would stand in), and H200's own tune of `fast`
/// that found nothing faster than them.
async fn with_h200_tuned_to_baseline(db: &TestDb, f: &Fixture) {
    let tune = baseline_faster_tune(H200, f.fast, 21);
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord { name: H200.into(), model: "NVIDIA H200".into(), compute_capability: "9.0".into(), sm_count: Some(132) }],
        problems: vec![f.fast],
        artifacts: vec![],
        entries: vec![],
        baselines: vec![h200_baseline(f.fast, "cublaslt_autotune", 950.0)],
        tunes: vec![tune],
    };
    let dir = tempfile::tempdir().unwrap();
    bundle::write_bundle(dir.path(), &index, &Default::default()).unwrap();
    bundle::import(&db.db, dir.path()).await.unwrap();
}

async fn an_h200_tune_that_ended_baseline_faster_ends_the_stand_in(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    with_h200_tuned_to_baseline(&db, &f).await;
    let app = test::init_service(create_app(st.clone())).await;
    // H200's own measured answer: the baseline, with the tune that measured it; no H100
    // kernel in its place although it beat H100's baselines and took less than 950 µs there.
    let e = get(&app, &format!("/v1/kernels/{}?device=H200", f.fast.path())).await.assert_problem(404, "baseline_faster");
    assert_eq!(e["device_class"], H200, "{e}");
    assert!(e.get("fallback").is_none(), "{e}");
    assert_eq!(e["use_instead"]["median_us"], 950.0);
    assert_eq!(e["tuning"]["state"], "baseline_faster", "{e}");
    assert_eq!(get(&app, &format!("/v1/kernels/{}/ptx?device=H200", f.fast.path())).await.status, 404);
    // H100's answer is its own, unchanged.
    assert_eq!(get(&app, &format!("/v1/kernels/{}?device=H100-SXM", f.fast.path())).await.status, 200);
    db.cleanup().await;
}

/// An H200 worker's run of the fixture's H100 kernel for `fast` (the same PTX and
/// manifest, as the catalog build submits it), stored as the worker stores it.
async fn h200_run_of_the_h100_kernel(db: &TestDb, f: &Fixture, who: &str, outcome: kaas::harness::RunOutcome) {
    use kaas::work::queue::{self, Claimant};
    let app = test::init_service(create_app(state(db, ApiSettings::default()))).await;
    let token = kaas::auth::create_token(&db.db, who, kaas::auth::Role::Submitter).await.unwrap().secret;
    let body = serde_json::json!({"ptx": f.ptx_fast, "manifests": [manifest(f.fast)], "name": "the H100 entry", "device_classes": [H200]});
    let r = call(&app, test::TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {token}"))).set_json(body)).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let facts = crate::submissions::facts(H200);
    let claimant = Claimant { worker_id: format!("h200-{who}"), facts: facts.clone() };
    let claimed = queue::claim(&db.db, &claimant, std::time::Duration::from_secs(30), 3).await.unwrap().expect("the H200 job");
    queue::complete(&db.db, claimed.job.id, &claimant.worker_id, &outcome, &facts).await.unwrap();
}

/// A passing H200 outcome: `median` µs, `speedup` over each baseline timed beside it.
fn passed_on_h200(median: f64, speedup: f64) -> kaas::harness::RunOutcome {
    let mut o = kaas::harness::RunOutcome::early(kaas::verify::Verdict::Pass, "benchmark", "verified and benchmarked");
    o.device = Some(crate::submissions::facts(H200));
    o.bench = Some(serde_json::json!({
        "timings": {"graph": {"median_us": median, "ci95_low_us": median - 1.0, "ci95_high_us": median + 1.0, "tflops": 100.0}},
        "speedups": {"graph": {"cublaslt_autotune_max": speedup, "cublas_max": speedup}},
        "baselines": [{"library": "cublaslt_autotune", "layout": "tn", "mode": "graph", "timing": {"median_us": median * speedup}, "config": {"algo": 1}}],
        "converged": true, "rounds": 20,
    }));
    o
}

/// Deletes H200's catalog entries, as an operator would, leaving their runs.
async fn remove_h200_entries(db: &TestDb) {
    use kaas::db::entities::catalog_entry;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    catalog_entry::Entity::delete_many().filter(catalog_entry::Column::DeviceClass.eq(H200)).exec(&db.db).await.unwrap();
}

async fn a_stand_in_is_judged_by_what_it_did_on_the_h200(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    with_h200_baselines(&db, &f, 950.0).await;
    let uri = format!("/v1/kernels/{}?device=H200", f.fast.path());
    let app = test::init_service(create_app(st.clone())).await;
    assert_eq!(get(&app, &uri).await.json()["fallback"]["measured_on"], DEVICE, "offered before any H200 run");

    // It failed verification on an H200: never offered there again.
    let mut failed = kaas::harness::RunOutcome::early(kaas::verify::Verdict::ExactMismatch, "binary exact test", "C[3,7] = 12, expected 13");
    failed.device = Some(crate::submissions::facts(H200));
    h200_run_of_the_h100_kernel(&db, &f, "first", failed).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let e = get(&app, &uri).await.assert_problem(404, "kernel_not_found");
    assert!(e.get("fallback").is_none(), "{e}");
    assert_eq!(e["device_class"], H200);
    assert_eq!(get(&app, &format!("/v1/kernels/{}/ptx?device=H200", f.fast.path())).await.status, 404);

    // It passes there later, slower than a baseline timed beside it: that run is H200's
    // catalog entry, so H200's own answer (the baseline), no stand-in.
    h200_run_of_the_h100_kernel(&db, &f, "second", passed_on_h200(1000.0, 0.95)).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let e = get(&app, &uri).await.assert_problem(404, "baseline_faster");
    assert!(e.get("fallback").is_none(), "{e}");
    assert_eq!(e["device_class"], H200);

    // Without that entry (an operator removed it) the H100 kernel stands in again, judged
    // by its H200 run: it lost there, so the baseline, and the H200 figures shown.
    remove_h200_entries(&db).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let e = get(&app, &uri).await.assert_problem(404, "baseline_faster");
    assert_eq!(e["fallback"]["measured_on"], DEVICE, "{e}");
    assert_eq!(e["fallback"]["requested_device_run"]["device_class"], H200, "{e}");
    assert_eq!(e["fallback"]["requested_device_run"]["timings"]["graph"]["median_us"], 1000.0, "{e}");
    let note = e["fallback"]["note"].as_str().unwrap();
    assert!(note.contains("1000.00 µs") && note.contains("0.950×"), "{note}");

    // A later H200 run of it that beat H200's baselines, its entry removed likewise: offered,
    // its H200 figures beside the H100 ones, and still no claim in `beats`.
    h200_run_of_the_h100_kernel(&db, &f, "third", passed_on_h200(800.0, 1.2)).await;
    remove_h200_entries(&db).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let r = get(&app, &uri).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let k = r.json();
    assert_eq!(k["measured_on"], DEVICE);
    assert_eq!(k["beats"], serde_json::json!([]));
    assert_eq!(k["fallback"]["requested_device_run"]["speedups"]["graph"]["cublaslt_autotune_max"], 1.2, "{k}");
    assert!(k["fallback"]["note"].as_str().unwrap().contains("800.00 µs"), "{k}");
    db.cleanup().await;
}

both_backends!(
    an_h200_tune_that_ended_baseline_faster_ends_the_stand_in,
    a_stand_in_is_judged_by_what_it_did_on_the_h200,
    device_spellings_resolve_in_every_route,
    a_bare_model_with_two_known_form_factors_is_ambiguous,
    unknown_device_classes_are_a_client_error_listing_the_known,
    h200_gets_the_h100_kernel_labelled_and_no_speedup_claims,
    an_h200_baseline_faster_than_the_h100_kernel_wins,
);

/// The shipped H100 catalog and H200 baseline table: every H100 entry asked for on an
/// H200 (spelt as the driver names it) is either offered labelled, with no claim about
/// H200, or answered with H200's own baseline; never presented as H200's.
#[actix_web::test]
async fn the_shipped_catalog_never_presents_h100_timings_as_h200s() {
    let db = TestDb::new(Backend::Sqlite).await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    for dir in ["h100", "baselines-h200"] {
        bundle::import(&db.db, &root.join(dir)).await.unwrap();
    }
    let (index, _) = bundle::read_bundle(&root.join("h100")).unwrap();
    let st = state(&db, ApiSettings::default());
    let app = test::init_service(create_app(st.clone())).await;
    let e = get(&app, &format!("/v1/kernels/{}?device=A100", index.entries[0].problem.path())).await.assert_problem(400, "unknown_device");
    assert_eq!(names(&e["known_device_classes"]), vec![DEVICE.to_string(), H200.to_string()]);
    let (mut offered, mut baseline_won, mut not_offered) = (0, 0, 0);
    for entry in &index.entries {
        let r = get(&app, &format!("/v1/kernels/{}?device=NVIDIA%20H200", entry.problem.path())).await;
        let j = r.json();
        match r.status.as_u16() {
            200 => {
                offered += 1;
                assert_eq!((&j["device_class"], &j["measured_on"], &j["record"]["device_class"]), (&DEVICE.into(), &DEVICE.into(), &DEVICE.into()));
                assert_eq!(j["fallback"]["requested_device"], H200);
                assert_eq!(j["beats"], serde_json::json!([]), "{}", entry.problem);
                // Offered only where H200's own fastest baseline did not beat the H100 time.
                if let (Some(here), Some(there)) = (j["fallback"]["requested_device_baseline"]["median_us"].as_f64(), j["run"]["timings"]["graph"]["median_us"].as_f64()) {
                    assert!(here >= there, "{}: {here} µs on H200 < {there} µs on H100, yet offered", entry.problem);
                }
            }
            404 if j["code"] == "baseline_faster" && j.get("fallback").is_some() => {
                baseline_won += 1;
                assert_eq!(j["device_class"], H200);
                assert_eq!(j["fallback"]["measured_on"], DEVICE);
            }
            404 => {
                // The H100 kernel loses to H100's baselines: H200's own answer.
                not_offered += 1;
                assert_eq!(j["code"], "kernel_not_found", "{j}");
                assert_eq!(j["device_class"], H200, "{j}");
            }
            s => panic!("{}: {s} {j}", entry.problem),
        }
    }
    assert!(offered > 0 && offered + baseline_won + not_offered == index.entries.len(), "{offered} offered, {baseline_won} baseline faster, {not_offered} not offered");
    eprintln!("shipped catalog on H200: {offered} offered, {baseline_won} H200 baseline faster, {not_offered} not offered (lose on H100)");
    db.cleanup().await;
}

/// `kaas pull --device` with the driver's model name, and with H200 where only an H100
/// entry exists: the stand-in is pulled, the note printed, and its record verifies.
#[actix_web::test]
async fn kaas_pull_names_devices_as_people_do_and_says_when_it_got_a_stand_in() {
    let (index, ptx, _) = crate::ui::ui_fixture();
    let port = crate::ui::serve(index, ptx);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let pull = |device: &str, shape: &str, out: &str| {
        let out = dir.path().join(out);
        let res = std::process::Command::new(env!("CARGO_BIN_EXE_kaas"))
            .args(["pull", "--url", &url, "--device", device, "--problem", shape, "--acc", "f32", "--layout", "tn", "-o", out.to_str().unwrap()])
            .env_remove("KAAS_PUBLIC_KEY")
            .output()
            .unwrap();
        (res.status.success(), format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr)), out)
    };
    let (ok, log, _) = pull("NVIDIA H100 80GB HBM3", "4096x4096x4096", "a");
    assert!(ok && log.contains("on H100-SXM"), "{log}");
    let (ok, log, out) = pull("h200", "2048x4096x4096", "b");
    assert!(ok && log.contains("note: measured on H100-SXM, not H200"), "{log}");
    let kernel: Value = serde_json::from_str(&std::fs::read_to_string(out.join("kernel.json")).unwrap()).unwrap();
    assert_eq!(kernel["fallback"]["requested_device"], H200);
    let verified = std::process::Command::new(env!("CARGO_BIN_EXE_kaas")).args(["verify", out.to_str().unwrap(), "--url", &url]).output().unwrap();
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    let (ok, log, _) = pull("A100", "4096x4096x4096", "c");
    assert!(!ok && log.contains("known device classes: H100-SXM, H200"), "{log}");
}
