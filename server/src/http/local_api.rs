//! The REST API asked in-process while a page is rendered ([`lanes_app::ssr::LocalApi`]): the
//! admin sections arrive with their data. The request goes through the same routes, the same
//! login gate and the same language choice as a browser's call, carrying the page request's
//! cookie, token and address, so a page can show nothing its viewer could not fetch.

use super::{auth, language, AppState};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderName, Request};
use axum::Router;
use std::net::SocketAddr;
use tower::ServiceExt;

/// The most of an answer a page takes in (a page of the audit log is far less).
const MOST: usize = 16 * 1024 * 1024;

/// What of the page request the API call carries: who is asking and in which language.
const CARRIED: [HeaderName; 4] = [
    header::COOKIE,
    header::AUTHORIZATION,
    header::ACCEPT_LANGUAGE,
    HeaderName::from_static("x-forwarded-for"),
];

/// The API routes alone, behind the login gate and the language choice.
pub struct LocalApi(Router);

impl LocalApi {
    pub fn new(state: &AppState) -> Self {
        let api = super::areas()
            .into_iter()
            .fold(Router::new(), |router, area| router.merge(area.router))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_login,
            ))
            .layer(axum::middleware::from_fn(language::pick))
            .with_state(state.clone());
        Self(api)
    }
}

impl lanes_app::ssr::LocalApi for LocalApi {
    fn get(&self, path: &str, page: &axum::http::request::Parts) -> lanes_app::ssr::Answer {
        let mut request = Request::get(path);
        for name in &CARRIED {
            for value in page.headers.get_all(name) {
                request = request.header(name, value);
            }
        }
        let request = request
            .header(header::ACCEPT, "application/json")
            .body(Body::empty());
        let peer = page.extensions.get::<ConnectInfo<SocketAddr>>().copied();
        let api = self.0.clone();
        Box::pin(async move {
            let mut request = match request {
                Ok(request) => request,
                Err(e) => return failed(400, "invalid", e),
            };
            if let Some(peer) = peer {
                request.extensions_mut().insert(peer);
            }
            let Ok(response) = api.oneshot(request).await;
            let status = response.status().as_u16();
            match axum::body::to_bytes(response.into_body(), MOST).await {
                Ok(body) => (status, String::from_utf8_lossy(&body).into_owned()),
                Err(e) => failed(500, "internal", e),
            }
        })
    }
}

/// An answer the API would have given for a call that never reached it.
fn failed(status: u16, code: &str, error: impl std::fmt::Display) -> (u16, String) {
    let body = serde_json::json!({ "error": code, "message": error.to_string() });
    (status, body.to_string())
}
