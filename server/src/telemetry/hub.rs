//! The hub between the poller and its consumers: it keeps the fleet's current state and last
//! five minutes for newcomers, and fans each tick out to every subscriber without ever waiting
//! for one of them. With several nodes, the pool is this node's cards plus every other node's,
//! whose ticks arrive over the bus (`cluster`); only this node's ticks reach the watchdog,
//! the metrics and the history writer (each node writes its own).

use crate::telemetry::metrics::Metrics;
use axum::extract::ws::Utf8Bytes;
use lanes_types::{
    FleetSnapshot, GpuInfo, GpuState, GpuUpdate, Health, NodeState, ProcessLane, SourceKind,
    TelemetryMessage,
};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// Ticks a subscriber may fall behind before it is told it lagged (and the websocket drops it).
pub const TICK_BUFFER: usize = 16;

pub struct Hub {
    /// This node's name: its cards are the ones the poller reads.
    node: String,
    state: RwLock<FleetSnapshot>,
    /// Each tick serialized once, shared by every logged-in subscriber.
    ticks: broadcast::Sender<Utf8Bytes>,
    /// The same ticks without process owners and commands, for anonymous viewers (serialized
    /// only while someone listens).
    anonymous_ticks: broadcast::Sender<Utf8Bytes>,
    /// Each tick as data, for the watchdog.
    raw_ticks: broadcast::Sender<Arc<Tick>>,
    /// The Xid events of the ticks since the health keeper last took them, by card UUID: a
    /// keeper that falls behind skips ticks, never an Xid (at most [`XID_BACKLOG`] are kept).
    xids: std::sync::Mutex<HashMap<String, Vec<lanes_types::health::XidEvent>>>,
    /// The watchdog's latest judgement of each card, applied to the ticks that follow.
    notes: RwLock<HashMap<String, CardNotes>>,
    /// The health keeper's latest verdict on each card, applied to the ticks that follow.
    conditions: RwLock<HashMap<String, lanes_types::health::Condition>>,
    metrics: Arc<Metrics>,
    /// Woken when a viewer subscribes (the relay asks the other nodes for their ticks then).
    viewer_joined: tokio::sync::Notify,
}

/// Xid events kept for a health keeper that has not taken them; the oldest go past this (a
/// card raising thousands of Xids between two passes is judged on the latest).
pub const XID_BACKLOG: usize = 1024;

/// One poll of every card.
#[derive(Clone, Debug)]
pub struct Tick {
    pub at_ms: i64,
    pub gpus: Vec<GpuUpdate>,
}

/// What the watchdog found on one card (by UUID).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CardNotes {
    pub lanes: HashMap<u32, ProcessLane>,
    pub idle_booking: Option<i64>,
}

impl Hub {
    /// A hub for node `node`'s cards, all managed (see [`Hub::with_unmanaged`]).
    pub fn new(
        node: &str,
        source: SourceKind,
        interval: Duration,
        inventory: &[GpuInfo],
        metrics: Arc<Metrics>,
    ) -> Self {
        let gpus = inventory
            .iter()
            .map(|info| GpuState {
                info: info.clone(),
                health: Health::Ok,
                sample: None,
                processes: Vec::new(),
                idle_booking: None,
                unmanaged: false,
                condition: Default::default(),
                counters: None,
            })
            .collect();
        let state = FleetSnapshot {
            source,
            interval_ms: interval.as_millis() as u64,
            gpus,
            history: Vec::new(),
            nodes: Vec::new(),
        };
        Self {
            node: node.to_string(),
            state: RwLock::new(state),
            ticks: broadcast::channel(TICK_BUFFER).0,
            anonymous_ticks: broadcast::channel(TICK_BUFFER).0,
            raw_ticks: broadcast::channel(TICK_BUFFER).0,
            xids: Default::default(),
            notes: RwLock::default(),
            conditions: RwLock::default(),
            metrics,
            viewer_joined: tokio::sync::Notify::new(),
        }
    }

    /// Records one poll and sends it to every subscriber. Never blocks on a consumer.
    pub fn publish(&self, at_ms: i64, mut updates: Vec<GpuUpdate>, poll_duration: Duration) {
        self.annotate(&mut updates);
        self.metrics.record_tick(&updates, poll_duration);
        if self.raw_ticks.receiver_count() > 0 {
            self.keep_xids(&updates);
            let _ = self.raw_ticks.send(Arc::new(Tick {
                at_ms,
                gpus: updates.clone(),
            }));
        }
        self.write_state().apply_updates(updates.clone());
        if updates.is_empty() {
            return; // a portal without cards: nothing to tell anyone
        }
        // Send errors only mean nobody is listening right now.
        self.broadcast(&TelemetryMessage::Tick {
            at_ms,
            gpus: updates,
        });
    }

    /// Marks this node's cards that Lanes does not manage (`--gpus nvml:0,2` left them out).
    pub fn with_unmanaged(self, managed: &std::collections::BTreeSet<String>) -> Self {
        for gpu in &mut self.write_state().gpus {
            gpu.unmanaged = !managed.contains(&gpu.info.uuid);
        }
        self
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, FleetSnapshot> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, FleetSnapshot> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Another node's tick, as the bus brought it: its cards are updated and every viewer
    /// gets it. Updates of this node's own cards are ignored (the poller is their source).
    pub fn publish_remote(&self, at_ms: i64, mut updates: Vec<GpuUpdate>) {
        updates.retain(|u| u.node != self.node);
        if updates.is_empty() {
            return;
        }
        self.write_state().apply_updates(updates.clone());
        self.broadcast(&TelemetryMessage::Tick {
            at_ms,
            gpus: updates,
        });
    }

    /// The pool as the database lists it: every node, and the cards of the other nodes (with
    /// the last values each node stored, for cards not seen yet). Viewers get a new snapshot
    /// when a node or card came or went, or a node's status changed.
    pub fn set_pool(&self, nodes: Vec<NodeState>, remote: Vec<GpuState>) {
        let message = {
            let mut state = self.write_state();
            let shape = |s: &FleetSnapshot| {
                let nodes: Vec<_> = s
                    .nodes
                    .iter()
                    .map(|n| (n.name.clone(), n.status, n.version.clone(), n.cards))
                    .collect();
                let cards: Vec<_> = s
                    .gpus
                    .iter()
                    .map(|g| (g.info.node.clone(), g.info.uuid.clone(), g.unmanaged))
                    .collect();
                (nodes, cards)
            };
            let before = shape(&state);
            let mut gpus: Vec<GpuState> = state
                .gpus
                .iter()
                .filter(|g| g.info.node == self.node)
                .cloned()
                .collect();
            for card in remote.into_iter().filter(|c| c.info.node != self.node) {
                let known = state
                    .gpus
                    .iter()
                    .find(|g| g.info.node == card.info.node && g.info.uuid == card.info.uuid);
                gpus.push(match known {
                    Some(known) => GpuState {
                        info: card.info,
                        unmanaged: card.unmanaged,
                        ..known.clone()
                    },
                    None => card,
                });
            }
            gpus.sort_by(|a, b| (&a.info.node, a.info.index).cmp(&(&b.info.node, b.info.index)));
            state.history.retain(|h| {
                gpus.iter()
                    .any(|g| g.info.node == h.node && g.info.uuid == h.uuid)
            });
            state.gpus = gpus;
            state.nodes = nodes;
            (shape(&state) != before).then(|| TelemetryMessage::Snapshot(state.clone()))
        };
        if let Some(message) = message {
            self.broadcast(&message);
        }
    }

    /// Sends a message to every viewer, as each may see it.
    fn broadcast(&self, message: &TelemetryMessage) {
        if self.anonymous_ticks.receiver_count() > 0 {
            let _ = self
                .anonymous_ticks
                .send(frame(&message.clone().anonymized()));
        }
        let _ = self.ticks.send(frame(message));
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This node's own cards (the ones its runner may start jobs on).
    pub fn local_gpus(&self) -> Vec<GpuState> {
        self.read_state()
            .gpus
            .iter()
            .filter(|g| g.info.node == self.node)
            .cloned()
            .collect()
    }

    /// The pool now, without the recent history (cheap enough for every queue pass).
    pub fn snapshot_without_history(&self) -> FleetSnapshot {
        let state = self.read_state();
        FleetSnapshot {
            source: state.source,
            interval_ms: state.interval_ms,
            gpus: state.gpus.clone(),
            history: Vec::new(),
            nodes: state.nodes.clone(),
        }
    }

    /// Ticks from now on, as data (for the watchdog).
    pub fn subscribe_raw(&self) -> broadcast::Receiver<Arc<Tick>> {
        self.raw_ticks.subscribe()
    }

    fn keep_xids(&self, updates: &[GpuUpdate]) {
        if updates.iter().all(|g| g.xids.is_empty()) {
            return;
        }
        let mut kept = self.xids.lock().unwrap_or_else(|p| p.into_inner());
        for gpu in updates.iter().filter(|g| !g.xids.is_empty()) {
            let list = kept.entry(gpu.uuid.clone()).or_default();
            list.extend(gpu.xids.iter().cloned());
            keep_latest(list);
        }
    }

    /// The Xid events published since the last call, by card UUID, whichever ticks carried
    /// them (for the health keeper, which may have skipped ticks).
    pub fn take_xids(&self) -> HashMap<String, Vec<lanes_types::health::XidEvent>> {
        std::mem::take(&mut *self.xids.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Returns Xid events a keeper took but could not record: they come before any kept since.
    pub fn give_back_xids(&self, xids: HashMap<String, Vec<lanes_types::health::XidEvent>>) {
        let mut kept = self.xids.lock().unwrap_or_else(|p| p.into_inner());
        for (uuid, mut list) in xids.into_iter().filter(|(_, l)| !l.is_empty()) {
            let newer = kept.remove(&uuid).unwrap_or_default();
            list.extend(newer);
            keep_latest(&mut list);
            kept.insert(uuid, list);
        }
    }

    /// Replaces the watchdog's notes; they mark the processes and cards of the ticks that follow.
    pub fn set_notes(&self, notes: HashMap<String, CardNotes>) {
        *self.notes.write().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// Replaces the health keeper's verdicts; they mark the cards of the ticks that follow, and
    /// the current state at once (a page loaded now shows them).
    pub fn set_conditions(&self, conditions: HashMap<String, lanes_types::health::Condition>) {
        {
            let mut state = self.write_state();
            for gpu in state.gpus.iter_mut().filter(|g| g.info.node == self.node) {
                gpu.condition = conditions.get(&gpu.info.uuid).cloned().unwrap_or_default();
            }
        }
        *self.conditions.write().unwrap_or_else(|p| p.into_inner()) = conditions;
    }

    fn annotate(&self, updates: &mut [GpuUpdate]) {
        {
            let conditions = self.conditions.read().unwrap_or_else(|p| p.into_inner());
            for update in updates.iter_mut() {
                if let Some(condition) = conditions.get(&update.uuid) {
                    update.condition = condition.clone();
                }
            }
        }
        let notes = self.notes.read().unwrap_or_else(|p| p.into_inner());
        for update in updates {
            let Some(card) = notes.get(&update.uuid) else {
                continue;
            };
            update.idle_booking = card.idle_booking;
            for process in &mut update.processes {
                process.lane = card.lanes.get(&process.pid).copied();
            }
        }
    }

    /// Ticks from now on, as `viewer` may see them. Subscribe before taking the snapshot, so
    /// that no tick falls between.
    pub fn subscribe(&self, viewer: Viewer) -> broadcast::Receiver<Utf8Bytes> {
        let receiver = match viewer {
            Viewer::LoggedIn => self.ticks.subscribe(),
            Viewer::Anonymous => self.anonymous_ticks.subscribe(),
        };
        self.viewer_joined.notify_one();
        receiver
    }

    /// How many viewers (websockets) are subscribed now.
    pub fn viewers(&self) -> usize {
        self.ticks.receiver_count() + self.anonymous_ticks.receiver_count()
    }

    /// Waits until a viewer subscribes (at once if one did since the last wait).
    pub async fn viewer_joined(&self) {
        self.viewer_joined.notified().await
    }

    pub fn snapshot(&self) -> FleetSnapshot {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The snapshot as the first websocket message for `viewer`.
    pub fn snapshot_frame(&self, viewer: Viewer) -> Utf8Bytes {
        let message = TelemetryMessage::Snapshot(self.snapshot());
        match viewer {
            Viewer::LoggedIn => frame(&message),
            Viewer::Anonymous => frame(&message.anonymized()),
        }
    }

    pub fn gpus(&self) -> Vec<GpuState> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .gpus
            .clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Who watches: logged-in users see process owners and commands, anonymous viewers do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Viewer {
    LoggedIn,
    Anonymous,
}

fn frame(message: &TelemetryMessage) -> Utf8Bytes {
    Utf8Bytes::from(serde_json::to_string(message).unwrap_or_default())
}

impl lanes_app::ssr::FleetView for Hub {
    fn snapshot(&self) -> FleetSnapshot {
        Hub::snapshot(self)
    }
}

/// At most the latest [`XID_BACKLOG`] events of a card are kept for the keeper.
fn keep_latest(list: &mut Vec<lanes_types::health::XidEvent>) {
    let over = list.len().saturating_sub(XID_BACKLOG);
    list.drain(..over);
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::{GpuSample, NodeStatus};

    fn card(node: &str, uuid: &str) -> GpuInfo {
        GpuInfo {
            node: node.into(),
            uuid: uuid.into(),
            index: 0,
            name: "Simulated H200".into(),
            pci_bus_id: "00000000:18:00.0".into(),
            memory_total_bytes: 1 << 30,
        }
    }

    fn node(name: &str, status: NodeStatus) -> NodeState {
        NodeState {
            name: name.into(),
            address: String::new(),
            version: "0.1.0".into(),
            driver: "simulated".into(),
            gpu_source: SourceKind::Simulated,
            status,
            last_seen: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            cards: 1,
        }
    }

    fn state(info: GpuInfo) -> GpuState {
        GpuState {
            info,
            health: Health::Ok,
            sample: None,
            processes: Vec::new(),
            idle_booking: None,
            unmanaged: false,
            condition: Default::default(),
            counters: None,
        }
    }

    fn update(node: &str, uuid: &str, util: u32) -> GpuUpdate {
        GpuUpdate {
            node: node.into(),
            uuid: uuid.into(),
            health: Health::Ok,
            sample: Some(GpuSample {
                at_ms: 1,
                utilization_gpu_pct: util,
                utilization_memory_pct: 0,
                memory_used_bytes: 0,
                temperature_c: None,
                power_watts: None,
                power_limit_watts: None,
                sm_clock_mhz: None,
                energy_mj: None,
            }),
            processes: Vec::new(),
            idle_booking: None,
            condition: Default::default(),
            counters: None,
            xids: Vec::new(),
        }
    }

    /// Node a's hub, with its one card GPU-a.
    fn hub_of_a() -> Hub {
        Hub::new(
            "a",
            SourceKind::Simulated,
            Duration::from_secs(1),
            &[card("a", "GPU-a")],
            Arc::new(Metrics::new()),
        )
    }

    fn message(frame: Utf8Bytes) -> TelemetryMessage {
        serde_json::from_str(frame.as_str()).unwrap()
    }

    #[test]
    fn the_pool_joins_other_nodes_cards_and_a_status_change_sends_a_fresh_snapshot() {
        let hub = hub_of_a();
        let mut viewer = hub.subscribe(Viewer::LoggedIn);
        hub.set_pool(
            vec![node("a", NodeStatus::Up), node("b", NodeStatus::Up)],
            vec![state(card("b", "GPU-b"))],
        );
        let TelemetryMessage::Snapshot(first) = message(viewer.try_recv().unwrap()) else {
            panic!("a node that joins sends a snapshot");
        };
        assert_eq!(first.gpus.len(), 2);
        // The other node's tick reaches viewers; one naming this node's card is ignored.
        hub.publish_remote(5, vec![update("b", "GPU-b", 70), update("a", "GPU-a", 99)]);
        let TelemetryMessage::Tick { gpus, .. } = message(viewer.try_recv().unwrap()) else {
            panic!("a remote tick is forwarded");
        };
        assert_eq!(gpus.len(), 1);
        let b = hub
            .snapshot()
            .gpus
            .into_iter()
            .find(|g| g.info.node == "b")
            .unwrap();
        assert_eq!(b.sample.unwrap().utilization_gpu_pct, 70);
        assert!(hub.local_gpus().iter().all(|g| g.sample.is_none()));
        // The same pool again changes nothing; b going silent keeps its last values.
        hub.set_pool(
            vec![node("a", NodeStatus::Up), node("b", NodeStatus::Up)],
            vec![state(card("b", "GPU-b"))],
        );
        assert!(viewer.try_recv().is_err(), "nothing changed, nothing sent");
        hub.set_pool(
            vec![
                node("a", NodeStatus::Up),
                node("b", NodeStatus::Unreachable),
            ],
            vec![state(card("b", "GPU-b"))],
        );
        let TelemetryMessage::Snapshot(silent) = message(viewer.try_recv().unwrap()) else {
            panic!("a status change sends a snapshot");
        };
        assert!(!silent.node_is_up("b"));
        let b = silent.gpus.iter().find(|g| g.info.node == "b").unwrap();
        assert_eq!(b.sample.as_ref().unwrap().utilization_gpu_pct, 70);
    }

    #[test]
    fn a_keeper_that_falls_behind_skips_ticks_but_no_xid() {
        let hub = hub_of_a();
        let mut keeper = hub.subscribe_raw();
        let mut with_xid = update("a", "GPU-a", 0);
        with_xid.xids.push(lanes_types::health::XidEvent {
            xid: 13,
            pid: Some(42),
            at_ms: 1,
        });
        hub.publish(1, vec![with_xid], Duration::ZERO);
        for at in 2..(2 + 2 * TICK_BUFFER as i64) {
            hub.publish(at, vec![update("a", "GPU-a", 0)], Duration::ZERO);
        }
        // The tick that carried the Xid is gone from the keeper's channel...
        assert!(matches!(
            keeper.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        // ...and its Xid is still there for the next pass, once.
        let taken = hub.take_xids();
        assert_eq!(taken["GPU-a"].len(), 1);
        assert_eq!(taken["GPU-a"][0].pid, Some(42));
        assert!(hub.take_xids().is_empty());
        // A pass that could not record it gives it back, ahead of one published since.
        let mut later = update("a", "GPU-a", 0);
        later.xids.push(lanes_types::health::XidEvent {
            xid: 79,
            pid: None,
            at_ms: 99,
        });
        hub.publish(99, vec![later], Duration::ZERO);
        hub.give_back_xids(taken);
        let again: Vec<u32> = hub.take_xids()["GPU-a"].iter().map(|x| x.xid).collect();
        assert_eq!(again, vec![13, 79]);
    }
}
