//! Read-only REST endpoints: health, the GPU list and Prometheus metrics.

use super::auth::MaybeUser;
use super::{ApiError, AppState, Routes};
use crate::metrics::CONTENT_TYPE;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use lanes_app::model::{anonymize, GpuState, HealthReport};

pub fn routes() -> Routes {
    Routes::default()
        .route("/healthz", get(healthz))
        .route("/api/v1/gpus", get(gpus))
        .route("/metrics", get(metrics))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/{*rest}", get(unknown_api).post(unknown_api))
}

async fn healthz(State(state): State<AppState>) -> Json<HealthReport> {
    let gpus = state.hub.gpus();
    Json(HealthReport {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        node: state.node.to_string(),
        gpu_source: state.source,
        gpus: gpus.len(),
        gpus_unhealthy: gpus.iter().filter(|g| !g.health.is_ok()).count(),
    })
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

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.hub.metrics().render(),
    )
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
