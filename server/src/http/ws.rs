//! `GET /api/v1/telemetry/ws`: the live telemetry channel. The first message is a snapshot of
//! the fleet and its recent history; then one tick message per poll. See docs/api.md.

use super::auth::MaybeUser;
use super::{ApiError, ApiQuery, AppState, Routes};
use crate::runtime::events::Woken;
use crate::telemetry::hub::Viewer;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use lanes_types::api;
use lanes_types::query::{TelemetryOnly, TelemetryQuery};
use lanes_types::{Area, TelemetryMessage};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// A client that cannot take a message within this time is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Close code 1008 (policy violation) tells a client it fell behind; it may reconnect.
const CLOSE_TOO_SLOW: u16 = 1008;
/// Close code 1001 (going away): the server is shutting down.
const CLOSE_GOING_AWAY: u16 = 1001;

pub fn routes() -> Routes {
    Routes::default().endpoint::<api::TelemetryWs, _, _>(upgrade)
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    MaybeUser(user): MaybeUser,
    ApiQuery(query): ApiQuery<TelemetryQuery>,
) -> Result<Response, ApiError> {
    let viewer = match user {
        Some(_) => Viewer::LoggedIn,
        None => Viewer::Anonymous,
    };
    let only_changes = query.only == Some(TelemetryOnly::Changes);
    if only_changes && viewer == Viewer::Anonymous {
        return Err(ApiError::Unauthenticated);
    }
    // Clients only send control frames, so a small read buffer (the default is 128 KiB per
    // connection, which dominates memory with many viewers). Writes go out message by message;
    // the cap bounds what one stuck client can pin, with room for a 64-card snapshot.
    Ok(ws
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(32 * 1024 * 1024)
        .max_message_size(64 * 1024)
        .on_upgrade(move |socket| serve(socket, state, viewer, only_changes)))
}

/// Which lists the events that woke a listener may have changed (all of them when it fell
/// behind).
fn areas(woken: &Woken) -> Vec<Area> {
    use crate::runtime::events::Event;
    let mut areas = Vec::new();
    for (area, concerns) in [
        (
            Area::Bookings,
            (|e| matches!(e, Event::CardsChanged(_) | Event::WatchChanged(_))) as fn(Event) -> bool,
        ),
        (Area::Jobs, |e| {
            matches!(
                e,
                Event::JobsChanged(_)
                    | Event::QueueChanged(_)
                    | Event::CardsChanged(_)
                    | Event::WatchChanged(_)
            )
        }),
        (Area::Queue, |e| {
            matches!(
                e,
                Event::QueueChanged(_) | Event::JobsChanged(_) | Event::CardsChanged(_)
            )
        }),
    ] {
        if woken.may_include(concerns) {
            areas.push(area);
        }
    }
    areas
}

/// Whether an event changes something a list shows (a queued message or a settings reload
/// does not).
fn shows_in_lists(event: crate::runtime::events::Event) -> bool {
    use crate::runtime::events::Event;
    !matches!(event, Event::OutboxChanged(_))
}

/// Sends one message, or gives up after [`SEND_TIMEOUT`]. `true` when it was sent.
async fn send(sink: &mut SplitSink<WebSocket, Message>, msg: Message) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, sink.send(msg)).await,
        Ok(Ok(()))
    )
}

async fn serve(socket: WebSocket, state: AppState, viewer: Viewer, only_changes: bool) {
    let (mut sink, mut stream) = socket.split();
    // A changes channel takes no ticks: a receiver it never read would pin the last frames.
    let mut ticks = (!only_changes).then(|| state.hub.subscribe(viewer));
    // Which lists changed goes to logged-in viewers who asked for it alone (`?only=changes`):
    // the fleet's channel stays what its clients read.
    let mut changes =
        (only_changes && viewer == Viewer::LoggedIn).then(|| state.store.events().subscribe());
    if !only_changes && !send(&mut sink, Message::Text(state.hub.snapshot_frame(viewer))).await {
        return;
    }
    let close = loop {
        tokio::select! {
            woken = async {
                match changes.as_mut() {
                    Some(listener) => listener.changed(shows_in_lists).await,
                    None => std::future::pending().await,
                }
            } => {
                let message = TelemetryMessage::Changed { areas: areas(&woken) };
                let text = serde_json::to_string(&message).unwrap_or_default();
                if !send(&mut sink, Message::Text(text.into())).await {
                    return;
                }
            }
            tick = async {
                match ticks.as_mut() {
                    Some(ticks) => ticks.recv().await,
                    None => std::future::pending().await,
                }
            } => match tick {
                Ok(frame) => {
                    if !send(&mut sink, Message::Text(frame)).await {
                        // Too slow or gone: drop it without a close handshake.
                        return;
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::info!(missed, "dropping a websocket client that fell behind");
                    break Some((CLOSE_TOO_SLOW, "client fell behind; reconnect for a fresh snapshot"));
                }
                Err(RecvError::Closed) => break Some((CLOSE_GOING_AWAY, "server shutting down")),
            },
            incoming = stream.next() => match incoming {
                // Clients have nothing to say; pings are answered by the protocol layer.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break None,
                Some(Ok(_)) => {}
            },
            _ = state.shutdown.cancelled() => break Some((CLOSE_GOING_AWAY, "server shutting down")),
            // A pool with no cards sends no ticks: the connection still shows it is alive.
            _ = tokio::time::sleep(super::KEEPALIVE) => {
                if !send(&mut sink, Message::Ping(Default::default())).await {
                    return;
                }
            }
        }
    };
    if let Some((code, reason)) = close {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = send(&mut sink, Message::Close(Some(frame))).await;
    }
}
