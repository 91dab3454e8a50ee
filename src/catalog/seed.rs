//! The start-up import of the shipped catalog (`kaas serve --catalog`), once per database.
//!
//! Invariants:
//! - The import is one transaction, and the `catalog_seed` row of `service_state` is
//!   written in that same transaction: the row exists exactly when the shipped catalog is
//!   complete, and no reader ever sees part of it. A process killed mid-import leaves
//!   nothing behind; the next start imports it again.
//! - The caller holds the start-up lock (`crate::db::StartLock`), so replicas started
//!   together import once; the others find the row and go on.
//! - Entries already current in the database (from `kaas import`, or from a start before
//!   the row existed) are kept: the seed adds what is missing and never replaces a kernel.
//! - A bundle directory the row does not list (shipped after the first start, e.g. a
//!   tuned workload bundle) is imported at the next start, all or nothing, and added to
//!   the row; bundles listed are never read again.

use std::collections::BTreeSet;
use std::path::Path;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, Set};
use serde::{Deserialize, Serialize};

use super::bundle::{self, BundleError, ImportReport};
use crate::db::entities::service_state;

/// The `service_state` key of the completion row.
pub const SEED_KEY: &str = "catalog_seed";

/// What the completion row says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRecord {
    /// The catalog directory as the importing process was given it.
    pub source: String,
    /// The bundles imported, relative to `source` (`.` for the top one).
    pub bundles: Vec<String>,
    /// Rows added by the import (less than the bundles hold where the database had them).
    pub added: ImportReport,
    pub completed_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub enum Seeded {
    /// An earlier start (this process's or another replica's) completed it.
    Already(SeedRecord),
    /// This call imported it.
    Imported(SeedRecord),
}

/// The completion row, if the shipped catalog was imported.
pub async fn marker<C: ConnectionTrait>(db: &C) -> Result<Option<SeedRecord>, DbErr> {
    let Some(row) = service_state::Entity::find_by_id(SEED_KEY.to_string()).one(db).await? else {
        return Ok(None);
    };
    serde_json::from_str(&row.value).map(Some).map_err(|e| DbErr::Custom(format!("service_state {SEED_KEY}: {e}")))
}

/// Imports the catalog tree at `dir` unless a completed import is recorded; call it under
/// the start-up lock. A missing `dir` is recorded as an import of no bundle, so readiness
/// does not wait for a catalog that will never come; a later start that has one imports it
/// while the database holds no catalog.
pub async fn seed(db: &DatabaseConnection, dir: &Path) -> Result<Seeded, BundleError> {
    let present = dir.is_dir();
    let name_of = |d: &Path| d.strip_prefix(dir).ok().map(|p| p.display().to_string()).filter(|p| !p.is_empty()).unwrap_or_else(|| ".".into());
    // Bundles recorded as imported already; a later release may ship more (a tuned
    // workload bundle beside the grid), which are imported once, the same way.
    let mut before: Vec<String> = vec![];
    if let Some(done) = marker(db).await? {
        let nothing_yet = done.bundles.is_empty() && present && super::is_empty(db).await?;
        if !nothing_yet {
            let shipped_since = if present { bundle::tree_dirs(dir)?.into_iter().filter(|d| !done.bundles.contains(&name_of(d))).collect() } else { vec![] };
            if shipped_since.is_empty() {
                return Ok(Seeded::Already(done));
            }
            before = done.bundles.clone();
        }
    }
    // Everything is read and checked before the transaction starts.
    let bundles: Vec<_> = if present { bundle::read_tree(dir)?.into_iter().filter(|b| !before.contains(&name_of(&b.dir))).collect() } else { vec![] };
    let mut names = before;
    names.extend(bundles.iter().map(|b| name_of(&b.dir)));
    tracing::info!(catalog = %dir.display(), bundles = bundles.len(), "importing the shipped catalog in one transaction");
    let txn = crate::db::begin_write(db).await?;
    let keep: BTreeSet<(i32, crate::problem::DeviceClass)> = super::current_entries(&txn).await?.into_iter().map(|e| (e.problem_id, e.device_class)).collect();
    let added = bundle::write_tree(&txn, &bundles, &keep).await?;
    let record = SeedRecord { source: dir.display().to_string(), bundles: names, added, completed_at: Utc::now() };
    let value = serde_json::to_string(&record).map_err(|e| DbErr::Custom(e.to_string()))?;
    service_state::Entity::insert(service_state::ActiveModel { key: Set(SEED_KEY.into()), value: Set(value), updated_at: Set(record.completed_at) })
        .on_conflict(OnConflict::column(service_state::Column::Key).update_columns([service_state::Column::Value, service_state::Column::UpdatedAt]).to_owned())
        .exec_without_returning(&txn)
        .await?;
    txn.commit().await?;
    Ok(Seeded::Imported(record))
}
