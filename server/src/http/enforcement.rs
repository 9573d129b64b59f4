//! Enforcement over HTTP: the admin policy (`GET|PUT /api/v1/policy`), unbooked use
//! (`GET /api/v1/violations`: everything for admins, their own for others), and, on a simulated
//! node only, injecting a process no one booked (`POST /api/v1/sim/processes`, admins), so demos
//! and tests can watch the watchdog work.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiQuery, AppState, Routes};
use crate::usecases::{self, listing_owner};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::api;
use lanes_types::enforcement::{Policy, Violation};
use lanes_types::query::{InjectProcess, Injected, ViolationQuery};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::PolicyNow, _, _>(read_policy)
        .endpoint::<api::SavePolicy, _, _>(replace_policy)
        .endpoint::<api::TestLabChannel, _, _>(test_lab_channel)
        .endpoint::<api::Violations, _, _>(violations)
        .endpoint::<api::InjectSimProcess, _, _>(inject)
}

async fn read_policy(State(state): State<AppState>, _: AdminUser) -> Json<Policy> {
    Json(state.policy().redacted())
}

async fn replace_policy(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(policy): ApiJson<Policy>,
) -> Result<Json<Policy>, ApiError> {
    let saved = usecases::settings::save_policy(
        &state.store,
        &admin,
        policy,
        &state.policy,
        state.clock.now(),
    )
    .await?;
    Ok(Json(saved.redacted()))
}

/// `POST /api/v1/policy/channel-test`: a test to the lab's channel now, and the answer.
async fn test_lab_channel(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(test): ApiJson<lanes_types::notify::ChannelTest>,
) -> Result<Json<lanes_types::notify::ChannelAnswer>, ApiError> {
    let saved = state.policy();
    let saved = usecases::notify::SavedHook {
        url: saved.webhook_url,
        format: saved.webhook_format,
        secret: saved.webhook_secret,
    };
    Ok(Json(
        usecases::notify::channel_test(
            &state.store,
            &admin,
            None,
            saved,
            test,
            state.own_url(),
            state.clock.now(),
        )
        .await?,
    ))
}

async fn violations(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(query): ApiQuery<ViolationQuery>,
) -> Result<Json<Vec<Violation>>, ApiError> {
    let limit = query.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit must be from 1 to 1000".into()));
    }
    let Some(user_id) = listing_owner(&state.store, &user, query.user.as_deref()).await? else {
        return Ok(Json(Vec::new()));
    };
    Ok(Json(
        state
            .store
            .enforcement()
            .violations(None, user_id, query.open, limit)
            .await?,
    ))
}

async fn inject(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<InjectProcess>,
) -> Result<(StatusCode, Json<Injected>), ApiError> {
    let cards = state.hub.gpus();
    let injected = usecases::settings::inject_process(
        &state.store,
        &admin,
        &state.processes,
        &cards,
        request,
        state.clock.now(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(injected)))
}
