//! Tuning on demand (issue 36): problems people ask for are tuned by the service.
//!
//! - `tunes`: one row per (problem, device class) ever asked for. The unique index
//!   `ux_tunes_key` is what makes "the same problem asked twice, by anyone, is one job"
//!   hold across API replicas: requests insert with `ON CONFLICT DO NOTHING` and read
//!   the row back. Its `state` is `queued`, `tuning`, `verifying`, `served`,
//!   `baseline_faster` or `failed`; `trace` is the search's trace (JSON), `result` the
//!   winner and the measured baseline configuration (JSON).
//! - `tuning_requests` and `tuning_request_items`: who asked for what, and what each item
//!   became (a tune, or a refusal with its reason).
//! - `jobs`: a `kind` (`verify`, the submissions' jobs, or `tune`) and the `tune_id` of a
//!   tune job; a tune job has no submission or manifest (its kernel does not exist yet),
//!   so those two columns become nullable. `ux_jobs_open_tune` allows one queued or
//!   running job per tune. SQLite cannot drop NOT NULL in place: its `jobs` table is
//!   rebuilt (nothing references `jobs` by foreign key).

use sea_orm_migration::sea_orm::{self, ConnectionTrait};
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

fn fk(from_table: &'static str, from_col: &'static str, to_table: &'static str, to_col: &'static str) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(format!("fk_{from_table}_{from_col}"))
        .from(from_table, from_col)
        .to(to_table, to_col)
        .on_delete(ForeignKeyAction::Restrict)
        .to_owned()
}

/// The columns `jobs` had before, in order (those copied when SQLite rebuilds it).
const JOB_COLUMNS: &str =
    "id, submission_id, manifest_id, problem_id, device_class, state, priority, attempts, lease_owner, lease_expires_at, run_id, created_at, updated_at, stage, error, finished_at";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("tunes")
                    .col(pk_auto("id"))
                    .col(integer("problem_id"))
                    .col(string("device_class"))
                    .col(string("state"))
                    .col(integer("priority"))
                    .col(big_integer("budget_ms"))
                    .col(integer_null("job_id"))
                    .col(integer_null("run_id"))
                    .col(integer_null("requested_by"))
                    .col(text_null("stage"))
                    .col(text_null("message"))
                    .col(text_null("trace"))
                    .col(text_null("result"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .col(timestamp_with_time_zone_null("finished_at"))
                    .foreign_key(&mut fk("tunes", "problem_id", "problems", "id"))
                    .foreign_key(&mut fk("tunes", "requested_by", "submitters", "id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(Index::create().name("ux_tunes_key").table("tunes").col("problem_id").col("device_class").unique().to_owned())
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("tuning_requests")
                    .col(pk_auto("id"))
                    .col(integer_null("submitter_id"))
                    .col(string_null("workload"))
                    .col(string("device_class"))
                    .col(timestamp_with_time_zone("created_at"))
                    .foreign_key(&mut fk("tuning_requests", "submitter_id", "submitters", "id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("tuning_request_items")
                    .col(pk_auto("id"))
                    .col(integer("request_id"))
                    .col(integer("position"))
                    .col(string("problem"))
                    .col(string_null("label"))
                    .col(integer_null("tune_id"))
                    .col(text_null("refusal"))
                    .foreign_key(&mut fk("tuning_request_items", "request_id", "tuning_requests", "id"))
                    .foreign_key(&mut fk("tuning_request_items", "tune_id", "tunes", "id"))
                    .to_owned(),
            )
            .await?;
        for index in [
            Index::create().name("ix_tuning_items_request").table("tuning_request_items").col("request_id").to_owned(),
            Index::create().name("ix_tuning_requests_submitter").table("tuning_requests").col("submitter_id").to_owned(),
            Index::create().name("ix_tunes_requested_by").table("tunes").col("requested_by").col("state").to_owned(),
        ] {
            manager.create_index(index).await?;
        }
        let db = manager.get_connection();
        match manager.get_database_backend() {
            sea_orm::DatabaseBackend::Sqlite => {
                // Copied aside, recreated with the new columns, copied back (no RENAME:
                // SQLite refuses renaming onto the name of a table dropped in the same run).
                db.execute_unprepared(&format!("CREATE TABLE jobs_old AS SELECT {JOB_COLUMNS} FROM jobs")).await?;
                db.execute_unprepared("DROP TABLE jobs").await?;
                manager
                    .create_table(
                        Table::create()
                            .table("jobs")
                            .col(pk_auto("id"))
                            .col(integer_null("submission_id"))
                            .col(integer_null("manifest_id"))
                            .col(integer("problem_id"))
                            .col(string_null("device_class"))
                            .col(string("state"))
                            .col(integer("priority"))
                            .col(integer("attempts"))
                            .col(string_null("lease_owner"))
                            .col(timestamp_with_time_zone_null("lease_expires_at"))
                            .col(integer_null("run_id"))
                            .col(timestamp_with_time_zone("created_at"))
                            .col(timestamp_with_time_zone("updated_at"))
                            .col(text_null("stage"))
                            .col(text_null("error"))
                            .col(timestamp_with_time_zone_null("finished_at"))
                            .col(string("kind").default("verify"))
                            .col(integer_null("tune_id"))
                            .foreign_key(&mut fk("jobs", "submission_id", "submissions", "id"))
                            .foreign_key(&mut fk("jobs", "manifest_id", "manifests", "id"))
                            .foreign_key(&mut fk("jobs", "problem_id", "problems", "id"))
                            .foreign_key(&mut fk("jobs", "tune_id", "tunes", "id"))
                            .to_owned(),
                    )
                    .await?;
                db.execute_unprepared(&format!("INSERT INTO jobs ({JOB_COLUMNS}, kind) SELECT {JOB_COLUMNS}, 'verify' FROM jobs_old")).await?;
                db.execute_unprepared("DROP TABLE jobs_old").await?;
                for index in [
                    Index::create().name("ix_jobs_claim").table("jobs").col("state").col("priority").col("id").to_owned(),
                    Index::create().name("ix_jobs_submission").table("jobs").col("submission_id").to_owned(),
                ] {
                    manager.create_index(index).await?;
                }
            }
            _ => {
                db.execute_unprepared("ALTER TABLE jobs ALTER COLUMN submission_id DROP NOT NULL, ALTER COLUMN manifest_id DROP NOT NULL").await?;
                manager
                    .alter_table(Table::alter().table("jobs").add_column(string("kind").default("verify")).add_column(integer_null("tune_id")).to_owned())
                    .await?;
                manager.create_foreign_key(fk("jobs", "tune_id", "tunes", "id")).await?;
            }
        }
        // At most one open job per tune, whatever the API replicas do.
        db.execute_unprepared("CREATE UNIQUE INDEX ux_jobs_open_tune ON jobs (tune_id) WHERE state IN ('queued', 'running')").await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX ux_jobs_open_tune").await?;
        db.execute_unprepared("DELETE FROM jobs WHERE kind = 'tune'").await?;
        if manager.get_database_backend() != sea_orm::DatabaseBackend::Sqlite {
            db.execute_unprepared("ALTER TABLE jobs DROP CONSTRAINT fk_jobs_tune_id").await?;
            manager.alter_table(Table::alter().table("jobs").drop_column("kind").drop_column("tune_id").to_owned()).await?;
        }
        for table in ["tuning_request_items", "tuning_requests", "tunes"] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
