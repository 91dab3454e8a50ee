//! Server-sent events of submissions, shared between viewers (issue 38, item 6).
//!
//! Before: every viewer of `/v1/submissions/{id}/events` ran its own task that re-read
//! and re-signed the whole submission every 400 ms for up to 30 minutes, so 300 viewers
//! of one submission cost 750 full reads a second. Now one [`Feed`] per watched
//! submission, in this process, does the reading for all its viewers:
//!
//! - every [`POLL`] it asks the database for the submission's job rows' change marks
//!   (id, state, stage, run, `updated_at`: one small query), and only when they differ
//!   from the last ones reads, signs and serializes the whole view, once, into a
//!   [`Snapshot`] whose event bytes every viewer shares;
//! - viewers wait on a `watch` channel: a viewer costs no database access and no
//!   serialization, only a reference count per change and a keep-alive line;
//! - the feed stops when its last viewer leaves or its submission is finished;
//! - streams are capped per client address (`--max-event-streams-per-client`).
//!
//! Other replicas' and workers' writes are seen through the poll, so no cross-process
//! notification is needed (Postgres LISTEN/NOTIFY would only shorten the delay).
//!
//! Tuning requests (`/v1/tuning-requests/{id}/events`) are fed the same way, their
//! change marks being their tunes' and open jobs' states and stages.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::web::Bytes;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use tokio::sync::watch;

use super::{ApiError, AppState};
use crate::db::entities::job;

/// How often a feed looks for changes.
pub const POLL: Duration = Duration::from_millis(400);
/// How long one stream lives (a client reconnects after that).
pub const STREAM_MAX: Duration = Duration::from_secs(1800);
/// A comment line this often keeps proxies from closing a quiet stream.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// One state of a submission, as every viewer receives it.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every change the feed publishes.
    pub seq: u64,
    /// `event: snapshot` with the view as JSON.
    pub event: Bytes,
    /// With `done`: the `event: done` that ends every stream.
    pub done: Option<Bytes>,
}

type Channel = watch::Receiver<Arc<Snapshot>>;

/// The feeds of this process and its viewers per client.
pub struct Events {
    /// A receiver of each running feed (to subscribe new viewers from). Invariant: a
    /// feed's task removes its entry, under this lock, before it stops publishing.
    feeds: Mutex<HashMap<Watched, Channel>>,
    /// Open streams per client address.
    clients: Mutex<HashMap<IpAddr, usize>>,
    max_per_client: usize,
}

/// One open stream, counted against its client until dropped.
pub struct StreamSlot {
    state: Arc<AppState>,
    ip: IpAddr,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut clients = self.state.events.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = clients.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                clients.remove(&self.ip);
            }
        }
    }
}

fn event(name: &str, data: &str, id: u64) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: {name}\ndata: {data}\n\n"))
}

/// What a feed follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Watched {
    Submission(i32),
    TuningRequest(i32),
}

impl Watched {
    fn missing(self) -> ApiError {
        match self {
            Watched::Submission(id) => ApiError::NotFound(format!("no submission {id}")),
            Watched::TuningRequest(id) => ApiError::NotFound(format!("no tuning request {id}")),
        }
    }
}

/// The change marks of what a feed follows (a submission's jobs; a request's tunes and
/// their open jobs), as text: what a feed compares between polls.
type Marks = String;

/// A job's fields that mark a change: id, state, stage, run, last update.
type JobMark = (i32, String, Option<String>, Option<i32>, chrono::DateTime<chrono::Utc>);

async fn marks(state: &AppState, what: Watched) -> Result<Marks, sea_orm::DbErr> {
    state.metrics.event_reads.with_label_values(&["marks"]).inc();
    match what {
        Watched::Submission(id) => {
            let rows: Vec<JobMark> = job::Entity::find()
                .select_only()
                .columns([job::Column::Id, job::Column::State, job::Column::Stage, job::Column::RunId, job::Column::UpdatedAt])
                .filter(job::Column::SubmissionId.eq(id))
                .order_by_asc(job::Column::Id)
                .into_tuple()
                .all(&state.db)
                .await?;
            Ok(format!("{rows:?}"))
        }
        Watched::TuningRequest(id) => Ok(format!("{:?}", crate::work::tune::marks(&state.db, id).await?)),
    }
}

/// The whole view (signed, for a submission) as a snapshot numbered `seq`; `None`: no
/// such submission or request.
async fn snapshot(state: &AppState, what: Watched, seq: u64) -> Result<Option<(Snapshot, String)>, ApiError> {
    state.metrics.event_reads.with_label_values(&["view"]).inc();
    let (text, finished) = match what {
        Watched::Submission(id) => {
            let Some(mut v) = crate::work::submit::view(&state.db, id).await? else { return Ok(None) };
            state.sign_submission(&mut v).await?;
            (serde_json::to_string(&v).map_err(|e| ApiError::Internal(e.to_string()))?, v.finished())
        }
        Watched::TuningRequest(id) => {
            let Some(v) = crate::work::tune::view(&state.db, id).await? else { return Ok(None) };
            (serde_json::to_string(&v).map_err(|e| ApiError::Internal(e.to_string()))?, v.finished())
        }
    };
    let done = finished.then(|| event("done", &text, seq + 1));
    Ok(Some((Snapshot { seq, event: event("snapshot", &text, seq), done }, text)))
}

impl Events {
    pub fn new(max_per_client: usize) -> Events {
        Events { feeds: Mutex::new(HashMap::new()), clients: Mutex::new(HashMap::new()), max_per_client: max_per_client.max(1) }
    }

    /// Feeds running now (submissions watched through this process).
    pub fn feeds(&self) -> usize {
        self.feeds.lock().map(|f| f.len()).unwrap_or(0)
    }
}

/// Counts a stream in for client `ip`, or refuses it (429).
pub fn admit(state: &Arc<AppState>, ip: IpAddr) -> Result<StreamSlot, ApiError> {
    let e = &state.events;
    let mut clients = e.clients.lock().unwrap_or_else(|e| e.into_inner());
    let n = clients.entry(ip).or_insert(0);
    if *n >= e.max_per_client {
        return Err(ApiError::QuotaExceeded(format!(
            "{n} event streams are open from {ip}; the limit is {} per client (--max-event-streams-per-client); close one first",
            e.max_per_client
        )));
    }
    *n += 1;
    Ok(StreamSlot { state: state.clone(), ip })
}

/// A receiver of submission `id`'s feed, starting the feed if none runs (its first read
/// answers 404 for an unknown submission).
pub async fn subscribe(state: &Arc<AppState>, id: i32) -> Result<Channel, ApiError> {
    subscribe_to(state, Watched::Submission(id)).await
}

/// A receiver of the feed of `id`, starting it if none runs (404 for an unknown one).
pub async fn subscribe_to(state: &Arc<AppState>, id: Watched) -> Result<Channel, ApiError> {
    if let Some(rx) = state.events.feeds.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return Ok(rx.clone());
    }
    let (first, _) = snapshot(state, id, 1).await?.ok_or_else(|| id.missing())?;
    let finished = first.done.is_some();
    let (tx, rx) = watch::channel(Arc::new(first));
    if finished {
        // Nothing will change: no feed to run.
        return Ok(rx);
    }
    let mut feeds = state.events.feeds.lock().unwrap_or_else(|e| e.into_inner());
    // Another viewer may have started one meanwhile: join it, drop this one.
    if let Some(existing) = feeds.get(&id) {
        return Ok(existing.clone());
    }
    feeds.insert(id, rx.clone());
    drop(feeds);
    let st = state.clone();
    actix_web::rt::spawn(async move { run_feed(st, id, tx).await });
    Ok(rx)
}

/// Removes feed `id` if no viewer holds it (the map's own receiver is the one left);
/// true when removed, and the feed must stop.
fn retire_if_unwatched(state: &AppState, id: Watched, tx: &watch::Sender<Arc<Snapshot>>) -> bool {
    let mut feeds = state.events.feeds.lock().unwrap_or_else(|e| e.into_inner());
    if tx.receiver_count() <= 1 {
        feeds.remove(&id);
        return true;
    }
    false
}

async fn run_feed(state: Arc<AppState>, id: Watched, tx: watch::Sender<Arc<Snapshot>>) {
    let mut seq = 1u64;
    let mut last_marks: Option<Marks> = None;
    let mut last_text: Option<String> = None;
    loop {
        tokio::time::sleep(POLL).await;
        if retire_if_unwatched(&state, id, &tx) {
            return;
        }
        let now = match marks(&state, id).await {
            Ok(m) => m,
            // A database outage: keep the viewers, try again at the next poll.
            Err(e) => {
                tracing::debug!(error = %e, ?id, "event feed: cannot read change marks");
                continue;
            }
        };
        // The first poll always reads: writes may have landed between the subscriber's
        // first read and this feed's start.
        if last_marks.as_ref() == Some(&now) {
            continue;
        }
        let read = match snapshot(&state, id, seq + 1).await {
            Ok(Some(s)) => s,
            // Gone (deleted for good): end every stream.
            Ok(None) => break,
            Err(_) => continue,
        };
        last_marks = Some(now);
        let (snap, text) = read;
        let done = snap.done.is_some();
        // A change of marks alone (a lease renewed) is no change of the view: no event.
        if last_text.as_deref() != Some(text.as_str()) || done {
            seq = snap.seq;
            last_text = Some(text);
            tx.send_replace(Arc::new(snap));
        }
        if done {
            break;
        }
    }
    state.events.feeds.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
}

/// The byte stream of one viewer: the current snapshot at once, each change after, a
/// keep-alive line when quiet, `done` at the end; ends after [`STREAM_MAX`].
pub fn stream(mut rx: Channel, slot: StreamSlot) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Viewer {
        rx: Channel,
        _slot: StreamSlot,
        sent: u64,
        pending: Option<Bytes>,
        ends: tokio::time::Instant,
        finished: bool,
    }
    rx.mark_changed();
    let v = Viewer { rx, _slot: slot, sent: 0, pending: None, ends: tokio::time::Instant::now() + STREAM_MAX, finished: false };
    futures_util::stream::unfold(v, |mut v| async move {
        if let Some(b) = v.pending.take() {
            return Some((Ok(b), v));
        }
        if v.finished {
            return None;
        }
        loop {
            tokio::select! {
                changed = v.rx.changed() => {
                    if changed.is_err() {
                        // The feed stopped without `done` (its submission is gone).
                        return None;
                    }
                    let snap = v.rx.borrow_and_update().clone();
                    if let Some(done) = &snap.done {
                        v.finished = true;
                        v.pending = Some(done.clone());
                    }
                    if snap.seq > v.sent {
                        v.sent = snap.seq;
                        return Some((Ok(snap.event.clone()), v));
                    }
                    if let Some(b) = v.pending.take() {
                        return Some((Ok(b), v));
                    }
                }
                _ = tokio::time::sleep(KEEPALIVE) => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), v)),
                _ = tokio::time::sleep_until(v.ends) => return None,
            }
        }
    })
}

/// The `text/event-stream` response of one viewer (see [`stream`]).
pub fn response(rx: Channel, slot: StreamSlot) -> actix_web::HttpResponse {
    use actix_web::http::header;
    actix_web::HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream(rx, slot))
}

/// Admits a viewer from `req`'s address (counted by the connection's address: a header
/// would let a client pick its own) and subscribes it to `what`'s feed.
pub async fn open(req: &actix_web::HttpRequest, state: &Arc<AppState>, what: Watched) -> Result<actix_web::HttpResponse, ApiError> {
    let ip = req.peer_addr().map(|a| a.ip()).unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let slot = admit(state, ip)?;
    let rx = subscribe_to(state, what).await?;
    Ok(response(rx, slot))
}

/// One event of an event stream, as a client's SSE parser sees it (the OpenAPI
/// document's schema for `text/event-stream` answers): `event` names it (`snapshot`,
/// then `done`), `data` is the view as JSON text, `id` numbers the events of a stream.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

