//! Read-only REST endpoints: health, the GPU list and Prometheus metrics.

use super::auth::MaybeUser;
use super::{ApiError, AppState, Routes};
use crate::telemetry::metrics::CONTENT_TYPE;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use lanes_types::api;
use lanes_types::{anonymize, GpuState, HealthReport};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Health, _, _>(healthz)
        .endpoint::<api::Gpus, _, _>(gpus)
        .endpoint::<api::Nodes, _, _>(nodes)
        .endpoint::<api::Metrics, _, _>(metrics)
        .endpoint::<api::OpenApi, _, _>(openapi)
        .route("/api/v1/{*rest}", get(unknown_api).post(unknown_api))
}

/// Health for load balancers and monitoring: 200 when the database answers and is the file
/// Lanes opened, 503 otherwise (with the reason).
async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let gpus = state.hub.gpus();
    let database = state.store.health().await;
    let status = if database.is_ok() {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    let report = HealthReport {
        status: if database.is_ok() { "ok" } else { "error" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        node: state.node.to_string(),
        gpu_source: state.source,
        gpus: gpus.len(),
        gpus_unhealthy: gpus.iter().filter(|g| !g.health.is_ok()).count(),
        database: database.err().unwrap_or_else(|| "ok".into()),
        task_panics: crate::runtime::tasks::panics(),
    };
    (status, Json(report))
}

/// The cards now; anonymous viewers (an open dashboard) get them without process owners.
async fn gpus(State(state): State<AppState>, MaybeUser(user): MaybeUser) -> Json<Vec<GpuState>> {
    let mut gpus = state.hub.gpus();
    if user.is_none() {
        for gpu in &mut gpus {
            anonymize(&mut gpu.processes);
        }
    }
    Json(gpus)
}

/// Every node of the pool, as this portal last read them.
async fn nodes(State(state): State<AppState>) -> Json<Vec<lanes_types::NodeState>> {
    Json(state.hub.snapshot_without_history().nodes)
}

/// Prometheus metrics. When the operator set `--metrics-token`, only a scrape that presents it
/// (`Authorization: Bearer …`) gets them.
async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(expected) = &state.metrics_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(super::auth::bearer);
        if !given.is_some_and(|g| same_secret(g, expected)) {
            return Err(ApiError::Unauthenticated);
        }
    }
    let now = state.clock.now();
    let gauges = match state.store.reports().pool_gauges(now).await {
        Ok(gauges) => Some(gauges),
        Err(e) => {
            tracing::warn!("metrics: cannot read the pool's state: {e}");
            None
        }
    };
    let metrics = state.hub.metrics();
    metrics.record_pool(
        gauges.as_ref(),
        &state.hub.snapshot_without_history().nodes,
        now,
    );
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()))
}

/// Compares secrets in time that does not depend on where they differ (their hashes, so not on
/// their length either).
fn same_secret(given: &str, expected: &str) -> bool {
    use crate::accounts::session::hash_secret;
    let (a, b) = (hash_secret(given), hash_secret(expected));
    a.bytes()
        .zip(b.bytes())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The OpenAPI description of this API (docs/openapi.json, built into the binary).
async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../../../docs/openapi.json"),
    )
}

/// API paths answer in JSON even when unknown, instead of falling through to the HTML app.
async fn unknown_api() -> ApiError {
    ApiError::NotFound("no such API endpoint".into())
}
