//! All SQL lives here, for both backends (SQLite embedded, PostgreSQL shared; see `sql.rs` for
//! how one text serves both). Callers see domain types and [`StoreError`], never a driver type.

/// Declares a repository: a view of the store for one area, named `$name` and reached as
/// `store.$accessor()`. It borrows the shared handle (pool, write turn, events) and reads its
/// fields through `Deref`; a repository calls another through `self.store`.
macro_rules! repository {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<'s> {
            store: &'s super::Store,
        }

        impl std::ops::Deref for $name<'_> {
            type Target = super::Store;
            fn deref(&self) -> &super::Store {
                self.store
            }
        }

        impl super::Store {
            $(#[$doc])*
            pub fn $accessor(&self) -> $name<'_> {
                $name { store: self }
            }
        }
    };
}

mod accounts;
mod audit;
mod bookings;
mod bus;
mod conn;
mod copy;
mod directory;
mod enforcement;
mod file;
mod free;
mod health;
mod history;
mod inventory;
mod jobs;
mod lending;
mod links;
mod logs;
mod maintenance;
mod notify;
mod open;
mod outbox;
mod queue;
mod quotas;
mod reports;
mod runs;
mod sessions;
mod settings;
mod slots;
mod sql;
#[cfg(test)]
mod tests;
mod tokens;
mod usage;
mod writer;

use accounts::{UserRow, USER_COLUMNS};
use audit::insert_audit;
pub use audit::{AuditEntry, AuditFilter};
pub use bookings::BookingFilter;
pub use bus::{Bus, Leadership, Notice, MAX_PAYLOAD};
pub use copy::{TableCopy, TABLES};
pub use directory::FlowKind;
pub use enforcement::NewViolation;
pub use file::make_private;
pub use free::CardFilter;
pub use health::NewHealthChange;
pub use history::Bucket;
pub use inventory::{KnownGpu, NodeHolder, NodeRegistration, NodeRow};
pub use jobs::{JobEnd, JobPlace, JobProcess, JobToRun, NewJob, NewShell};
pub use lending::NewLoan;
pub use links::{Link, NewLink};
pub use logs::Stream;
pub use outbox::{Claimed, NewMessage};
pub use queue::{CardBlock, UsageSpan};
pub use reports::CardUse;
pub use reports::PoolGauges;
use sessions::end_sessions_of;
pub use sessions::AttemptStart;
use tokens::revoke_tokens_of;
pub use usage::{BookingEnergy, MinuteUse, ProcessTotal};

use crate::accounts::session::SessionPolicy;
use crate::accounts::{NewUser, Role, User, UserPatch};
use crate::audit::AuditAction;
use crate::runtime::events::{Change, Event, Events};
use chrono::{DateTime, Utc};
use lanes_types::account::{ApiToken, AuditRecord, Group, PortalSettings};
use lanes_types::GpuInfo;
use open::one_line;
pub use open::{redact, sqlite_file, MigrationState};
pub use sql::Backend;
use sql::{flag, lock, Stamp, Tx};
use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::Executor;
use sqlx::{AnyConnection, AnyPool};
use std::str::FromStr;
use std::time::Duration;

/// A time stored as Unix milliseconds.
fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// A time as it is stored: Unix milliseconds.
fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported database URL {0:?}: expected sqlite://PATH or postgres://HOST/DATABASE")]
    UnsupportedUrl(String),
    #[error("cannot open database {url}: {reason}")]
    Open { url: String, reason: String },
    #[error("database migration failed: {0}")]
    Migrate(String),
    #[error("{0}")]
    Conflict(String),
    /// The request names something that does not exist (a group, a user).
    #[error("{0}")]
    Invalid(String),
    /// The database cannot take writes now (its file vanished or was replaced, or the server
    /// does not answer).
    #[error("{0}")]
    Unavailable(String),
    /// The database failed a statement, or holds something this version cannot read. The
    /// driver's error, as text: no driver type leaves the store.
    #[error("database error: {0}")]
    Database(String),
    /// PostgreSQL's exclusion constraint refused a hold: another process booked one of the
    /// cards between this write's check and its insert. The store checks again (and then
    /// answers with the usual conflict); it leaves the store only if that keeps happening.
    #[error("another booking took one of these cards at the same moment; try again")]
    Overlap(String),
    /// A booking write the domain's rules refused (inside the write's transaction).
    #[error(transparent)]
    Refused(#[from] crate::bookings::BookingError),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            // The server went away or the pool could not reach it in time: the request may be
            // retried, nothing was half-written (the transaction did not commit).
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_) => {
                StoreError::Unavailable(format!("the database is unavailable: {e}"))
            }
            sqlx::Error::Database(d) if d.code().as_deref().is_some_and(is_gone) => {
                StoreError::Unavailable(format!("the database is unavailable: {d}"))
            }
            e => StoreError::Database(e.to_string()),
        }
    }
}

/// PostgreSQL error classes that mean "the server is going, gone or full", not "the statement
/// is wrong": admin shutdown, crash, cannot connect now, connection failures.
fn is_gone(code: &str) -> bool {
    // 53: insufficient resources (too many connections, disk full) passes too.
    code.starts_with("57P") || code.starts_with("08") || code.starts_with("53")
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(e.to_string())
    }
}

/// A stored value this version cannot read.
fn unreadable(what: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("unreadable stored value: {what}"))
}

#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// SQLite only: booking writes of this process take turns here before `BEGIN IMMEDIATE`.
    /// SQLite makes a writer that finds the database locked sleep and retry (1, 2, 5… up to
    /// 100 ms), which under concurrent load costs far more than the write; queueing in-process
    /// wakes the next writer the moment the last one commits. `BEGIN IMMEDIATE` still guards
    /// against other processes (`lanes user add`). PostgreSQL needs no such turn: its locks
    /// queue waiters themselves.
    writer: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// SQLite with a file: the thread that writes new bookings (see `writer.rs`). `None` on
    /// PostgreSQL and for an in-memory database, whose bookings are written through the pool.
    local_writer: Option<std::sync::Arc<writer::Writer>>,
    /// The database file this store opened, to notice it vanishing or being replaced.
    file: Option<std::sync::Arc<file::DbFile>>,
    /// Where committed writes say what they changed (see [`crate::runtime::events`]).
    events: Events,
    /// How long a node may stay silent before automatic choices leave its cards alone.
    node_timeout_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// PostgreSQL: where the store connected, for the connections that live outside the pool
    /// (the bus listener, the queue leader's lock). Never logged (its Debug is redacted).
    url: Option<bus::DatabaseUrl>,
}

/// `--node-timeout`'s default.
pub const DEFAULT_NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

impl Store {
    /// Which database this store runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Sets how long a node may stay silent before it counts as unreachable.
    pub fn set_node_timeout(&self, timeout: std::time::Duration) {
        self.node_timeout_ms.store(
            i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Heartbeats at or after this (Unix ms) are fresh: their nodes are up.
    pub(crate) fn fresh_since_ms(&self, now: DateTime<Utc>) -> i64 {
        now.timestamp_millis()
            - self
                .node_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This process's write turn (SQLite only: see [`Store::writer`]).
    async fn write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.backend {
            Backend::Sqlite => Some(self.writer.lock().await),
            Backend::Postgres => None,
        }
    }

    /// The bus this store's writes are announced on, once committed.
    pub fn events(&self) -> &Events {
        &self.events
    }

    fn emit(&self, event: Event) {
        self.events.emit(event);
    }

    /// A transaction for writing, refused while the database file is gone.
    async fn begin(&self) -> Result<Tx<'static>, StoreError> {
        self.check_file()?;
        Ok(self.pool.begin().await?)
    }

    /// A transaction that only reads, all of it from one snapshot, while writers go on: on
    /// PostgreSQL `REPEATABLE READ, READ ONLY`; on SQLite a deferred transaction, whose
    /// snapshot is taken at its first read (WAL mode). Several queries that must add up (a
    /// report's totals and their parts) read in one.
    async fn begin_snapshot(&self) -> Result<Tx<'static>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        Ok(tx)
    }

    /// A transaction that reads, then writes, and must not interleave with another such: on
    /// SQLite `BEGIN IMMEDIATE` (the write lock first, so no commit elsewhere can stale its
    /// snapshot); on PostgreSQL an advisory lock held to the end of the transaction.
    async fn begin_immediate(&self) -> Result<Tx<'static>, StoreError> {
        self.begin_serial(&[Lock::Exclusive(lock::WRITES)]).await
    }

    /// A transaction serialized by `locks` (PostgreSQL, taken in order) or by SQLite's write
    /// lock.
    async fn begin_serial(&self, locks: &[Lock]) -> Result<Tx<'static>, StoreError> {
        self.check_file()?;
        match self.backend {
            Backend::Sqlite => Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?),
            // `BEGIN` and the locks in one round trip: sqlx sends a custom begin as a simple
            // query, which may hold several statements. The keys are this code's integers,
            // written into the text (nothing a request sent).
            Backend::Postgres if !locks.is_empty() => {
                let begin = format!("BEGIN; {}", lock_statement(locks, |k| k.to_string()));
                Ok(self.pool.begin_with(begin).await?)
            }
            Backend::Postgres => Ok(self.pool.begin().await?),
        }
    }

    /// Refuses when the database file this store opened was removed or replaced: writes would
    /// go to a file nobody will ever open again and be lost at the next start.
    pub fn check_file(&self) -> Result<(), StoreError> {
        match &self.file {
            Some(file) => file.check().map_err(StoreError::Unavailable),
            None => Ok(()),
        }
    }

    /// Whether the database answers and its file is the one opened, with a valid header; the
    /// reason when not. For `/healthz`.
    pub async fn health(&self) -> Result<(), String> {
        if let Some(file) = &self.file {
            file.check()?;
            file.check_header()?;
        }
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| format!("the database does not answer: {}", one_line(&e.to_string())))
    }

    pub async fn close(&self) {
        if let Some(writer) = &self.local_writer {
            writer.close().await;
        }
        self.pool.close().await;
    }
}

/// A PostgreSQL advisory lock to hold until the transaction ends.
#[derive(Clone, Copy, Debug)]
pub(super) enum Lock {
    Exclusive(i64),
    Shared(i64),
    /// One user's: their bookings take turns for the quota check.
    User(i64),
    /// One group's (by id): bookings that a group quota limits take turns.
    Group(i64),
}

/// Takes `locks` in one statement: PostgreSQL evaluates a select list left to right, so they
/// are taken in the order given.
async fn take_locks(tx: &mut impl conn::Conn, locks: &[Lock]) -> Result<(), StoreError> {
    if locks.is_empty() {
        return Ok(());
    }
    let mut keys: Vec<i64> = Vec::new();
    let sql = lock_statement(locks, |k| {
        keys.push(k);
        format!("${}", keys.len())
    });
    let args: Vec<conn::Arg<'_>> = keys.into_iter().map(conn::Arg::from).collect();
    tx.execute(&sql, &args).await
}

/// The `SELECT` that takes `locks` in order, each key written by `key` (a placeholder, or the
/// number itself).
fn lock_statement(locks: &[Lock], mut key: impl FnMut(i64) -> String) -> String {
    let calls: Vec<String> = locks
        .iter()
        .map(|l| {
            let (space, id) = match *l {
                Lock::Exclusive(k) => return format!("pg_advisory_xact_lock({})", key(k)),
                Lock::Shared(k) => return format!("pg_advisory_xact_lock_shared({})", key(k)),
                Lock::User(id) => (lock::USER, id),
                Lock::Group(id) => (lock::GROUP, id),
            };
            // The two-key form takes int4 keys; ids past 2^31 share a key, which only makes
            // them wait for each other.
            format!(
                "pg_advisory_xact_lock(CAST({} AS INTEGER), CAST({} AS INTEGER))",
                key(i64::from(space)),
                key(id & 0x7fff_ffff)
            )
        })
        .collect();
    format!("SELECT {}", calls.join(", "))
}
