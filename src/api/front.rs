//! The API port's front: each connection's first request head is read here, before
//! actix-http's dispatcher, so that a head its codec refuses gets a problem+json answer
//! that names the fault instead of the codec's bare status line (issue 38): 400 for a
//! malformed head, 431 for one over the codec's limits (128 KiB, 96 header fields), 408
//! for one that does not arrive whole within [`HEAD_TIMEOUT`]. The check is the codec's
//! own decoder ([`actix_http::h1::Codec`]) run on a copy of the bytes, so the front and
//! the dispatcher cannot disagree on what is acceptable. A good head is handed on with the
//! bytes already read (head and any body bytes that came with it) replayed first, and the
//! connection is actix's from there on.
//!
//! Later requests on a kept-alive connection are read by the dispatcher alone: a client
//! that sends a good request and then a malformed one on the same connection still gets
//! the codec's bare answer. Re-reading every head would mean a second HTTP/1 parser in
//! front of the first, bodies included.
//!
//! What the port holds against one client ([`Limits`], issue 52), as the downloads
//! listener does: connections are capped per peer address (429) and in all (503), the
//! total kept below the process's `RLIMIT_NOFILE` less a reserve, so accept never fails
//! for want of a descriptor; a connection with no request in progress, or a response that
//! makes no progress, is closed after `idle_timeout`. A request body that stops arriving
//! is the app's to time out (`crate::api::limits`), since only it knows a body is awaited.

use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_http::body::MessageBody;
use actix_http::error::ParseError;
use actix_codec::Decoder;
use actix_http::{HttpService, Protocol, ServiceConfig};
use actix_service::{IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt, fn_factory, fn_service, map_config};
use actix_web::dev::{AppConfig, ServiceRequest, ServiceResponse};
use actix_web::App;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::conns::Admission;

/// How long a connection's first request head may take to arrive whole: actix-http's own
/// client request timeout, which the dispatcher applies to the requests after it.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection limits of a port served by [`server`]; `kaas serve` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// A connection waiting for its next request, or a response the client does not read,
    /// is closed after this long.
    pub idle_timeout: Duration,
    /// Connections open at once, in all (further ones get 503); fewer when the descriptor
    /// limit is lower (see [`Limits::connections`]).
    pub max_connections: usize,
    /// Connections open at once from one IP address (further ones get 429).
    pub max_connections_per_peer: usize,
    /// Descriptors of the process's `RLIMIT_NOFILE` this port never uses: the database
    /// pool's, the health listener's, logs and files.
    pub reserve_fds: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { idle_timeout: Duration::from_secs(5), max_connections: 4096, max_connections_per_peer: 64, reserve_fds: 128 }
    }
}

impl Limits {
    /// Connections this port may hold under a descriptor limit of `nofile` (`None`:
    /// unlimited) when `others` descriptors belong to another listener: never more than
    /// `nofile - reserve_fds - others - 1` (the 1: a connection accepted only to be
    /// refused), and at least 1.
    pub fn connections(&self, nofile: Option<u64>, others: u64) -> usize {
        let Some(nofile) = nofile else { return self.max_connections.max(1) };
        let spare = nofile.saturating_sub(self.reserve_fds).saturating_sub(others).saturating_sub(1);
        (self.max_connections as u64).min(spare).max(1) as usize
    }
}

/// An IO whose writes fail once they have made no progress for `limit`: a client that
/// stops reading its response would otherwise hold its connection as long as it likes.
struct SendTimeout<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for SendTimeout<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SendTimeout<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = this.limit;
                let timer = this.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client read nothing within the idle timeout"))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What the front makes of the bytes read so far.
#[derive(Debug, PartialEq)]
enum Head {
    Complete,
    Partial,
    Refused { status: u16, code: &'static str, detail: String },
}

/// Runs the codec's decoder on a copy of `bytes`.
fn check(codec: &mut actix_http::h1::Codec, bytes: &BytesMut) -> Head {
    if bytes.is_empty() {
        return Head::Partial;
    }
    let mut probe = bytes.clone();
    match codec.decode(&mut probe) {
        Ok(Some(_)) => Head::Complete,
        Ok(None) => Head::Partial,
        Err(ParseError::TooLarge) => Head::Refused {
            status: 431,
            code: "request_too_large",
            detail: "the request head is over 128 KiB or has more than 96 header fields".into(),
        },
        Err(e) => Head::Refused { status: 400, code: "invalid_request", detail: explain(&e, bytes) },
    }
}

/// Names what the codec refused, in words a client author can act on. The codec's own
/// messages for header faults ("invalid Header provided") do not say which rule failed;
/// these follow actix-http's decoder (h1/decoder.rs), in its order.
fn explain(e: &ParseError, bytes: &[u8]) -> String {
    match e {
        ParseError::Method => "the request method is not a valid token".into(),
        ParseError::Uri(u) => format!("the request target is not a valid URI: {u}"),
        ParseError::Version => "the request line's HTTP version is not HTTP/1.0 or HTTP/1.1".into(),
        ParseError::Header => header_fault(bytes),
        other => format!("malformed request head: {other}"),
    }
}

fn header_fault(bytes: &[u8]) -> String {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    if let Err(e) = req.parse(bytes) {
        return format!("malformed request head: {e}");
    }
    let all = |name: &str| -> Vec<String> {
        req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).map(|h| String::from_utf8_lossy(h.value).trim().to_string()).collect()
    };
    let lengths = all("content-length");
    let codings = all("transfer-encoding");
    let hosts = all("host");
    let http10 = req.version == Some(0);
    if lengths.len() > 1 {
        return format!("the request carries {} Content-Length headers; one is allowed", lengths.len());
    }
    if let Some(l) = lengths.first()
        && (l.starts_with('+') || l.parse::<u64>().is_err())
    {
        return format!("Content-Length {l:?} is not a number of bytes");
    }
    if codings.len() > 1 {
        return "the request carries more than one Transfer-Encoding header".into();
    }
    if hosts.len() > 1 {
        return "the request carries more than one Host header".into();
    }
    if !http10 && hosts.is_empty() {
        return "an HTTP/1.1 request must carry a Host header".into();
    }
    if let Some(c) = codings.first() {
        if http10 {
            return "Transfer-Encoding is not allowed in an HTTP/1.0 request".into();
        }
        if !c.eq_ignore_ascii_case("chunked") {
            return format!("Transfer-Encoding {c:?} is not accepted; send chunked or a Content-Length");
        }
        if !lengths.is_empty() {
            return "the request carries both Content-Length and Transfer-Encoding".into();
        }
    }
    if http10 && req.method == Some("POST") && lengths.is_empty() {
        return "an HTTP/1.0 POST must carry Content-Length".into();
    }
    "a header field is malformed".into()
}

/// Reads the first request head of `io` and answers a refused one; `Some(bytes read)` when
/// the head is good, `None` when the connection was answered or went away.
async fn first_head(io: &mut TcpStream, config: &ServiceConfig) -> Option<BytesMut> {
    let mut codec = actix_http::h1::Codec::new(config.clone());
    let mut bytes = BytesMut::with_capacity(4096);
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    loop {
        match check(&mut codec, &bytes) {
            Head::Complete => return Some(bytes),
            Head::Partial => {}
            Head::Refused { status, code, detail } => {
                tracing::debug!(status, %detail, "refused a request head");
                answer(io, status, code, &detail).await;
                return None;
            }
        }
        match tokio::time::timeout_at(deadline, io.read_buf(&mut bytes)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
            Err(_) => {
                let detail = format!("the request head did not arrive whole within {} s", HEAD_TIMEOUT.as_secs());
                answer(io, 408, "request_timeout", &detail).await;
                return None;
            }
        }
    }
}

/// Writes a problem+json answer and closes; a client that does not read it loses it.
async fn answer(io: &mut TcpStream, status: u16, code: &str, detail: &str) {
    let text = super::conns::problem_text(status, code, detail, true, "");
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        io.write_all(text.as_bytes()).await?;
        io.shutdown().await
    })
    .await;
}

/// Connections each worker may hold past its share of the cap: accepted only to be told
/// they are over it. Counted in the descriptor budget (see `kaas serve`).
pub const REFUSAL_HEADROOM: usize = 8;

/// A port served by [`server`]: its name (for the log and refusals), address, worker
/// threads, limits, and the admission its connections are counted in.
pub struct Port {
    pub name: &'static str,
    pub bind: String,
    pub threads: usize,
    pub limits: Limits,
    pub admission: Arc<Admission>,
}

/// The server of `port`: `app` built once per worker thread, as `actix_web::HttpServer`
/// does, with [`first_head`] in front of each connection and [`Limits`] on all of them.
pub fn server<F, T, B>(port: Port, app: F) -> std::io::Result<actix_server::Server>
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<ServiceRequest, Config = (), Response = ServiceResponse<B>, Error = actix_web::Error, InitError = ()> + 'static,
    B: MessageBody + 'static,
{
    let Port { name, bind, threads, limits, admission } = port;
    tracing::info!(port = name, %bind, ?limits, connections = admission.max_total(), "listener limits");
    // actix-server accepts ahead of its workers: under a flood of connections that are
    // refused, accepted sockets wait in a worker's queue, each holding a descriptor, until
    // accept itself fails for want of one (and then pauses for half a second). Capping what
    // each worker holds keeps the accepted within the budget; past it, connections wait in
    // the kernel's backlog, which costs this process no descriptor.
    let per_worker = admission.max_total().div_ceil(threads.max(1)) + REFUSAL_HEADROOM;
    let builder = actix_server::Server::build().workers(threads).backlog(1024).max_concurrent_connections(per_worker);
    let shutdown = builder.graceful_shutdown_signal();
    let built = builder.bind(name, bind, move || {
        let shutdown = shutdown.clone();
        let admission = admission.clone();
        let idle = limits.idle_timeout;
        let factory = app().into_factory().map_err(|e: actix_web::Error| e.error_response());
        // Nothing here reads the app's configured host or local address (they stand in
        // for a Host header an HTTP/1.0 request leaves out, and for URL generation).
        let http = HttpService::build()
            .client_request_timeout(HEAD_TIMEOUT)
            .client_disconnect_timeout(Duration::from_secs(1))
            .keep_alive(idle)
            // Idle keep-alive connections close at once when the server stops.
            .graceful_shutdown_signal(move || {
                let signal = shutdown.clone();
                async move { signal.notified().await }
            })
            .finish(map_config(factory, |()| AppConfig::default()));
        fn_factory(move || {
            let started = http.new_service(());
            let admission = admission.clone();
            async move {
                let http = Rc::new(started.await.map_err(|_| ())?);
                // One per worker: each one keeps a task that refreshes its clock.
                let config = ServiceConfig::default();
                Ok::<_, ()>(fn_service(move |mut io: TcpStream| {
                    let (http, config, admission) = (http.clone(), config.clone(), admission.clone());
                    async move {
                        let peer = io.peer_addr().ok();
                        let ip = peer.map(|p| p.ip()).unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
                        // Refused in one non-blocking write and closed: no descriptor is held
                        // for a connection over a cap.
                        let _slot = match admission.admit(ip) {
                            Ok(slot) => slot,
                            Err(refused) => {
                                tracing::debug!(port = name, ?peer, detail = %refused.detail, "connection refused");
                                let _ = io.try_write(refused.response().as_bytes());
                                return Ok(());
                            }
                        };
                        let _ = io.set_nodelay(true);
                        let Some(read) = first_head(&mut io, &config).await else { return Ok(()) };
                        let (rx, tx) = io.into_split();
                        let io = tokio::io::join(std::io::Cursor::new(read.freeze()).chain(rx), tx);
                        http.call((SendTimeout { io, limit: idle, stalled: None }, Protocol::Http1, peer)).await
                    }
                }))
            }
        })
    })?;
    Ok(built.run())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codec keeps a clock task, so these run on actix's runtime.
    fn head(text: &str) -> Head {
        check(&mut actix_http::h1::Codec::new(ServiceConfig::default()), &BytesMut::from(text.as_bytes()))
    }

    fn refused(text: &str) -> (u16, String) {
        match head(text) {
            Head::Refused { status, detail, .. } => (status, detail),
            other => panic!("{text:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn the_connection_cap_stays_below_the_descriptor_limit() {
        let l = Limits { max_connections: 10_000, reserve_fds: 128, ..Limits::default() };
        assert_eq!(l.connections(Some(512), 0), 383);
        assert_eq!(l.connections(Some(512), 300), 83, "another listener's share is not this port's");
        assert_eq!(l.connections(Some(100), 0), 1, "below the reserve: one at a time");
        assert_eq!(l.connections(None, 0), 10_000);
        assert_eq!(Limits { max_connections: 7, ..l }.connections(Some(1 << 20), 0), 7);
    }

    #[actix_web::test]
    async fn good_heads_pass_and_partial_ones_wait() {
        assert_eq!(head(""), Head::Partial);
        assert_eq!(head("GET /v1/health HTTP/1.1\r\nHost: x\r\n"), Head::Partial);
        assert_eq!(head("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"), Head::Complete);
        assert_eq!(head("POST /v1/submissions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{\"a\""), Head::Complete);
        assert_eq!(head("GET / HTTP/1.0\r\n\r\n"), Head::Complete);
    }

    #[actix_web::test]
    async fn each_refusal_names_its_fault() {
        let (s, d) = refused("GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
        assert_eq!((s, d.as_str()), (400, "the request carries 2 Content-Length headers; one is allowed"));
        let (s, d) = refused("GET /x HTTP/1.1\r\n\r\n");
        assert_eq!((s, d.as_str()), (400, "an HTTP/1.1 request must carry a Host header"));
        let (s, d) = refused("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n");
        assert_eq!((s, d.as_str()), (400, "Content-Length \"+5\" is not a number of bytes"));
        let (s, d) = refused("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n");
        assert_eq!((s, d.as_str()), (400, "Transfer-Encoding \"gzip\" is not accepted; send chunked or a Content-Length"));
        let (s, d) = refused("GET /x HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n");
        assert_eq!((s, d.as_str()), (400, "the request carries more than one Host header"));
        let (s, d) = refused("GET /x HTTP/9.9\r\nHost: x\r\n\r\n");
        assert_eq!(s, 400);
        assert!(d.contains("version"), "{d}");
        let (s, d) = refused("G\u{1}T /x HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(s, 400);
        assert!(d.starts_with("malformed request head") || d.contains("method"), "{d}");
    }

    #[actix_web::test]
    async fn heads_over_the_codec_limits_are_431() {
        let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n", "a".repeat(140 * 1024));
        assert_eq!(refused(&long).0, 431);
        let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(refused(&format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n")).0, 431);
    }
}
