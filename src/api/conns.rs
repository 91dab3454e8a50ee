//! Connection admission shared by the API port and the downloads listener: how many
//! connections are open, in all and per peer address, and whether one more may be. A
//! connection over a cap is told why and closed at once, so that it holds its descriptor
//! for no longer than the accept (never queued, never a hang).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::error::ProblemDetails;

/// Why a connection was not admitted: its status (429 over the per-address cap, 503 over
/// the total), stable code and detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub status: u16,
    pub code: &'static str,
    pub detail: String,
}

impl Refused {
    /// The whole problem+json response, with `Retry-After` on a 503.
    pub fn response(&self) -> String {
        let extra = if self.status == 503 { "retry-after: 1\r\n" } else { "" };
        problem_text(self.status, self.code, &self.detail, true, extra)
    }
}

/// The caps of one listener and its open connections.
pub struct Admission {
    /// Names the listener in refusals ("the API port", "the downloads listener").
    what: &'static str,
    max_total: usize,
    max_per_peer: usize,
    /// Connections open now: in all, and per peer address (entries removed at zero).
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

impl Admission {
    pub fn new(what: &'static str, max_total: usize, max_per_peer: usize) -> Arc<Admission> {
        Arc::new(Admission { what, max_total: max_total.max(1), max_per_peer: max_per_peer.max(1), open: Mutex::new((0, HashMap::new())) })
    }

    pub fn max_total(&self) -> usize {
        self.max_total
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Counts a new connection from `ip` in, or says why not.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let mut guard = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per_peer) = &mut *guard;
        let mine = per_peer.get(&ip).copied().unwrap_or(0);
        if mine >= self.max_per_peer {
            return Err(Refused {
                status: 429,
                code: "too_many_connections",
                detail: format!("{mine} connections from {ip} are open; {} allows {} per address", self.what, self.max_per_peer),
            });
        }
        if *total >= self.max_total {
            return Err(Refused { status: 503, code: "unavailable", detail: format!("{} is at its limit of {} connections", self.what, self.max_total) });
        }
        *total += 1;
        *per_peer.entry(ip).or_insert(0) += 1;
        Ok(Slot { admission: self.clone(), ip })
    }
}

/// One admitted connection; uncounted when dropped.
pub struct Slot {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.admission.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per_peer) = &mut *guard;
        *total = total.saturating_sub(1);
        if let Some(n) = per_peer.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per_peer.remove(&self.ip);
            }
        }
    }
}

/// A whole problem+json response written to a socket by hand (a refused connection, a
/// head the front or the downloads listener cannot read), in the API's `ProblemDetails` shape.
pub(super) fn problem_text(status: u16, code: &str, detail: &str, close: bool, headers: &str) -> String {
    let reason = actix_web::http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error");
    let details = ProblemDetails {
        type_: format!("urn:kaas:error:{code}"),
        title: reason.to_string(),
        status,
        detail: detail.to_string(),
        code: code.to_string(),
        extra: Default::default(),
    };
    let body = serde_json::to_string(&details).unwrap_or_default();
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: {connection}\r\n{headers}\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_address_and_in_all_and_free_on_drop() {
        let a = Admission::new("the test port", 3, 2);
        let (x, y): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let one = a.admit(x).unwrap();
        let _two = a.admit(x).unwrap();
        let third = a.admit(x).err().expect("over the per-address cap");
        assert_eq!((third.status, third.code), (429, "too_many_connections"));
        assert!(third.detail.contains("10.0.0.1") && third.detail.contains("2 per address"), "{}", third.detail);
        let _other = a.admit(y).unwrap();
        let full = a.admit("10.0.0.3".parse().unwrap()).err().expect("over the total cap");
        assert_eq!((full.status, full.code), (503, "unavailable"));
        assert!(full.response().contains("retry-after: 1\r\n"), "{}", full.response());
        drop(one);
        assert_eq!(a.open(), 2);
        assert!(a.admit(x).is_ok(), "a closed connection frees its address's slot");
    }
}
