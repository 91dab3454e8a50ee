//! The public keys run records are signed with, at a well-known URL.

use actix_web::http::header;
use actix_web::{HttpResponse, get};

use crate::api::{ApiError, State};
use crate::signing::SigningKeysView;

#[utoipa::path(
    get, path = "/.well-known/kaas-signing-keys", tag = "system",
    responses(
        (status = 200, description = "The Ed25519 public keys run records are signed with: the current key first, then keys that signed records before (docs/signing.md)", body = SigningKeysView),
        (status = 503, description = "The database did not answer (the key may live there)", body = crate::api::error::ProblemDetails, content_type = "application/problem+json"),
    )
)]
#[get("/.well-known/kaas-signing-keys")]
pub async fn signing_keys(state: State) -> Result<HttpResponse, ApiError> {
    let signer = state.signer().await?;
    Ok(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "public, max-age=300")).json(signer.keys()))
}
