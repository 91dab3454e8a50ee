//! Fast answers while the database is unreachable (issue 52): each request waited the
//! pool's acquire timeout (10 s) for its 503, readiness included. Now a request finds out
//! within the 1 s acquire timeout, the breaker opens, and every later one is answered at
//! once until a background probe reaches the database again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::test;
use kaas::api::{ApiSettings, create_app};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::common::*;

/// A TCP proxy in front of the test Postgres that can be cut (its port closed, every
/// connection through it dropped, as a stopped server looks) and restored, so that no
/// test stops the machine's Postgres.
struct Proxy {
    port: u16,
    upstream: String,
    cut: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let p = Proxy { port, upstream: upstream.to_string(), cut };
        p.serve(listener);
        p
    }

    fn serve(&self, listener: TcpListener) {
        let (upstream, mut cut) = (self.upstream.clone(), self.cut.subscribe());
        tokio::spawn(async move {
            loop {
                let (mut client, _) = tokio::select! {
                    accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => continue },
                    _ = cut.wait_for(|c| *c) => return,
                };
                let (upstream, mut cut) = (upstream.clone(), cut.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.wait_for(|c| *c) => {}
                    }
                });
            }
        });
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }

    async fn restore(&self) {
        self.cut.send_replace(false);
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serve(listener);
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap_or(("", rest));
        let (_, path) = rest.split_once('/').unwrap();
        let user = if user.is_empty() { String::new() } else { format!("{user}@") };
        format!("{scheme}://{user}127.0.0.1:{}/{path}", self.port)
    }
}

/// The host and port of a Postgres URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap().to_string()
}

async fn timed<S, B>(app: &S, uri: &str) -> (Reply, Duration)
where
    S: actix_web::dev::Service<actix_http::Request, Response = actix_web::dev::ServiceResponse<B>, Error = actix_web::Error>,
    B: actix_web::body::MessageBody,
{
    let t = Instant::now();
    let r = get(app, uri).await;
    (r, t.elapsed())
}

fn assert_unavailable(r: &Reply, what: &str) {
    let j = r.assert_problem(503, "unavailable");
    assert_eq!(r.header("retry-after").as_deref(), Some("5"), "{what}: {j}");
}

#[actix_web::test]
async fn a_stopped_postgres_is_answered_503_within_the_acquire_timeout_then_at_once_and_recovers() {
    if skip_postgres() {
        return;
    }
    let (db, url) = TestDb::with_url(Backend::Postgres).await;
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), &f);
    kaas::catalog::seed::seed(&db.db, dir.path()).await.unwrap();
    let proxy = Proxy::start(&host_port(&url)).await;
    let mut cfg = kaas::db::DbConfig::new(proxy.url(&url));
    cfg.max_connections = 4;
    let app_db = kaas::db::open(&cfg).await.unwrap();
    let st = kaas::api::AppState::new(app_db, ApiSettings { catalog_cache_ttl: Duration::from_millis(1), ..Default::default() }).unwrap();
    let app = test::init_service(create_app(st.clone())).await;
    assert_eq!(get(&app, "/v1/health/ready").await.status, 200);
    assert_eq!(get(&app, "/v1/problems").await.status, 200);

    proxy.cut();
    // Past the catalog cache's lifetime: an answer it still holds is not a fault.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let routes = ["/v1/problems", "/v1/stats", "/v1/leaderboard", "/v1/heatmap", "/v1/problems?layout=tn"];
    let (first, took) = timed(&app, routes[0]).await;
    assert_unavailable(&first, routes[0]);
    assert!(took < Duration::from_millis(1500), "the first 503 took {took:?}");
    for route in &routes[1..] {
        let (r, took) = timed(&app, route).await;
        assert_unavailable(&r, route);
        assert!(r.json()["detail"].as_str().unwrap().contains("answers 503 at once"), "{route}: not the breaker's answer: {}", r.json());
        assert!(took < Duration::from_millis(100), "{route} took {took:?} with the breaker open");
    }
    let (ready, took) = timed(&app, "/v1/health/ready").await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()["database"]["reachable"], false);
    assert!(took < Duration::from_millis(100), "readiness took {took:?} with the breaker open");
    let (live, took) = timed(&app, "/v1/health/live").await;
    assert_eq!(live.status, 200);
    assert!(took < Duration::from_millis(100), "liveness took {took:?}");

    // Back: a probe closes the breaker within a few seconds, with no restart.
    proxy.restore().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&app, "/v1/health/ready").await.status != 200 {
        assert!(Instant::now() < deadline, "not ready 10 s after the database came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(&app, "/v1/problems").await.status, 200);
    db.cleanup().await;
}

/// SQLite: a closed pool is unreachable too; the first request trips the breaker and the
/// rest are answered by it.
#[actix_web::test]
async fn a_closed_sqlite_pool_trips_the_breaker() {
    let (db, url) = TestDb::with_url(Backend::Sqlite).await;
    let app_db = kaas::db::open(&kaas::db::DbConfig::new(&url)).await.unwrap();
    let st: Arc<kaas::api::AppState> = kaas::api::AppState::new(app_db.clone(), ApiSettings { catalog_cache_ttl: Duration::from_millis(1), ..Default::default() }).unwrap();
    let app = test::init_service(create_app(st.clone())).await;
    assert_eq!(get(&app, "/v1/problems").await.status, 200);
    app_db.close().await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_unavailable(&get(&app, "/v1/problems").await, "the first request on a closed pool");
    let (again, took) = timed(&app, "/v1/stats").await;
    assert_unavailable(&again, "/v1/stats");
    assert!(again.json()["detail"].as_str().unwrap().contains("answers 503 at once"), "{}", again.json());
    assert!(took < Duration::from_millis(100), "{took:?}");
    let ready = get(&app, "/v1/health/ready").await;
    assert_eq!(ready.status, 503);
    assert!(ready.json()["schema"]["detail"].as_str().unwrap().contains("unreachable for"), "{}", ready.json());
    assert_eq!(get(&app, "/v1/health/live").await.status, 200);
    assert_eq!(get(&app, "/openapi.json").await.status, 200, "the document needs no database");
    db.cleanup().await;
}
