//! Signed results: the keys the service signs run records with.
//!
//! - `signing_keys`: one row per public key the service has signed with (so the
//!   well-known key list keeps older keys after a rotation), and the row `generated`
//!   that holds the seed of the key used when no key file is configured. The name is the
//!   primary key so that replicas starting together agree on one generated key: each
//!   inserts its own candidate with ON CONFLICT DO NOTHING and then reads the row back.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("signing_keys")
                    .col(string("name").primary_key())
                    .col(string("key_id"))
                    .col(string("alg"))
                    .col(string("public_key"))
                    .col(text_null("seed"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table("signing_keys").to_owned()).await
    }
}
