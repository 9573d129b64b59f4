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
                CliError::Unreachable(format!("cannot reach the server: {}", chain(inner)))
            }
            ClientError::Transport(inner) => CliError::Refused(chain(inner)),
            ClientError::WebSocket(inner) => {
                CliError::Unreachable(format!("the live connection failed: {inner}"))
            }
        }
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
