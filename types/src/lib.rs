//! Wire types shared by the server, the browser, the client and the tests: what a GPU is, what
//! one sample of it says, the messages of the live telemetry channel, and every API body. No
//! Leptos, no axum, no I/O: `fleet` is the model the server's hub and the browser both apply
//! ticks with.
//!
//! A GPU is always identified by `(node, uuid)`; `index` is only the driver's enumeration order
//! on its node and is shown to people, never used as a key.

pub mod account;
pub mod api;
pub mod booking;
pub mod coded;
pub mod container;
pub mod enforcement;
pub mod fleet;
pub mod health;
pub mod history;
pub mod job;
pub mod notice;
pub mod notify;
pub mod query;
pub mod queue;
pub mod report;
pub mod rule;
pub mod shell;
pub mod statement;
pub mod units;

use serde::{Deserialize, Serialize};

/// How a card is named to people, everywhere (pages, reports, CSV, notifications): its index
/// on its node, then the node ("GPU 3 · node-a"). The UUID is what identifies it; pages show
/// it on hover or in details.
pub fn card_name(index: u32, node: &str) -> String {
    format!("GPU {index} · {node}")
}

/// Which index each known card has on its node, to name cards that are given by
/// `(node, uuid)` alone (bookings, jobs, history series).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardIndex(std::collections::HashMap<(String, String), u32>);

impl CardIndex {
    pub fn new(cards: impl IntoIterator<Item = (String, String, u32)>) -> Self {
        Self(
            cards
                .into_iter()
                .map(|(node, uuid, index)| ((node, uuid), index))
                .collect(),
        )
    }

    pub fn of_gpus<'a>(gpus: impl IntoIterator<Item = &'a GpuInfo>) -> Self {
        Self::new(
            gpus.into_iter()
                .map(|g| (g.node.clone(), g.uuid.clone(), g.index)),
        )
    }

    pub fn index(&self, node: &str, uuid: &str) -> Option<u32> {
        self.0.get(&(node.to_string(), uuid.to_string())).copied()
    }

    /// "GPU 3 · node-a"; a card no longer known keeps the start of its UUID.
    pub fn name(&self, node: &str, uuid: &str) -> String {
        match self.index(node, uuid) {
            Some(i) => card_name(i, node),
            None => format!("{} · {node}", uuid.chars().take(12).collect::<String>()),
        }
    }

    /// The names of `cards`, ordered by node then index.
    pub fn names(&self, cards: &[booking::GpuRef]) -> Vec<String> {
        let mut keyed: Vec<_> = cards
            .iter()
            .map(|c| {
                (
                    (
                        c.node.clone(),
                        self.index(&c.node, &c.uuid).unwrap_or(u32::MAX),
                    ),
                    self.name(&c.node, &c.uuid),
                )
            })
            .collect();
        keyed.sort();
        keyed.into_iter().map(|(_, name)| name).collect()
    }
}

/// Static facts about one card; they do not change while the server runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub node: String,
    pub uuid: String,
    /// NVML enumeration index on its node (PCI bus order).
    pub index: u32,
    pub name: String,
    /// PCI bus id in NVML's `domain:bus:device.function` form.
    pub pci_bus_id: String,
    pub memory_total_bytes: u64,
}

impl GpuInfo {
    /// "GPU 3 · node-a" (see [`card_name`]).
    pub fn name_for_people(&self) -> String {
        card_name(self.index, &self.node)
    }
}

/// One reading of a card's counters. Fields a card does not support are `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Unix time of the reading, in milliseconds.
    pub at_ms: i64,
    /// Percent of the last sample period in which a kernel ran (0–100).
    pub utilization_gpu_pct: u32,
    /// Percent of the last sample period in which device memory was read or written (0–100).
    pub utilization_memory_pct: u32,
    pub memory_used_bytes: u64,
    pub temperature_c: Option<u32>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    /// The card's energy counter: millijoules used since the driver was loaded (it starts
    /// again from zero when the driver reloads). `None` where the card has no counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_mj: Option<u64>,
}

/// A compute process the driver reports on a card.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory the process holds; `None` when the driver will not say (e.g. in some containers).
    pub used_memory_bytes: Option<u64>,
    /// Owning Unix account, read from /proc; `None` if the process is not visible to the server.
    pub user: Option<String>,
    /// Command name (`comm`), read from /proc.
    pub command: Option<String>,
    /// Its share of the card's streaming multiprocessors over the last sample period, in
    /// percent, from the driver's per-process samples; `None` where the driver gives none
    /// (then only card-level figures exist for this card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_pct: Option<u32>,
    /// Its share of the card's memory bandwidth over the same period, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_pct: Option<u32>,
    /// What the watchdog made of it; `None` until it has looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<ProcessLane>,
    /// Made up by the simulator's background (no driver): nobody's process, owned by a name
    /// no Unix account can have, never judged or counted as anyone's use.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
    /// The container it runs in, as the host's cgroups and runtimes say; then `user` is the
    /// person behind the container (a Lanes job's member, a rootless runtime's owner), or
    /// `None` when nobody can be tied to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<container::ContainerRef>,
}

/// Whether a process on a card has a booking behind it, as the watchdog judged it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProcessLane {
    /// A Lanes job's process, on a card of its booking.
    Job { id: i64 },
    /// Its owner holds an active booking of the card.
    Booked,
    /// Its owner or command is on the admins' exemption list.
    Exempt,
    /// Nobody booked this card for its owner: a violation.
    Unbooked,
    /// The simulator's background scenery: nobody's, never a violation.
    Simulated,
}

impl GpuProcess {
    /// The process as an anonymous viewer may see it: no owner, no command.
    pub fn anonymized(&self) -> Self {
        Self {
            user: None,
            command: None,
            ..self.clone()
        }
    }
}

/// Drops owners and commands from processes, for viewers who are not logged in.
pub fn anonymize(processes: &mut [GpuProcess]) {
    for process in processes {
        *process = process.anonymized();
    }
}

/// Whether the last poll of a card succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Health {
    Ok,
    Unhealthy { reason: String },
}

impl Health {
    pub fn is_ok(&self) -> bool {
        matches!(self, Health::Ok)
    }
}

/// Where the telemetry comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Real cards read through the NVIDIA driver.
    Nvml,
    /// A simulated fleet: no driver was found or `--gpus sim:N` was asked for.
    Simulated,
    /// No cards: a portal started with `--gpus none` (it serves the web for the pool).
    None,
}

impl SourceKind {
    pub const ALL: [SourceKind; 3] = [SourceKind::Nvml, SourceKind::Simulated, SourceKind::None];

    /// Its name on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Nvml => "nvml",
            SourceKind::Simulated => "simulated",
            SourceKind::None => "none",
        }
    }

    /// The kind named `name` ([`SourceKind::as_str`]), if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The current state of one card: its facts, its health and its latest reading. On the wire
/// its facts are fields of its own (`info` is flattened).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "GpuStateFields")]
pub struct GpuState {
    #[serde(flatten)]
    pub info: GpuInfo,
    pub health: Health,
    /// Latest successful reading; `None` until the first one, or while the card is unhealthy.
    pub sample: Option<GpuSample>,
    pub processes: Vec<GpuProcess>,
    /// The id of the active booking of this card that the watchdog found idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_booking: Option<i64>,
    /// Seen on its node but left out of Lanes there (`--gpus nvml:0,2` names the others):
    /// nobody books it, the queue does not use it, and its processes are nobody's violation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unmanaged: bool,
    /// Its health verdict from error counters and Xid events (absent: healthy).
    #[serde(default, skip_serializing_if = "health::Condition::is_healthy")]
    pub condition: health::Condition,
    /// Its error counters as last read (absent until read, or on nodes older than 0.30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<health::HealthCounters>,
}

/// [`GpuState`] as it is read: every field at one level, as its `info` is written flattened.
/// serde's `flatten` would read the card into a buffer of its own first and every field of
/// [`GpuInfo`] from there again (a second deserializer for them in the page's code); this
/// reads them in one pass. Adding a field to either struct fails to compile until it is here.
#[derive(Deserialize)]
struct GpuStateFields {
    node: String,
    uuid: String,
    index: u32,
    name: String,
    pci_bus_id: String,
    memory_total_bytes: u64,
    health: Health,
    sample: Option<GpuSample>,
    processes: Vec<GpuProcess>,
    #[serde(default)]
    idle_booking: Option<i64>,
    #[serde(default)]
    unmanaged: bool,
    #[serde(default)]
    condition: health::Condition,
    #[serde(default)]
    counters: Option<health::HealthCounters>,
}

impl From<GpuStateFields> for GpuState {
    fn from(f: GpuStateFields) -> Self {
        GpuState {
            info: GpuInfo {
                node: f.node,
                uuid: f.uuid,
                index: f.index,
                name: f.name,
                pci_bus_id: f.pci_bus_id,
                memory_total_bytes: f.memory_total_bytes,
            },
            health: f.health,
            sample: f.sample,
            processes: f.processes,
            idle_booking: f.idle_booking,
            unmanaged: f.unmanaged,
            condition: f.condition,
            counters: f.counters,
        }
    }
}

/// One server of the pool, as every portal sees it (`GET /api/v1/nodes`, the dashboard).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    pub name: String,
    /// The address its web server listens on, as it registered (for operators).
    pub address: String,
    /// The Lanes version it runs.
    pub version: String,
    /// What reads its cards: the driver version, "simulated", or "none" for a portal.
    pub driver: String,
    pub gpu_source: SourceKind,
    pub status: NodeStatus,
    /// Its latest heartbeat; for an unreachable node, since when it has been silent.
    pub last_seen: chrono::DateTime<chrono::Utc>,
    /// Cards it manages (unmanaged cards are not counted).
    pub cards: u32,
}

/// Whether a node answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// It heartbeats: its telemetry is live, the queue and any-N may use its cards.
    Up,
    /// Silent for longer than `--node-timeout`: shown with its last values; nothing new is
    /// placed on its cards; its bookings stand and its running jobs go on under its own runner.
    Unreachable,
}

/// One card's part of a tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuUpdate {
    pub node: String,
    pub uuid: String,
    pub health: Health,
    pub sample: Option<GpuSample>,
    pub processes: Vec<GpuProcess>,
    /// The id of the active booking of this card that the watchdog found idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_booking: Option<i64>,
    /// The health keeper's verdict (absent: healthy).
    #[serde(default, skip_serializing_if = "health::Condition::is_healthy")]
    pub condition: health::Condition,
    /// The error counters, on the ticks that read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<health::HealthCounters>,
    /// Xid events the driver reported since the last tick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<health::XidEvent>,
}

/// A point of a card's recent history, as drawn in the dashboard charts. The fields after
/// memory are absent from nodes older than 0.22 and where the card does not report them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryPoint {
    pub at_ms: i64,
    pub utilization_gpu_pct: u32,
    pub memory_used_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_memory_pct: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
}

#[cfg(test)]
mod naming_tests {
    use super::*;
    use booking::GpuRef;

    #[test]
    fn cards_are_named_by_index_and_node_and_ordered_node_then_index() {
        let index = CardIndex::new([
            ("b".into(), "GPU-b0".into(), 0),
            ("a".into(), "GPU-a10".into(), 10),
            ("a".into(), "GPU-a2".into(), 2),
        ]);
        let refs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(n, u)| GpuRef {
                    node: n.to_string(),
                    uuid: u.to_string(),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            index.names(&refs(&[("b", "GPU-b0"), ("a", "GPU-a10"), ("a", "GPU-a2")])),
            ["GPU 2 · a", "GPU 10 · a", "GPU 0 · b"]
        );
        assert_eq!(
            index.name("a", "GPU-0123456789abcdef"),
            "GPU-01234567 · a",
            "an unknown card keeps the start of its UUID"
        );
    }
}

impl HistoryPoint {
    pub fn of(sample: &GpuSample) -> Self {
        Self {
            at_ms: sample.at_ms,
            utilization_gpu_pct: sample.utilization_gpu_pct,
            memory_used_bytes: sample.memory_used_bytes,
            utilization_memory_pct: Some(sample.utilization_memory_pct),
            temperature_c: sample.temperature_c,
            power_watts: sample.power_watts,
            sm_clock_mhz: sample.sm_clock_mhz,
        }
    }
}

/// Recent history of one card, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuHistory {
    pub node: String,
    pub uuid: String,
    pub points: Vec<HistoryPoint>,
}

/// Everything a fresh viewer needs: the fleet now and its recent past.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetSnapshot {
    pub source: SourceKind,
    /// Poll interval, so that clients can tell a stalled feed from a slow one.
    pub interval_ms: u64,
    pub gpus: Vec<GpuState>,
    /// Up to [`HISTORY_WINDOW_MS`] of points per card.
    pub history: Vec<GpuHistory>,
    /// Every node of the pool, by name (this one alone on a single server).
    #[serde(default)]
    pub nodes: Vec<NodeState>,
}

impl FleetSnapshot {
    /// The snapshot as an anonymous viewer may see it.
    pub fn anonymized(mut self) -> Self {
        for gpu in &mut self.gpus {
            anonymize(&mut gpu.processes);
        }
        self
    }
}

/// How much recent history the live channel keeps and the dashboard draws.
pub const HISTORY_WINDOW_MS: i64 = 5 * 60 * 1000;

/// A message on `GET /api/v1/telemetry/ws`. The first message is always a `snapshot`; every
/// poll after that sends one `tick` with every card's update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TelemetryMessage {
    Snapshot(FleetSnapshot),
    Tick {
        at_ms: i64,
        gpus: Vec<GpuUpdate>,
    },
    /// Something the lists of these areas show changed (on `?only=changes` channels of
    /// logged-in viewers, and only that it changed, never what): a page reloads those lists
    /// rather than ask on a timer.
    Changed {
        areas: Vec<Area>,
    },
}

/// A part of the service whose lists pages show: what a [`TelemetryMessage::Changed`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    Bookings,
    Jobs,
    Queue,
}

impl TelemetryMessage {
    /// Reads a message from its JSON text, as its `Deserialize` does and in any order of its
    /// fields, without buffering it first: the `type` is read on its own, then the text again
    /// as that kind's fields. The browser reads its messages this way: serde's derive for an
    /// internally tagged enum first copies the whole message into a tree of its own and reads
    /// it from there, which takes a second deserializer of every type inside the message in
    /// the page's code (14 KB of the dashboard's 411 KB bundle, brotli) and a copy of every
    /// snapshot.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        #[derive(Deserialize)]
        struct Kind<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
        }
        #[derive(Deserialize)]
        struct Tick {
            at_ms: i64,
            gpus: Vec<GpuUpdate>,
        }
        #[derive(Deserialize)]
        struct Changed {
            areas: Vec<Area>,
        }
        match &*serde_json::from_str::<Kind>(text)?.kind {
            "snapshot" => serde_json::from_str(text).map(TelemetryMessage::Snapshot),
            "tick" => serde_json::from_str(text)
                .map(|Tick { at_ms, gpus }| TelemetryMessage::Tick { at_ms, gpus }),
            "changed" => serde_json::from_str(text)
                .map(|Changed { areas }| TelemetryMessage::Changed { areas }),
            other => Err(serde::de::Error::unknown_variant(
                other,
                &["snapshot", "tick", "changed"],
            )),
        }
    }

    /// The message as an anonymous viewer may see it.
    pub fn anonymized(self) -> Self {
        match self {
            TelemetryMessage::Snapshot(snapshot) => {
                TelemetryMessage::Snapshot(snapshot.anonymized())
            }
            TelemetryMessage::Tick { at_ms, mut gpus } => {
                for gpu in &mut gpus {
                    anonymize(&mut gpu.processes);
                }
                TelemetryMessage::Tick { at_ms, gpus }
            }
            changed @ TelemetryMessage::Changed { .. } => changed,
        }
    }
}

/// Body of `GET /healthz`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// `ok`, or `error` (then the answer is a 503 and `database` says why).
    pub status: String,
    pub version: String,
    pub node: String,
    pub gpu_source: SourceKind,
    pub gpus: usize,
    pub gpus_unhealthy: usize,
    /// `ok`, or what is wrong with the database (gone, replaced, corrupt, not answering).
    pub database: String,
    /// Background tasks (queue, runner, enforcer, history) that panicked and were restarted.
    pub task_panics: u64,
}
