//! API tokens for scripts and the CLI: `GET|POST /api/v1/tokens`, `DELETE /api/v1/tokens/{id}`.
//! A token acts with its owner's rights; it is shown once, when created.

use super::auth::CurrentUser;
use super::{ApiError, ApiJson, ApiPath, AppState, Routes};
use crate::usecases::accounts;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::account::{ApiToken, CreatedToken, NewToken};
use lanes_types::api;

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Tokens, _, _>(list)
        .endpoint::<api::CreateToken, _, _>(create)
        .endpoint::<api::RevokeToken, _, _>(revoke)
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<Vec<ApiToken>>, ApiError> {
    Ok(Json(state.store.tokens().of(user.id).await?))
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<NewToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let created = accounts::create_token(&state.store, &user, request, state.clock.now()).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn revoke(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    accounts::revoke_token(&state.store, &user, id, state.clock.now()).await?;
    Ok(StatusCode::NO_CONTENT)
}
