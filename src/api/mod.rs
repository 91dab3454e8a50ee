//! The HTTP API (actix-web). `create_app` builds the one `App` that both `kaas serve`
//! and the integration tests run, so the tests exercise the real wiring.

pub mod breaker;
pub mod cache;
pub mod conns;
pub mod downloads;
pub mod error;
pub mod events;
pub mod front;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod ratelimit;
pub mod routes;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use actix_web::{App, FromRequest, HttpRequest, HttpResponse, web};
use sea_orm::DatabaseConnection;

use crate::auth::{self, Caller};
pub use cache::Caches;
pub use error::ApiError;
pub use metrics::Metrics;

/// Settings the API itself needs (the rest of `kaas serve`'s configuration stays outside).
#[derive(Debug, Clone)]
pub struct ApiSettings {
    pub max_body_bytes: usize,
    pub rate_limit_per_minute: u32,
    pub rate_limit_burst: u32,
    /// Whether the rate limit is counted in the database (all replicas) or in memory.
    pub rate_limit_scope: ratelimit::Scope,
    pub artifact_cache_bytes: u64,
    pub catalog_cache_ttl: Duration,
    pub db_max_connections: u32,
    pub quotas: crate::work::submit::Quotas,
    /// The key run records are signed with; `None`: the database-kept key (`crate::signing::store`).
    pub signing_key: Option<crate::signing::KeyPair>,
    /// Submission event streams one client address may hold open at once.
    pub max_event_streams_per_client: usize,
    /// Tuning requests: limits, defaults, and whether a kernel lookup's miss queues a tune.
    pub tune: crate::work::tune::TuneLimits,
    /// A request body with no byte for this long is given up (408, connection closed).
    pub body_timeout: Duration,
    /// A request body not whole this long after its request began is given up the same way.
    pub body_deadline: Duration,
    /// Requests one token may have in progress at once (429 beyond).
    pub max_requests_per_token: usize,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            max_body_bytes: 16 << 20,
            rate_limit_per_minute: 120,
            rate_limit_burst: 30,
            rate_limit_scope: ratelimit::Scope::Fleet,
            artifact_cache_bytes: 256 << 20,
            catalog_cache_ttl: Duration::from_secs(10),
            db_max_connections: 16,
            quotas: crate::work::submit::Quotas::default(),
            signing_key: None,
            max_event_streams_per_client: 8,
            tune: Default::default(),
            body_timeout: Duration::from_secs(5),
            body_deadline: Duration::from_secs(60),
            max_requests_per_token: 32,
        }
    }
}

/// Everything the handlers share.
pub struct AppState {
    pub db: DatabaseConnection,
    pub caches: Caches,
    pub metrics: Metrics,
    pub settings: ApiSettings,
    /// The shared submission event feeds.
    pub events: events::Events,
    limiter: ratelimit::RateLimit,
    /// Requests in progress per token.
    pub in_flight: Arc<limits::InFlight>,
    /// Open while the database is unreachable.
    pub breaker: Arc<breaker::Breaker>,
    pub started: Instant,
    local_workers: std::sync::Mutex<String>,
    /// Loaded on first use (it may read or create the database-kept key).
    signer: tokio::sync::OnceCell<Arc<crate::signing::Signer>>,
}

impl AppState {
    pub fn new(db: DatabaseConnection, settings: ApiSettings) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(AppState {
            db,
            caches: Caches::new(settings.artifact_cache_bytes, settings.catalog_cache_ttl),
            metrics: Metrics::new()?,
            limiter: ratelimit::RateLimit::new(settings.rate_limit_per_minute, settings.rate_limit_burst, settings.rate_limit_scope),
            events: events::Events::new(settings.max_event_streams_per_client),
            in_flight: limits::InFlight::new(settings.max_requests_per_token),
            breaker: breaker::Breaker::new(),
            settings,
            started: Instant::now(),
            local_workers: std::sync::Mutex::new("none: this process runs no GPU worker (`kaas serve --workers auto` starts one per GPU)".into()),
            signer: tokio::sync::OnceCell::new(),
        }))
    }

    /// What `/v1/health` says about this process's own GPU workers.
    pub fn local_workers(&self) -> String {
        self.local_workers.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn set_local_workers(&self, note: impl Into<String>) {
        if let Ok(mut s) = self.local_workers.lock() {
            *s = note.into();
        }
    }

    /// The run-record signer: the configured key, or the database-kept one.
    pub async fn signer(&self) -> Result<Arc<crate::signing::Signer>, ApiError> {
        let signer = self
            .signer
            .get_or_try_init(|| async {
                let s = crate::signing::Signer::load(&self.db, self.settings.signing_key.clone()).await?;
                if s.from_database {
                    tracing::warn!(key_id = %s.key_id(), "signing run records with the key kept in the database; give replicas a key file (--signing-key-file) instead");
                } else {
                    tracing::info!(key_id = %s.key_id(), "signing run records with the configured key");
                }
                Ok::<_, sea_orm::DbErr>(Arc::new(s))
            })
            .await?;
        Ok(signer.clone())
    }

    /// Signs every run record of a submission view.
    pub async fn sign_submission(&self, view: &mut crate::work::SubmissionView) -> Result<(), ApiError> {
        let signer = self.signer().await?;
        for run in view.jobs.iter_mut().filter_map(|j| j.run.as_mut()) {
            run.signature = Some(signer.sign(&run.record.to_value()));
        }
        Ok(())
    }

    /// Imports a catalog bundle and drops every cached catalog answer.
    pub async fn import_bundle(&self, dir: &std::path::Path) -> Result<crate::catalog::bundle::ImportReport, crate::catalog::bundle::BundleError> {
        let report = crate::catalog::bundle::import(&self.db, dir).await?;
        self.caches.catalog_changed();
        Ok(report)
    }

}

pub type State = web::Data<AppState>;

/// An authenticated, rate-limited caller: take it as a handler argument to require a token.
impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let state = req.app_data::<State>().cloned();
        let header = req.headers().get(actix_web::http::header::AUTHORIZATION).map(|v| v.to_str().map(str::to_string));
        Box::pin(async move {
            let state = state.ok_or_else(|| ApiError::Internal("application state missing".into()))?;
            let secret = match header {
                None => return Err(ApiError::MissingToken("send `Authorization: Bearer <token>`; `kaas token create` makes one".into())),
                Some(Err(_)) => return Err(ApiError::InvalidToken("the Authorization header is not ASCII".into())),
                // The scheme name is case-insensitive (RFC 9110 §11.1): `bearer` is `Bearer`.
                Some(Ok(h)) => match h.trim_start().split_once([' ', '\t']) {
                    Some((scheme, s)) if scheme.eq_ignore_ascii_case("bearer") && !s.trim().is_empty() => s.trim().to_string(),
                    _ => return Err(ApiError::InvalidToken("the Authorization header must be `Bearer <token>`".into())),
                },
            };
            let caller = match auth::lookup(&state.db, &secret).await? {
                auth::Lookup::Found(c) => c,
                auth::Lookup::Unknown => return Err(ApiError::InvalidToken("this token is not known to the service".into())),
                auth::Lookup::Revoked => {
                    return Err(ApiError::RevokedToken("this token was revoked; ask an admin for a new one".into()));
                }
            };
            state.limiter.charge(&state.db, caller.token_id).await?;
            Ok(caller)
        })
    }
}


/// Whether the client takes `Content-Encoding: gzip` (`gzip` listed without `q=0`).
pub(crate) fn accepts_gzip(req: &HttpRequest) -> bool {
    req.headers().get(actix_web::http::header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(gzip_accepted)
}

/// Whether an `Accept-Encoding` value takes gzip (`gzip` or `*` listed without `q=0`).
pub(crate) fn gzip_accepted(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("");
        let refused = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)));
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// The methods a route pattern answers, for `Allow`: from the OpenAPI document (which
/// a test keeps in step with the routes); patterns it leaves out (the UI, /docs) are
/// pages, answered to GET only.
fn allowed_methods(pattern: &str) -> String {
    static TABLE: std::sync::OnceLock<std::collections::HashMap<String, String>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        use utoipa::OpenApi as _;
        let doc = openapi::ApiDoc::openapi();
        doc.paths
            .paths
            .iter()
            .map(|(path, item)| {
                let ops = [("GET", &item.get), ("PUT", &item.put), ("POST", &item.post), ("DELETE", &item.delete), ("PATCH", &item.patch)];
                let methods: Vec<&str> = ops.iter().filter(|(_, op)| op.is_some()).map(|(m, _)| *m).collect();
                (path.clone(), methods.join(", "))
            })
            .collect()
    });
    table.get(pattern).cloned().unwrap_or_else(|| "GET".into())
}

/// Rewrites actix's bare error responses (unknown route, wrong method) as problem+json.
fn problem_json_for<B: MessageBody + 'static>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let is_problem = res
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if is_problem {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let path = res.request().path().to_string();
    let err = match res.status() {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed(format!("{} does not answer this method", path)),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge("the request body is over the limit".into()),
        _ => ApiError::NotFound(format!("nothing at {path}; see /docs for the API")),
    };
    let (req, _) = res.into_parts();
    let res = ServiceResponse::new(req, actix_web::ResponseError::error_response(&err)).map_into_right_body();
    Ok(ErrorHandlerResponse::Response(res))
}

/// The health listener's application (`kaas serve --health-bind`): health, readiness,
/// liveness and metrics only, for probes that must get through however busy the API
/// port is.
pub fn create_health_app(
    state: Arc<AppState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(web::Data::from(state))
        .service(routes::system::health)
        .service(routes::system::ready)
        .service(routes::system::live)
        .service(routes::system::metrics)
        .default_service(web::to(|req: HttpRequest| async move {
            Err::<HttpResponse, ApiError>(ApiError::NotFound(format!(
                "nothing at {} on the health listener: it answers /v1/health, /v1/health/ready, /v1/health/live and /metrics",
                req.path()
            )))
        }))
}

/// Builds the application: routes, extractor limits and error mapping, metrics.
pub fn create_app(
    state: Arc<AppState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let data = web::Data::from(state.clone());
    let limit = state.settings.max_body_bytes;
    let metrics = state.metrics.clone();
    let in_flight = state.in_flight.clone();
    let limits_state = state.clone();
    let (body_timeout, body_deadline) = (state.settings.body_timeout, state.settings.body_deadline);
    App::new()
        .app_data(data)
        .app_data(web::PayloadConfig::new(limit))
        .app_data(web::JsonConfig::default().limit(limit).error_handler(|e, _| error::from_actix(&e.into(), "body").into()))
        .app_data(web::PathConfig::default().error_handler(|e, _| error::from_actix(&e.into(), "path").into()))
        .app_data(web::QueryConfig::default().error_handler(|e, _| error::from_actix(&e.into(), "query").into()))
        .configure(routes::configure)
        .default_service(web::to(|req: HttpRequest| async move {
            // Routes are method-guarded, so a known path with the wrong method lands here too.
            match req.match_pattern() {
                Some(pattern) => {
                    let allow = allowed_methods(&pattern);
                    let err = ApiError::MethodNotAllowed(format!("{pattern} does not answer {}; it answers {allow}", req.method()));
                    // RFC 9110 §15.5.6: a 405 must say what the resource does answer.
                    let mut res = actix_web::ResponseError::error_response(&err);
                    if let Ok(v) = actix_web::http::header::HeaderValue::from_str(&allow) {
                        res.headers_mut().insert(actix_web::http::header::ALLOW, v);
                    }
                    Ok::<HttpResponse, ApiError>(res)
                }
                None => Err(ApiError::NotFound(format!("nothing at {}; see /docs for the API", req.path()))),
            }
        }))
        .wrap(
            ErrorHandlers::new()
                .handler(StatusCode::METHOD_NOT_ALLOWED, problem_json_for)
                .handler(StatusCode::NOT_FOUND, problem_json_for)
                .handler(StatusCode::PAYLOAD_TOO_LARGE, problem_json_for),
        )
        .wrap_fn(move |mut req, srv| {
            use actix_web::dev::Service;
            let state = &limits_state;
            // Refused before the body is read: a token over its share waits for nothing.
            let token = req.headers().get(actix_web::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
            let guard = match token.map(|t| in_flight.enter(&t)).transpose() {
                Ok(guard) => guard,
                Err(e) => {
                    let res = actix_web::ResponseError::error_response(&e);
                    return Box::pin(async move { Ok(req.into_response(res).map_into_right_body()) }) as Pin<Box<dyn Future<Output = _>>>;
                }
            };
            if let Some((down_for, _)) = state.breaker.outage().filter(|_| breaker::needs_database(req.path())) {
                let err = ApiError::DatabaseUnreachable(format!(
                    "the database has been unreachable for {} s; this replica answers 503 at once until a probe reaches it again. Retry shortly, or ask another replica (see /v1/health/ready)",
                    down_for.as_secs()
                ));
                let res = actix_web::ResponseError::error_response(&err);
                return Box::pin(async move { Ok(req.into_response(res).map_into_right_body()) });
            }
            let verdict = limits::time_body(&mut req, body_timeout, body_deadline);
            let fut = srv.call(req);
            let state = state.clone();
            Box::pin(async move {
                let res = fut.await?;
                drop(guard);
                if let Some(breaker::DbUnreachable(why)) = res.response().extensions().get::<breaker::DbUnreachable>() {
                    state.breaker.trip(&state.db, why);
                }
                let timed_out = verdict.borrow_mut().take();
                Ok(match timed_out {
                    Some(why) => {
                        let (req, _) = res.into_parts();
                        ServiceResponse::new(req, actix_web::ResponseError::error_response(&ApiError::RequestTimeout(why))).map_into_right_body()
                    }
                    None => res.map_into_left_body(),
                })
            })
        })
        .wrap_fn(move |req, srv| {
            use actix_web::dev::Service;
            let started = Instant::now();
            let route = req.match_pattern().unwrap_or_else(|| "unmatched".into());
            let method = req.method().to_string();
            let metrics = metrics.clone();
            let fut = srv.call(req);
            async move {
                let res = fut.await?;
                let status = res.status().as_u16().to_string();
                metrics.http_requests.with_label_values(&[method.as_str(), route.as_str(), status.as_str()]).inc();
                metrics.http_duration.with_label_values(&[method.as_str(), route.as_str()]).observe(started.elapsed().as_secs_f64());
                Ok(res)
            }
        })
}
