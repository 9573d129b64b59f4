//! The HTTP surface: REST API, telemetry websocket, metrics, and the Leptos pages, on one axum
//! router. Handlers are thin; each area exports its own `router()`.

mod admin;
mod api;
pub mod auth;
mod csrf;
mod error;
mod tokens;
mod ws;

pub use error::{ApiError, ApiJson, ApiPath, ApiQuery};

use crate::accounts::session::SessionPolicy;
use crate::store::Store;
use crate::telemetry::hub::Hub;
use axum::extract::FromRef;
use axum::Router;
use lanes_app::model::SourceKind;
use leptos::prelude::{provide_context, LeptosOptions};
use leptos_axum::{generate_route_list, LeptosRoutes};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tower_http::compression::CompressionLayer;

/// What every handler may need.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub hub: Arc<Hub>,
    pub node: Arc<str>,
    pub source: SourceKind,
    /// Fires when the server begins to shut down, so long-lived connections end cleanly.
    pub shutdown: CancellationToken,
    pub store: Store,
    pub auth: AuthSettings,
    /// Bearer token `/metrics` requires, if any.
    pub metrics_token: Option<Arc<str>>,
}

/// How logins behave.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthSettings {
    pub policy: SessionPolicy,
    /// Mark the session cookie `Secure` (serving over TLS, or behind a TLS proxy).
    pub secure_cookies: bool,
}

pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(lanes_app::App);
    let hub = state.hub.clone();
    let fleet_context = move || {
        let view: Arc<dyn lanes_app::ssr::FleetView> = hub.clone();
        provide_context(view);
    };
    Router::new()
        .merge(api::router())
        .merge(auth::router())
        .merge(tokens::router())
        .merge(admin::router())
        .merge(ws::router())
        .leptos_routes_with_context(&state, routes, fleet_context, {
            let options = state.leptos_options.clone();
            move || lanes_app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            lanes_app::shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_login,
        ))
        .layer(axum::middleware::from_fn(csrf::protect))
        .layer(CompressionLayer::new())
        .with_state(state)
}
