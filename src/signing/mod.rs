//! Signed results: the service signs each run record (artifact sha256, manifest,
//! problem, device class, verdict and checks, timings, speedups, device facts) with
//! Ed25519, so a pulled kernel's numbers can be checked offline against the service's
//! public key (`GET /.well-known/kaas-signing-keys`; `kaas verify`; the Python client's
//! `kaas_client.signing`). See docs/signing.md.
//!
//! The signature covers the canonical bytes of the record as JSON (`canonical`). A
//! verifier works on the record as the JSON it received, never on a typed copy of it
//! re-serialized, so nothing a type would normalise (dates, defaults) can change what
//! is checked.

pub mod canonical;
pub mod pulled;
pub mod record;
pub mod store;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, Verifier as _};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use canonical::canonical_json;
pub use record::{RECORD_FORMAT, Record};
pub use store::Signer;

/// The lowercase hex sha256 of `bytes`: an artifact's name (the digest of its PTX), a
/// token's stored form, a key's id. It lives here, at the bottom with the other integrity
/// code, so that everything that names or checks bytes can use it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The one algorithm kaas signs with.
pub const ALG: &str = "ed25519";

/// A service signing key. Its `Debug` shows the key id only: the seed must never reach
/// a log.
#[derive(Clone)]
pub struct KeyPair(ed25519_dalek::SigningKey);

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair {{ key_id: {}, seed: <redacted> }}", self.key_id())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Malformed(String),
}

/// Decodes 32 bytes written as 64 hex digits or as base64 (surrounding whitespace ignored).
fn key_bytes(text: &str, what: &str) -> Result<[u8; 32], KeyError> {
    let t = text.trim();
    let bytes = if t.len() == 64 && t.bytes().all(|c| c.is_ascii_hexdigit()) {
        hex::decode(t).map_err(|e| KeyError::Malformed(format!("{what}: {e}")))?
    } else {
        B64.decode(t).map_err(|_| KeyError::Malformed(format!("{what} is neither 64 hex digits nor base64 of 32 bytes")))?
    };
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| KeyError::Malformed(format!("{what} holds {} bytes; an Ed25519 key is 32", bytes.len())))
}

impl KeyPair {
    /// A fresh key from the operating system's random source (through `rand`'s CSPRNG).
    pub fn generate() -> KeyPair {
        KeyPair(ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>()))
    }

    pub fn from_seed(seed: &[u8; 32]) -> KeyPair {
        KeyPair(ed25519_dalek::SigningKey::from_bytes(seed))
    }

    /// A key from the text of a key file: the 32-byte seed as 64 hex digits (what
    /// `kaas keygen` writes) or as base64.
    pub fn from_text(text: &str) -> Result<KeyPair, KeyError> {
        Ok(KeyPair::from_seed(&key_bytes(text, "the signing key")?))
    }

    /// Reads a key file; the error names the file, never its contents.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<KeyPair> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("signing key file {}: {e}", path.display()))?;
        KeyPair::from_text(&text).map_err(|e| anyhow::anyhow!("signing key file {}: {e}", path.display()))
    }

    /// The seed as 64 hex digits: the key file's form. Only for writing a key file or the
    /// database-kept key.
    pub fn seed_hex(&self) -> String {
        hex::encode(self.0.to_bytes())
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    pub fn key_id(&self) -> String {
        self.public().key_id()
    }

    /// Signs `record`'s canonical bytes.
    pub fn sign(&self, record: &serde_json::Value) -> RecordSignature {
        let sig = self.0.sign(canonical_json(record).as_bytes());
        RecordSignature { alg: ALG.into(), key_id: self.key_id(), signature: B64.encode(sig.to_bytes()) }
    }
}

/// An Ed25519 public key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// From 32 bytes as base64 (as the well-known document gives it) or 64 hex digits.
    pub fn from_text(text: &str) -> Result<PublicKey, KeyError> {
        let bytes = key_bytes(text, "the public key")?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).map(PublicKey).map_err(|_| KeyError::Malformed("the public key is not a valid Ed25519 point".into()))
    }

    pub fn to_base64(&self) -> String {
        B64.encode(self.0.as_bytes())
    }

    /// The first 16 hex digits of the sha256 of the 32 key bytes.
    pub fn key_id(&self) -> String {
        sha256_hex(self.0.as_bytes())[..16].to_string()
    }

    /// Checks `sig` over `record`'s canonical bytes.
    pub fn verify(&self, record: &serde_json::Value, sig: &RecordSignature) -> Result<(), VerifyError> {
        if sig.alg != ALG {
            return Err(VerifyError::Algorithm(sig.alg.clone()));
        }
        if sig.key_id != self.key_id() {
            return Err(VerifyError::OtherKey { signed_by: sig.key_id.clone(), given: self.key_id() });
        }
        let bytes = B64.decode(sig.signature.trim()).map_err(|_| VerifyError::Malformed("the signature is not base64".into()))?;
        let bytes = <[u8; 64]>::try_from(bytes.as_slice())
            .map_err(|_| VerifyError::Malformed(format!("the signature holds {} bytes; Ed25519 signatures are 64", bytes.len())))?;
        let sig = ed25519_dalek::Signature::from_bytes(&bytes);
        self.0.verify(canonical_json(record).as_bytes(), &sig).map_err(|_| VerifyError::Mismatch)
    }

    pub fn view(&self, current: bool) -> PublicKeyView {
        PublicKeyView { key_id: self.key_id(), alg: ALG.into(), public_key: self.to_base64(), current }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature's algorithm is `{0}`; kaas signs with ed25519")]
    Algorithm(String),
    #[error("the record was signed by key {signed_by}, but the public key given is {given}")]
    OtherKey { signed_by: String, given: String },
    #[error("{0}")]
    Malformed(String),
    #[error("the signature does not match the record: the record (or the signature) was changed after signing")]
    Mismatch,
}

/// The service's signature over a record's canonical bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RecordSignature {
    /// Always `ed25519`.
    pub alg: String,
    /// The signing key: the first 16 hex digits of the sha256 of its 32 public key bytes.
    pub key_id: String,
    /// The 64-byte signature, base64 (standard alphabet, padded).
    pub signature: String,
}

/// A public key as `GET /.well-known/kaas-signing-keys` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PublicKeyView {
    pub key_id: String,
    /// Always `ed25519`.
    pub alg: String,
    /// The 32-byte Ed25519 public key, base64.
    pub public_key: String,
    /// True for the key this service signs with now; others signed records served before.
    pub current: bool,
}

/// `GET /.well-known/kaas-signing-keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SigningKeysView {
    /// The current key first.
    pub keys: Vec<PublicKeyView>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record() -> serde_json::Value {
        json!({"format": RECORD_FORMAT, "artifact_sha256": "ab".repeat(32), "timings": {"graph": {"median_us": 900.0}}, "verdict": "pass"})
    }

    #[test]
    fn a_signature_round_trips_and_a_changed_byte_fails() {
        let k = KeyPair::generate();
        let r = record();
        let sig = k.sign(&r);
        assert_eq!(sig.alg, "ed25519");
        assert_eq!(sig.key_id.len(), 16);
        k.public().verify(&r, &sig).unwrap();

        // Key order is not part of what is signed.
        let reordered: serde_json::Value = serde_json::from_str(&format!(
            "{{\"verdict\":\"pass\",\"timings\":{{\"graph\":{{\"median_us\":900.0}}}},\"artifact_sha256\":\"{}\",\"format\":\"{RECORD_FORMAT}\"}}",
            "ab".repeat(32)
        ))
        .unwrap();
        k.public().verify(&reordered, &sig).unwrap();

        let mut tampered = r.clone();
        tampered["timings"]["graph"]["median_us"] = json!(899.0);
        assert_eq!(k.public().verify(&tampered, &sig), Err(VerifyError::Mismatch));

        let mut bad = sig.clone();
        let mut bytes = B64.decode(&bad.signature).unwrap();
        bytes[7] ^= 1;
        bad.signature = B64.encode(bytes);
        assert_eq!(k.public().verify(&r, &bad), Err(VerifyError::Mismatch));

        let other = KeyPair::generate();
        assert!(matches!(other.public().verify(&r, &sig), Err(VerifyError::OtherKey { .. })));
        assert!(matches!(k.public().verify(&r, &RecordSignature { alg: "rsa".into(), ..sig.clone() }), Err(VerifyError::Algorithm(_))));
        assert!(matches!(k.public().verify(&r, &RecordSignature { signature: "AAAA".into(), ..sig }), Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn keys_read_from_hex_or_base64_and_never_print_their_seed() {
        let k = KeyPair::generate();
        let hex_text = format!("{}\n", k.seed_hex());
        let b64_text = B64.encode(hex::decode(k.seed_hex()).unwrap());
        assert_eq!(KeyPair::from_text(&hex_text).unwrap().key_id(), k.key_id());
        assert_eq!(KeyPair::from_text(&b64_text).unwrap().key_id(), k.key_id());
        assert!(KeyPair::from_text("00ff").unwrap_err().to_string().contains("32"));
        assert!(KeyPair::from_text("not a key!").is_err());
        let shown = format!("{k:?}");
        assert!(!shown.contains(&k.seed_hex()) && shown.contains(&k.key_id()), "{shown}");

        let p = PublicKey::from_text(&k.public().to_base64()).unwrap();
        assert_eq!(p, k.public());
        assert_eq!(PublicKey::from_text(&hex::encode(B64.decode(k.public().to_base64()).unwrap())).unwrap(), p);
    }
}
