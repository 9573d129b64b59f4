//! GPU telemetry: where readings come from (NVML or a simulated fleet), the poller that takes
//! them at a fixed interval, and the hub that hands each tick to every consumer.

pub mod containers;
pub mod history_writer;
pub mod hub;
pub mod kmsg;
pub mod metrics;
pub mod nvml;
pub mod poller;
pub mod procinfo;
pub mod sim;

use lanes_types::health::{HealthCounters, XidEvent};
use lanes_types::{GpuInfo, GpuProcess, GpuSample, SourceKind};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A reader of one node's cards. Calls block (NVML does), so the poller runs them on its own
/// thread, never on the async runtime.
pub trait GpuSource: Send {
    fn kind(&self) -> SourceKind;
    /// The cards, in NVML index order (PCI bus order). Fixed for the life of the source.
    fn inventory(&self) -> &[GpuInfo];
    /// Reads the counters of the card at `pos` in [`GpuSource::inventory`].
    fn read_counters(&mut self, pos: usize, at_ms: i64) -> Result<GpuSample, SourceError>;
    /// Lists the compute processes on the card at `pos`, owners and commands resolved.
    fn read_processes(&mut self, pos: usize) -> Result<Vec<GpuProcess>, SourceError>;
    /// Reads the card's error counters: ECC, remapped rows, retired pages, throttle reasons,
    /// PCIe replays. A source that keeps none reports none.
    fn read_health(&mut self, _pos: usize) -> Result<HealthCounters, SourceError> {
        Ok(HealthCounters::default())
    }
    /// The Xid events reported since the last call, by card position. Never blocks: events
    /// are gathered as they happen (NVML's event thread) and handed over here.
    fn take_xids(&mut self) -> Vec<(usize, XidEvent)> {
        Vec::new()
    }
}

/// A failed reading of one card. The card is shown unhealthy with this text; others go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// What a reading of a lost card fails with (NVML's `GPU_IS_LOST`).
pub const LOST: &str = "GPU has fallen off the bus or is otherwise inaccessible";

impl SourceError {
    /// Whether the card is lost, not merely unreadable this once.
    pub fn is_lost(&self) -> bool {
        self.0 == LOST
    }
}

/// What `--gpus` asks for: where readings come from, and which of the cards Lanes manages
/// (`nvml:0,2`: the others are shown as unmanaged; nobody books them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSelection {
    pub source: SourceChoice,
    /// The managed cards by index or UUID; `None`: all of them.
    pub managed: Option<Vec<CardName>>,
}

/// Where readings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceChoice {
    /// NVML when the driver loads, else a simulated 8-card node.
    Auto,
    /// NVML or fail.
    Nvml,
    /// A simulated node of this many cards.
    Simulated(u32),
    /// No cards: this instance serves the web for the pool and runs no jobs.
    None,
}

/// A card named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardName {
    Index(u32),
    Uuid(String),
}

impl CardName {
    fn names(&self, card: &GpuInfo) -> bool {
        match self {
            CardName::Index(i) => card.index == *i,
            CardName::Uuid(u) => card.uuid == *u,
        }
    }
}

impl fmt::Display for CardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CardName::Index(i) => write!(f, "{i}"),
            CardName::Uuid(u) => f.write_str(u),
        }
    }
}

impl GpuSelection {
    pub fn simulated(count: u32) -> Self {
        Self {
            source: SourceChoice::Simulated(count),
            managed: None,
        }
    }

    pub fn of(source: SourceChoice) -> Self {
        Self {
            source,
            managed: None,
        }
    }
}

/// Largest simulated fleet: enough for any one node, small enough to stay cheap.
pub const MAX_SIMULATED_GPUS: u32 = 64;
/// Size of the simulated node `auto` falls back to.
pub const AUTO_SIMULATED_GPUS: u32 = 8;

impl FromStr for GpuSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            format!(
                "invalid GPU source {s:?}: expected auto, nvml, nvml:CARDS, sim:N, sim:N:CARDS \
                 or none (N from 1 to {MAX_SIMULATED_GPUS}; CARDS: indices or UUIDs, \
                 comma-separated, e.g. nvml:0,2)"
            )
        };
        let cards = |list: &str| -> Result<Vec<CardName>, String> {
            let names: Vec<CardName> = list
                .split(',')
                .map(|name| {
                    let name = name.trim();
                    if name.starts_with("GPU-") || name.starts_with("MIG-") {
                        Ok(CardName::Uuid(name.to_string()))
                    } else {
                        name.parse().map(CardName::Index).map_err(|_| invalid())
                    }
                })
                .collect::<Result<_, _>>()?;
            let mut seen = std::collections::HashSet::new();
            if names.iter().any(|n| !seen.insert(n.to_string())) {
                return Err(format!("{s:?} names a card twice"));
            }
            Ok(names)
        };
        match s {
            "auto" => return Ok(Self::of(SourceChoice::Auto)),
            "nvml" => return Ok(Self::of(SourceChoice::Nvml)),
            "none" => return Ok(Self::of(SourceChoice::None)),
            _ => {}
        }
        if let Some(list) = s.strip_prefix("nvml:") {
            return Ok(Self {
                source: SourceChoice::Nvml,
                managed: Some(cards(list)?),
            });
        }
        let rest = s.strip_prefix("sim:").ok_or_else(invalid)?;
        let (count, list) = match rest.split_once(':') {
            Some((count, list)) => (count, Some(list)),
            None => (rest, None),
        };
        let n: u32 = count.parse().map_err(|_| invalid())?;
        if !(1..=MAX_SIMULATED_GPUS).contains(&n) {
            return Err(invalid());
        }
        Ok(Self {
            source: SourceChoice::Simulated(n),
            managed: list.map(cards).transpose()?,
        })
    }
}

impl fmt::Display for GpuSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            SourceChoice::Auto => f.write_str("auto")?,
            SourceChoice::Nvml => f.write_str("nvml")?,
            SourceChoice::None => f.write_str("none")?,
            SourceChoice::Simulated(n) => write!(f, "sim:{n}")?,
        }
        if let Some(cards) = &self.managed {
            let list: Vec<String> = cards.iter().map(ToString::to_string).collect();
            write!(f, ":{}", list.join(","))?;
        }
        Ok(())
    }
}

/// Settings of the simulated fleet.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub seed: u64,
    /// Index of a simulated card that fails every reading (for tests and demos).
    pub faulty_gpu: Option<u32>,
    /// Index of a simulated card that runs hot at its power cap (for trying alerts).
    pub hot_gpu: Option<u32>,
    /// Random jobs of made-up users come and go on the cards (off: cards idle unless a Lanes
    /// job or an injected process is on them).
    pub background: bool,
    /// Device files standing for the simulated cards, in card order (cards beyond the list
    /// have none): harmless character devices such as `/dev/null`, so that the device wall can
    /// be tried without a GPU.
    pub device_files: Vec<std::path::PathBuf>,
    /// A real process holding a card's device file open is listed on that card, as NVML lists
    /// a CUDA process (owner and container read from /proc). Off unless asked: a device such as
    /// `/dev/null` is held by half the host.
    pub device_holders: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            faulty_gpu: None,
            hot_gpu: None,
            background: true,
            device_files: Vec::new(),
            device_holders: false,
        }
    }
}

/// Acting on the processes the cards list, wherever they come from: on real cards these are
/// host processes; on a simulated node made-up ones live in the simulation, and the runner's
/// jobs are attached to it so that their cards show their load.
#[derive(Clone, Debug)]
pub enum Processes {
    Host,
    Simulated(Arc<sim::SimControl>),
}

impl Processes {
    /// Sends `signal` to one process a card lists (the watchdog's `terminate`).
    pub fn signal(&self, pid: u32, signal: Signal) -> Result<(), String> {
        if let Processes::Simulated(control) = self {
            if control.kill(pid) {
                return Ok(());
            }
        }
        let pid = i32::try_from(pid).map_err(|_| format!("no such process {pid}"))?;
        nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(|e| e.to_string())
    }

    /// A job started on `cards` (UUIDs).
    pub fn job_started(&self, cards: &[String], pid: u32, user: &str, command: &str) {
        if let Processes::Simulated(control) = self {
            control.attach(sim::ExtraProcess {
                pid,
                cards: cards.to_vec(),
                user: user.into(),
                command: command.into(),
                memory_bytes: SIMULATED_JOB_MEMORY_BYTES,
                utilization_pct: SIMULATED_JOB_UTILIZATION_PCT,
            });
        }
    }

    pub fn job_ended(&self, pid: u32) {
        if let Processes::Simulated(control) = self {
            control.detach(pid);
        }
    }
}

/// The load a Lanes job puts on each of its simulated cards.
pub const SIMULATED_JOB_UTILIZATION_PCT: u32 = 85;
pub const SIMULATED_JOB_MEMORY_BYTES: u64 = 24 << 30;

/// An opened source and what comes with it.
pub struct Opened {
    pub source: Box<dyn GpuSource>,
    /// Why `auto` fell back to a simulated fleet.
    pub fallback_reason: Option<String>,
    pub processes: Processes,
    /// Each card's device file (`/dev/nvidiaN`), by UUID, for the device wall.
    pub device_files: std::collections::BTreeMap<String, std::path::PathBuf>,
    /// The UUIDs of the cards Lanes manages here (all of them unless `--gpus` named some).
    pub managed: std::collections::BTreeSet<String>,
    /// What reads the cards, for the nodes list: the driver's version, or "simulated".
    pub driver: String,
}

/// Why no source could be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "NVML is not available: {0} (is the NVIDIA driver installed? use --gpus sim:N to simulate)"
    )]
    NvmlUnavailable(String),
    #[error("NVML reports no GPUs on this host")]
    NoGpus,
    #[error("--gpus names card {name}, but this host has {have}")]
    UnknownCard { name: String, have: String },
}

/// The source of a portal without cards (`--gpus none`).
struct NoCards;

impl GpuSource for NoCards {
    fn kind(&self) -> SourceKind {
        SourceKind::None
    }
    fn inventory(&self) -> &[GpuInfo] {
        &[]
    }
    fn read_counters(&mut self, pos: usize, _at_ms: i64) -> Result<GpuSample, SourceError> {
        Err(SourceError(format!("no GPU at position {pos}")))
    }
    fn read_processes(&mut self, pos: usize) -> Result<Vec<GpuProcess>, SourceError> {
        Err(SourceError(format!("no GPU at position {pos}")))
    }
}

/// The UUIDs of the cards `names` picks out of `inventory` (all of them for `None`).
fn managed_cards(
    inventory: &[GpuInfo],
    names: Option<&[CardName]>,
) -> Result<std::collections::BTreeSet<String>, OpenError> {
    let Some(names) = names else {
        return Ok(inventory.iter().map(|c| c.uuid.clone()).collect());
    };
    names
        .iter()
        .map(|name| {
            inventory
                .iter()
                .find(|card| name.names(card))
                .map(|card| card.uuid.clone())
                .ok_or_else(|| OpenError::UnknownCard {
                    name: name.to_string(),
                    have: inventory
                        .iter()
                        .map(|c| format!("{} ({})", c.index, c.uuid))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

/// Opens the source `selection` asks for. With `auto`, a missing driver is not an error: the
/// reason is returned beside the simulated source so the caller can say it plainly.
pub fn open(selection: &GpuSelection, node: &str, sim: &SimOptions) -> Result<Opened, OpenError> {
    let simulated = |count: u32, fallback_reason: Option<String>| {
        let fleet = sim::SimulatedFleet::new(node, count, sim.seed)
            .with_faulty_card(sim.faulty_gpu.map(|g| g as usize))
            .with_hot_card(sim.hot_gpu.map(|g| g as usize))
            .with_background(sim.background)
            .with_device_files(&sim.device_files, sim.device_holders);
        let device_files = fleet
            .inventory()
            .iter()
            .zip(&sim.device_files)
            .map(|(card, file)| (card.uuid.clone(), file.clone()))
            .collect();
        Opened {
            processes: Processes::Simulated(fleet.control()),
            source: Box::new(fleet),
            fallback_reason,
            device_files,
            managed: Default::default(),
            driver: "simulated".into(),
        }
    };
    let real = |source: nvml::NvmlSource| Opened {
        device_files: source.device_files(),
        driver: source
            .nvml()
            .sys_driver_version()
            .map_or_else(|_| "NVIDIA".into(), |v| format!("NVIDIA {v}")),
        source: Box::new(source),
        fallback_reason: None,
        processes: Processes::Host,
        managed: Default::default(),
    };
    let mut opened = match selection.source {
        SourceChoice::Simulated(n) => simulated(n, None),
        SourceChoice::Nvml => real(nvml::NvmlSource::open(node)?),
        SourceChoice::Auto => match nvml::NvmlSource::open(node) {
            Ok(source) => real(source),
            Err(err) => simulated(AUTO_SIMULATED_GPUS, Some(err.to_string())),
        },
        SourceChoice::None => Opened {
            source: Box::new(NoCards),
            fallback_reason: None,
            processes: Processes::Host,
            device_files: Default::default(),
            managed: Default::default(),
            driver: "none".into(),
        },
    };
    opened.managed = managed_cards(opened.source.inventory(), selection.managed.as_deref())?;
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_selection_parses_the_three_forms_and_prints_them_back() {
        for text in [
            "auto",
            "nvml",
            "none",
            "sim:4",
            "sim:64",
            "nvml:1",
            "nvml:0,2",
            "nvml:GPU-abc,3",
            "sim:4:0,3",
        ] {
            assert_eq!(text.parse::<GpuSelection>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn gpu_selection_rejects_other_values_with_the_accepted_forms() {
        for bad in [
            "", "sim:", "sim:0", "sim:65", "sim:-1", "gpu", "NVML", "sim:4x", "nvml:", "nvml:x",
            "sim:4:", "nvml:-1",
        ] {
            let err = bad.parse::<GpuSelection>().unwrap_err();
            assert!(
                err.contains("expected auto, nvml, nvml:CARDS"),
                "{bad}: {err}"
            );
        }
        let twice = "nvml:1,1".parse::<GpuSelection>().unwrap_err();
        assert!(twice.contains("names a card twice"), "{twice}");
    }

    #[test]
    fn a_card_list_picks_cards_by_index_or_uuid_and_refuses_one_the_host_lacks() {
        let sim = SimOptions::default();
        let opened = open(&"sim:4:1,3".parse().unwrap(), "n", &sim).unwrap();
        let inventory = opened.source.inventory();
        let expected: std::collections::BTreeSet<String> =
            [inventory[1].uuid.clone(), inventory[3].uuid.clone()].into();
        assert_eq!(opened.managed, expected);
        let by_uuid = format!("sim:4:{}", inventory[2].uuid);
        let opened = open(&by_uuid.parse().unwrap(), "n", &sim).unwrap();
        assert_eq!(opened.managed.len(), 1);
        let Err(err) = open(&"sim:2:5".parse().unwrap(), "n", &sim) else {
            panic!("card 5 of 2 opened");
        };
        assert!(
            err.to_string()
                .contains("names card 5, but this host has 0 ("),
            "{err}"
        );
        let none = open(&"none".parse().unwrap(), "n", &sim).unwrap();
        assert!(none.source.inventory().is_empty());
        assert_eq!(none.source.kind(), SourceKind::None);
    }
}
