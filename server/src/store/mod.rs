//! All SQL lives here. Callers see domain types and [`StoreError`], never a driver type, so a
//! PostgreSQL backend (planned for multi-node) can be added inside this module alone.

use chrono::{DateTime, Utc};
use lanes_app::model::GpuInfo;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

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
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
}

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
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(open_err)?;
        sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
        Ok(Self { pool })
    }

    /// Records that `node` has these cards now (first and last seen times, current index).
    pub async fn record_inventory(
        &self,
        node: &str,
        gpus: &[GpuInfo],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
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
    async fn a_non_sqlite_url_is_refused_with_a_clear_message() {
        let err = Store::open("postgres://localhost/lanes").await.unwrap_err();
        assert!(err.to_string().contains("expected sqlite://PATH"), "{err}");
    }
}
