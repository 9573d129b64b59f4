//! The caller's language (English or Simplified Chinese): chosen once per request from the
//! `lang` cookie, then `Accept-Language` ([`lanes_app::i18n::of_request`]); left in the
//! request for the pages and in a task-local for the API's messages. A member's choice is kept
//! on the account (`auth.rs` answers `PUT /me/language`), and logging in sets the cookie from it.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum_extra::extract::cookie::{Cookie, SameSite};
use lanes_app::i18n::Locale;

tokio::task_local! {
    static LOCALE: Locale;
}

/// The language of the request being answered (English outside one).
pub fn current() -> Locale {
    LOCALE.try_with(|locale| *locale).unwrap_or_default()
}

/// Middleware: picks the request's language, and the time zone its pages draw times in (the
/// `tz` cookie's), once, before anything else answers it.
pub async fn pick(mut request: Request, next: Next) -> Response {
    let locale = lanes_app::i18n::of_request(request.headers());
    let zone = lanes_app::ssr::ViewerZone::of_request(request.headers());
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
