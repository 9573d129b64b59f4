//! Signing in through the lab's directory: the browser's round trip to the OIDC provider
//! (`/auth/oidc/start`, `/auth/oidc/callback`), the terminal's device grant and one-time
//! codes, how people sign in here, and an admin's "sync now".

use super::auth::{
    login_error_code, safe_next, session_jar, url_escape, AdminUser, ClientAddr, CurrentUser,
    OIDC_CALLBACK, OIDC_START,
};
use super::{ApiError, ApiJson, AppState, Routes};
use crate::runtime::limit::{address_key, Limiter, Rate};
use crate::usecases;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Json;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use lanes_types::account::{DevicePoll, RedeemTerminalCode};
use lanes_types::api;
use serde::Deserialize;

/// The cookie that ties a sign-in to the browser that started it (its `state`).
const STATE_COOKIE: &str = "lanes_oidc_state";
/// Longest token name the terminal may ask for.
const MAX_TOKEN_NAME: usize = 256;
/// Longest place to go after signing in that is kept with a sign-in under way; a longer one
/// goes to the dashboard. (A page's own address is far shorter; the row is anonymous.)
const MAX_NEXT: usize = 512;
/// Sign-in starts per client address (`/auth/oidc/start`, `POST /api/v1/auth/device`), both
/// anonymous: each keeps a row and reaches the provider. A person needs a few; a lab behind
/// one address (a proxy, an SSH tunnel) a few dozen an hour.
pub const SIGN_IN_STARTS: Rate = Rate {
    burst: 20,
    every: std::time::Duration::from_secs(3),
};
/// Terminal codes tried per client address, before any reaches the database: the lockout
/// there (5 wrong codes an address in 15 minutes) is the rule; this keeps a flood of tries
/// from taking the database's write turn from everyone else's requests.
pub const CODE_TRIES: Rate = Rate {
    burst: 10,
    every: std::time::Duration::from_secs(6),
};
/// Client addresses remembered at once, per limit.
pub const ADDRESSES_KEPT: usize = 10_000;

/// What anonymous callers may ask of the sign-in routes, per client address.
pub struct AnonymousLimits {
    sign_in_starts: Limiter<std::net::IpAddr>,
    code_tries: Limiter<std::net::IpAddr>,
}

impl Default for AnonymousLimits {
    fn default() -> Self {
        Self {
            sign_in_starts: Limiter::new(SIGN_IN_STARTS, ADDRESSES_KEPT),
            code_tries: Limiter::new(CODE_TRIES, ADDRESSES_KEPT),
        }
    }
}

/// One more from `client` within `limiter`, or 429 with when to come back.
fn within(
    limiter: &Limiter<std::net::IpAddr>,
    client: std::net::IpAddr,
    what: &str,
) -> Result<(), ApiError> {
    limiter
        .take(&address_key(client), std::time::Instant::now())
        .map_err(|wait| ApiError::SlowDown {
            message: format!("too many {what} from this address"),
            retry_after_secs: wait.as_secs().max(1),
        })
}

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::AuthMethods, _, _>(methods)
        .endpoint::<api::StartDeviceSignIn, _, _>(start_device)
        .endpoint::<api::PollDeviceSignIn, _, _>(poll_device)
        .endpoint::<api::SignInWithTerminalCode, _, _>(redeem_code)
        .endpoint::<api::NewTerminalCode, _, _>(new_code)
        .endpoint::<api::SyncDirectory, _, _>(sync_now)
        .route(OIDC_START, get(oidc_start))
        .route(OIDC_CALLBACK, get(oidc_callback))
}

async fn methods(State(state): State<AppState>) -> impl IntoResponse {
    Json(match &state.auth.directory {
        Some(directory) => directory.methods().await,
        None => crate::directory::local_methods(),
    })
}

#[derive(Deserialize)]
struct StartQuery {
    #[serde(default)]
    next: String,
}

/// One more anonymous sign-in start from `client`, or 429 with when to come back.
fn start_allowed(state: &AppState, client: std::net::IpAddr) -> Result<(), ApiError> {
    within(&state.anonymous.sign_in_starts, client, "sign-ins started")
}

/// Sends the browser to the provider, with a cookie holding the sign-in's `state`.
async fn oidc_start(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    jar: CookieJar,
    Query(query): Query<StartQuery>,
) -> Response {
    let Some(redirect) = state.auth.oidc_redirect.clone() else {
        return login_failed("refused", "/");
    };
    let next = match safe_next(&query.next) {
        next if next.len() <= MAX_NEXT => next.to_string(),
        _ => "/".to_string(),
    };
    if let Err(e) = start_allowed(&state, client) {
        return e.into_response();
    }
    match usecases::directory::start_browser_sign_in(
        &state.store,
        state.auth.directory.as_deref(),
        &redirect,
        &next,
        state.clock.now(),
    )
    .await
    {
        Ok((url, flow_state)) => {
            let cookie = Cookie::build((STATE_COOKIE, flow_state))
                .path("/auth/oidc")
                .http_only(true)
                // The provider's redirect back is a top-level navigation: Lax sends it.
                .same_site(SameSite::Lax)
                .secure(state.auth.secure_cookies)
                .max_age(time::Duration::minutes(15))
                .build();
            (jar.add(cookie), Redirect::to(&url)).into_response()
        }
        Err(e) => {
            let err = ApiError::from(e);
            login_failed(
                &login_error_code(&err).unwrap_or_else(|| "refused".into()),
                &next,
            )
        }
    }
}

#[derive(Deserialize)]
struct Callback {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The provider's answer: a code to exchange, or an error (the person cancelled). Every
/// failure goes back to the login page with a code it says in the viewer's language; where
/// the browser goes after is only ever what this portal stored when the sign-in started.
async fn oidc_callback(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    jar: CookieJar,
    Query(callback): Query<Callback>,
) -> Response {
    let cookie_state = jar.get(STATE_COOKIE).map(|c| c.value().to_string());
    // The browser's sign-in under way ends only with its own callback: a link with any other
    // state (forged, or an old one) leaves it be.
    let own = cookie_state.is_some() && callback.state == cookie_state;
    let jar = if own {
        jar.remove(Cookie::build((STATE_COOKIE, "")).path("/auth/oidc"))
    } else {
        jar
    };
    let (Some(code), Some(flow_state)) = (callback.code, callback.state) else {
        if let Some(error) = callback.error {
            tracing::info!(
                error = error.chars().take(64).collect::<String>(),
                "OIDC sign-in ended at the provider"
            );
        }
        return (jar, login_failed("sso-cancelled", "/")).into_response();
    };
    let finished = usecases::directory::finish_browser_sign_in(
        &state.store,
        state.auth.directory.as_deref(),
        &state.portal_settings(),
        usecases::directory::ProviderAnswer {
            state: &flow_state,
            cookie_state: cookie_state.as_deref(),
            code: &code,
        },
        client,
        state.clock.now(),
    )
    .await;
    match finished {
        Ok((logged_in, next)) => match session_jar(&state, jar, logged_in).await {
            Ok(jar) => (jar, Redirect::to(safe_next(&next))).into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => {
            let err = ApiError::from(e);
            let reason = match &err {
                ApiError::BadRequest(_) => "sso-expired".to_string(),
                other => login_error_code(other).unwrap_or_else(|| "refused".into()),
            };
            (jar, login_failed(&reason, "/")).into_response()
        }
    }
}

/// Back to the login page with why.
fn login_failed(reason: &str, next: &str) -> Response {
    Redirect::to(&format!("/login?error={reason}&next={}", url_escape(next))).into_response()
}

fn token_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_TOKEN_NAME {
        return Err(ApiError::BadRequest(format!(
            "token_name must be 1 to {MAX_TOKEN_NAME} characters"
        )));
    }
    Ok(name.to_string())
}

async fn start_device(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
) -> Result<impl IntoResponse, ApiError> {
    start_allowed(&state, client)?;
    Ok(Json(
        usecases::directory::start_device_sign_in(
            &state.store,
            state.auth.directory.as_deref(),
            state.clock.now(),
        )
        .await?,
    ))
}

async fn poll_device(
    State(state): State<AppState>,
    ApiJson(poll): ApiJson<DevicePoll>,
) -> Result<impl IntoResponse, ApiError> {
    let name = token_name(&poll.token_name)?;
    if poll.handle.len() > 128 {
        return Err(ApiError::BadRequest("unknown handle".into()));
    }
    Ok(Json(
        usecases::directory::poll_device_sign_in(
            &state.store,
            state.auth.directory.as_deref(),
            &state.portal_settings(),
            &poll.handle,
            name,
            state.clock.now(),
        )
        .await?,
    ))
}

async fn redeem_code(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    ApiJson(request): ApiJson<RedeemTerminalCode>,
) -> Result<impl IntoResponse, ApiError> {
    let name = token_name(&request.token_name)?;
    within(&state.anonymous.code_tries, client, "terminal codes tried")?;
    Ok(Json(
        usecases::directory::redeem_terminal_code(
            &state.store,
            &request.code,
            name,
            client,
            state.clock.now(),
        )
        .await?,
    ))
}

async fn new_code(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        usecases::directory::new_terminal_code(&state.store, &user, state.clock.now()).await?,
    ))
}

async fn sync_now(
    State(state): State<AppState>,
    AdminUser(_admin): AdminUser,
) -> Result<impl IntoResponse, ApiError> {
    let Some(directory) = state.auth.directory.clone() else {
        return Err(ApiError::NotFound("this portal has no directory".into()));
    };
    Ok(Json(
        usecases::directory::sync(&state.store, &directory, state.clock.now()).await?,
    ))
}
