//! Logging in and out, and knowing who is asking: `POST /api/v1/auth/login`,
//! `POST /api/v1/auth/logout`, `GET /api/v1/me`, and the [`CurrentUser`] extractor.

use super::{ApiError, ApiJson, AppState};
use crate::accounts::session::{self, lockout_remaining, lockout_window, COOKIE};
use crate::accounts::{password, User, MAX_TEXT};
use crate::store::AuditEntry;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Deserialize;
use std::net::SocketAddr;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/login", post(login))
        .route("/api/v1/auth/logout", post(logout))
        .route("/api/v1/me", get(me))
        .route("/api/v1/me/password", post(change_password))
}

/// Runs argon2 off the async runtime.
pub async fn hash_password(password: String) -> Result<String, ApiError> {
    password::check_policy(&password)?;
    Ok(
        tokio::task::spawn_blocking(move || password::hash(&password))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??,
    )
}

/// Body of `POST /api/v1/auth/login`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
}

/// Body of `POST /api/v1/me/password`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub current_password: String,
    pub new_password: String,
}

/// The logged-in user of a request; rejects with 401 when there is none.
pub struct CurrentUser(pub User);

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let now = chrono::Utc::now();
        // A request that names a token stands or falls by it; it never falls back to a cookie.
        if let Some(value) = parts.headers.get(axum::http::header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or(ApiError::Unauthenticated)?;
            return state
                .store
                .token_user(&session::hash_secret(token.trim()), now)
                .await?
                .map(CurrentUser)
                .ok_or(ApiError::Unauthenticated);
        }
        let jar = CookieJar::from_headers(&parts.headers);
        let Some(cookie) = jar.get(COOKIE) else {
            return Err(ApiError::Unauthenticated);
        };
        let id_hash = session::hash_secret(cookie.value());
        state
            .store
            .session_user(&id_hash, &state.auth.policy, now)
            .await?
            .map(CurrentUser)
            .ok_or(ApiError::Unauthenticated)
    }
}

async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    jar: CookieJar,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<impl IntoResponse, ApiError> {
    if request.username.chars().count() > MAX_TEXT {
        return Err(ApiError::BadRequest(format!(
            "username is longer than {MAX_TEXT} characters"
        )));
    }
    if request.password.len() > password::MAX_BYTES {
        return Err(ApiError::BadRequest(format!(
            "password is longer than {} bytes",
            password::MAX_BYTES
        )));
    }
    let now = chrono::Utc::now();
    let address = peer.ip().to_string();
    let (by_account, by_address) = state
        .store
        .login_failures(&request.username, &address, now - lockout_window())
        .await?;
    let wait = [by_account, by_address]
        .iter()
        .filter_map(|failures| lockout_remaining(failures, now))
        .max();
    if let Some(wait) = wait {
        return Err(ApiError::TooManyRequests {
            retry_after_secs: wait.num_seconds().max(1) as u64,
        });
    }

    let credentials = state.store.credentials(&request.username).await?;
    let user = tokio::task::spawn_blocking(move || match credentials {
        Some((user, hash)) => {
            let matches = password::verify(&request.password, &hash);
            (matches && user.enabled).then_some(user)
        }
        None => {
            // Same work as a real check, so timing does not tell who has an account.
            password::verify_dummy(&request.password);
            None
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;

    let Some(user) = user else {
        state
            .store
            .audit(
                &AuditEntry {
                    actor_user_id: None,
                    action: "auth.login_failed".into(),
                    target: request.username,
                    detail: String::new(),
                    remote_addr: Some(address),
                },
                now,
            )
            .await?;
        return Err(ApiError::InvalidCredentials);
    };
    let (secret, id_hash) = session::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let audit = AuditEntry {
        actor_user_id: Some(user.id),
        action: "auth.login".into(),
        target: user.username.clone(),
        detail: String::new(),
        remote_addr: Some(address),
    };
    state
        .store
        .start_session(user.id, &id_hash, &audit, now)
        .await?;
    let cookie = Cookie::build((COOKIE, secret))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(state.auth.secure_cookies)
        .max_age(time_duration(state.auth.policy.absolute));
    Ok((jar.add(cookie), Json(user)))
}

fn time_duration(d: chrono::Duration) -> time::Duration {
    time::Duration::seconds(d.num_seconds())
}

async fn logout(
    State(state): State<AppState>,
    jar: CookieJar,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(cookie) = jar.get(COOKIE) {
        state
            .store
            .end_session(&session::hash_secret(cookie.value()))
            .await?;
    }
    let removal = Cookie::build((COOKIE, "")).path("/");
    Ok((jar.remove(removal), StatusCode::NO_CONTENT))
}

async fn me(CurrentUser(user): CurrentUser) -> Json<User> {
    Json(user)
}

/// Changes the caller's password and ends every session of theirs, this one included.
async fn change_password(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    jar: CookieJar,
    ApiJson(change): ApiJson<PasswordChange>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, stored) = state
        .store
        .credentials(&user.username)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let current = change.current_password;
    let matches = tokio::task::spawn_blocking(move || password::verify(&current, &stored))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    if !matches {
        return Err(ApiError::Forbidden("the current password is wrong".into()));
    }
    let hash = hash_password(change.new_password).await?;
    let audit = AuditEntry {
        actor_user_id: Some(user.id),
        action: "user.password_change".into(),
        target: user.username.clone(),
        detail: String::new(),
        remote_addr: None,
    };
    state
        .store
        .change_password(user.id, &hash, &audit, chrono::Utc::now())
        .await?;
    Ok((
        jar.remove(Cookie::build((COOKIE, "")).path("/")),
        StatusCode::NO_CONTENT,
    ))
}

/// The logged-in user of a request, who must be an admin: 401 without a login, 403 for others.
pub struct AdminUser(pub User);

impl FromRequestParts<AppState> for AdminUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let CurrentUser(user) = CurrentUser::from_request_parts(parts, state).await?;
        if user.role == crate::accounts::Role::Admin {
            Ok(AdminUser(user))
        } else {
            Err(ApiError::Forbidden("only admins may do this".into()))
        }
    }
}
