//! The parts of the pipeline that need no GPU: the static stage (manifest, PTX, ptxas,
//! device limits from the device's facts), the failure type every stage returns, the
//! check log, and the choice of outputs the deviation test compares.

use std::time::Instant;

use super::{CheckReport, Job, PtxasSummary};
use crate::gpu::DeviceFacts;
use crate::problem::Arch;
use crate::ptx::ptxas::{self, PtxasError};
use crate::ptx::{self, DeviceLimits, PtxVersion, StaticLimits};
use crate::verify::Verdict;

/// How a stage failed: the verdict, the stage, and the message for the kernel's author.
#[derive(Debug, Clone, PartialEq)]
pub struct StageFailure {
    pub verdict: Verdict,
    pub stage: String,
    pub message: String,
}

impl StageFailure {
    pub fn new(verdict: Verdict, stage: impl Into<String>, message: impl Into<String>) -> StageFailure {
        StageFailure { verdict, stage: stage.into(), message: message.into() }
    }

    /// A launch hung or faulted: the process's device is unusable.
    pub fn device_lost(&self) -> bool {
        matches!(self.verdict, Verdict::Timeout | Verdict::Crashed)
    }
}

/// The checks that ran, in order, with their durations.
#[derive(Debug, Default)]
pub struct CheckLog {
    pub checks: Vec<CheckReport>,
}

impl CheckLog {
    /// Runs one check: `f` returns a detail line on success. Either way it is logged.
    pub fn run<T>(&mut self, name: impl Into<String>, f: impl FnOnce() -> Result<(T, String), StageFailure>) -> Result<T, StageFailure> {
        let started = Instant::now();
        let result = f();
        let duration_ms = started.elapsed().as_secs_f64() * 1e3;
        let (passed, detail) = match &result {
            Ok((_, detail)) => (true, detail.clone()),
            Err(f) => (false, f.message.clone()),
        };
        self.checks.push(CheckReport { name: name.into(), passed, detail, duration_ms });
        result.map(|(value, _)| value)
    }
}

/// The newest PTX ISA a driver implementing CUDA `cuda` (e.g. `13.0`) JIT-compiles.
/// Unknown or unreadable versions get the newest this table knows.
pub fn max_ptx_version_for_driver(cuda: &str) -> PtxVersion {
    let parsed = cuda.split_once('.').and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    let v = |major, minor| PtxVersion { major, minor };
    match parsed {
        Some((11, minor)) => v(7, minor.min(8)),
        Some((12, minor)) => match minor {
            0..=5 => v(8, minor),
            6 => v(8, 5),
            7 => v(8, 6),
            8 => v(8, 7),
            _ => v(8, 8),
        },
        Some((13, minor)) => v(9, minor.min(1)),
        Some((major, _)) if major < 11 => v(7, 0),
        _ => v(9, 0),
    }
}

/// The target ptxas assembles for: arch-specific PTX as its own target (`sm_90a`, also
/// when filed under `sm_90`), plain PTX as the device it will be JIT-compiled for (`sm_90`
/// on an H100).
pub fn ptxas_arch(arch: Arch, cc: (u32, u32), ptx: &str) -> String {
    let specific = ptx
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(".target"))
        .and_then(|rest| rest.split([',', ' ', '\t']).map(str::trim).find(|t| !t.is_empty()))
        .filter(|t| t.starts_with("sm_") && t.ends_with('a'))
        .map(str::to_string);
    match specific {
        Some(t) => t,
        None if arch.as_str().ends_with('a') => arch.as_str().to_string(),
        None => format!("sm_{}{}", cc.0, cc.1),
    }
}

/// The launch limits of the device behind `facts`. Block, grid and register limits are
/// the same on every GPU served (compute capability 8.0 and later).
pub fn device_limits(facts: &DeviceFacts) -> DeviceLimits {
    DeviceLimits {
        max_threads_per_block: facts.max_threads_per_block,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as u32, 65_535, 65_535],
        max_shared_mem_per_block: facts.max_shared_mem_per_block_optin as u64,
        max_registers_per_block: 65_536,
        max_cluster_blocks: if facts.compute_capability >= (9, 0) { 16 } else { 1 },
    }
}

const STATIC: &str = "static";

/// The static stage: manifest, the target against the device, the PTX header and entry
/// signatures against the manifest, ptxas (skipped where there is none), and the device
/// limits (with ptxas's registers and static shared memory where it ran).
pub fn static_checks(job: &Job, facts: &DeviceFacts, log: &mut CheckLog) -> Result<Option<PtxasSummary>, StageFailure> {
    let manifest = &job.manifest;
    let arch = manifest.problem.arch;
    log.run("manifest", || {
        manifest.validate().map_err(|e| StageFailure::new(Verdict::StaticInvalid, STATIC, format!("manifest: {e}")))?;
        Ok(((), format!("{} launch(es) for {}", manifest.launches.len(), manifest.problem)))
    })?;
    log.run("target", || {
        if arch.runs_on(facts.cc()) {
            Ok(((), format!("{arch} runs on {} (compute capability {:?})", facts.name, facts.cc())))
        } else {
            Err(StageFailure::new(
                Verdict::StaticInvalid,
                STATIC,
                format!("arch {arch} cannot run on this worker's {} (compute capability {}.{})", facts.name, facts.cc().0, facts.cc().1),
            ))
        }
    })?;
    let limits = StaticLimits { max_version: max_ptx_version_for_driver(&facts.cuda_driver_api_version), ..StaticLimits::default() };
    log.run("ptx", || {
        let info = ptx::check(job.ptx.as_bytes(), manifest, &limits)
            .map_err(|e| StageFailure::new(Verdict::StaticInvalid, STATIC, format!("PTX: {e}")))?;
        Ok(((), format!("PTX ISA {}, .target {}, {} entr(ies); every launch matches its entry", info.version, info.target, info.entries.len())))
    })?;
    let target = ptxas_arch(arch, facts.cc(), &job.ptx);
    let summary = log.run("ptxas", || match ptxas::check(&job.ptx, &target) {
        Ok(report) => {
            let detail = format!("assembled for {target}: {}", resources_line(&report.functions));
            Ok((Some(PtxasSummary { arch: target.clone(), functions: report.functions, log: report.log }), detail))
        }
        // A ptxas older than the driver cannot judge a newer ISA: that is this machine's
        // limitation, not the kernel's fault.
        Err(PtxasError::Rejected { log }) if log.contains("Unsupported .version") => {
            Ok((None, format!("skipped: this worker's ptxas is older than the PTX ISA ({})", first_line(&log))))
        }
        Err(e) => match e.clone().into_static_error() {
            Some(err) => Err(StageFailure::new(Verdict::StaticInvalid, STATIC, format!("{err}"))),
            None => Ok((None, format!("skipped: {e}"))),
        },
    })?;
    let report = summary.as_ref().map(|s| ptxas::PtxasReport { functions: s.functions.clone(), log: String::new() });
    log.run("device limits", || {
        ptx::check_device_limits(manifest, report.as_ref(), &device_limits(facts))
            .map_err(|e| StageFailure::new(Verdict::StaticInvalid, STATIC, format!("{e} on {}", facts.name)))?;
        Ok(((), format!("grid, block, cluster and shared memory fit {}", facts.name)))
    })?;
    Ok(summary)
}

fn resources_line(functions: &[ptxas::FunctionResources]) -> String {
    let entries: Vec<String> = functions
        .iter()
        .filter(|f| f.entry)
        .map(|f| format!("`{}` {} registers, {} B spilled, {} B static shared", f.name, f.registers, f.spill_store_bytes, f.shared_mem_bytes))
        .collect();
    if entries.is_empty() { "no entry resources reported".into() } else { entries.join("; ") }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

/// Multiply-adds the fp16 chain model of the deviation bound (`acc = f16`) may spend:
/// all of C up to this, a sample beyond.
pub const DEVIATION_FULL_MACS: u64 = 1 << 31;

/// `C[row][col]` of a row-major index.
pub fn cell(index: usize, n: u32) -> String {
    let n = n.max(1) as usize;
    format!("C[{}][{}]", index / n, index % n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Layout, Problem, Shape};

    fn facts(cc: (u32, u32), cuda: &str) -> DeviceFacts {
        DeviceFacts {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            device_class: "H100-SXM".into(),
            compute_capability: cc,
            sm_count: 132,
            max_shared_mem_per_block_optin: 232_448,
            max_shared_mem_per_sm: 233_472,
            max_threads_per_block: 1024,
            l2_cache_bytes: 50 << 20,
            total_memory_bytes: 80 << 30,
            driver_version: Some("580.159.04".into()),
            cuda_driver_api_version: cuda.into(),
            cublas_version: "13.1.0".into(),
            cublaslt_version: "130100".into(),
            nvrtc_version: None,
        }
    }

    /// A module whose one entry takes (A, B, C, M, N, K) like the simple kernel.
    fn job(arch: Arch, version: &str, target: &str) -> Job {
        let p = Problem::new(arch, Acc::F32, Layout::Tn, Shape::new(256, 256, 1024).expect("shape"));
        let manifest = manifest_for(&p, &SimpleConfig::SMALL);
        let entry = &manifest.launches[0].entry;
        let ptx = format!(
            ".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry {entry}(\n .param .u64 a,\n .param .u64 b,\n .param .u64 c,\n .param .u32 m,\n .param .u32 n,\n .param .u32 k\n)\n{{\n ret;\n}}\n"
        );
        Job { ptx, manifest, secret_seed: 1, watchdog_ms: None, bench: None }
    }

    fn verdict_of(job: &Job, facts: &DeviceFacts) -> Result<(), StageFailure> {
        // ptxas may or may not be on this machine; point it nowhere so the test is the same everywhere.
        static_checks(job, facts, &mut CheckLog::default()).map(|_| ())
    }

    #[test]
    fn a_matching_module_passes_the_static_stage() {
        let mut log = CheckLog::default();
        let j = job(Arch::Sm80, "8.0", "sm_80");
        let result = static_checks(&j, &facts((9, 0), "13.0"), &mut log);
        // ptxas, where present, would assemble this trivial kernel too.
        assert!(result.is_ok(), "{result:?}");
        let names: Vec<&str> = log.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["manifest", "target", "ptx", "ptxas", "device limits"]);
        assert!(log.checks.iter().all(|c| c.passed));
    }

    #[test]
    fn static_faults_are_static_invalid_and_say_what_is_wrong() {
        let h100 = facts((9, 0), "13.0");
        // Arch-specific PTX for a device it cannot run on.
        let f = verdict_of(&job(Arch::Sm90a, "8.0", "sm_90a"), &facts((8, 0), "12.9")).unwrap_err();
        assert_eq!(f.verdict, Verdict::StaticInvalid);
        assert!(f.message.contains("cannot run on"), "{}", f.message);
        // A PTX ISA newer than the driver.
        let f = verdict_of(&job(Arch::Sm80, "9.0", "sm_80"), &facts((9, 0), "12.9")).unwrap_err();
        assert!(f.message.contains("newer than 8.8"), "{}", f.message);
        // The manifest names an entry the module lacks.
        let mut j = job(Arch::Sm80, "8.0", "sm_80");
        j.manifest.launches[0].entry = "other".into();
        let f = verdict_of(&j, &h100).unwrap_err();
        assert!(f.message.contains("`other` is not a `.entry`"), "{}", f.message);
        // A block the device cannot run.
        let mut j = job(Arch::Sm80, "8.0", "sm_80");
        j.manifest.launches[0].shared_mem_bytes = 232_448 + 16;
        let f = verdict_of(&j, &h100).unwrap_err();
        assert_eq!(f.verdict, Verdict::StaticInvalid);
    }

    #[test]
    fn the_ptx_isa_limit_follows_the_driver() {
        assert_eq!(max_ptx_version_for_driver("12.9"), PtxVersion { major: 8, minor: 8 });
        assert_eq!(max_ptx_version_for_driver("12.4"), PtxVersion { major: 8, minor: 4 });
        assert_eq!(max_ptx_version_for_driver("13.0"), PtxVersion { major: 9, minor: 0 });
        assert_eq!(max_ptx_version_for_driver("garbage"), PtxVersion { major: 9, minor: 0 });
        assert_eq!(ptxas_arch(Arch::Sm80, (9, 0), ".version 8.0\n.target sm_80\n"), "sm_90");
        assert_eq!(ptxas_arch(Arch::Sm90a, (9, 0), ".version 8.0\n.target sm_90a\n"), "sm_90a");
        // Hopper-only PTX filed under sm_90 is assembled for sm_90a.
        assert_eq!(ptxas_arch(Arch::Sm90, (9, 0), "// x\n.version 8.8\n.target sm_90a\n.address_size 64\n"), "sm_90a");
    }

    #[test]
    fn cells_are_named_by_row_and_column() {
        assert_eq!(cell(16385, 16384), "C[1][1]");
        assert_eq!(cell(3, 0), "C[3][0]");
    }

    #[test]
    fn the_check_log_records_passes_and_failures() {
        let mut log = CheckLog::default();
        let v = log.run("one", || Ok((7, "fine".to_string()))).expect("passes");
        assert_eq!(v, 7);
        let e = log.run::<()>("two", || Err(StageFailure::new(Verdict::ExactMismatch, "binary", "C[0][0] = 3, expected 2")));
        assert!(e.is_err());
        assert_eq!(log.checks.len(), 2);
        assert!(log.checks[0].passed && !log.checks[1].passed);
        assert_eq!(log.checks[1].detail, "C[0][0] = 3, expected 2");
    }
}
