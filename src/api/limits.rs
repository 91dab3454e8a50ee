//! Request limits the app applies (issue 52): a request body that stops arriving is
//! answered 408 and its connection closed, and one token may have only so many requests
//! in progress at once (429). Both are about holding a worker's attention: a client that
//! sends `Content-Length: 100000` and ten bytes would otherwise keep its request, its
//! connection and the handler awaiting the body for as long as it likes.
//!
//! The body timer lives here, not in the connection front (`crate::api::front`): only the
//! app knows when a body is being awaited, and a connection that sends nothing while it
//! reads a long response (an event stream) is not stalled.

use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_http::error::PayloadError;
use actix_web::HttpMessage as _;
use actix_web::dev::ServiceRequest;
use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

use super::ApiError;

/// Why a body was given up, once it was.
pub type BodyVerdict = Rc<RefCell<Option<String>>>;

/// Replaces the request's body with one that fails when no byte has come for `gap`, or
/// the whole has not come within `whole`; the verdict says which. A request without a
/// body is left alone.
pub fn time_body(req: &mut ServiceRequest, gap: Duration, whole: Duration) -> BodyVerdict {
    let verdict: BodyVerdict = Rc::new(RefCell::new(None));
    let payload = req.take_payload();
    if let actix_http::Payload::None = payload {
        return verdict;
    }
    let now = Instant::now();
    let whole_deadline = now + whole;
    let timed = TimedBody {
        inner: payload,
        gap,
        whole,
        whole_deadline,
        timer: Box::pin(tokio::time::sleep_until((now + gap).min(whole_deadline))),
        verdict: verdict.clone(),
        done: false,
    };
    req.set_payload(actix_http::Payload::Stream { payload: Box::pin(timed) });
    verdict
}

struct TimedBody {
    inner: actix_http::Payload,
    gap: Duration,
    whole: Duration,
    whole_deadline: Instant,
    timer: Pin<Box<Sleep>>,
    verdict: BodyVerdict,
    done: bool,
}

impl Stream for TimedBody {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        // Bytes already here win over a timer that ran out while nobody asked for them.
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let next = (Instant::now() + this.gap).min(this.whole_deadline);
                this.timer.as_mut().reset(next);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.done = true;
                let why = if Instant::now() >= this.whole_deadline {
                    format!("the request body did not arrive whole within {} s", this.whole.as_secs())
                } else {
                    format!("the request body stopped arriving: nothing came for {} s", this.gap.as_secs())
                };
                *this.verdict.borrow_mut() = Some(why.clone());
                Poll::Ready(Some(Err(PayloadError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))))
            }
        }
    }
}

/// Requests in progress per token, capped.
pub struct InFlight {
    max: usize,
    counts: Mutex<HashMap<String, usize>>,
}

impl InFlight {
    pub fn new(max: usize) -> Arc<InFlight> {
        Arc::new(InFlight { max: max.max(1), counts: Mutex::new(HashMap::new()) })
    }

    /// Counts a request of the token in `authorization` (the header's value) in, or
    /// refuses it. Keyed by the header as sent, before it is checked: a request with an
    /// unknown token counts under it as well, and is refused by the lookup after.
    pub fn enter(self: &Arc<Self>, authorization: &str) -> Result<InFlightGuard, ApiError> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(authorization.to_string()).or_insert(0);
        if *n >= self.max {
            return Err(ApiError::TooManyInFlight(format!(
                "this token has {n} requests in progress; {} are allowed at once. Wait for one to finish",
                self.max
            )));
        }
        *n += 1;
        Ok(InFlightGuard { in_flight: self.clone(), key: authorization.to_string() })
    }

    /// Tokens with a request in progress now.
    pub fn tokens(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One request in progress; uncounted when dropped.
pub struct InFlightGuard {
    in_flight: Arc<InFlight>,
    key: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut counts = self.in_flight.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_gets_its_share_and_no_more() {
        let f = InFlight::new(2);
        let a = f.enter("Bearer a").unwrap();
        let _b = f.enter("Bearer a").unwrap();
        let refused = f.enter("Bearer a").err().expect("a third request is refused");
        assert_eq!(refused.code(), "too_many_in_flight");
        assert!(refused.to_string().contains("2 are allowed"), "{refused}");
        assert!(f.enter("Bearer b").is_ok(), "another token is counted apart");
        drop(a);
        assert!(f.enter("Bearer a").is_ok(), "a finished request frees its place");
        drop(_b);
        assert_eq!(f.tokens(), 0, "tokens with nothing in progress are forgotten");
    }

    #[actix_web::test]
    async fn a_stalled_body_fails_after_the_gap_and_a_flowing_one_does_not() {
        use futures_util::StreamExt;
        let (mut tx, payload) = actix_http::h1::Payload::create(false);
        let mut req = actix_web::test::TestRequest::post().set_payload(Bytes::new()).to_srv_request();
        req.set_payload(payload.into());
        let verdict = time_body(&mut req, Duration::from_millis(200), Duration::from_secs(60));
        let mut body = req.take_payload();
        tx.feed_data(Bytes::from_static(b"0123456789"));
        assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from_static(b"0123456789"));
        let started = std::time::Instant::now();
        assert!(body.next().await.unwrap().is_err(), "a stalled body ends in an error");
        assert!(started.elapsed() >= Duration::from_millis(150) && started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(verdict.borrow().as_deref().is_some_and(|v| v.contains("stopped arriving")), "{:?}", verdict.borrow());
        assert!(body.next().await.is_none());
    }
}
