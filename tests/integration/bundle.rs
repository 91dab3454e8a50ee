//! Catalog bundles: byte-identical round trips, idempotent imports, and all-or-nothing
//! refusal of truncated or corrupt bundles.

use std::path::Path;

use kaas::catalog::bundle;

use crate::both_backends;
use crate::common::*;

fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("index.json".to_string(), std::fs::read(dir.join("index.json")).unwrap())];
    let mut ptx: Vec<_> = std::fs::read_dir(dir.join("ptx")).unwrap().map(|e| e.unwrap().path()).collect();
    ptx.sort();
    for p in ptx {
        out.push((p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()));
    }
    out
}

async fn import_then_export_is_byte_identical(backend: Backend) {
    let db = TestDb::new(backend).await;
    let src = tempfile::tempdir().unwrap();
    write_fixture(src.path(), &fixture());
    let report = bundle::import(&db.db, src.path()).await.unwrap();
    assert_eq!((report.artifacts, report.problems, report.entries, report.baselines), (2, 4, 3, 5));
    let out = tempfile::tempdir().unwrap();
    bundle::export(&db.db, out.path()).await.unwrap();
    assert_eq!(read_tree(src.path()), read_tree(out.path()));
    db.cleanup().await;
}

async fn importing_twice_adds_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let src = tempfile::tempdir().unwrap();
    write_fixture(src.path(), &fixture());
    bundle::import(&db.db, src.path()).await.unwrap();
    let first = counts(&db).await;
    let again = bundle::import(&db.db, src.path()).await.unwrap();
    assert_eq!(again, bundle::ImportReport::default());
    assert_eq!(counts(&db).await, first);
    db.cleanup().await;
}

async fn counts(db: &TestDb) -> Vec<i64> {
    let mut v = vec![];
    for t in ["artifacts", "problems", "manifests", "runs", "catalog_entries", "baselines", "submitters", "submissions"] {
        v.push(db.count(t).await);
    }
    v
}

/// Each corruption must be refused with a message naming the fault, and write nothing.
async fn corrupt_bundles_are_refused_whole(backend: Backend) {
    let db = TestDb::new(backend).await;
    type Corrupt = (&'static str, fn(&Path), &'static str);
    let cases: Vec<Corrupt> = vec![
        ("truncated index", |d| {
            let t = std::fs::read(d.join("index.json")).unwrap();
            std::fs::write(d.join("index.json"), &t[..t.len() / 2]).unwrap();
        }, "index.json"),
        ("missing index", |d| std::fs::remove_file(d.join("index.json")).unwrap(), "index.json"),
        ("PTX edited after hashing", |d| {
            let p = std::fs::read_dir(d.join("ptx")).unwrap().next().unwrap().unwrap().path();
            let mut t = std::fs::read_to_string(&p).unwrap();
            t.push_str("// tampered\n");
            std::fs::write(&p, t).unwrap();
        }, "hashes to"),
        ("PTX file missing", |d| {
            let p = std::fs::read_dir(d.join("ptx")).unwrap().next().unwrap().unwrap().path();
            std::fs::remove_file(p).unwrap();
        }, ".ptx"),
        ("PTX truncated to binary", |d| {
            let p = std::fs::read_dir(d.join("ptx")).unwrap().next().unwrap().unwrap().path();
            std::fs::write(&p, [0xffu8, 0x00]).unwrap();
        }, ".ptx"),
        ("unknown format", |d| edit_index(d, |i| i["format"] = "kaas.catalog.v0".into()), "format"),
        ("a bad shape", |d| edit_index(d, |i| i["problems"][0]["m"] = 0.into()), "problems[0]"),
        ("an unknown field", |d| edit_index(d, |i| i["entries"][0]["surprise"] = 1.into()), "surprise"),
        ("an unlisted device class", |d| edit_index(d, |i| i["entries"][1]["device_class"] = "B200".into()), "B200"),
        ("a failing run as catalog entry", |d| edit_index(d, |i| i["entries"][2]["run"]["verdict"] = "exact_mismatch".into()), "passing run"),
        ("a broken manifest in the last entry", |d| edit_index(d, |i| i["entries"][2]["manifest"]["launches"][0]["block"][0] = 4096.into()), "entries[2]"),
        ("a manifest for another problem", |d| edit_index(d, |i| i["entries"][0]["manifest"]["problem"]["k"] = 8.into()), "differs"),
        ("a bad baseline", |d| edit_index(d, |i| i["baselines"][4]["median_us"] = (-1.0).into()), "baselines[4]"),
    ];
    for (what, corrupt, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        write_fixture(dir.path(), &fixture());
        corrupt(dir.path());
        let err = bundle::import(&db.db, dir.path()).await.expect_err(what).to_string();
        assert!(err.contains(needle), "{what}: `{err}` does not mention `{needle}`");
        for t in ["artifacts", "problems", "manifests", "runs", "catalog_entries", "baselines", "submitters", "device_classes"] {
            assert_eq!(db.count(t).await, 0, "{what}: {t} was written");
        }
    }
    db.cleanup().await;
}

fn edit_index(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("index.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

both_backends!(import_then_export_is_byte_identical, importing_twice_adds_nothing, corrupt_bundles_are_refused_whole);

/// The shipped catalog is canonical: importing and exporting it changes no byte.
#[actix_web::test]
async fn the_shipped_catalog_round_trips() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    if !shipped.join("index.json").exists() {
        panic!("kernels/index.json is missing: the service must ship a catalog");
    }
    let db = TestDb::new(Backend::Sqlite).await;
    let report = bundle::import(&db.db, &shipped).await.unwrap();
    assert!(report.entries >= 1, "the shipped catalog must hold at least one kernel");
    let out = tempfile::tempdir().unwrap();
    bundle::export(&db.db, out.path()).await.unwrap();
    assert_eq!(std::fs::read(shipped.join("index.json")).unwrap(), std::fs::read(out.path().join("index.json")).unwrap());
}

/// So is every bundle under kernels/ (the H100 catalog, gzipped, among them): an import then
/// a snapshot gives its index back, each entry's description included.
#[actix_web::test]
async fn every_shipped_bundle_round_trips() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut checked = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("ptx").is_dir()) {
        let (index, _) = bundle::read_bundle(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let db = TestDb::new(Backend::Sqlite).await;
        bundle::import(&db.db, &dir).await.unwrap();
        let (back, _) = bundle::snapshot(&db.db).await.unwrap();
        for (a, b) in index.entries.iter().zip(&back.entries) {
            assert!(a == b, "{}: the entry for {} comes back as {b:?}, not {a:?}", dir.display(), a.problem);
        }
        assert!(bundle::index_text(&index).unwrap() == bundle::index_text(&back).unwrap(), "{}: the index does not round-trip", dir.display());
        checked.push(dir);
        db.cleanup().await;
    }
    assert!(checked.iter().any(|d| d.ends_with("h100")), "{checked:?}");
}

async fn a_catalog_tree_imports_every_bundle_including_gzipped_ones(backend: Backend) {
    use std::io::Write;
    let db = TestDb::new(backend).await;
    let root = tempfile::tempdir().unwrap();
    let f = fixture();
    write_fixture(root.path(), &f);
    // A second bundle, baselines only, shipped as index.json.gz in a subdirectory.
    let sub = root.path().join("baselines-x");
    let (mut index, _) = fixture_index(&f);
    let extra = problem(16384, 16384, 16384, kaas::problem::Layout::Tn);
    index.problems = vec![extra];
    index.artifacts.clear();
    index.entries.clear();
    index.baselines = vec![baseline(extra, "cublaslt_autotune", 11000.0)];
    std::fs::create_dir_all(&sub).unwrap();
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(sub.join("index.json.gz")).unwrap(), flate2::Compression::default());
    gz.write_all(bundle::index_text(&index).unwrap().as_bytes()).unwrap();
    gz.finish().unwrap();
    let report = bundle::import_tree(&db.db, root.path()).await.unwrap();
    assert_eq!((report.entries, report.baselines, report.problems), (3, 6, 5));
    // A broken gzip is refused, named, and adds nothing.
    let bad = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bad.path().join("b")).unwrap();
    std::fs::write(bad.path().join("b/index.json.gz"), b"not gzip").unwrap();
    let before = db.count("baselines").await;
    let err = bundle::import_tree(&db.db, bad.path()).await.unwrap_err().to_string();
    assert!(err.contains("index.json.gz"), "{err}");
    assert_eq!(db.count("baselines").await, before);
    db.cleanup().await;
}

both_backends!(a_catalog_tree_imports_every_bundle_including_gzipped_ones);

/// The shipped baseline tables parse and hold what their README says.
#[test]
fn the_shipped_baseline_tables_are_valid_bundles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut found = 0;
    for dir in std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir() && bundle::has_index(p)) {
        let (index, _) = bundle::read_bundle(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert!(!index.baselines.is_empty(), "{} holds no baselines", dir.display());
        found += 1;
    }
    assert!(found >= 1, "no baseline table under kernels/");
}
