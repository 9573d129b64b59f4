//! SQL of the inventory: the nodes and cards the pool has seen, each node's registration and
//! heartbeat, and which cards Lanes manages.

use super::sql::placeholders;
use super::*;

repository!(
    /// Nodes and their cards: registration, heartbeats, what each node reported.
    Inventory, inventory
);

const HEARTBEAT: &str =
    "UPDATE nodes SET heartbeat_ms = $3, last_seen = $4, last_tick = COALESCE($5, last_tick)
     WHERE name = $1 AND instance = $2";
const NODES: &str = "SELECT name, address, version, driver, gpu_source, heartbeat_ms, last_tick
     FROM nodes ORDER BY name";
const KNOWN_GPUS: &str = "SELECT n.name AS node, g.uuid, g.idx AS \"index\", g.name, g.pci_bus_id,
            g.memory_total_bytes, g.managed, g.first_seen, g.last_seen
     FROM gpus g JOIN nodes n ON n.id = g.node_id
     ORDER BY n.name, g.idx";

/// A card as the database remembers it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct KnownGpu {
    pub node: String,
    pub uuid: String,
    pub index: i64,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: i64,
    pub managed: i64,
    #[sqlx(try_from = "Stamp")]
    pub first_seen: DateTime<Utc>,
    #[sqlx(try_from = "Stamp")]
    pub last_seen: DateTime<Utc>,
}

impl Inventory<'_> {
    /// Records that `node` has these cards now, all managed by Lanes.
    pub async fn record(
        &self,
        node: &str,
        gpus: &[GpuInfo],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let all = gpus.iter().map(|g| g.uuid.clone()).collect();
        self.record_cards(node, gpus, &all, now).await
    }

    /// Records that `node` has these cards now (first and last seen times, current index, and
    /// whether Lanes manages each: those in `managed`).
    pub async fn record_cards(
        &self,
        node: &str,
        gpus: &[GpuInfo],
        managed: &std::collections::BTreeSet<String>,
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
                "INSERT INTO gpus (node_id, uuid, idx, name, pci_bus_id, memory_total_bytes, first_seen, last_seen, managed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)
                 ON CONFLICT (node_id, uuid) DO UPDATE SET
                    idx = excluded.idx, name = excluded.name, pci_bus_id = excluded.pci_bus_id,
                    memory_total_bytes = excluded.memory_total_bytes, last_seen = excluded.last_seen,
                    managed = excluded.managed",
            )
            .bind(node_id)
            .bind(&gpu.uuid)
            .bind(gpu.index as i64)
            .bind(&gpu.name)
            .bind(&gpu.pci_bus_id)
            .bind(gpu.memory_total_bytes as i64)
            .bind(Stamp(now))
            .bind(flag(managed.contains(&gpu.uuid)))
            .execute(&mut *tx)
            .await?;
        }
        // Cards the node no longer lists (taken out, or no longer named by `--gpus`) are
        // nobody's to book there any more; their history stays.
        let listed: Vec<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        let sql = format!(
            "UPDATE gpus SET managed = 0 WHERE node_id = $1 AND uuid NOT IN ({})",
            if listed.is_empty() {
                "''".to_string()
            } else {
                placeholders(2, listed.len())
            }
        );
        let mut query = sqlx::query(&sql).bind(node_id);
        for uuid in listed {
            query = query.bind(uuid);
        }
        query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Who serves `node` now, as its row says: `None` for a name never registered.
    pub async fn node_holder(&self, node: &str) -> Result<Option<NodeHolder>, StoreError> {
        let row: Option<(String, i64, String, i64)> = sqlx::query_as(
            "SELECT n.instance, n.heartbeat_ms, n.gpu_source,
                    (SELECT COUNT(*) FROM gpus g WHERE g.node_id = n.id AND g.managed = 1)
             FROM nodes n WHERE n.name = $1",
        )
        .bind(node)
        .fetch_optional(&self.pool)
        .await?;
        Ok(
            row.map(|(instance, heartbeat_ms, gpu_source, cards)| NodeHolder {
                instance,
                heartbeat_ms,
                has_cards: gpu_source != lanes_types::SourceKind::None.as_str() && cards > 0,
            }),
        )
    }

    /// This process stops serving `node`: its heartbeat is cleared so that the next process
    /// under the name starts at once (nothing if another process holds the name now).
    pub async fn leave_node(&self, node: &str, instance: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE nodes SET heartbeat_ms = 0 WHERE name = $1 AND instance = $2")
            .bind(node)
            .bind(instance)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Registers this process as `node`, replacing whoever served that name before (a
    /// process still heartbeating under it learns at its next heartbeat and stops). Returns
    /// how long ago the previous holder last heartbeat, if another process held the name.
    pub async fn register_node(
        &self,
        node: &NodeRegistration,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError> {
        let mut tx = self.begin().await?;
        let previous: Option<(String, i64)> =
            sqlx::query_as("SELECT instance, heartbeat_ms FROM nodes WHERE name = $1")
                .bind(&node.name)
                .fetch_optional(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO nodes (name, first_seen, last_seen, address, version, driver, gpu_source,
                                heartbeat_ms, instance)
             VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (name) DO UPDATE SET last_seen = excluded.last_seen,
                address = excluded.address, version = excluded.version, driver = excluded.driver,
                gpu_source = excluded.gpu_source, heartbeat_ms = excluded.heartbeat_ms,
                instance = excluded.instance",
        )
        .bind(&node.name)
        .bind(Stamp(now))
        .bind(&node.address)
        .bind(&node.version)
        .bind(&node.driver)
        .bind(node.gpu_source.as_str())
        .bind(now.timestamp_millis())
        .bind(&node.instance)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(previous
            .filter(|(instance, beat)| {
                !instance.is_empty() && *instance != node.instance && *beat > 0
            })
            .map(|(_, beat)| now.timestamp_millis() - beat))
    }

    /// Every node that ever registered, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        Ok(sqlx::query_as(NODES).fetch_all(&self.pool).await?)
    }

    /// Every card ever seen, by node then index.
    pub async fn known_gpus(&self) -> Result<Vec<KnownGpu>, StoreError> {
        Ok(sqlx::query_as(KNOWN_GPUS).fetch_all(&self.pool).await?)
    }

    /// This node is alive (its heartbeat time and latest tick), and the pool's nodes and cards,
    /// in one transaction: what a node's beat costs its database. `None` when another process
    /// has registered under this node's name since (this one must stop serving it).
    pub async fn beat(
        &self,
        node: &str,
        instance: &str,
        last_tick: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Option<(Vec<NodeRow>, Vec<KnownGpu>)>, StoreError> {
        let mut tx = self.begin().await?;
        let updated = sqlx::query(HEARTBEAT)
            .bind(node)
            .bind(instance)
            .bind(now.timestamp_millis())
            .bind(Stamp(now))
            .bind(last_tick)
            .execute(&mut *tx)
            .await?;
        if updated.rows_affected() != 1 {
            return Ok(None);
        }
        let nodes = sqlx::query_as(NODES).fetch_all(&mut *tx).await?;
        let cards = sqlx::query_as(KNOWN_GPUS).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some((nodes, cards)))
    }
}

impl Inventory<'_> {
    /// Every known card's index on its node, to name cards given by `(node, uuid)`.
    pub async fn card_index(&self) -> Result<lanes_types::CardIndex, StoreError> {
        Ok(lanes_types::CardIndex::new(
            self.known_gpus()
                .await?
                .into_iter()
                .map(|g| (g.node, g.uuid, g.index as u32)),
        ))
    }
}

/// What a node says of itself when it starts.
#[derive(Clone, Debug)]
pub struct NodeRegistration {
    pub name: String,
    pub address: String,
    pub version: String,
    pub driver: String,
    pub gpu_source: lanes_types::SourceKind,
    /// A random id of this process.
    pub instance: String,
}

/// The process that last registered under a node's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHolder {
    pub instance: String,
    /// Unix milliseconds of its last heartbeat; 0 once it left.
    pub heartbeat_ms: i64,
    /// Whether the node serves cards (a portal without cards may not take its name).
    pub has_cards: bool,
}

/// A node as the database keeps it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct NodeRow {
    pub name: String,
    pub address: String,
    pub version: String,
    pub driver: String,
    /// `SourceKind::as_str`.
    pub gpu_source: String,
    /// Unix ms of its latest heartbeat; 0 when it never sent one.
    pub heartbeat_ms: i64,
    /// Its latest tick, as JSON.
    pub last_tick: Option<String>,
}
