//! The API port against one client (issue 52), on the real `kaas serve` with a lowered
//! descriptor limit: stalled bodies are answered 408 within seconds, a token's requests in
//! progress are capped, connections are capped per address and in all, and the health
//! listener answers probes throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;
use sea_orm::ConnectionTrait;
use crate::fleet::{Serve, free_port, how_they_end, limit_descriptors, raise_own_descriptor_limit};

/// Sends `head` and `body` and reads until the server answers or closes, at most
/// `within`: (what came back, how long it took). "held" when nothing came back in time.
fn send(port: u16, bytes: &[u8], within: Duration) -> (String, Duration) {
    let started = Instant::now();
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return ("refused".into(), started.elapsed()) };
    s.set_read_timeout(Some(within)).unwrap();
    let _ = s.write_all(bytes);
    let mut text = Vec::new();
    let what = match s.read_to_end(&mut text) {
        Ok(_) | Err(_) if !text.is_empty() => String::from_utf8_lossy(&text).to_string(),
        Ok(_) => "closed".into(),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => "held".into(),
        Err(_) => "reset".into(),
    };
    (what, started.elapsed())
}

/// A connection to the API port from another loopback address than 127.0.0.1.
fn connect_from(ip: [u8; 4], port: u16) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&fd, &std::net::SocketAddrV4::new(ip.into(), 0)).unwrap();
    rustix::net::connect(&fd, &std::net::SocketAddrV4::new([127, 0, 0, 1].into(), port)).expect("another address is admitted");
    TcpStream::from(fd)
}

fn status_of(text: &str) -> Option<u16> {
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// `GET path` on `port`: the status and how long it took, `None` when no answer came in 5 s.
fn probe(port: u16, path: &str) -> (Option<u16>, Duration) {
    let (text, took) = send(port, format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(), Duration::from_secs(5));
    (status_of(&text), took)
}

fn stalled_upload(token: &str) -> Vec<u8> {
    format!("POST /v1/artifacts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n0123456789").into_bytes()
}

fn token(url: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["token", "create", "--name", &format!("flood{}", rand::random::<u32>()), "--role", "submitter", "--database-url", url])
        .env_remove("KAAS_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Issue 52: a body that stops arriving held its connection for 400 s and more, and 500
/// of them (with idle and slowloris connections, 700 in all from one address) took
/// health and liveness down on a process limited to 512 descriptors.
#[actix_web::test]
async fn stalled_bodies_and_floods_on_the_api_port_are_refused_fast_and_probes_answer() {
    raise_own_descriptor_limit();
    let (db, url) = TestDb::with_url(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let health_port = free_port();
    let mut serve = Serve::start_with(&url, dir.path(), dir.path().join("serve.log"), |cmd| {
        cmd.env("KAAS_HEALTH_BIND", format!("127.0.0.1:{health_port}"))
            .env("KAAS_BODY_TIMEOUT_SECS", "2")
            .env("KAAS_MAX_REQUESTS_PER_TOKEN", "3")
            .env("KAAS_MAX_CONNECTIONS_PER_PEER", "100");
        limit_descriptors(cmd, 512);
    });
    serve.wait_ready(Duration::from_secs(60)).await;
    let (port, alice, bob) = (serve.port, token(&url), token(&url));

    let checks = tokio::task::spawn_blocking(move || {
        // 1. A stalled body: 408 problem+json within the body timeout, connection closed.
        let (text, took) = send(port, &stalled_upload(&alice), Duration::from_secs(30));
        assert_eq!(status_of(&text), Some(408), "a stalled body was not answered 408 (after {took:?}): {text}");
        assert!(text.contains("application/problem+json") && text.contains("stopped arriving"), "{text}");
        assert!(took < Duration::from_secs(5), "the stalled body was answered after {took:?}");

        // 2. A token's requests in progress are capped: three stalled, the fourth refused at once.
        let held: Vec<TcpStream> = (0..3)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(&stalled_upload(&bob)).unwrap();
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let (text, took) = send(port, &stalled_upload(&bob), Duration::from_secs(5));
        assert_eq!(status_of(&text), Some(429), "the token's fourth request in progress was not refused (after {took:?}): {text}");
        assert!(text.contains("too_many_in_flight") && took < Duration::from_secs(1), "{took:?}: {text}");
        drop(held);

        // 3. The flood: 700 connections from one address, idle, slowloris heads and
        // stalled bodies; the per-address cap refuses what is over it at once.
        let mut flood = Vec::new();
        let mut refused_at_once = 0;
        for i in 0..700 {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { continue };
            match i % 3 {
                0 => {}
                1 => drop(s.write_all(b"GET /v1/health HTTP/1.1\r\nHo")),
                _ => drop(s.write_all(&stalled_upload(&alice))),
            }
            flood.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
        for s in &flood {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut b = [0u8; 64];
            // A refusal is a 429, or (when the client had sent bytes the server never read)
            // a reset or close that may overtake it.
            match (&*s).read(&mut b) {
                Ok(n) if n == 0 || b[..n].starts_with(b"HTTP/1.1 429") => refused_at_once += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => refused_at_once += 1,
                _ => {}
            }
        }
        assert!(refused_at_once >= 500, "only {refused_at_once} of 700 connections from one address were refused at once");

        // Probes answer promptly throughout: the health listener, and the API port from
        // another address.
        let mut slowest = Duration::ZERO;
        for path in ["/v1/health", "/v1/health/live", "/v1/health/ready", "/v1/health/live", "/v1/health"] {
            let (status, took) = probe(health_port, path);
            assert_eq!(status, Some(200), "{path} on the health listener during the flood");
            slowest = slowest.max(took);
        }
        assert!(slowest < Duration::from_secs(1), "a probe took {slowest:?} during the flood");
        let mut s = connect_from([127, 0, 0, 2], port);
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"GET /v1/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        assert_eq!(status_of(&text), Some(200), "liveness on the API port from another address: {text}");

        // Every flood connection ends within the timeouts; none is held.
        let ended = how_they_end(flood);
        assert!(ended.keys().all(|k| !k.starts_with("held")), "connections held past the timeouts: {ended:?}");
        ended
    })
    .await;
    let log = serve.log();
    let ended = checks.unwrap_or_else(|e| panic!("{e:?}; the log:\n{log}"));
    assert!(ended.contains_key("408"), "no slow head or body was answered 408: {ended:?}");
    assert!(!log.contains("Too many open files"), "the process ran out of descriptors; its log:\n{log}");
    serve.kill();
    db.cleanup().await;
}

/// Issue 52: with two replicas, 60 of 100 requests got through a 30-request limit. The
/// limit is counted in the database they share: two replicas allow what one allows.
async fn two_replicas_share_one_rate_limit(backend: Backend) {
    use actix_web::test::{TestRequest, init_service};
    use kaas::api::ratelimit::Scope;
    let (db, url) = TestDb::with_url(backend).await;
    let token = kaas::auth::create_token(&db.db, "alice", kaas::auth::Role::Submitter).await.unwrap().secret;
    let whoami = || TestRequest::get().uri("/v1/whoami").insert_header(("Authorization", format!("Bearer {token}")));
    let mut allowed = vec![];
    for scope in [Scope::Fleet, Scope::Replica] {
        // A burst of 30 and one more a minute: what one replica allows in a second is 30.
        let settings = kaas::api::ApiSettings { rate_limit_per_minute: 1, rate_limit_burst: 30, rate_limit_scope: scope, ..Default::default() };
        let replica = |settings: kaas::api::ApiSettings| {
            let url = url.clone();
            async move {
                let mut cfg = kaas::db::DbConfig::new(&url);
                cfg.max_connections = 2;
                kaas::api::AppState::new(kaas::db::open(&cfg).await.unwrap(), settings).unwrap()
            }
        };
        let a = init_service(kaas::api::create_app(replica(settings.clone()).await)).await;
        let b = init_service(kaas::api::create_app(replica(settings).await)).await;
        let mut ok = 0;
        for i in 0..100 {
            let r = if i % 2 == 0 { call(&a, whoami()).await } else { call(&b, whoami()).await };
            match r.status.as_u16() {
                200 => ok += 1,
                _ => {
                    r.assert_problem(429, "rate_limited");
                    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
                    assert!((1..=60).contains(&retry), "Retry-After {retry}");
                }
            }
        }
        allowed.push(ok);
        db.db.execute_unprepared("DELETE FROM rate_limits").await.unwrap();
    }
    assert_eq!(allowed, [30, 60], "requests allowed of 100 by two replicas, counted in the database and per replica");
    db.cleanup().await;
}

crate::both_backends!(two_replicas_share_one_rate_limit);
