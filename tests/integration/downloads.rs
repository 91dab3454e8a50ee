//! The downloads listener (`kaas serve --downloads-bind`, `src/api/downloads.rs`) over
//! real TCP: the bytes, headers, gzip, 304, HEAD, keep-alive with pipelining, and the
//! refusals; the files it keeps are the artifact's bytes.

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
    let sha = kaas::catalog::bundle::sha256_hex(PTX.as_bytes());
    let known: HashMap<String, Arc<ArtifactBody>> = [(sha.clone(), Arc::new(ArtifactBody::new(sha.clone(), PTX.to_string())))].into();
    let resolve: Resolver = Arc::new(move |s| {
        let found = known.get(&s).cloned();
        Box::pin(async move { Ok(found) })
    });
    let d = Downloads::new(dir, resolve).expect("downloads");
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
