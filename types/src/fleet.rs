//! The fleet as a viewer sees it, kept current by applying ticks. The server's hub and the
//! browser run this same code, so the snapshot a new viewer gets equals the state an old viewer
//! has built from ticks.

use crate::{
    FleetSnapshot, GpuHistory, GpuState, GpuUpdate, HistoryPoint, TelemetryMessage,
    HISTORY_WINDOW_MS,
};

/// A card counts as busy when a kernel ran for at least this share of the last period, or when
/// any process holds it.
pub const BUSY_UTILIZATION_PCT: u32 = 10;

impl GpuState {
    pub fn is_busy(&self) -> bool {
        !self.processes.is_empty()
            || self
                .sample
                .as_ref()
                .is_some_and(|s| s.utilization_gpu_pct >= BUSY_UTILIZATION_PCT)
    }
}

impl GpuHistory {
    /// Appends a point unless it is not newer than the last one (a tick seen twice), then drops
    /// points older than the window.
    pub fn push(&mut self, point: HistoryPoint) {
        if self.points.last().is_some_and(|p| p.at_ms >= point.at_ms) {
            return;
        }
        self.points.push(point);
        let oldest = point.at_ms - HISTORY_WINDOW_MS;
        let stale = self.points.partition_point(|p| p.at_ms < oldest);
        self.points.drain(..stale);
    }
}

/// What the dashboard's summary line says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetSummary {
    pub total: usize,
    pub busy: usize,
    pub idle: usize,
    pub unhealthy: usize,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

impl FleetSummary {
    /// "8 GPUs", "3 busy", "5 idle" and, when there are any, "1 unhealthy": the summary's words.
    pub fn counts(&self) -> Vec<String> {
        let mut parts = vec![
            format!("{} GPUs", self.total),
            format!("{} busy", self.busy),
            format!("{} idle", self.idle),
        ];
        if self.unhealthy > 0 {
            parts.push(format!("{} unhealthy", self.unhealthy));
        }
        parts
    }
}

impl FleetSnapshot {
    /// Applies one live-channel message: a snapshot replaces everything, a tick updates cards.
    pub fn apply(&mut self, message: TelemetryMessage) {
        match message {
            TelemetryMessage::Snapshot(snapshot) => *self = snapshot,
            TelemetryMessage::Tick { gpus, .. } => self.apply_updates(gpus),
            TelemetryMessage::Changed { .. } => {}
        }
    }

    /// Updates the cards named in `updates` and extends their history. Updates for cards this
    /// snapshot does not know are ignored: a new card arrives with the next snapshot.
    pub fn apply_updates(&mut self, updates: Vec<GpuUpdate>) {
        for update in updates {
            let Some(pos) = self
                .gpus
                .iter()
                .position(|g| g.info.node == update.node && g.info.uuid == update.uuid)
            else {
                continue;
            };
            if let Some(sample) = &update.sample {
                self.history_mut(pos).push(HistoryPoint::of(sample));
            }
            let gpu = &mut self.gpus[pos];
            gpu.health = update.health;
            gpu.sample = update.sample;
            gpu.processes = update.processes;
            gpu.idle_booking = update.idle_booking;
            gpu.condition = update.condition;
            if update.counters.is_some() {
                gpu.counters = update.counters;
            }
        }
    }

    fn history_mut(&mut self, gpu_pos: usize) -> &mut GpuHistory {
        let info = &self.gpus[gpu_pos].info;
        let found = self
            .history
            .iter()
            .position(|h| h.node == info.node && h.uuid == info.uuid);
        let pos = found.unwrap_or_else(|| {
            self.history.push(GpuHistory {
                node: info.node.clone(),
                uuid: info.uuid.clone(),
                points: Vec::new(),
            });
            self.history.len() - 1
        });
        &mut self.history[pos]
    }

    /// Recent points of one card, oldest first.
    pub fn history_of(&self, node: &str, uuid: &str) -> &[HistoryPoint] {
        self.history
            .iter()
            .find(|h| h.node == node && h.uuid == uuid)
            .map_or(&[], |h| &h.points)
    }

    pub fn gpu(&self, node: &str, uuid: &str) -> Option<&GpuState> {
        self.gpus
            .iter()
            .find(|g| g.info.node == node && g.info.uuid == uuid)
    }

    pub fn summary(&self) -> FleetSummary {
        summarize(self.gpus.iter())
    }

    /// The summary of one node's cards.
    pub fn node_summary(&self, node: &str) -> FleetSummary {
        summarize(self.gpus.iter().filter(|g| g.info.node == node))
    }

    pub fn node(&self, name: &str) -> Option<&crate::NodeState> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Whether the cards of `node` are live: it heartbeats (or nothing says otherwise, as on a
    /// single server that lists no nodes).
    pub fn node_is_up(&self, node: &str) -> bool {
        self.node(node)
            .is_none_or(|n| n.status == crate::NodeStatus::Up)
    }

    /// The names of the nodes that have cards, in the order the dashboard groups them.
    pub fn node_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.gpus.iter().map(|g| g.info.node.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// The newest sample time across the fleet, if any card has reported.
    pub fn latest_at_ms(&self) -> Option<i64> {
        self.gpus
            .iter()
            .filter_map(|g| g.sample.as_ref().map(|s| s.at_ms))
            .max()
    }
}

fn summarize<'a>(gpus: impl Iterator<Item = &'a GpuState>) -> FleetSummary {
    let mut summary = FleetSummary::default();
    for gpu in gpus {
        summary.total += 1;
        summary.memory_total_bytes += gpu.info.memory_total_bytes;
        if !gpu.health.is_ok() {
            summary.unhealthy += 1;
            continue;
        }
        if let Some(sample) = &gpu.sample {
            summary.memory_used_bytes += sample.memory_used_bytes;
        }
        if gpu.is_busy() {
            summary.busy += 1;
        } else {
            summary.idle += 1;
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuInfo, GpuProcess, GpuSample, Health, SourceKind};

    #[test]
    fn a_source_kind_names_itself_as_on_the_wire_and_reads_that_name_back() {
        for kind in SourceKind::ALL {
            let wire = serde_json::to_value(kind).unwrap();
            assert_eq!(wire.as_str(), Some(kind.as_str()));
            assert_eq!(SourceKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(SourceKind::parse("tpu"), None);
    }

    #[test]
    fn a_message_reads_the_same_from_its_text_in_any_order_of_its_fields() {
        use crate::{Area, TelemetryMessage};
        let mut snapshot = fleet(&["a", "b"]);
        snapshot.gpus[0].sample = Some(sample(1_000, 40, 7));
        snapshot.gpus[1].health = Health::Unhealthy {
            reason: "gone".into(),
        };
        snapshot.gpus[0].idle_booking = Some(3);
        snapshot.gpus[1].unmanaged = true;
        let messages = [
            TelemetryMessage::Snapshot(snapshot),
            TelemetryMessage::Tick {
                at_ms: 2_000,
                gpus: vec![update("a", Some(sample(2_000, 90, 8)), Health::Ok)],
            },
            TelemetryMessage::Changed {
                areas: vec![Area::Queue, Area::Bookings],
            },
        ];
        for message in messages {
            let text = serde_json::to_string(&message).unwrap();
            assert!(text.starts_with(r#"{"type":"#), "{text}");
            assert_eq!(TelemetryMessage::from_json(&text).unwrap(), message);
            // Through `Value` the keys come out sorted: `type` is no longer first.
            let sorted = serde_json::to_value(&message).unwrap().to_string();
            assert!(!sorted.starts_with(r#"{"type":"#), "{sorted}");
            assert_eq!(TelemetryMessage::from_json(&sorted).unwrap(), message);
            assert_eq!(
                serde_json::from_str::<TelemetryMessage>(&sorted).unwrap(),
                message
            );
        }
        let unknown = TelemetryMessage::from_json(r#"{"type":"gossip"}"#).unwrap_err();
        assert!(unknown.to_string().contains("gossip"), "{unknown}");
        assert!(TelemetryMessage::from_json(r#"{"at_ms":1}"#).is_err());
    }

    fn info(uuid: &str) -> GpuInfo {
        GpuInfo {
            node: "n1".into(),
            uuid: uuid.into(),
            index: 0,
            name: "Test GPU".into(),
            pci_bus_id: "00000000:01:00.0".into(),
            memory_total_bytes: 100,
        }
    }

    fn sample(at_ms: i64, util: u32, mem: u64) -> GpuSample {
        GpuSample {
            at_ms,
            utilization_gpu_pct: util,
            utilization_memory_pct: 0,
            memory_used_bytes: mem,
            temperature_c: Some(40),
            power_watts: Some(100.0),
            power_limit_watts: Some(700.0),
            sm_clock_mhz: Some(1500),
            energy_mj: None,
        }
    }

    fn fleet(uuids: &[&str]) -> FleetSnapshot {
        FleetSnapshot {
            source: SourceKind::Simulated,
            interval_ms: 1000,
            gpus: uuids
                .iter()
                .map(|u| GpuState {
                    info: info(u),
                    health: Health::Ok,
                    sample: None,
                    processes: vec![],
                    idle_booking: None,
                    unmanaged: false,
                    condition: Default::default(),
                    counters: None,
                })
                .collect(),
            history: vec![],
            nodes: vec![],
        }
    }

    fn update(uuid: &str, sample: Option<GpuSample>, health: Health) -> GpuUpdate {
        GpuUpdate {
            node: "n1".into(),
            uuid: uuid.into(),
            health,
            sample,
            processes: vec![],
            idle_booking: None,
            condition: Default::default(),
            counters: None,
            xids: Vec::new(),
        }
    }

    #[test]
    fn a_tick_updates_the_named_card_and_extends_its_history() {
        let mut f = fleet(&["a", "b"]);
        f.apply_updates(vec![update("b", Some(sample(1_000, 50, 10)), Health::Ok)]);
        assert_eq!(
            f.gpu("n1", "b")
                .unwrap()
                .sample
                .as_ref()
                .unwrap()
                .utilization_gpu_pct,
            50
        );
        assert!(f.gpu("n1", "a").unwrap().sample.is_none());
        assert_eq!(f.history_of("n1", "b").len(), 1);
        assert!(f.history_of("n1", "a").is_empty());
    }

    #[test]
    fn history_keeps_only_the_window_and_ignores_repeated_ticks() {
        let mut h = GpuHistory {
            node: "n1".into(),
            uuid: "a".into(),
            points: vec![],
        };
        for t in 0..=600 {
            h.push(HistoryPoint::of(&sample(t * 1000, 1, 1)));
        }
        h.push(HistoryPoint::of(&sample(600_000, 99, 1)));
        assert_eq!(h.points.first().unwrap().at_ms, 600_000 - HISTORY_WINDOW_MS);
        assert_eq!(h.points.last().unwrap().utilization_gpu_pct, 1);
        assert_eq!(h.points.len(), 301);
    }

    #[test]
    fn an_unhealthy_card_is_counted_apart_and_adds_no_memory_in_use() {
        let mut f = fleet(&["a", "b", "c"]);
        f.apply_updates(vec![
            update("a", Some(sample(1, 80, 40)), Health::Ok),
            update("b", Some(sample(1, 0, 5)), Health::Ok),
            update(
                "c",
                None,
                Health::Unhealthy {
                    reason: "GPU is lost".into(),
                },
            ),
        ]);
        let s = f.summary();
        assert_eq!((s.total, s.busy, s.idle, s.unhealthy), (3, 1, 1, 1));
        assert_eq!((s.memory_used_bytes, s.memory_total_bytes), (45, 300));
    }

    #[test]
    fn a_card_with_a_process_is_busy_even_at_zero_utilization() {
        let mut f = fleet(&["a"]);
        let mut u = update("a", Some(sample(1, 0, 5)), Health::Ok);
        u.processes.push(GpuProcess {
            pid: 7,
            used_memory_bytes: Some(5),
            user: Some("alice".into()),
            command: Some("python".into()),
            lane: None,
            sm_pct: None,
            mem_pct: None,
            simulated: false,
            container: None,
        });
        f.apply_updates(vec![u]);
        assert_eq!(f.summary().busy, 1);
    }

    #[test]
    fn updates_for_unknown_cards_are_ignored() {
        let mut f = fleet(&["a"]);
        f.apply_updates(vec![update("zz", Some(sample(1, 1, 1)), Health::Ok)]);
        assert!(f.history.is_empty());
        assert!(f.gpu("n1", "a").unwrap().sample.is_none());
    }

    #[test]
    fn a_snapshot_message_replaces_the_whole_fleet() {
        let mut f = fleet(&["a"]);
        f.apply(TelemetryMessage::Snapshot(fleet(&["x", "y"])));
        assert_eq!(f.gpus.len(), 2);
    }

    #[test]
    fn messages_round_trip_through_json_with_a_type_tag() {
        let msg = TelemetryMessage::Tick {
            at_ms: 5,
            gpus: vec![update("a", Some(sample(5, 1, 1)), Health::Ok)],
        };
        let json = serde_json::to_string(&msg).unwrap();
        assert!(json.starts_with(r#"{"type":"tick""#), "{json}");
        assert_eq!(
            serde_json::from_str::<TelemetryMessage>(&json).unwrap(),
            msg
        );
    }
}
