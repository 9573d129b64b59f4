//! Bookings over HTTP: `POST|GET /api/v1/bookings`, `GET|PATCH|DELETE /api/v1/bookings/{id}`;
//! admin: `GET|PUT /api/v1/quotas`, `GET /api/v1/quotas/use`, `POST /api/v1/maintenance`,
//! `DELETE /api/v1/maintenance/{id}`; everyone: `GET /api/v1/maintenance`, `GET /api/v1/me/quota`.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::audit::AuditAction;
use crate::bookings::{check_request, rules, BookingError, CardChoice, NewBooking};
use crate::store::{AuditEntry, BookingFilter};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::Json;
use chrono::Utc;
use lanes_types::account::User;
use lanes_types::booking::{
    Booking, CreateBooking, CreateMaintenance, ExtendBooking, MaintenanceBlock, QuotaUse, Quotas,
};
use lanes_types::query::BookingQuery;

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/bookings", post(create).get(list))
        .route(
            "/api/v1/bookings/{id}",
            get(show).patch(extend).delete(withdraw),
        )
        .route("/api/v1/quotas", get(quotas).put(set_quotas))
        .route("/api/v1/quotas/use", get(quota_use))
        .route("/api/v1/me/quota", get(my_quota))
        .route(
            "/api/v1/maintenance",
            post(add_maintenance).get(maintenance),
        )
        .route("/api/v1/maintenance/{id}", delete(end_maintenance))
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiJson(request): ApiJson<CreateBooking>,
) -> Result<(StatusCode, Json<Booking>), ApiError> {
    let now = Utc::now();
    let owner = match &request.user {
        Some(name) if name != &actor.username => {
            if !actor.is_admin() {
                return Err(ApiError::Forbidden(
                    "only admins may book for another user".into(),
                ));
            }
            state
                .store
                .user_by_username(name)
                .await?
                .filter(|u| u.enabled)
                .ok_or_else(|| ApiError::Unprocessable(format!("no enabled user named {name:?}")))?
        }
        _ => actor.clone(),
    };
    let cards = match (request.gpus, request.count) {
        (Some(uuids), None) => CardChoice::Named(uuids),
        (None, Some(count)) => CardChoice::Any(count),
        _ => {
            return Err(ApiError::Refused {
                code: "invalid",
                rule: "gpus_or_count",
                message: "give either `gpus` (a list of UUIDs) or `count`, not both".into(),
            })
        }
    };
    let new = NewBooking {
        owner: owner.clone(),
        cards,
        start: request.start,
        end: request.end,
        note: request.note,
        enforce_quota: !actor.is_admin(),
    };
    check_request(&new, now, state.portal_settings().booking_horizon_days)?;
    let mut detail = format!("{} → {}", new.start.to_rfc3339(), new.end.to_rfc3339());
    if owner.id != actor.id {
        detail.push_str(&format!("; for {}", owner.username));
    }
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingCreate, "").detail(detail);
    let booking = state.store.create_booking(&new, audit, now).await?;
    Ok((StatusCode::CREATED, Json(booking)))
}

async fn list(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiQuery(query): ApiQuery<BookingQuery>,
) -> Result<Json<Vec<Booking>>, ApiError> {
    let user_id = match &query.user {
        Some(name) => match state.store.user_by_username(name).await? {
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
    Ok(Json(state.store.bookings(&filter, Utc::now()).await?))
}

async fn show(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Booking>, ApiError> {
    state
        .store
        .booking(id, Utc::now())
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound("no such booking".into()))
}

/// The booking, if `actor` may change it: its owner or an admin.
async fn changeable(state: &AppState, actor: &User, id: i64) -> Result<Booking, ApiError> {
    let booking = state
        .store
        .booking(id, Utc::now())
        .await?
        .ok_or_else(|| ApiError::NotFound("no such booking".into()))?;
    if booking.user_id != actor.id && !actor.is_admin() {
        return Err(ApiError::Forbidden(
            "only the booking's owner or an admin may change it".into(),
        ));
    }
    Ok(booking)
}

/// Cancels an upcoming booking or releases an active one.
async fn withdraw(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Booking>, ApiError> {
    changeable(&state, &actor, id).await?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingWithdraw, "");
    Ok(Json(
        state.store.withdraw_booking(id, audit, Utc::now()).await?,
    ))
}

async fn extend(
    State(state): State<AppState>,
    CurrentUser(actor): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    body: Result<ApiJson<ExtendBooking>, ApiError>,
) -> Result<Json<Booking>, ApiError> {
    // Who may change it first: others learn nothing from how their body would be judged.
    changeable(&state, &actor, id).await?;
    let ApiJson(request) = body?;
    if let Some(job) = state.store.queue_job_of_booking(id).await? {
        // The scheduler sized this booking to the job's time limit; a longer one would let
        // the job run past the limit the admin set.
        return Err(ApiError::Refused {
            code: "invalid",
            rule: "queue_booking",
            message: format!(
                "this booking holds the cards of queue job {job}; it lasts the job's time limit and cannot be extended"
            ),
        });
    }
    let now = Utc::now();
    let horizon = state.portal_settings().booking_horizon_days;
    rules::check_end(request.end, now, horizon).map_err(BookingError::from)?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingExtend, "");
    Ok(Json(
        state
            .store
            .extend_booking(id, request.end, !actor.is_admin(), audit, now)
            .await?,
    ))
}

async fn quotas(State(state): State<AppState>, _: AdminUser) -> Result<Json<Quotas>, ApiError> {
    Ok(Json(state.store.quotas().await?))
}

async fn set_quotas(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(quotas): ApiJson<Quotas>,
) -> Result<Json<Quotas>, ApiError> {
    let all = std::iter::once(&quotas.default)
        .chain(quotas.groups.values())
        .chain(quotas.users.values());
    for quota in all {
        let negative = [
            quota.gpu_hours_per_week,
            quota.max_booking_hours,
            quota.max_days_ahead,
        ]
        .into_iter()
        .flatten()
        .any(|v| !v.is_finite() || v < 0.0);
        if negative {
            return Err(ApiError::Unprocessable(
                "quota values must be finite and not negative".into(),
            ));
        }
    }
    let detail = serde_json::to_string(&quotas).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QuotaUpdate, "quotas").detail(detail);
    state.store.save_quotas(&quotas, &audit, Utc::now()).await?;
    Ok(Json(state.store.quotas().await?))
}

async fn quota_use(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<QuotaUse>>, ApiError> {
    Ok(Json(state.store.quota_use(Utc::now()).await?))
}

/// The caller's own limits and use, for the booking confirmation.
async fn my_quota(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<QuotaUse>, ApiError> {
    state
        .store
        .quota_use(Utc::now())
        .await?
        .into_iter()
        .find(|u| u.kind == "user" && u.name == user.username)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound("no quota record for you".into()))
}

async fn add_maintenance(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<CreateMaintenance>,
) -> Result<(StatusCode, Json<MaintenanceBlock>), ApiError> {
    if request.gpus.is_empty() {
        return Err(ApiError::Unprocessable("name at least one GPU".into()));
    }
    let audit =
        AuditEntry::new(Some(admin.id), AuditAction::MaintenanceCreate, "").detail(format!(
            "{} → {}: {}",
            request.start.to_rfc3339(),
            request.end.to_rfc3339(),
            request.reason
        ));
    let block = state
        .store
        .create_maintenance(&request, audit, Utc::now())
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
            .maintenance_blocks(Utc::now() - chrono::Duration::days(7))
            .await?,
    ))
}

async fn end_maintenance(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    let audit = AuditEntry::new(
        Some(admin.id),
        AuditAction::MaintenanceDelete,
        format!("maintenance {id}"),
    );
    if state
        .store
        .delete_maintenance(id, &audit, Utc::now())
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no such maintenance block".into()))
    }
}
