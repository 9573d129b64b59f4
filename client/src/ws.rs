//! The two websockets: the fleet's live telemetry and a job's live log.

use crate::{Client, ClientError, Result};
use futures::StreamExt;
use lanes_types::TelemetryMessage;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(client: &Client, path: &str) -> Result<Socket> {
    let request = client.ws_request(path)?;
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let status = reqwest::StatusCode::from_u16(status)
                .unwrap_or(reqwest::StatusCode::INTERNAL_SERVER_ERROR);
            Err(match serde_json::from_str(&body) {
                Ok(body) => ClientError::Api {
                    status,
                    body: Box::new(body),
                    retry_after: None,
                },
                Err(_) => ClientError::Unexpected {
                    status,
                    detail: body,
                },
            })
        }
        Err(e) => Err(ClientError::WebSocket(Box::new(e))),
    }
}

/// What a socket brought, protocol chatter (pings, binary) skipped.
enum Frame {
    Text(String),
    Close { code: u16, reason: String },
}

/// The next text or close frame; `None` when the connection ended without a close.
async fn next_frame(socket: &mut Socket) -> Option<Result<Frame>> {
    loop {
        return match socket.next().await? {
            Ok(Message::Text(text)) => Some(Ok(Frame::Text(text.to_string()))),
            Ok(Message::Close(frame)) => Some(Ok(Frame::Close {
                code: frame.as_ref().map_or(1005, |f| u16::from(f.code)),
                reason: frame.map(|f| f.reason.to_string()).unwrap_or_default(),
            })),
            Ok(_) => continue,
            Err(e) => Some(Err(ClientError::WebSocket(Box::new(e)))),
        };
    }
}

/// The telemetry channel: a snapshot first, then a tick per poll.
pub struct Telemetry {
    socket: Socket,
}

impl Telemetry {
    pub(crate) async fn connect(client: &Client, path: &str) -> Result<Self> {
        let socket = connect(client, path).await?;
        Ok(Self { socket })
    }

    /// The next message; `None` once the server closed the channel.
    pub async fn next(&mut self) -> Option<Result<TelemetryMessage>> {
        Some(match next_frame(&mut self.socket).await? {
            Ok(Frame::Text(text)) => {
                serde_json::from_str(&text).map_err(|e| ClientError::Unexpected {
                    status: reqwest::StatusCode::OK,
                    detail: format!("{e}: {text}"),
                })
            }
            Ok(Frame::Close { .. }) => return None,
            Err(e) => Err(e),
        })
    }
}

/// What a job's live log sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// Output, as it was written.
    Output(String),
    /// The server closed the tail: its close code and reason ("the job is over").
    Closed { code: u16, reason: String },
}

/// A job's log as it is written.
pub struct LogTail {
    socket: Socket,
}

impl LogTail {
    pub(crate) async fn connect(client: &Client, path: &str) -> Result<Self> {
        let socket = connect(client, path).await?;
        Ok(Self { socket })
    }

    /// The next piece of output or the close; `None` when the connection ended without one.
    pub async fn next(&mut self) -> Option<Result<LogEvent>> {
        Some(
            next_frame(&mut self.socket)
                .await?
                .map(|frame| match frame {
                    Frame::Text(text) => LogEvent::Output(text),
                    Frame::Close { code, reason } => LogEvent::Closed { code, reason },
                }),
        )
    }
}
