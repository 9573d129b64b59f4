//! Monthly statements over HTTP: `GET /api/v1/statements?month=YYYY-MM&time_zone=…` (admins),
//! its tables as CSV (`/api/v1/statements.csv?table=projects|groups|users|jobs`), and a
//! member's own month (`GET /api/v1/me/usage?month=`), showing others' usage only as far as
//! the portal settings allow.

use super::auth::{AdminUser, CurrentUser};
use super::{ApiError, ApiQuery, AppState, Routes};
use crate::reports::Period;
use crate::statements::{self, Month, Table};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use lanes_types::api;
use lanes_types::statement::{self as st, MyUsage, Statement, StatementQuery};

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Statements, _, _>(statement)
        .endpoint::<api::StatementsCsv, _, _>(statement_csv)
        .endpoint::<api::MyUsageOfMonth, _, _>(my_usage)
        .endpoint::<api::Projects, _, _>(projects)
}

/// The projects (anyone signed in may book for one), and the caller's group's default.
async fn projects(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<st::ProjectChoices>, ApiError> {
    let portal = state.portal_settings();
    let default = (state.store.accounts())
        .group_project(&portal.group_projects, user.id)
        .await?;
    Ok(Json(st::ProjectChoices {
        projects: portal.projects,
        default,
    }))
}

/// The month a query asks for, in its zone (the lab's unless it names one).
async fn month_of(state: &AppState, q: &StatementQuery) -> Result<Month, ApiError> {
    let lab_zone = state.store.notifications().settings().await?.time_zone;
    let zone_name = q.time_zone.clone().unwrap_or(lab_zone);
    let zone: chrono_tz::Tz = zone_name.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "{zone_name:?} is not a time zone; use an IANA name such as Europe/Berlin"
        ))
    })?;
    let now = state.clock.now();
    let name = q.month.clone().unwrap_or_else(|| st::month_of(now, &zone));
    let (year, month) = st::parse_month(&name).map_err(ApiError::BadRequest)?;
    let (from, to) = st::month_bounds(year, month, &zone);
    let settings = state.portal_settings();
    Ok(Month {
        name,
        time_zone: zone_name,
        period: Period {
            from,
            to,
            now,
            only_user: None,
            idle_threshold_pct: state.policy().idle_threshold_pct,
            keep_minutes: chrono::Duration::from_std(state.history.retention.minute)
                .unwrap_or_default(),
            interval_s: state.hub.snapshot().interval_ms.max(1000) as f64 / 1000.0,
            energy_price_per_kwh: settings.energy_price_per_kwh,
            carbon_g_per_kwh: settings.carbon_g_per_kwh,
        },
        rates: settings.rates(),
    })
}

async fn statement(
    State(state): State<AppState>,
    _: AdminUser,
    ApiQuery(q): ApiQuery<StatementQuery>,
) -> Result<Json<Statement>, ApiError> {
    let month = month_of(&state, &q).await?;
    Ok(Json(statements::gather(&state.store, &month).await?))
}

async fn statement_csv(
    State(state): State<AppState>,
    _: AdminUser,
    ApiQuery(q): ApiQuery<StatementQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let table: Table = (q.table.as_deref().unwrap_or("projects"))
        .parse()
        .map_err(ApiError::BadRequest)?;
    let month = month_of(&state, &q).await?;
    let statement = statements::gather(&state.store, &month).await?;
    let name = format!(
        "lanes-statement-{}-{}.csv",
        statement.month,
        q.table.as_deref().unwrap_or("projects")
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        statements::csv(&statement, table),
    ))
}

async fn my_usage(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(q): ApiQuery<StatementQuery>,
) -> Result<Json<MyUsage>, ApiError> {
    if q.table.is_some() {
        return Err(ApiError::BadRequest(
            "table is for the statement's CSV".into(),
        ));
    }
    let month = month_of(&state, &q).await?;
    let statement = statements::gather(&state.store, &month).await?;
    let members: Vec<(String, String)> = {
        let names: std::collections::HashMap<i64, String> = (state.store.accounts().list().await?)
            .into_iter()
            .map(|u| (u.id, u.username))
            .collect();
        (state.store.accounts().memberships().await?)
            .into_iter()
            .filter_map(|(id, g)| Some((names.get(&id)?.clone(), g)))
            .collect()
    };
    let my_groups = state.store.accounts().groups_of(user.id).await?;
    let quota = state
        .store
        .quotas()
        .usage(state.clock.now())
        .await?
        .into_iter()
        .find(|u| u.kind == lanes_types::booking::QuotaHolder::User && u.name == user.username)
        .ok_or_else(|| ApiError::NotFound("no quota record for you".into()))?;
    Ok(Json(statements::mine(
        &statement,
        &user.username,
        &my_groups,
        &members,
        state.portal_settings().usage_visibility,
        quota,
    )))
}
