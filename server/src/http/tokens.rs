//! API tokens for scripts and the CLI: `GET|POST /api/v1/tokens`, `DELETE /api/v1/tokens/{id}`.
//! A token acts with its owner's rights; it is shown once, when created.

use super::auth::CurrentUser;
use super::{ApiError, ApiJson, ApiPath, AppState, Routes};
use crate::accounts::{session, MAX_TEXT};
use crate::audit::AuditAction;
use crate::store::AuditEntry;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::Json;
use lanes_types::account::{ApiToken, CreatedToken, NewToken};

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/tokens", get(list).post(create))
        .route("/api/v1/tokens/{id}", delete(revoke))
}

/// Prefix of every token, so that secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "lanes_";

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<Vec<ApiToken>>, ApiError> {
    Ok(Json(state.store.tokens_of(user.id).await?))
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<NewToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > MAX_TEXT {
        return Err(ApiError::BadRequest(format!(
            "token name must be 1 to {MAX_TEXT} characters"
        )));
    }
    let (random, _) = session::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let secret = format!("{TOKEN_PREFIX}{random}");
    let entry = AuditEntry::new(Some(user.id), AuditAction::TokenCreate, name);
    let token = state
        .store
        .create_token(
            user.id,
            name,
            &session::hash_secret(&secret),
            &entry,
            chrono::Utc::now(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(CreatedToken { token, secret })))
}

async fn revoke(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    let entry = AuditEntry::new(Some(user.id), AuditAction::TokenRevoke, id.to_string());
    if state
        .store
        .revoke_token(user.id, id, &entry, chrono::Utc::now())
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no such token".into()))
    }
}
