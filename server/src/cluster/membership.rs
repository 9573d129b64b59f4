//! A node's place in the pool: it registers at start (name, address, version, driver), then
//! heartbeats with its latest tick, and reads back every node and card so that this portal
//! shows the whole pool. A node whose heartbeat is older than `--node-timeout` is unreachable:
//! greyed with its last values, and nothing new is placed on its cards (the store's automatic
//! choices and the queue read the same heartbeats). The settings other portals may change
//! (enforcement policy, portal settings) are re-read on the same beat.

use crate::runtime::events::{Change, Event};
use crate::store::{KnownGpu, NodeRegistration, NodeRow, Store, StoreError};
use crate::telemetry::hub::Hub;
use chrono::{DateTime, Utc};
use lanes_types::account::PortalSettings;
use lanes_types::enforcement::Policy;
use lanes_types::{GpuInfo, GpuState, GpuUpdate, Health, NodeState, NodeStatus, SourceKind};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Beats between readings of the settings when no event said they changed.
const SETTINGS_EVERY: u32 = 20;

pub struct Membership {
    /// Set when another process took this node's name over (the server then stops).
    pub displaced: Arc<std::sync::atomic::AtomicBool>,
    pub store: Store,
    pub hub: Arc<Hub>,
    pub registration: NodeRegistration,
    pub timeout: Duration,
    pub policy: Arc<RwLock<Policy>>,
    pub portal: Arc<RwLock<PortalSettings>>,
    /// What time it is: heartbeats carry it and silences are measured by it.
    pub clock: crate::runtime::clock::Clock,
}

impl Membership {
    /// Registers this process as its node and reads the pool once, before anything is served.
    pub async fn join(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        if let Some(age_ms) = self
            .store
            .inventory()
            .register_node(&self.registration, now)
            .await?
        {
            if age_ms < self.timeout.as_millis() as i64 {
                tracing::warn!(
                    node = self.registration.name,
                    "another process heartbeat as node {} {:.1} s ago; this one serves it now, \
                     and that one stops at its next heartbeat",
                    self.registration.name,
                    age_ms as f64 / 1000.0
                );
            }
        }
        self.refresh(now, &mut HashMap::new()).await
    }

    /// Heartbeats and re-reads the pool every [`super::beat_interval`] until `shutdown`. If
    /// another process registers under this node's name, this one stops serving.
    pub fn start(self, shutdown: CancellationToken) {
        let membership = Arc::new(self);
        crate::runtime::tasks::supervise("membership", shutdown.clone(), move || {
            membership.clone().run(shutdown.clone())
        });
    }

    async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let every = super::beat_interval(self.timeout);
        let mut events = self.store.events().subscribe();
        {
            let mut statuses: HashMap<String, NodeStatus> = HashMap::new();
            let mut failing = false;
            let mut beats: u32 = 0;
            loop {
                let now = self.clock.now();
                // Settings are read again when saved anywhere (an event, relayed from the
                // other nodes) and, for an event that was lost, every SETTINGS_EVERY beats.
                let read_settings = events.pending(crate::runtime::events::Event::changes_settings)
                    || beats.is_multiple_of(SETTINGS_EVERY);
                beats = beats.wrapping_add(1);
                match self.beat(now, read_settings, &mut statuses).await {
                    Ok(true) => {
                        if failing {
                            tracing::info!("the database answers again; heartbeats resumed");
                        }
                        failing = false;
                    }
                    Ok(false) => {
                        tracing::error!(
                            "another process now serves node {}; this one stops",
                            self.registration.name
                        );
                        self.displaced
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                        shutdown.cancel();
                        break;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, "heartbeat failed; this node looks unreachable to the others until the database answers again");
                        }
                        failing = true;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        }
    }

    async fn beat(
        &self,
        now: DateTime<Utc>,
        read_settings: bool,
        statuses: &mut HashMap<String, NodeStatus>,
    ) -> Result<bool, StoreError> {
        let last_tick = serde_json::to_string(&updates_of(&self.hub.local_gpus())).ok();
        let registration = &self.registration;
        let Some((rows, cards)) = self
            .store
            .inventory()
            .beat(
                &registration.name,
                &registration.instance,
                last_tick.as_deref(),
                now,
            )
            .await?
        else {
            return Ok(false);
        };
        self.show(&rows, cards, now, statuses);
        if read_settings {
            let policy = self.store.enforcement().policy().await?;
            *self.policy.write().unwrap_or_else(|p| p.into_inner()) = policy;
            let portal = self.store.settings().portal().await?;
            *self.portal.write().unwrap_or_else(|p| p.into_inner()) = portal;
        }
        Ok(true)
    }

    /// Reads every node and card into the hub; a node that came back or went silent is an
    /// event (the queue and any-N see the pool change).
    async fn refresh(
        &self,
        now: DateTime<Utc>,
        statuses: &mut HashMap<String, NodeStatus>,
    ) -> Result<(), StoreError> {
        let rows = self.store.inventory().nodes().await?;
        let cards = self.store.inventory().known_gpus().await?;
        self.show(&rows, cards, now, statuses);
        Ok(())
    }

    /// Puts the pool's nodes and cards in the hub; a node that came back or went silent is an
    /// event.
    fn show(
        &self,
        rows: &[NodeRow],
        cards: Vec<KnownGpu>,
        now: DateTime<Utc>,
        statuses: &mut HashMap<String, NodeStatus>,
    ) {
        let fresh_since = self.store.fresh_since_ms(now);
        let nodes = node_states(rows, &cards, &self.registration.name, fresh_since);
        let mut changed = false;
        for node in &nodes {
            let before = statuses.insert(node.name.clone(), node.status);
            if before.is_some_and(|b| b != node.status) {
                changed = true;
                match node.status {
                    NodeStatus::Up => tracing::info!(node = node.name, "node is back"),
                    NodeStatus::Unreachable => {
                        tracing::warn!(node = node.name, "node is unreachable")
                    }
                }
            }
        }
        self.hub
            .set_pool(nodes, remote_cards(rows, cards, &self.registration.name));
        if changed {
            self.store
                .events()
                .emit_here(Event::CardsChanged(Change::PoolChanged));
        }
    }
}

/// Every node as the portal shows it: this node is up (it is answering right now), the others
/// by the age of their heartbeat.
pub fn node_states(
    rows: &[NodeRow],
    cards: &[KnownGpu],
    this_node: &str,
    fresh_since_ms: i64,
) -> Vec<NodeState> {
    rows.iter()
        .filter(|row| row.heartbeat_ms > 0 || row.name == this_node)
        .map(|row| NodeState {
            name: row.name.clone(),
            address: row.address.clone(),
            version: row.version.clone(),
            driver: row.driver.clone(),
            gpu_source: SourceKind::parse(&row.gpu_source).unwrap_or(SourceKind::Simulated),
            status: if row.name == this_node || row.heartbeat_ms >= fresh_since_ms {
                NodeStatus::Up
            } else {
                NodeStatus::Unreachable
            },
            last_seen: DateTime::from_timestamp_millis(row.heartbeat_ms).unwrap_or_default(),
            cards: cards
                .iter()
                .filter(|c| c.node == row.name && c.managed == 1)
                .count() as u32,
        })
        .collect()
}

/// The other nodes' cards, each with the latest values its node stored.
fn remote_cards(rows: &[NodeRow], cards: Vec<KnownGpu>, this_node: &str) -> Vec<GpuState> {
    let last: HashMap<&str, Vec<GpuUpdate>> = rows
        .iter()
        .filter_map(|row| {
            let tick = serde_json::from_str(row.last_tick.as_deref()?).ok()?;
            Some((row.name.as_str(), tick))
        })
        .collect();
    cards
        .into_iter()
        .filter(|card| card.node != this_node)
        // A card a node no longer lists stays in the history, not on the dashboard.
        .filter(|card| {
            card.managed == 1
                || last
                    .get(card.node.as_str())
                    .is_some_and(|t| t.iter().any(|u| u.uuid == card.uuid))
        })
        .map(|card| {
            let update = last
                .get(card.node.as_str())
                .and_then(|t| t.iter().find(|u| u.uuid == card.uuid));
            GpuState {
                unmanaged: card.managed == 0,
                health: update.map_or(Health::Ok, |u| u.health.clone()),
                sample: update.and_then(|u| u.sample.clone()),
                processes: update.map(|u| u.processes.clone()).unwrap_or_default(),
                idle_booking: update.and_then(|u| u.idle_booking),
                info: GpuInfo {
                    node: card.node,
                    uuid: card.uuid,
                    index: card.index as u32,
                    name: card.name,
                    pci_bus_id: card.pci_bus_id,
                    memory_total_bytes: card.memory_total_bytes as u64,
                },
                condition: Default::default(),
                counters: None,
            }
        })
        .collect()
}

/// A node's cards as a tick's updates (what it stores as its last values).
pub fn updates_of(gpus: &[GpuState]) -> Vec<GpuUpdate> {
    gpus.iter()
        .map(|g| GpuUpdate {
            node: g.info.node.clone(),
            uuid: g.info.uuid.clone(),
            health: g.health.clone(),
            sample: g.sample.clone(),
            processes: g.processes.clone(),
            idle_booking: g.idle_booking,
            condition: Default::default(),
            counters: None,
            xids: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, heartbeat_ms: i64) -> NodeRow {
        NodeRow {
            name: name.into(),
            address: "10.0.0.1:3000".into(),
            version: "0.1.0".into(),
            driver: "simulated".into(),
            gpu_source: "simulated".into(),
            heartbeat_ms,
            last_tick: None,
        }
    }

    #[test]
    fn a_node_silent_past_the_timeout_is_unreachable_and_this_node_never_is() {
        let rows = [
            row("a", 10_000),
            row("b", 4_000),
            row("me", 1),
            row("never", 0),
        ];
        let nodes = node_states(&rows, &[], "me", 5_000);
        let status: Vec<(&str, NodeStatus)> =
            nodes.iter().map(|n| (n.name.as_str(), n.status)).collect();
        assert_eq!(
            status,
            [
                ("a", NodeStatus::Up),
                ("b", NodeStatus::Unreachable),
                ("me", NodeStatus::Up)
            ]
        );
        assert_eq!(nodes[1].last_seen.timestamp_millis(), 4_000);
    }
}
