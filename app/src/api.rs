//! Server functions the pages call. Thin: each reads a port from context and returns wire types.

use lanes_types::FleetSnapshot;
use leptos::prelude::*;

/// The fleet now and its last five minutes, for the server-rendered dashboard. Anonymous
/// viewers (when an admin opened the dashboard) do not see process owners and commands.
#[server(prefix = "/api/fn", endpoint = "fleet")]
pub async fn get_fleet() -> Result<FleetSnapshot, ServerFnError> {
    let fleet = use_context::<std::sync::Arc<dyn crate::ssr::FleetView>>()
        .ok_or_else(|| ServerFnError::new("telemetry is not available"))?;
    let snapshot = fleet.snapshot();
    Ok(match crate::ssr::viewer() {
        Some(_) => snapshot,
        None => snapshot.anonymized(),
    })
}
