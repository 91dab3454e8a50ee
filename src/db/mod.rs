//! Storage: one connection function for SQLite (the default, one file) and Postgres (a
//! fleet), migrations at start-up, and write transactions that wait instead of failing.

pub mod entities;

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};

/// How long a SQLite writer waits for the lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct DbConfig {
    /// `sqlite://path?mode=rwc`, `sqlite::memory:` or `postgres://…`.
    pub url: String,
    pub max_connections: u32,
    /// Postgres only: the schema to work in (tests use one per test).
    pub pg_schema: Option<String>,
}

impl DbConfig {
    pub fn new(url: impl Into<String>) -> Self {
        DbConfig { url: url.into(), max_connections: 16, pg_schema: None }
    }
}

/// Turns a bare path (`kaas.db`) into a SQLite URL that creates the file if missing.
pub fn normalize_url(url_or_path: &str) -> String {
    if url_or_path.contains("://") || url_or_path.starts_with("sqlite:") {
        url_or_path.to_string()
    } else {
        format!("sqlite://{url_or_path}?mode=rwc")
    }
}

/// Connects and brings the schema up to date.
pub async fn connect(cfg: &DbConfig) -> Result<DatabaseConnection, DbErr> {
    let url = normalize_url(&cfg.url);
    let mut opts = ConnectOptions::new(url.clone());
    opts.max_connections(cfg.max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    if url.starts_with("sqlite:") {
        // Every pooled connection gets these, not only the first (a one-off PRAGMA would not).
        opts.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .foreign_keys(true)
        });
        if url.contains(":memory:") {
            // Each connection would otherwise see its own empty in-memory database.
            opts.max_connections(1).min_connections(1);
        }
    }
    if let Some(schema) = &cfg.pg_schema {
        opts.set_schema_search_path(schema.clone());
    }
    let db = Database::connect(opts).await?;
    Migrator::up(&db, None).await?;
    Ok(db)
}

/// Begins a write transaction. On SQLite it is `BEGIN IMMEDIATE`, so a writer takes the
/// lock up front and waits (busy timeout) rather than failing on upgrade mid-way.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let options = match db.get_database_backend() {
        DbBackend::Sqlite => TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        },
        _ => TransactionOptions::default(),
    };
    db.begin_with_options(options).await
}

/// A short name of the backend for health and metrics.
pub fn backend_name(db: &DatabaseConnection) -> &'static str {
    match db.get_database_backend() {
        DbBackend::Sqlite => "sqlite",
        DbBackend::Postgres => "postgres",
        _ => "other",
    }
}
