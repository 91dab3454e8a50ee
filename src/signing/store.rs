//! Which key the service signs with, and the public keys it publishes.
//!
//! With a key file (`--signing-key-file`), that key signs; every replica given the same
//! file signs alike. Without one, the key is kept in the database (row `generated` of
//! `signing_keys`), created by the first process that needs it: replicas sharing a
//! database then agree without configuration, and the README's one-command start needs
//! none. Anyone who can read the database can sign with that key, so a fleet should
//! configure a key file (docs/signing.md).

use chrono::Utc;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, QueryOrder, Set};

use super::{KeyPair, PublicKey, RecordSignature, SigningKeysView};
use crate::db::entities::signing_key;

/// Row name of the database-kept key.
const GENERATED: &str = "generated";

/// The key this process signs with, and the published key list.
#[derive(Debug)]
pub struct Signer {
    key: KeyPair,
    keys: SigningKeysView,
    /// True when the key came from the database rather than a key file.
    pub from_database: bool,
}

impl Signer {
    /// A signer that touches no database (tests, tools).
    pub fn new(key: KeyPair) -> Signer {
        let keys = SigningKeysView { keys: vec![key.public().view(true)] };
        Signer { key, keys, from_database: false }
    }

    /// The configured key, or the database-kept one (created when missing). Records the
    /// configured key's public half so that the key list keeps it after a rotation.
    pub async fn load<C: ConnectionTrait>(db: &C, configured: Option<KeyPair>) -> Result<Signer, DbErr> {
        let now = Utc::now();
        let (key, from_database) = match configured {
            Some(k) => {
                insert_if_absent(db, &format!("key:{}", k.key_id()), &k, None, now).await?;
                (k, false)
            }
            None => {
                let candidate = KeyPair::generate();
                insert_if_absent(db, GENERATED, &candidate, Some(candidate.seed_hex()), now).await?;
                // Whoever inserted first won; everyone uses that row.
                let row = signing_key::Entity::find_by_id(GENERATED.to_string())
                    .one(db)
                    .await?
                    .ok_or_else(|| DbErr::RecordNotFound("signing_keys: the generated key vanished".into()))?;
                let seed = row.seed.as_deref().ok_or_else(|| DbErr::Custom("signing_keys: the generated key has no seed".into()))?;
                let key = KeyPair::from_text(seed).map_err(|e| DbErr::Custom(format!("signing_keys: the generated key is unreadable: {e}")))?;
                (key, true)
            }
        };
        let current = key.key_id();
        let mut keys = vec![key.public().view(true)];
        for row in signing_key::Entity::find().order_by_asc(signing_key::Column::CreatedAt).all(db).await? {
            if row.key_id == current || keys.iter().any(|k| k.key_id == row.key_id) {
                continue;
            }
            // A row whose public key does not parse is left out rather than published.
            if let Ok(p) = PublicKey::from_text(&row.public_key)
                && p.key_id() == row.key_id
            {
                keys.push(p.view(false));
            }
        }
        Ok(Signer { key, keys: SigningKeysView { keys }, from_database })
    }

    pub fn key_id(&self) -> String {
        self.key.key_id()
    }

    pub fn sign(&self, record: &serde_json::Value) -> RecordSignature {
        self.key.sign(record)
    }

    /// What `GET /.well-known/kaas-signing-keys` answers.
    pub fn keys(&self) -> &SigningKeysView {
        &self.keys
    }
}

async fn insert_if_absent<C: ConnectionTrait>(db: &C, name: &str, key: &KeyPair, seed: Option<String>, now: chrono::DateTime<Utc>) -> Result<(), DbErr> {
    let p = key.public();
    let row = signing_key::ActiveModel {
        name: Set(name.to_string()),
        key_id: Set(p.key_id()),
        alg: Set(super::ALG.into()),
        public_key: Set(p.to_base64()),
        seed: Set(seed),
        created_at: Set(now),
    };
    signing_key::Entity::insert(row).on_conflict(OnConflict::column(signing_key::Column::Name).do_nothing().to_owned()).exec_without_returning(db).await?;
    Ok(())
}
