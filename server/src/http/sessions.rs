//! `/sessions/ID/`: a member's notebook through the portal (HTTP and websockets), behind the
//! portal's own login, to the session's owner only.
//!
//! The request is checked here (a running session of the caller's, a path without `..`; the
//! login gate and the cross-site check before this already ran, so a websocket or a write from
//! another site never gets here) and then sent over the session's Unix socket with Jupyter's
//! token added. What the browser sent to authenticate to Lanes (its session cookie, a bearer
//! token) is not passed on, and the token is taken out of anything Jupyter answers in text, so
//! it never reaches a page. An upgrade (a kernel's websocket) is passed through whole: both
//! sides are joined once Jupyter agrees, and bytes are copied until either closes.

use super::{ApiError, AppState, Routes};
use crate::accounts::session::COOKIE as COOKIE_NAME;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use hyper_util::rt::TokioIo;
use lanes_types::account::User;
use lanes_types::job::JobState;
use std::time::Duration;

/// Largest text answer whose token is taken out (a notebook's page, an API answer); larger
/// ones are streamed as they are (Jupyter never puts its token in them).
const SCRUBBED_MAX: usize = 8 << 20;
/// How long Jupyter may take to begin its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(120);

pub fn routes() -> Routes {
    Routes::default()
        .route("/sessions/{id}/", any(at_root))
        .route("/sessions/{id}/{*rest}", any(below))
}

async fn at_root(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    proxy(state, &id, request).await
}

async fn below(
    State(state): State<AppState>,
    Path((id, _)): Path<(String, String)>,
    request: Request,
) -> Response {
    proxy(state, &id, request).await
}

async fn proxy(state: AppState, id: &str, request: Request) -> Response {
    // A person's browser opening the session (not Jupyter's own calls): told in a page.
    let browser = request.method() == axum::http::Method::GET
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    match forward(state, id, request).await {
        Ok(response) => response,
        Err(e) if browser => page(&e),
        Err(e) => e.into_response(),
    }
}

/// A refusal as a page: one that waits for the session to start reloads itself.
fn page(e: &ApiError) -> Response {
    let message = html_escape::encode_text(&e.to_string()).into_owned();
    let waiting = matches!(e, ApiError::Unavailable { .. });
    let refresh = if waiting {
        r#"<meta http-equiv="refresh" content="2">"#
    } else {
        ""
    };
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
         <title>Lanes · notebook</title></head><body><main><h1>{}</h1><p>{message}</p>\
         <p><a href=\"/jobs\">Jobs</a></p></main></body></html>",
        if waiting {
            "Your notebook is starting…"
        } else {
            "This notebook cannot be opened"
        }
    );
    let mut response = (e.status(), axum::response::Html(body)).into_response();
    if waiting {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    }
    response
}

/// Whether `path` names something outside the session: a `.` or `..` segment, written plainly
/// or percent-encoded, or a backslash (which some servers read as a separator).
fn escapes(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "."
            || decoded == ".."
            || segment.contains('\\')
            || segment.to_ascii_lowercase().contains("%5c")
    })
}

async fn forward(state: AppState, id: &str, mut request: Request) -> Result<Response, ApiError> {
    let missing = || ApiError::NotFound(format!("there is no session {id}").into());
    let id: i64 = id.parse().map_err(|_| missing())?;
    if escapes(request.uri().path()) {
        return Err(ApiError::BadRequest(
            "a session's path may not contain . or .. segments".into(),
        ));
    }
    let user = request
        .extensions()
        .get::<User>()
        .cloned()
        .ok_or(ApiError::Unauthenticated)?;
    let job = state.store.jobs().get(id).await?.ok_or_else(missing)?;
    // Admins only where the admin allows it: a notebook runs its owner's code as them.
    let admitted =
        job.user_id == user.id || (user.is_admin() && state.portal_settings().admins_open_sessions);
    if !admitted {
        return Err(ApiError::Forbidden(
            format!("session {id} is another member's").into(),
        ));
    }
    if job.session.is_none() {
        return Err(ApiError::NotFound(
            format!("job {id} is a command, not a session: its log is at /jobs").into(),
        ));
    }
    match job.state {
        JobState::Running => {}
        JobState::Pending | JobState::Queued => {
            return Err(starting(id, "it waits for its booking's slot"));
        }
        _ => {
            return Err(ApiError::Conflict(
                format!(
                    "session {id} is over ({}): open a new one from the booking",
                    job.state.as_str()
                )
                .into(),
            ))
        }
    }
    // A notebook runs on its booking's node, and only that node's portal reaches its socket.
    if let Some(booking) = job.booking_id {
        let booking = state
            .store
            .bookings()
            .get(booking, state.clock.now())
            .await?;
        if let Some(node) = booking
            .as_ref()
            .and_then(|b| b.gpus.first())
            .map(|g| g.node.as_str())
            .filter(|node| *node != &*state.node)
        {
            return Err(ApiError::Conflict(
                format!(
                    "session {id} runs on node {node}; open it through {node}'s portal (this is {})",
                    state.node
                )
                .into(),
            ));
        }
    }
    let run = state.store.runs().log_dir(id).await?;
    let (socket, token) = run
        .and_then(|run| state.runner.session_endpoint(&run))
        .ok_or_else(|| starting(id, "it is being prepared"))?;
    let stream = match tokio::net::UnixStream::connect(&socket).await {
        Ok(stream) => stream,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && socket.parent().is_some_and(|d| d.exists()) =>
        {
            return Err(starting(id, "Jupyter is starting"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(starting(id, "Jupyter is starting"));
        }
        Err(e) => {
            tracing::debug!(session = id, error = %e, "a session's socket is not reachable");
            return Err(ApiError::Unavailable {
                message: format!("session {id} cannot be reached ({e}): it may have just ended"),
                retry_after_secs: 5,
            });
        }
    };
    let upgrade = wants_upgrade(request.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    scrub_request(&mut parts.headers, &token, upgrade);
    let outgoing = axum::http::Request::from_parts(parts, body);

    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| gone(id, &e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "a session's connection ended badly");
        }
    });
    let mut response = tokio::time::timeout(ANSWER_WAIT, sender.send_request(outgoing))
        .await
        .map_err(|_| gone(id, &"no answer within 120 s"))?
        .map_err(|e| gone(id, &e))?;

    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_side) = client_side else {
            return Err(gone(id, &"it switched protocols unasked"));
        };
        let session_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let (Ok(client), Ok(session)) = (client_side.await, session_side.await) else {
                return;
            };
            let (mut client, mut session) = (TokioIo::new(client), TokioIo::new(session));
            let _ = tokio::io::copy_bidirectional(&mut client, &mut session).await;
        });
        let (parts, _) = response.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }

    let (mut parts, body) = response.into_parts();
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    keep_portal_cookie(&mut parts.headers);
    let textual = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/") || t.contains("json") || t.contains("javascript"));
    let length = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let encoded = parts.headers.contains_key(header::CONTENT_ENCODING);
    if textual && !encoded && length.is_none_or(|l| l <= SCRUBBED_MAX) {
        use http_body_util::BodyExt;
        let bytes = http_body_util::Limited::new(body, SCRUBBED_MAX)
            .collect()
            .await
            .map_err(|e| gone(id, &e))?
            .to_bytes();
        let scrubbed = scrub_token(&bytes, &token);
        parts.headers.remove(header::CONTENT_LENGTH);
        return Ok(Response::from_parts(parts, Body::from(scrubbed)));
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Headers that belong to one connection, not to the request or answer passed on.
const HOP_BY_HOP: [header::HeaderName; 6] = [
    header::CONNECTION,
    header::HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
];

fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// What goes to Jupyter: the request without what authenticated it to Lanes (the portal's
/// cookie, a bearer token) or told where it came from (checked already; Jupyter would compare
/// it with its own host), with Jupyter's token, as a request to a local Jupyter.
fn scrub_request(headers: &mut HeaderMap, token: &str, upgrade: bool) {
    for name in HOP_BY_HOP {
        if !(upgrade && name == header::CONNECTION) {
            headers.remove(name);
        }
    }
    for name in [header::ORIGIN, header::REFERER, header::AUTHORIZATION] {
        headers.remove(name);
    }
    headers.remove(header::HeaderName::from_static("x-forwarded-for"));
    let cookies: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.split('=').next() != Some(COOKIE_NAME))
        .map(str::to_string)
        .collect();
    headers.remove(header::COOKIE);
    if !cookies.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&cookies.join("; ")) {
            headers.insert(header::COOKIE, value);
        }
    }
    headers.insert(header::HOST, HeaderValue::from_static("localhost"));
    if let Ok(value) = HeaderValue::from_str(&format!("token {token}")) {
        headers.insert(header::AUTHORIZATION, value);
    }
}

/// Drops any cookie Jupyter (the member's code) would set under the portal's own cookie's name:
/// the portal's login is not the session's to replace.
fn keep_portal_cookie(headers: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|v| {
            v.to_str()
                .ok()
                .and_then(|c| c.split('=').next())
                .is_none_or(|name| name.trim() != COOKIE_NAME)
        })
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for value in kept {
        headers.append(header::SET_COOKIE, value);
    }
}

/// `body` with every occurrence of `token` taken out.
fn scrub_token(body: &[u8], token: &str) -> Vec<u8> {
    let needle = token.as_bytes();
    if needle.is_empty() || body.len() < needle.len() {
        return body.to_vec();
    }
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i..].starts_with(needle) {
            i += needle.len();
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    out
}

fn starting(id: i64, why: &str) -> ApiError {
    ApiError::Unavailable {
        message: format!("session {id} is not ready yet: {why}; try again in a moment"),
        retry_after_secs: 2,
    }
}

fn gone(id: i64, e: &dyn std::fmt::Display) -> ApiError {
    ApiError::Unavailable {
        message: format!("session {id} did not answer: {e}"),
        retry_after_secs: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_climb_out_of_a_session_are_told_apart_from_its_own() {
        for path in [
            "/sessions/5/../../admin",
            "/sessions/5/%2e%2e/%2E%2E/admin",
            "/sessions/5/api/./contents",
            "/sessions/5/..%5c..%5cadmin",
            "/sessions/5/a\\b",
        ] {
            assert!(escapes(path), "{path}");
        }
        for path in [
            "/sessions/5/",
            "/sessions/5/lab/tree/a..b.ipynb",
            "/sessions/5/api/kernels/1/channels",
            "/sessions/5/static/.hidden",
        ] {
            assert!(!escapes(path), "{path}");
        }
    }

    #[test]
    fn the_portals_credentials_stay_here_and_jupyters_token_goes_instead() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{COOKIE_NAME}=secret; _xsrf=abc")).unwrap(),
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer lanes-token"),
        );
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://lanes.lab"),
        );
        h.insert(header::HOST, HeaderValue::from_static("lanes.lab"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        scrub_request(&mut h, "t0k", true);
        assert_eq!(h[header::COOKIE], "_xsrf=abc");
        assert_eq!(h[header::AUTHORIZATION], "token t0k");
        assert_eq!(h[header::HOST], "localhost");
        assert!(!h.contains_key(header::ORIGIN));
        assert_eq!(h[header::CONNECTION], "Upgrade");
        scrub_request(&mut h, "t0k", false);
        assert!(!h.contains_key(header::CONNECTION));
    }

    #[test]
    fn jupyter_cannot_replace_the_portals_login_cookie() {
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_str(&format!("{COOKIE_NAME}=evil; Path=/")).unwrap(),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("_xsrf=abc; Path=/sessions/5/"),
        );
        keep_portal_cookie(&mut h);
        let left: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(left, ["_xsrf=abc; Path=/sessions/5/"]);
    }

    #[test]
    fn the_token_is_taken_out_of_text() {
        assert_eq!(
            scrub_token(br#"{"token": "abc", "x": "abcabc"}"#, "abc"),
            br#"{"token": "", "x": ""}"#.to_vec()
        );
        assert_eq!(scrub_token(b"ab", "abc"), b"ab".to_vec());
    }
}
