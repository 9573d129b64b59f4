//! `/sessions/ID/`: a member's notebook through the portal (HTTP and websockets), behind the
//! portal's own login, to the session's owner only.
//!
//! The request is checked here (a running session of the caller's, a path without `..`; the
//! login gate and the cross-site check before this already ran, so a websocket or a write from
//! another site never gets here) and then sent over the session's Unix socket with Jupyter's
//! token added. What the browser sent to authenticate to Lanes (its session cookie, a bearer
//! token) is not passed on, and the token is taken out of anything Jupyter answers in text, so
//! it never reaches a page: answers are streamed through a window as long as the token, so no
//! answer is ever held whole. An upgrade (a kernel's websocket) is passed through whole: both
//! sides are joined once Jupyter agrees, and bytes are copied until either closes.
//!
//! The socket is the member's own Jupyter's or nothing: it is not reached through a link (the
//! member owns its directory and could put one there, to a root-only daemon's socket), and the
//! process answering must run as the account that owns the session's directory (the kernel's
//! `SO_PEERCRED`), which is the job's.
//!
//! A notebook's pages run the member's code at the portal's origin, so only the member's own
//! browser opens them: an admin allowed to open members' notebooks does so with an API token
//! (no page of the member's then acts with the admin's cookie), never from their browser.

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
    // Admins only where the admin allows it, and never from their browser: the notebook's
    // pages run its owner's code at this origin, which would act with the admin's cookie.
    if job.user_id != user.id {
        if !(user.is_admin() && state.portal_settings().admins_open_sessions) {
            return Err(ApiError::Forbidden(
                format!("session {id} is another member's").into(),
            ));
        }
        if !request.headers().contains_key(header::AUTHORIZATION) {
            return Err(ApiError::Forbidden(
                format!(
                    "session {id} is another member's: its pages run their code, which in your \
                     browser would act as you; reach it with an API token instead \
                     (curl -H 'Authorization: Bearer …')"
                )
                .into(),
            ));
        }
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
    let stream = match connect_own(&socket).await {
        Ok(stream) => stream,
        Err(Connect::NotOwn(why)) => {
            tracing::warn!(session = id, %why, "a session's socket is not its own Jupyter's");
            return Err(ApiError::Conflict(
                format!("session {id} cannot be opened: {why}").into(),
            ));
        }
        Err(Connect::Io(e)) => return Err(unreachable(id, &socket, e)),
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
    // Asked for unencoded (`identity`): an encoded answer could carry the token unseen.
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(gone(
            id,
            &"it answered in an encoding the portal cannot check",
        ));
    }
    // Every answer, text or not, goes through the scrubber as it streams; its length may
    // shrink, so it is sent without one.
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(
        parts,
        Body::new(Scrubbed::new(body, token)),
    ))
}

/// Why the proxy will not talk to what sits at a session's socket.
enum Connect {
    NotOwn(String),
    Io(std::io::Error),
}

/// Connects to the member's own Jupyter at `socket`: the socket itself (not a link the member
/// put there), answered by a process of the account that owns the session's directory (the
/// server made it and gave it to the job's account; its parent is the server's, so the member
/// can neither replace nor re-own it).
async fn connect_own(socket: &std::path::Path) -> Result<tokio::net::UnixStream, Connect> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = socket
        .parent()
        .ok_or_else(|| Connect::NotOwn("no directory".into()))?;
    let owner = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => m.uid(),
        Ok(_) => return Err(Connect::NotOwn("its directory was replaced".into())),
        Err(e) => return Err(Connect::Io(e)),
    };
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => {
            return Err(Connect::NotOwn(
                "its socket was replaced by a link or a file".into(),
            ))
        }
        Err(e) => return Err(Connect::Io(e)),
    }
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(Connect::Io)?;
    let peer = stream.peer_cred().map_err(Connect::Io)?;
    if peer.uid() != owner {
        return Err(Connect::NotOwn(format!(
            "what answers there runs as uid {}, not as the session's account (uid {owner})",
            peer.uid()
        )));
    }
    Ok(stream)
}

/// A session's socket that cannot be reached: still starting, or gone.
fn unreachable(id: i64, socket: &std::path::Path, e: std::io::Error) -> ApiError {
    let starting_up = e.kind() == std::io::ErrorKind::ConnectionRefused
        || (e.kind() == std::io::ErrorKind::NotFound
            && socket.parent().is_some_and(|d| d.exists()));
    if starting_up {
        return starting(id, "Jupyter is starting");
    }
    tracing::debug!(session = id, error = %e, "a session's socket is not reachable");
    ApiError::Unavailable {
        message: format!("session {id} cannot be reached ({e}): it may have just ended"),
        retry_after_secs: 5,
    }
}

/// An answer's body with every occurrence of the token taken out as it streams: at most the
/// token's length less one byte is held back between chunks (a token split across two), so
/// an answer of any size passes in bounded memory, exactly as reading it whole would.
struct Scrubbed<B> {
    body: B,
    token: Vec<u8>,
    /// Bytes that may begin a token the next chunk completes.
    held: Vec<u8>,
    /// Trailers that came while bytes were held: they follow those bytes.
    trailers: Option<http_body::Frame<axum::body::Bytes>>,
    done: bool,
}

impl<B> Scrubbed<B> {
    fn new(body: B, token: String) -> Self {
        Self {
            body,
            token: token.into_bytes(),
            held: Vec::new(),
            trailers: None,
            done: false,
        }
    }

    /// Scrubs `held` + `chunk`: what is decided goes out, the undecided tail stays held.
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut input = std::mem::take(&mut self.held);
        input.extend_from_slice(chunk);
        let n = self.token.len();
        let mut out = Vec::with_capacity(input.len());
        let mut i = 0;
        while n > 0 && i + n <= input.len() {
            if input[i..].starts_with(&self.token) {
                i += n;
            } else {
                out.push(input[i]);
                i += 1;
            }
        }
        if n == 0 {
            return input;
        }
        self.held = input[i..].to_vec();
        out
    }
}

impl<B> http_body::Body for Scrubbed<B>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        loop {
            if let Some(trailers) = self.trailers.take() {
                return Poll::Ready(Some(Ok(trailers)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = self.feed(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(http_body::Frame::data(out.into()))));
                        }
                    }
                    // Trailers pass as they are, after what was held back.
                    Err(frame) => {
                        let held = std::mem::take(&mut self.held);
                        if held.is_empty() {
                            return Poll::Ready(Some(Ok(frame)));
                        }
                        self.trailers = Some(frame);
                        return Poll::Ready(Some(Ok(http_body::Frame::data(held.into()))));
                    }
                },
                Poll::Ready(None) => {
                    self.done = true;
                    let held = std::mem::take(&mut self.held);
                    if held.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(held.into()))));
                }
            }
        }
    }
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
    // Where the request came from is the portal's to know, not Jupyter's: every spelling.
    let forwarding: Vec<header::HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
        })
        .cloned()
        .collect();
    for name in forwarding {
        headers.remove(name);
    }
    // Unencoded answers only: the token is taken out of what Jupyter says, so it must be
    // readable as it passes.
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
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

    /// `body` with every occurrence of `token` taken out, read whole: what [`Scrubbed`] must
    /// give, however the body comes in chunks.
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
        for name in [
            "x-forwarded-for",
            "x-forwarded-host",
            "x-forwarded-proto",
            "x-real-ip",
            "forwarded",
        ] {
            h.insert(
                header::HeaderName::from_static(name),
                HeaderValue::from_static("evil"),
            );
        }
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        scrub_request(&mut h, "t0k", true);
        assert!(
            h.keys()
                .all(|k| !k.as_str().contains("forward") && k != "x-real-ip"),
            "{h:?}"
        );
        assert_eq!(h[header::COOKIE], "_xsrf=abc");
        assert_eq!(h[header::AUTHORIZATION], "token t0k");
        assert_eq!(h[header::HOST], "localhost");
        assert!(!h.contains_key(header::ORIGIN));
        assert_eq!(h[header::ACCEPT_ENCODING], "identity");
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
    fn a_streamed_answer_loses_every_token_wherever_its_chunks_split_holding_only_a_token_length() {
        let token = "t0ken-t0ken";
        let body = format!("a{token}b{token}{token}t0ken-c t0k").into_bytes();
        let whole = scrub_token(&body, token);
        for size in 1..body.len() {
            let mut s = Scrubbed::new((), token.to_string());
            let mut out = Vec::new();
            for chunk in body.chunks(size) {
                out.extend(s.feed(chunk));
                assert!(s.held.len() < token.len(), "held {} bytes", s.held.len());
            }
            out.extend(std::mem::take(&mut s.held));
            assert_eq!(out, whole, "chunks of {size}");
        }
        assert_eq!(whole, b"abt0ken-c t0k".to_vec());
    }

    #[tokio::test]
    async fn a_large_answer_streams_through_without_being_held_whole() {
        use http_body_util::BodyExt;
        let token = "x".repeat(48);
        let chunk = axum::body::Bytes::from(vec![b'a'; 64 << 10]);
        let chunks: Vec<Result<_, std::convert::Infallible>> = (0..256)
            .map(|_| Ok(http_body::Frame::data(chunk.clone())))
            .collect();
        let body = http_body_util::StreamBody::new(futures::stream::iter(chunks));
        let mut scrubbed = Scrubbed::new(body, token);
        let (mut total, mut largest) = (0usize, 0usize);
        while let Some(frame) = scrubbed.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            largest = largest.max(data.len());
            total += data.len();
        }
        assert_eq!(total, 256 * (64 << 10));
        assert!(largest <= (64 << 10) + 48, "a frame of {largest} bytes");
    }

    /// A listening socket at `path`, answering nothing.
    fn listen(path: &std::path::Path) -> std::os::unix::net::UnixListener {
        std::os::unix::net::UnixListener::bind(path).unwrap()
    }

    #[tokio::test]
    async fn only_the_sessions_own_socket_is_reached_never_a_link_nor_another_accounts() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        // A daemon's socket in a directory of its own, and a session's directory.
        let private = root.path().join("daemon");
        std::fs::create_dir(&private).unwrap();
        let _daemon = listen(&private.join("d.sock"));
        let session = root.path().join("session");
        std::fs::create_dir(&session).unwrap();
        let socket = session.join("jupyter.sock");

        // The member's own Jupyter (here: a socket of the directory owner's) is reached.
        let own = listen(&socket);
        assert!(connect_own(&socket).await.is_ok());
        drop(own);
        std::fs::remove_file(&socket).unwrap();

        // A link the member put in its place is refused, whatever it points to.
        std::os::unix::fs::symlink(private.join("d.sock"), &socket).unwrap();
        let Err(Connect::NotOwn(why)) = connect_own(&socket).await else {
            panic!("a link was followed");
        };
        assert!(why.contains("link"), "{why}");
        std::fs::remove_file(&socket).unwrap();

        // A socket answered by another account than the directory's owner is refused: as
        // root, the directory is given to another uid, as the runner gives it to the member.
        if nix::unistd::geteuid().is_root() {
            let _other = listen(&socket);
            std::os::unix::fs::chown(&session, Some(65534), None).unwrap();
            assert_eq!(std::fs::metadata(&session).unwrap().uid(), 65534);
            let Err(Connect::NotOwn(why)) = connect_own(&socket).await else {
                panic!("a socket answered by root was taken for the member's");
            };
            assert!(why.contains("uid 0"), "{why}");
        }
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
