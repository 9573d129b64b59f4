//! Pages that arrive with their data: before a page that names what it reads
//! ([`lanes_app::pages::preloads`]) is rendered, this middleware asks the REST API for it
//! in-process and leaves the answers in the request ([`lanes_app::ssr::PageData`]).
//! The calls go through the same routes, login gate and language choice as a browser's, with
//! the page request's cookie, token and address, so a page shows nothing its viewer could not
//! fetch. They are made here, before rendering starts, and not from inside the render: the
//! render then has nothing to wait for.

use super::{auth, language, AppState};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use lanes_app::ssr::PageData as Answers;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The most of one answer a page takes in (a page of the audit log is far less).
const MOST: usize = 4 * 1024 * 1024;

/// How long a page waits for one answer; one that takes longer is left for the browser to
/// ask for (the page then shows its loading line), so a slow store never holds a page.
const PATIENCE: Duration = Duration::from_secs(5);

/// What of the page request an API call carries: who is asking and in which language.
const CARRIED: [HeaderName; 4] = [
    header::COOKIE,
    header::AUTHORIZATION,
    header::ACCEPT_LANGUAGE,
    HeaderName::from_static("x-forwarded-for"),
];

/// The API routes alone, behind the login gate and the language choice.
#[derive(Clone)]
pub struct LocalApi(Router);

impl LocalApi {
    pub fn new(state: &AppState) -> Self {
        let api = super::api_routes()
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_login,
            ))
            .layer(axum::middleware::from_fn(language::pick))
            .with_state(state.clone());
        Self(api)
    }

    /// The JSON answer to `GET path` on behalf of the page request `page`; `None` when the
    /// API refused, failed, or took too long (the browser then asks, and shows what it gets).
    async fn get(
        &self,
        path: &str,
        page: &axum::http::request::Parts,
    ) -> Option<serde_json::Value> {
        let mut request = Request::get(path);
        for name in &CARRIED {
            for value in page.headers.get_all(name) {
                request = request.header(name, value);
            }
        }
        let mut request = request
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .ok()?;
        if let Some(peer) = page.extensions.get::<ConnectInfo<SocketAddr>>().copied() {
            request.extensions_mut().insert(peer);
        }
        let api = self.0.clone();
        let asked = async move {
            let Ok(response) = api.oneshot(request).await;
            if response.status() != StatusCode::OK {
                return None;
            }
            let body = axum::body::to_bytes(response.into_body(), MOST)
                .await
                .ok()?;
            serde_json::from_slice(&body).ok()
        };
        match tokio::time::timeout(PATIENCE, asked).await {
            Ok(answer) => answer,
            Err(_) => {
                tracing::warn!(
                    path,
                    "a page's data took over {PATIENCE:?}; left to the browser"
                );
                None
            }
        }
    }
}

/// Middleware: for a page that names what it reads, asks for it and leaves the answers in the
/// request for the render.
pub async fn gather(State(api): State<LocalApi>, request: Request, next: Next) -> Response {
    let reads = lanes_app::pages::preloads(request.uri().path());
    if request.method() != Method::GET || reads.is_empty() {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let answers = futures::future::join_all(reads.iter().map(|path| api.get(path, &parts))).await;
    let answers: BTreeMap<String, serde_json::Value> = reads
        .iter()
        .zip(answers)
        .filter_map(|(path, answer)| Some((path.to_string(), answer?)))
        .collect();
    parts.extensions.insert(Answers(Arc::new(answers)));
    next.run(Request::from_parts(parts, body)).await
}
