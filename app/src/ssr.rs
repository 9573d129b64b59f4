//! Ports the server provides to server functions through Leptos context. The app names what it
//! needs; the `lanes-server` crate supplies the implementation.

use crate::model::FleetSnapshot;

/// Read access to the live fleet state kept by the telemetry poller.
pub trait FleetView: Send + Sync {
    fn snapshot(&self) -> FleetSnapshot;
}
