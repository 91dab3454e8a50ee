//! The autotune cache: the cuBLASLt algorithm chosen for a problem on a device class,
//! valid for one driver and one cuBLAS version. One row per key (a unique index); a new
//! choice replaces the old.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

const KEY: [&str; 9] = ["device_class", "driver_version", "cublas_version", "arch", "acc", "layout", "m", "n", "k"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("autotune_choices")
                    .col(pk_auto("id"))
                    .col(string("device_class"))
                    .col(string("driver_version"))
                    .col(string("cublas_version"))
                    .col(string("arch"))
                    .col(string("acc"))
                    .col(string("layout"))
                    .col(integer("m"))
                    .col(integer("n"))
                    .col(integer("k"))
                    // The algorithm's configuration attributes (JSON): they re-create it.
                    .col(text("config"))
                    .col(double("median_us"))
                    .col(double_null("heuristic_top1_median_us"))
                    .col(integer("candidates_offered"))
                    .col(integer("candidates_timed"))
                    .col(timestamp_with_time_zone("tuned_at"))
                    .to_owned(),
            )
            .await?;
        let mut index = Index::create();
        index.name("ux_autotune_choices_key").table("autotune_choices").unique();
        for col in KEY {
            index.col(col);
        }
        manager.create_index(index.to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table("autotune_choices").to_owned()).await
    }
}
