//! The downloads listener: artifact bytes only, without copies. `GET` and `HEAD
//! /v1/artifacts/{sha256}` on a port of its own (`kaas serve --downloads-bind`), answered
//! with `sendfile(2)` from content-addressed files, as nginx serves static files.
//!
//! Why a second listener: actix-http copies every body into its per-connection write
//! buffer and the kernel copies it again into the socket; for ~200 KB of PTX those copies
//! and the framework around them cost kaas twice nginx's CPU per download (BENCHMARKS.md,
//! issue 2). Artifacts are immutable and named by their sha256, so they can live as files
//! (`<dir>/<sha256>.ptx` and `.ptx.gz`, written once, atomically) and go out with
//! `sendfile`. The main API keeps serving the same URL; this one is for bulk clients.
//!
//! What it answers: 200 with the PTX (or its gzip representation for `Accept-Encoding:
//! gzip`), strong ETags as on the API, `304` on a matching `If-None-Match`, `Cache-Control:
//! public, immutable`, HTTP/1.1 keep-alive and pipelining; `404`, `405` and `400` as
//! problem+json. Anything else belongs to the main API.
//!
//! Artifacts it has not seen are resolved through a [`Resolver`] (the API's own artifact
//! cache and database, on the API's runtime), then written to the directory.
//!
//! What it holds against hostile or broken clients ([`Limits`], issue 38): a request head
//! must arrive whole within `header_timeout` (else 408 and close); a connection with no
//! request in progress, or a response that makes no progress, is closed after
//! `idle_timeout`; connections are capped per peer address (429) and in all (503); and the
//! listener's descriptors (connections and open artifact files together) stay within the
//! process's `RLIMIT_NOFILE` less `reserve_fds`, so that the API on the same process can
//! always accept, open its database and log, whatever this listener is sent.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use rustix::net::SendFlags;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use super::cache::ArtifactBody;
use super::conns::{Admission, problem_text};

/// Starts a resolver's error when the database is unavailable (the rest says why): the
/// listener answers 503 with `Retry-After`, as the API does, instead of 500.
pub const UNAVAILABLE: &str = "unavailable: ";

/// Looks an artifact up by sha256 (`None`: no such artifact).
pub type Resolver = Arc<dyn Fn(String) -> BoxFuture<'static, Result<Option<Arc<ArtifactBody>>, String>> + Send + Sync>;

/// Artifacts kept open at once (two descriptors each) at most; the least recently used
/// are closed. Fewer when the descriptor budget is small (see [`Budget`]).
const OPEN_ARTIFACTS: u64 = 256;

/// The listener's defences; `kaas serve --downloads-*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// A request head must be complete this long after its first byte.
    pub header_timeout: Duration,
    /// A connection waiting for its next request, or a response the client does not read,
    /// is closed after this long.
    pub idle_timeout: Duration,
    /// Connections open at once, in all (further ones get 503).
    pub max_connections: usize,
    /// Connections open at once from one IP address (further ones get 429).
    pub max_connections_per_peer: usize,
    /// Descriptors of the process's `RLIMIT_NOFILE` this listener never uses: the API's.
    pub reserve_fds: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_peer: 64,
            reserve_fds: 256,
        }
    }
}

/// What the descriptor limit leaves this listener: connections and open artifacts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub connections: usize,
    pub open_artifacts: u64,
}

impl Limits {
    /// The budget under a descriptor limit of `nofile` (`None`: unlimited). Invariant:
    /// `connections + 2 * open_artifacts + 1` (the +1: a connection accepted only to be
    /// refused) never exceeds `nofile - reserve_fds`, and both are at least 1 (a limit
    /// below the reserve still serves, one connection at a time).
    pub fn budget(&self, nofile: Option<u64>) -> Budget {
        let Some(nofile) = nofile else {
            return Budget { connections: self.max_connections.max(1), open_artifacts: OPEN_ARTIFACTS };
        };
        let spare = nofile.saturating_sub(self.reserve_fds).saturating_sub(1);
        // A quarter of the spare descriptors at most for open files, the rest for sockets.
        let open_artifacts = (spare / 8).clamp(1, OPEN_ARTIFACTS);
        let sockets = spare.saturating_sub(2 * open_artifacts).max(1);
        Budget { connections: (self.max_connections as u64).min(sockets).max(1) as usize, open_artifacts }
    }
}

/// The process's soft descriptor limit (`None`: unlimited).
pub fn nofile_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Largest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 32;

/// One artifact as open files.
struct Entry {
    identity: File,
    identity_len: u64,
    gzip: File,
    gzip_len: u64,
    etag: String,
    gzip_etag: String,
}

/// The files of the artifacts served recently, open.
pub struct Downloads {
    dir: PathBuf,
    resolve: Resolver,
    open: moka::sync::Cache<String, Arc<Entry>>,
    limits: Limits,
    budget: Budget,
    conns: Arc<Admission>,
}

impl Downloads {
    /// Serves the artifacts `resolve` finds, keeping their files in `dir` (created), with
    /// the default [`Limits`].
    pub fn new(dir: &Path, resolve: Resolver) -> std::io::Result<Arc<Downloads>> {
        Downloads::with_limits(dir, resolve, Limits::default())
    }

    /// The same with `limits`, budgeted against this process's descriptor limit now.
    pub fn with_limits(dir: &Path, resolve: Resolver, limits: Limits) -> std::io::Result<Arc<Downloads>> {
        std::fs::create_dir_all(dir)?;
        let budget = limits.budget(nofile_limit());
        Ok(Arc::new(Downloads {
            dir: dir.to_path_buf(),
            resolve,
            open: moka::sync::Cache::new(budget.open_artifacts),
            conns: Admission::new("the downloads listener", budget.connections, limits.max_connections_per_peer),
            limits,
            budget,
        }))
    }

    /// What the descriptor limit left this listener.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    async fn entry(&self, sha: &str) -> Result<Option<Arc<Entry>>, String> {
        if let Some(e) = self.open.get(sha) {
            return Ok(Some(e));
        }
        let Some(body) = (self.resolve)(sha.to_string()).await? else { return Ok(None) };
        // File writes (and their fsync) block: off the runtime's threads.
        let dir = self.dir.clone();
        let files = tokio::task::spawn_blocking(move || write_files(&dir, &body).map_err(|e| format!("writing the artifact's files under {}: {e}", dir.display())))
            .await
            .map_err(|e| format!("the file writer failed: {e}"))??;
        let entry = Arc::new(files);
        self.open.insert(sha.to_string(), entry.clone());
        Ok(Some(entry))
    }
}

/// An artifact's two files in `dir`, open. Content-addressed: an existing file holding
/// exactly these bytes is reused (files are written through a rename); anything else is
/// rewritten.
fn write_files(dir: &Path, body: &ArtifactBody) -> std::io::Result<Entry> {
    let write = |name: String, bytes: &[u8]| -> std::io::Result<File> {
        let path = dir.join(&name);
        if std::fs::read(&path).is_ok_and(|existing| existing == bytes) {
            return File::open(&path);
        }
        // Removed on drop if anything fails before the rename.
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        File::open(&path)
    };
    Ok(Entry {
        identity: write(format!("{}.ptx", body.sha256), &body.body)?,
        identity_len: body.body.len() as u64,
        gzip: write(format!("{}.ptx.gz", body.sha256), &body.gzip)?,
        gzip_len: body.gzip.len() as u64,
        etag: body.etag.clone(),
        gzip_etag: body.gzip_etag.clone(),
    })
}

/// Accepts connections on `listener` forever, one task per connection. A failed accept
/// (out of descriptors, say) is logged and retried after a pause, never fatal. A
/// connection over the caps is told why in one non-blocking write and closed at once, so
/// it holds its descriptor for no longer than the accept.
pub async fn serve(listener: TcpListener, downloads: Arc<Downloads>) -> std::io::Result<()> {
    tracing::info!(budget = ?downloads.budget, limits = ?downloads.limits, "downloads listener limits");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "downloads listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match downloads.conns.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                tracing::debug!(%peer, detail = %refused.detail, "downloads listener: connection refused");
                let _ = stream.try_write(refused.response().as_bytes());
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let d = downloads.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = connection(stream, &d).await {
                tracing::debug!(error = %e, "downloads connection ended");
            }
        });
    }
}

/// What one request asks for.
#[derive(Debug, PartialEq)]
struct Request {
    head_only: bool,
    /// The artifact asked for, or why there is none: a path other than an artifact's, or a
    /// method other than GET and HEAD.
    sha: Result<String, Refusal>,
    gzip: bool,
    if_none_match: Option<String>,
    close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Refusal {
    NotFound,
    Method,
}

/// Parses one request head from the start of `buf`: `Ok(None)` when incomplete, else the
/// request and the bytes it took. Bodies are not accepted (GET and HEAD have none).
fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed request: {e}")),
    };
    let method = req.method.unwrap_or("");
    let path = req.path.unwrap_or("");
    let header = |name: &str| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| std::str::from_utf8(h.value).ok());
    // Every Content-Length counts, not the first: a request whose copies disagree is
    // ambiguous (request smuggling through a proxy that reads the other one), RFC 9110 §8.6.
    let lengths: Vec<&[u8]> = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("content-length")).map(|h| h.value.trim_ascii()).collect();
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        return Err("the request carries Content-Length headers that disagree".into());
    }
    if lengths.iter().any(|v| *v != b"0") || header("transfer-encoding").is_some() {
        return Err("a request body is not accepted here".into());
    }
    let http10 = req.version == Some(0);
    let connection = header("connection").unwrap_or("");
    let close = if http10 { !connection.eq_ignore_ascii_case("keep-alive") } else { connection.eq_ignore_ascii_case("close") };
    let sha = path.strip_prefix("/v1/artifacts/").map(|s| s.split('?').next().unwrap_or(""));
    let sha = match (method, sha) {
        ("GET" | "HEAD", Some(s)) if crate::catalog::bundle::is_sha256_hex(s) => Ok(s.to_string()),
        ("GET" | "HEAD", _) => Err(Refusal::NotFound),
        _ => Err(Refusal::Method),
    };
    Ok(Some((
        Request {
            head_only: method == "HEAD",
            sha,
            gzip: header("accept-encoding").is_some_and(super::gzip_accepted),
            if_none_match: header("if-none-match").map(str::to_string),
            close,
        },
        used,
    )))
}

async fn connection(mut stream: TcpStream, d: &Downloads) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    // When the first byte of the request head now in `buf` arrived (None: `buf` is empty,
    // the connection is idle between requests).
    let mut head_started: Option<Instant> = None;
    loop {
        // Serve every complete request already buffered (pipelining), then read more.
        loop {
            match parse(&buf) {
                Ok(Some((req, used))) => {
                    buf.drain(..used);
                    let close = req.close;
                    respond(&mut stream, d, req).await?;
                    if close {
                        return Ok(());
                    }
                    head_started = (!buf.is_empty()).then(Instant::now);
                }
                Ok(None) if buf.len() >= MAX_HEAD => {
                    return problem(&mut stream, d, 431, "request_too_large", "the request head exceeds 16 KiB", true).await;
                }
                Ok(None) => break,
                Err(why) => return problem(&mut stream, d, 400, "invalid_request", &why, true).await,
            }
        }
        let mut chunk = [0u8; 4096];
        let (deadline, idle) = match head_started {
            Some(t) => (t + d.limits.header_timeout, false),
            None => (Instant::now() + d.limits.idle_timeout, true),
        };
        let n = match tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk)).await {
            Ok(read) => read?,
            // Nothing asked: close quietly, as HTTP/1.1 allows.
            Err(_) if idle => return Ok(()),
            Err(_) => {
                let detail = format!("the request head did not arrive whole within {} s", d.limits.header_timeout.as_secs_f64());
                return problem(&mut stream, d, 408, "request_timeout", &detail, true).await;
            }
        };
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        head_started.get_or_insert_with(Instant::now);
    }
}

async fn respond(stream: &mut TcpStream, d: &Downloads, req: Request) -> std::io::Result<()> {
    let sha = match req.sha {
        Ok(s) => s,
        Err(Refusal::NotFound) => return problem(stream, d, 404, "not_found", "this listener serves GET /v1/artifacts/{sha256} only", req.close).await,
        Err(Refusal::Method) => return problem(stream, d, 405, "method_not_allowed", "this listener answers GET and HEAD only", req.close).await,
    };
    let entry = match d.entry(&sha).await {
        Ok(Some(e)) => e,
        Ok(None) => return problem(stream, d, 404, "not_found", &format!("no artifact with sha256 {sha}"), req.close).await,
        Err(why) => {
            tracing::error!(%sha, error = %why, "downloads: cannot serve an artifact");
            if let Some(detail) = why.strip_prefix(UNAVAILABLE) {
                let retry = format!("retry-after: {}\r\n", crate::api::error::RETRY_AFTER_SECS);
                return problem_with(stream, d, 503, "unavailable", detail, req.close, &retry).await;
            }
            return problem(stream, d, 500, "internal", "the artifact could not be read", req.close).await;
        }
    };
    let (file, len, etag) = if req.gzip { (&entry.gzip, entry.gzip_len, &entry.gzip_etag) } else { (&entry.identity, entry.identity_len, &entry.etag) };
    let matches = req.if_none_match.as_deref().is_some_and(|v| {
        v.split(',').map(str::trim).map(|t| t.trim_start_matches("W/")).any(|t| t == "*" || t == entry.etag || t == entry.gzip_etag)
    });
    let connection = if req.close { "close" } else { "keep-alive" };
    let common = format!(
        "etag: {etag}\r\ncache-control: public, max-age=31536000, immutable\r\nvary: Accept-Encoding\r\nconnection: {connection}\r\n"
    );
    if matches {
        return write_all(stream, d, format!("HTTP/1.1 304 Not Modified\r\n{common}\r\n").as_bytes(), false).await;
    }
    let encoding = if req.gzip { "content-encoding: gzip\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len}\r\n{encoding}content-location: /v1/artifacts/{sha}\r\ncontent-disposition: attachment; filename=\"{sha}.ptx\"\r\n{common}\r\n"
    );
    if req.head_only {
        return write_all(stream, d, head.as_bytes(), false).await;
    }
    write_all(stream, d, head.as_bytes(), true).await?;
    send_file(stream, d, file, len).await
}

/// Waits until `stream` takes more bytes; a client that reads nothing for the idle
/// timeout is given up (its connection would otherwise be held forever).
async fn writable(stream: &TcpStream, d: &Downloads) -> std::io::Result<()> {
    match tokio::time::timeout(d.limits.idle_timeout, stream.writable()).await {
        Ok(ready) => ready,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client read nothing within the idle timeout")),
    }
}

/// Writes `bytes`; with `more`, tells the kernel the body follows (`MSG_MORE`), so head
/// and body leave in full segments.
async fn write_all(stream: &TcpStream, d: &Downloads, mut bytes: &[u8], more: bool) -> std::io::Result<()> {
    let flags = if more { SendFlags::MORE | SendFlags::NOSIGNAL } else { SendFlags::NOSIGNAL };
    while !bytes.is_empty() {
        writable(stream, d).await?;
        match stream.try_io(tokio::io::Interest::WRITABLE, || rustix::net::send(stream, bytes, flags).map_err(std::io::Error::from)) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The whole of `file` into the socket by `sendfile(2)`, from an explicit offset (the
/// file is shared between connections and its position never moves).
async fn send_file(stream: &TcpStream, d: &Downloads, file: &File, len: u64) -> std::io::Result<()> {
    let mut offset = 0u64;
    while offset < len {
        writable(stream, d).await?;
        let left = (len - offset) as usize;
        match stream.try_io(tokio::io::Interest::WRITABLE, || rustix::fs::sendfile(stream, file, Some(&mut offset), left).map_err(std::io::Error::from)) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the artifact file is shorter than recorded")),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A problem+json answer, in the API's `ProblemDetails` shape.
async fn problem(stream: &mut TcpStream, d: &Downloads, status: u16, code: &str, detail: &str, close: bool) -> std::io::Result<()> {
    problem_with(stream, d, status, code, detail, close, "").await
}

/// The same with extra header lines (each ending in CRLF).
async fn problem_with(stream: &mut TcpStream, d: &Downloads, status: u16, code: &str, detail: &str, close: bool, headers: &str) -> std::io::Result<()> {
    write_all(stream, d, problem_text(status, code, detail, close, headers).as_bytes(), false).await
}


#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Request {
        parse(text.as_bytes()).expect("parses").expect("complete").0
    }

    #[test]
    fn requests_parse_into_what_is_asked() {
        let sha = "a".repeat(64);
        let r = one(&format!("GET /v1/artifacts/{sha} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br, gzip\r\nIf-None-Match: \"{sha}\"\r\n\r\n"));
        assert_eq!(r, Request { head_only: false, sha: Ok(sha.clone()), gzip: true, if_none_match: Some(format!("\"{sha}\"")), close: false });
        assert!(one(&format!("HEAD /v1/artifacts/{sha} HTTP/1.1\r\n\r\n")).head_only);
        assert!(one(&format!("GET /v1/artifacts/{sha} HTTP/1.0\r\n\r\n")).close, "HTTP/1.0 closes by default");
        assert!(!one(&format!("GET /v1/artifacts/{sha} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")).close);
        assert!(one(&format!("GET /v1/artifacts/{sha} HTTP/1.1\r\nConnection: close\r\n\r\n")).close);
        assert!(!one(&format!("GET /v1/artifacts/{sha} HTTP/1.1\r\nAccept-Encoding: gzip;q=0\r\n\r\n")).gzip);
        assert_eq!(one("GET /v1/artifacts/ABC HTTP/1.1\r\n\r\n").sha, Err(Refusal::NotFound));
        assert_eq!(one("GET /v1/kernels HTTP/1.1\r\n\r\n").sha, Err(Refusal::NotFound));
        assert_eq!(one(&format!("DELETE /v1/artifacts/{sha} HTTP/1.1\r\n\r\n")).sha, Err(Refusal::Method));
    }

    #[test]
    fn the_budget_leaves_the_reserve_to_the_api() {
        let l = Limits { max_connections: 10_000, reserve_fds: 100, ..Limits::default() };
        let b = l.budget(Some(300));
        assert!(b.connections as u64 + 2 * b.open_artifacts < 200, "{b:?}");
        assert!(b.connections >= 100, "{b:?}");
        assert_eq!(l.budget(Some(50)), Budget { connections: 1, open_artifacts: 1 }, "below the reserve: one at a time");
        assert_eq!(l.budget(None).connections, 10_000);
        assert_eq!(Limits { max_connections: 7, ..l }.budget(Some(1 << 20)).connections, 7);
    }

    #[test]
    fn partial_heads_wait_and_garbage_or_bodies_are_refused() {
        assert_eq!(parse(b"GET /v1/artifacts/").expect("no error"), None);
        assert!(parse(b"\x01\x02 nonsense\r\n\r\n").is_err());
        assert!(parse(b"POST /v1/artifacts/x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").is_err());
        let two_lengths = parse(b"GET /v1/artifacts/x HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello").unwrap_err();
        assert!(two_lengths.contains("disagree"), "{two_lengths}");
        assert!(parse(b"GET /v1/artifacts/x HTTP/1.1\r\nContent-Length: 0\r\ncontent-length: 0\r\n\r\n").is_ok());
        // Two pipelined requests: the first takes only its own bytes.
        let two = format!("GET /v1/artifacts/{0} HTTP/1.1\r\n\r\nGET /v1/artifacts/{0} HTTP/1.1\r\n\r\n", "b".repeat(64));
        let (_, used) = parse(two.as_bytes()).expect("parses").expect("complete");
        assert_eq!(used, two.len() / 2);
    }
}
