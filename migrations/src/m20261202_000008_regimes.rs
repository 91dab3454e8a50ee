//! Timing regimes: a run's figures in both cache regimes.
//!
//! - `runs.regimes`: JSON `{"l2_cold": {…}, "l2_warm": {…}}`, each with the candidate's
//!   timings and speedups and the baselines timed beside it in that regime, and its
//!   rotation (buffer sets, footprint against the L2). `runs.regime` names the regime of
//!   the run's own `timings` and `speedups` (the one the catalog ranks by). Both null for
//!   runs measured before regimes were named (a rotation over three buffer sets, neither
//!   regime).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table("runs").add_column(string_null("regime")).to_owned()).await?;
        manager.alter_table(Table::alter().table("runs").add_column(text_null("regimes")).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table("runs").drop_column("regimes").to_owned()).await?;
        manager.alter_table(Table::alter().table("runs").drop_column("regime").to_owned()).await
    }
}
