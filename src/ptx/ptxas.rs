//! Runs NVIDIA's `ptxas` on submitted PTX, without a GPU, to catch what the static
//! parser cannot (bad instructions, operands, ISA/target mismatches) at submission
//! time, and to report registers, spills and shared memory per entry.
//!
//! `ptxas` comes from `KAAS_PTXAS` or `PATH` (the pip wheel
//! `nvidia-cuda-nvcc-cu12` ships one). Where there is none, [`PtxasError::NotAvailable`]
//! lets callers skip this check rather than fail the kernel.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming the `ptxas` binary; otherwise `ptxas` on `PATH`.
pub const PTXAS_ENV: &str = "KAAS_PTXAS";

/// Default wall-clock limit. Large HGEMM kernels assemble in a few seconds; a PTX file
/// that takes a minute is either pathological or hostile.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Log text kept for messages; ptxas can print one warning per instruction.
const MAX_LOG_BYTES: usize = 64 << 10;

/// Resources of one function, as `ptxas -v` reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FunctionResources {
    pub name: String,
    /// True for a kernel (`.entry`), false for a `.func` it calls.
    pub entry: bool,
    pub registers: u32,
    pub spill_store_bytes: u64,
    pub spill_load_bytes: u64,
    pub stack_frame_bytes: u64,
    /// Static shared memory; the manifest's dynamic `shared_mem_bytes` come on top.
    pub shared_mem_bytes: u64,
    pub barriers: u32,
}

/// What a successful `ptxas` run reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxasReport {
    pub functions: Vec<FunctionResources>,
    /// Warnings and info, trimmed, for the run record.
    pub log: String,
}

impl PtxasReport {
    pub fn entry(&self, name: &str) -> Option<&FunctionResources> {
        self.functions.iter().find(|f| f.entry && f.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PtxasError {
    /// No ptxas on this machine: the caller skips the check.
    #[error("ptxas is not available ({0}); set {PTXAS_ENV} or put ptxas on PATH")]
    NotAvailable(String),
    /// ptxas ran and refused the PTX: the kernel's fault.
    #[error("ptxas rejected the PTX:\n{log}")]
    Rejected { log: String },
    #[error("ptxas did not finish within {0:?}")]
    Timeout(Duration),
    /// Temp files, spawn or wait failed: the service's fault.
    #[error("running ptxas failed: {0}")]
    Io(String),
}

impl PtxasError {
    /// Whether the submitted PTX is to blame (as opposed to this machine).
    pub fn is_kernel_fault(&self) -> bool {
        matches!(self, PtxasError::Rejected { .. } | PtxasError::Timeout(_))
    }

    /// The static fault for a kernel-fault failure; `None` when the check should be
    /// skipped (no ptxas) or retried (this machine failed).
    pub fn into_static_error(self) -> Option<super::StaticError> {
        match self {
            PtxasError::Rejected { log } => Some(super::StaticError::Ptxas { log }),
            PtxasError::Timeout(t) => Some(super::StaticError::Ptxas { log: format!("ptxas did not finish within {t:?}") }),
            PtxasError::NotAvailable(_) | PtxasError::Io(_) => None,
        }
    }
}

/// Finds `ptxas`: `KAAS_PTXAS` if set (it must exist), else the first on `PATH`.
pub fn locate() -> Result<PathBuf, PtxasError> {
    if let Some(p) = std::env::var_os(PTXAS_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(PtxasError::NotAvailable(format!("{PTXAS_ENV}={} is not a file", p.display())))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("ptxas"))
        .find(|p| p.is_file())
        .ok_or_else(|| PtxasError::NotAvailable("no ptxas on PATH".into()))
}

/// Assembles `ptx` for `arch` (e.g. `sm_90a`: pass the arch the kernel will run as,
/// which for plain PTX filed under a higher arch is that higher arch) with `-v`.
pub fn run(ptxas: &Path, ptx: &str, arch: &str, timeout: Duration) -> Result<PtxasReport, PtxasError> {
    // The arch lands on a command line: allow only what a target looks like.
    if !arch.starts_with("sm_") || !arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(PtxasError::Io(format!("`{arch}` is not an sm_XX target")));
    }
    // A private directory (created, never followed), removed on drop.
    let dir = tempfile::Builder::new()
        .prefix("kaas-ptxas-")
        .tempdir()
        .map_err(|e| PtxasError::Io(format!("cannot create a scratch directory in {}: {e}", std::env::temp_dir().display())))?;
    let input = dir.path().join("kernel.ptx");
    let output = dir.path().join("kernel.cubin");
    let log_path = dir.path().join("ptxas.log");
    std::fs::write(&input, ptx).map_err(|e| PtxasError::Io(format!("writing {}: {e}", input.display())))?;
    // Output to a file rather than a pipe: a pipe that nobody drains can block ptxas
    // when the log is long.
    let log_file = std::fs::File::create(&log_path).map_err(|e| PtxasError::Io(format!("creating the log: {e}")))?;
    let log_err = log_file.try_clone().map_err(|e| PtxasError::Io(e.to_string()))?;
    let mut child = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(|e| PtxasError::Io(format!("starting {}: {e}", ptxas.display())))?;
    let status = wait_with_timeout(&mut child, timeout)?;
    let log = read_log(&log_path)?;
    if status.success() {
        Ok(PtxasReport { functions: parse_resources(&log), log })
    } else {
        Err(PtxasError::Rejected { log: scrub_paths(&log, &input) })
    }
}

/// Like [`run`] with ptxas from [`locate`] and [`DEFAULT_TIMEOUT`].
pub fn check(ptx: &str, arch: &str) -> Result<PtxasReport, PtxasError> {
    run(&locate()?, ptx, arch, DEFAULT_TIMEOUT)
}

fn wait_with_timeout(child: &mut std::process::Child, timeout: Duration) -> Result<std::process::ExitStatus, PtxasError> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if start.elapsed() >= timeout => {
                // Killing can fail only if it already exited; reap it either way.
                let _ = child.kill();
                let _ = child.wait();
                return Err(PtxasError::Timeout(timeout));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(PtxasError::Io(format!("waiting for ptxas: {e}"))),
        }
    }
}

fn read_log(path: &Path) -> Result<String, PtxasError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_LOG_BYTES as u64).read_to_end(&mut bytes))
        .map_err(|e| PtxasError::Io(format!("reading the ptxas log: {e}")))?;
    Ok(String::from_utf8_lossy(&bytes).trim().to_string())
}

/// ptxas names the input file in its errors; the author knows it only as their PTX.
fn scrub_paths(log: &str, input: &Path) -> String {
    log.replace(&*input.to_string_lossy(), "kernel.ptx")
}

/// Reads `ptxas -v` output. The lines it prints per function (CUDA 12.x):
///
/// ```text
/// ptxas info    : Compiling entry function 'k' for 'sm_90a'
/// ptxas info    : Function properties for k
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 168 registers, used 1 barriers, 197632 bytes smem, 400 bytes cmem[0]
/// ```
pub fn parse_resources(log: &str) -> Vec<FunctionResources> {
    let mut out: Vec<FunctionResources> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let body = line.split_once("ptxas info").map_or(line, |(_, rest)| rest.trim_start_matches([' ', ':']));
        let body = body.trim();
        if let Some(rest) = body.strip_prefix("Compiling entry function ") {
            let name = quoted(rest).unwrap_or_default();
            let i = function_index(&mut out, name);
            out[i].entry = true;
            current = Some(i);
        } else if let Some(rest) = body.strip_prefix("Function properties for ") {
            let name = rest.trim().trim_matches('\'');
            current = Some(function_index(&mut out, name));
        } else if let Some(i) = current.filter(|&i| i < out.len()) {
            let f = &mut out[i];
            for part in body.split(',') {
                let words: Vec<&str> = part.split_whitespace().collect();
                let n = |idx: usize| words.get(idx).and_then(|w| w.parse::<u64>().ok());
                match words.as_slice() {
                    ["Used", _, "registers"] => f.registers = n(1).unwrap_or(0) as u32,
                    ["used", _, "barriers"] => f.barriers = n(1).unwrap_or(0) as u32,
                    [_, "bytes", "smem"] => f.shared_mem_bytes = n(0).unwrap_or(0),
                    [_, "bytes", "stack", "frame"] => f.stack_frame_bytes = n(0).unwrap_or(0),
                    [_, "bytes", "spill", "stores"] => f.spill_store_bytes = n(0).unwrap_or(0),
                    [_, "bytes", "spill", "loads"] => f.spill_load_bytes = n(0).unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    out
}

fn quoted(s: &str) -> Option<&str> {
    let start = s.find('\'')? + 1;
    let len = s[start..].find('\'')?;
    Some(&s[start..start + len])
}

fn function_index(out: &mut Vec<FunctionResources>, name: &str) -> usize {
    match out.iter().position(|f| f.name == name) {
        Some(i) => i,
        None => {
            out.push(FunctionResources { name: name.to_string(), ..Default::default() });
            out.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'hgemm' for 'sm_90a'
ptxas info    : Function properties for hgemm
    16 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 197632 bytes smem, 400 bytes cmem[0]
ptxas info    : Function properties for helper
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'reduce' for 'sm_80'
ptxas info    : Function properties for reduce
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 4096 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 10.109 ms";

    #[test]
    fn resources_are_read_per_function() {
        let fs = parse_resources(LOG);
        let report = PtxasReport { functions: fs.clone(), log: String::new() };
        let hgemm = report.entry("hgemm").expect("hgemm reported");
        assert_eq!(
            *hgemm,
            FunctionResources {
                name: "hgemm".into(),
                entry: true,
                registers: 168,
                spill_store_bytes: 24,
                spill_load_bytes: 32,
                stack_frame_bytes: 16,
                shared_mem_bytes: 197632,
                barriers: 1,
            }
        );
        assert!(report.entry("helper").is_none(), "a .func is not an entry");
        assert_eq!(fs.iter().find(|f| f.name == "helper").map(|f| f.stack_frame_bytes), Some(8));
        let reduce = report.entry("reduce").expect("reduce reported");
        assert_eq!((reduce.registers, reduce.shared_mem_bytes), (32, 4096));
    }

    const VALID: &str = ".version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 .ptr .global .align 16 k_param_0, .param .u32 k_param_1)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	.shared .align 16 .b8 smem[4096];
	ld.param.u64 %rd1, [k_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.u32 %r1, [k_param_1];
	st.global.u32 [%rd2], %r1;
	mov.u32 %r2, smem;
	st.shared.u32 [%r2], %r1;
	ret;
}
";

    fn ptxas_or_skip() -> Option<PathBuf> {
        match locate() {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("skipping the real-ptxas test: {e}");
                None
            }
        }
    }

    #[test]
    fn real_ptxas_assembles_valid_ptx_and_reports_resources() {
        let Some(ptxas) = ptxas_or_skip() else { return };
        let report = run(&ptxas, VALID, "sm_90a", DEFAULT_TIMEOUT).expect("valid PTX assembles");
        let k = report.entry("k").expect("entry k reported");
        assert!(k.registers > 0, "{report:?}");
        assert_eq!(k.shared_mem_bytes, 4096);
        assert_eq!(k.spill_store_bytes, 0);
    }

    #[test]
    fn real_ptxas_rejects_a_syntax_error_with_its_line() {
        let Some(ptxas) = ptxas_or_skip() else { return };
        let bad = VALID.replace("st.global.u32", "st.glob.u32");
        match run(&ptxas, &bad, "sm_90a", DEFAULT_TIMEOUT) {
            Err(PtxasError::Rejected { log }) => {
                assert!(log.contains("kernel.ptx, line 12"), "{log}");
                assert!(!log.contains("kaas-ptxas-"), "scratch paths leak into the message: {log}");
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_binary_is_not_available_and_odd_archs_are_refused() {
        let missing = Path::new("/nonexistent/ptxas");
        assert!(matches!(run(missing, VALID, "sm_90a", DEFAULT_TIMEOUT), Err(PtxasError::Io(_))));
        assert!(matches!(run(missing, VALID, "sm_90a; rm -rf /", DEFAULT_TIMEOUT), Err(PtxasError::Io(_))));
        assert!(!PtxasError::NotAvailable(String::new()).is_kernel_fault());
        assert!(PtxasError::Rejected { log: String::new() }.is_kernel_fault());
        assert_eq!(PtxasError::Io(String::new()).into_static_error(), None);
    }
}
