//! Usage reports over HTTP: `GET /api/v1/reports/usage` (JSON) and
//! `GET /api/v1/reports/usage.csv?table=users|groups|bookings|jobs|unix_users`, and what active
//! bookings' cards drew so far (`GET /api/v1/bookings/energy`). Admins see everyone; members
//! see their own rows and bookings.

use super::auth::CurrentUser;
use super::{ApiError, ApiQuery, AppState, Routes};
use crate::reports::{self, Table};
use crate::store::BookingFilter;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use lanes_types::account::User;
use lanes_types::api;
use lanes_types::query::ReportQuery;
use lanes_types::report::{BookingEnergyNow, UsageReport, MJ_PER_KWH};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Usage, _, _>(usage)
        .endpoint::<api::UsageCsv, _, _>(usage_csv)
        .endpoint::<api::BookingEnergy, _, _>(active_energy)
}

/// Every active booking's energy so far: what its cards drew since its start, minute by
/// minute as the history writer adds them (a few seconds behind the cards).
async fn active_energy(
    State(state): State<AppState>,
    CurrentUser(_user): CurrentUser,
) -> Result<Json<Vec<BookingEnergyNow>>, ApiError> {
    let now = state.clock.now();
    let filter = BookingFilter {
        from: Some(now),
        to: Some(now + chrono::Duration::milliseconds(1)),
        ..Default::default()
    };
    let mut active = state.store.bookings().list(&filter, now).await?;
    active.retain(|b| b.state == lanes_types::booking::BookingState::Active);
    let Some(first) = active.iter().map(|b| b.start).min() else {
        return Ok(Json(Vec::new()));
    };
    // The minute in progress counts: its start is before the end bound.
    let energy = state
        .store
        .usage()
        .booking_energy(first.timestamp(), now.timestamp() + 60)
        .await?;
    Ok(Json(
        active
            .iter()
            .map(|b| BookingEnergyNow {
                booking_id: b.id,
                energy_kwh: energy.get(&b.id).map_or(0.0, |e| e.energy_mj / MJ_PER_KWH),
            })
            .collect(),
    ))
}

/// Longest period a report may cover.
const MAX_DAYS: i64 = 3660;

async fn report(state: &AppState, viewer: &User, q: &ReportQuery) -> Result<UsageReport, ApiError> {
    let now = state.clock.now();
    super::check_times(&[q.from, q.to])?;
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or_else(|| {
        to.checked_sub_signed(chrono::Duration::days(7))
            .unwrap_or(to)
    });
    if from >= to || to - from > chrono::Duration::days(MAX_DAYS) {
        return Err(ApiError::BadRequest(format!(
            "from must be before to, at most {MAX_DAYS} days apart"
        )));
    }
    let settings = state.portal_settings();
    Ok(reports::gather(
        &state.store,
        &reports::Period {
            from,
            to,
            now,
            only_user: (!viewer.is_admin()).then_some(viewer.id),
            idle_threshold_pct: state.policy().idle_threshold_pct,
            keep_minutes: chrono::Duration::from_std(state.history.retention.minute)
                .unwrap_or_default(),
            interval_s: state.hub.snapshot().interval_ms.max(1000) as f64 / 1000.0,
            energy_price_per_kwh: settings.energy_price_per_kwh,
            carbon_g_per_kwh: settings.carbon_g_per_kwh,
        },
    )
    .await?)
}

async fn usage(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(q): ApiQuery<ReportQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    Ok(Json(report(&state, &user, &q).await?))
}

async fn usage_csv(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(q): ApiQuery<ReportQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let table: Table = q
        .table
        .as_deref()
        .unwrap_or("users")
        .parse()
        .map_err(ApiError::BadRequest)?;
    let report = report(&state, &user, &q).await?;
    let name = format!(
        "lanes-{}-{}-{}.csv",
        q.table.as_deref().unwrap_or("users"),
        report.from.format("%Y%m%d"),
        report.to.format("%Y%m%d")
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        reports::csv(&report, table),
    ))
}
