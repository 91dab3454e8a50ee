//! `kaas run`: one kernel (PTX + manifest) verified — and with `--bench`, benchmarked
//! side by side with cuBLAS and cuBLASLt — on this machine's GPU, in a `kaas sandbox`
//! child process exactly as a worker runs it. Prints a readable table, or the outcome
//! as JSON.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::harness::{BenchSettings, Job, RunOutcome};
use crate::bench::stats::Mode;
use crate::manifest::Manifest;
use crate::verify::Verdict;

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The kernel's PTX.
    #[arg(long)]
    pub ptx: PathBuf,
    /// Its `kaas.hgemm.v1` launch manifest (JSON); its problem is the one judged.
    #[arg(long)]
    pub manifest: PathBuf,
    /// After verification passes, time it against cuBLAS and cuBLASLt.
    #[arg(long)]
    pub bench: bool,
    /// Time limit of the side-by-side rounds, in ms.
    #[arg(long, default_value_t = 3000)]
    pub budget_ms: u64,
    /// Modes to time, comma-separated: graph, offline, server.
    #[arg(long, value_delimiter = ',', default_value = "graph,offline")]
    pub modes: Vec<String>,
    /// The fewest buffer sets of the L2-cold rotation (it takes more where it must, to
    /// span twice the L2 cache; at least 2).
    #[arg(long, default_value_t = 3)]
    pub sets: usize,
    /// Print the outcome as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    pub fn job(&self) -> anyhow::Result<Job> {
        let ptx = std::fs::read_to_string(&self.ptx).with_context(|| format!("reading {}", self.ptx.display()))?;
        let text = std::fs::read_to_string(&self.manifest).with_context(|| format!("reading {}", self.manifest.display()))?;
        let manifest: Manifest = serde_json::from_str(&text).with_context(|| format!("parsing {}", self.manifest.display()))?;
        let bench = if self.bench {
            let modes = crate::cli::baselines::parse_modes(&self.modes)?;
            let s = BenchSettings { modes, budget_ms: self.budget_ms, sets: self.sets.max(2), ..BenchSettings::default() };
            Some(serde_json::to_value(s)?)
        } else {
            None
        };
        Ok(Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench })
    }
}

/// Runs the command; the exit status is a failure unless the verdict is `pass`.
pub fn run_cli(args: RunArgs) -> anyhow::Result<()> {
    let job = args.job()?;
    let started = Instant::now();
    let outcome = crate::sandbox::run_in_sandbox(&job, job.wall_limit());
    let wall = started.elapsed();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print!("{}", table(&job, &outcome, wall));
    }
    if outcome.verdict != Verdict::Pass {
        anyhow::bail!("verdict {}", outcome.verdict);
    }
    Ok(())
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN)
}

/// The readable result: verdict, stage, message, then per mode the candidate's timing and
/// its speedup over every baseline (> 1: the candidate is faster).
pub fn table(job: &Job, o: &RunOutcome, wall: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "problem  {}", job.manifest.problem);
    let _ = writeln!(s, "verdict  {}", o.verdict);
    let _ = writeln!(s, "stage    {}", o.stage);
    let _ = writeln!(s, "message  {}", o.message.replace('\n', "\n         "));
    if let Some(d) = &o.device {
        let _ = writeln!(s, "device   {} ({}), driver {}, CUDA {}, cuBLAS {}", d.name, d.device_class, d.driver_version.as_deref().unwrap_or("?"), d.cuda_driver_api_version, d.cublas_version);
    }
    let _ = writeln!(s, "run      {:.2} s wall (sandbox reported {:.0} ms)", wall.as_secs_f64(), o.duration_ms);
    let Some(b) = &o.bench else { return s };
    let _ = writeln!(
        s,
        "bench    {} rounds, {}, {:.0} ms timing; re-check: {}",
        b["rounds"],
        if b["converged"].as_bool() == Some(true) { "converged to the target" } else { "NOT converged (budget spent)" },
        num(b, "elapsed_ms"),
        b["recheck"]["detail"].as_str().unwrap_or("-")
    );
    match b["regimes"].as_object() {
        Some(regimes) => {
            for (name, r) in regimes {
                let ranked = if b["regime"] == name.as_str() { ", ranked" } else { "" };
                let _ = writeln!(
                    s,
                    "\n== {name}{ranked}: {} buffer set(s), {:.1}× the L2 cache ({}), {} launches a sample",
                    r["buffer_sets"],
                    num(r, "l2_multiple"),
                    r["cache"].as_str().unwrap_or("?"),
                    r["launches_per_sample"]
                );
                mode_tables(&mut s, r);
            }
        }
        None => mode_tables(&mut s, b),
    }
    s
}

/// Per mode: the candidate's median and every baseline with the candidate's speedup.
fn mode_tables(s: &mut String, b: &serde_json::Value) {
    for mode in Mode::ALL {
        let Some(t) = b["timings"].get(mode.as_str()) else { continue };
        let _ = writeln!(s, "\n[{}] candidate: median {:.2} µs (95% CI {:.2}–{:.2}), {:.1} TFLOP/s", mode.as_str(), num(t, "median_us"), num(t, "ci95_low_us"), num(t, "ci95_high_us"), num(t, "tflops"));
        let _ = writeln!(s, "  {:<22} {:>12} {:>10} {:>10}", "baseline", "median µs", "TFLOP/s", "speedup");
        let sp = &b["speedups"][mode.as_str()];
        for base in b["baselines"].as_array().into_iter().flatten().filter(|x| x["mode"] == mode.as_str()) {
            let key = format!("{}_{}", base["library"].as_str().unwrap_or("?"), base["layout"].as_str().unwrap_or("?"));
            let _ = writeln!(s, "  {:<22} {:>12.2} {:>10.1} {:>9.3}×", key, num(&base["timing"], "median_us"), num(&base["timing"], "tflops"), num(sp, &key));
        }
        for lib in crate::harness::runner::Library::ALL {
            let key = format!("{}_max", lib.as_str());
            let _ = writeln!(s, "  {:<22} {:>12} {:>10} {:>9.3}×", key, "", "", num(sp, &key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Layout, Problem, Shape};

    #[test]
    fn the_table_shows_the_verdict_and_every_baseline_speedup() {
        let p = Problem::new(Arch::Sm80, Acc::F32, Layout::Tn, Shape::new(256, 256, 256).expect("shape"));
        let job = Job { ptx: String::new(), manifest: manifest_for(&p, &SimpleConfig::SMALL), secret_seed: 1, watchdog_ms: None, bench: None };
        let mut o = RunOutcome::early(Verdict::Pass, "verification", "passed");
        let t = serde_json::json!({"median_us": 10.0, "ci95_low_us": 9.9, "ci95_high_us": 10.1, "tflops": 3.3});
        o.bench = Some(serde_json::json!({
            "timings": {"graph": t}, "rounds": 12, "converged": true, "elapsed_ms": 50.0,
            "recheck": {"detail": "ok"},
            "baselines": [{"library": "cublas", "layout": "tn", "mode": "graph", "timing": {"median_us": 5.0, "tflops": 6.6}}],
            "speedups": {"graph": {"cublas_tn": 0.5, "cublas_max": 0.5}},
        }));
        let text = table(&job, &o, Duration::from_millis(1500));
        assert!(text.contains("verdict  pass"), "{text}");
        assert!(text.contains("[graph] candidate: median 10.00 µs"), "{text}");
        assert!(text.contains("cublas_tn") && text.contains("0.500×"), "{text}");
        assert!(!text.contains("[offline]"), "{text}");
        let plain = table(&job, &RunOutcome::early(Verdict::Timeout, "sandbox", "killed"), Duration::ZERO);
        assert!(plain.contains("verdict  timeout") && !plain.contains("candidate"), "{plain}");
    }

    #[test]
    fn each_regime_gets_its_own_table_named_and_the_ranked_one_marked() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(256, 256, 256).expect("shape"));
        let job = Job { ptx: String::new(), manifest: manifest_for(&p, &SimpleConfig::SMALL), secret_seed: 1, watchdog_ms: None, bench: None };
        let mut o = RunOutcome::early(Verdict::Pass, "verification", "passed");
        let t = |us: f64| serde_json::json!({"median_us": us, "ci95_low_us": us, "ci95_high_us": us, "tflops": 1.0});
        let regime = |us: f64, sets: u32, multiple: f64, cache: &str| serde_json::json!({
            "timings": {"graph": t(us)}, "buffer_sets": sets, "l2_multiple": multiple, "cache": cache, "launches_per_sample": sets,
            "baselines": [], "speedups": {"graph": {"cublaslt_autotune_max": 10.0 / us}},
        });
        o.bench = Some(serde_json::json!({
            "timings": {"graph": t(12.5)}, "rounds": 12, "converged": true, "elapsed_ms": 50.0, "recheck": {"detail": "ok"},
            "regime": "l2_cold",
            "regimes": {"l2_cold": regime(12.5, 800, 2.0, "l2_cold"), "l2_warm": regime(8.0, 1, 0.01, "l2_warm")},
        }));
        let text = table(&job, &o, Duration::from_millis(10));
        assert!(text.contains("== l2_cold, ranked: 800 buffer set(s), 2.0× the L2 cache (l2_cold)"), "{text}");
        assert!(text.contains("== l2_warm: 1 buffer set(s)"), "{text}");
        assert!(text.contains("median 12.50 µs") && text.contains("median 8.00 µs"), "{text}");
        assert!(text.contains("0.800×") && text.contains("1.250×"), "{text}");
    }
}
