//! The offline check of a directory written by `kaas pull` (`kaas verify`): the signed
//! record verifies against a pinned public key, `kernel.ptx` is the artifact it names,
//! and `manifest.json` is its manifest.

use std::path::Path;

use serde_json::Value;

use super::{PublicKey, RECORD_FORMAT, RecordSignature, canonical_json};

/// The file `kaas pull` writes the signed record to: `{"record": …, "signature": …}`.
pub const RECORD_FILE: &str = "record.json";

/// One check of `kaas verify`, passed or not, with what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    pub detail: String,
}

fn check(name: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check { name, passed: true, detail },
        Err(detail) => Check { name, passed: false, detail },
    }
}

/// Reads the signed record of a pulled directory: `record.json`, or the `record` and
/// `signature` members of `kernel.json`.
pub fn read_signed(dir: &Path) -> Result<(Value, RecordSignature), String> {
    let (file, text) = [RECORD_FILE, "kernel.json"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok().map(|t| (*f, t)))
        .ok_or_else(|| format!("{} has neither {RECORD_FILE} nor kernel.json (run `kaas pull` into it)", dir.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{file} is not JSON: {e}"))?;
    let record = doc.get("record").filter(|r| r.is_object()).cloned().ok_or_else(|| format!("{file} has no `record` object"))?;
    let sig = doc.get("signature").filter(|s| !s.is_null()).ok_or_else(|| format!("{file} has no `signature`: the server did not sign this record"))?;
    let sig: RecordSignature = serde_json::from_value(sig.clone()).map_err(|e| format!("{file}: `signature` is malformed: {e}"))?;
    if record.get("format").and_then(Value::as_str) != Some(RECORD_FORMAT) {
        return Err(format!("{file}: the record's `format` is {}, not {RECORD_FORMAT}", record.get("format").unwrap_or(&Value::Null)));
    }
    Ok((record, sig))
}

/// The first place where two JSON values differ, as a JSON pointer ("" for the root).
pub fn first_difference(a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(u), Some(v)) => first_difference(u, v).map(|p| format!("/{k}{p}")),
                _ => Some(format!("/{k}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (u, v))| first_difference(u, v).map(|p| format!("/{i}{p}")))
        }
        _ => (canonical_json(a) != canonical_json(b)).then(String::new),
    }
}

/// Every check of a pulled directory against the public keys given (one must have made
/// the signature). All checks run, so one report names every fault.
pub fn verify_dir(dir: &Path, keys: &[PublicKey]) -> Vec<Check> {
    let (record, sig) = match read_signed(dir) {
        Ok(x) => x,
        Err(e) => return vec![Check { name: "record", passed: false, detail: e }],
    };
    let mut checks = vec![Check { name: "record", passed: true, detail: format!("{RECORD_FORMAT}, signed by key {}", sig.key_id) }];
    checks.push(check(
        "signature",
        match keys.iter().find(|k| k.key_id() == sig.key_id) {
            None => Err(format!(
                "the record was signed by key {}, but the public key(s) given are {}",
                sig.key_id,
                keys.iter().map(PublicKey::key_id).collect::<Vec<_>>().join(", ")
            )),
            Some(k) => k.verify(&record, &sig).map(|()| format!("ed25519 signature by {} verifies", sig.key_id)).map_err(|e| e.to_string()),
        },
    ));
    let want_sha = record.get("artifact_sha256").and_then(Value::as_str).unwrap_or_default();
    checks.push(check(
        "kernel.ptx",
        match std::fs::read(dir.join("kernel.ptx")) {
            Err(e) => Err(format!("cannot read kernel.ptx: {e}")),
            Ok(bytes) => {
                let sha = super::sha256_hex(&bytes);
                if sha == want_sha {
                    Ok(format!("sha256 {sha} as signed"))
                } else {
                    Err(format!("kernel.ptx has sha256 {sha}, but the signed record names {want_sha}"))
                }
            }
        },
    ));
    let want_manifest = record.get("manifest").cloned().unwrap_or(Value::Null);
    checks.push(check(
        "manifest.json",
        match std::fs::read_to_string(dir.join("manifest.json")) {
            Err(e) => Err(format!("cannot read manifest.json: {e}")),
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Err(e) => Err(format!("manifest.json is not JSON: {e}")),
                Ok(m) => match first_difference(&m, &want_manifest) {
                    None => Ok("equal to the signed manifest".into()),
                    Some(at) => Err(format!("manifest.json differs from the signed record's manifest at `{at}`")),
                },
            },
        },
    ));
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pulled directory signed by `key`: record.json, kernel.ptx, manifest.json.
    fn pulled(key: &super::super::KeyPair) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let ptx = ".version 8.8\n.target sm_90\n";
        let manifest = json!({"abi": "kaas.hgemm.v1", "launches": [{"entry": "hgemm", "grid": [32, 32, 1]}]});
        let record =
            json!({"format": RECORD_FORMAT, "artifact_sha256": crate::signing::sha256_hex(ptx.as_bytes()), "manifest": manifest, "verdict": "pass"});
        let signed = json!({"record": record, "signature": key.sign(&record)});
        std::fs::write(dir.path().join(RECORD_FILE), serde_json::to_string_pretty(&signed).unwrap()).unwrap();
        std::fs::write(dir.path().join("kernel.ptx"), ptx).unwrap();
        std::fs::write(dir.path().join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
        dir
    }

    fn failed(checks: &[Check]) -> Vec<&'static str> {
        checks.iter().filter(|c| !c.passed).map(|c| c.name).collect()
    }

    #[test]
    fn a_pulled_directory_passes_until_a_file_changes() {
        let key = super::super::KeyPair::generate();
        let keys = [key.public()];
        let dir = pulled(&key);
        let checks = verify_dir(dir.path(), &keys);
        assert_eq!(checks.len(), 4);
        assert!(failed(&checks).is_empty(), "{checks:?}");

        // Another key: the signature check names both keys.
        let other = [super::super::KeyPair::generate().public()];
        let checks = verify_dir(dir.path(), &other);
        assert_eq!(failed(&checks), ["signature"]);
        assert!(checks[1].detail.contains(&key.key_id()) && checks[1].detail.contains(&other[0].key_id()), "{checks:?}");

        // One byte more of PTX; a grid changed; both at once: each named.
        std::fs::write(dir.path().join("kernel.ptx"), ".version 8.8\n.target sm_90\n ").unwrap();
        assert_eq!(failed(&verify_dir(dir.path(), &keys)), ["kernel.ptx"]);
        std::fs::write(dir.path().join("manifest.json"), r#"{"abi": "kaas.hgemm.v1", "launches": [{"entry": "hgemm", "grid": [32, 33, 1]}]}"#).unwrap();
        let checks = verify_dir(dir.path(), &keys);
        assert_eq!(failed(&checks), ["kernel.ptx", "manifest.json"]);
        assert!(checks[3].detail.contains("/launches/0/grid/1"), "{checks:?}");

        // A changed record fails its signature.
        let dir = pulled(&key);
        let path = dir.path().join(RECORD_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"pass\"", "\"fail\"")).unwrap();
        assert_eq!(failed(&verify_dir(dir.path(), &keys)), ["signature"]);
    }

    #[test]
    fn kernel_json_serves_when_record_json_is_missing_and_an_unsigned_record_is_refused() {
        let key = super::super::KeyPair::generate();
        let dir = pulled(&key);
        std::fs::rename(dir.path().join(RECORD_FILE), dir.path().join("kernel.json")).unwrap();
        assert!(failed(&verify_dir(dir.path(), &[key.public()])).is_empty());
        std::fs::write(dir.path().join("kernel.json"), r#"{"record": {"format": "kaas.record.v1"}, "signature": null}"#).unwrap();
        let checks = verify_dir(dir.path(), &[key.public()]);
        assert_eq!(failed(&checks), ["record"]);
        assert!(checks[0].detail.contains("no `signature`"), "{checks:?}");
        let empty = tempfile::tempdir().unwrap();
        assert!(verify_dir(empty.path(), &[key.public()])[0].detail.contains("neither record.json nor kernel.json"));
    }

    #[test]
    fn differences_are_named_by_pointer() {
        let a = json!({"launches": [{"grid": [1, 2, 1]}], "abi": "x"});
        assert_eq!(first_difference(&a, &a.clone()), None);
        assert_eq!(first_difference(&a, &json!({"launches": [{"grid": [1, 3, 1]}], "abi": "x"})).as_deref(), Some("/launches/0/grid/1"));
        assert_eq!(first_difference(&a, &json!({"launches": [{"grid": [1, 2, 1]}]})).as_deref(), Some("/abi"));
        assert_eq!(first_difference(&json!(1.0), &json!(1)), None, "the same number");
    }
}
