//! The HTTP client side of the `kaas` command: `submit`, `status`, `cancel`, `pull` and
//! `leaderboard` talk to a kaas server (`--url` / `KAAS_URL`, `--token` / `KAAS_TOKEN`).

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::de::DeserializeOwned;

use crate::catalog::{KernelView, LeaderboardView, ProblemLeaderboardView};
use crate::manifest::Manifest;
use crate::manifest::template::ManifestTemplate;
use crate::work::tune::TuningRequestView;
use crate::work::{NewSubmission, SubmissionView};
use crate::problem::DeviceClass;

/// The server a command talks to when neither `--url` nor `KAAS_URL` names one.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

#[derive(Debug, Clone, Args)]
pub struct Server {
    /// The kaas server [default: http://127.0.0.1:8080].
    #[arg(long, env = "KAAS_URL", global = true)]
    pub url: Option<String>,
    /// API token (`kaas token create` prints one); needed to submit and cancel.
    #[arg(long, env = "KAAS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

impl Server {
    /// The server's base URL, without a trailing slash.
    pub fn base(&self) -> String {
        self.url.as_deref().filter(|u| !u.is_empty()).unwrap_or(DEFAULT_URL).trim_end_matches('/').to_string()
    }

    /// Says on stderr which server answers when none was named: on a machine with several
    /// services, the default port may be another one's, and a pull from it must not pass
    /// silently as one from the server the user meant.
    pub fn announce_default(&self) {
        if self.url.as_deref().is_none_or(str::is_empty) {
            eprintln!("note: no --url or KAAS_URL given: asking {DEFAULT_URL}");
        }
    }
}

/// A problem+json answer, or a transport failure.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{status} {code}: {detail}")]
    Problem { status: u16, code: String, detail: String, body: serde_json::Value },
    #[error("cannot reach {url}: {message}")]
    Transport { url: String, message: String },
    #[error("unexpected answer from {url}: {message}")]
    Decode { url: String, message: String },
}

/// How many times a request is sent again after a `429 rate_limited` answer.
pub const RATE_LIMIT_RETRIES: u32 = 5;

pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
    /// No overall time limit: event streams last as long as the jobs.
    streaming: ureq::Agent,
}

impl Client {
    pub fn new(server: &Server) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let streaming = ureq::Agent::config_builder().http_status_as_error(false).timeout_connect(Some(Duration::from_secs(10))).build().into();
        server.announce_default();
        Client { base: server.base(), token: server.token.clone().filter(|t| !t.is_empty()), agent, streaming }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth(&self) -> Result<String, ClientError> {
        self.token.as_ref().map(|t| format!("Bearer {t}")).ok_or_else(|| ClientError::Problem {
            status: 401,
            code: "missing_token".into(),
            detail: "this needs a token: pass --token or set KAAS_TOKEN".into(),
            body: serde_json::Value::Null,
        })
    }

    /// Reads a response: its status and body text, or a problem+json error for 4xx/5xx.
    fn read(url: &str, res: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<(u16, String), ClientError> {
        let transport = |e: ureq::Error| ClientError::Transport { url: url.to_string(), message: e.to_string() };
        let mut res = res.map_err(transport)?;
        let status = res.status().as_u16();
        let text = res.body_mut().with_config().limit(64 << 20).read_to_string().map_err(transport)?;
        if status >= 400 {
            let body: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text.clone()));
            return Err(ClientError::Problem {
                status,
                code: body.get("code").and_then(|v| v.as_str()).unwrap_or("error").to_string(),
                detail: body.get("detail").and_then(|v| v.as_str()).unwrap_or(text.as_str()).to_string(),
                body,
            });
        }
        Ok((status, text))
    }

    fn answer<T: DeserializeOwned>(&self, url: &str, res: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<(u16, T), ClientError> {
        let (status, text) = Self::read(url, res)?;
        let value = serde_json::from_str(&text).map_err(|e| ClientError::Decode { url: url.to_string(), message: e.to_string() })?;
        Ok((status, value))
    }

    /// Sends a request, and again after the wait a `429 rate_limited` answer names in its
    /// Retry-After (at most [`RATE_LIMIT_RETRIES`] times, each wait at most a minute): a
    /// token over its rate is told when to come back, and a batch of submissions (the
    /// tuner's) should not fail for it. Other 429s (quotas) carry no Retry-After and are
    /// returned as they are. The limiter answers before any handler runs, so a retried
    /// POST was not applied.
    fn send(&self, mut call: impl FnMut() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let mut retries = 0;
        loop {
            let res = call()?;
            let wait = (res.status().as_u16() == 429).then(|| res.headers().get("retry-after")?.to_str().ok()?.trim().parse::<u64>().ok()).flatten();
            match wait {
                Some(secs) if retries < RATE_LIMIT_RETRIES => {
                    retries += 1;
                    std::thread::sleep(Duration::from_secs(secs.clamp(1, 60)));
                }
                _ => return Ok(res),
            }
        }
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path);
        let res = self.send(|| {
            let mut req = self.agent.get(&url);
            if let Some(t) = &self.token {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            req.call()
        });
        self.answer(&url, res).map(|(_, v)| v)
    }

    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let url = self.url(path);
        Self::read(&url, self.agent.get(&url).call()).map(|(_, text)| text)
    }

    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> Result<(u16, T), ClientError> {
        let url = self.url(path);
        let auth = self.auth()?;
        let res = self.send(|| self.agent.post(&url).header("Authorization", &auth).send_json(body));
        self.answer(&url, res)
    }

    /// Follows a submission's event stream, calling `on` with every snapshot, until the
    /// `done` event; returns the final view.
    pub fn follow(&self, id: i32, mut on: impl FnMut(&SubmissionView)) -> Result<SubmissionView, ClientError> {
        let url = self.url(&format!("/v1/submissions/{id}/events"));
        let res = self.streaming.get(&url).header("Accept", "text/event-stream").call();
        let res = res.map_err(|e| ClientError::Transport { url: url.clone(), message: e.to_string() })?;
        if res.status().as_u16() >= 400 {
            return self.get(&format!("/v1/submissions/{id}"));
        }
        let reader = std::io::BufReader::new(res.into_body().into_reader());
        let (mut name, mut data) = (String::new(), String::new());
        let mut last: Option<SubmissionView> = None;
        for line in reader.lines() {
            let line = line.map_err(|e| ClientError::Transport { url: url.clone(), message: e.to_string() })?;
            if line.is_empty() {
                if !data.is_empty() {
                    let v: SubmissionView = serde_json::from_str(&data).map_err(|e| ClientError::Decode { url: url.clone(), message: e.to_string() })?;
                    on(&v);
                    let done = name == "done";
                    last = Some(v);
                    if done {
                        break;
                    }
                }
                name.clear();
                data.clear();
            } else if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        match last {
            Some(v) if v.finished() => Ok(v),
            // The stream ended early (server restart, time limit): ask once more.
            _ => self.get(&format!("/v1/submissions/{id}")),
        }
    }
}

#[derive(Debug, Clone, Default, Args)]
pub struct SubmitArgs {
    /// The kernel: its PTX, or CUDA C++ source (`.cu`, `.cuh`, `.cpp`) for the service to
    /// compile with NVRTC (entries are then kernel names or NVRTC name expressions).
    pub ptx: PathBuf,
    /// A `kaas.hgemm.v1` manifest (repeat for several problems); with --problem, one
    /// manifest template whose grid is a function of M, N, K (see docs/submitting.md).
    #[arg(long, visible_alias = "template", required = true)]
    pub manifest: Vec<PathBuf>,
    /// Shapes (MxNxK) a manifest template is for; repeat or separate with commas.
    #[arg(long, value_delimiter = ',')]
    pub problem: Vec<String>,
    /// The CUDA C++ source, shown beside the kernel.
    #[arg(long)]
    pub source: Option<PathBuf>,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// Device classes to run on (default: every class with a worker).
    #[arg(long = "device", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Print the submission id and return at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Print the final submission as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub compile: crate::compile::CompileFlags,
}

/// Whether a kernel file is CUDA C++ source (by its extension) rather than PTX.
pub fn is_cuda_source(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("cu" | "cuh" | "cpp" | "cc" | "hpp"))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The request `kaas submit` sends.
pub fn submission_request(args: &SubmitArgs) -> anyhow::Result<NewSubmission> {
    let kernel = read(&args.ptx)?;
    let source_mode = is_cuda_source(&args.ptx);
    if source_mode && args.source.is_some() {
        bail!("{} is CUDA source, which is shown as the kernel's source: leave --source out", args.ptx.display());
    }
    if !source_mode && !args.compile.is_default() {
        bail!("-D, --fast-math and --std go with CUDA source (a .cu file), not PTX");
    }
    let mut req = NewSubmission {
        ptx: (!source_mode).then(|| kernel.clone()),
        cuda_source: source_mode.then_some(kernel),
        compile_options: if source_mode { Some(args.compile.options()?) } else { None },
        name: args.name.clone(),
        description: args.description.clone(),
        source: args.source.as_deref().map(read).transpose()?,
        device_classes: (!args.devices.is_empty()).then(|| args.devices.clone()),
        ..Default::default()
    };
    if args.problem.is_empty() {
        for path in &args.manifest {
            let text = read(path)?;
            let m: Manifest = serde_json::from_str(&text).with_context(|| format!("{} is not a kaas.hgemm.v1 manifest (a template needs --problem)", path.display()))?;
            req.manifests.push(m);
        }
    } else {
        let [path] = &args.manifest[..] else { bail!("--problem goes with exactly one --manifest (a template)") };
        let text = read(path)?;
        let t: ManifestTemplate = serde_json::from_str(&text).with_context(|| format!("{} is not a manifest template", path.display()))?;
        req.template = Some(t);
        req.problems = args.problem.clone();
    }
    Ok(req)
}

fn f(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

/// The result table of a submission: one row per job.
pub fn submission_table(v: &SubmissionView) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "submission {} \"{}\" by {}: {}", v.id, v.name, v.submitter, v.status);
    let _ = writeln!(s, "{:<26} {:<10} {:<20} {:>11} {:>8} {:>10} {:>8}", "problem", "device", "verdict", "median µs", "TFLOP/s", "×autotune", "catalog");
    let mut notes = Vec::new();
    for j in &v.jobs {
        let device = j.run.as_ref().map(|r| r.run.device_class.clone()).or_else(|| j.device_class.clone()).unwrap_or_else(|| "-".into());
        let (verdict, median, tflops, speedup, held) = match &j.run {
            Some(r) => {
                let g = r.run.timings.as_ref().and_then(|t| t.get("graph"));
                let num = |k: &str| g.and_then(|g| g.get(k)).and_then(|v| v.as_f64());
                let sp = crate::catalog::ranked_speedups(r.run.speedups.as_ref()).and_then(|s| s.get(crate::catalog::AUTOTUNE_MAX)?.as_f64());
                if r.run.verdict != "pass" {
                    notes.push(format!("{}: {}", j.path, r.run.message));
                }
                (r.run.verdict.clone(), num("median_us"), num("tflops"), sp, if r.in_catalog { "yes" } else { "" })
            }
            None => (j.state.clone(), None, None, None, ""),
        };
        let _ = writeln!(s, "{:<26} {:<10} {:<20} {:>11} {:>8} {:>10} {:>8}", j.path, device, verdict, f(median, 2), f(tflops, 1), f(speedup, 3), held);
    }
    for n in notes {
        let _ = writeln!(s, "\n{n}");
    }
    s
}

pub fn submit(server: &Server, args: &SubmitArgs) -> anyhow::Result<()> {
    let client = Client::new(server);
    let req = submission_request(args)?;
    if req.cuda_source.is_some() {
        eprintln!("compiling {} on the service…", args.ptx.display());
    }
    let (status, v): (u16, SubmissionView) = client.post("/v1/submissions", &req)?;
    if let Some(b) = &v.build {
        let kernels: Vec<String> = b.kernels.iter().map(|(e, k)| if e == k { e.clone() } else { format!("{e} → {k}") }).collect();
        eprintln!(
            "compiled for {} with NVRTC {} ({}): {}; PTX sha256 {}",
            b.arch,
            b.nvrtc_version,
            b.header_set,
            kernels.join(", "),
            v.artifact.sha256
        );
    }
    if status == 200 {
        eprintln!("the same submission was made before: following submission {}", v.id);
    } else {
        eprintln!("submission {} accepted: {} job(s) queued; {}{}", v.id, v.jobs.len(), server.base(), v.links.self_);
    }
    let open: Vec<Option<DeviceClass>> = v.jobs.iter().filter(|j| !crate::work::state::is_terminal(&j.state)).map(|j| j.device_class.clone()).collect();
    if let Some(note) = no_worker_for(&client, &open) {
        eprintln!("{note}");
    }
    if args.no_wait {
        println!("{}", v.id);
        return Ok(());
    }
    let mut bar = Progress::new(v.jobs.len() as u64, "jobs");
    let done = client.follow(v.id, |s| {
        let finished = s.jobs.iter().filter(|j| crate::work::state::is_terminal(&j.state)).count();
        let current = s.jobs.iter().find(|j| j.state == "running").or_else(|| s.jobs.iter().find(|j| j.state == "queued"));
        bar.update(finished as u64, current.map(|j| format!("{}: {}", j.path, j.stage.clone().unwrap_or_default())).unwrap_or_default());
    })?;
    bar.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
    } else {
        print!("{}", submission_table(&done));
    }
    let failed = done.jobs.iter().filter(|j| j.run.as_ref().is_none_or(|r| r.run.verdict != "pass")).count();
    if failed > 0 {
        bail!("{failed} of {} job(s) did not pass", done.jobs.len());
    }
    Ok(())
}

/// Where a follow stands: a bar on a terminal; piped or in a log, a line each time the
/// status changes (indicatif draws nothing off a terminal, and a follower that prints
/// nothing until the end looks hung).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    len: u64,
    what: &'static str,
    last: String,
}

impl Progress {
    fn new(len: u64, what: &'static str) -> Progress {
        use std::io::IsTerminal as _;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(len);
            let template = format!("{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {what}  {{wide_msg}}");
            bar.set_style(indicatif::ProgressStyle::with_template(&template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar, len, what, last: String::new() }
    }

    fn update(&mut self, done: u64, message: String) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(message);
            }
            None => {
                let line = format!("{done}/{} {} settled: {message}", self.len, self.what);
                if line != self.last {
                    eprintln!("{line}");
                    self.last = line;
                }
            }
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A note when no GPU worker the server has seen lately can run work waiting for the
/// device classes `wanted` (`None`: any GPU): it waits in the queue until one starts, and
/// a follower would otherwise spin without saying why. `None` when one can, or when the
/// server cannot say.
fn no_worker_for(client: &Client, wanted: &[Option<DeviceClass>]) -> Option<String> {
    if wanted.is_empty() {
        return None;
    }
    let health: serde_json::Value = client.get("/v1/health").ok()?;
    let classes: Vec<&str> = health["workers"]
        .as_array()?
        .iter()
        .filter(|w| matches!(w["state"].as_str(), Some("idle" | "busy")))
        .filter_map(|w| w["device_class"].as_str())
        .collect();
    let unserved: std::collections::BTreeSet<String> = wanted
        .iter()
        .filter(|c| match c {
            Some(c) => !classes.contains(&c.as_str()),
            None => classes.is_empty(),
        })
        .map(|c| c.as_ref().map_or("any GPU".to_string(), DeviceClass::to_string))
        .collect();
    if unserved.is_empty() {
        return None;
    }
    Some(format!(
        "note: no GPU worker for {} has been seen by this server lately; the work waits in the queue until one starts (`kaas serve --workers auto` or `kaas worker --gpu N` on a GPU machine, same database)",
        unserved.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["workload", "problem"])))]
pub struct RequestArgs {
    /// A workload preset (`GET /v1/workloads`), e.g. llama-3.1-8b: every GEMM of its layer.
    #[arg(long)]
    pub workload: Option<String>,
    /// With --workload: only these token counts; repeat or separate with commas.
    #[arg(long, value_delimiter = ',', requires = "workload")]
    pub tokens: Vec<u32>,
    /// A problem, `tn:MxNxK` or `sm_90/f32/tn/MxNxK`; repeat or separate with commas.
    #[arg(long, value_delimiter = ',')]
    pub problem: Vec<String>,
    /// Arch of problems that name none [server default: sm_90].
    #[arg(long)]
    pub arch: Option<String>,
    /// Accumulator of problems that name none [server default: f32].
    #[arg(long)]
    pub acc: Option<String>,
    /// Device class to tune on [server default: its tuning class].
    #[arg(long)]
    pub device: Option<String>,
    /// Admins: the jobs' priority.
    #[arg(long)]
    pub priority: Option<i32>,
    /// Print the request id and return at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Print the final request as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds between polls while waiting.
    #[arg(long, default_value_t = 2)]
    pub poll_secs: u64,
}

/// `kaas request`: asks the service to tune problems, then follows them until every one
/// is served, baseline_faster, failed or refused.
pub fn request(server: &Server, args: &RequestArgs) -> anyhow::Result<()> {
    let client = Client::new(server);
    let mut body = serde_json::json!({});
    if let Some(w) = &args.workload {
        body["workload"] = w.clone().into();
        if !args.tokens.is_empty() {
            body["tokens"] = args.tokens.clone().into();
        }
    } else {
        body["problems"] = args.problem.clone().into();
    }
    for (key, v) in [("arch", &args.arch), ("acc", &args.acc), ("device", &args.device)] {
        if let Some(v) = v {
            body[key] = v.clone().into();
        }
    }
    if let Some(p) = args.priority {
        body["priority"] = p.into();
    }
    let (status, v): (u16, TuningRequestView) = client.post("/v1/tuning-requests", &body)?;
    let queued = v.items.iter().filter(|i| i.state == "queued").count();
    eprintln!(
        "tuning request {}: {} problem(s) on {}, {}{}; {}{}",
        v.id,
        v.items.len(),
        v.device_class,
        counts_text(&v),
        if status == 200 { " (nothing new queued)" } else { "" },
        server.base(),
        v.links.self_
    );
    if queued > 0
        && let Some(note) = no_worker_for(&client, &[Some(v.device_class.clone())])
    {
        eprintln!("{note}");
    }
    if args.no_wait {
        println!("{}", v.id);
        return Ok(());
    }
    let mut bar = Progress::new(v.items.len() as u64, "problems");
    let mut now = v;
    loop {
        let settled = now.items.iter().filter(|i| crate::work::tune::state::is_terminal(&i.state)).count();
        let current = now.items.iter().find(|i| i.state == "verifying" || i.state == "tuning").or_else(|| now.items.iter().find(|i| i.state == "queued"));
        let at = current.map(|i| format!(" — {} {}{}", i.problem, i.state, i.queue_position.map(|p| format!(" (#{p} in the queue)")).unwrap_or_default())).unwrap_or_default();
        bar.update(settled as u64, format!("{}{at}", counts_text(&now)));
        if now.done {
            break;
        }
        std::thread::sleep(Duration::from_secs(args.poll_secs.max(1)));
        now = client.get(&format!("/v1/tuning-requests/{}", now.id))?;
    }
    bar.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&now)?);
    } else {
        print!("{}", request_table(&now));
    }
    Ok(())
}

fn counts_text(v: &TuningRequestView) -> String {
    v.counts.iter().map(|(s, n)| format!("{n} {s}")).collect::<Vec<_>>().join(", ")
}

/// One line per problem: its state and what to use.
pub fn request_table(v: &TuningRequestView) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<32} {:<28} {:<16} answer", "problem", "in the workload", "state");
    for i in &v.items {
        let answer = match i.state.as_str() {
            "served" => format!("{}{}", i.kernel.clone().unwrap_or_default(), i.speedup.map(|x| format!(" ({x:.3}× cuBLASLt autotuned)")).unwrap_or_default()),
            "baseline_faster" => i
                .use_instead
                .as_ref()
                .map(|b| {
                    let advice = crate::problem::Problem::from_path(&i.problem).map(|p| crate::catalog::layout_advice(p.layout, &b.layout)).unwrap_or_default();
                    format!("use {} ({} layout), {:.2} µs{advice}", b.library, b.layout, b.median_us)
                })
                .unwrap_or_default(),
            _ => i.reason.clone().or_else(|| i.stage.clone()).unwrap_or_default(),
        };
        let _ = writeln!(s, "{:<32} {:<28} {:<16} {answer}", i.problem, i.label.clone().unwrap_or_default(), i.state);
    }
    s
}

pub fn status(server: &Server, id: i32, json: bool) -> anyhow::Result<()> {
    let v: SubmissionView = Client::new(server).get(&format!("/v1/submissions/{id}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", submission_table(&v));
    }
    Ok(())
}

pub fn cancel(server: &Server, id: i32) -> anyhow::Result<()> {
    let (_, v): (u16, SubmissionView) = Client::new(server).post(&format!("/v1/submissions/{id}/cancel"), &serde_json::json!({}))?;
    print!("{}", submission_table(&v));
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct ProblemArgs {
    /// Shape, MxNxK.
    #[arg(long)]
    pub problem: String,
    #[arg(long, default_value = "f32")]
    pub acc: String,
    #[arg(long, default_value = "tn")]
    pub layout: String,
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
    /// Device class, e.g. H100-SXM or H200; the server also takes `H100`, `H100 SXM` or
    /// the driver's model name (default: the fastest anywhere).
    #[arg(long)]
    pub device: Option<String>,
}

impl ProblemArgs {
    fn path(&self) -> anyhow::Result<String> {
        let p = crate::problem::Problem::from_segments(&self.arch, &self.acc, &self.layout, &self.problem)?;
        Ok(p.path())
    }

    fn query(&self) -> String {
        // Percent-encoded: a driver's model name has spaces.
        let encode = |d: &str| d.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect::<String>();
        self.device.as_ref().map(|d| format!("?device={}", encode(d))).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// Directory to write kernel.ptx, manifest.json and kernel.json into.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
}

/// `kaas pull`: the best kernel's PTX and manifest, checked against its sha256, and its
/// signed run record (`record.json`, for `kaas verify`).
pub fn pull(server: &Server, args: &PullArgs) -> anyhow::Result<()> {
    let client = Client::new(server);
    let path = format!("/v1/kernels/{}{}", args.problem.path()?, args.problem.query());
    let raw: serde_json::Value = match client.get(&path) {
        Ok(k) => k,
        Err(ClientError::Problem { status: 404, detail, body, .. }) => {
            let instead = body.get("use_instead").map(|v| format!("\nuse instead: {v}")).unwrap_or_default();
            bail!("{detail}{instead}");
        }
        Err(e) => return Err(e.into()),
    };
    let kernel: KernelView = serde_json::from_value(raw.clone()).with_context(|| format!("unexpected answer from {path}"))?;
    // The record exactly as served: a typed copy re-serialized could differ from what was signed.
    let signed = serde_json::json!({"record": raw.get("record"), "signature": raw.get("signature")});
    if kernel.signature.is_none() {
        eprintln!("warning: the server sent no signature for this kernel's record; `kaas verify` will fail");
    }
    let ptx = client.get_text(&kernel.artifact.url)?;
    let sha = crate::signing::sha256_hex(ptx.as_bytes());
    if sha != kernel.artifact.sha256 {
        bail!("the PTX downloaded has sha256 {sha}, not the {} the manifest names", kernel.artifact.sha256);
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let p = args.out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("kernel.ptx", &ptx)?;
    write("manifest.json", &(serde_json::to_string_pretty(&kernel.manifest)? + "\n"))?;
    write("kernel.json", &(serde_json::to_string_pretty(&kernel)? + "\n"))?;
    write(crate::signing::pulled::RECORD_FILE, &(serde_json::to_string_pretty(&signed)? + "\n"))?;
    let speed = crate::catalog::ranked_speedups(kernel.run.speedups.as_ref())
        .and_then(|s| s.get(crate::catalog::AUTOTUNE_MAX)?.as_f64())
        .map_or_else(|| "not benchmarked".to_string(), |x| format!("{x:.3}× cuBLASLt-autotune-max"));
    if let Some(f) = &kernel.fallback {
        // The stand-in's speedups are about its own class, not the one asked for.
        eprintln!("note: measured on {}, not {}: {}", f.measured_on, f.requested_device, f.note);
    }
    println!("{} on {}: {} by {} ({speed}); sha256 {}", kernel.problem, kernel.device_class, kernel.name, kernel.submitter, sha);
    println!("wrote {}/kernel.ptx, manifest.json, kernel.json, record.json", args.out.display());
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// A directory written by `kaas pull` (kernel.ptx, manifest.json, record.json).
    pub dir: PathBuf,
    /// The service's public key, pinned: base64 (as /.well-known/kaas-signing-keys lists
    /// it) or hex of its 32 bytes, or a file holding that or that document's JSON.
    #[arg(long, env = "KAAS_PUBLIC_KEY")]
    pub public_key: Option<String>,
    /// Fetch the keys from this server's /.well-known/kaas-signing-keys instead (online:
    /// trusts that server's answer).
    #[arg(long)]
    pub url: Option<String>,
}

/// Public keys from text: a key (base64 or hex), a key object, or a key list document.
pub fn parse_public_keys(text: &str) -> anyhow::Result<Vec<crate::signing::PublicKey>> {
    use crate::signing::PublicKey;
    let t = text.trim();
    if !t.starts_with('{') {
        return Ok(vec![PublicKey::from_text(t)?]);
    }
    let doc: serde_json::Value = serde_json::from_str(t).context("the public key JSON does not parse")?;
    let items: Vec<&serde_json::Value> = match doc.get("keys").and_then(|k| k.as_array()) {
        Some(list) => list.iter().collect(),
        None => vec![&doc],
    };
    let mut keys = Vec::new();
    for item in items {
        let text = item.get("public_key").and_then(|v| v.as_str()).context("a key object without `public_key`")?;
        keys.push(PublicKey::from_text(text)?);
    }
    if keys.is_empty() {
        bail!("the key list holds no keys");
    }
    Ok(keys)
}

/// `kaas verify`: every check of a pulled directory; an error when any fails.
pub fn verify(args: &VerifyArgs) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    if let Some(given) = &args.public_key {
        let path = Path::new(given);
        let text = if path.is_file() { read(path)? } else { given.clone() };
        let what = if path.is_file() { format!("--public-key {given}") } else { format!("--public-key {given} (no file of that name; read as a key)") };
        keys.extend(parse_public_keys(&text).with_context(|| what)?);
    }
    if let Some(url) = &args.url {
        let client = Client::new(&Server { url: Some(url.clone()), token: None });
        let text = client.get_text("/.well-known/kaas-signing-keys")?;
        keys.extend(parse_public_keys(&text).with_context(|| format!("the keys at {url}"))?);
    }
    if keys.is_empty() {
        bail!("no public key: pass --public-key (the service's key, pinned; fully offline) or --url (fetched from the server)");
    }
    let checks = crate::signing::pulled::verify_dir(&args.dir, &keys);
    for c in &checks {
        println!("{} {:<13} {}", if c.passed { "ok  " } else { "FAIL" }, c.name, c.detail);
    }
    let failed: Vec<&str> = checks.iter().filter(|c| !c.passed).map(|c| c.name).collect();
    if !failed.is_empty() {
        bail!("{} is not what the service signed: {} failed", args.dir.display(), failed.join(", "));
    }
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct LeaderboardArgs {
    /// One problem's ranking (MxNxK); the global ranking of submitters when absent.
    #[arg(long)]
    pub problem: Option<String>,
    #[arg(long, default_value = "f32")]
    pub acc: String,
    #[arg(long, default_value = "tn")]
    pub layout: String,
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
    #[arg(long)]
    pub device: Option<String>,
}

pub fn leaderboard(server: &Server, args: &LeaderboardArgs) -> anyhow::Result<()> {
    let client = Client::new(server);
    let mut s = String::new();
    match &args.problem {
        Some(shape) => {
            let p = ProblemArgs { problem: shape.clone(), acc: args.acc.clone(), layout: args.layout.clone(), arch: args.arch.clone(), device: args.device.clone() };
            let v: ProblemLeaderboardView = client.get(&format!("/v1/leaderboard/{}{}", p.path()?, p.query()))?;
            let _ = writeln!(s, "{}", v.problem);
            let _ = writeln!(s, "{:>4} {:<24} {:<10} {:>11} {:>8} {:>10} {:>10}", "rank", "submitter", "device", "median µs", "TFLOP/s", "×autotune", "submission");
            for r in &v.rows {
                let _ = writeln!(s, "{:>4} {:<24} {:<10} {:>11.2} {:>8} {:>10} {:>10}", r.rank, r.submitter, r.device_class, r.median_us, f(r.tflops, 1), f(r.speedup_vs_autotune_max, 3), r.submission_id);
            }
        }
        None => {
            let query = ProblemArgs { problem: String::new(), acc: String::new(), layout: String::new(), arch: String::new(), device: args.device.clone() }.query();
            let v: LeaderboardView = client.get(&format!("/v1/leaderboard{query}"))?;
            let _ = writeln!(s, "submitters on {}", v.device_class.as_deref().unwrap_or("every device class"));
            let _ = writeln!(s, "{:>4} {:<24} {:<18} {:>6} {:>8} {:>18}", "rank", "submitter", "device classes", "held", "entered", "geomean ×autotune");
            for r in &v.submitters {
                let classes = DeviceClass::list(&r.device_classes);
                let _ = writeln!(s, "{:>4} {:<24} {:<18} {:>6} {:>8} {:>18}", r.rank, r.submitter, classes, r.problems_held, r.problems_entered, f(r.geomean_speedup_vs_autotune_max, 3));
            }
        }
    }
    print!("{s}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server that answers each connection with the next of `answers` (status line and
    /// headers; the body `{}`), then stops; returns its URL and how many it served.
    fn canned(answers: Vec<&'static str>) -> (String, std::thread::JoinHandle<usize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = std::thread::spawn(move || {
            let mut n = 0;
            for head in answers {
                let (mut conn, _) = listener.accept().unwrap();
                read_request(&mut conn);
                let body = "{}";
                write!(conn, "{head}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
                n += 1;
            }
            n
        });
        (url, served)
    }

    /// Reads one whole request, head and body: a server that closes with unread bytes in
    /// its socket makes the kernel answer with a reset, which the client sees instead of
    /// the canned answer (this test failed that way on CI when the body came late).
    fn read_request(conn: &mut std::net::TcpStream) {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
        let chunked = head.contains("transfer-encoding: chunked");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while if chunked { !got.ends_with(b"0\r\n\r\n") } else { got.len() < head_end + length } {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn a_rate_limited_request_is_sent_again_after_retry_after() {
        let (url, served) = canned(vec!["HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1", "HTTP/1.1 200 OK"]);
        let client = Client::new(&Server { url: Some(url), token: Some("t".into()) });
        let started = std::time::Instant::now();
        let (status, _): (u16, serde_json::Value) = client.post("/v1/submissions", &serde_json::json!({})).unwrap();
        assert_eq!(status, 200);
        assert!(started.elapsed() >= Duration::from_secs(1), "waited as told");
        assert_eq!(served.join().unwrap(), 2);
    }

    #[test]
    fn a_quota_429_without_retry_after_is_an_error_at_once() {
        let (url, served) = canned(vec!["HTTP/1.1 429 Too Many Requests"]);
        let client = Client::new(&Server { url: Some(url), token: Some("t".into()) });
        let err = client.get::<serde_json::Value>("/v1/x").unwrap_err();
        assert!(matches!(err, ClientError::Problem { status: 429, .. }), "{err}");
        assert_eq!(served.join().unwrap(), 1);
    }
}
