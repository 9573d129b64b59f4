//! Card health over HTTP: every card's verdict (`GET /api/v1/health`) and timeline
//! (`GET /api/v1/health/changes`) for anyone signed in; putting a card back in service
//! (`POST /api/v1/health/clear`, admins); on a simulated node only, injecting a fault
//! (`POST /api/v1/sim/faults`, admins), so every path is tried without a GPU.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiQuery, AppState, Routes};
use crate::usecases;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::api;
use lanes_types::booking::GpuRef;
use lanes_types::health::{CardHealth, ClearHealth, HealthChange, HealthChangesQuery, InjectFault};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::HealthOfCards, _, _>(cards)
        .endpoint::<api::HealthChanges, _, _>(changes)
        .endpoint::<api::ClearCardHealth, _, _>(clear)
        .endpoint::<api::InjectSimFault, _, _>(inject)
}

async fn cards(
    State(state): State<AppState>,
    _: CurrentUser,
) -> Result<Json<Vec<CardHealth>>, ApiError> {
    Ok(Json(
        usecases::health::cards(&state.store, &state.hub.gpus()).await?,
    ))
}

async fn changes(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiQuery(query): ApiQuery<HealthChangesQuery>,
) -> Result<Json<Vec<HealthChange>>, ApiError> {
    let limit = query.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit must be from 1 to 1000".into()));
    }
    let gpu = match (query.node, query.uuid) {
        (Some(node), Some(uuid)) => Some(GpuRef { node, uuid }),
        (None, None) => None,
        _ => {
            return Err(ApiError::BadRequest(
                "node and uuid name one card together: give both or neither".into(),
            ))
        }
    };
    Ok(Json(
        state
            .store
            .card_health()
            .changes(gpu.as_ref(), limit)
            .await
            .map_err(usecases::UseCaseError::from)?,
    ))
}

async fn clear(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<ClearHealth>,
) -> Result<StatusCode, ApiError> {
    usecases::health::clear(&state.store, &admin, &request, state.clock.now()).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn inject(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(fault): ApiJson<InjectFault>,
) -> Result<StatusCode, ApiError> {
    let cards = state.hub.local_gpus();
    usecases::health::inject_fault(
        &state.store,
        &admin,
        &state.processes,
        &cards,
        &fault,
        state.clock.now(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
