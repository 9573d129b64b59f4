//! All SQL lives here, for both backends (SQLite embedded, PostgreSQL shared; see `sql.rs` for
//! how one text serves both). Callers see domain types and [`StoreError`], never a driver type.

mod accounts;
mod audit;
mod bookings;
mod bus;
mod copy;
mod enforcement;
mod file;
mod free;
mod gauges;
mod history;
mod inventory;
mod jobs;
mod lending;
mod logins;
mod logs;
mod maintenance;
mod notify;
mod queue;
mod quotas;
mod reports;
mod sessions;
mod settings;
mod slots;
mod sql;
mod tokens;
mod usage;

use accounts::{UserRow, USER_COLUMNS};
use audit::insert_audit;
pub use audit::{AuditEntry, AuditFilter};
pub use bookings::BookingFilter;
pub use bus::{Bus, Leadership, Notice, MAX_PAYLOAD};
pub use copy::{TableCopy, TABLES};
pub use enforcement::NewViolation;
pub use file::make_private;
pub use free::CardFilter;
pub use gauges::PoolGauges;
pub use history::Bucket;
pub use inventory::{KnownGpu, NodeHolder, NodeRegistration, NodeRow};
pub use jobs::{JobEnd, JobPlace, JobProcess, JobToRun, NewJob};
pub use lending::NewLoan;
pub use logins::AttemptStart;
pub use logs::Stream;
pub use notify::{Claimed, Link, NewLink, NewMessage};
pub use queue::{CardBlock, UsageSpan};
pub use reports::CardUse;
use sessions::end_sessions_of;
use tokens::revoke_tokens_of;
pub use usage::{BookingEnergy, MinuteUse, ProcessTotal};

use crate::accounts::session::SessionPolicy;
use crate::accounts::{NewUser, Role, User, UserPatch};
use crate::audit::AuditAction;
use crate::events::{Change, Event, Events};
use chrono::{DateTime, Utc};
use lanes_types::account::{ApiToken, AuditRecord, Group, PortalSettings};
use lanes_types::GpuInfo;
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

/// The oldest PostgreSQL this schema is written for (`server_version_num`).
const MIN_POSTGRES: i64 = 140000;

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
    /// The database file this store opened, to notice it vanishing or being replaced.
    file: Option<std::sync::Arc<file::DbFile>>,
    /// Where committed writes say what they changed (see [`crate::events`]).
    events: Events,
    /// How long a node may stay silent before automatic choices leave its cards alone.
    node_timeout_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// PostgreSQL: where the store connected, for the connections that live outside the pool
    /// (the bus listener, the queue leader's lock). Never logged (its Debug is redacted).
    url: Option<bus::DatabaseUrl>,
}

/// `--node-timeout`'s default.
pub const DEFAULT_NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Migrations of each backend, applied at start.
fn migrator(backend: Backend) -> sqlx::migrate::Migrator {
    match backend {
        Backend::Sqlite => sqlx::migrate!("../migrations/sqlite"),
        Backend::Postgres => sqlx::migrate!("../migrations/postgres"),
    }
}

/// A migration and whether this database has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationState {
    pub version: i64,
    pub description: String,
    pub applied: bool,
}

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to date.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let store = Self::connect(url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Opens a database that must exist already, without touching its schema (for
    /// `lanes db status`, the source of a copy, a backup): a missing SQLite file is refused,
    /// not created.
    pub async fn connect_existing(url: &str) -> Result<Self, StoreError> {
        if Backend::of_url(url) == Some(Backend::Sqlite) {
            let open_err = |reason: String| StoreError::Open {
                url: url.to_string(),
                reason,
            };
            if let Some(path) = sqlite_file(url).map_err(open_err)? {
                if !path.exists() {
                    return Err(open_err(format!(
                        "there is no database at {} (`lanes db migrate` or `lanes serve` makes it)",
                        path.display()
                    )));
                }
            }
        }
        Self::connect(url).await
    }

    /// Opens the database without touching its schema, creating an SQLite file if needed.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend =
            Backend::of_url(url).ok_or_else(|| StoreError::UnsupportedUrl(url.to_string()))?;
        let open_err = |reason: String| StoreError::Open {
            url: redact(url),
            reason,
        };
        let (pool, file) = match backend {
            Backend::Sqlite => Self::connect_sqlite(url).await.map_err(open_err)?,
            Backend::Postgres => (Self::connect_postgres(url).await.map_err(open_err)?, None),
        };
        Ok(Self {
            pool,
            backend,
            writer: Default::default(),
            file,
            events: Events::default(),
            node_timeout_ms: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
                DEFAULT_NODE_TIMEOUT.as_millis() as i64,
            )),
            url: (backend == Backend::Postgres).then(|| bus::DatabaseUrl(url.into())),
        })
    }

    async fn connect_sqlite(
        url: &str,
    ) -> Result<(AnyPool, Option<std::sync::Arc<file::DbFile>>), String> {
        let path = sqlite_file(url)?;
        if let Some(path) = &path {
            // Also creates the file (owner-only) so that the driver opens it read-write.
            file::make_private(path)
                .map_err(|e| format!("cannot make the database private: {e}"))?;
        }
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(sqlx::raw_sql(
                        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
                         PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
                    ))
                    .await?;
                    Ok(())
                })
            })
            .after_release(|conn, _| Box::pin(async move { Ok(outside_transaction(conn)) }))
            .connect(url)
            .await
            .map_err(|e| e.to_string())?;
        let file = path
            .and_then(|path| file::DbFile::watch(&path))
            .map(std::sync::Arc::new);
        Ok((pool, file))
    }

    async fn connect_postgres(url: &str) -> Result<AnyPool, String> {
        let pool = AnyPoolOptions::new()
            .max_connections(16)
            // A server that went away answers requests with 503 in seconds, not minutes.
            .acquire_timeout(Duration::from_secs(5))
            .after_release(|conn, _| Box::pin(async move { Ok(outside_transaction(conn)) }))
            .connect(url)
            .await
            .map_err(|e| one_line(&e.to_string()))?;
        let version: String = sqlx::query_scalar("SHOW server_version_num")
            .fetch_one(&pool)
            .await
            .map_err(|e| one_line(&e.to_string()))?;
        if let Some(refusal) = postgres_too_old(&version) {
            pool.close().await;
            return Err(refusal);
        }
        Ok(pool)
    }

    /// Applies the migrations this database lacks. Refuses a database migrated by a newer
    /// Lanes (one that knows migrations this one does not).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let known = migrator(self.backend);
        if let Some(newer) = self
            .applied_migrations()
            .await?
            .into_iter()
            .find(|v| !known.iter().any(|m| m.version == *v))
        {
            return Err(StoreError::Migrate(format!(
                "the database has migration {newer}, which this Lanes ({}) does not know: \
                 it was upgraded by a newer Lanes; upgrade this one",
                env!("CARGO_PKG_VERSION")
            )));
        }
        known.run(&self.pool).await?;
        Ok(())
    }

    /// Every migration this Lanes knows, and whether the database has it.
    pub async fn migration_status(&self) -> Result<Vec<MigrationState>, StoreError> {
        let applied = self.applied_migrations().await?;
        Ok(migrator(self.backend)
            .iter()
            .filter(|m| m.migration_type.is_up_migration())
            .map(|m| MigrationState {
                version: m.version,
                description: m.description.to_string(),
                applied: applied.contains(&m.version),
            })
            .collect())
    }

    /// Versions recorded as applied (none in a fresh database).
    async fn applied_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let exists: Option<i64> = match self.backend {
            Backend::Sqlite => sqlx::query_scalar(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
            ),
            Backend::Postgres => {
                sqlx::query_scalar("SELECT 1 WHERE to_regclass('_sqlx_migrations') IS NOT NULL")
            }
        }
        .fetch_optional(&self.pool)
        .await?;
        if exists.is_none() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success = $1 ORDER BY version",
        )
        .bind(true)
        .fetch_all(&self.pool)
        .await?)
    }

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
            Backend::Postgres => {
                let mut tx = self.pool.begin().await?;
                take_locks(&mut tx, locks).await?;
                Ok(tx)
            }
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
        self.pool.close().await;
    }
}

/// The file an SQLite URL names; `None` for an in-memory database.
pub fn sqlite_file(url: &str) -> Result<Option<std::path::PathBuf>, String> {
    let options = SqliteConnectOptions::from_str(url).map_err(|e| e.to_string())?;
    let path = options.get_filename();
    let in_memory = path.as_os_str().is_empty() || path.to_string_lossy().starts_with(':');
    Ok((!in_memory).then(|| path.to_path_buf()))
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
pub(super) async fn take_locks(tx: &mut Tx<'_>, locks: &[Lock]) -> Result<(), StoreError> {
    if locks.is_empty() {
        return Ok(());
    }
    let mut calls = Vec::new();
    let mut keys: Vec<i64> = Vec::new();
    for l in locks {
        let mut key = |k: i64| {
            keys.push(k);
            format!("${}", keys.len())
        };
        let (space, id) = match *l {
            Lock::Exclusive(k) => {
                calls.push(format!("pg_advisory_xact_lock({})", key(k)));
                continue;
            }
            Lock::Shared(k) => {
                calls.push(format!("pg_advisory_xact_lock_shared({})", key(k)));
                continue;
            }
            Lock::User(id) => (lock::USER, id),
            Lock::Group(id) => (lock::GROUP, id),
        };
        // The two-key form takes int4 keys; ids past 2^31 share a key, which only makes them
        // wait for each other.
        calls.push(format!(
            "pg_advisory_xact_lock(CAST({} AS INTEGER), CAST({} AS INTEGER))",
            key(i64::from(space)),
            key(id & 0x7fff_ffff)
        ));
    }
    let sql = format!("SELECT {}", calls.join(", "));
    let mut query = sqlx::query(&sql);
    for k in keys {
        query = query.bind(k);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

/// Why a PostgreSQL server of this `server_version_num` cannot hold Lanes, if it cannot.
fn postgres_too_old(version_num: &str) -> Option<String> {
    let version: i64 = version_num.trim().parse().unwrap_or(0);
    (version < MIN_POSTGRES).then(|| {
        format!(
            "PostgreSQL {} is too old: Lanes needs {} or newer",
            if version >= 100000 {
                format!("{}.{}", version / 10000, version % 10000)
            } else {
                format!("{}.{}", version / 10000, (version / 100) % 100)
            },
            MIN_POSTGRES / 10000
        )
    })
}

/// Whether a connection coming back to the pool is outside any transaction. One whose COMMIT
/// or ROLLBACK failed (a full disk, a server gone) may still be inside one: back in the pool it
/// would run the next request inside that transaction (writes never committed, stale reads) or
/// refuse to begin one, so it is closed instead and a fresh one opened. sqlx counts a
/// transaction closed only once its COMMIT or ROLLBACK succeeded, which is the count asked
/// here. (Asking SQLite itself, as `sqlite3_get_autocommit`, would need the raw handle, which
/// the `Any` driver does not give, or a round trip to the connection's thread per release.)
fn outside_transaction(conn: &AnyConnection) -> bool {
    let inside = sqlx_depth(conn) > 0;
    if inside {
        tracing::warn!("closing a database connection left inside a transaction");
    }
    !inside
}

/// How many transactions sqlx counts open on a connection.
fn sqlx_depth(conn: &AnyConnection) -> usize {
    <<sqlx::Any as sqlx::Database>::TransactionManager as sqlx::TransactionManager>::get_transaction_depth(conn)
}

/// A driver message on one line (PostgreSQL's can span several).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A database URL without its password, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(uuid: &str, index: u32) -> GpuInfo {
        GpuInfo {
            node: "n1".into(),
            uuid: uuid.into(),
            index,
            name: "H200".into(),
            pci_bus_id: format!("00000000:{index:02X}:00.0"),
            memory_total_bytes: 1 << 40,
        }
    }

    async fn temp_store() -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "lanes-store-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("lanes.db").display());
        (Store::open(&url).await.unwrap(), dir)
    }

    /// This process's POSIX locks on the file at `path`, as /proc/locks lists them.
    fn locks_held_here(path: &std::path::Path) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).unwrap();
        let (major, minor) = (
            nix::sys::stat::major(meta.dev()),
            nix::sys::stat::minor(meta.dev()),
        );
        let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
        let pid = std::process::id().to_string();
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|l| {
                l.contains(" POSIX ")
                    && l.split_whitespace().any(|w| w == id)
                    && l.split_whitespace().any(|w| w == pid)
            })
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .collect()
    }

    /// `/healthz` reads the header: that must not drop SQLite's locks (closing any descriptor
    /// of the file drops every POSIX lock this process holds on it), or another process
    /// checkpoints and deletes the live WAL.
    #[tokio::test]
    async fn a_health_check_keeps_sqlites_locks_on_the_database_file() {
        let (store, dir) = temp_store().await;
        let db = dir.join("lanes.db");
        // A read transaction held open, as a request in flight holds one.
        let mut reader = store.pool.begin().await.unwrap();
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *reader)
            .await
            .unwrap();
        let before = locks_held_here(&db);
        assert!(
            !before.is_empty(),
            "SQLite holds a lock on the file while it reads"
        );
        for _ in 0..3 {
            store.health().await.unwrap();
        }
        assert_eq!(
            locks_held_here(&db),
            before,
            "the health check left the locks alone"
        );
        reader.rollback().await.unwrap();
        store.close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn inventory_is_recorded_once_per_card_and_updated_when_seen_again() {
        let (store, dir) = temp_store().await;
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let t1 = DateTime::from_timestamp(1_700_000_600, 0).unwrap();
        store
            .record_inventory("n1", &[gpu("GPU-a", 0), gpu("GPU-b", 1)], t0)
            .await
            .unwrap();
        // After a re-cabling the same card shows up at another index.
        store
            .record_inventory("n1", &[gpu("GPU-b", 0)], t1)
            .await
            .unwrap();
        let known = store.known_gpus().await.unwrap();
        assert_eq!(known.len(), 2);
        let b = known.iter().find(|g| g.uuid == "GPU-b").unwrap();
        assert_eq!((b.index, b.first_seen, b.last_seen), (0, t0, t1));
        let a = known.iter().find(|g| g.uuid == "GPU-a").unwrap();
        assert_eq!(a.last_seen, t0);
        assert_eq!(a.memory_total_bytes, 1 << 40);
        // The card the node no longer lists is nobody's to book; the one it lists is.
        assert_eq!((a.managed, b.managed), (0, 1));
        store.close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_user_is_created_once_with_its_audit_line_and_a_duplicate_is_a_conflict() {
        let (store, dir) = temp_store().await;
        let new = NewUser {
            username: "ada".into(),
            display_name: "Ada".into(),
            email: None,
            unix_user: Some("ada".into()),
            role: Role::Admin,
        };
        let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada").detail("role admin");
        let now = Utc::now();
        let user = store
            .create_user(&new, "$argon2id$x", &audit, now)
            .await
            .unwrap();
        assert_eq!(
            (user.username.as_str(), user.role, user.enabled),
            ("ada", Role::Admin, true)
        );
        assert_eq!(store.count_enabled_admins().await.unwrap(), 1);
        let again = store
            .create_user(&new, "$argon2id$y", &audit, now)
            .await
            .unwrap_err();
        assert!(
            matches!(again, StoreError::Conflict(ref m) if m.contains("already exists")),
            "{again}"
        );
        // The failed attempt left no second audit line.
        let lines = store.recent_audit(10).await.unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (
                lines[0].action.as_str(),
                lines[0].target.as_str(),
                lines[0].actor.as_deref()
            ),
            ("user.create", "ada", None)
        );
        assert_eq!(lines[0].detail, "role admin");
        assert_eq!(store.user_by_username("ada").await.unwrap(), Some(user));
        assert_eq!(store.user_by_username("bob").await.unwrap(), None);
        store.close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A report's energy parts add up while the history writer adds to the minute it reads:
    /// the booking's energy, the part per-process samples gave to processes, and the
    /// processes' own totals come from one snapshot (each write adds as much to all three).
    #[tokio::test]
    async fn a_reports_energy_and_its_parts_are_read_from_one_snapshot_while_minutes_grow() {
        use crate::bookings::{CardChoice, NewBooking};
        use crate::history::usage::{ProcessKey, ProcessUse};
        use crate::store::usage::MinuteUse;
        let (store, dir) = temp_store().await;
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        store
            .record_inventory("n1", &[gpu("GPU-a", 0)], t0)
            .await
            .unwrap();
        let new = NewUser {
            username: "ada".into(),
            display_name: "Ada".into(),
            email: None,
            unix_user: Some("ada".into()),
            role: Role::User,
        };
        let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada");
        let owner = store
            .create_user(&new, "$argon2id$x", &audit, t0)
            .await
            .unwrap();
        let booking = NewBooking {
            owner,
            cards: CardChoice::Named(vec!["GPU-a".into()]),
            start: t0,
            end: t0 + chrono::Duration::hours(1),
            note: String::new(),
            enforce_quota: false,
            lend: false,
        };
        let audit = AuditEntry::new(None, AuditAction::BookingCreate, "booking");
        let booking = store.create_booking(&booking, audit, t0).await.unwrap();
        let card = store.gpu_ids().await.unwrap()[&("n1".to_string(), "GPU-a".to_string())];
        let minute = t0.timestamp() + 120;
        let writes = 200;
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..writes {
                    let use_ = ProcessUse {
                        seconds: 1.0,
                        used_pct_s: 50.0,
                        sm_pct_s: 50.0,
                        mem_pct_s: 0.0,
                        energy_mj: 600_000.0,
                    };
                    let key = ProcessKey {
                        unix_user: "ada".into(),
                        job_id: 0,
                    };
                    let added = MinuteUse {
                        energy_mj: 600_000,
                        processes: [(key, use_)].into_iter().collect(),
                    };
                    store
                        .add_usage(&[((card, minute), added)].into_iter().collect())
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            })
        };
        let (from, to) = (t0.timestamp(), t0.timestamp() + 3600);
        let mut reads = 0;
        loop {
            let done = writer.is_finished();
            let (energy, processes) = store.energy_and_processes(from, to).await.unwrap();
            let whole = energy.get(&booking.id).copied().unwrap_or_default();
            let theirs: f64 = processes.iter().map(|p| p.energy_mj).sum();
            assert_eq!(whole.energy_mj, whole.attributed_mj, "read {reads}");
            assert_eq!(whole.attributed_mj, theirs, "read {reads}");
            reads += 1;
            if done {
                assert_eq!(whole.energy_mj, 600_000.0 * writes as f64);
                break;
            }
        }
        assert!(reads > 1);
        store.close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn deliveries_at_once_never_take_more_requests_than_the_hourly_limit() {
        let (store, dir) = temp_store().await;
        let new = NewUser {
            username: "ada".into(),
            display_name: "Ada".into(),
            email: None,
            unix_user: None,
            role: Role::User,
        };
        let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada");
        let now = Utc::now();
        let ada = store
            .create_user(&new, "$argon2id$x", &audit, now)
            .await
            .unwrap();
        let hour_ago = now - chrono::Duration::hours(1);
        // Eight deliveries at once against a limit of three: three go.
        let claims = (0..8).map(|_| store.claim_attempt(ada.id, Some(3), hour_ago, now));
        let granted = futures::future::join_all(claims).await;
        let granted = granted.into_iter().filter(|c| *c.as_ref().unwrap()).count();
        assert_eq!(granted, 3);
        assert_eq!(store.attempts_since(ada.id, hour_ago).await.unwrap(), 3);
        // Unlimited (a test message) is counted, never refused.
        assert!(store
            .claim_attempt(ada.id, None, hour_ago, now)
            .await
            .unwrap());
        assert_eq!(store.attempts_since(ada.id, hour_ago).await.unwrap(), 4);
        // An hour later the earlier ones no longer count.
        let later = now + chrono::Duration::hours(2);
        let since = later - chrono::Duration::hours(1);
        assert!(store
            .claim_attempt(ada.id, Some(3), since, later)
            .await
            .unwrap());
        store.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn an_unknown_url_is_refused_with_a_clear_message() {
        let err = Store::open("mysql://localhost/lanes").await.unwrap_err();
        assert!(
            err.to_string()
                .contains("expected sqlite://PATH or postgres://"),
            "{err}"
        );
    }

    #[test]
    fn a_postgres_older_than_fourteen_is_refused_by_name() {
        assert_eq!(
            postgres_too_old("130012").as_deref(),
            Some("PostgreSQL 13.12 is too old: Lanes needs 14 or newer")
        );
        assert_eq!(
            postgres_too_old("90624").as_deref(),
            Some("PostgreSQL 9.6 is too old: Lanes needs 14 or newer")
        );
        assert_eq!(postgres_too_old("140000"), None);
        assert_eq!(postgres_too_old("170002"), None);
    }

    #[test]
    fn a_url_shown_in_a_message_hides_its_password() {
        assert_eq!(
            redact("postgres://lanes:s3cret@db.lab:5432/lanes"),
            "postgres://lanes:***@db.lab:5432/lanes"
        );
        assert_eq!(redact("postgres://db.lab/lanes"), "postgres://db.lab/lanes");
        assert_eq!(
            redact("sqlite:///var/lib/lanes/lanes.db"),
            "sqlite:///var/lib/lanes/lanes.db"
        );
    }
}
