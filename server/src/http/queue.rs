//! The job queue over HTTP: `POST|GET /api/v1/queue`, `DELETE /api/v1/queue/{id}`,
//! `POST /api/v1/queue/forecast` (when would it start?),
//! `GET|PUT /api/v1/queue/settings` and `GET|PUT /api/v1/shares` (changes: admins only).
//! Everyone logged in sees the queue (who waits, for what, why); commands only their owners
//! and admins.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiPath, AppState, Routes};
use crate::usecases::{self, jobs::CancelScope};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::api;
use lanes_types::queue::{
    ForecastRequest, QueueForecast, QueueSettings, QueueView, QueuedJob, Shares, SubmitJob,
};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Queue, _, _>(list)
        .endpoint::<api::Enqueue, _, _>(submit)
        .endpoint::<api::ForecastStart, _, _>(forecast)
        .endpoint::<api::Dequeue, _, _>(cancel)
        .endpoint::<api::QueueSettingsNow, _, _>(settings)
        .endpoint::<api::SaveQueueSettings, _, _>(save_settings)
        .endpoint::<api::SharesNow, _, _>(shares)
        .endpoint::<api::SaveShares, _, _>(save_shares)
}

async fn submit(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<SubmitJob>,
) -> Result<(StatusCode, Json<QueuedJob>), ApiError> {
    let settings = state.queue.settings();
    let cards = state.hub.gpus();
    let job = usecases::jobs::submit_to_queue(
        &state.store,
        &user,
        request,
        (&settings, &state.portal_settings()),
        &cards,
        state.clock.now(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(usecases::queue::job_view(&job, &user, None, &[])),
    ))
}

async fn forecast(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<ForecastRequest>,
) -> Result<Json<QueueForecast>, ApiError> {
    let answer = usecases::queue::forecast(
        &state.store,
        &state.queue,
        &user,
        request,
        &state.hub.gpus(),
        state.portal_settings().booking_horizon_days,
        state.clock.now(),
    )
    .await?;
    Ok(Json(answer))
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<QueueView>, ApiError> {
    let view = usecases::queue::view(&state.store, &state.queue, &user, state.clock.now()).await?;
    Ok(Json(view))
}

async fn cancel(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<QueuedJob>, ApiError> {
    let job = usecases::jobs::cancel(&state.store, &state.queue, &user, id, CancelScope::QueueJob)
        .await?;
    Ok(Json(usecases::queue::job_view(&job, &user, None, &[])))
}

async fn settings(
    State(state): State<AppState>,
    CurrentUser(_): CurrentUser,
) -> Json<QueueSettings> {
    Json(state.queue.settings())
}

async fn save_settings(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(settings): ApiJson<QueueSettings>,
) -> Result<Json<QueueSettings>, ApiError> {
    let saved = usecases::settings::save_queue_settings(&state.queue, &admin, settings).await?;
    Ok(Json(saved))
}

async fn shares(State(state): State<AppState>, CurrentUser(_): CurrentUser) -> Json<Shares> {
    Json(state.queue.shares())
}

async fn save_shares(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(shares): ApiJson<Shares>,
) -> Result<Json<Shares>, ApiError> {
    let saved = usecases::settings::save_shares(&state.queue, &admin, shares).await?;
    Ok(Json(saved))
}
