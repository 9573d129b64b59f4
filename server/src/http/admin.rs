//! Admin endpoints for accounts: `GET|POST /api/v1/users`, `PATCH /api/v1/users/{id}`,
//! `GET|POST /api/v1/groups`, `GET /api/v1/audit`.

use super::auth::{hash_password, AdminUser};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::accounts::{check_group_name, validate_patch, NewUser, User, UserPatch, MAX_TEXT};
use crate::audit::AuditAction;
use crate::store::AuditEntry;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, patch};
use axum::Json;
use lanes_types::account::{AuditRecord, CreateGroup, CreateUser, Group, UserView};
use lanes_types::query::AuditQuery;

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/users", get(list_users).post(create_user))
        .route("/api/v1/users/{id}", patch(update_user))
        .route("/api/v1/groups", get(list_groups).post(create_group))
        .route("/api/v1/audit", get(audit_log))
}

async fn views(state: &AppState, users: Vec<User>) -> Result<Vec<UserView>, ApiError> {
    let memberships = state.store.memberships().await?;
    Ok(users
        .into_iter()
        .map(|user| UserView {
            groups: memberships
                .iter()
                .filter(|(id, _)| *id == user.id)
                .map(|(_, g)| g.clone())
                .collect(),
            user,
        })
        .collect())
}

async fn list_users(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<UserView>>, ApiError> {
    let users = state.store.users().await?;
    Ok(Json(views(&state, users).await?))
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
    new.validate()?;
    let hash = hash_password(request.password).await?;
    let entry = AuditEntry::new(Some(admin.id), AuditAction::UserCreate, &new.username)
        .detail(format!("role {}", new.role));
    let user = state
        .store
        .create_user(&new, &hash, &entry, chrono::Utc::now())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(UserView {
            user,
            groups: Vec::new(),
        }),
    ))
}

async fn update_user(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<UserPatch>,
) -> Result<Json<UserView>, ApiError> {
    validate_patch(&patch)?;
    let hash = match patch.password.clone() {
        Some(password) => Some(hash_password(password).await?),
        None => None,
    };
    let mut changes = Vec::new();
    if let Some(role) = patch.role {
        changes.push(format!("role {role}"));
    }
    if let Some(enabled) = patch.enabled {
        changes.push(if enabled { "enabled" } else { "disabled" }.to_string());
    }
    if patch.password.is_some() {
        changes.push("password reset".into());
    }
    if let Some(groups) = &patch.groups {
        changes.push(format!("groups [{}]", groups.join(", ")));
    }
    let entry = AuditEntry::new(Some(admin.id), AuditAction::UserUpdate, id.to_string())
        .detail(changes.join("; "));
    let user = state
        .store
        .update_user(id, &patch, hash.as_deref(), &entry, chrono::Utc::now())
        .await?
        .ok_or_else(|| ApiError::NotFound("no such user".into()))?;
    let mut view = views(&state, vec![user]).await?;
    Ok(Json(view.remove(0)))
}

async fn list_groups(
    State(state): State<AppState>,
    _: AdminUser,
) -> Result<Json<Vec<Group>>, ApiError> {
    Ok(Json(state.store.groups().await?))
}

async fn create_group(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<CreateGroup>,
) -> Result<(StatusCode, Json<Group>), ApiError> {
    check_group_name(&request.name)?;
    if request.description.chars().count() > MAX_TEXT {
        return Err(ApiError::Unprocessable(format!(
            "description must be at most {MAX_TEXT} characters"
        )));
    }
    let entry = AuditEntry::new(Some(admin.id), AuditAction::GroupCreate, &request.name);
    let group = state
        .store
        .create_group(
            &request.name,
            &request.description,
            &entry,
            chrono::Utc::now(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(group)))
}

async fn audit_log(
    State(state): State<AppState>,
    _: AdminUser,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<Vec<AuditRecord>>, ApiError> {
    Ok(Json(
        state
            .store
            .recent_audit(query.limit.unwrap_or(100).clamp(1, 1000))
            .await?,
    ))
}
