//! Jobs over HTTP: `POST|GET /api/v1/jobs`, `GET|DELETE /api/v1/jobs/{id}`,
//! `GET /api/v1/jobs/{id}/log`. A job runs as its booking's owner, so only the owner submits to
//! a booking; the owner and admins see a job, its log, and may cancel it.

use super::auth::CurrentUser;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::jobs::mask::check_extra_env;
use crate::store::AuditEntry;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use chrono::Utc;
use lanes_app::model::account::User;
use lanes_app::model::job::{CreateJob, Job};
use serde::Deserialize;

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/jobs", get(list).post(submit))
        .route("/api/v1/jobs/{id}", get(show).delete(cancel))
        .route("/api/v1/jobs/{id}/log", get(log))
}

/// Most arguments, and longest argument, of a command.
const MAX_ARGS: usize = 1024;
const MAX_ARG_BYTES: usize = 64 * 1024;

async fn submit(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<CreateJob>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let now = Utc::now();
    if request.argv.is_empty() || request.argv[0].is_empty() {
        return Err(ApiError::Unprocessable(
            "argv needs at least the command".into(),
        ));
    }
    if request.argv.len() > MAX_ARGS
        || request
            .argv
            .iter()
            .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
    {
        return Err(ApiError::Unprocessable(format!(
            "argv may have at most {MAX_ARGS} arguments of at most {MAX_ARG_BYTES} bytes, without NUL"
        )));
    }
    let name = request.name.unwrap_or_default();
    if name.chars().count() > crate::accounts::MAX_TEXT {
        return Err(ApiError::Unprocessable("the name is too long".into()));
    }
    let env = request.env.unwrap_or_default();
    check_extra_env(&env).map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let booking = state
        .store
        .booking(request.booking_id, now)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such booking".into()))?;
    if booking.user_id != user.id {
        return Err(ApiError::Forbidden(
            "jobs run as the booking's owner, so only they may submit to it".into(),
        ));
    }
    if !booking.state.holds_cards() {
        return Err(ApiError::Unprocessable(format!(
            "the booking is {}; jobs go into upcoming or active bookings",
            booking.state.as_str()
        )));
    }
    let audit = AuditEntry::new(Some(user.id), "job.submit", "").detail(format!(
        "booking {}: {}",
        booking.id,
        request.argv.join(" ")
    ));
    let job = state
        .store
        .create_job(
            booking.id,
            user.id,
            &name,
            &request.argv,
            request.cwd.as_deref(),
            &env,
            audit,
            now,
        )
        .await?;
    state.runner.wake();
    Ok((StatusCode::CREATED, Json(job)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub booking: Option<i64>,
    /// A username; others than admins only ever see their own jobs.
    pub user: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Vec<Job>>, ApiError> {
    let user_id = match (&query.user, user.is_admin()) {
        (Some(name), true) => match state.store.user_by_username(name).await? {
            Some(u) => Some(u.id),
            None => return Ok(Json(Vec::new())),
        },
        (None, true) => None,
        (_, false) => Some(user.id),
    };
    Ok(Json(state.store.jobs(query.booking, user_id).await?))
}

/// The job, if `user` may see it: its owner or an admin.
async fn visible(state: &AppState, user: &User, id: i64) -> Result<Job, ApiError> {
    let job = state
        .store
        .job(id)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such job".into()))?;
    if job.user_id != user.id && !user.is_admin() {
        return Err(ApiError::Forbidden(
            "only the job's owner or an admin may see or change it".into(),
        ));
    }
    Ok(job)
}

async fn show(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Job>, ApiError> {
    Ok(Json(visible(&state, &user, id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// `stdout` (default) or `stderr`.
    #[serde(default)]
    pub stream: Option<String>,
}

/// The job's output as text (empty before it starts).
async fn log(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> Result<impl IntoResponse, ApiError> {
    visible(&state, &user, id).await?;
    let (stdout, stderr) = state.runner.log_paths(id);
    let path = match query.stream.as_deref() {
        None | Some("stdout") => stdout,
        Some("stderr") => stderr,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "stream must be stdout or stderr, not {other:?}"
            )))
        }
    };
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ApiError::Internal(e.to_string())),
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

async fn cancel(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Job>, ApiError> {
    visible(&state, &user, id).await?;
    let audit = AuditEntry::new(Some(user.id), "job.cancel", format!("job {id}"));
    if !state.store.request_cancel(id, &audit, Utc::now()).await? {
        return Err(ApiError::Unprocessable("the job is already over".into()));
    }
    state.runner.wake();
    Ok(Json(visible(&state, &user, id).await?))
}
