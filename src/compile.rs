//! CUDA C++ source submissions: the service compiles the author's source with NVRTC into
//! PTX for the problem's arch, and from there it is an artifact like any other.
//!
//! Untrusted source is never compiled inside the server: [`compile_in_sandbox`] spawns
//! this executable as `kaas compile-sandbox`, which sets its own memory and CPU rlimits
//! before it loads NVRTC, reads one [`CompileJob`] as JSON on stdin and writes one
//! [`ChildOutcome`] on stdout. The parent kills it at a wall-clock limit and turns every
//! way it can end into a [`CompileError`] that names the fault.
//!
//! What the source may include is checked before anything runs ([`check_source`]): only
//! literal `#include <…>` / `#include "…"` of a file that exists under the header roots
//! (the CUDA headers, CUTLASS/CuTe from the pinned `nvidia-cutlass` wheel). NVRTC reads
//! any absolute path it is given, so this check is what keeps the host's files out of
//! compile logs and PTX; `-no-source-include` keeps the source's own folder off the path.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::problem::Arch;

/// Environment variable: `:`-separated folders holding CUTLASS/CuTe (`cute/`, `cutlass/`).
pub const CUTLASS_ENV: &str = "KAAS_CUTLASS_INCLUDE";
/// Environment variable: the header set's name, recorded per artifact (set by
/// `scripts/cuda-tools.sh`, e.g. `nvidia-cuda-runtime-cu12==12.9.79 nvidia-cutlass==4.2.0.0`).
pub const HEADER_SET_ENV: &str = "KAAS_HEADER_SET";
/// Environment variable naming the executable spawned as `compile-sandbox`; the current
/// executable when unset.
pub const EXE_ENV: &str = "KAAS_COMPILER_EXE";
/// The file name the source is compiled under: NVRTC's log says `kernel.cu(LINE): …`.
pub const SOURCE_NAME: &str = "kernel.cu";

const SUBCOMMAND: &str = "compile-sandbox";
/// Log kept for an error message: the first errors are the ones an author fixes.
const MAX_LOG_LINES: usize = 60;
const MAX_LOG_BYTES: usize = 12 << 10;
/// Stdout kept from the child: the PTX (bounded by the artifact quota) plus its log.
const MAX_CHILD_STDOUT: usize = 24 << 20;
const MAX_DEFINES: usize = 64;
const MAX_NAME_EXPRESSIONS: usize = 64;

/// Limits on one compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileLimits {
    /// Largest source accepted, in bytes.
    pub max_source_bytes: usize,
    /// Killed after this long, whatever it is doing.
    pub wall: Duration,
    /// `RLIMIT_CPU` of the child, in seconds.
    pub cpu_secs: u64,
    /// `RLIMIT_AS` of the child, in bytes (NVRTC itself maps a few hundred MiB).
    pub memory_bytes: u64,
    /// The executable to spawn; `$KAAS_COMPILER_EXE` or the current one when `None`.
    pub exe: Option<PathBuf>,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits { max_source_bytes: 256 << 10, wall: Duration::from_secs(60), cpu_secs: 60, memory_bytes: 4 << 30, exe: None }
    }
}

/// Compile options an author may choose. `-arch` is the service's (from the problem),
/// and so are `--std` choices, relocatable device code (off) and the include path.
/// NVRTC always optimises device code (it has no `-O` levels).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompileOptions {
    /// `-D NAME=VALUE`: NAME a C identifier, VALUE letters, digits and `_ . + -` (may be
    /// empty); at most 64.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defines: BTreeMap<String, String>,
    /// `c++17` (the default) or `c++20`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<String>,
    /// `--use_fast_math`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_math: bool,
}

/// How a stored artifact was built from source: enough to rebuild the same PTX.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BuildInfo {
    /// The virtual architecture compiled for, e.g. `compute_90a`.
    pub arch: String,
    pub options: CompileOptions,
    /// The exact NVRTC command-line options, less the include path.
    pub nvrtc_options: Vec<String>,
    /// NVRTC's version, e.g. `12.9`.
    pub nvrtc_version: String,
    /// The header set the service compiled against (see `scripts/cuda-tools.sh`).
    pub header_set: String,
    /// Each name expression of the manifests and the kernel (lowered) name it became.
    pub kernels: BTreeMap<String, String>,
}

/// What the sandboxed child is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompileJob {
    pub source: String,
    pub arch: Arch,
    pub options: CompileOptions,
    pub name_expressions: Vec<String>,
    pub include_dirs: Vec<PathBuf>,
    pub memory_bytes: u64,
    pub cpu_secs: u64,
}

/// What the child writes on stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ChildOutcome {
    Compiled { ptx: String, lowered: Vec<String>, log: String, nvrtc_version: String },
    Failed { result: String, log: String },
    Unavailable { message: String },
}

/// A successful compile.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub ptx: String,
    pub build: BuildInfo,
    /// NVRTC's warnings, if any.
    pub log: String,
}

/// Why a compile gave no PTX. [`CompileError::reason`] is a stable name for each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The source or the options were refused before compiling.
    #[error("{message}")]
    Refused { reason: &'static str, message: String },
    /// NVRTC reported errors; the log is trimmed and keeps its line numbers.
    #[error("NVRTC could not compile the source ({result}):\n{log}")]
    Nvrtc { result: String, log: String },
    /// A manifest entry names nothing the source defines, or not a kernel.
    #[error("{0}")]
    NoSuchKernel(String),
    /// The compile ran past a limit and was killed.
    #[error("{message}")]
    Limit { limit: &'static str, message: String },
    /// NVRTC is not installed here: the service's fault.
    #[error("{0}")]
    Unavailable(String),
    /// Spawning or talking to the child failed: the service's fault.
    #[error("{0}")]
    Internal(String),
}

impl CompileError {
    /// A stable name for the fault (the `reason` of the problem+json answer).
    pub fn reason(&self) -> &'static str {
        match self {
            CompileError::Refused { reason, .. } => reason,
            CompileError::Nvrtc { .. } => "compile_error",
            CompileError::NoSuchKernel(_) => "no_such_kernel",
            CompileError::Limit { limit, .. } => limit,
            CompileError::Unavailable(_) => "nvrtc_unavailable",
            CompileError::Internal(_) => "internal",
        }
    }

    fn refused(reason: &'static str, message: impl Into<String>) -> CompileError {
        CompileError::Refused { reason, message: message.into() }
    }
}

/// The folders `#include` is resolved in: the CUDA headers (see
/// [`crate::gpu::nvrtc::include_dirs`]) and `$KAAS_CUTLASS_INCLUDE`.
pub fn header_roots() -> Vec<PathBuf> {
    let mut dirs = crate::gpu::nvrtc::include_dirs();
    if let Ok(list) = std::env::var(CUTLASS_ENV) {
        dirs.extend(list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).filter(|p| p.is_dir()));
    }
    dirs
}

/// The header set's recorded name.
pub fn header_set() -> String {
    std::env::var(HEADER_SET_ENV).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).unwrap_or_else(|| "unrecorded (KAAS_HEADER_SET not set)".into())
}

/// `sm_90a` → `compute_90a`.
pub fn virtual_arch(arch: Arch) -> String {
    arch.as_str().replacen("sm_", "compute_", 1)
}

/// The NVRTC options for `arch` and the author's `options`, less the include path (which
/// is this machine's and not part of the recorded build).
pub fn nvrtc_options(arch: Arch, options: &CompileOptions) -> Result<Vec<String>, CompileError> {
    let std = match options.std.as_deref() {
        None | Some("c++17") => "c++17",
        Some("c++20") => "c++20",
        Some(other) => return Err(CompileError::refused("bad_option", format!("`std` is `{other}`; use `c++17` or `c++20`"))),
    };
    if options.defines.len() > MAX_DEFINES {
        return Err(CompileError::refused("bad_option", format!("{} defines; at most {MAX_DEFINES}", options.defines.len())));
    }
    let mut out = vec![
        format!("--gpu-architecture={}", virtual_arch(arch)),
        format!("--std={std}"),
        "--relocatable-device-code=false".into(),
        "-no-source-include".into(),
        // Functions and namespace-scope variables without an execution space are device
        // ones: CUTLASS/CuTe have some, and NVRTC compiles no host code anyway.
        "-default-device".into(),
        // Internal-linkage symbols (anonymous namespaces, as in libcu++) are otherwise
        // named from a random number and the process id: a fixed seed makes the same
        // source and options give the same PTX, so anyone can rebuild its sha256.
        "-frandom-seed=0".into(),
    ];
    for (k, v) in &options.defines {
        let ident = !k.is_empty() && k.len() <= 64 && !k.starts_with(|c: char| c.is_ascii_digit()) && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident {
            return Err(CompileError::refused("bad_option", format!("define `{k}` is not a C identifier")));
        }
        if v.len() > 64 || !v.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c)) {
            return Err(CompileError::refused("bad_option", format!("define {k}=`{v}`: values are at most 64 letters, digits and `_ . + -`")));
        }
        out.push(format!("-D{k}={v}"));
    }
    if options.fast_math {
        out.push("--use_fast_math".into());
    }
    Ok(out)
}

/// Checks source before it is compiled: size, NUL bytes, and every preprocessor include
/// (see the module docs). `roots` are the header folders.
pub fn check_source(source: &str, roots: &[PathBuf], limits: &CompileLimits) -> Result<(), CompileError> {
    if source.len() > limits.max_source_bytes {
        return Err(CompileError::refused("source_too_large", format!("the source is {} bytes; at most {}", source.len(), limits.max_source_bytes)));
    }
    if source.trim().is_empty() {
        return Err(CompileError::refused("empty_source", "the source is empty"));
    }
    if source.contains('\0') {
        return Err(CompileError::refused("nul_byte", "the source contains a NUL character"));
    }
    for (line, text) in logical_lines(source)? {
        // The stored source must rebuild the same PTX: no macro that differs per compile.
        if let Some(m) = ["__DATE__", "__TIME__", "__TIMESTAMP__"].iter().find(|m| text.contains(*m)) {
            return Err(CompileError::refused("not_reproducible", format!("line {line}: `{m}` would make the PTX differ from one compile to the next")));
        }
        let t = text.trim_start();
        let rest = if let Some(r) = t.strip_prefix('#') {
            r
        } else if let Some(r) = t.strip_prefix("%:") {
            r
        } else {
            if t.contains("__has_include") {
                return Err(CompileError::refused("include_refused", format!("line {line}: `__has_include` is not accepted in submitted source")));
            }
            continue;
        };
        let rest = rest.trim_start();
        let directive: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if rest.contains("__has_include") {
            return Err(CompileError::refused("include_refused", format!("line {line}: `__has_include` is not accepted in submitted source")));
        }
        match directive.as_str() {
            "include" => check_include(line, rest["include".len()..].trim(), roots)?,
            "include_next" | "import" | "embed" => {
                return Err(CompileError::refused("include_refused", format!("line {line}: `#{directive}` is not accepted; use `#include <…>` of a provided header")));
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_include(line: usize, arg: &str, roots: &[PathBuf]) -> Result<(), CompileError> {
    let path = match (arg.chars().next(), arg.chars().last()) {
        (Some('<'), Some('>')) | (Some('"'), Some('"')) if arg.len() >= 2 => &arg[1..arg.len() - 1],
        _ => {
            return Err(CompileError::refused(
                "include_refused",
                format!("line {line}: `#include {arg}`: only a literal `<path>` or `\"path\"` is accepted (no macros, nothing after it)"),
            ));
        }
    };
    let plain = !path.is_empty()
        && path.chars().all(|c| c.is_ascii_alphanumeric() || "_./+-".contains(c))
        && Path::new(path).components().all(|c| matches!(c, Component::Normal(_)));
    let found = plain && roots.iter().any(|r| r.join(path).is_file());
    // A server with no CUDA headers at all cannot compile any source that includes one:
    // that is the service's shortfall (503), not the author's include (422).
    if !found && plain && !roots.iter().any(|r| r.join("cuda_fp16.h").is_file()) {
        return Err(CompileError::Unavailable(format!(
            "this server has no CUDA headers to compile `#include {arg}` against (its operator sets KAAS_CUDA_INCLUDE and {CUTLASS_ENV}; scripts/cuda-tools.sh installs them)"
        )));
    }
    if !found {
        return Err(CompileError::refused(
            "include_refused",
            format!(
                "line {line}: `#include {arg}` is not a header this service provides; only the CUDA headers and CUTLASS/CuTe ({}) can be included, by their usual paths (e.g. <cuda_fp16.h>, <cute/tensor.hpp>)",
                header_set()
            ),
        ));
    }
    Ok(())
}

/// The source as logical lines (continuations spliced, comments blanked, string and
/// character literals kept opaque), each with the physical line it starts on. Raw
/// string literals are refused: they would let text that looks like a literal to a
/// simple scanner hide a directive from it.
fn logical_lines(source: &str) -> Result<Vec<(usize, String)>, CompileError> {
    let b: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let (mut cur, mut start, mut line) = (String::new(), 1usize, 1usize);
    let mut i = 0;
    // Splices `\` + newline; returns the index after the splice, counting the line.
    let splice = |i: usize, line: &mut usize| -> Option<usize> {
        if b.get(i) == Some(&'\\') {
            if b.get(i + 1) == Some(&'\n') {
                *line += 1;
                return Some(i + 2);
            }
            if b.get(i + 1) == Some(&'\r') && b.get(i + 2) == Some(&'\n') {
                *line += 1;
                return Some(i + 3);
            }
        }
        None
    };
    while i < b.len() {
        if let Some(j) = splice(i, &mut line) {
            i = j;
            continue;
        }
        let c = b[i];
        if c == '\n' {
            out.push((start, std::mem::take(&mut cur)));
            line += 1;
            start = line;
            i += 1;
            continue;
        }
        if c == '/' && b.get(i + 1) == Some(&'/') {
            // To the end of the (spliced) line.
            while i < b.len() && b[i] != '\n' {
                i = splice(i, &mut line).unwrap_or(i + 1);
            }
            continue;
        }
        if c == '/' && b.get(i + 1) == Some(&'*') {
            // Ends at `*/`, which a splice may split (`*\` newline `/`): splice first, as
            // the preprocessor does, or a directive after it would go unseen.
            i += 2;
            let mut star = false;
            while i < b.len() {
                if let Some(j) = splice(i, &mut line) {
                    i = j;
                    continue;
                }
                if star && b[i] == '/' {
                    break;
                }
                star = b[i] == '*';
                if b[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
            cur.push(' ');
            continue;
        }
        if c == '"' || c == '\'' {
            if c == '"' && i > 0 && b[i - 1] == 'R' && (i < 2 || !(b[i - 2].is_ascii_alphanumeric() || b[i - 2] == '_') || matches!(b[i - 2], 'u' | 'U' | 'L' | '8')) {
                return Err(CompileError::refused("raw_string", format!("line {line}: raw string literals are not accepted in submitted source")));
            }
            cur.push(c);
            i += 1;
            while i < b.len() && b[i] != c && b[i] != '\n' {
                if let Some(j) = splice(i, &mut line) {
                    i = j;
                    continue;
                }
                if b[i] == '\\' && i + 1 < b.len() && b[i + 1] != '\n' {
                    cur.push(b[i]);
                    i += 1;
                }
                cur.push(b[i]);
                i += 1;
            }
            if i < b.len() && b[i] == c {
                cur.push(c);
                i += 1;
            }
            continue;
        }
        cur.push(c);
        i += 1;
    }
    out.push((start, cur));
    Ok(out)
}

/// NVRTC's log trimmed for a message: the first lines (errors come in source order) and
/// the last few (a catastrophic error and the count of errors), each
/// `kernel.cu(LINE): error: …` line kept whole.
pub fn trim_log(log: &str) -> String {
    const TAIL: usize = 8;
    let lines: Vec<&str> = log.trim().lines().collect();
    let fits = |ls: &[&str]| ls.len() <= MAX_LOG_LINES && ls.iter().map(|l| l.len() + 1).sum::<usize>() <= MAX_LOG_BYTES;
    if fits(&lines) {
        return lines.join("\n");
    }
    let tail_from = lines.len().saturating_sub(TAIL);
    let tail = &lines[tail_from..];
    let mut head = Vec::new();
    let mut bytes: usize = tail.iter().map(|l| l.len() + 1).sum();
    for l in &lines[..tail_from] {
        if head.len() + TAIL >= MAX_LOG_LINES || bytes + l.len() + 1 > MAX_LOG_BYTES {
            break;
        }
        bytes += l.len() + 1;
        head.push(*l);
    }
    let left_out = tail_from - head.len();
    let mut out: Vec<String> = head.iter().map(|l| l.chars().take(MAX_LOG_BYTES / 2).collect()).collect();
    out.push(format!("… {left_out} line(s) left out …"));
    out.extend(tail.iter().map(|l| l.chars().take(MAX_LOG_BYTES / 4).collect::<String>()));
    out.join("\n")
}

/// The name expressions the failed compile could not resolve, read from NVRTC's log
/// (NVRTC compiles them as `#pragma nv_mangled_name EXPR` in a unit named `__nv_name_map`).
fn unresolved_names(log: &str, exprs: &[String]) -> Vec<String> {
    // Errors in the source itself come first: an author fixes those, and a name may
    // only fail to resolve because of them.
    let source_errors = log.lines().any(|l| l.starts_with(&format!("{SOURCE_NAME}(")) && l.contains("error"));
    if source_errors || !log.contains("__nv_name_map") {
        return Vec::new();
    }
    let said: Vec<&str> = log.lines().filter_map(|l| l.trim().strip_prefix("#pragma nv_mangled_name ")).map(str::trim).collect();
    exprs.iter().filter(|e| said.contains(&e.trim())).cloned().collect()
}

/// Compiles in a `kaas compile-sandbox` child (see the module docs). `name_expressions`
/// are the manifests' entries; each must name a `__global__` function.
pub fn compile_in_sandbox(source: &str, arch: Arch, options: &CompileOptions, name_expressions: &[String], limits: &CompileLimits) -> Result<Compiled, CompileError> {
    let roots = header_roots();
    check_source(source, &roots, limits)?;
    let nvrtc_options = nvrtc_options(arch, options)?;
    if name_expressions.is_empty() || name_expressions.len() > MAX_NAME_EXPRESSIONS {
        return Err(CompileError::refused("bad_option", format!("{} kernel names; between 1 and {MAX_NAME_EXPRESSIONS}", name_expressions.len())));
    }
    for e in name_expressions {
        if e.trim().is_empty() || e.len() > 512 || e.chars().any(|c| c.is_control()) {
            return Err(CompileError::NoSuchKernel(format!("entry `{e}` is not a kernel name or NVRTC name expression")));
        }
    }
    let job = CompileJob {
        source: source.to_string(),
        arch,
        options: options.clone(),
        name_expressions: name_expressions.to_vec(),
        include_dirs: roots,
        memory_bytes: limits.memory_bytes,
        cpu_secs: limits.cpu_secs,
    };
    let job_roots = job.include_dirs.clone();
    let input = serde_json::to_vec(&job).map_err(|e| CompileError::Internal(format!("cannot serialise the compile job: {e}")))?;
    let exe = match limits.exe.clone().or_else(|| std::env::var_os(EXE_ENV).filter(|p| !p.is_empty()).map(PathBuf::from)) {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| CompileError::Internal(format!("cannot find the compiler executable: {e}")))?,
    };
    let started = Instant::now();
    // Only what NVRTC needs to load: none of the server's settings or secrets.
    let mut command = Command::new(&exe);
    command.env_clear().current_dir("/");
    for key in ["LD_LIBRARY_PATH", "PATH"] {
        if let Some(v) = std::env::var_os(key) {
            command.env(key, v);
        }
    }
    let mut child = command
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CompileError::Internal(format!("cannot start the compiler `{}`: {e}", exe.display())))?;
    let stdin = child.stdin.take();
    std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            // A child that dies early closes the pipe; its exit says why.
            let _ = s.write_all(&input);
        }
    });
    let out = crate::sandbox::Capture::start(child.stdout.take(), MAX_CHILD_STDOUT, false);
    let err = crate::sandbox::Capture::start(child.stderr.take(), 4 << 10, true);
    let exit = crate::sandbox::wait(&mut child, started + limits.wall, &AtomicBool::new(false));
    let stdout = out.finish(Duration::from_secs(2));
    let stderr = err.finish(Duration::from_millis(500));
    let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
    let mib = limits.memory_bytes >> 20;
    let status = match exit {
        crate::sandbox::Exit::TimedOut => {
            return Err(CompileError::Limit {
                limit: "time_limit",
                message: format!("the compile ran past its wall-clock limit of {} s and was killed", limits.wall.as_secs_f64()),
            });
        }
        crate::sandbox::Exit::Finished(s) => s,
        other => return Err(CompileError::Internal(format!("waiting for the compiler failed: {other:?}"))),
    };
    let text = String::from_utf8_lossy(&stdout);
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let outcome: ChildOutcome = match serde_json::from_str(last) {
        Ok(o) => o,
        Err(_) => {
            use std::os::unix::process::ExitStatusExt;
            // SIGXCPU (24) or the hard limit's SIGKILL after it: the CPU limit. An abort or
            // a segfault with no answer is how NVRTC fails when `RLIMIT_AS` refuses memory.
            return Err(match status.signal() {
                Some(24) => CompileError::Limit { limit: "cpu_limit", message: format!("the compile used more than its CPU-time limit of {} s and was killed", limits.cpu_secs) },
                Some(9) if started.elapsed().as_secs() >= limits.cpu_secs => {
                    CompileError::Limit { limit: "cpu_limit", message: format!("the compile used more than its CPU-time limit of {} s and was killed", limits.cpu_secs) }
                }
                Some(sig) => CompileError::Limit {
                    limit: "memory_limit",
                    message: format!("the compiler died (signal {sig}), which is how it fails past its memory limit of {mib} MiB"),
                },
                None if stderr.contains("memory allocation") || stderr.contains("bad_alloc") || stderr.contains("out of memory") => {
                    CompileError::Limit { limit: "memory_limit", message: format!("the compile ran out of its memory limit of {mib} MiB") }
                }
                None => CompileError::Internal(format!("the compiler exited ({status}) without an answer: {}", stderr.chars().take(500).collect::<String>())),
            });
        }
    };
    match outcome {
        ChildOutcome::Unavailable { message } => Err(CompileError::Unavailable(message)),
        ChildOutcome::Failed { result, log } => {
            // NVRTC reports an allocation that `RLIMIT_AS` refused as a catastrophic error.
            if result.contains("OUT_OF_MEMORY") || log.contains("catastrophic error: out of memory") {
                return Err(CompileError::Limit { limit: "memory_limit", message: format!("the compile ran out of its memory limit of {mib} MiB") });
            }
            let missing = unresolved_names(&log, name_expressions);
            if !missing.is_empty() {
                return Err(CompileError::NoSuchKernel(format!(
                    "manifest entr{} {} match{} no kernel in the source (an entry is an `extern \"C\"` kernel's name or an NVRTC name expression such as `gemm<128, 128>`)",
                    if missing.len() == 1 { "y" } else { "ies" },
                    missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
                    if missing.len() == 1 { "es" } else { "" }
                )));
            }
            Err(CompileError::Nvrtc { result, log: trim_log(&scrub(&log, &job_roots)) })
        }
        ChildOutcome::Compiled { ptx, lowered, log, nvrtc_version } => {
            if lowered.len() != name_expressions.len() {
                return Err(CompileError::Internal("the compiler returned a different number of kernel names".into()));
            }
            let mut kernels = BTreeMap::new();
            for (expr, low) in name_expressions.iter().zip(&lowered) {
                // A name expression may also name a device function or variable: only an
                // `.entry` can be launched.
                if !ptx_has_entry(&ptx, low) {
                    return Err(CompileError::NoSuchKernel(format!("manifest entry `{expr}` names `{low}`, which is not a `__global__` kernel in the PTX")));
                }
                kernels.insert(expr.clone(), low.clone());
            }
            Ok(Compiled {
                ptx,
                build: BuildInfo { arch: virtual_arch(arch), options: options.clone(), nvrtc_options, nvrtc_version, header_set: header_set(), kernels },
                log: trim_log(&log),
            })
        }
    }
}

/// The log with this machine's header folders written `<headers>`: errors inside a
/// header then read `<headers>/cute/layout.hpp(12): …`, and no host path leaves the
/// service.
fn scrub(log: &str, roots: &[PathBuf]) -> String {
    let mut out = log.to_string();
    // Longest first, so a root inside another is not half-replaced.
    let mut roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).filter(|r| r.len() > 1).collect();
    roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
    for r in roots {
        out = out.replace(&format!("{r}/"), "<headers>/").replace(&r, "<headers>");
    }
    out
}

fn ptx_has_entry(ptx: &str, name: &str) -> bool {
    ptx.lines().any(|l| {
        let l = l.trim_start();
        // Template instantiations are `.weak`, `extern "C"` kernels `.visible`.
        let l = l.strip_prefix(".visible ").or_else(|| l.strip_prefix(".weak ")).unwrap_or(l);
        let Some(rest) = l.strip_prefix(".entry ") else { return false };
        rest.strip_prefix(name).is_some_and(|after| after.starts_with('(') || after.trim().is_empty())
    })
}

/// Sets this process's `RLIMIT_AS` and `RLIMIT_CPU` (soft = hard for memory; the CPU
/// hard limit one second later, so SIGXCPU comes first and names the fault).
fn limit_self(memory_bytes: u64, cpu_secs: u64) -> Result<(), String> {
    let set = |res, soft: u64, hard: u64, what: &str| -> Result<(), String> {
        let lim = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
        // SAFETY: passes a pointer to a live struct; lowers only this process's limits.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            return Err(format!("setrlimit({what}) failed: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    };
    set(libc::RLIMIT_AS, memory_bytes, memory_bytes, "RLIMIT_AS")?;
    set(libc::RLIMIT_CPU, cpu_secs.max(1), cpu_secs.max(1) + 1, "RLIMIT_CPU")?;
    // No core files from a compile killed at its limit.
    set(libc::RLIMIT_CORE, 0, 0, "RLIMIT_CORE")
}

/// Compiles in this process (for `kaas compile` and the sandbox child): `None` when NVRTC
/// is missing (with why).
pub fn compile_here(job: &CompileJob) -> ChildOutcome {
    if let Err(why) = crate::gpu::nvrtc::available() {
        return ChildOutcome::Unavailable { message: why };
    }
    let nvrtc_version = match crate::gpu::nvrtc::version() {
        Ok(v) => v,
        Err(e) => return ChildOutcome::Unavailable { message: e.to_string() },
    };
    let mut options = match nvrtc_options(job.arch, &job.options) {
        Ok(o) => o,
        Err(e) => return ChildOutcome::Failed { result: "refused".into(), log: e.to_string() },
    };
    options.extend(job.include_dirs.iter().map(|d| format!("--include-path={}", d.display())));
    match crate::gpu::nvrtc::compile_named(&job.source, SOURCE_NAME, &options, &job.name_expressions) {
        Ok(o) => ChildOutcome::Compiled { ptx: o.ptx, lowered: o.lowered, log: o.log, nvrtc_version },
        Err(f) => ChildOutcome::Failed { result: format!("{} returned {}", f.call, f.result), log: f.log },
    }
}

/// `kaas compile-sandbox`: one [`CompileJob`] from stdin, one [`ChildOutcome`] on stdout.
/// The limits are set before NVRTC is loaded; the parent kills it at the wall clock.
pub fn sandbox_main() -> anyhow::Result<()> {
    let mut text = String::new();
    std::io::stdin().take(MAX_CHILD_STDOUT as u64).read_to_string(&mut text)?;
    let job: CompileJob = serde_json::from_str(&text)?;
    limit_self(job.memory_bytes, job.cpu_secs).map_err(anyhow::Error::msg)?;
    let outcome = compile_here(&job);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", serde_json::to_string(&outcome)?)?;
    stdout.flush()?;
    Ok(())
}

/// `kaas compile`: compiles CUDA C++ source here exactly as the service would (same
/// options, same include check, same sandbox), with no server.
#[derive(Debug, Clone, clap::Args)]
pub struct CompileArgs {
    /// The CUDA C++ source.
    pub source: PathBuf,
    /// A manifest or manifest template: its arch and its launches' entries (kernel names
    /// or NVRTC name expressions) are compiled for.
    #[arg(long, visible_alias = "template")]
    pub manifest: Option<PathBuf>,
    /// A kernel name or name expression to compile (repeat); instead of, or besides, the
    /// manifest's entries.
    #[arg(long)]
    pub entry: Vec<String>,
    /// The target, e.g. sm_90a (default: the manifest's).
    #[arg(long)]
    pub arch: Option<Arch>,
    #[command(flatten)]
    pub flags: CompileFlags,
    /// Write the PTX here (default: standard output).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Print the build record (as the service stores it) as JSON on standard error.
    #[arg(long)]
    pub json: bool,
}

/// Options for compiling CUDA C++ source (`kaas compile`, `kaas submit kernel.cu`): the
/// ones the service accepts; `-arch` follows the manifests.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CompileFlags {
    /// A preprocessor define, NAME=VALUE (repeat).
    #[arg(short = 'D', long = "define", value_name = "NAME=VALUE")]
    pub defines: Vec<String>,
    /// Compile with `--use_fast_math`.
    #[arg(long)]
    pub fast_math: bool,
    /// The C++ dialect: c++17 (default) or c++20.
    #[arg(long = "std", value_name = "STD")]
    pub std: Option<String>,
}

impl CompileFlags {
    pub fn options(&self) -> anyhow::Result<CompileOptions> {
        let mut defines = std::collections::BTreeMap::new();
        for d in &self.defines {
            let (k, v) = d.split_once('=').unwrap_or((d.as_str(), ""));
            defines.insert(k.to_string(), v.to_string());
        }
        Ok(CompileOptions { defines, std: self.std.clone(), fast_math: self.fast_math })
    }

    pub(crate) fn is_default(&self) -> bool {
        self.defines.is_empty() && !self.fast_math && self.std.is_none()
    }
}

pub fn compile_cli(args: &CompileArgs) -> anyhow::Result<()> {
    use anyhow::{Context, bail};
    let bytes = std::fs::read(&args.source).with_context(|| format!("reading {}", args.source.display()))?;
    let source = String::from_utf8(bytes).map_err(|e| anyhow::anyhow!("{} is not UTF-8 (at byte {})", args.source.display(), e.utf8_error().valid_up_to()))?;
    let (mut arch, mut entries) = (args.arch, Vec::new());
    if let Some(path) = &args.manifest {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let (a, e): (Arch, Vec<String>) = if let Ok(t) = serde_json::from_str::<crate::manifest::template::ManifestTemplate>(&text) {
            (t.arch, t.launches.into_iter().map(|l| l.entry).collect())
        } else {
            let m: crate::manifest::Manifest = serde_json::from_str(&text).with_context(|| format!("{} is neither a manifest nor a manifest template", path.display()))?;
            (m.problem.arch, m.launches.into_iter().map(|l| l.entry).collect())
        };
        arch = arch.or(Some(a));
        entries.extend(e);
    }
    entries.extend(args.entry.iter().cloned());
    let mut seen = std::collections::BTreeSet::new();
    entries.retain(|e| seen.insert(e.clone()));
    let Some(arch) = arch else { bail!("give --arch, or a --manifest/--template to take it from") };
    if entries.is_empty() {
        bail!("name the kernels: --entry NAME, or a --manifest/--template whose launches name them");
    }
    let compiled = compile_in_sandbox(&source, arch, &args.flags.options()?, &entries, &CompileLimits::default()).map_err(|e| anyhow::anyhow!("{} ({})", e, e.reason()))?;
    if !compiled.log.is_empty() {
        eprintln!("{}", compiled.log);
    }
    match &args.out {
        Some(p) => std::fs::write(p, &compiled.ptx).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{}", compiled.ptx),
    }
    let sha = crate::signing::sha256_hex(compiled.ptx.as_bytes());
    eprintln!("compiled for {} with NVRTC {} ({}); PTX {} bytes, sha256 {sha}", compiled.build.arch, compiled.build.nvrtc_version, compiled.build.header_set, compiled.ptx.len());
    let report = crate::ptx::ptxas::check(&compiled.ptx, arch.as_str());
    for (expr, kernel) in &compiled.build.kernels {
        let name = if expr == kernel { expr.clone() } else { format!("{expr} → {kernel}") };
        match &report {
            Ok(r) => match r.entry(kernel) {
                Some(f) => eprintln!(
                    "  {name}: {} registers, {} B spill stores, {} B spill loads, {} B stack, {} B static shared",
                    f.registers, f.spill_store_bytes, f.spill_load_bytes, f.stack_frame_bytes, f.shared_mem_bytes
                ),
                None => eprintln!("  {name}"),
            },
            Err(_) => eprintln!("  {name}"),
        }
    }
    match report {
        Ok(_) => {}
        Err(crate::ptx::ptxas::PtxasError::NotAvailable(why)) => eprintln!("(no register report: {why})"),
        Err(e) => bail!("{e}"),
    }
    if args.json {
        eprintln!("{}", serde_json::to_string_pretty(&compiled.build)?);
    }
    // PTX names a template's kernels by their mangled names, which a manifest for the PTX
    // must use: write one beside it so that nobody has to know the mangling.
    if let (Some(manifest), Some(out)) = (&args.manifest, &args.out)
        && compiled.build.kernels.iter().any(|(expr, kernel)| expr != kernel)
    {
        let lowered = out.with_extension("manifest.json");
        let text = std::fs::read_to_string(manifest).with_context(|| format!("reading {}", manifest.display()))?;
        std::fs::write(&lowered, lowered_manifest(&text, &compiled.build.kernels)?).with_context(|| format!("writing {}", lowered.display()))?;
        eprintln!(
            "wrote {}: {} with each entry by its name in the PTX; submit the PTX with it: kaas submit {} --manifest {} …",
            lowered.display(),
            manifest.display(),
            out.display(),
            lowered.display()
        );
    }
    Ok(())
}

/// A manifest or template's text with each launch's entry, where it is a name expression
/// NVRTC lowered, replaced by the lowered (mangled) name the PTX holds. The text is
/// edited, not re-serialised, so that the author's layout and key order stay.
pub fn lowered_manifest(text: &str, kernels: &std::collections::BTreeMap<String, String>) -> anyhow::Result<String> {
    let mut out = text.to_string();
    for (expr, kernel) in kernels.iter().filter(|(e, k)| e != k) {
        out = out.replace(&serde_json::to_string(expr)?, &serde_json::to_string(kernel)?);
    }
    serde_json::from_str::<serde_json::Value>(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> (tempfile::TempDir, Vec<PathBuf>) {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("cute")).expect("mkdir");
        std::fs::write(d.path().join("cute/tensor.hpp"), "").expect("write");
        std::fs::write(d.path().join("cuda_fp16.h"), "").expect("write");
        let r = vec![d.path().to_path_buf()];
        (d, r)
    }

    fn check(src: &str) -> Result<(), CompileError> {
        let (_d, r) = roots();
        check_source(src, &r, &CompileLimits::default())
    }

    #[test]
    fn provided_headers_may_be_included() {
        check("#include <cuda_fp16.h>\n#include \"cute/tensor.hpp\"\n  #  include <cute/tensor.hpp> // why\nextern \"C\" __global__ void k() {}\n").expect("accepted");
        // A directive inside a comment or a string is not one.
        check("/*\n#include </etc/passwd>\n*/ const char* s = \"#include </etc/passwd>\";\n// #include <nope.h>\n").expect("accepted");
    }

    #[test]
    fn other_includes_are_refused_with_their_line() {
        for (src, line) in [
            ("#include </etc/passwd>\n", 1),
            ("\n#include \"../x.h\"\n", 2),
            ("\n\n#include <stdio.h>\n", 3),
            ("#define H </etc/passwd>\n#include H\n", 2),
            ("#inc\\\nlude </etc/passwd>\n", 1),
            ("/* x */ # /* y */ include </etc/hostname>\n", 1),
            ("%:include </etc/hostname>\n", 1),
            ("/* *\\\n/\n#include </etc/hostname>\n", 3),
            ("/**/#include </etc/hostname>\n", 1),
            ("#include_next <cuda_fp16.h>\n", 1),
            ("#include <cute/../cuda_fp16.h>\n", 1),
            ("#if __has_include(</etc/passwd>)\n#endif\n", 1),
        ] {
            let e = check(src).unwrap_err();
            assert_eq!(e.reason(), "include_refused", "{src:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}:")), "{src:?}: {e}");
        }
    }

    #[test]
    fn a_server_without_headers_says_so_instead_of_blaming_the_include() {
        let none: Vec<PathBuf> = vec![];
        let e = check_source("#include <mma.h>\n", &none, &CompileLimits::default()).unwrap_err();
        assert_eq!(e.reason(), "nvrtc_unavailable", "{e}");
        // What no server provides is still the author's fault.
        assert_eq!(check_source("#include </etc/passwd>\n", &none, &CompileLimits::default()).unwrap_err().reason(), "include_refused");
        // Source that includes nothing compiles without headers.
        check_source("extern \"C\" __global__ void k() {}\n", &none, &CompileLimits::default()).expect("no includes, no headers needed");
    }

    #[test]
    fn raw_strings_nul_and_size_are_refused() {
        assert_eq!(check("const char* s = R\"(\n#include </etc/passwd>\n)\";\n").unwrap_err().reason(), "raw_string");
        assert_eq!(check("int a;\0").unwrap_err().reason(), "nul_byte");
        assert_eq!(check("  \n").unwrap_err().reason(), "empty_source");
        assert_eq!(check("__device__ const char* when = __DATE__;\n").unwrap_err().reason(), "not_reproducible");
        let (_d, r) = roots();
        let small = CompileLimits { max_source_bytes: 10, ..CompileLimits::default() };
        assert_eq!(check_source("int aaaaaaaaaaaaaaa;", &r, &small).unwrap_err().reason(), "source_too_large");
    }

    #[test]
    fn options_are_the_allowed_ones() {
        let o = CompileOptions { defines: [("TILE".to_string(), "128".to_string())].into(), std: None, fast_math: true };
        assert_eq!(
            nvrtc_options(Arch::Sm90a, &o).expect("ok"),
            ["--gpu-architecture=compute_90a", "--std=c++17", "--relocatable-device-code=false", "-no-source-include", "-default-device", "-frandom-seed=0", "-DTILE=128", "--use_fast_math"]
        );
        let bad = CompileOptions { defines: [("X".to_string(), "1 -I/etc".to_string())].into(), ..Default::default() };
        assert_eq!(nvrtc_options(Arch::Sm90, &bad).unwrap_err().reason(), "bad_option");
        let bad = CompileOptions { defines: [("-I".to_string(), "1".to_string())].into(), ..Default::default() };
        assert_eq!(nvrtc_options(Arch::Sm90, &bad).unwrap_err().reason(), "bad_option");
        let bad = CompileOptions { std: Some("gnu++17".into()), ..Default::default() };
        assert_eq!(nvrtc_options(Arch::Sm90, &bad).unwrap_err().reason(), "bad_option");
        assert!(serde_json::from_str::<CompileOptions>(r#"{"arch": "sm_80"}"#).is_err(), "unknown options are refused");
    }

    #[test]
    fn logs_are_trimmed_and_names_found() {
        let long: String = (0..200).map(|i| format!("kernel.cu({i}): error: x\n")).collect();
        let t = trim_log(&long);
        assert!(t.starts_with("kernel.cu(0): error") && t.contains("line(s) left out") && t.ends_with("kernel.cu(199): error: x"), "{t}");
        assert!(t.lines().count() <= MAX_LOG_LINES + 1, "{t}");
        assert_eq!(trim_log("a\nb\n"), "a\nb");
        // One enormous line: cut, not a panic.
        let one = "x".repeat(100_000);
        assert!(trim_log(&one).len() <= MAX_LOG_BYTES, "{}", trim_log(&one).len());
        let log = "__nv_name_map(3): error: identifier \"nope\" is undefined\n  #pragma nv_mangled_name nope\n";
        assert_eq!(unresolved_names(log, &["hg".into(), "nope".into()]), ["nope"]);
        let both = format!("kernel.cu(1): error: identifier \"oops\" is undefined\n{log}");
        assert!(unresolved_names(&both, &["nope".into()]).is_empty(), "the source's own errors are reported first");
        assert!(ptx_has_entry(".weak .entry _Z1tILi3EEvPf(\n", "_Z1tILi3EEvPf"));
        assert!(ptx_has_entry(".visible .entry hgemm(\n", "hgemm"));
        assert!(!ptx_has_entry(".visible .func hgemm(\n", "hgemm"));
        assert!(!ptx_has_entry(".visible .entry hgemm2(\n", "hgemm"));
    }
}
