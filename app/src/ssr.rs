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
