//! All SQL lives here. Callers see domain types and [`StoreError`], never a driver type, so a
//! PostgreSQL backend (planned for multi-node) can be added inside this module alone.

mod accounts;
mod audit;
mod bookings;
mod enforcement;
mod file;
mod history;
mod inventory;
mod jobs;
mod logins;
mod maintenance;
mod queue;
mod quotas;
mod reports;
mod sessions;
mod settings;
mod slots;
mod tokens;

use accounts::{UserRow, USER_COLUMNS};
use audit::insert_audit;
pub use audit::AuditEntry;
pub use bookings::BookingFilter;
pub use enforcement::NewViolation;
pub use history::Bucket;
pub use inventory::KnownGpu;
pub use jobs::{JobEnd, JobPlace, JobProcess, JobToRun, NewJob};
pub use logins::AttemptStart;
pub use queue::{CardBlock, UsageSpan};
pub use reports::CardUse;
use sessions::end_sessions_of;
use tokens::revoke_tokens_of;

use crate::accounts::session::SessionPolicy;
use crate::accounts::{NewUser, Role, User, UserPatch};
use crate::audit::AuditAction;
use crate::events::{Change, Event, Events};
use chrono::{DateTime, Utc};
use lanes_types::account::{ApiToken, AuditRecord, Group, PortalSettings};
use lanes_types::GpuInfo;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
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
    #[error(
        "unsupported database URL {0:?}: expected sqlite://PATH (PostgreSQL support is planned)"
    )]
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
    /// The database cannot take writes now (its file vanished or was replaced).
    #[error("{0}")]
    Unavailable(String),
    /// The database failed a statement, or holds something this version cannot read. The
    /// driver's error, as text: no driver type leaves the store.
    #[error("database error: {0}")]
    Database(String),
    /// A booking write the domain's rules refused (inside the write's transaction).
    #[error(transparent)]
    Refused(#[from] crate::bookings::BookingError),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e.to_string())
    }
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
    pool: SqlitePool,
    /// Booking writes of this process take turns here before `BEGIN IMMEDIATE`. SQLite makes
    /// a writer that finds the database locked sleep and retry (1, 2, 5… up to 100 ms), which
    /// under concurrent load costs far more than the write; queueing in-process wakes the next
    /// writer the moment the last one commits. `BEGIN IMMEDIATE` still guards against other
    /// processes (`lanes user add`, later a second node).
    writer: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// The database file this store opened, to notice it vanishing or being replaced.
    file: Option<std::sync::Arc<file::DbFile>>,
    /// Where committed writes say what they changed (see [`crate::events`]).
    events: Events,
}

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to date.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        let open_err = |e: sqlx::Error| StoreError::Open {
            url: url.to_string(),
            reason: e.to_string(),
        };
        let options = SqliteConnectOptions::from_str(url)
            .map_err(open_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let path = options.get_filename().to_path_buf();
        let in_memory = path.as_os_str().is_empty() || path.to_string_lossy().starts_with(':');
        if !in_memory {
            file::make_private(&path).map_err(|e| StoreError::Open {
                url: url.to_string(),
                reason: format!("cannot make the database private: {e}"),
            })?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // A connection whose COMMIT or ROLLBACK failed (a full disk) may still be inside a
            // transaction, by sqlx's count or SQLite's own: back in the pool it would run the
            // next request inside that transaction (writes never committed, stale reads) or
            // refuse to begin one. Such a connection is closed instead, and a fresh one opened.
            .after_release(|conn, _| {
                Box::pin(async move { Ok(file::outside_transaction(conn).await) })
            })
            .connect_with(options)
            .await
            .map_err(open_err)?;
        sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
        let file = file::DbFile::watch(&path).map(std::sync::Arc::new);
        Ok(Self {
            pool,
            writer: Default::default(),
            file,
            events: Events::default(),
        })
    }

    /// The bus this store's writes are announced on, once committed.
    pub fn events(&self) -> &Events {
        &self.events
    }

    fn emit(&self, event: Event) {
        self.events.emit(event);
    }

    /// A transaction for writing, refused while the database file is gone.
    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        self.check_file()?;
        Ok(self.pool.begin().await?)
    }

    /// A transaction that reads, then writes: `BEGIN IMMEDIATE` takes the write lock first, so
    /// no commit elsewhere can stale its snapshot.
    async fn begin_immediate(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        self.check_file()?;
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
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
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM sqlite_schema")
            .fetch_one(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| format!("the database does not answer: {e}"))
    }

    pub async fn close(&self) {
        self.pool.close().await;
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

    #[tokio::test]
    async fn a_non_sqlite_url_is_refused_with_a_clear_message() {
        let err = Store::open("postgres://localhost/lanes").await.unwrap_err();
        assert!(err.to_string().contains("expected sqlite://PATH"), "{err}");
    }
}
