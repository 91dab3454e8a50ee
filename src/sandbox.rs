//! The sandbox: untrusted PTX runs only in a `kaas sandbox` process with its own CUDA
//! context, one job per process. The child reads a [`Job`] as JSON on stdin and writes
//! one [`RunOutcome`] as JSON on stdout. The parent ([`run_in_sandbox`]) never loads the
//! PTX: it enforces a wall-clock limit and turns whatever happens to the child — a hang,
//! a crash, a signal, garbage on stdout — into a verdict, so it survives them all.
//!
//! A hung kernel cannot be cancelled. The child's per-launch watchdog reports `timeout`
//! and the child then exits at once, skipping every destructor (freeing memory would
//! wait for the kernel); the driver tears the context down with the process. Should the
//! child still not exit, the parent's wall-clock limit kills it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::gpu::{self, DeviceFacts, Gpu};
use crate::harness::{BenchSettings, Job, RunOutcome, bench_candidate, verify_candidate};
use crate::tuner::ondemand::{TuneJob, TuneOutcome};
use crate::verify::Verdict;

/// Environment variable naming the executable to spawn as the sandbox (it is run with
/// the argument `sandbox`); the current executable when unset.
pub const EXE_ENV: &str = "KAAS_SANDBOX_EXE";

/// Largest job accepted on stdin: PTX up to the static limit (16 MiB) plus its manifest.
pub const MAX_JOB_BYTES: u64 = 20 << 20;

/// Stdout kept from the child: an outcome is a few KiB; the JIT log can add some.
const STDOUT_LIMIT: usize = 8 << 20;
/// The end of the child's stderr kept for messages.
const STDERR_TAIL: usize = 4 << 10;

const SANDBOX: &str = "sandbox";

/// What to spawn as the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Set in the child on top of this process's environment, e.g. `CUDA_VISIBLE_DEVICES`
    /// for a worker's GPU.
    pub envs: Vec<(OsString, OsString)>,
}

impl SandboxCommand {
    pub fn new(program: impl Into<PathBuf>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        SandboxCommand { program: program.into(), args: args.into_iter().map(Into::into).collect(), envs: Vec::new() }
    }

    /// The same command with `key=value` set in the child's environment.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// The child process, its stdout and stderr piped (the caller sets stdin).
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args).envs(self.envs.iter().map(|(k, v)| (k, v))).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// `$KAAS_SANDBOX_EXE sandbox`, or this executable with `sandbox`.
    pub fn from_env() -> std::io::Result<Self> {
        let program = match std::env::var_os(EXE_ENV).filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe()?,
        };
        Ok(SandboxCommand::new(program, ["sandbox"]))
    }
}

/// Runs `job` in a fresh `kaas sandbox` process (see [`SandboxCommand::from_env`]).
pub fn run_in_sandbox(job: &Job, wall_limit: Duration) -> RunOutcome {
    match SandboxCommand::from_env() {
        Ok(cmd) => run_with(&cmd, job, wall_limit),
        Err(e) => RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot find the sandbox executable: {e}")),
    }
}

/// How the child ended.
#[derive(Debug)]
pub(crate) enum Exit {
    Finished(ExitStatus),
    /// The wall-clock limit passed; the child was killed.
    TimedOut,
    /// The caller asked to stop; the child was killed.
    Cancelled,
    WaitFailed(String),
}

/// Runs `job` in a child spawned from `cmd`, killed after `wall_limit`.
pub fn run_with(cmd: &SandboxCommand, job: &Job, wall_limit: Duration) -> RunOutcome {
    run_with_cancel(cmd, job, wall_limit, &AtomicBool::new(false))
}

/// [`run_with`], and the child is killed as soon as `cancel` is set (the job was
/// cancelled or its lease lost); the outcome then says so and must not be stored.
pub fn run_with_cancel(cmd: &SandboxCommand, job: &Job, wall_limit: Duration, cancel: &AtomicBool) -> RunOutcome {
    let started = Instant::now();
    let input = match serde_json::to_vec(job) {
        Ok(v) => v,
        Err(e) => return RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot serialise the job: {e}")),
    };
    let (exit, stdout, stderr) = match run_child(cmd, None, input, wall_limit, cancel, None) {
        Ok(ended) => ended,
        Err(early) => return *early,
    };
    let mut outcome = judge(exit, &stdout, &stderr, wall_limit);
    if outcome.duration_ms == 0.0 {
        outcome.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    }
    outcome
}

/// Called with each chunk the child writes on stderr, as it comes.
pub type StderrWatch = Box<dyn FnMut(&[u8]) + Send>;

/// Spawns `cmd` (with `arg` added), writes `input` on its stdin, and waits for it until
/// `wall_limit` or `cancel`; how it ended, its stdout and the tail of its stderr.
fn run_child(cmd: &SandboxCommand, arg: Option<&str>, input: Vec<u8>, wall_limit: Duration, cancel: &AtomicBool, watch: Option<StderrWatch>) -> Result<(Exit, Vec<u8>, Vec<u8>), Box<RunOutcome>> {
    let started = Instant::now();
    let mut command = cmd.command();
    if let Some(a) = arg {
        command.arg(a);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| Box::new(RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot start the sandbox `{}`: {e}", cmd.program.display()))))?;
    // Feed stdin from its own thread: a child that never reads must not block us.
    let stdin = child.stdin.take();
    std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            // A child that exits early closes the pipe; that is its business.
            let _ = s.write_all(&input);
        }
    });
    let out = Capture::stdout(child.stdout.take());
    let err = Capture::start_watched(child.stderr.take(), STDERR_TAIL, true, watch);
    let exit = wait(&mut child, started + wall_limit, cancel);
    // The pipes close when the child is gone; a grandchild holding them open only costs
    // this grace period.
    let stdout = out.finish(Duration::from_secs(2));
    let stderr = err.finish(Duration::from_millis(500));
    Ok((exit, stdout, stderr))
}

/// Runs a tune job in a `kaas sandbox --tune` child spawned from `cmd`, killed after
/// `wall_limit` or when `cancel` is set. `progress` gets each `kaas-progress` line's
/// stage and detail as the child writes it. A child that ends without a result gets the
/// verdict a verify job's child would (crashed, timeout), with no winner.
pub fn run_tune_with_cancel(
    cmd: &SandboxCommand,
    job: &TuneJob,
    wall_limit: Duration,
    cancel: &AtomicBool,
    progress: Arc<Mutex<Option<(String, String)>>>,
) -> TuneOutcome {
    let started = Instant::now();
    let input = match serde_json::to_vec(job) {
        Ok(v) => v,
        Err(e) => return TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot serialise the tune job: {e}")), Default::default()),
    };
    let mut line = Vec::new();
    let watch: StderrWatch = Box::new(move |chunk: &[u8]| {
        for &b in chunk {
            if b != b'\n' {
                // A progress line is short; anything longer is not one.
                if line.len() < 4096 {
                    line.push(b);
                }
                continue;
            }
            let text = String::from_utf8_lossy(&line).to_string();
            line.clear();
            if let Some(rest) = text.strip_prefix(crate::tuner::ondemand::PROGRESS) {
                let (stage, detail) = rest.split_once(' ').unwrap_or((rest, ""));
                if let Ok(mut p) = progress.lock() {
                    *p = Some((stage.to_string(), detail.to_string()));
                }
            }
        }
    });
    let (exit, stdout, stderr) = match run_child(cmd, Some("--tune"), input, wall_limit, cancel, Some(watch)) {
        Ok(ended) => ended,
        Err(early) => return TuneOutcome::without_winner(*early, Default::default()),
    };
    let mut outcome = judge_tune(exit, &stdout, &stderr, wall_limit);
    if outcome.run.duration_ms == 0.0 {
        outcome.run.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    }
    outcome
}

/// A tune child's result: the [`TuneOutcome`] it wrote (whole stdout, or its last line)
/// unless the caller cancelled it; else what [`judge`] makes of how it ended.
fn judge_tune(exit: Exit, stdout: &[u8], stderr: &[u8], wall_limit: Duration) -> TuneOutcome {
    let written = {
        let text = String::from_utf8_lossy(stdout);
        let text = text.trim();
        serde_json::from_str::<TuneOutcome>(text)
            .ok()
            .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()).and_then(|l| serde_json::from_str::<TuneOutcome>(l).ok()))
    };
    let ended = matches!(exit, Exit::Finished(_) | Exit::TimedOut);
    match written {
        Some(o) if ended => o,
        _ => TuneOutcome::without_winner(judge(exit, stdout, stderr, wall_limit), Default::default()),
    }
}

pub(crate) fn wait(child: &mut Child, deadline: Instant, cancel: &AtomicBool) -> Exit {
    let mut pause = Duration::from_millis(2);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Exit::Finished(status),
            Ok(None) => {}
            Err(e) => return Exit::WaitFailed(e.to_string()),
        }
        if cancel.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            return Exit::Cancelled;
        }
        let now = Instant::now();
        if now >= deadline {
            // Kill fails only when it has just exited; reap it either way.
            let _ = child.kill();
            return match child.wait() {
                Ok(_) => Exit::TimedOut,
                Err(e) => Exit::WaitFailed(format!("after killing it: {e}")),
            };
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Bytes read from a child's pipe on a thread of their own.
pub(crate) struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    fn stdout(pipe: Option<ChildStdout>) -> Capture {
        Capture::start(pipe, STDOUT_LIMIT, false)
    }

    fn stderr(pipe: Option<ChildStderr>) -> Capture {
        Capture::start(pipe, STDERR_TAIL, true)
    }


    /// Keeps the first `limit` bytes, or with `tail` the last `limit` bytes.
    pub(crate) fn start(pipe: Option<impl Read + Send + 'static>, limit: usize, tail: bool) -> Capture {
        Capture::start_watched(pipe, limit, tail, None)
    }

    /// [`Capture::start`], and `watch` sees every chunk as it is read.
    fn start_watched(pipe: Option<impl Read + Send + 'static>, limit: usize, tail: bool, mut watch: Option<StderrWatch>) -> Capture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let thread = pipe.map(|mut pipe| {
            let buf = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    let n = match pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if let Some(w) = watch.as_mut() {
                        w(&chunk[..n]);
                    }
                    let Ok(mut b) = buf.lock() else { break };
                    if tail {
                        b.extend_from_slice(&chunk[..n]);
                        if b.len() > 2 * limit {
                            let cut = b.len() - limit;
                            b.drain(..cut);
                        }
                    } else if b.len() < limit {
                        let take = n.min(limit - b.len());
                        b.extend_from_slice(&chunk[..take]);
                    }
                }
            })
        });
        Capture { buf, thread }
    }

    /// What was read, once the pipe closed or `grace` passed.
    pub(crate) fn finish(self, grace: Duration) -> Vec<u8> {
        let until = Instant::now() + grace;
        if let Some(t) = &self.thread {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.buf.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// The child's outcome: all of stdout as one JSON document, or else its last non-empty
/// line (anything the libraries printed before it is ignored).
fn parse_outcome(stdout: &[u8]) -> Result<RunOutcome, String> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        return Err("it wrote nothing on stdout".into());
    }
    match serde_json::from_str::<RunOutcome>(text) {
        Ok(o) => Ok(o),
        Err(whole) => {
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            serde_json::from_str::<RunOutcome>(last).map_err(|_| format!("its stdout is not a result ({whole}): {}", excerpt(text, 200)))
        }
    }
}

fn excerpt(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    format!("\nstderr (last lines):\n{tail}")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// The verdict for how the child ended and what it wrote. A result the child wrote wins
/// (a child whose watchdog fired may hang on its way out and be killed after reporting).
fn judge(exit: Exit, stdout: &[u8], stderr: &[u8], wall_limit: Duration) -> RunOutcome {
    let parsed = parse_outcome(stdout);
    match exit {
        Exit::WaitFailed(e) => RunOutcome::early(Verdict::InternalError, SANDBOX, format!("waiting for the sandbox failed: {e}")),
        Exit::Cancelled => RunOutcome::early(Verdict::InternalError, SANDBOX, "cancelled: the sandbox was killed before it finished"),
        Exit::TimedOut => parsed.unwrap_or_else(|_| {
            RunOutcome::early(
                Verdict::Timeout,
                SANDBOX,
                format!("the sandbox did not finish within its wall-clock limit of {:.1} s and was killed{}", wall_limit.as_secs_f64(), stderr_tail(stderr)),
            )
        }),
        Exit::Finished(status) => parsed.unwrap_or_else(|why| {
            let how = match (status.signal(), status.code()) {
                (Some(sig), _) => format!("was killed by signal {sig} ({})", signal_name(sig)),
                (None, Some(code)) => format!("exited with status {code}"),
                (None, None) => "ended".to_string(),
            };
            RunOutcome::early(Verdict::Crashed, SANDBOX, format!("the sandbox process {how} without a result: {why}{}", stderr_tail(stderr)))
        }),
    }
}

/// What `kaas sandbox --probe` prints: the GPUs this process sees, or why none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub devices: Vec<DeviceFacts>,
    #[serde(default)]
    pub error: Option<String>,
}

fn probe() -> Probe {
    let count = match gpu::device_count() {
        Ok(n) => n,
        Err(why) => return Probe { devices: vec![], error: Some(why) },
    };
    let mut devices = Vec::new();
    for ordinal in 0..count {
        match Gpu::open(ordinal) {
            Ok(g) => devices.push(g.facts().clone()),
            Err(e) => return Probe { devices, error: Some(format!("cannot open device {ordinal}: {e}")) },
        }
    }
    Probe { devices, error: None }
}

/// Asks a sandbox child which GPUs it sees (the caller loads no CUDA library itself).
pub fn run_probe(cmd: &SandboxCommand, limit: Duration) -> Probe {
    let out = cmd.command().arg("--probe").stdin(Stdio::null()).spawn();
    let mut child = match out {
        Ok(c) => c,
        Err(e) => return Probe { devices: vec![], error: Some(format!("cannot start `{}`: {e}", cmd.program.display())) },
    };
    let out = Capture::stdout(child.stdout.take());
    let err = Capture::stderr(child.stderr.take());
    let exit = wait(&mut child, Instant::now() + limit, &AtomicBool::new(false));
    let stdout = out.finish(Duration::from_secs(1));
    let stderr = err.finish(Duration::from_millis(200));
    let text = String::from_utf8_lossy(&stdout);
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|_| Probe {
        devices: vec![],
        error: Some(format!("the probe ended ({exit:?}) without an answer{}", stderr_tail(&stderr))),
    })
}

/// Exits at once when the parent dies (a killed worker must not leave its sandbox
/// running a kernel): the child is re-parented, so its parent id changes.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(250));
            if std::os::unix::process::parent_id() != parent {
                gpu::exit_now(137);
            }
        }
    });
}

/// `kaas sandbox`: one job from stdin, its outcome on stdout. Every failure, including a
/// malformed job, is an outcome; the process exits 0 whenever it could write one. With
/// `--probe`, prints the GPUs it sees instead.
pub fn sandbox_main(probe_only: bool, tune: bool) -> anyhow::Result<()> {
    exit_with_parent();
    if probe_only {
        println!("{}", serde_json::to_string(&probe())?);
        return Ok(());
    }
    if tune {
        return tune_main();
    }
    let mut text = String::new();
    let outcome = match std::io::stdin().take(MAX_JOB_BYTES + 1).read_to_string(&mut text) {
        Err(e) => RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot read the job from stdin: {e}")),
        Ok(n) if n as u64 > MAX_JOB_BYTES => {
            RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the job is larger than {MAX_JOB_BYTES} bytes"))
        }
        Ok(_) => match serde_json::from_str::<Job>(&text) {
            Err(e) => RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the job is not valid JSON: {e}")),
            Ok(job) => run_job(&job),
        },
    };
    let line = serde_json::to_string(&outcome)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    if outcome.device_lost {
        // A kernel may still be running: leave without waiting for it.
        gpu::exit_now(0);
    }
    Ok(())
}

/// `kaas sandbox --tune`: one [`TuneJob`] from stdin, its [`TuneOutcome`] on stdout,
/// progress lines on stderr.
fn tune_main() -> anyhow::Result<()> {
    let mut text = String::new();
    let outcome = match std::io::stdin().take(MAX_JOB_BYTES + 1).read_to_string(&mut text) {
        Err(e) => TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot read the tune job from stdin: {e}")), Default::default()),
        Ok(n) if n as u64 > MAX_JOB_BYTES => {
            TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the tune job is larger than {MAX_JOB_BYTES} bytes")), Default::default())
        }
        Ok(_) => match serde_json::from_str::<TuneJob>(&text) {
            Err(e) => TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the tune job is not valid JSON: {e}")), Default::default()),
            Ok(job) => run_tune_job(&job),
        },
    };
    let line = serde_json::to_string(&outcome)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    if outcome.run.device_lost {
        gpu::exit_now(0);
    }
    Ok(())
}

fn run_tune_job(job: &TuneJob) -> TuneOutcome {
    let failed = |why: String| TuneOutcome::without_winner(RunOutcome::early(Verdict::InternalError, SANDBOX, why), Default::default());
    if let Err(why) = gpu::available() {
        return failed(format!("no GPU: {why}"));
    }
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => return failed(format!("cannot open the GPU: {e}")),
    };
    let mut progress = |stage: &str, detail: &str| {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}{stage} {}", crate::tuner::ondemand::PROGRESS, detail.replace('\n', " "));
        let _ = err.flush();
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::tuner::ondemand::run(&gpu, job, &mut progress)));
    let outcome = ran.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        let mut o = RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the tuner panicked: {what}"));
        o.device = Some(gpu.facts().clone());
        TuneOutcome::without_winner(o, Default::default())
    });
    if outcome.run.device_lost {
        std::mem::forget(gpu);
    }
    outcome
}

fn run_job(job: &Job) -> RunOutcome {
    if let Err(why) = gpu::available() {
        return RunOutcome::early(Verdict::InternalError, SANDBOX, format!("no GPU: {why}"));
    }
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => return RunOutcome::early(Verdict::InternalError, SANDBOX, format!("cannot open the GPU: {e}")),
    };
    let settings = match BenchSettings::of(job) {
        Ok(s) => s,
        Err(why) => return RunOutcome::early(Verdict::InternalError, SANDBOX, why),
    };
    let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut outcome = verify_candidate(&gpu, job);
        // Only a kernel that passed verification is timed.
        if let (Verdict::Pass, Some(settings)) = (outcome.verdict, &settings) {
            bench_candidate(&gpu, job, settings, &mut outcome);
        }
        outcome
    }));
    let outcome = verified.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        let mut o = RunOutcome::early(Verdict::InternalError, SANDBOX, format!("the harness panicked: {what}"));
        o.device = Some(gpu.facts().clone());
        o
    });
    if outcome.device_lost {
        // Dropping the stream would wait for the hung kernel.
        std::mem::forget(gpu);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{SimpleConfig, manifest_for};
    use crate::problem::{Acc, Arch, Layout, Problem, Shape};

    fn job() -> Job {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(64, 64, 64).expect("shape"));
        Job { ptx: "not even PTX".into(), manifest: manifest_for(&p, &SimpleConfig::SMALL), secret_seed: 42, watchdog_ms: None, bench: None }
    }

    fn sh(script: &str, args: &[&str]) -> SandboxCommand {
        let mut all = vec!["-c".to_string(), script.to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        SandboxCommand::new("sh", all)
    }

    #[test]
    fn a_child_that_outlives_the_wall_clock_is_killed_as_a_timeout() {
        let started = Instant::now();
        let o = run_with(&sh("sleep 10", &[]), &job(), Duration::from_millis(300));
        assert_eq!(o.verdict, Verdict::Timeout, "{o:?}");
        assert_eq!(o.stage, "sandbox");
        assert!(o.message.contains("wall-clock limit of 0.3 s"), "{}", o.message);
        assert!(started.elapsed() < Duration::from_secs(5), "the parent waited for the child");
    }

    #[test]
    fn a_child_killed_by_a_signal_crashed_and_its_stderr_is_quoted() {
        let o = run_with(&sh("echo 'illegal memory access' >&2; kill -SEGV $$", &[]), &job(), Duration::from_secs(10));
        assert_eq!(o.verdict, Verdict::Crashed, "{o:?}");
        assert!(o.message.contains("signal 11 (SIGSEGV)"), "{}", o.message);
        assert!(o.message.contains("illegal memory access"), "{}", o.message);
    }

    #[test]
    fn garbage_or_silence_on_stdout_is_a_crash() {
        let o = run_with(&sh("cat >/dev/null; echo 'Segmentation fault?'", &[]), &job(), Duration::from_secs(10));
        assert_eq!(o.verdict, Verdict::Crashed, "{o:?}");
        assert!(o.message.contains("exited with status 0") && o.message.contains("not a result"), "{}", o.message);
        let o = run_with(&sh("exit 3", &[]), &job(), Duration::from_secs(10));
        assert_eq!(o.verdict, Verdict::Crashed);
        assert!(o.message.contains("status 3") && o.message.contains("nothing on stdout"), "{}", o.message);
    }

    #[test]
    fn the_childs_result_is_taken_even_after_noise_or_a_hang_on_exit() {
        let reported = RunOutcome::early(Verdict::Timeout, "binary exact test", "launch 0 did not finish");
        let json = serde_json::to_string(&reported).expect("json");
        // Library noise before the result line is ignored.
        let o = run_with(&sh("cat >/dev/null; echo 'warning: something'; printf '%s\\n' \"$0\"", &[&json]), &job(), Duration::from_secs(10));
        assert_eq!(o, RunOutcome { duration_ms: o.duration_ms, ..reported.clone() });
        // A child that reports, then hangs (a kernel it cannot cancel), is killed; its report stands.
        let o = run_with(&sh("printf '%s\\n' \"$0\"; exec sleep 10", &[&json]), &job(), Duration::from_millis(500));
        assert_eq!(o.verdict, Verdict::Timeout);
        assert_eq!(o.stage, "binary exact test");
    }

    #[test]
    fn the_child_reads_the_job_on_stdin() {
        // The child echoes the job's secret seed back inside an outcome message.
        let script = r#"seed=$(sed -n 's/.*"secret_seed":\([0-9]*\).*/\1/p'); printf '{"verdict":"pass","stage":"x","message":"seed %s"}\n' "$seed""#;
        let o = run_with(&sh(script, &[]), &job(), Duration::from_secs(10));
        assert_eq!(o.verdict, Verdict::Pass, "{o:?}");
        assert_eq!(o.message, "seed 42");
    }

    #[test]
    fn the_child_gets_the_commands_environment() {
        let cmd = sh(r#"cat >/dev/null; printf '{"verdict":"pass","stage":"x","message":"%s"}\n' "$KAAS_TEST_VAR""#, &[]).env("KAAS_TEST_VAR", "gpu 3");
        assert_eq!(run_with(&cmd, &job(), Duration::from_secs(10)).message, "gpu 3");
    }

    #[test]
    fn a_missing_sandbox_executable_is_the_services_fault() {
        let o = run_with(&SandboxCommand::new("/nonexistent/kaas", ["sandbox"]), &job(), Duration::from_secs(1));
        assert_eq!(o.verdict, Verdict::InternalError);
        assert!(o.message.contains("/nonexistent/kaas"), "{}", o.message);
    }

    #[test]
    fn the_wall_limit_covers_every_launch_sequence() {
        let j = Job { watchdog_ms: Some(1000), ..job() };
        assert_eq!(j.wall_limit(), Duration::from_secs(30 + 13));
        // A benchmark adds its budget (and the paced rounds' share of it on top), both
        // autotune screens' safety limits (20 s each unless the settings say), 30 s of
        // set-up and one watchdog.
        let rounds = Duration::from_secs(5).mul_f64(1.0 + crate::harness::bench::PACED_SHARE);
        let b = Job { bench: Some(serde_json::json!({"budget_ms": 5000})), ..j.clone() };
        assert_eq!(b.wall_limit(), Duration::from_secs(43 + 40 + 30 + 1) + rounds);
        let b = Job { bench: Some(serde_json::json!({"budget_ms": 5000, "autotune_budget_ms": 1000})), ..j };
        assert_eq!(b.wall_limit(), Duration::from_secs(43 + 2 + 30 + 1) + rounds);
    }
}
