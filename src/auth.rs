//! API tokens: random secrets shown once, stored only as sha256 hashes, each tied to a
//! submitter and a role. Used by `kaas token` and by the API's `Caller` extractor.

use chrono::Utc;
use rand::RngCore;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::catalog::bundle::ensure_submitter;
use crate::signing::sha256_hex;
use crate::db::entities::{api_token, submitter};

/// Tokens start with this, so secret scanners and people can tell what they are.
pub const TOKEN_PREFIX: &str = "kaas_";
/// Characters of a token kept in clear to name it (`kaas_` + 8 hex digits).
const SHOWN_PREFIX_LEN: usize = 13;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// May upload artifacts and submit kernels.
    Submitter,
    /// May also administer the catalog and other people's submissions.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Submitter => "submitter",
            Role::Admin => "admin",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "submitter" => Some(Role::Submitter),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// A freshly created token: the only time its secret exists outside the caller's hands.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub secret: String,
    pub prefix: String,
    pub submitter: String,
    pub role: Role,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("submitter name must be 1 to 64 characters of letters, digits, `-`, `_` or `.`; got `{0}`")]
    BadName(String),
    #[error("no token starts with `{0}`")]
    NoSuchToken(String),
    #[error("`{0}` names more than one token: give more characters")]
    Ambiguous(String),
    #[error(transparent)]
    Db(#[from] DbErr),
}

pub fn valid_submitter_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

pub fn hash_secret(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

pub async fn create_token(db: &DatabaseConnection, name: &str, role: Role) -> Result<NewToken, TokenError> {
    if !valid_submitter_name(name) {
        return Err(TokenError::BadName(name.to_string()));
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{TOKEN_PREFIX}{}", hex::encode(bytes));
    let prefix = secret[..SHOWN_PREFIX_LEN].to_string();
    let txn = crate::db::begin_write(db).await?;
    let now = Utc::now();
    let submitter_id = ensure_submitter(&txn, name, now).await?;
    api_token::ActiveModel {
        submitter_id: Set(submitter_id),
        role: Set(role.as_str().to_string()),
        token_hash: Set(hash_secret(&secret)),
        prefix: Set(prefix.clone()),
        created_at: Set(now),
        revoked_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    txn.commit().await?;
    Ok(NewToken { secret, prefix, submitter: name.to_string(), role })
}

/// Revokes the one token whose shown prefix starts with `prefix`.
pub async fn revoke_token(db: &DatabaseConnection, prefix: &str) -> Result<api_token::Model, TokenError> {
    let txn = crate::db::begin_write(db).await?;
    let matches = api_token::Entity::find().filter(api_token::Column::Prefix.starts_with(prefix)).all(&txn).await?;
    let token = match matches.as_slice() {
        [] => return Err(TokenError::NoSuchToken(prefix.to_string())),
        [one] => one.clone(),
        _ => return Err(TokenError::Ambiguous(prefix.to_string())),
    };
    let mut active: api_token::ActiveModel = token.into();
    active.revoked_at = Set(Some(Utc::now()));
    let updated = active.update(&txn).await?;
    txn.commit().await?;
    Ok(updated)
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenListing {
    pub prefix: String,
    pub submitter: String,
    pub role: String,
    pub created_at: chrono::DateTime<Utc>,
    pub revoked: bool,
}

pub async fn list_tokens(db: &DatabaseConnection) -> Result<Vec<TokenListing>, DbErr> {
    let tokens = api_token::Entity::find().order_by_asc(api_token::Column::Id).all(db).await?;
    let people = submitter::Entity::find().all(db).await?;
    Ok(tokens
        .into_iter()
        .map(|t| TokenListing {
            submitter: people.iter().find(|p| p.id == t.submitter_id).map(|p| p.name.clone()).unwrap_or_default(),
            prefix: t.prefix,
            role: t.role,
            created_at: t.created_at,
            revoked: t.revoked_at.is_some(),
        })
        .collect())
}

/// Who presented a token, as the API sees them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Caller {
    pub token_id: i32,
    pub token_prefix: String,
    pub submitter_id: i32,
    pub submitter: String,
    pub role: Role,
}

pub enum Lookup {
    Found(Caller),
    Unknown,
    Revoked,
}

pub async fn lookup<C: ConnectionTrait>(db: &C, secret: &str) -> Result<Lookup, DbErr> {
    let Some(t) = api_token::Entity::find().filter(api_token::Column::TokenHash.eq(hash_secret(secret))).one(db).await? else {
        return Ok(Lookup::Unknown);
    };
    if t.revoked_at.is_some() {
        return Ok(Lookup::Revoked);
    }
    let Some(role) = Role::parse(&t.role) else { return Ok(Lookup::Unknown) };
    let name = submitter::Entity::find_by_id(t.submitter_id).one(db).await?.map(|s| s.name).unwrap_or_default();
    Ok(Lookup::Found(Caller { token_id: t.id, token_prefix: t.prefix, submitter_id: t.submitter_id, submitter: name, role }))
}
