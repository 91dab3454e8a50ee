//! The work side: what the submissions and job-queue issue needs on top of the first
//! schema.
//!
//! - `workers`: one row per `kaas worker` (one GPU each), refreshed by its heartbeat, so
//!   `/v1/health` can say which device classes are served and new submissions know which
//!   device classes to queue jobs for.
//! - `jobs`: the stage a running job reached (for the live stream), the last error, and
//!   when it finished.
//! - `runs`: the verification details (checks, ptxas, JIT log, benchmark meta) as JSON.
//! - `submissions`: a fingerprint for de-duplication and a soft delete (history is kept).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("workers")
                    .col(string("id").primary_key())
                    .col(string_null("device_class"))
                    .col(string_null("gpu_name"))
                    .col(string_null("compute_capability"))
                    .col(string("state"))
                    .col(integer_null("job_id"))
                    .col(text_null("message"))
                    .col(timestamp_with_time_zone("started_at"))
                    .col(timestamp_with_time_zone("last_seen_at"))
                    .to_owned(),
            )
            .await?;
        // SQLite adds one column per ALTER TABLE.
        let columns: [(&str, ColumnDef); 6] = [
            ("jobs", text_null("stage")),
            ("jobs", text_null("error")),
            ("jobs", timestamp_with_time_zone_null("finished_at")),
            ("runs", text_null("details")),
            ("submissions", string_len_null("fingerprint", 64)),
            ("submissions", timestamp_with_time_zone_null("deleted_at")),
        ];
        for (table, mut col) in columns {
            manager.alter_table(Table::alter().table(table).add_column(&mut col).to_owned()).await?;
        }
        let indexes = [
            Index::create().name("ix_submissions_fingerprint").table("submissions").col("submitter_id").col("fingerprint").to_owned(),
            Index::create().name("ix_jobs_submission").table("jobs").col("submission_id").to_owned(),
            Index::create().name("ix_runs_submission").table("runs").col("submission_id").to_owned(),
        ];
        for index in indexes {
            manager.create_index(index).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for index in ["ix_runs_submission", "ix_jobs_submission", "ix_submissions_fingerprint"] {
            manager.drop_index(Index::drop().name(index).to_owned()).await?;
        }
        for (table, col) in [
            ("submissions", "deleted_at"),
            ("submissions", "fingerprint"),
            ("runs", "details"),
            ("jobs", "finished_at"),
            ("jobs", "error"),
            ("jobs", "stage"),
        ] {
            manager.alter_table(Table::alter().table(table).drop_column(col).to_owned()).await?;
        }
        manager.drop_table(Table::drop().table("workers").to_owned()).await
    }
}
