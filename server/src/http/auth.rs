//! Logging in and out, and knowing who is asking: `POST /api/v1/auth/login`,
//! `POST /api/v1/auth/logout`, `GET /api/v1/me`, and the [`CurrentUser`] extractor.

use super::{ApiError, ApiJson, AppState};
use crate::accounts::session::{self, lockout_remaining, lockout_window, COOKIE};
use crate::accounts::{password, User, MAX_TEXT};
use crate::store::AuditEntry;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use lanes_app::model::account::{LoginRequest, PasswordChange};
use serde::Deserialize;
use std::net::SocketAddr;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/login", post(login))
        .route("/api/v1/auth/logout", post(logout))
        .route("/api/v1/me", get(me))
        .route("/api/v1/me/password", post(change_password))
        .route("/auth/login", post(form_login))
        .route("/auth/logout", post(form_logout))
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

/// The logged-in user of a request; rejects with 401 when there is none.
#[derive(Clone)]
pub struct CurrentUser(pub User);

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // The login gate has usually resolved the user already.
        if let Some(user) = parts.extensions.get::<CurrentUser>() {
            return Ok(user.clone());
        }
        resolve_user(state, &parts.headers)
            .await?
            .ok_or(ApiError::Unauthenticated)
    }
}

/// Who a request comes from: the owner of its bearer token, else of its session cookie. A
/// request that names a token stands or falls by it; it never falls back to a cookie.
pub async fn resolve_user(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Option<CurrentUser>, ApiError> {
    let now = chrono::Utc::now();
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
            return Ok(None);
        };
        let user = state
            .store
            .token_user(&session::hash_secret(token.trim()), now)
            .await?;
        return Ok(user.map(CurrentUser));
    }
    let jar = CookieJar::from_headers(headers);
    let Some(cookie) = jar.get(COOKIE) else {
        return Ok(None);
    };
    let id_hash = session::hash_secret(cookie.value());
    Ok(state
        .store
        .session_user(&id_hash, &state.auth.policy, now)
        .await?
        .map(CurrentUser))
}

/// Checks a username and password (with lockout and audit) and starts a session. Returns the
/// user and the session cookie. Shared by the JSON API and the login form.
pub async fn authenticate(
    state: &AppState,
    username: String,
    password_text: String,
    peer: SocketAddr,
) -> Result<(User, Cookie<'static>), ApiError> {
    if username.chars().count() > MAX_TEXT {
        return Err(ApiError::BadRequest(format!(
            "username is longer than {MAX_TEXT} characters"
        )));
    }
    if password_text.len() > password::MAX_BYTES {
        return Err(ApiError::BadRequest(format!(
            "password is longer than {} bytes",
            password::MAX_BYTES
        )));
    }
    let now = chrono::Utc::now();
    let address = peer.ip().to_string();
    let (by_account, by_address) = state
        .store
        .login_failures(&username, &address, now - lockout_window())
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

    let credentials = state.store.credentials(&username).await?;
    let user = tokio::task::spawn_blocking(move || match credentials {
        Some((user, hash)) => {
            let matches = password::verify(&password_text, &hash);
            (matches && user.enabled).then_some(user)
        }
        None => {
            // Same work as a real check, so timing does not tell who has an account.
            password::verify_dummy(&password_text);
            None
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;

    let Some(user) = user else {
        let failure = AuditEntry::new(None, "auth.login_failed", username).from_addr(address);
        state.store.audit(&failure, now).await?;
        return Err(ApiError::InvalidCredentials);
    };
    let (secret, id_hash) = session::new_secret().map_err(|e| ApiError::Internal(e.to_string()))?;
    let audit = AuditEntry::new(Some(user.id), "auth.login", &user.username).from_addr(address);
    state
        .store
        .start_session(user.id, &id_hash, &audit, now)
        .await?;
    let cookie = Cookie::build((COOKIE, secret))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(state.auth.secure_cookies)
        .max_age(time_duration(state.auth.policy.absolute))
        .build();
    Ok((user, cookie))
}

async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    jar: CookieJar,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let (user, cookie) = authenticate(&state, request.username, request.password, peer).await?;
    Ok((jar.add(cookie), Json(user)))
}

fn time_duration(d: chrono::Duration) -> time::Duration {
    time::Duration::seconds(d.num_seconds())
}

/// Ends the session a request carries, and returns the jar that clears its cookie.
async fn end_session(state: &AppState, jar: CookieJar) -> Result<CookieJar, ApiError> {
    if let Some(cookie) = jar.get(COOKIE) {
        state
            .store
            .end_session(&session::hash_secret(cookie.value()))
            .await?;
    }
    Ok(jar.remove(Cookie::build((COOKIE, "")).path("/")))
}

async fn logout(
    State(state): State<AppState>,
    jar: CookieJar,
) -> Result<impl IntoResponse, ApiError> {
    Ok((end_session(&state, jar).await?, StatusCode::NO_CONTENT))
}

/// Fields of the login form on `/login`.
#[derive(Deserialize)]
pub struct LoginForm {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub next: String,
}

/// Where to go after logging in: a path on this site, never another site.
pub fn safe_next(next: &str) -> &str {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    if local {
        next
    } else {
        "/"
    }
}

/// `POST /auth/login`: the HTML form's login; works without JavaScript. Failures go back to
/// the form with an error code and the username kept (never the password).
async fn form_login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    jar: CookieJar,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> axum::response::Response {
    let Ok(axum::Form(form)) = form else {
        return Redirect::to("/login?error=bad").into_response();
    };
    let next = safe_next(&form.next).to_string();
    let username = form.username.clone();
    match authenticate(&state, form.username, form.password, peer).await {
        Ok((_, cookie)) => (jar.add(cookie), Redirect::to(&next)).into_response(),
        Err(err) => {
            let reason = match &err {
                ApiError::InvalidCredentials => "invalid".to_string(),
                ApiError::TooManyRequests { retry_after_secs } => {
                    format!("locked&retry={retry_after_secs}")
                }
                ApiError::BadRequest(_) => "bad".to_string(),
                _ => return err.into_response(),
            };
            let back = format!(
                "/login?error={reason}&next={}&user={}",
                url_escape(&next),
                url_escape(&username)
            );
            Redirect::to(&back).into_response()
        }
    }
}

/// `POST /auth/logout`: the logout button.
async fn form_logout(State(state): State<AppState>, jar: CookieJar) -> axum::response::Response {
    match end_session(&state, jar).await {
        Ok(jar) => (jar, Redirect::to("/login")).into_response(),
        Err(err) => err.into_response(),
    }
}

/// Percent-encodes a path for use as a query value.
pub fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Paths anyone may reach: health, metrics (which has its own token), the login page and
/// its assets, and logging in.
pub fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/metrics" | "/login" | "/auth/login" | "/api/v1/auth/login" | "/favicon.svg"
    ) || path.starts_with("/pkg/")
}

/// The login gate: every request but [`is_public`] ones needs a user. API callers get a JSON
/// 401; people are sent to the login page and brought back afterwards.
pub async fn require_login(
    State(state): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path().to_string();
    if is_public(&path) {
        return next.run(request).await;
    }
    match resolve_user(&state, request.headers()).await {
        Ok(Some(user)) => {
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        Ok(None) if path.starts_with("/api/") => ApiError::Unauthenticated.into_response(),
        Ok(None) => {
            let back = request
                .uri()
                .path_and_query()
                .map_or("/".to_string(), |p| p.to_string());
            Redirect::to(&format!("/login?next={}", url_escape(&back))).into_response()
        }
        Err(err) => err.into_response(),
    }
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
    let audit = AuditEntry::new(Some(user.id), "user.password_change", &user.username);
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
        if user.role == lanes_app::model::account::Role::Admin {
            Ok(AdminUser(user))
        } else {
            Err(ApiError::Forbidden("only admins may do this".into()))
        }
    }
}
