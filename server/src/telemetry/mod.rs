//! GPU telemetry: where readings come from (NVML or a simulated fleet), the poller that takes
//! them at a fixed interval, and the hub that hands each tick to every consumer.

pub mod hub;
pub mod nvml;
pub mod poller;
pub mod procinfo;
pub mod sim;

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
}

/// A failed reading of one card. The card is shown unhealthy with this text; others go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// What `--gpus` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuSelection {
    /// NVML when the driver loads, else a simulated 8-card node.
    Auto,
    /// NVML or fail.
    Nvml,
    /// A simulated node of this many cards.
    Simulated(u32),
}

/// Largest simulated fleet: enough for any one node, small enough to stay cheap.
pub const MAX_SIMULATED_GPUS: u32 = 64;
/// Size of the simulated node `auto` falls back to.
pub const AUTO_SIMULATED_GPUS: u32 = 8;

impl FromStr for GpuSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            format!("invalid GPU source {s:?}: expected auto, nvml or sim:N (N from 1 to {MAX_SIMULATED_GPUS})")
        };
        match s {
            "auto" => Ok(Self::Auto),
            "nvml" => Ok(Self::Nvml),
            _ => {
                let n: u32 = s
                    .strip_prefix("sim:")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(invalid)?;
                if (1..=MAX_SIMULATED_GPUS).contains(&n) {
                    Ok(Self::Simulated(n))
                } else {
                    Err(invalid())
                }
            }
        }
    }
}

impl fmt::Display for GpuSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Nvml => f.write_str("nvml"),
            Self::Simulated(n) => write!(f, "sim:{n}"),
        }
    }
}

/// Settings of the simulated fleet.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub seed: u64,
    /// Index of a simulated card that fails every reading (for tests and demos).
    pub faulty_gpu: Option<u32>,
    /// Random jobs of made-up users come and go on the cards (off: cards idle unless a Lanes
    /// job or an injected process is on them).
    pub background: bool,
    /// Device files standing for the simulated cards, in card order (cards beyond the list
    /// have none): harmless character devices such as `/dev/null`, so that the device wall can
    /// be tried without a GPU.
    pub device_files: Vec<std::path::PathBuf>,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            faulty_gpu: None,
            background: true,
            device_files: Vec::new(),
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
}

/// Opens the source `selection` asks for. With `auto`, a missing driver is not an error: the
/// reason is returned beside the simulated source so the caller can say it plainly.
pub fn open(selection: GpuSelection, node: &str, sim: &SimOptions) -> Result<Opened, OpenError> {
    let simulated = |count: u32, fallback_reason: Option<String>| {
        let fleet = sim::SimulatedFleet::new(node, count, sim.seed)
            .with_faulty_card(sim.faulty_gpu.map(|g| g as usize))
            .with_background(sim.background);
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
        }
    };
    let real = |source: nvml::NvmlSource| Opened {
        device_files: source.device_files(),
        source: Box::new(source),
        fallback_reason: None,
        processes: Processes::Host,
    };
    match selection {
        GpuSelection::Simulated(n) => Ok(simulated(n, None)),
        GpuSelection::Nvml => Ok(real(nvml::NvmlSource::open(node)?)),
        GpuSelection::Auto => match nvml::NvmlSource::open(node) {
            Ok(source) => Ok(real(source)),
            Err(err) => Ok(simulated(AUTO_SIMULATED_GPUS, Some(err.to_string()))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_selection_parses_the_three_forms_and_prints_them_back() {
        for text in ["auto", "nvml", "sim:4", "sim:64"] {
            assert_eq!(text.parse::<GpuSelection>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn gpu_selection_rejects_other_values_with_the_accepted_forms() {
        for bad in [
            "", "sim:", "sim:0", "sim:65", "sim:-1", "gpu", "NVML", "sim:4x",
        ] {
            let err = bad.parse::<GpuSelection>().unwrap_err();
            assert!(err.contains("expected auto, nvml or sim:N"), "{bad}: {err}");
        }
    }
}
