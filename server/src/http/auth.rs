//! Logging in and out, and knowing who is asking: `POST /api/v1/auth/login`,
//! `POST /api/v1/auth/logout`, `GET /api/v1/me`, and the [`CurrentUser`] extractor.

use super::{ApiError, ApiJson, AppState, Routes};
use crate::accounts::session::{self, COOKIE};
use crate::accounts::User;
use crate::usecases;
use crate::usecases::Said;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::post;
use axum::Json;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use lanes_types::account::PortalSettings;
use lanes_types::account::{LanguageChoice, LoginRequest, PasswordChange};
use lanes_types::api::{self, Endpoint};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Login, _, _>(login)
        .endpoint::<api::Logout, _, _>(logout)
        .endpoint::<api::Me, _, _>(me)
        .endpoint::<api::ChangePassword, _, _>(change_password)
        .endpoint::<api::SetLanguage, _, _>(choose_language)
        .route("/auth/login", post(form_login))
        .route("/auth/logout", post(form_logout))
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

/// The token of an `Authorization` value in the Bearer scheme (its name in any case, as
/// RFC 9110 has schemes).
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Who a request comes from: the owner of its bearer token, else of its session cookie. A
/// request that names a token stands or falls by it; it never falls back to a cookie.
pub async fn resolve_user(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Option<CurrentUser>, ApiError> {
    let now = state.clock.now();
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let Some(token) = value.to_str().ok().and_then(bearer) else {
            return Ok(None);
        };
        let user = state
            .store
            .tokens()
            .user(&session::hash_secret(token.trim()), now)
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
        .sessions()
        .user(&id_hash, &state.auth.policy, now)
        .await?
        .map(CurrentUser))
}

/// Logs in (see [`usecases::accounts::log_in`]) and adds the session cookie (and the
/// member's language) to `jar`. Shared by the JSON API and the login form.
async fn authenticate(
    state: &AppState,
    jar: CookieJar,
    username: String,
    password: String,
    client: IpAddr,
) -> Result<(User, CookieJar), ApiError> {
    let logged_in = usecases::accounts::log_in(
        &state.store,
        state.auth.directory.as_deref(),
        &state.portal_settings(),
        username,
        password,
        client,
        state.clock.now(),
    )
    .await?;
    Ok((
        logged_in.user.clone(),
        session_jar(state, jar, logged_in).await?,
    ))
}

/// Adds a new session's cookie (and the member's language) to `jar`.
pub async fn session_jar(
    state: &AppState,
    jar: CookieJar,
    logged_in: usecases::accounts::LoggedIn,
) -> Result<CookieJar, ApiError> {
    let usecases::accounts::LoggedIn { user, secret } = logged_in;
    let session = Cookie::build((COOKIE, secret))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(state.auth.secure_cookies)
        .max_age(time_duration(state.auth.policy.absolute))
        .build();
    // The language the member chose before, on this browser too.
    let mut jar = jar.add(session);
    if let Some(language) = state.store.accounts().language_of(user.id).await? {
        jar = jar.add(super::language::cookie(&language));
    }
    Ok(jar)
}

async fn login(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    jar: CookieJar,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let (user, jar) = authenticate(&state, jar, request.username, request.password, client).await?;
    Ok((jar, Json(user)))
}

fn time_duration(d: chrono::Duration) -> time::Duration {
    time::Duration::seconds(d.num_seconds())
}

/// Ends the session a request carries, and returns the jar that clears its cookie.
async fn end_session(state: &AppState, jar: CookieJar) -> Result<CookieJar, ApiError> {
    usecases::accounts::log_out(&state.store, jar.get(COOKIE).map(|c| c.value())).await?;
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

/// Where to go after logging in: a path on this site, never another site. Only a string that
/// parses as a path (and query) alone, with no control characters or whitespace (browsers
/// drop tabs and newlines, so `/\t/evil.example` would become `//evil.example`) and no second
/// leading slash or backslash, is taken; anything else goes to the dashboard.
pub fn safe_next(next: &str) -> &str {
    let plain = next
        .chars()
        .all(|c| !c.is_control() && !c.is_whitespace() && c != '\\');
    let local = plain
        && next.starts_with('/')
        && !next.starts_with("//")
        && next.parse::<axum::http::uri::PathAndQuery>().is_ok()
        && axum::http::HeaderValue::from_str(next).is_ok();
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
    ClientAddr(client): ClientAddr,
    jar: CookieJar,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> axum::response::Response {
    let Ok(axum::Form(form)) = form else {
        return Redirect::to("/login?error=bad").into_response();
    };
    let next = safe_next(&form.next).to_string();
    let username = form.username.clone();
    match authenticate(&state, jar, form.username, form.password, client).await {
        Ok((_, jar)) => (jar, Redirect::to(&next)).into_response(),
        Err(err) => {
            let reason = match &err {
                ApiError::InvalidCredentials if no_admin_yet(&state).await => "setup".to_string(),
                other => match login_error_code(other) {
                    Some(code) => code,
                    None => return err.into_response(),
                },
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

/// The login page's code for why a sign-in failed (it says each in the viewer's language);
/// `None` for errors the page has no words for (answered as they are).
pub fn login_error_code(err: &ApiError) -> Option<String> {
    Some(match err {
        ApiError::InvalidCredentials => "invalid".to_string(),
        ApiError::TooManyRequests { retry_after_secs } => {
            format!("locked&retry={retry_after_secs}")
        }
        ApiError::BadRequest(_) => "bad".to_string(),
        ApiError::Forbidden(Said::AccountPending) => "pending".to_string(),
        ApiError::Forbidden(Said::SignInWith(_)) => "use-sso".to_string(),
        ApiError::Forbidden(Said::MembersUseDirectory) => "use-directory".to_string(),
        ApiError::Forbidden(Said::UsernameTaken(_)) => "taken".to_string(),
        ApiError::Forbidden(_) => "refused".to_string(),
        ApiError::Unavailable { .. } => "unavailable".to_string(),
        _ => return None,
    })
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
    lanes_types::query::escape_value(text)
}

/// Where a browser starts signing in through the OIDC provider (`http/directory.rs`).
pub const OIDC_START: &str = "/auth/oidc/start";
/// Where the provider sends it back.
pub const OIDC_CALLBACK: &str = "/auth/oidc/callback";

/// Paths anyone may reach: health, metrics (which has its own token), the login page and
/// its assets, and logging in.
pub fn is_public(path: &str) -> bool {
    [
        api::Health::PATH,
        api::Metrics::PATH,
        "/login",
        "/auth/login",
        api::Login::PATH,
        api::AuthMethods::PATH,
        api::StartDeviceSignIn::PATH,
        api::PollDeviceSignIn::PATH,
        api::SignInWithTerminalCode::PATH,
        OIDC_START,
        OIDC_CALLBACK,
        "/favicon.svg",
    ]
    .contains(&path)
        || path.starts_with("/pkg/")
        // One-click answers in messages: the link's secret is the authority.
        || path.starts_with("/act/")
}

/// Pages only admins may open (their API calls are guarded each on its own as well).
pub fn is_admin_page(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/")
}

/// Paths an anonymous viewer may also reach when an admin opened the dashboard to them: the
/// dashboard and the read-only telemetry behind it (without process owners and commands).
pub fn is_open_dashboard(path: &str, settings: &PortalSettings) -> bool {
    settings.anonymous_dashboard
        && [
            "/",
            "/api/fn/fleet",
            api::Gpus::PATH,
            api::Nodes::PATH,
            api::TelemetryWs::PATH,
        ]
        .contains(&path)
}

/// The login gate: every request but [`is_public`] ones needs a user. API callers get a JSON
/// 401; people are sent to the login page and brought back afterwards. The user it finds is
/// left in the request's extensions, as [`CurrentUser`] and as the plain [`User`] that the
/// app's server functions read.
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
        Ok(Some(user)) if is_admin_page(&path) && !user.0.is_admin() => (
            StatusCode::FORBIDDEN,
            axum::response::Html(
                "<!DOCTYPE html><title>Lanes</title><p>Only admins may see this page. \
                 <a href=\"/\">Back to the dashboard</a></p>",
            ),
        )
            .into_response(),
        Ok(Some(user)) => {
            request.extensions_mut().insert(user.0.clone());
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        Ok(None) if is_public(&path) || is_open_dashboard(&path, &state.portal_settings()) => {
            next.run(request).await
        }
        Ok(None) if path.starts_with("/api/") => ApiError::Unauthenticated.into_response(),
        Ok(None) => {
            let back = request
                .uri()
                .path_and_query()
                .map_or("/".to_string(), |p| p.to_string());
            let setup = if no_admin_yet(&state).await {
                "notice=setup&"
            } else {
                ""
            };
            Redirect::to(&format!("/login?{setup}next={}", url_escape(&back))).into_response()
        }
        Err(err) => err.into_response(),
    }
}

/// Whether the portal has no account yet (a new install): the login page then says how the
/// first admin is made. A database that cannot answer counts as "has one". Accounts are made
/// but never removed wholesale, so once one is seen the store is not asked again.
async fn no_admin_yet(state: &AppState) -> bool {
    use std::sync::atomic::Ordering;
    if state.has_accounts.load(Ordering::Relaxed) {
        return false;
    }
    let none = state.store.accounts().any().await.is_ok_and(|any| !any);
    if !none {
        state.has_accounts.store(true, Ordering::Relaxed);
    }
    none
}

/// The logged-in user if there is one; for routes that anonymous viewers may also reach.
pub struct MaybeUser(pub Option<User>);

impl FromRequestParts<AppState> for MaybeUser {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &AppState,
    ) -> Result<Self, std::convert::Infallible> {
        Ok(MaybeUser(parts.extensions.get::<User>().cloned()))
    }
}

/// The address a request comes from: the peer, or, when the peer is a trusted proxy, the
/// client its `X-Forwarded-For` names.
pub struct ClientAddr(pub IpAddr);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ConnectInfo(peer) = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .copied()
            .ok_or_else(|| ApiError::Internal("no peer address on the connection".into()))?;
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        Ok(ClientAddr(client_addr(
            peer.ip(),
            &forwarded,
            &state.auth.trusted_proxies,
        )))
    }
}

/// Who a request really comes from. Only a trusted proxy's word is taken, and proxies append
/// to `X-Forwarded-For`, so the list is read from the right: the first address that is not a
/// trusted proxy is the client. Anything unreadable stops the walk at the last trusted hop.
pub fn client_addr(peer: IpAddr, forwarded_for: &str, trusted: &[IpAddr]) -> IpAddr {
    let mut client = peer;
    if !trusted.contains(&peer) {
        return client;
    }
    for hop in forwarded_for
        .rsplit(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
    {
        let Ok(addr) = hop.parse::<IpAddr>() else {
            break;
        };
        client = addr;
        if !trusted.contains(&addr) {
            break;
        }
    }
    client
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
    usecases::accounts::change_password(&state.store, &user, change, state.clock.now()).await?;
    Ok((
        jar.remove(Cookie::build((COOKIE, "")).path("/")),
        StatusCode::NO_CONTENT,
    ))
}

/// `PUT /api/v1/me/language`: remembers the caller's language on the account and in the
/// cookie; 204.
async fn choose_language(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    jar: CookieJar,
    ApiJson(choice): ApiJson<LanguageChoice>,
) -> Result<impl IntoResponse, ApiError> {
    usecases::accounts::choose_language(&state.store, &user, &choice.language, state.clock.now())
        .await?;
    Ok((
        jar.add(super::language::cookie(&choice.language)),
        StatusCode::NO_CONTENT,
    ))
}

/// The logged-in user of a request, who must be an admin: 401 without a login, 403 for others.
pub struct AdminUser(pub User);

impl FromRequestParts<AppState> for AdminUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let CurrentUser(user) = CurrentUser::from_request_parts(parts, state).await?;
        if user.role == lanes_types::account::Role::Admin {
            Ok(AdminUser(user))
        } else {
            Err(ApiError::Forbidden(Said::OnlyAdmins))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy() {
        let proxy = ip("10.0.0.1");
        assert_eq!(
            client_addr(ip("192.0.2.7"), "203.0.113.9", &[proxy]),
            ip("192.0.2.7")
        );
        assert_eq!(client_addr(proxy, "203.0.113.9", &[]), proxy);
    }

    #[test]
    fn the_client_is_the_rightmost_address_that_is_not_a_trusted_proxy() {
        let proxies = [ip("10.0.0.1"), ip("10.0.0.2")];
        // A client may forge the left part; only what the proxies appended counts.
        let header = "198.51.100.66, 203.0.113.9, 10.0.0.2";
        assert_eq!(
            client_addr(ip("10.0.0.1"), header, &proxies),
            ip("203.0.113.9")
        );
        assert_eq!(client_addr(ip("10.0.0.1"), "", &proxies), ip("10.0.0.1"));
        assert_eq!(
            client_addr(ip("10.0.0.1"), "garbage, 10.0.0.2", &proxies),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_addr(ip("10.0.0.1"), "2001:db8::1", &proxies),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn only_the_dashboard_and_its_telemetry_open_to_anonymous_viewers() {
        let open = PortalSettings {
            anonymous_dashboard: true,
            ..Default::default()
        };
        for path in [
            "/",
            "/api/fn/fleet",
            "/api/v1/gpus",
            "/api/v1/nodes",
            "/api/v1/telemetry/ws",
        ] {
            assert!(is_open_dashboard(path, &open), "{path}");
            assert!(
                !is_open_dashboard(path, &PortalSettings::default()),
                "{path}"
            );
        }
        for path in [
            "/admin",
            "/api/v1/users",
            "/api/v1/me",
            "/api/v1/audit",
            "/account",
        ] {
            assert!(!is_open_dashboard(path, &open), "{path}");
        }
    }
}
