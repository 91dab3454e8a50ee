//! The kaas schema as sea-orm migrations, run at start-up by `kaas serve`, `kaas import`
//! and the tests (which run these, never a schema built from the entities).

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_init;
mod m20261122_000002_autotune;
mod m20261122_000003_queue;
mod m20261127_000004_service_state;
mod m20261127_000005_signing_keys;
mod m20261127_000006_source_builds;
mod m20261201_000007_tuning;
mod m20261202_000008_regimes;
mod m20261202_000009_artifact_uploader;
mod m20261203_000010_rate_limits;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_init::Migration), Box::new(m20261122_000002_autotune::Migration), Box::new(m20261122_000003_queue::Migration),
            Box::new(m20261127_000004_service_state::Migration),
            Box::new(m20261127_000005_signing_keys::Migration),
            Box::new(m20261127_000006_source_builds::Migration),
            Box::new(m20261201_000007_tuning::Migration),
            Box::new(m20261202_000008_regimes::Migration),
            Box::new(m20261202_000009_artifact_uploader::Migration),
            Box::new(m20261203_000010_rate_limits::Migration),
        ]
    }
}
