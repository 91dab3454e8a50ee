//! The fleet-wide rate limit (issue 52): one row per token that has made an authenticated
//! request, holding its GCRA "theoretical arrival time" in microseconds since the Unix
//! epoch. Every replica updates the same row, so N replicas allow what one allows.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("rate_limits")
                    .if_not_exists()
                    .col(integer("token_id").primary_key())
                    .col(big_integer("tat_us"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table("rate_limits").to_owned()).await
    }
}
