//! Bookings over HTTP: `POST|GET /api/v1/bookings`, `GET|PATCH|DELETE /api/v1/bookings/{id}`,
//! `GET /api/v1/slots`;
//! admin: `GET|PUT /api/v1/quotas`, `GET /api/v1/quotas/use`, `POST /api/v1/maintenance`,
//! `DELETE /api/v1/maintenance/{id}`; everyone: `GET /api/v1/maintenance`, `GET /api/v1/me/quota`.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::store::BookingFilter;
use crate::usecases;
use crate::usecases::Said;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::api;
use lanes_types::booking::{
    Booking, CreateBooking, CreateMaintenance, ExtendBooking, FreeSlot, MaintenanceBlock, QuotaUse,
    Quotas,
};
use lanes_types::query::{BookingQuery, SlotQuery};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Book, _, _>(create)
        .endpoint::<api::Bookings, _, _>(list)
        .endpoint::<api::BookingById, _, _>(show)
        .endpoint::<api::ExtendBookingById, _, _>(extend)
        .endpoint::<api::WithdrawBooking, _, _>(withdraw)
        .endpoint::<api::ReclaimBooking, _, _>(reclaim)
        .endpoint::<api::Slots, _, _>(slots)
        .endpoint::<api::QuotasNow, _, _>(quotas)
        .endpoint::<api::SaveQuotas, _, _>(set_quotas)
        .endpoint::<api::QuotaUses, _, _>(quota_use)
        .endpoint::<api::MyQuota, _, _>(my_quota)
        .endpoint::<api::AddMaintenance, _, _>(add_maintenance)
        .endpoint::<api::Maintenance, _, _>(maintenance)
        .endpoint::<api::EndMaintenance, _, _>(end_maintenance)
        .endpoint::<api::MoveBookingCard, _, _>(move_card)
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiJson(request): ApiJson<CreateBooking>,
) -> Result<(StatusCode, Json<Booking>), ApiError> {
    let settings = state.portal_settings();
    let booking =
        usecases::bookings::book(&state.store, &actor, request, &settings, state.clock.now())
            .await?;
    Ok((StatusCode::CREATED, Json(booking)))
}

/// The earliest windows where the cards asked for are free, within the caller's quota.
async fn slots(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiQuery(query): ApiQuery<SlotQuery>,
) -> Result<Json<Vec<FreeSlot>>, ApiError> {
    super::check_times(&[query.from, query.to])?;
    let horizon = state.portal_settings().booking_horizon_days;
    let slots =
        usecases::bookings::find_slots(&state.store, &actor, query, horizon, state.clock.now())
            .await?;
    Ok(Json(slots))
}

async fn list(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiQuery(query): ApiQuery<BookingQuery>,
) -> Result<Json<Vec<Booking>>, ApiError> {
    let user_id = match &query.user {
        Some(name) => match state.store.accounts().by_username(name).await? {
            Some(user) => Some(user.id),
            None => return Ok(Json(Vec::new())),
        },
        None => None,
    };
    super::check_times(&[query.from, query.to])?;
    let filter = BookingFilter {
        from: query.from,
        to: query.to,
        user_id,
        gpu_uuid: query.gpu,
        include_cancelled: query.include_cancelled,
    };
    Ok(Json(
        state
            .store
            .bookings()
            .list(&filter, state.clock.now())
            .await?,
    ))
}

async fn show(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Booking>, ApiError> {
    state
        .store
        .bookings()
        .get(id, state.clock.now())
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound(Said::NoSuchBooking))
}

/// Cancels an upcoming booking or releases an active one.
async fn withdraw(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Booking>, ApiError> {
    let booking = usecases::bookings::withdraw(&state.store, &actor, id, state.clock.now()).await?;
    Ok(Json(booking))
}

async fn move_card(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<lanes_types::health::MoveCard>,
) -> Result<Json<Booking>, ApiError> {
    let booking =
        usecases::bookings::move_card(&state.store, &actor, id, &request, state.clock.now())
            .await?;
    Ok(Json(booking))
}

async fn reclaim(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Booking>, ApiError> {
    let booking = usecases::bookings::reclaim(&state.store, &actor, id, state.clock.now()).await?;
    Ok(Json(booking))
}

async fn extend(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    body: Result<ApiJson<ExtendBooking>, ApiError>,
) -> Result<Json<Booking>, ApiError> {
    let now = state.clock.now();
    let request = match body {
        Ok(ApiJson(request)) => request,
        Err(bad) => {
            // Who may change it first: others learn nothing from how their body would be judged.
            usecases::bookings::changeable(&state.store, &actor, id, now).await?;
            return Err(bad);
        }
    };
    let horizon = state.portal_settings().booking_horizon_days;
    let booking =
        usecases::bookings::extend(&state.store, &actor, id, request.end, horizon, now).await?;
    Ok(Json(booking))
}

async fn quotas(State(state): State<AppState>, _: AdminUser) -> Result<Json<Quotas>, ApiError> {
    Ok(Json(state.store.quotas().list().await?))
}

async fn set_quotas(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(quotas): ApiJson<Quotas>,
) -> Result<Json<Quotas>, ApiError> {
    let saved =
        usecases::settings::save_quotas(&state.store, &admin, quotas, state.clock.now()).await?;
    Ok(Json(saved))
}

async fn quota_use(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<QuotaUse>>, ApiError> {
    Ok(Json(state.store.quotas().usage(state.clock.now()).await?))
}

/// The caller's own limits and use, for the booking confirmation.
async fn my_quota(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<QuotaUse>, ApiError> {
    state
        .store
        .quotas()
        .usage(state.clock.now())
        .await?
        .into_iter()
        .find(|u| u.kind == lanes_types::booking::QuotaHolder::User && u.name == user.username)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound("no quota record for you".into()))
}

async fn add_maintenance(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<CreateMaintenance>,
) -> Result<(StatusCode, Json<MaintenanceBlock>), ApiError> {
    let block =
        usecases::settings::add_maintenance(&state.store, &admin, request, state.clock.now())
            .await?;
    Ok((StatusCode::CREATED, Json(block)))
}

async fn maintenance(
    State(state): State<AppState>,
    _: CurrentUser,
) -> Result<Json<Vec<MaintenanceBlock>>, ApiError> {
    Ok(Json(
        state
            .store
            .maintenance()
            .blocks(state.clock.now() - chrono::Duration::days(7))
            .await?,
    ))
}

async fn end_maintenance(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    usecases::settings::end_maintenance(&state.store, &admin, id, state.clock.now()).await?;
    Ok(StatusCode::NO_CONTENT)
}
