//! Who stored an artifact, for the per-submitter storage quota.
//!
//! - `artifacts.uploader_id`: the submitter whose upload or submission first stored the
//!   PTX (content-addressed: a second upload of the same bytes stores nothing and is not
//!   charged again). Null for artifacts from catalog bundles, the tuner and rows from
//!   before the column.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table("artifacts").add_column(integer_null("uploader_id")).to_owned()).await?;
        manager
            .create_index(Index::create().name("idx_artifacts_uploader").table("artifacts").col("uploader_id").to_owned())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_index(Index::drop().name("idx_artifacts_uploader").table("artifacts").to_owned()).await?;
        manager.alter_table(Table::alter().table("artifacts").drop_column("uploader_id").to_owned()).await
    }
}
