//! Ports the server provides to server functions through Leptos context. The app names what it
//! needs; the `lanes-server` crate supplies the implementation.

use lanes_types::FleetSnapshot;

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
