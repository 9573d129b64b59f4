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

/// What a `GET` of this server's own API answers: its status and body.
pub type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = (u16, String)> + Send>>;

/// This server's REST API, asked in-process while a page is rendered, so that the page comes
/// with its data: the same routes a browser would call, with the page request's own cookie,
/// token and language, so a page can show nothing its viewer's API calls would not.
pub trait LocalApi: Send + Sync {
    /// `GET path` (`/api/v1/…`, with its query) on behalf of `request`.
    fn get(&self, path: &str, request: &http::request::Parts) -> Answer;
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
