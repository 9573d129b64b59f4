//! The job queue over HTTP: `POST|GET /api/v1/queue`, `DELETE /api/v1/queue/{id}`,
//! `GET|PUT /api/v1/queue/settings` and `GET|PUT /api/v1/shares` (changes: admins only).
//! Everyone logged in sees the queue (who waits, for what, why); commands only their owners
//! and admins.

use super::auth::{AdminUser, CurrentUser};
use super::jobs::visible;
use super::{ApiError, ApiJson, ApiPath, AppState, Routes};
use crate::audit::AuditAction;
use crate::store::AuditEntry;
use crate::usecases;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::Json;
use chrono::Utc;
use lanes_types::account::User;
use lanes_types::booking::GpuRef;
use lanes_types::job::{Job, QueueRequest};
use lanes_types::queue::{QueueSettings, QueueState, QueueView, QueuedJob, Shares, SubmitJob};
use std::collections::HashMap;

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/queue", get(list).post(submit))
        .route("/api/v1/queue/{id}", delete(cancel))
        .route("/api/v1/queue/settings", get(settings).put(save_settings))
        .route("/api/v1/shares", get(shares).put(save_shares))
}

/// Ended jobs listed after the live ones.
const RECENT_ENDED: i64 = 50;

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
        &settings,
        &cards,
        Utc::now(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(view(&job, &user, None, &HashMap::new())),
    ))
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
) -> Result<Json<QueueView>, ApiError> {
    let jobs = state.store.queue_jobs(RECENT_ENDED).await?;
    let snapshot = state.queue.snapshot();
    let mut cards: HashMap<i64, Vec<GpuRef>> = HashMap::new();
    for job in &jobs {
        if let (Some(booking), false) = (job.booking_id, job.state.is_over()) {
            if let Some(b) = state.store.booking(booking, Utc::now()).await? {
                cards.insert(job.id, b.gpus);
            }
        }
    }
    let mut views: Vec<QueuedJob> = jobs
        .iter()
        .map(|job| {
            let mut v = view(job, &user, snapshot.waits.get(&job.id), &cards);
            if v.state == QueueState::Pending && v.reason.is_none() {
                v.reason = Some("waiting for the next scheduling pass".into());
            }
            v
        })
        .collect();
    // Running first, then waiting in the scheduler's order, then the ended, newest first.
    views.sort_by_key(|v| match v.state {
        QueueState::Running => (0, 0, v.id),
        QueueState::Pending => (1, v.position.unwrap_or(u32::MAX), v.id),
        _ => (2, 0, -v.id),
    });
    Ok(Json(QueueView {
        settings: state.queue.settings(),
        jobs: views,
        standings: state.queue.standings(Utc::now()).await?,
    }))
}

/// A job as the queue shows it to `viewer`.
fn view(
    job: &Job,
    viewer: &User,
    wait: Option<&crate::queue::Explained>,
    cards: &HashMap<i64, Vec<GpuRef>>,
) -> QueuedJob {
    let request = job.queue.unwrap_or(QueueRequest {
        gpus: 0,
        time_limit_s: 0,
        min_memory_bytes: None,
    });
    let state = QueueState::of(job);
    let mine = job.user_id == viewer.id || viewer.is_admin();
    QueuedJob {
        id: job.id,
        username: job.username.clone(),
        name: job.name.clone(),
        argv: if mine { job.argv.clone() } else { Vec::new() },
        gpus: request.gpus,
        time_limit_s: request.time_limit_s,
        min_memory_bytes: request.min_memory_bytes,
        state,
        submitted_at: job.created_at,
        started_at: job.started_at,
        ended_at: job.ended_at,
        cards: cards.get(&job.id).cloned().unwrap_or_default(),
        booking_id: job.booking_id,
        reason: wait.map(|w| w.reason.clone()),
        estimated_start: wait.and_then(|w| w.estimated_start),
        position: wait.and_then(|w| w.position),
        priority: wait.map(|w| w.priority),
        exit_code: job.exit_code,
        message: if mine {
            job.message.clone()
        } else {
            String::new()
        },
    }
}

async fn cancel(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<QueuedJob>, ApiError> {
    let job = visible(&state, &user, id).await?;
    if job.queue.is_none() {
        return Err(ApiError::NotFound("no such queue job".into()));
    }
    let audit = AuditEntry::new(Some(user.id), AuditAction::QueueCancel, format!("job {id}"));
    if !state.queue.cancel(&job, &audit).await? {
        return Err(ApiError::Unprocessable("the job is already over".into()));
    }
    let job = visible(&state, &user, id).await?;
    Ok(Json(view(&job, &user, None, &HashMap::new())))
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
    settings.check().map_err(ApiError::Unprocessable)?;
    let detail = serde_json::to_string(&settings).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QueueSettings, "queue").detail(detail);
    state.queue.save_settings(settings, &audit).await?;
    Ok(Json(state.queue.settings()))
}

async fn shares(State(state): State<AppState>, CurrentUser(_): CurrentUser) -> Json<Shares> {
    Json(state.queue.shares())
}

async fn save_shares(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(shares): ApiJson<Shares>,
) -> Result<Json<Shares>, ApiError> {
    shares.check().map_err(ApiError::Unprocessable)?;
    let detail = serde_json::to_string(&shares).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QueueShares, "shares").detail(detail);
    state.queue.save_shares(shares, &audit).await?;
    Ok(Json(state.queue.shares()))
}
