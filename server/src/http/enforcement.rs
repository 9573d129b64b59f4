//! Enforcement over HTTP: the admin policy (`GET|PUT /api/v1/policy`), unbooked use
//! (`GET /api/v1/violations`: everything for admins, their own for others), and, on a simulated
//! node only, injecting a process no one booked (`POST /api/v1/sim/processes`, admins), so demos
//! and tests can watch the watchdog work.

use super::auth::{listing_owner, AdminUser, CurrentUser};
use super::{ApiError, ApiJson, ApiQuery, AppState, Routes};
use crate::audit::AuditAction;
use crate::store::AuditEntry;
use crate::telemetry::sim::ExtraProcess;
use crate::telemetry::Processes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Json;
use lanes_types::enforcement::{Policy, Violation};
use lanes_types::query::{InjectProcess, Injected, ViolationQuery};

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/policy", get(read_policy).put(replace_policy))
        .route("/api/v1/violations", get(violations))
        .route("/api/v1/sim/processes", post(inject))
}

async fn read_policy(State(state): State<AppState>, _: AdminUser) -> Json<Policy> {
    Json(state.policy())
}

async fn replace_policy(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(policy): ApiJson<Policy>,
) -> Result<Json<Policy>, ApiError> {
    if let Some(problem) = policy.problem() {
        return Err(ApiError::Unprocessable(problem));
    }
    // The webhook URL is a secret: the audit says whether there is one, not what it is.
    let detail =
        format!(
        "watchdog {}, grace {} s, {} exempt users, {} exempt commands, idle under {}% for {} s, \
         release {}, webhook {}",
        policy.watchdog.as_str(),
        policy.violation_grace_s,
        policy.exempt_users.len(),
        policy.exempt_commands.len(),
        policy.idle_threshold_pct,
        policy.idle_window_s,
        if policy.idle_release { "on" } else { "off" },
        if policy.webhook_url.is_some() { "set" } else { "none" },
    );
    let entry = AuditEntry::new(Some(admin.id), AuditAction::PolicyUpdate, "policy").detail(detail);
    state
        .store
        .save_policy(&policy, &entry, chrono::Utc::now())
        .await?;
    *state.policy.write().unwrap_or_else(|p| p.into_inner()) = policy.clone();
    Ok(Json(policy))
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
    let Some(user_id) = listing_owner(&state, &user, query.user.as_deref()).await? else {
        return Ok(Json(Vec::new()));
    };
    Ok(Json(
        state
            .store
            .violations(None, user_id, query.open, limit)
            .await?,
    ))
}

async fn inject(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(request): ApiJson<InjectProcess>,
) -> Result<(StatusCode, Json<Injected>), ApiError> {
    let Processes::Simulated(control) = &state.processes else {
        return Err(ApiError::NotFound(
            "this node reads real GPUs; processes can only be injected into a simulated fleet"
                .into(),
        ));
    };
    if !state.hub.gpus().iter().any(|g| g.info.uuid == request.gpu) {
        return Err(ApiError::Unprocessable(format!(
            "no simulated GPU {:?} on this node",
            request.gpu
        )));
    }
    let bad_name = |s: &str| s.is_empty() || s.len() > 32 || s.chars().any(char::is_control);
    if bad_name(&request.user) || bad_name(&request.command) || request.utilization_pct > 100 {
        return Err(ApiError::Unprocessable(
            "user and command are 1 to 32 printable characters; utilization_pct at most 100".into(),
        ));
    }
    let pid = control.inject(ExtraProcess {
        pid: 0,
        cards: vec![request.gpu.clone()],
        user: request.user.clone(),
        command: request.command.clone(),
        memory_bytes: request.memory_bytes,
        utilization_pct: request.utilization_pct,
    });
    let entry =
        AuditEntry::new(Some(admin.id), AuditAction::SimInject, format!("pid {pid}")).detail(
            format!("{} as {} on {}", request.command, request.user, request.gpu),
        );
    state.store.audit(&entry, chrono::Utc::now()).await?;
    Ok((StatusCode::CREATED, Json(Injected { pid })))
}
