//! `service_state`: facts about the database as a whole, one row per key. The row
//! `catalog_seed` marks that start-up's import of the shipped catalog committed (it is
//! written in the import's own transaction, so it exists exactly when the import is
//! complete); readiness reports it.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("service_state")
                    .col(string("key").primary_key())
                    // JSON: what was done, e.g. the bundles imported and their counts.
                    .col(text("value"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table("service_state").to_owned()).await
    }
}
