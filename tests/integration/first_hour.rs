//! A user's first hour with the `kaas` command line, against a real `kaas serve`: which
//! server a command asks, following a request through a pipe, a leaderboard on one
//! device class, a busy port, a folder without the catalog, and what a `baseline_faster`
//! answer in another layout means for the caller.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use actix_web::test::init_service;
use kaas::api::{ApiSettings, create_app};
use kaas::catalog::bundle;

use crate::common::*;
use crate::fleet::{Serve, free_port};

fn kaas(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kaas"));
    cmd.args(args).env_remove("KAAS_URL").env_remove("KAAS_TOKEN").env_remove("KAAS_CONFIG").env_remove("KAAS_CATALOG").env_remove("KAAS_BIND");
    cmd
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// `kaas serve` over a fresh SQLite file holding `dir`'s catalog, ready; and its URL and
/// database URL (for `kaas token create`).
async fn served(dir: &Path, work: &Path) -> (Serve, String, String) {
    let db = format!("sqlite://{}?mode=rwc", work.join("kaas.db").display());
    let mut s = Serve::start(&db, dir, work.join("serve.log"));
    s.wait_ready(Duration::from_secs(60)).await;
    let url = format!("http://127.0.0.1:{}", s.port);
    (s, url, db)
}

#[test]
fn a_command_without_a_url_says_which_server_it_asks() {
    let out = tempfile::tempdir().unwrap();
    let o = out.path().join("k");
    let run = kaas(&["pull", "--problem", "1024x1024x1024", "-o", o.to_str().unwrap()]).output().unwrap();
    let (_, err) = text(&run);
    assert!(err.contains("note: no --url or KAAS_URL given: asking http://127.0.0.1:8080"), "{err}");
    // Named, it is asked without a note (nothing listens on a fresh port: an error naming it).
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let run = kaas(&["pull", "--url", &url, "--problem", "1024x1024x1024", "-o", o.to_str().unwrap()]).output().unwrap();
    let (_, err) = text(&run);
    assert!(!run.status.success());
    assert!(!err.contains("note: no --url"), "{err}");
    assert!(err.contains(&format!("cannot reach {url}")), "{err}");
}

#[actix_web::test]
async fn a_request_followed_through_a_pipe_prints_where_it_stands() {
    let (cat, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_fixture(cat.path(), &fixture());
    let (serve, url, db) = served(cat.path(), work.path()).await;
    let token = kaas(&["token", "create", "--name", "piped", "--database-url", &db]).output().unwrap();
    assert!(token.status.success(), "{:?}", text(&token));
    let token = text(&token).0.trim().to_string();
    // Not a terminal: no bar is drawn, so each change of state is a line.
    let mut child = kaas(&["request", "--url", &url, "--problem", "tn:300x200x100", "--poll-secs", "1"])
        .env("KAAS_TOKEN", &token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().ok();
    child.wait().ok();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("tuning request 1: 1 problem(s) on H100-SXM"), "{err}");
    assert!(err.contains("0/1 problems settled: 1 queued — sm_90/f32/tn/300x200x100 queued (#1 in the queue)"), "{err}");
    assert!(err.contains("no GPU worker for H100-SXM has been seen"), "{err}");
    serve.kill();
}

#[actix_web::test]
async fn a_leaderboard_on_one_device_class_counts_only_that_class() {
    let (cat, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (index, ptx, _) = crate::ui::ui_fixture();
    bundle::write_bundle(cat.path(), &index, &ptx).unwrap();
    let (serve, url, _) = served(cat.path(), work.path()).await;
    let all = kaas(&["leaderboard", "--url", &url]).output().unwrap();
    let (all, err) = text(&all);
    assert!(all.starts_with("submitters on every device class\n"), "{all}{err}");
    assert!(all.contains("alice"), "{all}");
    let h200 = kaas(&["leaderboard", "--url", &url, "--device", "h200"]).output().unwrap();
    let (h200, err) = text(&h200);
    assert!(h200.starts_with("submitters on H200\n"), "{h200}{err}");
    let rows: Vec<&str> = h200.lines().skip(2).collect();
    assert_eq!(rows.len(), 1, "only kaas-tuner holds H200 entries:\n{h200}");
    assert!(rows[0].contains("kaas-tuner") && rows[0].contains("H200"), "{h200}");
    let unknown = kaas(&["leaderboard", "--url", &url, "--device", "Z9000"]).output().unwrap();
    assert!(!unknown.status.success());
    assert!(text(&unknown).1.contains("unknown_device"), "{:?}", text(&unknown));
    serve.kill();
}

#[test]
fn serve_on_a_busy_port_names_the_flag_that_moves_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = taken.local_addr().unwrap().to_string();
    let (cat, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_fixture(cat.path(), &fixture());
    let db = format!("sqlite://{}?mode=rwc", work.path().join("kaas.db").display());
    let run = kaas(&["serve", "--bind", &bind, "--database-url", &db, "--workers", "0", "--catalog", cat.path().to_str().unwrap()]).output().unwrap();
    let (_, err) = text(&run);
    assert!(!run.status.success());
    assert!(err.contains(&format!("cannot listen on {bind}")) && err.contains("--bind HOST:PORT"), "{err}");
}

#[test]
fn serve_away_from_the_catalog_refuses_to_serve_it_empty() {
    let work = tempfile::tempdir().unwrap();
    let run = kaas(&["serve", "--bind", &format!("127.0.0.1:{}", free_port()), "--workers", "0"]).current_dir(work.path()).output().unwrap();
    let (_, err) = text(&run);
    assert!(!run.status.success(), "{err}");
    assert!(err.contains("no catalog to import: there is no `kernels` folder in"), "{err}");
    assert!(err.contains("--catalog PATH"), "{err}");
    // Named on purpose, an empty catalog is served, and a look-up says why it knows no class.
    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let rt = actix_web::rt::System::new();
    rt.block_on(async {
        let db = format!("sqlite://{}?mode=rwc", work.path().join("kaas.db").display());
        let mut s = Serve::start(&db, &empty, work.path().join("serve.log"));
        s.wait_ready(Duration::from_secs(60)).await;
        let (status, body) = s.get("/v1/kernels/sm_90/f32/tn/1024x1024x1024?device=H100").unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("this service's catalog is empty"), "{body}");
        s.kill();
    });
}

#[actix_web::test]
async fn baseline_faster_in_the_other_layout_says_what_it_means_for_the_caller() {
    let db = TestDb::new(Backend::Sqlite).await;
    let f = fixture();
    let (mut index, ptx) = fixture_index(&f);
    // The fastest baseline for the tn problem `slow` stores B as K×N (nn).
    let mut nn = baseline(f.slow, "cublaslt_autotune", 6.0);
    nn.layout = "nn".into();
    index.baselines.push(nn);
    let dir = tempfile::tempdir().unwrap();
    bundle::write_bundle(dir.path(), &index, &ptx).unwrap();
    kaas::catalog::seed::seed(&db.db, dir.path()).await.unwrap();
    let app = init_service(create_app(state(&db, ApiSettings::default()))).await;
    let j = get(&app, &format!("/v1/kernels/{}?device={DEVICE}", f.slow.path())).await.assert_problem(404, "baseline_faster");
    let detail = j["detail"].as_str().unwrap();
    assert!(detail.contains("use cublaslt_autotune (nn layout"), "{detail}");
    assert!(detail.contains("a tn caller (an N×K weight, as nn.Linear's) gets it by keeping the weight transposed once"), "{detail}");
    // The other way round: the nn problem `bare` has only a tn baseline.
    let j = get(&app, &format!("/v1/kernels/{}?device={DEVICE}", f.bare.path())).await.assert_problem(404, "kernel_not_found");
    assert!(j["detail"].as_str().unwrap().contains("so an nn caller (a K×N B) gets it by keeping B transposed once"), "{j}");
}
