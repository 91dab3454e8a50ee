//! The web UI: its assets and the heatmap endpoint through the real app, then the pages
//! themselves in a real headless Chromium (Debian's `chromium` + `chromedriver`, which
//! `.ci/run` installs) against a real server on an ephemeral port over SQLite.
//! Without Chromium the browser tests print `SKIPPED <test>: no chromium (...)` and pass.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use actix_web::test::{TestRequest, init_service};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::Role;
use kaas::catalog::bundle::{self, ArtifactRecord, BaselineRecord, DeviceClassRecord, EntryRecord, Index, RunRecord};
use kaas::harness::{CheckReport, RunOutcome};
use kaas::problem::{Acc, Arch, Layout, Problem, Shape};
use kaas::verify::Verdict;
use kaas::work::queue::{self, Claimant, Stored};
use serde_json::{Value, json};

use crate::both_backends;
use crate::common::*;
use crate::webdriver::{Browser, find_chromium, http};

const EVIL: &str = "<script>alert(1)</script>";
const H200: &str = "H200";

/// A run timed in graph and offline mode, with every statistic the harness records.
fn timed(p: Problem, graph_us: f64, speedup: f64) -> RunRecord {
    let stats = |us: f64| {
        json!({"median_us": us, "mean_us": us * 1.004, "p10_us": us * 0.99, "p90_us": us * 1.02,
               "ci95_low_us": us * 0.995, "ci95_high_us": us * 1.005, "samples": 200,
               "tflops": 2.0 * p.m as f64 * p.n as f64 * p.k as f64 / (us * 1e6)})
    };
    let table = |s: f64| json!({"cublas_max": s * 1.05, "cublaslt_heuristic_max": s * 1.02, "cublaslt_autotune_max": s});
    RunRecord {
        verdict: "pass".into(),
        message: format!("verified on {DEVICE}: exact on 3 seeds of {{0,1}} inputs; deviation within the baselines' bound"),
        measured_at: when(20),
        timings: Some(json!({"graph": stats(graph_us), "offline": stats(graph_us * 1.1)})),
        speedups: Some(json!({"graph": table(speedup), "offline": table(speedup * 0.97)})),
        regime: None,
        regimes: None,
        device: Some(json!({"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.159.04", "cuda_driver_api_version": "13.0", "cublas_version": "13.1.0"})),
    }
}

fn describe(text: &str) -> ArtifactRecord {
    bundle::describe_ptx(text.as_bytes()).unwrap()
}

fn entry(device: &str, p: Problem, ptx: &str, who: &str, run: RunRecord) -> EntryRecord {
    EntryRecord {
        device_class: device.into(),
        problem: p,
        artifact: describe(ptx).sha256,
        submitter: who.into(),
        name: format!("{who}-{}", p.shape()),
        description: "ui fixture".into(),
        manifest: manifest(p),
        run,
    }
}

/// The integration fixture plus a grid of tn problems: K=4096 with M, N in
/// {1024, 2048, 4096} holding every kind of cell (kernels faster and slower than the
/// baselines, verified-only, baselines only, nothing), K=1024 with four problems, a
/// second device class, and a submitter named `<script>alert(1)</script>` who holds one
/// entry and ranks second on the fast problem.
pub fn ui_fixture() -> (Index, BTreeMap<String, String>, Fixture) {
    let f = fixture();
    let (mut index, mut ptx) = fixture_index(&f);
    // The fast problem's catalog kernel was timed in both regimes (ranked L2-cold).
    for e in index.entries.iter_mut().filter(|e| e.problem == f.fast && e.device_class == DEVICE) {
        let us = e.run.timings.as_ref().and_then(|t| t["graph"]["median_us"].as_f64()).unwrap_or(1.0);
        e.run.regime = Some("l2_cold".into());
        e.run.regimes = Some(json!({
            "l2_cold": {"buffer_sets": 3, "l2_multiple": 2.4, "cache": "l2_cold", "timings": {"graph": {"median_us": us}}, "speedups": {"graph": {"cublaslt_autotune_max": 1.08}}},
            "l2_warm": {"buffer_sets": 1, "l2_multiple": 0.8, "cache": "l2_warm", "timings": {"graph": {"median_us": us * 0.96}}, "speedups": {"graph": {"cublaslt_autotune_max": 1.1}}},
        }));
    }
    let grid_ptx = crate::common::ptx("grid");
    let evil_ptx = crate::common::ptx("evil");
    for text in [&grid_ptx, &evil_ptx] {
        index.artifacts.push(describe(text));
        ptx.insert(describe(text).sha256, text.clone());
    }
    let tn = |m, n, k| problem(m, n, k, Layout::Tn);
    let mut extra_problems = vec![];
    for m in [1024, 2048, 4096] {
        for n in [1024, 2048, 4096] {
            if (m, n) != (4096, 4096) {
                extra_problems.push(tn(m, n, 4096));
            }
        }
    }
    for m in [1024, 2048] {
        for n in [1024, 2048] {
            extra_problems.push(tn(m, n, 1024));
        }
    }
    let mut unbenchmarked = timed(tn(2048, 2048, 4096), 1.0, 1.0);
    unbenchmarked.timings = None;
    unbenchmarked.speedups = None;
    // The slower run on the fast problem goes first: the last entry imported is current.
    let mut evil_on_fast = timed(f.fast, 950.0, 1.02);
    evil_on_fast.measured_at = when(18);
    let mut entries = vec![entry(DEVICE, f.fast, &evil_ptx, EVIL, evil_on_fast)];
    entries.append(&mut index.entries);
    entries.extend([
        entry(DEVICE, tn(1024, 1024, 4096), &grid_ptx, "kaas-tuner", timed(tn(1024, 1024, 4096), 70.0, 1.25)),
        entry(DEVICE, tn(1024, 2048, 4096), &grid_ptx, "alice", timed(tn(1024, 2048, 4096), 150.0, 0.95)),
        entry(DEVICE, tn(2048, 2048, 4096), &grid_ptx, "kaas-tuner", unbenchmarked),
        entry(DEVICE, tn(2048, 4096, 4096), &evil_ptx, EVIL, timed(tn(2048, 4096, 4096), 420.0, 1.3)),
        entry(DEVICE, tn(4096, 1024, 4096), &grid_ptx, "alice", timed(tn(4096, 1024, 4096), 240.0, 1.02)),
        entry(DEVICE, tn(1024, 1024, 1024), &grid_ptx, "kaas-tuner", timed(tn(1024, 1024, 1024), 20.0, 1.1)),
        entry(DEVICE, tn(2048, 2048, 1024), &grid_ptx, "kaas-tuner", timed(tn(2048, 2048, 1024), 60.0, 0.9)),
        entry(H200, f.fast, &grid_ptx, "kaas-tuner", timed(f.fast, 700.0, 1.15)),
        entry(H200, tn(1024, 1024, 4096), &grid_ptx, "kaas-tuner", timed(tn(1024, 1024, 4096), 55.0, 1.2)),
    ]);
    index.entries = entries;
    for p in [tn(1024, 1024, 4096), tn(1024, 2048, 4096), tn(1024, 4096, 4096), tn(2048, 4096, 4096)] {
        index.baselines.push(baseline(p, "cublas", 500.0));
        index.baselines.push(baseline(p, "cublaslt_autotune", 480.0));
    }
    index.problems.extend(extra_problems);
    index.problems.sort();
    index.device_classes.push(DeviceClassRecord {
        name: H200.into(),
        model: "NVIDIA H200".into(),
        compute_capability: "9.0".into(),
        sm_count: Some(132),
    });
    (index, ptx, f)
}

/// Problems of the index in one heatmap selection.
fn cells_in(index: &Index, layout: Layout, k: u32) -> usize {
    index.problems.iter().filter(|p| p.arch == Arch::Sm90 && p.acc == Acc::F32 && p.layout == layout && p.k == k).count()
}

/// Starts `kaas`'s real app on an ephemeral port over a fresh SQLite database holding
/// this bundle; it serves until the test process ends.
pub fn serve(index: Index, ptx: BTreeMap<String, String>) -> u16 {
    serve_db(index, ptx).0
}

/// [`serve`], also returning the database's URL, so a test can play the worker.
pub fn serve_db(index: Index, ptx: BTreeMap<String, String>) -> (u16, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let (db, url) = TestDb::with_url(Backend::Sqlite).await;
            let dir = tempfile::tempdir().unwrap();
            bundle::write_bundle(dir.path(), &index, &ptx).unwrap();
            let started = Instant::now();
            bundle::import(&db.db, dir.path()).await.unwrap();
            eprintln!("imported {} problems in {:.1} s", index.problems.len(), started.elapsed().as_secs_f64());
            let st = state(&db, ApiSettings::default());
            let server = actix_web::HttpServer::new(move || create_app(st.clone())).workers(2).bind(("127.0.0.1", 0)).unwrap();
            tx.send((server.addrs()[0].port(), url)).unwrap();
            server.run().await.unwrap();
            drop(dir);
        })
    });
    rx.recv().expect("the server started")
}

fn screenshot_dir() -> PathBuf {
    // target/<profile>/deps/<test binary> -> target/ui-screenshots
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).map(|t| t.join("ui-screenshots")).unwrap_or_else(|| std::env::temp_dir().join("kaas-ui-screenshots"))
}

// ---- Without a browser: the assets and the heatmap endpoint -------------------------

#[actix_web::test]
async fn the_ui_is_served_from_the_binary() {
    let (db, st, ..) = loaded(Backend::Sqlite, ApiSettings::default()).await;
    let app = init_service(create_app(st)).await;
    let index = get(&app, "/").await;
    assert_eq!(index.status, 200);
    assert_eq!(index.header("content-type").as_deref(), Some("text/html; charset=utf-8"));
    let csp = index.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    let html = String::from_utf8(index.body.to_vec()).unwrap();
    assert!(html.contains(r#"<script type="module" src="/static/app.js">"#));
    // Every asset the page names is served, with a strong ETag that answers 304.
    for path in ["/static/app.js", "/static/style.css", "/static/lib.js", "/static/heatmap.js", "/static/problem.js"] {
        assert!(html.contains(path), "{path}");
        let r = get(&app, path).await;
        assert_eq!(r.status, 200, "{path}");
        let etag = r.header("etag").unwrap();
        let again = call(&app, TestRequest::get().uri(path).insert_header(("If-None-Match", etag.as_str()))).await;
        assert_eq!(again.status, 304, "{path}");
        assert!(again.body.is_empty());
    }
    assert_eq!(get(&app, "/static/app.js").await.header("content-type").as_deref(), Some("text/javascript; charset=utf-8"));
    get(&app, "/static/nope.js").await.assert_problem(404, "not_found");
    get(&app, "/static/../Cargo.toml").await.assert_problem(404, "not_found");
    get(&app, "/no/such/page").await.assert_problem(404, "not_found");
    db.cleanup().await;
}

#[test]
fn the_embedded_assets_are_the_static_folder_and_stay_small() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("static");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    on_disk.sort();
    let mut embedded: Vec<String> = kaas::api::routes::ui::ASSETS.iter().map(|a| a.path.to_string()).collect();
    embedded.sort();
    assert_eq!(embedded, on_disk, "static/ and routes::ui::ASSETS must list the same files");
    let js: usize = kaas::api::routes::ui::ASSETS.iter().filter(|a| a.path.ends_with(".js")).map(|a| a.body.len()).sum();
    assert!(js < 150 * 1024, "{js} bytes of JavaScript; the budget is 150 KB");
    // Data reaches the page as text only: no script assigns markup.
    for a in kaas::api::routes::ui::ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
        let text = std::str::from_utf8(a.body).unwrap();
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
            assert!(!text.contains(sink), "{} uses {sink}", a.path);
        }
    }
}

async fn the_overview_endpoints_answer_from_the_catalog(backend: Backend) {
    let db = TestDb::new(backend).await;
    let (index, ptx, f) = ui_fixture();
    let dir = tempfile::tempdir().unwrap();
    bundle::write_bundle(dir.path(), &index, &ptx).unwrap();
    bundle::import(&db.db, dir.path()).await.unwrap();
    let app = init_service(create_app(state(&db, ApiSettings::default()))).await;

    // Nothing asked: the service chooses a selection with kernels (the f32 tn grid of
    // the busiest device class, at the K holding most of its entries) and says so.
    let d = get(&app, "/v1/heatmap").await.json();
    assert_eq!(d["device_class"], DEVICE, "the device class with the most entries");
    assert_eq!(d["arch"], "sm_90");
    assert_eq!(d["acc"], "f32");
    assert_eq!(d["layout"], "tn");
    assert_eq!(d["k"], 4096);
    assert_eq!(d["device_classes"], json!([DEVICE, H200]));
    assert_eq!(d["stand_ins"], json!([]), "nothing stands in for {DEVICE}");
    assert_eq!(d["cells"].as_array().unwrap().len(), cells_in(&index, Layout::Tn, 4096));
    assert!(d["cells"].as_array().unwrap().iter().any(|c| c["state"] == "kernel"), "{d}");

    let d = get(&app, &format!("/v1/heatmap?device={DEVICE}&layout=tn&k=4096")).await.json();
    assert_eq!(d["ks"], json!([64, 1024, 4096]));
    let cells = d["cells"].as_array().unwrap();
    assert_eq!(cells.len(), cells_in(&index, Layout::Tn, 4096));
    let cell = |m: u32, n: u32| cells.iter().find(|c| c["m"] == m && c["n"] == n).unwrap();
    assert_eq!(cell(4096, 4096)["path"], f.fast.path());
    assert_eq!(cell(4096, 4096)["submitter"], "kaas-tuner");
    assert_eq!(cell(4096, 4096)["modes"]["graph"]["speedups"]["cublaslt_autotune_max"], 1.08);
    assert_eq!(cell(1024, 1024)["modes"]["offline"]["speedups"]["cublaslt_autotune_max"], 1.25 * 0.97);
    assert_eq!(cell(1024, 1024)["modes"]["graph"]["ci95_low_us"], 70.0 * 0.995);
    assert_eq!(cell(1024, 1024)["fastest_baseline_us"]["graph"], 480.0);
    assert_eq!(cell(2048, 4096)["submitter"], EVIL);
    assert_eq!(cell(2048, 2048)["state"], "unbenchmarked");
    assert_eq!(cell(1024, 4096)["state"], "baseline_only");
    assert_eq!(cell(2048, 1024)["state"], "empty");
    // Served as the kernel endpoint serves: 0.95× over a measured baseline is not.
    assert_eq!(cell(1024, 1024)["served"], true);
    assert_eq!(cell(1024, 2048)["state"], "kernel");
    assert_eq!(cell(1024, 2048)["served"], false, "{}", cell(1024, 2048));
    assert_eq!(cell(1024, 4096)["served"], false, "no kernel, nothing served");
    assert_eq!(d["modes"], json!(["graph", "offline"]));
    assert_eq!(d["baselines"], json!(["cublas_max", "cublaslt_autotune_max", "cublaslt_heuristic_max"]));

    let h200 = get(&app, &format!("/v1/heatmap?device={H200}&layout=tn&k=4096")).await.json();
    assert_eq!(h200["stand_ins"], json!([DEVICE]), "H100-SXM's kernels stand in for H200's gaps");
    let kernels = h200["cells"].as_array().unwrap().iter().filter(|c| c["state"] == "kernel").count();
    assert_eq!(kernels, 2);
    assert_eq!(get(&app, "/v1/heatmap?layout=tn&k=1024").await.json()["cells"].as_array().unwrap().len(), cells_in(&index, Layout::Tn, 1024));
    assert_eq!(get(&app, "/v1/heatmap?layout=tn&k=77").await.json()["cells"], json!([]));
    get(&app, "/v1/heatmap?k=0").await.assert_problem(400, "invalid_query");
    get(&app, "/v1/heatmap?k=x").await.assert_problem(400, "invalid_query");
    get(&app, "/v1/heatmap?layout=xt").await.assert_problem(400, "invalid_query");
    get(&app, "/v1/heatmap?device=%3Cscript%3E").await.assert_problem(400, "invalid_query");

    // The headline figures.
    let s = get(&app, "/v1/stats").await.json();
    let covered: std::collections::BTreeSet<Problem> = index.entries.iter().map(|e| e.problem).collect();
    assert_eq!(s["problems"], index.problems.len());
    assert_eq!(s["problems_covered"], covered.len());
    assert_eq!(s["entries"], 12, "ten on {DEVICE} (the fast problem's twice-imported entry counts once), two on {H200}");
    assert_eq!(s["kernels"], 4);
    assert_eq!(s["device_classes"], json!([DEVICE, H200]));
    assert_eq!(s["benchmarked_entries"], 10);
    let speedups = [1.08, 0.8, 1.25, 0.95, 1.3, 1.02, 1.1, 0.9, 1.15, 1.2];
    let expected = (speedups.iter().map(|x: &f64| x.ln()).sum::<f64>() / 10.0).exp();
    assert!((s["geomean_speedup_vs_autotune_max"].as_f64().unwrap() - expected).abs() < 1e-12, "{s}");
    assert_eq!(s["example"]["path"], "sm_90/f32/tn/2048x4096x4096", "the served entry with the best speedup");
    assert_eq!(s["example"]["device_class"], DEVICE);
    db.cleanup().await;
}

#[actix_web::test]
async fn an_empty_database_has_no_selection_and_no_figures() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = init_service(create_app(state(&db, ApiSettings::default()))).await;
    let d = get(&app, "/v1/heatmap").await.json();
    assert_eq!(d["cells"], json!([]));
    assert_eq!(d["arch"], Value::Null);
    assert_eq!(d["device_class"], Value::Null);
    let s = get(&app, "/v1/stats").await.json();
    assert_eq!(s["problems"], 0);
    assert_eq!(s["geomean_speedup_vs_autotune_max"], Value::Null);
    assert_eq!(s["example"], Value::Null);
}

both_backends!(the_overview_endpoints_answer_from_the_catalog);

// ---- In Chromium ---------------------------------------------------------------------

fn chromium_or_skip() -> Option<(PathBuf, PathBuf)> {
    match find_chromium() {
        Ok(found) => Some(found),
        Err(why) => {
            crate::skipped!("no chromium ({why})");
            None
        }
    }
}

fn ready(b: &Browser) -> String {
    b.js("return document.getElementById('main')?.dataset.ready || '';", json!([])).as_str().unwrap_or_default().to_string()
}

/// Waits until the router has rendered `view` anew (`main[data-ready]` changes on every
/// render, across documents too).
fn wait_view(b: &Browser, view: &str, before: &str) {
    let script = format!(
        "const m = document.getElementById('main'); return !!m && m.dataset.view === '{view}' && !!m.dataset.ready && m.dataset.ready !== {};",
        serde_json::to_string(before).unwrap()
    );
    b.wait_for(&format!("the {view} view"), &script);
}

/// Navigates and waits for the view to render.
fn open(b: &Browser, url: &str, view: &str) {
    let before = ready(b);
    b.goto(url);
    wait_view(b, view, &before);
}

/// Does something that re-renders the page, then waits for `view`.
fn then(b: &Browser, view: &str, action: impl FnOnce()) {
    let before = ready(b);
    action();
    wait_view(b, view, &before);
}

/// Any dialog at all (alert, confirm, prompt) would be a script that ran: count them in
/// every document, before the page's own scripts; and collect script errors.
fn watched(b: Browser) -> Browser {
    b.cdp("Page.addScriptToEvaluateOnNewDocument", json!({"source":
        "window.__dialogs = 0; for (const f of ['alert','confirm','prompt']) { const o = window[f]; window[f] = (...a) => { window.__dialogs++; return o.apply(window, a); }; } \
         window.__errors = []; addEventListener('error', e => window.__errors.push(String(e.message))); \
         addEventListener('unhandledrejection', e => window.__errors.push(String(e.reason))); \
         addEventListener('securitypolicyviolation', e => window.__errors.push('CSP: ' + e.violatedDirective + ' ' + e.blockedURI));"}));
    b
}

fn texts(b: &Browser, css: &str) -> Vec<String> {
    let v = b.js("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.trim());", json!([css]));
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_pages_work_in_chromium() {
    let Some((chromium, driver)) = chromium_or_skip() else { return };
    let (index, ptx, f) = ui_fixture();
    let expected_fast_ptx = f.ptx_fast.clone();
    let expected_manifest = serde_json::to_value(manifest(f.fast)).unwrap();
    let k4096 = cells_in(&index, Layout::Tn, 4096);
    let k1024 = cells_in(&index, Layout::Tn, 1024);
    let covered = index.entries.iter().map(|e| e.problem).collect::<std::collections::BTreeSet<_>>().len();
    let port = serve(index, ptx);
    let base = format!("http://127.0.0.1:{port}");
    let shots = screenshot_dir();
    let b = watched(Browser::start(&chromium, &driver, 1280, 1100));

    // Home: headline figures come from the catalog.
    open(&b, &format!("{base}/"), "home");
    assert_eq!(texts(&b, "#fig-covered"), vec![covered.to_string()]);
    assert_eq!(texts(&b, "#fig-devices"), vec!["2"]);
    assert!(texts(&b, "#fig-geomean")[0].ends_with('×'));
    assert!(texts(&b, "main pre")[0].starts_with(&format!("kaas pull --url {base} --device ")), "{:?}", texts(&b, "main pre"));
    b.screenshot(&shots.join("home.png"));

    // Heatmap: one cell per problem of the selection; a filter changes it.
    open(&b, &format!("{base}/#/heatmap?device={DEVICE}&layout=tn&k=4096"), "heatmap");
    assert_eq!(b.js("return document.querySelectorAll('#heatmap a.cell').length", json!([])), json!(k4096));
    let paths: Vec<String> = serde_json::from_value(b.js("return [...document.querySelectorAll('#heatmap a.cell')].map(a => a.dataset.path)", json!([]))).unwrap();
    assert!(paths.contains(&f.fast.path()));
    let states: Vec<String> = serde_json::from_value(b.js("return [...document.querySelectorAll('#heatmap a.cell')].map(a => a.dataset.state)", json!([]))).unwrap();
    for s in ["kernel", "unbenchmarked", "baseline_only", "empty"] {
        assert!(states.iter().any(|x| x == s), "no {s} cell: {states:?}");
    }
    // Hover shows the figures, including the escaped submitter.
    let evil_cell = "#heatmap a.cell[data-path='sm_90/f32/tn/2048x4096x4096']";
    b.js("document.querySelector(arguments[0]).focus()", json!([evil_cell]));
    let details = texts(&b, "#cell-details dd");
    assert!(details.contains(&EVIL.to_string()), "{details:?}");
    assert!(details.iter().any(|d| d == "1.300×"), "{details:?}");
    b.screenshot(&shots.join("heatmap.png"));
    then(&b, "heatmap", || b.click("#sel-k option[value='1024']"));
    assert_eq!(b.js("return document.querySelectorAll('#heatmap a.cell').length", json!([])), json!(k1024));
    assert!(b.js("return location.hash", json!([])).as_str().unwrap().contains("k=1024"));
    // Mode: the offline speedups colour the same cells.
    then(&b, "heatmap", || b.click("#sel-mode option[value='offline']"));
    let label = b.js("return document.querySelector('#heatmap a.cell').getAttribute('aria-label')", json!([]));
    assert!(label.as_str().unwrap().contains("(offline)"), "{label}");
    // Device class: H200 holds two of the nine K=4096 problems.
    open(&b, &format!("{base}/#/heatmap?device={H200}&layout=tn&k=4096&mode=graph"), "heatmap");
    assert_eq!(b.js("return document.querySelectorAll('#heatmap a.cell').length", json!([])), json!(k4096));
    assert_eq!(b.js("return document.querySelectorAll('#heatmap a.cell.kernel').length", json!([])), json!(2));
    // Keyboard: arrows move between cells, Enter opens the problem.
    open(&b, &format!("{base}/#/heatmap?device={DEVICE}&layout=tn&k=4096"), "heatmap");
    b.js("document.querySelector('#heatmap a.cell[tabindex=\"0\"]').focus()", json!([]));
    b.keys("#heatmap a.cell[tabindex='0']", "\u{E014}");
    assert_eq!(b.js("return document.activeElement.dataset.path", json!([])), json!("sm_90/f32/tn/1024x2048x4096"));
    then(&b, "problem", || b.keys("#heatmap a.cell[tabindex='0']", "\u{E007}"));
    assert_eq!(b.js("return location.hash", json!([])), json!(format!("#/problem/sm_90/f32/tn/1024x2048x4096?device={DEVICE}")));

    // Workloads: the presets, and Llama 3.1 8B's GEMMs as the catalog answers them (the
    // fixture serves four of its shapes on this device class).
    open(&b, &format!("{base}/#/workloads"), "workloads");
    assert_eq!(b.js("return document.querySelectorAll('#workloads tbody tr').length", json!([])), json!(6));
    open(&b, &format!("{base}/#/workloads/llama-3.1-8b?device={DEVICE}"), "workloads");
    let served: Vec<String> = serde_json::from_value(b.js("return [...document.querySelectorAll('#workload a.wl.served')].map(a => a.textContent)", json!([]))).unwrap();
    let (status, body) = http(port, "GET", &format!("/v1/workloads/llama-3.1-8b?device={DEVICE}"), None).unwrap();
    assert_eq!(status, 200);
    let api_served = serde_json::from_slice::<Value>(&body).unwrap()["summary"]["served"].as_u64().unwrap();
    assert!(api_served > 0);
    assert_eq!(served.len() as u64, api_served, "{served:?}");
    assert!(served.iter().all(|t| t.ends_with('×')), "{served:?}");
    assert_eq!(b.js("return document.querySelectorAll('#workload [data-state]').length", json!([])), json!(56));
    assert!(texts(&b, "#workload-summary")[0].contains("56 GEMMs"));
    b.screenshot(&shots.join("workload.png"));

    // Problem page: the ranking, downloads, and the `<script>` submitter as text.
    open(&b, &format!("{base}/#/problem/{}?device={DEVICE}", f.fast.path()), "problem");
    let ranked: Vec<Vec<String>> = serde_json::from_value(b.js(
        "return [...document.querySelectorAll('#ranking tbody tr')].map(tr => [...tr.cells].map(c => c.textContent.trim()))",
        json!([]),
    ))
    .unwrap();
    assert_eq!(ranked.len(), 2, "{ranked:?}");
    assert_eq!(ranked[0][0], "1");
    assert_eq!(ranked[0][1], "kaas-tuner (catalog kernel)");
    assert_eq!(ranked[0][2], "900.0 µs");
    assert_eq!(ranked[1][0], "2");
    assert_eq!(ranked[1][1], EVIL);
    assert_eq!(ranked[1][2], "950.0 µs");
    assert_eq!(b.js("return document.querySelectorAll('main script, body script:not([src])').length", json!([])), json!(0));
    assert_eq!(b.js("return window.__dialogs", json!([])), json!(0));
    assert_eq!(b.alert_text(), None, "a dialog is open");
    let href = b.js("return document.getElementById('download-ptx').href", json!([])).as_str().unwrap().to_string();
    assert_eq!(href, format!("{base}/v1/kernels/{}/ptx?device={DEVICE}", f.fast.path()));
    assert!(b.js("return document.getElementById('download-ptx').hasAttribute('download')", json!([])).as_bool().unwrap());
    let (status, bytes) = http(port, "GET", href.trim_start_matches(&base), None).unwrap();
    assert_eq!(status, 200);
    assert_eq!(bytes, expected_fast_ptx.as_bytes(), "the PTX link serves the exact PTX");
    let in_browser = b.js_async("const done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => r.text()).then(done, e => done(String(e)));", json!([href]));
    assert_eq!(in_browser.as_str().unwrap(), expected_fast_ptx);
    let manifest_text = b.js_async(
        "const done = arguments[arguments.length - 1]; fetch(document.getElementById('download-manifest').href).then(r => r.text()).then(done, e => done(String(e)));",
        json!([]),
    );
    let manifest_text = manifest_text.as_str().unwrap();
    let got: Value = serde_json::from_str(manifest_text).unwrap_or_else(|e| panic!("manifest download is not JSON ({e}): {manifest_text}"));
    assert_eq!(got, expected_manifest);
    let pull = texts(&b, "main pre");
    assert!(pull.contains(&format!("kaas pull --url {base} --device {DEVICE} --problem 4096x4096x4096 --acc f32 --layout tn -o ./4096x4096x4096-f32-tn")), "{pull:?}");
    assert!(texts(&b, "#run-message")[0].starts_with("verified and benchmarked"));
    // Every figure names its regime; both regimes side by side, the ranked one first.
    let captions = texts(&b, "main caption");
    assert!(captions.iter().any(|c| c.starts_with("Timings of the catalog kernel by mode, L2-cold")), "{captions:?}");
    let regimes: Vec<Vec<String>> = serde_json::from_value(b.js(
        "return [...document.querySelectorAll('tr[data-regime]')].map(tr => [tr.dataset.regime, ...[...tr.cells].map(c => c.textContent.trim())])",
        json!([]),
    ))
    .unwrap();
    assert_eq!(regimes.len(), 2, "{regimes:?}");
    assert_eq!((regimes[0][0].as_str(), regimes[0][2].as_str(), regimes[0][4].as_str()), ("l2_cold", "3", "900.0 µs"), "{regimes:?}");
    assert!(regimes[0][1].ends_with("— ranked"), "{regimes:?}");
    assert_eq!((regimes[1][0].as_str(), regimes[1][2].as_str(), regimes[1][4].as_str()), ("l2_warm", "1", "864.0 µs"), "{regimes:?}");
    b.screenshot(&shots.join("problem.png"));

    // A device class as people spell it, and a stand-in's kernel labelled: H200 has no
    // entry for 2048×4096×4096, so H100-SXM's is offered, claiming nothing on H200.
    open(&b, &format!("{base}/#/problem/sm_90/f32/tn/2048x4096x4096?device=h200"), "problem");
    assert_eq!(b.js("return document.getElementById('sel-device').value", json!([])), json!(H200));
    let note = texts(&b, "#fallback-note");
    assert!(note.len() == 1 && note[0].starts_with(&format!("Measured on {DEVICE}, not {H200}:")), "{note:?}");
    let claim = b.js("return document.getElementById('kernel-name').parentElement.textContent", json!([]));
    let claim = claim.as_str().unwrap();
    assert!(claim.contains("no speedup on H200 is claimed") && !claim.contains("faster than"), "{claim}");
    assert!(texts(&b, "main h2").contains(&format!("Timings on {DEVICE}")));
    b.screenshot(&shots.join("problem-fallback.png"));

    // A problem where the baselines win says so and names what to use.
    open(&b, &format!("{base}/#/problem/{}", f.slow.path()), "problem");
    assert!(texts(&b, "#no-kernel")[0].contains("cublaslt_autotune"), "{:?}", texts(&b, "#no-kernel"));
    b.screenshot(&shots.join("problem-baseline-faster.png"));

    // Leaderboard and the `<script>` submitter's own page.
    open(&b, &format!("{base}/#/leaderboard"), "leaderboard");
    let names = texts(&b, "#leaderboard a.submitter");
    assert!(names.contains(&EVIL.to_string()), "{names:?}");
    assert_eq!(names[0], "kaas-tuner", "most problems held first");
    then(&b, "leaderboard", || b.click("#by-geomean"));
    assert_eq!(texts(&b, "#leaderboard a.submitter")[0], EVIL, "the best geometric mean first");
    b.screenshot(&shots.join("leaderboard.png"));
    then(&b, "submitter", || {
        b.js("[...document.querySelectorAll('#leaderboard a.submitter')].find(a => a.textContent === arguments[0]).click()", json!([EVIL]));
    });
    assert_eq!(texts(&b, "#submitter-name"), vec![EVIL]);
    assert_eq!(b.js("return document.title", json!([])), json!(format!("{EVIL} · kaas")));
    let held = texts(&b, "#entries tbody th");
    assert_eq!(held, vec!["2048×4096×4096 f32 tn sm_90"]);
    assert_eq!(b.js("return document.querySelectorAll('main script').length + window.__dialogs", json!([])), json!(0));
    assert_eq!(b.alert_text(), None);
    b.screenshot(&shots.join("submitter.png"));
    assert_eq!(b.js("return window.__errors", json!([])), json!([]), "script errors or CSP violations");
    eprintln!("screenshots in {}", shots.display());
}

// ---- A first visit, at a laptop's and a phone's size ------------------------------------

/// Whether an element's content is wider than the element (cut off, or behind a scroll).
fn overflows(b: &Browser, css: &str) -> bool {
    b.js("const e = document.querySelector(arguments[0]); return e.scrollWidth > e.clientWidth + 1;", json!([css])).as_bool().unwrap()
}

fn selected(b: &Browser, css: &str) -> String {
    b.js("return document.querySelector(arguments[0]).value", json!([css])).as_str().unwrap().to_string()
}

#[test]
fn a_first_visit_sees_kernels_what_is_served_and_what_waits() {
    let Some((chromium, driver)) = chromium_or_skip() else { return };
    let (index, ptx, _) = ui_fixture();
    let (port, url) = serve_db(index, ptx);
    let base = format!("http://127.0.0.1:{port}");
    let shots = screenshot_dir();
    let b = watched(Browser::start(&chromium, &driver, 1366, 768));

    // The catalog opened bare shows the f32 tn grid of the first device class with
    // kernels, with kernels in it.
    open(&b, &format!("{base}/#/heatmap"), "heatmap");
    assert_eq!((selected(&b, "#sel-device"), selected(&b, "#sel-acc"), selected(&b, "#sel-layout")), (DEVICE.to_string(), "f32".to_string(), "tn".to_string()));
    assert!(b.js("return document.querySelectorAll('#heatmap a.cell.kernel').length", json!([])).as_u64().unwrap() > 0);
    // A kernel a baseline beats is not coloured as served: 1024×2048×4096 runs 0.95×.
    let unserved = "#heatmap a.cell[data-path='sm_90/f32/tn/1024x2048x4096']";
    assert_eq!(b.js("return document.querySelector(arguments[0]).className", json!([unserved])), json!("cell kernel unserved"));
    assert_eq!(b.js("return document.querySelector(arguments[0]).style.backgroundColor", json!([unserved])), json!(""));
    let label = b.js("return document.querySelector(arguments[0]).getAttribute('aria-label')", json!([unserved]));
    assert!(label.as_str().unwrap().contains("not served, a baseline is faster"), "{label}");
    let served = "#heatmap a.cell[data-path='sm_90/f32/tn/1024x1024x4096']";
    assert_eq!(b.js("return document.querySelector(arguments[0]).className", json!([served])), json!("cell kernel"));
    assert_ne!(b.js("return document.querySelector(arguments[0]).style.backgroundColor", json!([served])), json!(""));
    assert!(texts(&b, ".legend li").iter().any(|l| l == "kernel not served: a baseline is faster"));
    assert!(texts(&b, "#stand-in-note").is_empty(), "nothing stands in for {DEVICE}");
    b.screenshot(&shots.join("first-catalog.png"));
    // H200's grid says H100-SXM's kernels stand in where it has no answer.
    open(&b, &format!("{base}/#/heatmap?device={H200}"), "heatmap");
    let note = texts(&b, "#stand-in-note");
    assert!(note.len() == 1 && note[0].contains(&format!("offers {DEVICE}’s kernel as a stand-in")), "{note:?}");

    // The leaderboard by device class: a column, and a filter the API applies.
    open(&b, &format!("{base}/#/leaderboard"), "leaderboard");
    assert!(texts(&b, "#leaderboard thead th").contains(&"Device classes".to_string()));
    let everyone = texts(&b, "#leaderboard a.submitter").len();
    then(&b, "leaderboard", || b.click(&format!("#sel-device option[value='{H200}']")));
    assert_eq!(b.js("return location.hash", json!([])), json!(format!("#/leaderboard?by=held&device={H200}")));
    assert_eq!(texts(&b, "main h1"), vec![format!("Leaderboard on {H200}")]);
    assert_eq!(texts(&b, "#leaderboard a.submitter"), vec!["kaas-tuner"], "only H200's entries count");
    assert!(everyone > 1);
    let rows: Vec<Vec<String>> = serde_json::from_value(b.js("return [...document.querySelectorAll('#leaderboard tbody tr')].map(tr => [...tr.cells].map(c => c.textContent.trim()))", json!([]))).unwrap();
    assert_eq!((rows[0][2].as_str(), rows[0][3].as_str()), (H200, "2"), "{rows:?}");

    // Queued work without a GPU worker says it waits for one: a tuning request's tune
    // on the problem page, and a submission's page.
    let w = Worker::connect(&url);
    let token = w.token("newcomer");
    let auth = format!("Bearer {token}");
    let (status, body) = crate::webdriver::http_with(port, "POST", "/v1/tuning-requests", &[("Authorization", &auth)], Some(&json!({"problems": ["tn:300x200x100"], "device": DEVICE}))).unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    open(&b, &format!("{base}/#/problem/sm_90/f32/tn/300x200x100?device={DEVICE}"), "problem");
    assert_eq!(b.js("return document.getElementById('tune-state').dataset.state", json!([])), json!("queued"));
    let waits = texts(&b, "#no-worker");
    assert!(waits.len() == 1 && waits[0].starts_with(&format!("No GPU worker for {DEVICE} has been seen")), "{waits:?}");
    let id = submit(port, &token, &submission_body("newcomer", "first", "", &[(256, 256, 256)]));
    open(&b, &format!("{base}/#/submissions/{id}"), "submissions");
    let waits = texts(&b, "#no-worker");
    assert!(waits.len() == 1 && waits[0].contains("this waits in the queue until one starts"), "{waits:?}");

    // At a phone's size the workload table shows every column, and names its class.
    let phone = watched(Browser::start(&chromium, &driver, 390, 844));
    open(&phone, &format!("{base}/#/workloads/llama-3.1-8b"), "workloads");
    assert_eq!(selected(&phone, "#sel-device"), DEVICE, "a device class is chosen, not a mix of them");
    assert!(texts(&phone, "#workload-summary")[0].contains(&format!("on {DEVICE}")));
    assert_eq!(phone.js("return document.querySelectorAll('#workload tbody tr').length", json!([])), json!(14), "one row per token count, 1 to 8192");
    assert!(!overflows(&phone, "#workload .scroll"), "the workload table is cut off at 390 px");
    assert!(!overflows(&phone, "main"), "the page scrolls sideways at 390 px");
    phone.screenshot(&shots.join("first-workload-phone.png"));
    // No page scrolls sideways on a phone (wide tables scroll in their own box).
    for (path, view) in [("#/", "home"), ("#/heatmap", "heatmap"), (&format!("#/problem/{}?device={DEVICE}", "sm_90/f32/tn/4096x4096x4096") as &str, "problem"), ("#/leaderboard", "leaderboard"), ("#/workloads", "workloads"), (&format!("#/submissions/{id}"), "submissions")] {
        open(&phone, &format!("{base}/{path}"), view);
        let wide = phone.js("return document.documentElement.scrollWidth - innerWidth", json!([])).as_i64().unwrap();
        let culprits = phone.js("return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.scroll')).slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)", json!([]));
        assert!(wide <= 0, "{path} is {wide} px wider than a 390 px phone: {culprits}");
    }
    open(&phone, &format!("{base}/#/workloads/llama-3.1-8b?device={H200}"), "workloads");
    assert!(texts(&phone, "#stand-in-note")[0].contains(&format!("offers {DEVICE}’s kernel as a stand-in")));
    assert_eq!(b.js("return window.__errors", json!([])), json!([]), "script errors or CSP violations");
    assert_eq!(phone.js("return window.__errors", json!([])), json!([]), "script errors or CSP violations");
}

// ---- Submission pages, live over server-sent events ------------------------------------

/// Plays the worker from a test: its own connection to the served database.
struct Worker {
    rt: tokio::runtime::Runtime,
    db: sea_orm::DatabaseConnection,
    me: Claimant,
}

impl Worker {
    fn connect(url: &str) -> Worker {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let db = rt.block_on(kaas::db::connect(&kaas::db::DbConfig::new(url))).unwrap();
        Worker { rt, db, me: Claimant { worker_id: "ui-worker".into(), facts: crate::submissions::facts(DEVICE) } }
    }

    fn token(&self, who: &str) -> String {
        self.rt.block_on(kaas::auth::create_token(&self.db, who, Role::Submitter)).unwrap().secret
    }

    /// Claims the next job and reports a stage, as a worker's heartbeat does.
    fn claim(&self, stage: &str) -> i32 {
        let lease = std::time::Duration::from_secs(60);
        let j = self.rt.block_on(queue::claim(&self.db, &self.me, lease, 3)).unwrap().expect("a queued job");
        assert!(self.rt.block_on(queue::heartbeat(&self.db, j.job.id, &self.me.worker_id, lease, Some(stage))).unwrap());
        j.job.id
    }

    fn complete(&self, job: i32, outcome: &RunOutcome) {
        let stored = self.rt.block_on(queue::complete(&self.db, job, &self.me.worker_id, outcome, &self.me.facts)).unwrap();
        assert!(matches!(stored, Stored::Run { .. }), "{stored:?}");
    }
}

/// A submission body as `kaas submit` sends it: the fixture PTX and a manifest per shape.
fn submission_body(tag: &str, name: &str, description: &str, shapes: &[(u32, u32, u32)]) -> Value {
    let manifests: Vec<_> = shapes.iter().map(|&(m, n, k)| manifest(problem(m, n, k, Layout::Tn))).collect();
    json!({"ptx": crate::common::ptx(tag), "manifests": manifests, "name": name, "description": description})
}

/// Submits through the API with a token; returns the new submission's id.
fn submit(port: u16, token: &str, body: &Value) -> i64 {
    let auth = format!("Bearer {token}");
    let (status, bytes) = crate::webdriver::http_with(port, "POST", "/v1/submissions", &[("Authorization", &auth)], Some(body)).unwrap();
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice::<Value>(&bytes).unwrap()["id"].as_i64().unwrap()
}

fn check(name: &str, passed: bool, detail: &str, ms: f64) -> CheckReport {
    CheckReport { name: name.into(), passed, detail: detail.into(), duration_ms: ms }
}

/// A passing, benchmarked outcome: graph-mode median ± 0.2 µs, 1.1× cuBLASLt autotune.
fn passing(p: Problem, median_us: f64) -> RunOutcome {
    let mut o = RunOutcome::early(Verdict::Pass, "benchmark", "verified and benchmarked: exact on 3 seeds of {0,1} inputs");
    o.device = Some(crate::submissions::facts(DEVICE));
    o.checks = vec![
        check("static", true, "entry hgemm_fixture: 6 params match the manifest", 0.4),
        check("ptxas", true, "sm_90: 128 registers, no spills", 212.0),
        check("binary run 1 (seed 1)", true, "exact: 65536 of 65536 outputs", 3.1),
        check("deviation", true, "max |error| 0.0012 within the baselines' 0.0031", 8.7),
    ];
    let tflops = 2.0 * p.m as f64 * p.n as f64 * p.k as f64 / (median_us * 1e6);
    o.bench = Some(json!({
        "timings": {"graph": {"median_us": median_us, "ci95_low_us": median_us - 0.2, "ci95_high_us": median_us + 0.2, "tflops": tflops}},
        "speedups": {"graph": {"cublaslt_autotune_max": 1.1, "cublas_max": 1.25}},
        "converged": true, "rounds": 20,
    }));
    o
}

fn job_rows(b: &Browser) -> Vec<Vec<String>> {
    let v = b.js("return [...document.querySelectorAll('#jobs tr.job')].map(tr => [tr.dataset.job, ...[...tr.cells].map(c => c.textContent.trim())])", json!([]));
    serde_json::from_value(v).unwrap()
}

/// Waits until the row of `job` shows `text` in column `col` (0: problem, 1: device
/// class, 2: state and stage, 3: verdict, 4: message).
fn wait_cell(b: &Browser, job: i32, col: usize, text: &str) {
    let script = format!(
        "const r = document.querySelector('#jobs tr.job[data-job=\"{job}\"]'); return !!r && r.cells[{col}].textContent.includes({});",
        serde_json::to_string(text).unwrap()
    );
    b.wait_for(&format!("job {job} column {col} to show {text:?}; rows: {:?}", job_rows(b)), &script);
}

fn live_state(b: &Browser) -> String {
    b.js("return document.getElementById('live')?.dataset.state || ''", json!([])).as_str().unwrap_or_default().to_string()
}

#[test]
fn a_submission_page_follows_its_run_live() {
    let Some((chromium, driver)) = chromium_or_skip() else { return };
    let (index, ptx, _) = ui_fixture();
    let (port, url) = serve_db(index, ptx);
    let base = format!("http://127.0.0.1:{port}");
    let shots = screenshot_dir();
    let w = Worker::connect(&url);
    let token = w.token("alice");
    let shapes = [(256, 256, 256), (512, 256, 256)];
    let id = submit(port, &token, &submission_body("live", "hgemm 128×64, 4 stages", "Warp-specialised, TMA loads.", &shapes));

    let b = watched(Browser::start(&chromium, &driver, 1280, 1000));
    open(&b, &format!("{base}/#/submissions/{id}"), "submissions");
    assert_eq!(texts(&b, "#submission-name"), vec!["hgemm 128×64, 4 stages"]);
    assert_eq!(texts(&b, "#submission-description"), vec!["Warp-specialised, TMA loads."]);
    assert_eq!(texts(&b, "#submission-submitter"), vec!["alice"]);
    assert_eq!(texts(&b, "#submission-status"), vec!["queued"]);
    let rows = job_rows(&b);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r[3].starts_with("queued") && r[4] == "—"), "{rows:?}");
    assert_eq!(rows[0][1], "256×256×256 f32 tn sm_90");
    assert_eq!(b.js("return document.querySelector('#jobs tr.job th a').getAttribute('href')", json!([])), json!("#/problem/sm_90/f32/tn/256x256x256"));
    assert_eq!(b.js("return document.getElementById('live').getAttribute('aria-live')", json!([])), json!("polite"));
    b.wait_for("the live indicator", "return document.getElementById('live').dataset.state === 'live'");
    assert!(texts(&b, "#live")[0].contains("0 of 2 jobs finished"), "{:?}", texts(&b, "#live"));
    b.screenshot(&shots.join("submission-queued.png"));

    // From here on the page must change only through the event stream: no reload (the
    // marker survives) and no re-render by the router (`data-ready` stays).
    b.js("window.__same_page = true", json!([]));
    let rendered = ready(&b);

    let first = w.claim("verifying: binary run 2 (secret seed)");
    wait_cell(&b, first, 2, "running");
    wait_cell(&b, first, 2, "verifying: binary run 2 (secret seed)");
    b.screenshot(&shots.join("submission-running.png"));
    let shape = |job: i32| {
        let row = job_rows(&b).into_iter().find(|r| r[0] == job.to_string()).unwrap();
        row[1].split(' ').next().unwrap().to_string()
    };
    let p = if shape(first) == "256×256×256" { problem(256, 256, 256, Layout::Tn) } else { problem(512, 256, 256, Layout::Tn) };
    w.complete(first, &passing(p, 12.5));
    wait_cell(&b, first, 3, "pass");
    let row = job_rows(&b).into_iter().find(|r| r[0] == first.to_string()).unwrap();
    assert_eq!(row[2], DEVICE);
    assert_eq!(row[3], "done finished", "the state and the stage");
    assert_eq!(row[4], "pass");
    assert!(row[5].starts_with("verified and benchmarked"), "{row:?}");
    assert!(row[6].starts_with("12.50 µs") && row[6].contains("12.30 µs – 12.70 µs"), "median and CI: {row:?}");
    assert_eq!(row[7], format!("{:.1}", 2.0 * p.m as f64 * p.n as f64 * p.k as f64 / 12.5e6));
    assert_eq!(row[8], "1.100×");
    assert_eq!(row[9], "★ yes");
    assert_eq!(live_state(&b), "live", "one job is still queued");
    assert!(texts(&b, "#live")[0].contains("1 of 2 jobs finished"), "{:?}", texts(&b, "#live"));

    // The second job fails verification; then the stream says `done`.
    let second = w.claim("binary exact test");
    let mut failed = RunOutcome::early(Verdict::ExactMismatch, "binary run 1 (seed 1)", "C[3,4] = 7, expected 8 (first of 12 mismatches)");
    failed.device = Some(crate::submissions::facts(DEVICE));
    failed.checks = vec![check("static", true, "entry hgemm_fixture: 6 params match the manifest", 0.4), check("binary run 1 (seed 1)", false, "C[3,4] = 7, expected 8 (first of 12 mismatches)", 2.9)];
    w.complete(second, &failed);
    b.wait_for("the finished indicator", "return document.getElementById('live').dataset.state === 'finished'");
    let row = job_rows(&b).into_iter().find(|r| r[0] == second.to_string()).unwrap();
    assert_eq!(row[4], "exact_mismatch");
    assert_eq!(row[5], "C[3,4] = 7, expected 8 (first of 12 mismatches)");
    assert_eq!(row[6], "—");
    assert_eq!(row[9], "no");
    assert_eq!(texts(&b, "#submission-status"), vec!["done"]);
    assert!(texts(&b, "#live")[0].starts_with("Finished: 2 jobs ended (2 done)"), "{:?}", texts(&b, "#live"));
    assert_eq!(b.js("return window.__same_page === true", json!([])), json!(true), "the page was reloaded");
    assert_eq!(ready(&b), rendered, "the router re-rendered the page: the update did not come through the stream");

    // Verification details open from the keyboard and list every check.
    let toggle = format!("#toggle-{second}");
    assert_eq!(b.js("return document.querySelector(arguments[0]).getAttribute('aria-expanded')", json!([toggle])), json!("false"));
    assert_eq!(b.js(&format!("return document.getElementById('checks-{second}').hidden"), json!([])), json!(true));
    b.js("document.querySelector(arguments[0]).focus()", json!([toggle]));
    b.keys(&toggle, "\u{E007}");
    assert_eq!(b.js("return document.querySelector(arguments[0]).getAttribute('aria-expanded')", json!([toggle])), json!("true"));
    let checks = texts(&b, &format!("#checks-{second} tbody tr"));
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert!(checks[1].starts_with("binary run 1 (seed 1)failedC[3,4] = 7"), "{checks:?}");
    assert!(texts(&b, &format!("#checks-{second} caption"))[0].contains("1 of 2 passed"));
    b.click(&format!("#toggle-{first}"));
    assert_eq!(texts(&b, &format!("#checks-{first} tbody tr")).len(), 4);
    b.screenshot(&shots.join("submission.png"));

    // A finished submission opened afresh shows the same, without a stream.
    b.goto("about:blank");
    open(&b, &format!("{base}/#/submissions/{id}"), "submissions");
    assert_eq!(live_state(&b), "finished");
    assert_eq!(job_rows(&b).len(), 2);
    assert_eq!(b.js("return window.__errors", json!([])), json!([]), "script errors or CSP violations");
}

#[test]
fn submitter_strings_on_a_submission_page_are_text() {
    let Some((chromium, driver)) = chromium_or_skip() else { return };
    let (index, ptx, f) = ui_fixture();
    let (port, url) = serve_db(index, ptx);
    let base = format!("http://127.0.0.1:{port}");
    let shots = screenshot_dir();
    let w = Worker::connect(&url);
    let token = w.token("mallory");
    let description = "<img src=x onerror=\"alert(2)\"> <b>bold</b> claims";
    let id = submit(port, &token, &submission_body("mallory", EVIL, description, &[(256, 256, 256)]));

    let b = watched(Browser::start(&chromium, &driver, 1280, 900));
    open(&b, &format!("{base}/#/submissions/{id}"), "submissions");
    assert_eq!(texts(&b, "#submission-name"), vec![EVIL]);
    assert_eq!(b.js("return document.title", json!([])), json!(format!("{EVIL} · kaas")));
    assert_eq!(texts(&b, "#submission-description"), vec![description]);
    // Its run fails with markup in every string a worker or kernel controls; it arrives
    // over the event stream.
    let job = w.claim("<b>verifying</b>");
    wait_cell(&b, job, 2, "<b>verifying</b>");
    let message = "C[3,4] = 7 <img src=x onerror=alert(3)><script>alert(4)</script>";
    let mut failed = RunOutcome::early(Verdict::ExactMismatch, "<i>binary exact test</i>", message);
    failed.device = Some(crate::submissions::facts(DEVICE));
    failed.checks = vec![check("<u>binary run 1</u>", false, "<a href=\"javascript:alert(5)\">mismatch</a> at C[3,4]", 2.0)];
    w.complete(job, &failed);
    b.wait_for("the finished indicator", "return document.getElementById('live').dataset.state === 'finished'");
    let row = job_rows(&b).remove(0);
    assert_eq!(row[4], "exact_mismatch");
    assert_eq!(row[5], message);
    b.click(&format!("#toggle-{job}"));
    let detail = texts(&b, &format!("#checks-{job} tbody tr td"));
    assert_eq!(detail[1], "<a href=\"javascript:alert(5)\">mismatch</a> at C[3,4]", "{detail:?}");
    assert_eq!(texts(&b, &format!("#checks-{job} tbody th")), vec!["<u>binary run 1</u>"]);
    assert!(texts(&b, &format!("#checks-{job} p.muted"))[0].contains("decided at stage “<i>binary exact test</i>”"));
    let injected = "return document.querySelectorAll('main script, main img, main b, main i, main u, main a[href^=\"javascript\"]').length + window.__dialogs";
    assert_eq!(b.js(injected, json!([])), json!(0), "markup from the submission became elements, or a dialog opened");
    assert_eq!(b.alert_text(), None, "a dialog is open");
    b.screenshot(&shots.join("submission-escaped.png"));

    // The list, from the nav, with the name as text; filtered by submitter from the form.
    then(&b, "submissions", || b.click("a[data-nav='submissions']"));
    assert_eq!(b.js("return document.querySelector('a[data-nav=\"submissions\"]').getAttribute('aria-current')", json!([])), json!("page"));
    let names = texts(&b, "#submissions a.sub-name");
    assert_eq!(names[0], EVIL, "newest first: {names:?}");
    then(&b, "submissions", || b.keys("#filter-submitter", "mallory\u{E007}"));
    assert_eq!(b.js("return location.hash", json!([])), json!("#/submissions?submitter=mallory"));
    assert_eq!(texts(&b, "#submissions tbody tr").len(), 1);
    assert_eq!(texts(&b, "#submissions tbody th"), vec![format!("#{id}")]);
    b.screenshot(&shots.join("submissions.png"));
    open(&b, &format!("{base}/#/submissions?submitter=nobody"), "submissions");
    assert_eq!(texts(&b, "#no-submissions"), vec!["No submissions by nobody."]);

    // The submitter's page lists their latest submissions.
    open(&b, &format!("{base}/#/submitter/mallory"), "submitter");
    assert_eq!(texts(&b, "#latest-submissions tbody th a"), vec![format!("#{id} {EVIL}")]);

    // A problem's ranking links each row to its submission; the catalog's `<script>`
    // submitter's (imported from a bundle) is text there too.
    open(&b, &format!("{base}/#/problem/{}?device={DEVICE}", f.fast.path()), "problem");
    let links: Vec<String> = serde_json::from_value(b.js("return [...document.querySelectorAll('#ranking a.submission')].map(a => a.getAttribute('href'))", json!([]))).unwrap();
    assert_eq!(links.len(), 2, "{links:?}");
    assert!(links.iter().all(|l| l.starts_with("#/submissions/")), "{links:?}");
    then(&b, "submissions", || {
        b.js("document.querySelectorAll('#ranking a.submission')[1].click()", json!([]));
    });
    assert_eq!(texts(&b, "#submission-submitter"), vec![EVIL]);
    assert!(texts(&b, "#submission-name")[0].starts_with(EVIL));
    assert_eq!(live_state(&b), "finished");
    assert_eq!(texts(&b, "#no-jobs").len(), 1, "a bundle's submission has no jobs to show");
    assert_eq!(b.js(injected, json!([])), json!(0));
    assert_eq!(b.js("return window.__errors", json!([])), json!([]), "script errors or CSP violations");
}

// ---- Page weight and time to first render on 2,000 problems ---------------------------

/// 2,000 problems (CUDA-L2's ten extents for M, N and K, nn and tn), each with a
/// catalog entry timed in two modes and three baselines.
fn big_catalog() -> (Index, BTreeMap<String, String>) {
    const EXTENTS: [u32; 10] = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384];
    let texts: Vec<String> = (0..16).map(|i| crate::common::ptx(&format!("big{i}"))).collect();
    let artifacts: Vec<ArtifactRecord> = texts.iter().map(|t| describe(t)).collect();
    let mut index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord { name: DEVICE.into(), model: "NVIDIA H100 80GB HBM3".into(), compute_capability: "9.0".into(), sm_count: Some(132) }],
        problems: vec![],
        artifacts: artifacts.clone(),
        entries: vec![],
        baselines: vec![],
        tunes: vec![],
    };
    let mut i = 0usize;
    for layout in [Layout::Nn, Layout::Tn] {
        for m in EXTENTS {
            for n in EXTENTS {
                for k in EXTENTS {
                    let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
                    index.problems.push(p);
                    let us = 2.0 * m as f64 * n as f64 * k as f64 / 600e6 + 4.0;
                    let speedup = 0.85 + (i % 37) as f64 / 100.0;
                    let who = ["kaas-tuner", "alice", "bob", EVIL][i % 4];
                    index.entries.push(entry(DEVICE, p, &texts[i % texts.len()], who, timed(p, us, speedup)));
                    for (lib, f) in [("cublas", 1.1), ("cublaslt_heuristic", 1.05), ("cublaslt_autotune", 1.0)] {
                        let mut b: BaselineRecord = baseline(p, lib, us * speedup * f);
                        b.layout = layout.to_string();
                        index.baselines.push(b);
                    }
                    i += 1;
                }
            }
        }
    }
    let ptx = artifacts.iter().zip(&texts).map(|(a, t)| (a.sha256.clone(), t.clone())).collect();
    (index, ptx)
}

/// `cargo test --test integration ui::first_render_on_2000_problems -- --ignored --nocapture`
#[test]
#[ignore = "a measurement: run it by name"]
fn first_render_on_2000_problems() {
    let Some((chromium, driver)) = chromium_or_skip() else { return };
    let (index, ptx) = big_catalog();
    assert_eq!(index.problems.len(), 2000);
    let port = serve(index, ptx);
    let base = format!("http://127.0.0.1:{port}");
    // The largest answers, kept to check what compression would save (`gzip -9`).
    for (file, path) in [("problems-2000.json", "/v1/problems"), ("heatmap-2000.json", "/v1/heatmap?layout=tn&k=4096")] {
        let (_, body) = http(port, "GET", path, None).unwrap();
        std::fs::create_dir_all(screenshot_dir()).unwrap();
        std::fs::write(screenshot_dir().join(file), body).unwrap();
    }
    let b = Browser::start(&chromium, &driver, 1280, 1100);
    let pages = [
        ("home", "/#/"),
        ("heatmap", "/#/heatmap?device=H100-SXM&arch=sm_90&acc=f32&layout=tn&k=4096"),
        ("problem", "/#/problem/sm_90/f32/tn/4096x4096x4096?device=H100-SXM"),
        ("leaderboard", "/#/leaderboard"),
        ("submitter", "/#/submitter/alice"),
    ];
    let measure = r#"
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        const first = (name) => { const e = performance.getEntriesByName(name)[0]; return e ? Math.round(e.startTime) : null; };
        const sum = (xs, f) => xs.reduce((a, x) => a + x[f], 0);
        const api = res.filter(r => r.name.includes('/v1/'));
        return { fcp: first('first-contentful-paint'), rendered: first('kaas:rendered'), heatmap: first('kaas:heatmap'),
                 api_ms: Math.round(Math.max(0, ...api.map(r => r.responseEnd - r.startTime))),
                 transfer: nav.transferSize + sum(res, 'transferSize'), decoded: nav.decodedBodySize + sum(res, 'decodedBodySize'),
                 js: sum(res.filter(r => r.name.endsWith('.js')), 'decodedBodySize'), api: sum(api, 'decodedBodySize'),
                 requests: res.length + 1, cells: document.querySelectorAll('#heatmap a.cell').length };"#;
    let lcp = "const done = arguments[arguments.length - 1]; setTimeout(() => done(null), 1000); \
               new PerformanceObserver(l => { const e = l.getEntries(); done(Math.round(e[e.length - 1].startTime)); }) \
               .observe({ type: 'largest-contentful-paint', buffered: true });";
    for (name, path) in pages {
        let mut runs = vec![];
        for round in 0..6 {
            // Cold: an empty browser cache every time (the service's own catalog cache is
            // cold only in round 0: it keeps answers 10 s).
            b.cdp("Network.clearBrowserCache", json!({}));
            b.goto("about:blank");
            open(&b, &format!("{base}{path}"), name);
            let mut m = b.js(measure, json!([]));
            m["lcp"] = b.js_async(lcp, json!([]));
            eprintln!("{name} round {round}: {m}");
            if round == 0 {
                b.screenshot(&screenshot_dir().join(format!("{name}-2000.png")));
            }
            runs.push(m);
        }
        let med = |key: &str| {
            let mut v: Vec<f64> = runs[1..].iter().filter_map(|m| m[key].as_f64()).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        eprintln!(
            "RESULT {name}: round 0 (service cache cold): rendered {} ms, lcp {} ms, api {} ms | median of rounds 1-5: fcp {:?}, rendered {:?}, heatmap {:?}, lcp {:?}, api {:?} ms | {} B transferred, {} B decoded (js {} B, api {} B), {} requests, {} cells",
            runs[0]["rendered"], runs[0]["lcp"], runs[0]["api_ms"], med("fcp"), med("rendered"), med("heatmap"), med("lcp"), med("api_ms"),
            runs[1]["transfer"], runs[1]["decoded"], runs[1]["js"], runs[1]["api"], runs[1]["requests"], runs[1]["cells"]
        );
    }
}
