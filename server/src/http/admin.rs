//! Admin endpoints for accounts: `GET|POST /api/v1/users`, `PATCH /api/v1/users/{id}`,
//! `GET|POST /api/v1/groups`, `GET /api/v1/audit`.

use super::auth::AdminUser;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::accounts::{NewUser, UserPatch};
use crate::usecases::accounts;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use lanes_types::account::{AuditRecord, CreateGroup, CreateUser, Group, UserView};
use lanes_types::api;
use lanes_types::query::AuditQuery;

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Users, _, _>(list_users)
        .endpoint::<api::AddUser, _, _>(create_user)
        .endpoint::<api::UpdateUser, _, _>(update_user)
        .endpoint::<api::Groups, _, _>(list_groups)
        .endpoint::<api::AddGroup, _, _>(create_group)
        .endpoint::<api::Audit, _, _>(audit_log)
}

async fn list_users(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<UserView>>, ApiError> {
    let users = state.store.accounts().list().await?;
    let views = accounts::user_views(&state.store, users).await?;
    Ok(Json(
        views.into_iter().map(|v| unix_checked(&state, v)).collect(),
    ))
}

/// Marks whether this host has the account's Unix account, where this host runs jobs (a
/// portal without cards cannot tell: its nodes may have accounts it lacks). The account is
/// accepted either way: an admin may make the Lanes account first, or the directory may
/// bring the Unix one later; the page warns until it exists.
fn unix_checked(state: &AppState, mut view: UserView) -> UserView {
    if state.source != lanes_types::SourceKind::None {
        if let Some(account) = &view.user.unix_user {
            view.unix_account_found =
                Some(matches!(nix::unistd::User::from_name(account), Ok(Some(_))));
        }
    }
    view
}

async fn create_user(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<CreateUser>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    let new = NewUser {
        display_name: request
            .display_name
            .unwrap_or_else(|| request.username.clone()),
        username: request.username,
        email: request.email.filter(|e| !e.is_empty()),
        unix_user: request.unix_user.filter(|u| !u.is_empty()),
        role: request.role,
    };
    let view = accounts::create_user(
        &state.store,
        Some(&admin),
        new,
        request.password,
        state.clock.now(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(unix_checked(&state, view))))
}

async fn update_user(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<UserPatch>,
) -> Result<Json<UserView>, ApiError> {
    let view =
        accounts::update_user(&state.store, Some(&admin), id, patch, state.clock.now()).await?;
    Ok(Json(unix_checked(&state, view)))
}

async fn list_groups(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<Group>>, ApiError> {
    Ok(Json(state.store.accounts().groups().await?))
}

async fn create_group(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<CreateGroup>,
) -> Result<(StatusCode, Json<Group>), ApiError> {
    let group = accounts::create_group(&state.store, &admin, request, state.clock.now()).await?;
    Ok((StatusCode::CREATED, Json(group)))
}

async fn audit_log(
    State(state): State<AppState>,
    _: AdminUser,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<Vec<AuditRecord>>, ApiError> {
    super::check_times(&[query.from, query.to])?;
    let filter = crate::store::AuditFilter {
        limit: query.limit.unwrap_or(100).clamp(1, 1000),
        before: query.before,
        actor: query.actor.filter(|a| !a.is_empty()),
        action: query.action.filter(|a| !a.is_empty()),
        from: query.from,
        to: query.to,
    };
    Ok(Json(state.store.audit_log().page(&filter).await?))
}
