//! All SQL lives here. Callers see domain types and [`StoreError`], never a driver type, so a
//! PostgreSQL backend (planned for multi-node) can be added inside this module alone.

mod bookings;
mod enforcement;
mod file;
mod history;
mod jobs;
mod logins;
mod queue;
mod reports;

pub use bookings::BookingFilter;
pub use enforcement::NewViolation;
pub use history::Bucket;
pub use jobs::{JobEnd, JobPlace, JobProcess, JobToRun, NewJob};
pub use logins::AttemptStart;
pub use queue::{CardBlock, UsageSpan};
pub use reports::CardUse;

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
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Conflict(String),
    /// The request names something that does not exist (a group, a user).
    #[error("{0}")]
    Invalid(String),
    /// The database cannot take writes now (its file vanished or was replaced).
    #[error("{0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: i64,
    name: String,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for ApiToken {
    fn from(row: TokenRow) -> Self {
        ApiToken {
            id: row.id,
            name: row.name,
            created_at: row.created_at,
            last_used_at: row.last_used_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct AuditRow {
    id: i64,
    at: DateTime<Utc>,
    actor: Option<String>,
    action: String,
    target: String,
    detail: String,
    remote_addr: Option<String>,
}

impl From<AuditRow> for AuditRecord {
    fn from(row: AuditRow) -> Self {
        AuditRecord {
            id: row.id,
            at: row.at,
            actor: row.actor,
            action: row.action,
            target: row.target,
            detail: row.detail,
            remote_addr: row.remote_addr,
        }
    }
}

/// One line of the audit log, as it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// The user who acted; `None` for the operator's command line.
    pub actor_user_id: Option<i64>,
    /// What happened.
    pub action: AuditAction,
    pub target: String,
    pub detail: String,
    pub remote_addr: Option<String>,
}

impl AuditEntry {
    /// An entry for `action` on `target` by `actor` (`None`: the operator's command line),
    /// with no detail or address until [`AuditEntry::detail`] and [`AuditEntry::from_addr`].
    pub fn new(actor: Option<i64>, action: AuditAction, target: impl Into<String>) -> Self {
        Self {
            actor_user_id: actor,
            action,
            target: target.into(),
            detail: String::new(),
            remote_addr: None,
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub fn from_addr(mut self, addr: impl Into<String>) -> Self {
        self.remote_addr = Some(addr.into());
        self
    }
}

#[derive(sqlx::FromRow)]
struct UserRow {
    id: i64,
    username: String,
    display_name: String,
    email: Option<String>,
    unix_user: Option<String>,
    role: String,
    enabled: bool,
}

impl TryFrom<UserRow> for User {
    type Error = StoreError;
    fn try_from(row: UserRow) -> Result<Self, StoreError> {
        let role: Role = row
            .role
            .parse()
            .map_err(|e: String| StoreError::Query(sqlx::Error::Decode(e.into())))?;
        Ok(User {
            id: row.id,
            username: row.username,
            display_name: row.display_name,
            email: row.email,
            unix_user: row.unix_user,
            role,
            enabled: row.enabled,
        })
    }
}

const USER_COLUMNS: &str = "id, username, display_name, email, unix_user, role, enabled";

/// A card as the database remembers it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct KnownGpu {
    pub node: String,
    pub uuid: String,
    pub index: i64,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: i64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
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

    /// Records that `node` has these cards now (first and last seen times, current index).
    pub async fn record_inventory(
        &self,
        node: &str,
        gpus: &[GpuInfo],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        let node_id: i64 = sqlx::query_scalar(
            "INSERT INTO nodes (name, first_seen, last_seen) VALUES (?1, ?2, ?2)
             ON CONFLICT (name) DO UPDATE SET last_seen = excluded.last_seen
             RETURNING id",
        )
        .bind(node)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        for gpu in gpus {
            sqlx::query(
                "INSERT INTO gpus (node_id, uuid, idx, name, pci_bus_id, memory_total_bytes, first_seen, last_seen)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
                 ON CONFLICT (node_id, uuid) DO UPDATE SET
                    idx = excluded.idx, name = excluded.name, pci_bus_id = excluded.pci_bus_id,
                    memory_total_bytes = excluded.memory_total_bytes, last_seen = excluded.last_seen",
            )
            .bind(node_id)
            .bind(&gpu.uuid)
            .bind(gpu.index as i64)
            .bind(&gpu.name)
            .bind(&gpu.pci_bus_id)
            .bind(gpu.memory_total_bytes as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every card ever seen, by node then index.
    pub async fn known_gpus(&self) -> Result<Vec<KnownGpu>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT n.name AS node, g.uuid, g.idx AS \"index\", g.name, g.pci_bus_id,
                    g.memory_total_bytes, g.first_seen, g.last_seen
             FROM gpus g JOIN nodes n ON n.id = g.node_id
             ORDER BY n.name, g.idx",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Creates an account with an already hashed password, and audits it, in one transaction.
    pub async fn create_user(
        &self,
        new: &NewUser,
        password_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<User, StoreError> {
        let mut tx = self.begin().await?;
        let inserted = sqlx::query_as::<_, UserRow>(&format!(
            "INSERT INTO users (username, display_name, email, unix_user, role, password_hash,
                                password_changed_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
             RETURNING {USER_COLUMNS}"
        ))
        .bind(&new.username)
        .bind(&new.display_name)
        .bind(&new.email)
        .bind(&new.unix_user)
        .bind(new.role.as_str())
        .bind(password_hash)
        .bind(now)
        .fetch_one(&mut *tx)
        .await;
        let row = match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::Conflict(format!(
                    "a user named {:?} already exists",
                    new.username
                )))
            }
            other => other?,
        };
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        row.try_into()
    }

    pub async fn user_by_username(&self, username: &str) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE username = ?1"
        ))
        .bind(username)
        .fetch_optional(&self.pool)
        .await?
        .map(User::try_from)
        .transpose()
    }

    /// Enabled admins; when there are none, the operator is told how to make one.
    pub async fn count_enabled_admins(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND enabled = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// The newest audit entries first.
    pub async fn recent_audit(&self, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT a.id, a.at, u.username AS actor, a.action, a.target, a.detail, a.remote_addr
             FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
             ORDER BY a.id DESC LIMIT ?1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditRecord::from).collect())
    }

    /// An account and its password hash, for checking a login.
    pub async fn credentials(&self, username: &str) -> Result<Option<(User, String)>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            user: UserRow,
            password_hash: String,
        }
        sqlx::query_as::<_, Row>(&format!(
            "SELECT {USER_COLUMNS}, password_hash FROM users WHERE username = ?1"
        ))
        .bind(username)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| Ok((User::try_from(row.user)?, row.password_hash)))
        .transpose()
    }

    /// The portal settings, or the defaults when none were saved.
    pub async fn portal_settings(&self) -> Result<PortalSettings, StoreError> {
        self.setting("portal").await
    }

    /// Replaces the portal settings and audits the change, in one step.
    pub async fn save_portal_settings(
        &self,
        settings: &PortalSettings,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.save_setting("portal", settings, audit, now).await
    }

    /// The setting `key` (a JSON document), or its default when none was saved.
    pub(crate) async fn setting<T: serde::de::DeserializeOwned + Default>(
        &self,
        key: &str,
    ) -> Result<T, StoreError> {
        let value: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        match value {
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| StoreError::Query(sqlx::Error::Decode(e.into()))),
            None => Ok(T::default()),
        }
    }

    /// Replaces the setting `key` and audits the change, in one step.
    pub(crate) async fn save_setting<T: serde::Serialize>(
        &self,
        key: &str,
        value: &T,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(value)
            .map_err(|e| StoreError::Query(sqlx::Error::Encode(e.into())))?;
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(json)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn audit(&self, entry: &AuditEntry, now: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        insert_audit(&mut tx, entry, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Starts a session (stored by the hash of its secret) and audits the login, in one step.
    pub async fn start_session(
        &self,
        user_id: i64,
        id_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO sessions (id_hash, user_id, created_at, last_seen_at, remote_addr)
             VALUES (?1, ?2, ?3, ?3, ?4)",
        )
        .bind(id_hash)
        .bind(user_id)
        .bind(now)
        .bind(&audit.remote_addr)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The enabled user behind a live session, touching its last use; an expired session is
    /// removed.
    pub async fn session_user(
        &self,
        id_hash: &str,
        policy: &SessionPolicy,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<(i64, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
            "SELECT user_id, created_at, last_seen_at FROM sessions WHERE id_hash = ?1",
        )
        .bind(id_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some((user_id, created, last_seen)) = row else {
            return Ok(None);
        };
        if !policy.is_live(created, last_seen, now) {
            self.end_session(id_hash).await?;
            return Ok(None);
        }
        // Writing on every request would serialize readers; a minute's precision is plenty.
        if now - last_seen > chrono::Duration::minutes(1) {
            sqlx::query("UPDATE sessions SET last_seen_at = ?2 WHERE id_hash = ?1")
                .bind(id_hash)
                .bind(now)
                .execute(&self.pool)
                .await?;
        }
        self.enabled_user(user_id).await
    }

    pub async fn end_session(&self, id_hash: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE id_hash = ?1")
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Stores a new token (by hash) for `user_id`, and audits it.
    pub async fn create_token(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<ApiToken, StoreError> {
        let mut tx = self.begin().await?;
        let token = sqlx::query_as::<_, TokenRow>(
            "INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)
             RETURNING id, name, created_at, last_used_at",
        )
        .bind(user_id)
        .bind(name)
        .bind(token_hash)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(token.into())
    }

    /// A user's tokens that are not revoked, newest first.
    pub async fn tokens_of(&self, user_id: i64) -> Result<Vec<ApiToken>, StoreError> {
        let rows: Vec<TokenRow> = sqlx::query_as(
            "SELECT id, name, created_at, last_used_at FROM api_tokens
             WHERE user_id = ?1 AND revoked_at IS NULL ORDER BY id DESC",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(ApiToken::from).collect())
    }

    /// Revokes a token of `user_id`; `false` when it has no such live token.
    pub async fn revoke_token(
        &self,
        user_id: i64,
        token_id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let revoked = sqlx::query(
            "UPDATE api_tokens SET revoked_at = ?3
             WHERE id = ?1 AND user_id = ?2 AND revoked_at IS NULL",
        )
        .bind(token_id)
        .bind(user_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if revoked {
            insert_audit(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        Ok(revoked)
    }

    /// The enabled owner of a live token, noting its use.
    pub async fn token_user(
        &self,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            token_id: i64,
            last_used_at: Option<DateTime<Utc>>,
            #[sqlx(flatten)]
            user: UserRow,
        }
        // The token and its enabled owner in one query: it runs on every scripted request.
        let row: Option<Row> = sqlx::query_as(&format!(
            "SELECT t.id AS token_id, t.last_used_at, {}
             FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = ?1 AND t.revoked_at IS NULL AND u.enabled = 1",
            USER_COLUMNS
                .split(", ")
                .map(|c| format!("u.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        // As with sessions, a minute's precision spares a write (and the database's write lock,
        // which bookings contend for) on every request.
        if row
            .last_used_at
            .is_none_or(|t| now - t > chrono::Duration::minutes(1))
        {
            sqlx::query("UPDATE api_tokens SET last_used_at = ?2 WHERE id = ?1")
                .bind(row.token_id)
                .bind(now)
                .execute(&self.pool)
                .await?;
        }
        User::try_from(row.user).map(Some)
    }

    async fn enabled_user(&self, user_id: i64) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE id = ?1 AND enabled = 1"
        ))
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?
        .map(User::try_from)
        .transpose()
    }

    /// Every account, by username.
    pub async fn users(&self) -> Result<Vec<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users ORDER BY username"
        ))
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(User::try_from)
        .collect()
    }

    pub async fn user(&self, id: i64) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = ?1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .map(User::try_from)
            .transpose()
    }

    /// The groups of each user, as (user id, group name) pairs.
    pub async fn memberships(&self) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT m.user_id, g.name FROM group_members m JOIN groups g ON g.id = m.group_id
             ORDER BY g.name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Applies an admin's change to an account in one transaction: fields, password (already
    /// hashed), groups, ending sessions when due, and the audit line. Refuses to leave the
    /// portal without an enabled admin.
    pub async fn update_user(
        &self,
        id: i64,
        patch: &UserPatch,
        password_hash: Option<&str>,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        // Reads, then writes: IMMEDIATE, so no commit elsewhere can stale its snapshot.
        let mut tx = self.begin_immediate().await?;
        let exists: Option<(i64,)> = sqlx::query_as("SELECT id FROM users WHERE id = ?1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let clearable = |v: &Option<String>| v.as_ref().map(|s| (!s.is_empty()).then(|| s.clone()));
        sqlx::query(
            "UPDATE users SET
                display_name = COALESCE(?2, display_name),
                email = CASE WHEN ?3 THEN ?4 ELSE email END,
                unix_user = CASE WHEN ?5 THEN ?6 ELSE unix_user END,
                role = COALESCE(?7, role),
                enabled = COALESCE(?8, enabled),
                password_hash = COALESCE(?9, password_hash),
                password_changed_at = CASE WHEN ?9 IS NULL THEN password_changed_at ELSE ?10 END
             WHERE id = ?1",
        )
        .bind(id)
        .bind(&patch.display_name)
        .bind(patch.email.is_some())
        .bind(clearable(&patch.email).flatten())
        .bind(patch.unix_user.is_some())
        .bind(clearable(&patch.unix_user).flatten())
        .bind(patch.role.map(Role::as_str))
        .bind(patch.enabled)
        .bind(password_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some(groups) = &patch.groups {
            sqlx::query("DELETE FROM group_members WHERE user_id = ?1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            for name in groups {
                let group_id: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM groups WHERE name = ?1")
                        .bind(name)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some(group_id) = group_id else {
                    return Err(StoreError::Invalid(format!("no group named {name:?}")));
                };
                sqlx::query(
                    "INSERT OR IGNORE INTO group_members (group_id, user_id) VALUES (?1, ?2)",
                )
                .bind(group_id)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
        }
        if patch.ends_sessions() {
            end_sessions_of(&mut tx, id).await?;
        }
        if patch.revokes_tokens() {
            revoke_tokens_of(&mut tx, id, now).await?;
        }
        let admins: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND enabled = 1")
                .fetch_one(&mut *tx)
                .await?;
        if admins == 0 {
            return Err(StoreError::Conflict(
                "this would leave no enabled admin; make another admin first".into(),
            ));
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        if patch.enabled.is_some() || patch.groups.is_some() {
            // Fair share and who may start weigh accounts and their groups.
            self.emit(Event::QueueChanged(Change::AccountChanged));
        }
        self.user(id).await
    }

    /// Sets a user's own new password (already hashed) and ends all their sessions.
    pub async fn change_password(
        &self,
        user_id: i64,
        password_hash: &str,
        revoke_tokens: bool,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE users SET password_hash = ?2, password_changed_at = ?3 WHERE id = ?1")
            .bind(user_id)
            .bind(password_hash)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        end_sessions_of(&mut tx, user_id).await?;
        if revoke_tokens {
            revoke_tokens_of(&mut tx, user_id, now).await?;
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn create_group(
        &self,
        name: &str,
        description: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Group, StoreError> {
        let mut tx = self.begin().await?;
        let inserted: Result<(i64,), sqlx::Error> = sqlx::query_as(
            "INSERT INTO groups (name, description, created_at) VALUES (?1, ?2, ?3) RETURNING id",
        )
        .bind(name)
        .bind(description)
        .bind(now)
        .fetch_one(&mut *tx)
        .await;
        let (id,) = match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::Conflict(format!(
                    "a group named {name:?} already exists"
                )))
            }
            other => other?,
        };
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(Group {
            id,
            name: name.into(),
            description: description.into(),
            members: Vec::new(),
        })
    }

    /// Every group with its members, by name.
    pub async fn groups(&self) -> Result<Vec<Group>, StoreError> {
        let rows: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
            "SELECT g.id, g.name, g.description, u.username FROM groups g
             LEFT JOIN group_members m ON m.group_id = g.id
             LEFT JOIN users u ON u.id = m.user_id
             ORDER BY g.name, u.username",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut groups: Vec<Group> = Vec::new();
        for (id, name, description, member) in rows {
            if groups.last().is_none_or(|g| g.id != id) {
                groups.push(Group {
                    id,
                    name,
                    description,
                    members: Vec::new(),
                });
            }
            if let (Some(group), Some(member)) = (groups.last_mut(), member) {
                group.members.push(member);
            }
        }
        Ok(groups)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Revokes every live API token of a user: disabled, or with a reset or changed password.
async fn revoke_tokens_of(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    user_id: i64,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE api_tokens SET revoked_at = ?2 WHERE user_id = ?1 AND revoked_at IS NULL")
        .bind(user_id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Ends every session of a user: disabled, or with a reset or changed password.
async fn end_sessions_of(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    user_id: i64,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sessions WHERE user_id = ?1")
        .bind(user_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn insert_audit(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    entry: &AuditEntry,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor_user_id, action, target, detail, remote_addr)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .bind(now)
    .bind(entry.actor_user_id)
    .bind(entry.action.as_str())
    .bind(&entry.target)
    .bind(&entry.detail)
    .bind(&entry.remote_addr)
    .execute(&mut **tx)
    .await?;
    Ok(())
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
