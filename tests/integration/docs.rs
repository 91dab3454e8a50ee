//! The docs check: every shell command in README.md, docs/*.md and the Python client's
//! README, run in order against a fresh `kaas serve` on the shipped catalog, answering as
//! the text says. A command exits 0 and its output is no problem+json error, unless its
//! comment starts with what it answers instead: an HTTP status and code (`# 400
//! unknown_device`, `# 304`) or an exit status and word (`# 3 baseline_faster`). Commands
//! that need a GPU, a fleet, the network or minutes are skipped, each printed with why
//! (`SKIP_RULES`); a reader sees every one that did not run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::fleet::Serve;

/// One command of a ```sh block, its continuation lines joined.
#[derive(Debug, Clone)]
struct DocCommand {
    file: String,
    line: usize,
    text: String,
    /// The trailing `# …` comment, which may say what the command answers.
    comment: String,
}

/// (a substring of the command, why the check does not run it). The first that matches.
const SKIP_RULES: &[(&str, &str)] = &[
    ("cargo test", "the test suite itself, which runs this check"),
    ("cargo run", "starts a server: the check runs its own `kaas serve` on the shipped catalog"),
    ("kaas serve", "starts a server: the check runs its own `kaas serve --workers 0` on the shipped catalog"),
    ("pip install", "installs packages from the network: CI installs them before the suite"),
    ("pip download", "downloads packages from the network"),
    ("scripts/cuda-tools.sh", "installs NVIDIA's wheels from the network: CI runs it before the suite, whose environment the check inherits"),
    ("localhost:8081", "needs the downloads listener (`kaas serve --downloads-bind`)"),
    ("/events", "a server-sent event stream: it lasts until every problem is settled, which needs a GPU worker"),
    ("db.internal", "a fleet's Postgres host, as an example"),
    ("createdb", "a fleet's Postgres, as an example"),
    ("/etc/kaas", "a fleet's key path, as an example"),
    ("nvidia-smi", "needs a GPU"),
    ("kaas worker", "needs a GPU"),
    ("kaas run ", "needs a GPU"),
    ("kaas baselines", "needs a GPU"),
    ("kaas tune --emit-ptx", "compiles thousands of configurations: minutes"),
    ("kaas tune", "needs a GPU"),
    ("device-run.sh", "the GPU machine's runs"),
    ("gpu-check.sh", "the GPU machine's runs"),
    ("h200-catalog.py", "adopts a batch measured on H200 workers"),
    ("gpu_torch.py", "needs a GPU"),
    ("bench/", "needs a GPU"),
    ("kaas_client check", "runs kernels on a GPU"),
    ("--template m.json", "placeholder files (kernel.cu, m.json): the README's source path runs the real ones"),
    ("--manifest m.json", "placeholder files (kernel.ptx, m.json): the README's source path runs the real ones"),
    ("--manifest template.json", "placeholder files (kernel.ptx, template.json): the README's source path runs the real ones"),
    ("kaas status 42", "placeholder submission id: the README's source path runs `kaas status $ID`"),
    ("kaas leaderboard [", "optional flags in brackets: the README runs both forms"),
    ("examples/source/wmma_tn.cu --template examples/source/wmma_tn.json   --problem", "follows the verdicts until a GPU worker gives them"),
    ("http://host:8080", "placeholder server"),
    ("KAAS_TOKEN=…", "placeholder token"),
    ("every sha256, and every signed record", "verifies the lock that the placeholder server's resolve would write"),
];

/// Commands that need NVIDIA's compile tools (`scripts/cuda-tools.sh`), and the ones that
/// use what they make.
const NEEDS_TOOLS: &[&str] = &["kaas compile", "wmma_tn.ptx", "$ID"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
    docs.sort();
    let mut files = vec![repo().join("README.md")];
    files.extend(docs);
    files.push(repo().join("clients/python/README.md"));
    files
}

/// Where a trailing comment starts: a `#` after whitespace, outside quotes.
fn comment_at(line: &str) -> Option<usize> {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && prev != '\\' => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return Some(i),
            _ => {}
        }
        prev = c;
    }
    None
}

fn commands_of(path: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.strip_prefix(repo()).unwrap_or(path).display().to_string();
    let mut out = vec![];
    let (mut in_sh, mut joined, mut start, mut depth) = (false, String::new(), 0, 0);
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_sh = !in_sh && line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if joined.is_empty() {
            start = i + 1;
        }
        if let Some(body) = line.trim_end().strip_suffix('\\') {
            joined.push_str(body);
            continue;
        }
        // A loop or conditional over several lines is one command.
        let first = line.split_whitespace().next().unwrap_or_default();
        depth += i32::from(["for", "while", "if"].contains(&first)) - i32::from(["done", "fi"].contains(&first.trim_end_matches(';')));
        joined.push_str(line);
        if depth > 0 {
            joined.push('\n');
            continue;
        }
        let whole = std::mem::take(&mut joined);
        let (cmd, comment) = match comment_at(&whole) {
            Some(at) => (whole[..at].trim().to_string(), whole[at + 1..].trim().to_string()),
            None => (whole.trim().to_string(), String::new()),
        };
        if !cmd.is_empty() {
            out.push(DocCommand { file: file.clone(), line: start, text: cmd, comment });
        }
    }
    out
}

/// What the comment says the command answers: (exit status, HTTP status, a word the
/// output holds). `# 3 baseline_faster`: exit 3; `# 404 baseline_faster …`: curl exits 0
/// and the answer holds the code; no such comment: exit 0 and no error answer.
fn expectation(comment: &str) -> (i32, Option<u16>, Option<String>) {
    let mut words = comment.split_whitespace();
    let Some(n) = words.next().and_then(|w| w.trim_end_matches(':').parse::<u16>().ok()) else { return (0, None, None) };
    let word = words.next().map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_').to_string()).filter(|w| w.contains('_'));
    if n < 100 { (i32::from(n), None, word) } else { (0, Some(n), word.or(Some(n.to_string()))) }
}

fn skip_reason(c: &DocCommand, have_tools: bool) -> Option<String> {
    let whole = format!("{} # {}", c.text, c.comment);
    if let Some((_, why)) = SKIP_RULES.iter().find(|(pat, _)| whole.contains(pat)) {
        return Some(why.to_string());
    }
    if !have_tools && NEEDS_TOOLS.iter().any(|p| c.text.contains(p)) {
        return Some("needs NVIDIA's compile tools: run `eval \"$(scripts/cuda-tools.sh)\"` first".into());
    }
    None
}

/// A folder shaped like the repository's root for the commands to run in: the shipped
/// catalog, examples and scripts linked in, everything they write kept out of the tree.
fn workspace(dir: &Path) {
    for name in ["kernels", "examples", "scripts"] {
        std::os::unix::fs::symlink(repo().join(name), dir.join(name)).unwrap();
    }
    let bin = dir.join(".bin");
    std::fs::create_dir(&bin).unwrap();
    let shim = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // What `pip install ./clients/python` puts on PATH, without installing.
    shim("kaas-lock", "exec python3 -m kaas_client lock \"$@\"");
    shim("python", "exec python3 \"$@\"");
}

#[actix_web::test]
async fn every_documented_command_answers_as_the_text_says() {
    if Command::new("python3").arg("--version").output().is_err() {
        crate::skipped!("no python3 for the client's commands");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    workspace(dir);
    let db = format!("sqlite://{}?mode=rwc", dir.join("kaas.db").display());
    let mut serve = Serve::start(&db, &repo().join("kernels"), dir.join(".serve.log"));
    serve.wait_ready(Duration::from_secs(300)).await;
    let url = format!("127.0.0.1:{}", serve.port);
    let kaas_dir = Path::new(env!("CARGO_BIN_EXE_kaas")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}:{}", dir.join(".bin").display(), kaas_dir.display(), std::env::var("PATH").unwrap_or_default());
    let have_tools = std::env::var_os("KAAS_CUDA_INCLUDE").is_some();
    let state = dir.join(".env");
    std::fs::write(&state, "").unwrap();

    let (mut ran, mut skipped, mut failures) = (0, 0, vec![]);
    for file in documents() {
        for c in commands_of(&file) {
            if let Some(why) = skip_reason(&c, have_tools) {
                crate::skipped!("{}:{} `{}`: {why}", c.file, c.line, c.text);
                skipped += 1;
                continue;
            }
            let text = c.text.replace("localhost:8080", &url).replace("127.0.0.1:8080", &url);
            // Each command in a shell of its own; its variables carry to the next (the
            // token, a sha256), as in one terminal.
            let script = format!(
                "set -a; . {state}; set +a; set -a\n{text}\nrc=$?\nexport -p | grep -vE '^declare -x (PWD|OLDPWD|SHLVL|_)=' > {state}.new; mv {state}.new {state}; exit $rc",
                state = state.display()
            );
            let out = Command::new("timeout")
                .args(["120", "bash", "-c", &script])
                .current_dir(dir)
                .env("PATH", &path)
                .env("PYTHONPATH", repo().join("clients/python"))
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("KAAS_URL", format!("http://{url}"))
                .env("KAAS_DATABASE_URL", &db)
                .env("KAAS_CACHE", dir.join(".cache"))
                .env_remove("KAAS_TOKEN")
                .env_remove("KAAS_CONFIG")
                .output()
                .unwrap();
            ran += 1;
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let rc = out.status.code().unwrap_or(-1);
            let (want_rc, want_http, want_word) = expectation(&c.comment);
            let error_answer = stdout.contains("\"type\":\"urn:kaas:error:");
            let fault = if rc != want_rc {
                Some(format!("exit status {rc}, the text says {want_rc}"))
            } else if want_http.is_none() && want_word.is_none() && error_answer {
                Some("answered an error the text does not mention".to_string())
            } else {
                want_word.as_ref().filter(|w| !stdout.contains(w.as_str()) && !stderr.contains(w.as_str())).map(|w| format!("the text says it answers {w}"))
            };
            if let Some(f) = fault {
                let cut = |s: &str| s.chars().take(600).collect::<String>();
                failures.push(format!("{}:{} `{}`: {f}\n  stdout: {}\n  stderr: {}", c.file, c.line, c.text, cut(&stdout), cut(&stderr)));
            }
        }
    }
    serve.kill();
    eprintln!("docs check: {ran} commands ran, {skipped} skipped (each printed with why)");
    assert!(ran >= 40, "only {ran} documented commands ran");
    assert!(failures.is_empty(), "{} documented commands do not answer as the text says:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn comments_say_what_a_command_answers() {
    assert_eq!(expectation("400 unknown_device"), (0, Some(400), Some("unknown_device".into())));
    assert_eq!(expectation("404 baseline_faster (the catalog's kernel loses)"), (0, Some(404), Some("baseline_faster".into())));
    assert_eq!(expectation("304"), (0, Some(304), Some("304".into())));
    assert_eq!(expectation("3 baseline_faster: what to use instead"), (3, None, Some("baseline_faster".into())));
    assert_eq!(expectation("the presets"), (0, None, None));
    assert_eq!(comment_at("curl -s -H \"If-None-Match: \\\"$SHA\\\"\" x   # 304"), Some(41));
    assert_eq!(comment_at("curl 'a#b' # c"), Some(11));
}
