//! The downloads listener (`kaas serve --downloads-bind`, `src/api/downloads.rs`) over
//! real TCP: the bytes, headers, gzip, 304, HEAD, keep-alive with pipelining, and the
//! refusals; the files it keeps are the artifact's bytes; its timeouts and connection caps.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use kaas::api::cache::ArtifactBody;
use kaas::api::downloads::{self, Downloads, Resolver};

const PTX: &str = ".version 8.8\n.target sm_90\n.address_size 64\n// a downloads-listener test artifact\n";

/// A listener on a free port serving the one artifact; returns its address, the sha256
/// and the directory of files.
fn start() -> (String, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (addr, sha) = start_in(dir.path());
    (addr, sha, dir)
}

/// The same, keeping its files in `dir`.
fn start_in(dir: &std::path::Path) -> (String, String) {
    start_with(dir, downloads::Limits::default())
}

/// The same with `limits`.
fn start_with(dir: &std::path::Path, limits: downloads::Limits) -> (String, String) {
    let sha = kaas::signing::sha256_hex(PTX.as_bytes());
    let known: HashMap<String, Arc<ArtifactBody>> = [(sha.clone(), Arc::new(ArtifactBody::new(sha.clone(), PTX.to_string())))].into();
    let resolve: Resolver = Arc::new(move |s| {
        let found = known.get(&s).cloned();
        Box::pin(async move { Ok(found) })
    });
    let d = Downloads::with_limits(dir, resolve, limits).expect("downloads");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let _ = rt.block_on(async move { downloads::serve(tokio::net::TcpListener::from_std(listener).expect("listener"), d).await });
    });
    (addr, sha)
}

/// One response off the stream: status, lower-cased headers, body (by Content-Length).
fn response(s: &mut TcpStream) -> (u16, HashMap<String, String>, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("read"), 1, "connection closed mid-head: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let text = String::from_utf8(head).expect("utf-8 head");
    let mut lines = text.split("\r\n");
    let status: u16 = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("status line");
    let headers: HashMap<String, String> =
        lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_ascii_lowercase(), v.to_string())).collect();
    (status, headers, Vec::new())
}

fn with_body(s: &mut TcpStream, head_only: bool) -> (u16, HashMap<String, String>, Vec<u8>) {
    let (status, headers, _) = response(s);
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; if head_only { 0 } else { len }];
    s.read_exact(&mut body).expect("body");
    (status, headers, body)
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s
}

#[test]
fn the_downloads_listener_serves_artifacts_like_the_api() {
    let (addr, sha, dir) = start();
    let mut s = connect(&addr);

    // Identity, then gzip and a revalidation pipelined on the same connection.
    write!(s, "GET /v1/artifacts/{sha} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, h, body) = with_body(&mut s, false);
    assert_eq!(status, 200);
    assert_eq!(body, PTX.as_bytes());
    assert_eq!(h["etag"], format!("\"{sha}\""));
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(h["content-type"], "text/plain; charset=utf-8");
    assert_eq!(h["connection"], "keep-alive");
    write!(s, "GET /v1/artifacts/{sha} HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\nGET /v1/artifacts/{sha} HTTP/1.1\r\nIf-None-Match: W/\"{sha}\"\r\n\r\nHEAD /v1/artifacts/{sha} HTTP/1.1\r\n\r\n").unwrap();
    let (status, h, body) = with_body(&mut s, false);
    assert_eq!((status, h["content-encoding"].as_str(), h["etag"].clone()), (200, "gzip", format!("\"{sha}-gzip\"")));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut text).expect("gzip");
    assert_eq!(text, PTX);
    let (status, h, body) = with_body(&mut s, true);
    assert_eq!((status, body.len()), (304, 0));
    assert_eq!(h["etag"], format!("\"{sha}\""));
    let (status, h, _) = with_body(&mut s, true);
    assert_eq!(status, 200);
    assert_eq!(h["content-length"], PTX.len().to_string(), "HEAD tells the length and sends no body");

    // The files it keeps are the artifact's bytes, named by sha256.
    assert_eq!(std::fs::read(dir.path().join(format!("{sha}.ptx"))).unwrap(), PTX.as_bytes());

    // Refusals, as problem+json; `Connection: close` closes.
    let missing = "0".repeat(64);
    for (request, code) in [
        (format!("GET /v1/artifacts/{missing} HTTP/1.1\r\n\r\n"), 404),
        ("GET /v1/kernels/sm_90/f32/tn/64x64x64 HTTP/1.1\r\n\r\n".to_string(), 404),
        (format!("DELETE /v1/artifacts/{sha} HTTP/1.1\r\n\r\n"), 405),
    ] {
        s.write_all(request.as_bytes()).unwrap();
        let (status, h, body) = with_body(&mut s, false);
        assert_eq!(status, code, "{request}");
        assert_eq!(h["content-type"], "application/problem+json");
        let j: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
        assert_eq!(j["status"], code);
    }
    write!(s, "GET /v1/artifacts/{sha} HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let (status, h, _) = with_body(&mut s, false);
    assert_eq!((status, h["connection"].as_str()), (200, "close"));
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).expect("closed"), 0, "the server closes after `Connection: close`");

    // Garbage: 400, then the connection closes.
    let mut g = connect(&addr);
    g.write_all(b"\x00\x01 not http\r\n\r\n").unwrap();
    let (status, _, _) = with_body(&mut g, false);
    assert_eq!(status, 400);
}

#[test]
fn a_damaged_file_is_rewritten_not_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (addr, sha) = start_in(dir.path());
    let get = |addr: &str| {
        let mut s = connect(addr);
        write!(s, "GET /v1/artifacts/{sha} HTTP/1.1\r\n\r\n").unwrap();
        with_body(&mut s, false)
    };
    assert_eq!(get(&addr).2, PTX.as_bytes());
    // Same length, other bytes: what a torn or tampered file looks like. A new listener on
    // the same directory (a restart) must not trust it.
    let path = dir.path().join(format!("{sha}.ptx"));
    std::fs::write(&path, PTX.replace("test", "TEST")).unwrap();
    let (again, _) = start_in(dir.path());
    let (status, _, body) = get(&again);
    assert_eq!((status, body.as_slice()), (200, PTX.as_bytes()));
    assert_eq!(std::fs::read(&path).unwrap(), PTX.as_bytes());
}

#[test]
fn disagreeing_content_lengths_are_refused() {
    let (addr, sha, _dir) = start();
    let mut s = connect(&addr);
    // The first copy says no body, the second says five bytes: read either way, one of
    // two parsers is wrong about where the next request starts.
    write!(s, "GET /v1/artifacts/{sha} HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello").unwrap();
    let (status, h, body) = with_body(&mut s, false);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(String::from_utf8_lossy(&body).contains("disagree"));
}

#[test]
fn slow_heads_get_408_and_idle_connections_are_closed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let limits = downloads::Limits { header_timeout: Duration::from_secs(1), idle_timeout: Duration::from_secs(2), ..Default::default() };
    let (addr, sha) = start_with(dir.path(), limits);

    // Half a request line, then a byte a while: the head has a second, not forever.
    let started = std::time::Instant::now();
    let mut slow = connect(&addr);
    slow.write_all(b"GET /v1/arti").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    slow.write_all(b"f").unwrap();
    let (status, _, body) = with_body(&mut slow, false);
    assert_eq!(status, 408, "{}", String::from_utf8_lossy(&body));
    assert!(started.elapsed() < Duration::from_secs(5), "408 after {:?}", started.elapsed());

    // A connection that asks nothing, or nothing more after an answer, is closed.
    for ask_first in [false, true] {
        let started = std::time::Instant::now();
        let mut idle = connect(&addr);
        if ask_first {
            write!(idle, "GET /v1/artifacts/{sha} HTTP/1.1\r\n\r\n").unwrap();
            assert_eq!(with_body(&mut idle, false).0, 200);
        }
        let mut rest = Vec::new();
        assert_eq!(idle.read_to_end(&mut rest).expect("closed, not timed out"), 0);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(8), "closed after {took:?}");
    }
}

/// A connection from `ip` (any 127.0.0.0/8 address) to `addr`.
async fn connect_from(ip: &str, addr: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{ip}:0").parse().unwrap()).expect("bind the source address");
    socket.connect(addr.parse().unwrap()).await.expect("connect")
}

/// What the listener says first on `s`: the status, or 0 when it says nothing within a
/// moment (an admitted connection waits for its request).
async fn first_status(s: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&buf[..n]).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(1),
        Ok(_) => 2,
        Err(_) => 0,
    }
}

#[actix_web::test]
async fn connections_are_capped_per_peer_and_in_all() {
    let dir = tempfile::tempdir().expect("temp dir");
    let limits = downloads::Limits { max_connections: 3, max_connections_per_peer: 2, ..Default::default() };
    let (addr, _sha) = start_with(dir.path(), limits);

    let mut a1 = connect_from("127.0.0.1", &addr).await;
    let mut a2 = connect_from("127.0.0.1", &addr).await;
    assert_eq!((first_status(&mut a1).await, first_status(&mut a2).await), (0, 0), "two from one address are admitted");
    let mut a3 = connect_from("127.0.0.1", &addr).await;
    assert_eq!(first_status(&mut a3).await, 429, "a third from the same address is refused");
    let mut b1 = connect_from("127.0.0.2", &addr).await;
    assert_eq!(first_status(&mut b1).await, 0, "another address still gets in");
    let mut c1 = connect_from("127.0.0.3", &addr).await;
    assert_eq!(first_status(&mut c1).await, 503, "beyond the cap in all");

    // Closing one frees its place.
    drop(a1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut a4 = connect_from("127.0.0.1", &addr).await;
    assert_eq!(first_status(&mut a4).await, 0);
}
