//! The work layer's errors: what a submission, a tuning request or a queue read refused,
//! and why, in the work layer's own words. The HTTP API maps each to its problem+json
//! code (`From<WorkError> for crate::api::ApiError`); nothing here knows of HTTP.

use sea_orm::DbErr;

use crate::catalog::CatalogError;
use crate::catalog::bundle::BundleError;
use crate::compile::CompileError;

#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The request itself is malformed or contradicts itself (a field, a combination).
    #[error("{0}")]
    InvalidRequest(String),
    /// The PTX is not PTX the service can store.
    #[error("{0}")]
    InvalidArtifact(String),
    #[error("{0}")]
    InvalidManifest(String),
    /// The PTX does not match its manifests (entries, parameters, ptxas).
    #[error("{0}")]
    StaticInvalid(String),
    #[error("{0}")]
    ArtifactTooLarge(String),
    /// A per-submitter limit: queued jobs, open tunes, stored bytes.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A problem outside the service's limits, or a list it cannot take.
    #[error("{0}")]
    InvalidProblem(String),
    #[error("{0}")]
    UnknownWorkload(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this (not the owner, not an admin).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Db(#[from] DbErr),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
}
