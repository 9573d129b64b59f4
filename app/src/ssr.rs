//! The app's side of the server: what the server provides to server functions through Leptos
//! context (the app names what it needs; `lanes-server` supplies it), and what the server
//! puts in a request for the render. The server uses the app through this module, `dates`,
//! `i18n`, `pages::preloads` and `App`/`shell`, never its components.

use lanes_types::FleetSnapshot;

/// The zone a request's times are drawn in (its `tz` cookie's), which the server's middleware
/// leaves in the request beside the language.
pub use crate::components::clock::ViewerZone;
/// The answers a page's data arrives with, which the server gathers before rendering it.
pub use crate::components::page_data::Answers as PageData;

/// Read access to the live fleet state kept by the telemetry poller.
pub trait FleetView: Send + Sync {
    fn snapshot(&self) -> FleetSnapshot;
}

/// The logged-in user of the request being served, which the login gate left in the request's
/// extensions; `None` for an anonymous viewer.
pub fn viewer() -> Option<lanes_types::account::User> {
    leptos::prelude::use_context::<http::request::Parts>().and_then(|parts| {
        parts
            .extensions
            .get::<lanes_types::account::User>()
            .cloned()
    })
}

/// The value of cookie `name` on the request being served.
pub fn cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}
