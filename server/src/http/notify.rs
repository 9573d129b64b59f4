//! Notifications over HTTP: a member's choices (`GET|PUT /api/v1/me/notifications`, a test to
//! themselves), the admins' settings, outbox and test sends, and the one-click answers in
//! messages (`GET|POST /act/{secret}`): public pages, since the link is the authority; opening
//! one shows what it would do, its button does it.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiQuery, AppState, Routes};
use crate::notify::links::Refused;
use crate::usecases::notify::{self as notify, LinkFailure};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use html_escape::encode_text as esc;
use lanes_app::i18n::Locale;
use lanes_types::api;
use lanes_types::notify::{
    NotifyPrefs, NotifyPrefsView, NotifySettings, OutboxEntry, OutboxStatus, TestSend, TestSent,
};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::MyNotifications, _, _>(my_prefs)
        .endpoint::<api::SaveMyNotifications, _, _>(save_my_prefs)
        .endpoint::<api::TestMyNotifications, _, _>(test_me)
        .endpoint::<api::TestMyChannel, _, _>(test_my_channel)
        .endpoint::<api::ChangeEmail, _, _>(change_email)
        .endpoint::<api::NotifySettingsNow, _, _>(settings)
        .endpoint::<api::SaveNotifySettings, _, _>(save_settings)
        .endpoint::<api::Outbox, _, _>(outbox)
        .endpoint::<api::NotifyTest, _, _>(test_send)
        .route("/act/{secret}", get(confirm_page).post(act))
}

async fn my_prefs(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<NotifyPrefsView>, ApiError> {
    Ok(Json(notify::prefs(&state.store, &user).await?))
}

async fn save_my_prefs(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(prefs): ApiJson<NotifyPrefs>,
) -> Result<Json<NotifyPrefsView>, ApiError> {
    Ok(Json(
        notify::save_prefs(&state.store, &user, prefs, state.clock.now()).await?,
    ))
}

async fn test_me(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<TestSent>, ApiError> {
    Ok(Json(
        notify::test_send(&state.store, &user, TestSend::default(), state.clock.now()).await?,
    ))
}

/// `POST /api/v1/me/notifications/channel-test`: a test to the caller's own webhook now.
async fn test_my_channel(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(test): ApiJson<lanes_types::notify::ChannelTest>,
) -> Result<Json<lanes_types::notify::ChannelAnswer>, ApiError> {
    let prefs = state.store.notifications().prefs(user.id).await?;
    let saved = notify::SavedHook {
        url: prefs.webhook_url,
        format: prefs.webhook_format,
        secret: prefs.webhook_secret,
    };
    Ok(Json(
        notify::channel_test(
            &state.store,
            &user,
            Some(&user),
            saved,
            test,
            state.own_url(),
            state.clock.now(),
        )
        .await?,
    ))
}

/// `PUT /api/v1/me/email`: a new address gets a confirmation link (202); none removes it (200).
async fn change_email(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(change): ApiJson<lanes_types::account::EmailChange>,
) -> Result<(StatusCode, Json<lanes_types::account::EmailChangeAnswer>), ApiError> {
    let answer = notify::change_email(&state.store, &user, change, state.clock.now()).await?;
    let status = if answer.confirm_sent_to.is_some() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(answer)))
}

async fn settings(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<NotifySettings>, ApiError> {
    Ok(Json(notify::settings(&state.store).await?))
}

async fn save_settings(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(settings): ApiJson<NotifySettings>,
) -> Result<Json<NotifySettings>, ApiError> {
    Ok(Json(
        notify::save_settings(&state.store, &admin, settings, state.clock.now()).await?,
    ))
}

async fn outbox(
    State(state): State<AppState>,
    _: AdminUser,
    ApiQuery(q): ApiQuery<lanes_types::query::OutboxQuery>,
) -> Result<Json<Vec<OutboxEntry>>, ApiError> {
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(OutboxStatus::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "status must be pending, sent, failed or suppressed, not {s:?}"
            ))
        })?),
    };
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    Ok(Json(state.store.outbox().list(status, limit).await?))
}

async fn test_send(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<TestSend>,
) -> Result<Json<TestSent>, ApiError> {
    Ok(Json(
        notify::test_send(&state.store, &admin, request, state.clock.now()).await?,
    ))
}

/// The zone a link's pages write times in: the lab's (the link's member may have chosen
/// another; the page names the zone either way).
async fn page_zone(state: &AppState, secret: &str) -> chrono_tz::Tz {
    let settings = state
        .store
        .notifications()
        .settings()
        .await
        .unwrap_or_default();
    let mine = match state
        .store
        .links()
        .get(&crate::accounts::session::hash_secret(secret))
        .await
    {
        Ok(Some(link)) => state
            .store
            .notifications()
            .prefs(link.user_id)
            .await
            .ok()
            .and_then(|p| p.time_zone),
        _ => None,
    };
    crate::notify::deliver::zone(mine.as_deref(), &settings.time_zone)
}

/// Words of the link pages in the language of whoever opened the link.
macro_rules! say {
    ($locale:expr, $($key:tt)*) => {
        lanes_app::i18n::i18n::td_string!($locale, $($key)*).to_string()
    };
}

async fn confirm_page(State(state): State<AppState>, Path(secret): Path<String>) -> Response {
    let tz = page_zone(&state, &secret).await;
    let locale = super::language::current();
    match notify::look(&state.store, &secret, tz, locale, state.clock.now()).await {
        Ok(what) => page(
            StatusCode::OK,
            locale,
            &say!(locale, link.confirm_title),
            &format!(
                "<p>{}?</p><form method=\"post\"><button type=\"submit\">{}</button></form>\
                 <p class=\"quiet\">{}</p>",
                esc(&what),
                esc(&say!(locale, link.confirm)),
                esc(&say!(locale, link.once))
            ),
        ),
        Err(refused) => refused_page(refused, tz, locale),
    }
}

async fn act(State(state): State<AppState>, Path(secret): Path<String>) -> Response {
    let tz = page_zone(&state, &secret).await;
    let locale = super::language::current();
    let horizon = state.portal_settings().booking_horizon_days;
    let done = notify::perform(
        &state.store,
        &state.queue,
        horizon,
        &secret,
        state.clock.now(),
    )
    .await;
    match done {
        Ok(done) => page(
            StatusCode::OK,
            locale,
            &say!(locale, link.done_title),
            &format!(
                "<p role=\"status\">{}</p><p><a href=\"/\">{}</a></p>",
                esc(&done.words(tz, locale)),
                esc(&say!(locale, link.open_dashboard))
            ),
        ),
        Err(LinkFailure::Link(refused)) => refused_page(refused, tz, locale),
        Err(LinkFailure::Action(e)) => {
            let error = ApiError::from(e);
            let status = error.status();
            page(
                status,
                locale,
                &say!(locale, link.not_done_title),
                &format!(
                    "<p role=\"alert\">{}</p><p class=\"quiet\">{}</p>",
                    esc(&say!(
                        locale,
                        link.could_not,
                        why = error.message_in(locale)
                    )),
                    esc(&say!(locale, link.nothing_changed))
                ),
            )
        }
    }
}

fn refused_page(refused: Refused, tz: chrono_tz::Tz, locale: Locale) -> Response {
    let when = |t| lanes_app::dates::when_in(t, tz, locale);
    let (status, text) = match refused {
        Refused::Unknown => (StatusCode::NOT_FOUND, say!(locale, link.unknown)),
        Refused::Used { at, outcome } => (
            StatusCode::GONE,
            say!(locale, link.used, at = when(at))
                + &outcome
                    .map(|outcome| say!(locale, link.it_did, outcome = outcome.words(tz, locale)))
                    .unwrap_or_default(),
        ),
        Refused::Expired(at) => (StatusCode::GONE, say!(locale, link.expired, at = when(at))),
        Refused::Gone(why) => (StatusCode::GONE, say!(locale, link.gone, why)),
        Refused::Store(e) => {
            let error = ApiError::from(e);
            (
                error.status(),
                say!(locale, link.cannot_answer, why = error.message_in(locale)),
            )
        }
    };
    page(
        status,
        locale,
        &say!(locale, link.refused_title),
        &format!(
            "<p role=\"alert\">{}</p><p><a href=\"/\">{}</a>{}</p>",
            esc(&text),
            esc(&say!(locale, link.open_lanes)),
            esc(&say!(locale, link.to_do_it_there))
        ),
    )
}

fn page(status: StatusCode, locale: Locale, title: &str, body: &str) -> Response {
    let lang = lanes_app::i18n::code(locale);
    let html = format!(
        "<!DOCTYPE html><html lang=\"{lang}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>{title} · Lanes</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;\
         line-height:1.5;color:#1b1f24;background:#fff}}@media (prefers-color-scheme:dark){{body{{color:#e6edf3;\
         background:#0d1117}}a{{color:#58a6ff}}}}button{{font:inherit;padding:.5rem 1.2rem;border-radius:6px;\
         border:0;background:#0b5fff;color:#fff;cursor:pointer}}button:focus-visible{{outline:3px solid #f5a623;\
         outline-offset:2px}}.quiet{{color:#6e7781;font-size:90%}}</style></head>\
         <body><h1>{title}</h1>{body}</body></html>"
    );
    let mut response = (status, Html(html)).into_response();
    // The secret is in the path: no cache keeps the page, no referrer carries it on.
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response
}
