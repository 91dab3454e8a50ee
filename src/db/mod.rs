//! Storage: one connection function for SQLite (the default, one file) and Postgres (a
//! fleet), migrations at start-up under a lock that one process holds at a time, and
//! write transactions that wait instead of failing.

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

/// [`DbConfig::acquire_timeout`]'s default.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct DbConfig {
    /// `sqlite://path?mode=rwc`, `sqlite::memory:` or `postgres://…`.
    pub url: String,
    pub max_connections: u32,
    /// How long a request waits for a pooled connection (or a new one to connect) before
    /// it fails: short, so that an outage is answered in about this long, not held.
    pub acquire_timeout: Duration,
    /// Postgres only: the schema to work in (tests use one per test).
    pub pg_schema: Option<String>,
}

impl DbConfig {
    pub fn new(url: impl Into<String>) -> Self {
        DbConfig { url: url.into(), max_connections: 16, acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT, pg_schema: None }
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

/// Opens the connection pool; the schema is left as it is.
pub async fn open(cfg: &DbConfig) -> Result<DatabaseConnection, DbErr> {
    let url = normalize_url(&cfg.url);
    let mut opts = ConnectOptions::new(url.clone());
    opts.max_connections(cfg.max_connections)
        .min_connections(1)
        .acquire_timeout(cfg.acquire_timeout)
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
    Database::connect(opts).await
}

/// Brings the schema up to date. Call it under a [`StartLock`]: the migrator itself does
/// not keep two processes from applying the same migration at once.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Migrator::up(db, None).await;
    }
    // SQLite: every pending migration in one transaction, so on one connection. SQLite
    // checks a DDL statement's names against the schema its own connection has cached,
    // so a migration spread over pooled connections could find a table or index it had
    // just dropped still there ("index … already exists", now and then); and a migration
    // that fails halfway leaves nothing behind.
    let txn = db.begin().await?;
    Migrator::up(&txn, None).await?;
    txn.commit().await
}

/// Connects and brings the schema up to date, under the start-up lock.
pub async fn connect(cfg: &DbConfig) -> Result<DatabaseConnection, DbErr> {
    // The lock first: opening a fresh SQLite file switches it to WAL, which fails with
    // "database is locked" (the busy timeout does not cover it) while another process
    // holds the file for its migrations.
    let lock = StartLock::acquire(cfg).await?;
    let db = match open(cfg).await {
        Ok(db) => db,
        Err(e) => {
            lock.release().await;
            return Err(e);
        }
    };
    let migrated = migrate(&db).await;
    lock.release().await;
    migrated?;
    Ok(db)
}

/// One process at a time per database: held while a process migrates the schema and
/// imports the shipped catalog, so that replicas started together migrate once and none
/// serves before the first import committed; the others wait for it.
///
/// Postgres: a session advisory lock on a connection of its own (keyed by database and
/// search path, so tests in separate schemas do not wait on each other). SQLite: an
/// exclusive `flock` on `<database file>.lock`. Either is released when the holder exits,
/// however it exits, so a killed process never leaves the lock behind.
pub struct StartLock {
    held: Held,
}

enum Held {
    Postgres(Box<sea_orm::sqlx::pool::PoolConnection<sea_orm::sqlx::Postgres>>, DatabaseConnection),
    File(#[allow(dead_code)] std::fs::File),
    Nothing,
}

/// The advisory lock's key: per database (as advisory locks are) and per search path.
macro_rules! pg_start_lock {
    ($f:literal) => {
        concat!("SELECT ", $f, "(hashtextextended('kaas.start ' || current_setting('search_path'), 0))")
    };
}

fn lock_err(what: impl std::fmt::Display) -> DbErr {
    DbErr::Custom(format!("start-up lock: {what}"))
}

impl StartLock {
    pub async fn acquire(cfg: &DbConfig) -> Result<StartLock, DbErr> {
        let url = normalize_url(&cfg.url);
        if url.starts_with("postgres") {
            return Self::postgres(cfg).await;
        }
        let Some(path) = sqlite_file(&url) else {
            return Ok(StartLock { held: Held::Nothing });
        };
        let mut name = path.into_os_string();
        name.push(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&name)
            .map_err(|e| lock_err(format!("{}: {e}", std::path::Path::new(&name).display())))?;
        use rustix::fs::{FlockOperation, flock};
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            tracing::info!("another kaas process is migrating this database or importing its catalog; waiting for it");
            let file =
                tokio::task::spawn_blocking(move || flock(&file, FlockOperation::LockExclusive).map(|_| file)).await.map_err(lock_err)?.map_err(lock_err)?;
            return Ok(StartLock { held: Held::File(file) });
        }
        Ok(StartLock { held: Held::File(file) })
    }

    async fn postgres(cfg: &DbConfig) -> Result<StartLock, DbErr> {
        // A pool of its own: the lock lives as long as this one session, and the main pool
        // stays free for the migrations and the import (a pool of one would deadlock).
        let own = open(&DbConfig { max_connections: 1, ..cfg.clone() }).await?;
        let mut conn = own.get_postgres_connection_pool().acquire().await.map_err(lock_err)?;
        let got: bool = sea_orm::sqlx::query_scalar(pg_start_lock!("pg_try_advisory_lock")).fetch_one(&mut *conn).await.map_err(lock_err)?;
        if !got {
            tracing::info!("another kaas process is migrating this database or importing its catalog; waiting for it");
            sea_orm::sqlx::query(pg_start_lock!("pg_advisory_lock")).execute(&mut *conn).await.map_err(lock_err)?;
        }
        Ok(StartLock { held: Held::Postgres(Box::new(conn), own) })
    }

    /// Lets the next waiting process go on.
    pub async fn release(self) {
        match self.held {
            Held::Postgres(mut conn, own) => {
                let unlocked = sea_orm::sqlx::query(pg_start_lock!("pg_advisory_unlock")).execute(&mut **conn).await;
                if let Err(e) = unlocked {
                    // Closing the session below releases it all the same.
                    tracing::warn!(error = %e, "releasing the start-up lock");
                }
                drop(conn);
                own.close().await.ok();
            }
            Held::File(file) => drop(file),
            Held::Nothing => {}
        }
    }
}

/// The file of a SQLite URL; `None` for an in-memory database (one process only).
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path.contains(":memory:") || query.split('&').any(|kv| kv == "mode=memory") {
        return None;
    }
    Some(path.into())
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

/// Takes a lock named `key` until the transaction ends, so that transactions deciding
/// on the same thing (one submitter's quota, say) run one after the other. Postgres: a
/// transaction advisory lock. SQLite: nothing to do, a `begin_write` transaction already
/// holds the database's one write lock.
pub async fn lock_in_transaction(txn: &DatabaseTransaction, key: &str) -> Result<(), DbErr> {
    use sea_orm::ConnectionTrait;
    if txn.get_database_backend() == DbBackend::Postgres {
        txn.execute_raw(sea_orm::Statement::from_sql_and_values(DbBackend::Postgres, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [key.into()]))
            .await?;
    }
    Ok(())
}

/// A short name of the backend for health and metrics.
pub fn backend_name(db: &DatabaseConnection) -> &'static str {
    match db.get_database_backend() {
        DbBackend::Sqlite => "sqlite",
        DbBackend::Postgres => "postgres",
        _ => "other",
    }
}

/// Migrations this build expects that the database has not applied: all of them when it
/// has no schema at all (dropped, or never migrated).
pub async fn missing_migrations(db: &DatabaseConnection) -> Result<Vec<String>, DbErr> {
    use sea_orm::ConnectionTrait;
    let expected: Vec<String> = Migrator::migrations().iter().map(|m| m.name().to_string()).collect();
    let backend = db.get_database_backend();
    let exists_sql = match backend {
        DbBackend::Postgres => "SELECT COUNT(*) AS c FROM pg_catalog.pg_tables WHERE tablename = 'seaql_migrations' AND schemaname = current_schema()",
        _ => "SELECT COUNT(*) AS c FROM sqlite_master WHERE type = 'table' AND name = 'seaql_migrations'",
    };
    let exists = db.query_one_raw(sea_orm::Statement::from_string(backend, exists_sql)).await?;
    if exists.map(|r| r.try_get::<i64>("", "c")).transpose()?.unwrap_or(0) == 0 {
        return Ok(expected);
    }
    let applied: std::collections::BTreeSet<String> = db
        .query_all_raw(sea_orm::Statement::from_string(backend, "SELECT version FROM seaql_migrations"))
        .await?
        .iter()
        .map(|r| r.try_get::<String>("", "version"))
        .collect::<Result<_, _>>()?;
    Ok(expected.into_iter().filter(|m| !applied.contains(m)).collect())
}

/// Whether an error means the database cannot be used right now (refused or lost
/// connections, an exhausted pool, a schema that is not there), as opposed to a fault of
/// one statement. Such errors are worth retrying against the same or another replica.
/// Whether `e` says the database cannot be reached at all (refused, reset, timed out,
/// closed), as opposed to a database that answers without the kaas schema or refuses one
/// statement: what trips the API's breaker (`crate::api::breaker`).
pub fn is_unreachable(e: &DbErr) -> bool {
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        _ => {
            let text = e.to_string().to_ascii_lowercase();
            ["error communicating with database", "connection refused", "connection reset", "broken pipe", "pool timed out", "closed pool", "pool closed", "unable to open database"]
                .iter()
                .any(|s| text.contains(s))
        }
    }
}

pub fn is_outage(e: &DbErr) -> bool {
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        _ => {
            let text = e.to_string();
            ["no such table", "does not exist", "connection", "pool timed out", "closed", "unable to open database"].iter().any(|s| text.contains(s))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_start_up_lock_file_sits_beside_a_sqlite_file_and_nowhere_for_memory() {
        use super::sqlite_file;
        assert_eq!(sqlite_file("sqlite://kaas.db?mode=rwc"), Some("kaas.db".into()));
        assert_eq!(sqlite_file("sqlite:///var/lib/kaas/kaas.db"), Some("/var/lib/kaas/kaas.db".into()));
        assert_eq!(sqlite_file("sqlite:data.db"), Some("data.db".into()));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://x.db?mode=memory&cache=shared"), None);
        assert_eq!(sqlite_file("postgres://h/db"), None);
    }
}
