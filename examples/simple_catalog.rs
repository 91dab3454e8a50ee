//! Builds a catalog bundle holding the simple HGEMM kernel (kernels/templates/
//! simple_hgemm.cu, compiled here with NVRTC) for a few problems. Each entry's run is
//! written from a verification report that `tests/gpu.rs`
//! (`the_shipped_catalog_kernels_are_correct`) printed on the device: it carries no
//! timings, because that test times nothing.
//!
//! cargo run --example simple_catalog -- OUT_DIR REPORT.json
//! REPORT.json: {"device_class", "model", "compute_capability", "sm_count", "measured_at",
//!               "device": {...}, "results": {"<problem path>": "<message>"}}

use std::collections::BTreeMap;
use std::path::PathBuf;

use kaas::catalog::bundle::{self, DeviceClassRecord, EntryRecord, Index, RunRecord};
use kaas::kernels::{self, SimpleConfig};
use kaas::problem::{Acc, Arch, Layout, Problem, Shape};

/// The problems the simple kernel is shipped for: small enough for an exact CPU reference.
pub fn shipped_problems() -> Vec<Problem> {
    let mut out = vec![];
    for (m, n, k) in [(1024, 1024, 1024), (2048, 2048, 2048)] {
        for layout in [Layout::Nn, Layout::Tn] {
            out.push(Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("valid shape")));
        }
    }
    out
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, out, report] = &args[..] else {
        anyhow::bail!("usage: simple_catalog OUT_DIR REPORT.json");
    };
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(report)?)?;
    let text = |k: &str| report[k].as_str().map(str::to_string).ok_or_else(|| anyhow::anyhow!("report lacks `{k}`"));
    let device_class = text("device_class")?;
    let measured_at = text("measured_at")?.parse()?;
    let mut ptx = BTreeMap::new();
    let mut entries = vec![];
    let mut artifacts = vec![];
    for p in shipped_problems() {
        let Some(message) = report["results"][p.path()].as_str() else {
            eprintln!("{}: not verified in the report; left out", p.path());
            continue;
        };
        let config = SimpleConfig::LARGE;
        let text = kernels::compile_simple(&p, &config)?;
        let rec = bundle::describe_ptx(text.as_bytes()).map_err(anyhow::Error::msg)?;
        if !artifacts.contains(&rec) {
            artifacts.push(rec.clone());
        }
        ptx.insert(rec.sha256.clone(), text);
        entries.push(EntryRecord {
            device_class: device_class.as_str().into(),
            problem: p,
            artifact: rec.sha256,
            submitter: "kaas".into(),
            name: "simple-mma-128x128x32".into(),
            description: "mma.sync m16n8k16 with ldmatrix and two shared-memory stages; a correct starting point, not tuned".into(),
            manifest: kernels::manifest_for(&p, &config),
            run: RunRecord {
                verdict: "pass".into(),
                message: message.to_string(),
                measured_at,
                timings: None,
                speedups: None,
                regime: None,
                regimes: None,
                device: Some(report["device"].clone()),
            },
        });
    }
    artifacts.sort();
    entries.sort_by(|a, b| (a.problem, &a.device_class).cmp(&(b.problem, &b.device_class)));
    let mut problems: Vec<Problem> = entries.iter().map(|e| e.problem).collect();
    problems.sort();
    let index = Index {
        format: bundle::FORMAT.into(),
        device_classes: vec![DeviceClassRecord {
            name: device_class,
            model: text("model")?,
            compute_capability: text("compute_capability")?,
            sm_count: report["sm_count"].as_i64().map(|n| n as i32),
        }],
        problems,
        artifacts,
        entries,
        baselines: vec![],
        tunes: vec![],
    };
    let out = PathBuf::from(out);
    bundle::write_bundle(&out, &index, &ptx)?;
    println!("wrote {} entries to {}", index.entries.len(), out.display());
    Ok(())
}
