//! Jobs over HTTP: `POST|GET /api/v1/jobs`, `GET|DELETE /api/v1/jobs/{id}`,
//! `GET /api/v1/jobs/{id}/log`, and its live tail `GET /api/v1/jobs/{id}/log/ws`. A job runs as its booking's owner, so only the owner submits to
//! a booking; the owner and admins see a job, its log, and may cancel it.

use super::auth::CurrentUser;
use super::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, Routes};
use crate::store::{Backend, Stream};
use crate::usecases;
use crate::usecases::jobs::CancelScope;
use crate::usecases::listing_owner;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lanes_types::account::User;
use lanes_types::api;
use lanes_types::job::{CreateJob, Job};
use lanes_types::query::{JobQuery, LogQuery};
use std::path::PathBuf;

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Jobs, _, _>(list)
        .endpoint::<api::SubmitToBooking, _, _>(submit)
        .endpoint::<api::JobById, _, _>(show)
        .endpoint::<api::CancelJob, _, _>(cancel)
        .endpoint::<api::JobLog, _, _>(log)
        .endpoint::<api::JobLogWs, _, _>(tail)
}

/// How often a followed log is read again when nothing tells of new output: a copy kept by
/// another node, or a file where inotify is not available.
const TAIL_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// Largest piece of log sent in one websocket message.
const TAIL_CHUNK: usize = 64 * 1024;

async fn submit(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiJson(request): ApiJson<CreateJob>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let job =
        usecases::jobs::submit_to_booking(&state.store, &user, request, state.clock.now()).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiQuery(query): ApiQuery<JobQuery>,
) -> Result<Json<Vec<Job>>, ApiError> {
    let Some(user_id) = listing_owner(&state.store, &user, query.user.as_deref()).await? else {
        return Ok(Json(Vec::new()));
    };
    Ok(Json(state.store.jobs().list(query.booking, user_id).await?))
}

/// The job, if `user` may see it: its owner or an admin.
pub(super) async fn visible(state: &AppState, user: &User, id: i64) -> Result<Job, ApiError> {
    Ok(usecases::jobs::visible(&state.store, user, id).await?)
}

async fn show(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Job>, ApiError> {
    Ok(Json(visible(&state, &user, id).await?))
}

/// The type of a log's body.
const TEXT: [(header::HeaderName, &str); 1] = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];

/// Most lines `tail` may ask for.
const MAX_TAIL_LINES: u64 = 100_000;

/// The job's output as text (empty before it starts), streamed from the file: never read whole
/// into memory. A `Range: bytes=…` request gets that part (206); `tail=N` the last N lines.
async fn log(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<LogQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    visible(&state, &user, id).await?;
    let source = log_source(&state, id, wanted_stream(&query)?).await?;
    if query.tail.is_some_and(|n| n > MAX_TAIL_LINES) {
        return Err(ApiError::BadRequest(format!(
            "tail may ask for at most {MAX_TAIL_LINES} lines"
        )));
    }
    let opened = match &source {
        None => None,
        Some(LogSource::File(path)) => open_log(Some(path)).await?,
        Some(LogSource::Copied(stream)) => Some(copied_log(&state, id, *stream).await?),
    };
    let Some(mut file) = opened else {
        return Ok((TEXT, "").into_response());
    };
    let len = file
        .metadata()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .len();
    // What to send: the bytes from `from` on, `count` of them; `partial` for a 206.
    let (from, count, partial) = match (headers.get(header::RANGE), query.tail) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "ask for a Range or for tail, not both".into(),
            ))
        }
        (Some(value), None) => match value.to_str().ok().and_then(|v| byte_range(v, len)) {
            Some((first, last)) => (first, last - first + 1, true),
            None => {
                return Ok((
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    [(header::CONTENT_RANGE, format!("bytes */{len}"))],
                )
                    .into_response())
            }
        },
        (None, Some(lines)) => {
            let from = tail_offset(&mut file, len, lines)
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            (from, len - from, false)
        }
        (None, None) => (0, len, false),
    };
    stream_part(file, from, count, partial.then_some(len)).await
}

/// `count` bytes of `file` from `from` as a text body, read as it is sent; with `total`, as a
/// 206 part of a file that long.
async fn stream_part(
    mut file: tokio::fs::File,
    from: u64,
    count: u64,
    total: Option<u64>,
) -> Result<Response, ApiError> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    file.seek(std::io::SeekFrom::Start(from))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file.take(count)));
    let mut response = (TEXT, body).into_response();
    response.headers_mut().insert(
        header::ACCEPT_RANGES,
        header::HeaderValue::from_static("bytes"),
    );
    if let Some(total) = total {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        let last = (from + count).saturating_sub(1);
        if let Ok(value) = format!("bytes {from}-{last}/{total}").parse() {
            response.headers_mut().insert(header::CONTENT_RANGE, value);
        }
    }
    Ok(response)
}

/// The one byte range of a `Range` header (`bytes=A-B`, `bytes=A-`, `bytes=-N`) within a file
/// of `len` bytes, as first and last byte; `None` when it cannot be served.
pub fn byte_range(value: &str, len: u64) -> Option<(u64, u64)> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') || len == 0 {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let (first, last) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (len.saturating_sub(n), len - 1)
    } else {
        let first: u64 = a.parse().ok()?;
        let last = if b.is_empty() {
            len - 1
        } else {
            b.parse::<u64>().ok()?.min(len - 1)
        };
        (first, last)
    };
    (first <= last && first < len).then_some((first, last))
}

/// Where the last `lines` lines of the file begin, reading backwards a block at a time.
async fn tail_offset(file: &mut tokio::fs::File, len: u64, lines: u64) -> std::io::Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    if lines == 0 {
        return Ok(len);
    }
    const BLOCK: u64 = 64 * 1024;
    let mut end = len;
    // A final newline ends the last line; it does not start another.
    let mut newlines = 0u64;
    let mut skip_last = true;
    let mut buf = vec![0u8; BLOCK as usize];
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let n = (end - start) as usize;
        file.seek(std::io::SeekFrom::Start(start)).await?;
        file.read_exact(&mut buf[..n]).await?;
        for i in (0..n).rev() {
            if buf[i] == b'\n' {
                if skip_last && start + i as u64 == len - 1 {
                    continue;
                }
                newlines += 1;
                if newlines == lines {
                    return Ok(start + i as u64 + 1);
                }
            }
        }
        skip_last = false;
        end = start;
    }
    Ok(0)
}

/// Opens a log file for reading, never through a link; `None` when it does not exist (yet).
async fn open_log(path: Option<&std::path::Path>) -> Result<Option<tokio::fs::File>, ApiError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let opened = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .await;
    match opened {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        // O_NOFOLLOW met a link where the log file should be: somebody replaced it (the job
        // itself can, as its user). It is not followed, and the reader is told so.
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            tracing::warn!(path = %path.display(), "a job log was replaced by a link; not following it");
            Err(ApiError::Conflict(
                "this log was replaced by a link, which Lanes does not follow; the job's output \
                 is not available"
                    .into(),
            ))
        }
        Err(e) => Err(ApiError::Internal(format!(
            "cannot read the log {}: {e}",
            path.display()
        ))),
    }
}

/// The stream a query asks for (stdout unless it says stderr).
fn wanted_stream(query: &LogQuery) -> Result<Stream, ApiError> {
    match query.stream.as_deref() {
        None | Some("stdout") => Ok(Stream::Stdout),
        Some("stderr") => Ok(Stream::Stderr),
        Some(other) => Err(ApiError::BadRequest(format!(
            "stream must be stdout or stderr, not {other:?}"
        ))),
    }
}

/// Where a job's output is read from.
enum LogSource {
    /// The job ran here: its file.
    File(PathBuf),
    /// It ran on another node: the copy its node keeps in the database (`jobs::shipper`).
    Copied(Stream),
}

/// A job's stdout or stderr; `None` while the job has no log directory (not started).
async fn log_source(
    state: &AppState,
    id: i64,
    stream: Stream,
) -> Result<Option<LogSource>, ApiError> {
    let Some(dir) = state.store.runs().log_dir(id).await? else {
        return Ok(None);
    };
    let Some((out, err)) = state.runner.log_paths(&dir) else {
        return Ok(None);
    };
    // Log directories are made anew with a random name: one here is this job's.
    let here = out.parent().is_some_and(|d| d.exists());
    Ok(Some(if here || state.store.backend() == Backend::Sqlite {
        LogSource::File(match stream {
            Stream::Stdout => out,
            Stream::Stderr => err,
        })
    } else {
        LogSource::Copied(stream)
    }))
}

/// The database's copy of a log, in an unnamed temporary file, so that ranges and tails are
/// served from it as from a job's own file.
async fn copied_log(
    state: &AppState,
    id: i64,
    stream: Stream,
) -> Result<tokio::fs::File, ApiError> {
    use std::io::{Seek, Write};
    let bytes = state.store.job_logs().whole(id, stream).await?;
    let file = tokio::task::spawn_blocking(move || {
        let mut file = tempfile::tempfile()?;
        file.write_all(&bytes)?;
        file.rewind()?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(|e| ApiError::Internal(format!("cannot buffer a copied log: {e}")))?;
    Ok(tokio::fs::File::from_std(file))
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
    if query.tail.is_some() {
        return Err(ApiError::BadRequest(
            "the live log starts from the beginning; tail is for GET …/log".into(),
        ));
    }
    let stream = wanted_stream(&query)?;
    let ws = ws.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    Ok(ws
        .read_buffer_size(4 * 1024)
        .max_message_size(4 * 1024)
        .on_upgrade(move |socket| follow(socket, state, id, stream)))
}

/// How long a log copied from another node is still followed after its job is over: its
/// node copies the last output a moment later (`jobs::shipper`: within 2.4 s of a job's start
/// or end).
const COPY_SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// Sends a job's output as it arrives, then closes once the job is over and all of it went
/// out. It wakes when the log file grows (`jobs::log_watch`), when the store says a job started
/// or ended, for the keepalive, and for a copy kept by another node every [`TAIL_POLL`] (that
/// node copies it a few times a second); it reads the job's state only after an event.
async fn follow(mut socket: WebSocket, state: AppState, id: i64, stream: Stream) {
    // Subscribed before the first read: a start or end meanwhile is not missed.
    let mut events = state.store.events().subscribe();
    let mut offset: u64 = 0;
    let mut carry: Vec<u8> = Vec::new();
    let mut quiet_since = tokio::time::Instant::now();
    let mut source: Option<LogSource> = None;
    let mut grows: Option<crate::jobs::log_watch::Follower> = None;
    let mut over_since: Option<tokio::time::Instant> = None;
    let mut ended = job_over(&state, id).await;
    loop {
        // The job may start (and get its log directory) while someone watches; once it has
        // one, that directory is its for good.
        if source.is_none() {
            source = log_source(&state, id, stream).await.ok().flatten();
        }
        if let (Some(LogSource::File(path)), None, Some(watch)) =
            (&source, &grows, &state.log_watch)
        {
            // Followed before it is read, so output written meanwhile wakes the loop.
            grows = watch.follow(path).ok();
        }
        let over = match (&source, ended) {
            (Some(LogSource::Copied(_)), true) => {
                over_since
                    .get_or_insert_with(tokio::time::Instant::now)
                    .elapsed()
                    >= COPY_SETTLE
            }
            (_, ended) => ended,
        };
        let sent = loop {
            let chunk = match &source {
                None => break true,
                Some(LogSource::File(path)) => read_from(path, offset).await,
                Some(LogSource::Copied(stream)) => state
                    .store
                    .job_logs()
                    .from(id, *stream, offset, TAIL_CHUNK)
                    .await
                    .unwrap_or_default(),
            };
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
            quiet_since = tokio::time::Instant::now();
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
        // Without a watch on a file (not started yet, copied from another node, or no
        // inotify here), the file or the copy is read again after TAIL_POLL.
        let look_again = match (&source, &grows) {
            (Some(LogSource::File(_)), Some(_)) | (None, _) => None,
            _ => Some(TAIL_POLL),
        };
        let grown = async {
            match grows.as_mut() {
                Some(follower) => follower.changed().await,
                None => std::future::pending().await,
            }
        };
        let poll = async {
            match look_again {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = grown => {}
            () = poll => {}
            _ = events.changed(crate::runtime::events::Event::concerns_shipper) => {
                // A job started or ended (here or, relayed, elsewhere): read its state after
                // the event, before the file, so output written just before the end is sent.
                ended = job_over(&state, id).await;
            }
            // A quiet job still shows the connection alive (idle connections are closed),
            // and its state is read again then too, whatever events said.
            _ = tokio::time::sleep_until(quiet_since + super::KEEPALIVE) => {
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
                quiet_since = tokio::time::Instant::now();
                ended = job_over(&state, id).await;
            }
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            _ = state.shutdown.cancelled() => return,
        }
    }
}

/// Whether job `id` is over (or gone, or unreadable: a follower then stops).
async fn job_over(state: &AppState, id: i64) -> bool {
    match state.store.jobs().get(id).await {
        Ok(Some(job)) => job.state.is_over(),
        _ => true,
    }
}

/// Up to [`TAIL_CHUNK`] bytes of `path` from `offset` (nothing when there are none, or no file).
async fn read_from(path: &std::path::Path, offset: u64) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(Some(mut file)) = open_log(Some(path)).await else {
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
    let job =
        usecases::jobs::cancel(&state.store, &state.queue, &user, id, CancelScope::AnyJob).await?;
    Ok(Json(job))
}
