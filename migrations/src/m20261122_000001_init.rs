//! The first schema: catalog (artifacts, problems, manifests, runs, baselines, catalog
//! entries), people (submitters, API tokens), and work (submissions, jobs).
//!
//! The catalog is append-only: a new best run adds a `catalog_entries` row; the current
//! entry for a (device class, problem) is the one with the highest id.

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

fn created_at() -> ColumnDef {
    timestamp_with_time_zone("created_at")
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let tables = [
            Table::create()
                .table("artifacts")
                .col(string_len("sha256", 64).primary_key())
                .col(text("ptx"))
                .col(big_integer("size_bytes"))
                .col(string("ptx_version"))
                .col(string("target"))
                .col(created_at())
                .to_owned(),
            Table::create()
                .table("problems")
                .col(pk_auto("id"))
                .col(string("arch"))
                .col(string("acc"))
                .col(string("layout"))
                .col(integer("m"))
                .col(integer("n"))
                .col(integer("k"))
                .to_owned(),
            Table::create()
                .table("device_classes")
                .col(string("name").primary_key())
                .col(string("model"))
                .col(string("compute_capability"))
                .col(integer_null("sm_count"))
                .to_owned(),
            Table::create()
                .table("submitters")
                .col(pk_auto("id"))
                .col(string_uniq("name"))
                .col(created_at())
                .to_owned(),
            Table::create()
                .table("api_tokens")
                .col(pk_auto("id"))
                .col(integer("submitter_id"))
                .col(string("role"))
                .col(string_len_uniq("token_hash", 64))
                .col(string_len("prefix", 16))
                .col(created_at())
                .col(timestamp_with_time_zone_null("revoked_at"))
                .foreign_key(&mut fk("api_tokens", "submitter_id", "submitters", "id"))
                .to_owned(),
            Table::create()
                .table("submissions")
                .col(pk_auto("id"))
                .col(integer("submitter_id"))
                .col(string_len("artifact_sha256", 64))
                .col(string("name"))
                .col(text("description"))
                .col(text_null("source"))
                .col(string("status"))
                .col(created_at())
                .foreign_key(&mut fk("submissions", "submitter_id", "submitters", "id"))
                .foreign_key(&mut fk("submissions", "artifact_sha256", "artifacts", "sha256"))
                .to_owned(),
            Table::create()
                .table("manifests")
                .col(pk_auto("id"))
                .col(string_len("artifact_sha256", 64))
                .col(integer("problem_id"))
                .col(string_len("body_sha256", 64))
                .col(text("body"))
                .col(created_at())
                .foreign_key(&mut fk("manifests", "artifact_sha256", "artifacts", "sha256"))
                .foreign_key(&mut fk("manifests", "problem_id", "problems", "id"))
                .to_owned(),
            Table::create()
                .table("runs")
                .col(pk_auto("id"))
                .col(integer_null("submission_id"))
                .col(integer("manifest_id"))
                .col(integer("problem_id"))
                .col(string("device_class"))
                .col(string("verdict"))
                .col(text("message"))
                .col(text_null("timings"))
                .col(text_null("speedups"))
                .col(text_null("device"))
                .col(created_at())
                .foreign_key(&mut fk("runs", "submission_id", "submissions", "id"))
                .foreign_key(&mut fk("runs", "manifest_id", "manifests", "id"))
                .foreign_key(&mut fk("runs", "problem_id", "problems", "id"))
                .foreign_key(&mut fk("runs", "device_class", "device_classes", "name"))
                .to_owned(),
            Table::create()
                .table("baselines")
                .col(pk_auto("id"))
                .col(integer("problem_id"))
                .col(string("device_class"))
                .col(string("library"))
                .col(string("layout"))
                .col(string("mode"))
                .col(double("median_us"))
                .col(text("timing"))
                .col(text("config"))
                .col(created_at())
                .foreign_key(&mut fk("baselines", "problem_id", "problems", "id"))
                .foreign_key(&mut fk("baselines", "device_class", "device_classes", "name"))
                .to_owned(),
            Table::create()
                .table("catalog_entries")
                .col(pk_auto("id"))
                .col(string("device_class"))
                .col(integer("problem_id"))
                .col(integer("run_id"))
                .col(created_at())
                .foreign_key(&mut fk("catalog_entries", "device_class", "device_classes", "name"))
                .foreign_key(&mut fk("catalog_entries", "problem_id", "problems", "id"))
                .foreign_key(&mut fk("catalog_entries", "run_id", "runs", "id"))
                .to_owned(),
            Table::create()
                .table("jobs")
                .col(pk_auto("id"))
                .col(integer("submission_id"))
                .col(integer("manifest_id"))
                .col(integer("problem_id"))
                .col(string_null("device_class"))
                .col(string("state"))
                .col(integer("priority"))
                .col(integer("attempts"))
                .col(string_null("lease_owner"))
                .col(timestamp_with_time_zone_null("lease_expires_at"))
                .col(integer_null("run_id"))
                .col(created_at())
                .col(timestamp_with_time_zone("updated_at"))
                .foreign_key(&mut fk("jobs", "submission_id", "submissions", "id"))
                .foreign_key(&mut fk("jobs", "manifest_id", "manifests", "id"))
                .foreign_key(&mut fk("jobs", "problem_id", "problems", "id"))
                .to_owned(),
        ];
        for table in tables {
            manager.create_table(table).await?;
        }
        let indexes = [
            Index::create().name("ux_problems_key").table("problems").col("arch").col("acc").col("layout").col("m").col("n").col("k").unique().to_owned(),
            Index::create().name("ux_manifests_key").table("manifests").col("artifact_sha256").col("problem_id").col("body_sha256").unique().to_owned(),
            Index::create().name("ix_runs_problem").table("runs").col("problem_id").col("device_class").to_owned(),
            Index::create().name("ix_baselines_problem").table("baselines").col("problem_id").col("device_class").to_owned(),
            Index::create().name("ix_catalog_key").table("catalog_entries").col("device_class").col("problem_id").col("id").to_owned(),
            Index::create().name("ix_jobs_claim").table("jobs").col("state").col("priority").col("id").to_owned(),
            Index::create().name("ix_submissions_submitter").table("submissions").col("submitter_id").to_owned(),
        ];
        for index in indexes {
            manager.create_index(index).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["jobs", "catalog_entries", "baselines", "runs", "manifests", "submissions", "api_tokens", "submitters", "device_classes", "problems", "artifacts"] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
