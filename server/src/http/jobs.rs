//! Jobs over HTTP: `POST|GET /api/v1/jobs`, `GET|DELETE /api/v1/jobs/{id}`,
//! `GET /api/v1/jobs/{id}/log`, and its live tail `GET /api/v1/jobs/{id}/log/ws`. A job runs as its booking's owner, so only the owner submits to
//! a booking; the owner and admins see a job, its log, and may cancel it.

use super::auth::{listing_owner, CurrentUser};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::jobs::mask::check_extra_env;
use crate::store::{AuditEntry, JobPlace, NewJob};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use chrono::Utc;
use lanes_app::model::account::User;
use lanes_app::model::job::{CreateJob, Job};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub fn routes() -> Routes {
    Routes::default()
        .route("/api/v1/jobs", get(list).post(submit))
        .route("/api/v1/jobs/{id}", get(show).delete(cancel))
        .route("/api/v1/jobs/{id}/log", get(log))
        .route("/api/v1/jobs/{id}/log/ws", get(tail))
}

/// How often the tail looks for new output.
const TAIL_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// Largest piece of log sent in one websocket message.
const TAIL_CHUNK: usize = 64 * 1024;

/// Most arguments, and longest argument, of a command.
const MAX_ARGS: usize = 1024;
const MAX_ARG_BYTES: usize = 64 * 1024;

async fn submit(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<CreateJob>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let now = Utc::now();
    let name = request.name.unwrap_or_default();
    let env = request.env.unwrap_or_default();
    check_command(&request.argv, &name, &env)?;
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
            &NewJob {
                user_id: user.id,
                name: &name,
                argv: &request.argv,
                cwd: request.cwd.as_deref(),
                env: &env,
                place: JobPlace::Booking(booking.id),
            },
            audit,
            now,
        )
        .await?;
    state.runner.wake();
    Ok((StatusCode::CREATED, Json(job)))
}

/// What every job needs, queued or booked: a command, a short name, allowed extra variables.
pub(super) fn check_command(
    argv: &[String],
    name: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), ApiError> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(ApiError::Unprocessable(
            "argv needs at least the command".into(),
        ));
    }
    if argv.len() > MAX_ARGS
        || argv
            .iter()
            .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
    {
        return Err(ApiError::Unprocessable(format!(
            "argv may have at most {MAX_ARGS} arguments of at most {MAX_ARG_BYTES} bytes, without NUL"
        )));
    }
    if name.chars().count() > crate::accounts::MAX_TEXT {
        return Err(ApiError::Unprocessable("the name is too long".into()));
    }
    check_extra_env(env).map_err(|e| ApiError::Unprocessable(e.to_string()))
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
    let Some(user_id) = listing_owner(&state, &user, query.user.as_deref()).await? else {
        return Ok(Json(Vec::new()));
    };
    Ok(Json(state.store.jobs(query.booking, user_id).await?))
}

/// The job, if `user` may see it: its owner or an admin.
pub(super) async fn visible(state: &AppState, user: &User, id: i64) -> Result<Job, ApiError> {
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
    let path = log_path(&state, id, &query)?;
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ApiError::Internal(e.to_string())),
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

fn log_path(state: &AppState, id: i64, query: &LogQuery) -> Result<PathBuf, ApiError> {
    let (stdout, stderr) = state.runner.log_paths(id);
    match query.stream.as_deref() {
        None | Some("stdout") => Ok(stdout),
        Some("stderr") => Ok(stderr),
        Some(other) => Err(ApiError::BadRequest(format!(
            "stream must be stdout or stderr, not {other:?}"
        ))),
    }
}

/// The log so far, then what the job writes as it writes it, in text messages; the server
/// closes the socket (code 1000) once the job is over and everything was sent.
async fn tail(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<LogQuery>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    // Who may see it first: a stranger learns nothing from how the upgrade would go.
    visible(&state, &user, id).await?;
    let path = log_path(&state, id, &query)?;
    let ws = ws.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    Ok(ws
        .read_buffer_size(4 * 1024)
        .max_message_size(4 * 1024)
        .on_upgrade(move |socket| follow(socket, state, id, path)))
}

async fn follow(mut socket: WebSocket, state: AppState, id: i64, path: PathBuf) {
    let mut offset: u64 = 0;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        // Read the state before the file, so output written just before the end is not missed.
        let over = match state.store.job(id).await {
            Ok(Some(job)) => job.state.is_over(),
            _ => true,
        };
        let sent = loop {
            let chunk = read_from(&path, offset).await;
            if chunk.is_empty() {
                break true;
            }
            offset += chunk.len() as u64;
            carry.extend_from_slice(&chunk);
            // Send whole UTF-8 characters; a split one waits for its rest.
            let valid = match std::str::from_utf8(&carry) {
                Ok(_) => carry.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => carry.len(),
            };
            let text = String::from_utf8_lossy(&carry[..valid]).into_owned();
            carry.drain(..valid);
            if socket.send(Message::Text(text.into())).await.is_err() {
                break false;
            }
        };
        if !sent {
            return;
        }
        if over {
            let frame = CloseFrame {
                code: 1000,
                reason: "the job is over".into(),
            };
            let _ = socket.send(Message::Close(Some(frame))).await;
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(TAIL_POLL) => {}
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            _ = state.shutdown.cancelled() => return,
        }
    }
}

/// Up to [`TAIL_CHUNK`] bytes of `path` from `offset` (nothing when there are none, or no file).
async fn read_from(path: &std::path::Path, offset: u64) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return Vec::new();
    };
    if file.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
        return Vec::new();
    }
    let mut buf = vec![0; TAIL_CHUNK];
    match file.read(&mut buf).await {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        Err(_) => Vec::new(),
    }
}

async fn cancel(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Job>, ApiError> {
    let job = visible(&state, &user, id).await?;
    let audit = AuditEntry::new(Some(user.id), "job.cancel", format!("job {id}"));
    if !state.queue.cancel(&job, &audit).await? {
        return Err(ApiError::Unprocessable("the job is already over".into()));
    }
    Ok(Json(visible(&state, &user, id).await?))
}
