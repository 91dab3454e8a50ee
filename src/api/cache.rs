//! moka caches: hot artifacts (immutable, content-addressed, weighed by size) and rendered
//! catalog answers (invalidated whole on any catalog change, and aged out after a short
//! TTL so that replicas sharing one Postgres converge without talking to each other).

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::HeaderValue;
use actix_web::web::Bytes;
use moka::future::Cache;

/// A rendered answer: status, content type and body, ready to send again — and the
/// body gzip-compressed once, when it is worth it (the problem list at 2,000 problems
/// shrinks about 20-fold).
#[derive(Debug, Clone)]
pub struct Rendered {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    pub gzip: Option<Bytes>,
    /// For a kernel answer: the PTX it points at, so the download needs no re-parse.
    pub artifact: Option<String>,
}

/// Bodies smaller than this are sent as they are.
const GZIP_MIN_BYTES: usize = 1024;

impl Rendered {
    pub fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        let gzip = (body.len() >= GZIP_MIN_BYTES).then(|| gzip(&body));
        Rendered { status, content_type, body: body.into(), gzip, artifact: None }
    }
}

/// gzip at the default level (writing into memory cannot fail).
pub fn gzip(bytes: &[u8]) -> Bytes {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4), flate2::Compression::default());
    enc.write_all(bytes).and_then(|_| enc.finish()).unwrap_or_default().into()
}

/// PTX of one artifact, with its strong ETag, and gzip-compressed once for clients that
/// accept it (PTX text shrinks several-fold, and sending fewer bytes is most of the cost
/// of a download). The response's per-artifact header values are built once here too, so
/// a download allocates nothing for them.
#[derive(Debug)]
pub struct ArtifactBody {
    pub sha256: String,
    pub etag: String,
    pub body: Bytes,
    /// The gzip representation and its own strong ETag (`"<sha256>-gzip"`).
    pub gzip: Bytes,
    pub gzip_etag: String,
    /// `etag`, `gzip_etag`, `Content-Location` and `Content-Disposition` as header values.
    pub etag_header: HeaderValue,
    pub gzip_etag_header: HeaderValue,
    pub content_location: HeaderValue,
    pub content_disposition: HeaderValue,
}

impl ArtifactBody {
    pub fn new(sha256: String, ptx: String) -> Self {
        let gzip = gzip(ptx.as_bytes());
        // A sha256 from the database is 64 hex digits; anything else still makes a valid
        // (if odd) header value rather than a panic.
        let value = |s: String| HeaderValue::from_maybe_shared(Bytes::from(s)).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        let etag = format!("\"{sha256}\"");
        let gzip_etag = format!("\"{sha256}-gzip\"");
        ArtifactBody {
            etag_header: value(etag.clone()),
            gzip_etag_header: value(gzip_etag.clone()),
            content_location: value(format!("/v1/artifacts/{sha256}")),
            content_disposition: value(format!("attachment; filename=\"{sha256}.ptx\"")),
            etag,
            gzip_etag,
            sha256,
            body: ptx.into_bytes().into(),
            gzip,
        }
    }
}

#[derive(Clone)]
pub struct Caches {
    pub artifacts: Cache<String, Arc<ArtifactBody>>,
    pub catalog: Cache<String, Arc<Rendered>>,
}

impl Caches {
    pub fn new(artifact_bytes: u64, catalog_ttl: Duration) -> Self {
        Caches {
            artifacts: Cache::builder()
                .weigher(|_k: &String, v: &Arc<ArtifactBody>| u32::try_from(v.body.len() + v.gzip.len()).unwrap_or(u32::MAX))
                .max_capacity(artifact_bytes)
                .build(),
            catalog: Cache::builder().max_capacity(20_000).time_to_live(catalog_ttl).build(),
        }
    }

    /// Call after anything that changes the catalog (import, a new best run).
    pub fn catalog_changed(&self) {
        self.catalog.invalidate_all();
    }
}
