//! The caller's language (English or Simplified Chinese): chosen once per request from the
//! `lang` cookie, then `Accept-Language` ([`lanes_app::i18n::of_request`]); left in the
//! request for the pages and in a task-local for the API's messages. `PUT /api/v1/me/language`
//! remembers a member's choice, and logging in sets the cookie from it.

use super::auth::CurrentUser;
use super::{ApiError, ApiJson, AppState, Routes};
use crate::usecases;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use lanes_app::i18n::Locale;
use lanes_types::account::LanguageChoice;
use lanes_types::api;

tokio::task_local! {
    static LOCALE: Locale;
}

pub fn routes() -> Routes {
    Routes::default().endpoint::<api::SetLanguage, _, _>(choose)
}

/// The language of the request being answered (English outside one).
pub fn current() -> Locale {
    LOCALE.try_with(|locale| *locale).unwrap_or_default()
}

/// Middleware: picks the request's language, and the time zone its pages draw times in (the
/// `tz` cookie's), once, before anything else answers it.
pub async fn pick(mut request: Request, next: Next) -> Response {
    let locale = lanes_app::i18n::of_request(request.headers());
    let zone = lanes_app::components::clock::ViewerZone::of_request(request.headers());
    request.extensions_mut().insert(locale);
    request.extensions_mut().insert(zone);
    LOCALE.scope(locale, next.run(request)).await
}

/// The cookie that keeps `language` for a year (readable by the page, which sets it too).
pub fn cookie(language: &str) -> Cookie<'static> {
    Cookie::build((lanes_app::i18n::COOKIE, language.to_string()))
        .path("/")
        .same_site(SameSite::Lax)
        .max_age(time::Duration::days(365))
        .build()
}

/// `PUT /api/v1/me/language`: remembers the caller's language on the account and in the
/// cookie; 204.
async fn choose(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    jar: CookieJar,
    ApiJson(choice): ApiJson<LanguageChoice>,
) -> Result<impl IntoResponse, ApiError> {
    usecases::accounts::choose_language(&state.store, &user, &choice.language, state.clock.now())
        .await?;
    Ok((jar.add(cookie(&choice.language)), StatusCode::NO_CONTENT))
}
