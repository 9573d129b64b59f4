//! SQL of the inventory: the nodes and cards the server has seen.

use super::*;

/// A card as the database remembers it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct KnownGpu {
    pub node: String,
    pub uuid: String,
    pub index: i64,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: i64,
    #[sqlx(try_from = "Stamp")]
    pub first_seen: DateTime<Utc>,
    #[sqlx(try_from = "Stamp")]
    pub last_seen: DateTime<Utc>,
}

impl Store {
    /// Records that `node` has these cards now (first and last seen times, current index).
    pub async fn record_inventory(
        &self,
        node: &str,
        gpus: &[GpuInfo],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        let node_id: i64 = sqlx::query_scalar(
            "INSERT INTO nodes (name, first_seen, last_seen) VALUES ($1, $2, $2)
             ON CONFLICT (name) DO UPDATE SET last_seen = excluded.last_seen
             RETURNING id",
        )
        .bind(node)
        .bind(Stamp(now))
        .fetch_one(&mut *tx)
        .await?;
        for gpu in gpus {
            sqlx::query(
                "INSERT INTO gpus (node_id, uuid, idx, name, pci_bus_id, memory_total_bytes, first_seen, last_seen)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
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
            .bind(Stamp(now))
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
}
