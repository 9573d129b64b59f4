//! `GET /api/v1/telemetry/ws`: the live telemetry channel. The first message is a snapshot of
//! the fleet and its recent history; then one tick message per poll. See docs/api.md.

use super::auth::MaybeUser;
use super::{AppState, Routes};
use crate::telemetry::hub::Viewer;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use lanes_types::api;
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
) -> Response {
    let viewer = match user {
        Some(_) => Viewer::LoggedIn,
        None => Viewer::Anonymous,
    };
    // Clients only send control frames, so a small read buffer (the default is 128 KiB per
    // connection, which dominates memory with many viewers). Writes go out message by message;
    // the cap bounds what one stuck client can pin, with room for a 64-card snapshot.
    ws.read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(32 * 1024 * 1024)
        .max_message_size(64 * 1024)
        .on_upgrade(move |socket| serve(socket, state, viewer))
}

/// Sends one message, or gives up after [`SEND_TIMEOUT`]. `true` when it was sent.
async fn send(sink: &mut SplitSink<WebSocket, Message>, msg: Message) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, sink.send(msg)).await,
        Ok(Ok(()))
    )
}

async fn serve(socket: WebSocket, state: AppState, viewer: Viewer) {
    let (mut sink, mut stream) = socket.split();
    let mut ticks = state.hub.subscribe(viewer);
    if !send(&mut sink, Message::Text(state.hub.snapshot_frame(viewer))).await {
        return;
    }
    let close = loop {
        tokio::select! {
            tick = ticks.recv() => match tick {
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
