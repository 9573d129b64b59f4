//! Opening a database: its URL, the pool of each backend, its schema's migrations.

use super::*;

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
        // An SQLite database's file, if it has one (not in memory).
        let (pool, path) = match backend {
            Backend::Sqlite => Self::connect_sqlite(url).await.map_err(open_err)?,
            Backend::Postgres => (Self::connect_postgres(url).await.map_err(open_err)?, None),
        };
        let file = path
            .as_deref()
            .and_then(file::DbFile::watch)
            .map(std::sync::Arc::new);
        let writer: std::sync::Arc<tokio::sync::Mutex<()>> = Default::default();
        let local_writer = path.map(|path| {
            std::sync::Arc::new(writer::Writer::new(path, writer.clone(), file.clone()))
        });
        Ok(Self {
            pool,
            backend,
            writer,
            local_writer,
            file,
            events: Events::default(),
            node_timeout_ms: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
                DEFAULT_NODE_TIMEOUT.as_millis() as i64,
            )),
            url: (backend == Backend::Postgres).then(|| bus::DatabaseUrl(url.into())),
        })
    }

    /// The pool, and the database's file (`None` in memory).
    async fn connect_sqlite(url: &str) -> Result<(AnyPool, Option<std::path::PathBuf>), String> {
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
        Ok((pool, path))
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
}

/// The oldest PostgreSQL this schema is written for (`server_version_num`).
const MIN_POSTGRES: i64 = 140000;

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

/// The file an SQLite URL names; `None` for an in-memory database.
pub fn sqlite_file(url: &str) -> Result<Option<std::path::PathBuf>, String> {
    let options = SqliteConnectOptions::from_str(url).map_err(|e| e.to_string())?;
    let path = options.get_filename();
    // sqlx names `sqlite::memory:` `file:sqlx-in-memory-N` (shared cache): no file either.
    let in_memory = path.as_os_str().is_empty()
        || path.to_string_lossy().starts_with(':')
        || url.contains(":memory:")
        || url.contains("mode=memory");
    Ok((!in_memory).then(|| path.to_path_buf()))
}

/// Why a PostgreSQL server of this `server_version_num` cannot hold Lanes, if it cannot.
pub(super) fn postgres_too_old(version_num: &str) -> Option<String> {
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
pub(super) fn one_line(text: &str) -> String {
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
