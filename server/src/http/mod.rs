//! The HTTP surface: REST API, telemetry websocket, metrics, and the Leptos pages, on one axum
//! router. Handlers are thin; each area exports its own `router()`.

mod admin;
mod api;
pub mod auth;
mod bookings;
mod csrf;
mod directory;
pub use directory::AnonymousLimits;
mod enforcement;
mod error;
mod headers;
mod health;
mod history;
mod jobs;
pub mod language;
mod notify;
mod page_data;
mod queue;
mod reports;
pub mod serve;
mod sessions;
mod settings;
pub mod site;
mod statements;
mod text;
mod tokens;
mod ws;

pub use error::{check_times, ApiError, ApiJson, ApiPath, ApiQuery};

use crate::accounts::session::SessionPolicy;
use crate::store::Store;
use crate::telemetry::hub::Hub;
use axum::extract::FromRef;
use axum::routing::MethodRouter;
use axum::Router;
use lanes_types::account::PortalSettings;
use lanes_types::SourceKind;
use leptos::prelude::{provide_context, LeptosOptions};
use leptos_axum::{generate_route_list, AxumRouteListing, LeptosRoutes};
use std::net::IpAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tower_http::compression::CompressionLayer;

/// What every handler may need.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    /// The web assets, in memory.
    pub site: Arc<site::Site>,
    pub hub: Arc<Hub>,
    pub node: Arc<str>,
    pub source: SourceKind,
    /// Fires when the server begins to shut down, so long-lived connections end cleanly.
    pub shutdown: CancellationToken,
    pub store: Store,
    pub auth: AuthSettings,
    /// Bearer token `/metrics` requires, if any.
    pub metrics_token: Option<Arc<str>>,
    /// What admins changed at run time; read on every request, so kept in memory and written
    /// through to the store.
    pub portal: Arc<std::sync::RwLock<PortalSettings>>,
    /// Starts and stops jobs.
    pub runner: Arc<crate::jobs::runner::Runner>,
    /// Starts queued jobs on free cards.
    pub queue: Arc<crate::queue::Queue>,
    /// Enforcement policy; kept in memory for the watchdog and the notifier, written through.
    pub policy: Arc<std::sync::RwLock<lanes_types::enforcement::Policy>>,
    /// Signals and simulated-process control for the cards' processes.
    pub processes: crate::telemetry::Processes,
    /// Retention and flushing of the utilization history (queries pick resolutions by it).
    pub history: crate::history::HistorySettings,
    /// Wakes followers of a job's log file when it grows (`None` without inotify).
    pub log_watch: Option<crate::jobs::log_watch::LogWatch>,
    /// What time it is (the system's, except in tests).
    pub clock: crate::runtime::clock::Clock,
    /// Set once any account is seen to exist; until then an anonymous visitor is told how the
    /// first admin is made (asked of the store only while it is unset).
    pub has_accounts: Arc<std::sync::atomic::AtomicBool>,
    /// This node's own address, for links when the admins set no portal URL.
    pub own_url: Arc<String>,
    /// What anonymous callers may ask of the sign-in routes, per client address (starts
    /// keep a row and reach the provider; codes tried take the database's write turn).
    pub anonymous: Arc<directory::AnonymousLimits>,
}

impl AppState {
    pub fn own_url(&self) -> String {
        self.own_url.to_string()
    }

    pub fn portal_settings(&self) -> PortalSettings {
        self.portal
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn policy(&self) -> lanes_types::enforcement::Policy {
        self.policy
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// How logins behave.
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    pub policy: SessionPolicy,
    /// Mark the session cookie `Secure` (serving over TLS, or behind a TLS proxy).
    pub secure_cookies: bool,
    /// Reverse proxies whose `X-Forwarded-For` names the real client (for lockout and audit).
    pub trusted_proxies: Arc<[IpAddr]>,
    /// The lab's directory (OIDC provider, LDAP server), when configured.
    pub directory: Option<Arc<crate::directory::Directory>>,
    /// Where the OIDC provider sends browsers back (as registered there).
    pub oidc_redirect: Option<String>,
}

/// One area's routes, remembered by path so that the whole router can be enumerated (the
/// authorization matrix test walks it, so a new route without a rule fails that test).
#[derive(Default)]
pub struct Routes {
    router: Router<AppState>,
    paths: Vec<&'static str>,
}

impl Routes {
    /// A route that is not an API operation (a form, a link's page, the API's catch-all).
    pub fn route(mut self, path: &'static str, method_router: MethodRouter<AppState>) -> Self {
        self.router = self.router.route(path, method_router);
        self.paths.push(path);
        self
    }

    /// API operation `E` (declared in `lanes_types::api`), served by `handler`.
    pub fn endpoint<E, H, T>(self, handler: H) -> Self
    where
        E: lanes_types::api::Endpoint,
        H: axum::handler::Handler<T, AppState>,
        T: 'static,
    {
        use axum::routing::{delete, get, patch, post, put};
        use lanes_types::api::Method;
        let method_router = match E::METHOD {
            Method::Get => get(handler),
            Method::Post => post(handler),
            Method::Put => put(handler),
            Method::Patch => patch(handler),
            Method::Delete => delete(handler),
        };
        self.route(E::PATH, method_router)
    }
}

fn areas() -> [Routes; 17] {
    [
        api::routes(),
        auth::routes(),
        directory::routes(),
        tokens::routes(),
        admin::routes(),
        settings::routes(),
        bookings::routes(),
        jobs::routes(),
        queue::routes(),
        enforcement::routes(),
        health::routes(),
        history::routes(),
        reports::routes(),
        statements::routes(),
        notify::routes(),
        ws::routes(),
        sessions::routes(),
    ]
}

/// Every area's routes on one router: the REST API and the websockets, without the pages.
fn api_routes() -> Router<AppState> {
    areas()
        .into_iter()
        .fold(Router::new(), |router, area| router.merge(area.router))
}

/// Every path the router serves: the REST and websocket routes, the pages and the server
/// functions. Paths keep their `{param}` placeholders.
pub fn route_paths() -> Vec<String> {
    let mut paths: Vec<String> = areas()
        .iter()
        .flat_map(|area| area.paths.iter().map(|p| p.to_string()))
        .collect();
    paths.extend(page_routes().iter().map(|route| route.path().to_string()));
    paths.extend(leptos::server_fn::axum::server_fn_paths().map(|(path, _)| path.to_string()));
    paths.sort();
    paths.dedup();
    paths
}

/// How often a quiet websocket pings its client, well within the idle timeout.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// Refuses every change (503) while the database file is gone or replaced: it would be lost.
async fn refuse_writes_without_database(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    use axum::response::IntoResponse;
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !reads {
        if let Err(e) = state.store.check_file() {
            return ApiError::from(e).into_response();
        }
    }
    next.run(request).await
}

/// A span per request: its method and the route it matched (never the raw path, which may
/// hold ids and query strings with secrets); [`request_answered`] adds status and latency. What
/// handlers log inside it carries the request's fields.
fn request_span(request: &axum::extract::Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("(unrouted)", |path| path.as_str());
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    )
}

fn request_answered(
    response: &axum::response::Response,
    latency: std::time::Duration,
    span: &tracing::Span,
) {
    let status = response.status().as_u16();
    let latency_ms = latency.as_millis() as u64;
    span.record("status", status);
    span.record("latency_ms", latency_ms);
    tracing::debug!(status, latency_ms, "answered");
}

/// Everything no route took: an asset, or the app's "not found" page (a bare 404 for a missing
/// asset, which is some other build's and no page would help).
async fn asset_or_not_found(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = request.uri().path().to_string();
    if let Some(response) = state
        .site
        .respond(request.method(), &path, request.headers())
    {
        return response;
    }
    if path.starts_with("/pkg/") {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    }
    let options = state.leptos_options.clone();
    let render = leptos_axum::render_app_to_stream_with_context(
        {
            let state = state.clone();
            move || provide_context(state.clone())
        },
        move || lanes_app::shell(options.clone()),
    );
    let mut response = render(request).await;
    *response.status_mut() = axum::http::StatusCode::NOT_FOUND;
    response
}

/// The app's pages, listed once per process. Listing them runs the whole app with resource
/// loading suppressed process-wide (`leptos_router` sets a global flag for it): a page that
/// another router of the same process rendered meanwhile would wait for its data forever and
/// its stream would never end (leptos issue 4773). Listed once, before the first router
/// exists, no page can ever be rendered while the flag is up.
fn page_routes() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES
        .get_or_init(|| generate_route_list(lanes_app::App))
        .clone()
}

pub fn router(state: AppState) -> Router {
    let routes = page_routes();
    let hub = state.hub.clone();
    // A page that opens on a lazy route names that route's chunks in its head, so they load
    // beside the bundle rather than after it (what Leptos does when it finds the manifest on
    // disk; this server's assets are in memory).
    let split = leptos::WasmSplitManifest(leptos::prelude::ArcStoredValue::new((
        format!("/{}", state.site.pkg_dir()),
        state.site.split_manifest(),
        "__wasm_split.js".to_string(),
    )));
    let fleet_context = move || {
        let view: Arc<dyn lanes_app::ssr::FleetView> = hub.clone();
        provide_context(view);
        provide_context(split.clone());
    };
    api_routes()
        .leptos_routes_with_context(&state, routes, fleet_context, {
            let options = state.leptos_options.clone();
            move || lanes_app::shell(options.clone())
        })
        .fallback(asset_or_not_found)
        // Inside the login gate: only a viewer who may see the page has its data gathered.
        .layer(axum::middleware::from_fn_with_state(
            page_data::LocalApi::new(&state),
            page_data::gather,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_login,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refuse_writes_without_database,
        ))
        .layer(axum::middleware::from_fn(text::refuse_nul))
        .layer(axum::middleware::from_fn(csrf::protect))
        .layer(axum::middleware::from_fn(language::pick))
        .layer(axum::middleware::from_fn(headers::protect))
        .layer(CompressionLayer::new())
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(request_answered)
                .on_body_chunk(())
                .on_eos(())
                .on_failure(()),
        )
        .with_state(state)
}
