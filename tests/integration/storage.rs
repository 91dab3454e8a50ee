//! Storage: migrations from empty, SQLite connection settings, write transactions.

use sea_orm::{ConnectionTrait, Statement};

use crate::both_backends;
use crate::common::*;

async fn migrations_build_every_table_from_empty_and_rerun_cleanly(backend: Backend) {
    let db = TestDb::new(backend).await;
    for t in ["artifacts", "problems", "device_classes", "submitters", "api_tokens", "submissions", "manifests", "runs", "baselines", "catalog_entries", "jobs", "autotune_choices"] {
        assert_eq!(db.count(t).await, 0, "{t}");
    }
    // Running the migrator again (as every start-up does) changes nothing.
    use migration::MigratorTrait;
    migration::Migrator::up(&db.db, None).await.unwrap();
    assert_eq!(migration::Migrator::get_pending_migrations(&db.db).await.unwrap().len(), 0);
    db.cleanup().await;
}

async fn foreign_keys_are_enforced(backend: Backend) {
    let db = TestDb::new(backend).await;
    let r = db
        .db
        .execute_raw(Statement::from_string(
            db.db.get_database_backend(),
            "INSERT INTO catalog_entries (device_class, problem_id, run_id, created_at) VALUES ('X', 999, 999, '2026-01-01T00:00:00Z')",
        ))
        .await;
    assert!(r.is_err(), "a catalog entry pointing nowhere was accepted");
    db.cleanup().await;
}

both_backends!(migrations_build_every_table_from_empty_and_rerun_cleanly, foreign_keys_are_enforced);

#[actix_web::test]
async fn sqlite_connections_use_wal_and_a_busy_timeout() {
    let db = TestDb::new(Backend::Sqlite).await;
    let q = |sql: &str| Statement::from_string(sea_orm::DbBackend::Sqlite, sql.to_string());
    let mode = db.db.query_one_raw(q("PRAGMA journal_mode")).await.unwrap().unwrap();
    assert_eq!(mode.try_get_by_index::<String>(0).unwrap(), "wal");
    let timeout = db.db.query_one_raw(q("PRAGMA busy_timeout")).await.unwrap().unwrap();
    assert!(timeout.try_get_by_index::<i64>(0).unwrap() >= 5000);
    let fk = db.db.query_one_raw(q("PRAGMA foreign_keys")).await.unwrap().unwrap();
    assert_eq!(fk.try_get_by_index::<i64>(0).unwrap(), 1);
}

/// Fresh SQLite files migrate every time. The tuning migration rebuilds `jobs` (drop,
/// recreate, re-index); with its statements spread over a pool's connections, SQLite now
/// and then judged a new index's name against a connection's stale schema ("index
/// ix_jobs_claim already exists"). Several fresh files in a row make that visible.
#[actix_web::test]
async fn fresh_sqlite_files_migrate_every_time() {
    for i in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("kaas.db").display());
        let db = kaas::db::connect(&kaas::db::DbConfig::new(&url)).await.unwrap_or_else(|e| panic!("fresh file {i}: {e}"));
        db.close().await.ok();
    }
}
