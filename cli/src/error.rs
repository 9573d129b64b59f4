//! What a client command can fail on, and the exit status each gets: 2 for bad usage (or a
//! setup the client cannot use), 1 when the server refused, 3 when it cannot be reached.

use lanes_client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or values, or no login to use: the person has to change the command.
    #[error("{0}")]
    Usage(String),
    /// The server refused, or what was asked cannot be done here (its message, as given).
    #[error("{0}")]
    Refused(String),
    /// The server could not be reached.
    #[error("{0}")]
    Unreachable(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Refused(_) => 1,
            CliError::Unreachable(_) => 3,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Usage(message.into())
    }

    pub fn refused(message: impl Into<String>) -> Self {
        CliError::Refused(message.into())
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match &e {
            ClientError::Api { status, body, .. } => {
                let mut message = body.message.clone();
                if status.as_u16() == 401 {
                    message.push_str(" (log in again with `lanes login`)");
                }
                match &body.rule {
                    Some(rule) => message.push_str(&format!(" [{}: {rule}]", body.code)),
                    None => message.push_str(&format!(" [{}]", body.code)),
                }
                CliError::Refused(message)
            }
            ClientError::Unexpected { status, detail } => {
                CliError::Refused(format!("the server answered {status}: {detail}"))
            }
            ClientError::Transport(inner) if inner.status().is_none() => {
                CliError::Unreachable(unreachable(inner))
            }
            ClientError::Transport(inner) => CliError::Refused(chain(inner)),
            ClientError::WebSocket(inner) => {
                CliError::Unreachable(format!("the live connection failed: {inner}"))
            }
        }
    }
}

/// Why the portal could not be reached, in one sentence: where, and the root cause as a person
/// would say it (reqwest wraps "connection refused" in three layers of its own words).
fn unreachable(e: &lanes_client::reqwest::Error) -> String {
    let at = e.url().map_or("the portal".to_string(), |url| {
        let host = url.host_str().unwrap_or("?");
        match url.port_or_known_default() {
            Some(port) => format!("{}://{host}:{port}", url.scheme()),
            None => format!("{}://{host}", url.scheme()),
        }
    });
    if e.is_timeout() {
        return format!(
            "{at} did not answer in time: is the server busy, or is the address wrong?"
        );
    }
    let mut io_kind = None;
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut root = e.to_string();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            io_kind = Some(io.kind());
        }
        root = cause.to_string();
        source = cause.source();
    }
    let text = chain(e).to_ascii_lowercase();
    match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => format!(
            "nothing answers at {at} (connection refused): is `lanes serve` running there, and on that port?"
        ),
        _ if text.contains("dns error") || text.contains("failed to lookup address") => {
            let host = e.url().and_then(|u| u.host_str()).unwrap_or("?");
            format!("cannot find the host {host:?}: check the portal's address")
        }
        _ => format!("cannot reach {at}: {root}"),
    }
}

/// An error with its causes, as reqwest hides the useful part ("connection refused") in them.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

pub type Result<T, E = CliError> = std::result::Result<T, E>;
