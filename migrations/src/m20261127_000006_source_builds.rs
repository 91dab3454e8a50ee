//! CUDA C++ source submissions: how the service built a submission's PTX.
//!
//! - `submissions.build`: JSON (`kaas::compile::BuildInfo`: virtual arch, the author's
//!   options, the exact NVRTC options, NVRTC's version, the header set, and the lowered
//!   name of each name expression), set only when the service compiled the submission's
//!   `source`. Together with `source` it is what rebuilds the same PTX. Null for PTX
//!   submissions, whose `source` (if any) is only shown.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table("submissions").add_column(text_null("build")).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table("submissions").drop_column("build").to_owned()).await
    }
}
