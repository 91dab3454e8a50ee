//! The H200 grid catalog's build (scripts/h200-catalog.py) on a synthetic catalog tree:
//! what a plan picks, what `adopt` keeps of returned batches (the catalog only improves),
//! and what the service answers on H200 once the tree is imported. Needs python3 (the
//! test says SKIPPED without it).

use std::path::{Path, PathBuf};
use std::process::Command;

use actix_web::test;
use kaas::api::{ApiSettings, create_app};
use kaas::catalog::bundle::{self, BaselineRecord, DeviceClassRecord, EntryRecord, Index, RunRecord, TuneRecord};
use kaas::problem::{Layout, Problem};
use serde_json::{Value, json};

use crate::common::*;

const H200: &str = "H200";

/// Runs the helper (scripts/h200-catalog.py); its output, or a panic with it.
fn helper(args: &[&str]) -> String {
    run_script("h200-catalog.py", args)
}

fn run_script(name: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name);
    let out = Command::new("python3").arg(script).args(args).env("KAAS_BIN", env!("CARGO_BIN_EXE_kaas")).env("PYTHONDONTWRITEBYTECODE", "1").output().expect("python3");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} {}: {text}", args.join(" "));
    text
}

fn has_python() -> bool {
    Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// An H200 run as the workers record it: figures in the ranked regime (L2-cold) and the
/// one shown beside, `speedup` over every baseline.
fn ranked(median_us: f64, speedup: f64, day: u32) -> RunRecord {
    let figures = |us: f64| json!({"timings": {"graph": {"median_us": us, "ci95_low_us": us - 1.0, "ci95_high_us": us + 1.0}}, "speedups": {"graph": {"cublas_max": speedup, "cublaslt_heuristic_max": speedup, "cublaslt_autotune_max": speedup}}});
    RunRecord {
        measured_at: when(day),
        regime: Some("l2_cold".into()),
        regimes: Some(json!({"l2_cold": figures(median_us), "l2_warm": figures(median_us * 0.9)})),
        device: Some(json!({"model": "NVIDIA H200"})),
        ..measured(median_us, speedup)
    }
}

fn h200_baseline(p: Problem, median_us: f64, day: u32) -> BaselineRecord {
    BaselineRecord { device_class: H200.into(), measured_at: when(day), ..baseline(p, "cublaslt_autotune", median_us) }
}

/// A returned batch, as `device-run.sh h200` exports it: H200 entries of `(problem, PTX,
/// run)`, baselines, tunes, and the kernels that failed verification (failed.tsv rows).
fn batch(dir: &Path, entries: &[(Problem, &str, RunRecord)], baselines: Vec<BaselineRecord>, tunes: Vec<TuneRecord>, failed: &[String]) -> PathBuf {
    let mut ptx = std::collections::BTreeMap::new();
    let mut artifacts = vec![];
    let entries: Vec<EntryRecord> = entries
        .iter()
        .map(|(p, text, run)| {
            let a = bundle::describe_ptx(text.as_bytes()).unwrap();
            ptx.insert(a.sha256.clone(), text.to_string());
            if !artifacts.iter().any(|x: &bundle::ArtifactRecord| x.sha256 == a.sha256) {
                artifacts.push(a.clone());
            }
            EntryRecord {
                device_class: H200.into(),
                problem: *p,
                artifact: a.sha256,
                submitter: "kaas-tuner".into(),
                name: format!("kernel-{}", p.shape()),
                description: "measured on an H200".into(),
                manifest: manifest(*p),
                run: run.clone(),
            }
        })
        .collect();
    let mut problems: Vec<Problem> = entries.iter().map(|e| e.problem).chain(baselines.iter().map(|b| b.problem)).chain(tunes.iter().map(|t| t.problem)).collect();
    problems.sort();
    problems.dedup();
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord { name: H200.into(), model: "NVIDIA H200".into(), compute_capability: "9.0".into(), sm_count: Some(132) }],
        problems,
        artifacts,
        entries,
        baselines,
        tunes,
    };
    bundle::write_bundle(dir, &index, &ptx).unwrap();
    let mut tsv = "layout\tm\tn\tk\tartifact\tverdict\tmeasured_at\tmessage\n".to_string();
    for row in failed {
        tsv += row;
        tsv += "\n";
    }
    std::fs::write(dir.join("failed.tsv"), tsv).unwrap();
    dir.to_path_buf()
}

fn sha(text: &str) -> String {
    kaas::signing::sha256_hex(text.as_bytes())
}

fn plan(tree: &Path, seconds: &str, out: &Path) -> Value {
    plan_with(tree, seconds, out, &[])
}

fn plan_with(tree: &Path, seconds: &str, out: &Path, more: &[&str]) -> Value {
    let mut args = vec!["plan", "--catalog", tree.to_str().unwrap(), "--gpus", "1", "--seconds", seconds, "--job-seconds", "1", "--tune-seconds", "1", "--out", out.to_str().unwrap()];
    args.extend_from_slice(more);
    helper(&args);
    serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap()
}

fn problem_of(job: &Value) -> Problem {
    serde_json::from_value(job["problem"].clone()).unwrap()
}

#[actix_web::test]
async fn the_h200_catalog_is_built_batch_by_batch_and_only_improves() {
    if !has_python() {
        crate::skipped!("no python3");
        return;
    }
    // The tree: the fixture as kernels/h100 (H100-SXM: `fast` wins, `slow` loses,
    // `unbenchmarked` was never timed, `bare` has baselines only), no kernels/h200 yet.
    let f = fixture();
    let root = tempfile::tempdir().unwrap();
    let tree = root.path().join("kernels");
    write_fixture(&tree.join("h100"), &f);
    let h200 = tree.join("h200");

    // The first plan: the H100 winner first; one GPU for two seconds at a second a job.
    let first = plan(&tree, "2", &root.path().join("plan1"));
    let jobs = first["kernels"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{first}");
    assert_eq!(problem_of(&jobs[0]), f.fast, "{first}");
    assert_eq!(jobs[0]["manifest"], serde_json::to_value(manifest(f.fast)).unwrap());
    assert!(root.path().join("plan1/ptx").join(format!("{}.ptx", sha(&f.ptx_fast))).exists());
    assert_eq!(first["tunes"], json!([]), "no time is left for tunes");

    // Batch 1: the H100 kernel wins on the H200 too (1.2), a tune of `bare` ended
    // baseline_faster, and the `slow` kernel failed verification there.
    let tune = baseline_faster_tune(H200, f.bare, 21);
    let failed = format!("tn\t64\t64\t64\t{}\texact_mismatch\t2026-11-21T12:00:00Z\tC[3,7] wrong", sha(&f.ptx_slow));
    let b1 = batch(&root.path().join("b1"), &[(f.fast, &f.ptx_fast, ranked(800.0, 1.2, 21))], vec![h200_baseline(f.fast, 960.0, 21), h200_baseline(f.bare, 5.0, 21)], vec![tune], &[failed]);
    helper(&["adopt", b1.to_str().unwrap(), "--catalog", tree.to_str().unwrap()]);
    let (index, _) = bundle::read_bundle(&h200).unwrap();
    assert_eq!(index.entries.iter().map(|e| e.problem).collect::<Vec<_>>(), vec![f.fast]);
    assert_eq!(index.tunes.iter().map(|t| t.problem).collect::<Vec<_>>(), vec![f.bare]);
    assert!(std::fs::read_to_string(h200.join("failed.tsv")).unwrap().contains(&sha(&f.ptx_slow)));

    // What is left: the unbenchmarked H100 kernel; `slow` (its kernel failed there) and
    // every problem without an H100 kernel go to tunes; `fast` and `bare` are answered.
    let second = plan(&tree, "100000", &root.path().join("plan2"));
    let kernels: Vec<Problem> = second["kernels"].as_array().unwrap().iter().map(problem_of).collect();
    assert_eq!(kernels, vec![f.unbenchmarked], "{}", second["kernels"]);
    let tunes: Vec<&str> = second["tunes"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(tunes.contains(&f.slow.path().as_str()), "{tunes:?}");
    assert!(!tunes.contains(&f.bare.path().as_str()) && !tunes.contains(&f.fast.path().as_str()));
    assert_eq!(tunes.len(), 2000 - 3, "the grid less the answered and the planned kernel");

    // Batch 2 measured another kernel for `fast`, slower (1.1): kept out. Batch 3's is
    // faster (1.3): it replaces the entry.
    let b2 = batch(&root.path().join("b2"), &[(f.fast, &f.ptx_slow, ranked(850.0, 1.1, 22))], vec![h200_baseline(f.fast, 935.0, 22)], vec![], &[]);
    helper(&["adopt", b2.to_str().unwrap(), "--catalog", tree.to_str().unwrap()]);
    assert_eq!(bundle::read_bundle(&h200).unwrap().0.entries[0].artifact, sha(&f.ptx_fast), "a slower kernel replaced the entry");
    let b3 = batch(&root.path().join("b3"), &[(f.fast, &f.ptx_slow, ranked(700.0, 1.3, 23))], vec![h200_baseline(f.fast, 910.0, 23)], vec![], &[]);
    helper(&["adopt", b3.to_str().unwrap(), "--catalog", tree.to_str().unwrap()]);
    let (index, ptx) = bundle::read_bundle(&h200).unwrap();
    assert_eq!(index.entries[0].artifact, sha(&f.ptx_slow), "the faster kernel did not replace the entry");
    assert_eq!(ptx.keys().cloned().collect::<Vec<_>>(), vec![sha(&f.ptx_slow)], "PTX no entry uses stays behind");
    // The failed kernel stays listed while its problem has no answer.
    assert!(std::fs::read_to_string(h200.join("failed.tsv")).unwrap().contains(&sha(&f.ptx_slow)));

    // kernels/h200 is canonical, as every shipped bundle: an import gives its index back.
    let db = TestDb::new(Backend::Sqlite).await;
    bundle::import(&db.db, &h200).await.unwrap();
    let (back, _) = bundle::snapshot(&db.db).await.unwrap();
    assert!(bundle::index_text(&index).unwrap() == bundle::index_text(&back).unwrap(), "kernels/h200 does not round-trip");
    db.cleanup().await;

    // The tree as a service imports it: H200's own answers, no H100 stand-in for them.
    let db = TestDb::new(Backend::Sqlite).await;
    kaas::catalog::seed::seed(&db.db, &tree).await.unwrap();
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let k = get(&app, &format!("/v1/kernels/{}?device=H200", f.fast.path())).await.json();
    assert_eq!((&k["device_class"], &k["measured_on"]), (&json!(H200), &json!(H200)), "{k}");
    assert!(k.get("fallback").is_none(), "{k}");
    let e = get(&app, &format!("/v1/kernels/{}?device=H200", f.bare.path())).await.assert_problem(404, "baseline_faster");
    assert!(e.get("fallback").is_none(), "{e}");
    assert_eq!(e["tuning"]["state"], "baseline_faster");
    let listed = get(&app, "/v1/problems?device=H200").await.json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    db.cleanup().await;

    // A small grid problem won by a kernel that no H200 tune searched: only --improve plans
    // it again (adopt keeps a tune's kernel only where it is faster), and `fast`, won too,
    // is not small enough to be planned.
    let small = problem(128, 64, 64, Layout::Tn);
    let b4 = batch(&root.path().join("b4"), &[(small, &f.ptx_fast, ranked(4.0, 1.2, 24))], vec![h200_baseline(small, 4.8, 24)], vec![], &[]);
    helper(&["adopt", b4.to_str().unwrap(), "--catalog", tree.to_str().unwrap()]);
    let plain = plan(&tree, "100000", &root.path().join("plan3"));
    assert_eq!(plain["retunes"], json!([]), "{}", plain["retunes"]);
    let improve = plan_with(&tree, "100000", &root.path().join("plan4"), &["--improve"]);
    assert_eq!(improve["retunes"], json!([small.path()]), "{}", improve["retunes"]);

    // A workload bundle's first adoption (kernels/h200-workloads): no bundle yet, so it
    // starts empty; the grid's problem stays the grid's, the other is taken. The request's
    // export also carries the shipped H100 figures for its problem: they stay out.
    let off_grid = problem(48, 64, 64, Layout::Tn);
    let request = batch(&root.path().join("request"), &[(small, &f.ptx_fast, ranked(4.0, 1.3, 25)), (off_grid, &f.ptx_fast, ranked(3.0, 1.2, 25))],
                        vec![h200_baseline(off_grid, 3.6, 25)], vec![], &[]);
    let (mut index, ptx) = bundle::read_bundle(&request).unwrap();
    let h100_entry = EntryRecord { device_class: DEVICE.into(), artifact: bundle::describe_ptx(f.ptx_slow.as_bytes()).unwrap().sha256, ..index.entries[1].clone() };
    index.baselines.push(BaselineRecord { device_class: DEVICE.into(), ..index.baselines[0].clone() });
    index.entries.push(h100_entry);
    index.artifacts.push(bundle::describe_ptx(f.ptx_slow.as_bytes()).unwrap());
    index.device_classes.push(DeviceClassRecord { name: DEVICE.into(), model: "NVIDIA H100 80GB HBM3".into(), ..index.device_classes[0].clone() });
    let mut ptx = ptx;
    ptx.insert(sha(&f.ptx_slow), f.ptx_slow.clone());
    bundle::write_bundle(&request, &index, &ptx).unwrap();
    let (out, missing) = (root.path().join("workloads-out"), root.path().join("h200-workloads"));
    let args = [out.to_str().unwrap(), h200.to_str().unwrap(), missing.to_str().unwrap(), request.to_str().unwrap()];
    run_script("workload-adopt.py", &args);
    let index: Value = serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap()).unwrap();
    let taken: Vec<Problem> = index["entries"].as_array().unwrap().iter().map(|e| serde_json::from_value(e["problem"].clone()).unwrap()).collect();
    assert_eq!(taken, vec![off_grid], "{index}");
    let classes: std::collections::BTreeSet<&str> = ["entries", "baselines"].iter().flat_map(|part| index[part].as_array().unwrap()).map(|x| x["device_class"].as_str().unwrap()).collect();
    assert_eq!(classes, [H200].into(), "{index}");
    assert_eq!(index["device_classes"].as_array().unwrap().len(), 1, "{index}");
    assert!(!out.join("ptx").join(format!("{}.ptx", sha(&f.ptx_slow))).exists(), "the H100 entry's PTX came along");
}
