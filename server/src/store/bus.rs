//! PostgreSQL as the pool's message bus and referee: LISTEN/NOTIFY carries events and ticks
//! between the nodes, and a session advisory lock makes one process the queue's leader. SQLite
//! has one process, so neither exists there.

use super::sql::lock;
use super::{Backend, Store, StoreError};
use sqlx::postgres::{PgConnection, PgListener};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Duration;

/// The database URL, which may hold a password: its Debug says nothing of it.
#[derive(Clone)]
pub(super) struct DatabaseUrl(pub(super) Arc<str>);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&super::redact(&self.0))
    }
}

/// The largest NOTIFY payload PostgreSQL takes is 8000 bytes; we stay under it.
pub const MAX_PAYLOAD: usize = 7900;

/// One message from another process.
#[derive(Clone, Debug)]
pub struct Notice {
    pub channel: String,
    pub payload: String,
}

/// This process's end of the bus: listening on channels (a connection of its own, which
/// reconnects by itself) and sending on them (through the pool).
pub struct Bus {
    listener: PgListener,
}

impl Bus {
    /// The next message on the channels listened to. `Ok(None)`: the connection dropped and
    /// came back, so messages may have been missed meanwhile.
    pub async fn recv(&mut self) -> Result<Option<Notice>, StoreError> {
        let notification = self.listener.try_recv().await.map_err(StoreError::from)?;
        Ok(notification.map(|n| Notice {
            channel: n.channel().to_string(),
            payload: n.payload().to_string(),
        }))
    }
}

/// The queue leader's claim: a session advisory lock on a connection of its own. PostgreSQL
/// gives the lock up the moment that session ends (the process died, or the server noticed
/// its connection dead: see `docs/multi-node.md` on keepalives), so another process takes over.
pub struct Leadership {
    url: DatabaseUrl,
    /// The connection the lock is tried and held on, kept between tries (a follower does not
    /// open a connection a second), and whether this process holds the lock on it.
    connection: Option<(PgConnection, bool)>,
}

/// How long a leader's check of its own connection may take before it steps down.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a follower waits in line for the lock in one statement (PostgreSQL's
/// `lock_timeout`): it is handed the lock the moment the leader's session ends, and asks again
/// only this often, so a follower costs its database one transaction in this long.
const WAIT_IN_LINE: Duration = Duration::from_secs(30);

impl Leadership {
    /// Tries to become the leader (or checks that it still is): `true` while this process
    /// holds the lock on a live connection.
    pub async fn hold(&mut self) -> bool {
        if self.connection.is_none() {
            match tokio::time::timeout(PING_TIMEOUT, connect_in_line(&self.url.0)).await {
                Ok(Ok(connection)) => self.connection = Some((connection, false)),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "could not connect to try the queue leader lock");
                    return false;
                }
                Err(_) => return false,
            }
        }
        let Some((connection, leading)) = &mut self.connection else {
            return false;
        };
        let answer = if *leading {
            tokio::time::timeout(PING_TIMEOUT, connection.ping())
                .await
                .map(|r| r.map(|()| true))
        } else {
            // Waits in line: PostgreSQL grants the lock when the leader's session ends.
            tokio::time::timeout(
                WAIT_IN_LINE + PING_TIMEOUT,
                sqlx::query("SELECT pg_advisory_lock($1)")
                    .bind(lock::QUEUE_LEADER)
                    .execute(&mut *connection),
            )
            .await
            .map(|r| r.map(|_| true))
        };
        match answer {
            Ok(Ok(now_leading)) => {
                *leading = now_leading;
                now_leading
            }
            // Still in line after WAIT_IN_LINE: the leader lives; the connection is fine.
            Ok(Err(sqlx::Error::Database(e))) if e.code().as_deref() == Some("55P03") => false,
            _ => {
                if *leading {
                    tracing::warn!("the queue leader lost its database connection; stepping down");
                }
                // A connection that failed is dropped; its session's lock goes with it.
                self.connection = None;
                false
            }
        }
    }
}

/// A connection for the leader lock whose lock waits end after [`WAIT_IN_LINE`].
async fn connect_in_line(url: &str) -> Result<PgConnection, sqlx::Error> {
    use sqlx::Connection;
    let mut connection = PgConnection::connect(url).await?;
    sqlx::query(&format!("SET lock_timeout = {}", WAIT_IN_LINE.as_millis()))
        .execute(&mut connection)
        .await?;
    Ok(connection)
}

impl Store {
    /// Listens on `channels` (PostgreSQL; `None` on SQLite, which has one process).
    pub async fn listen(&self, channels: &[&str]) -> Result<Option<Bus>, StoreError> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let mut listener = PgListener::connect(&url.0).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Some(Bus { listener }))
    }

    /// Sends `payload` (at most [`MAX_PAYLOAD`] bytes) to every process listening on `channel`.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload)
            .persistent(false)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The claim to the queue's leadership (PostgreSQL; `None` on SQLite, where this process
    /// is the only one and always leads).
    pub fn leadership(&self) -> Option<Leadership> {
        self.url.clone().map(|url| Leadership {
            url,
            connection: None,
        })
    }
}
