//! Server functions the pages call. Thin: each reads a port from context and returns wire types.

use crate::model::FleetSnapshot;
use leptos::prelude::*;

/// The fleet now and its last five minutes, for the server-rendered dashboard.
#[server(prefix = "/api/fn", endpoint = "fleet")]
pub async fn get_fleet() -> Result<FleetSnapshot, ServerFnError> {
    let fleet = use_context::<std::sync::Arc<dyn crate::ssr::FleetView>>()
        .ok_or_else(|| ServerFnError::new("telemetry is not available"))?;
    Ok(fleet.snapshot())
}
