//! Real cards through NVML (the library behind nvidia-smi), loaded at run time so that the
//! binary starts on machines without a driver.

use super::procinfo::ProcReader;
use super::{GpuSource, OpenError, SourceError};
use lanes_types::{GpuInfo, GpuProcess, GpuSample, SourceKind};
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

pub struct NvmlSource {
    nvml: Nvml,
    inventory: Vec<GpuInfo>,
    procs: ProcReader,
    /// Per card, the newest per-process utilization sample read (the driver's CPU timestamp,
    /// microseconds): the next read asks only for newer ones.
    last_process_sample_us: Vec<u64>,
}

impl NvmlSource {
    pub fn open(node: &str) -> Result<Self, OpenError> {
        let nvml = Nvml::init().map_err(|e| OpenError::NvmlUnavailable(e.to_string()))?;
        let inventory =
            read_inventory(&nvml, node).map_err(|e| OpenError::NvmlUnavailable(e.to_string()))?;
        if inventory.is_empty() {
            return Err(OpenError::NoGpus);
        }
        Ok(Self {
            nvml,
            last_process_sample_us: vec![0; inventory.len()],
            inventory,
            procs: ProcReader::default(),
        })
    }

    /// Each card's device file, `/dev/nvidia<minor>` (the minor number NVML reports), by UUID;
    /// a card whose number cannot be read has none (the wall then leaves it alone).
    pub fn device_files(&self) -> std::collections::BTreeMap<String, std::path::PathBuf> {
        device_files(&self.nvml, &self.inventory)
    }

    /// The driver handle, for `lanes doctor` and the benchmarks.
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    fn device(&self, pos: usize) -> Result<Device<'_>, SourceError> {
        let index = self
            .inventory
            .get(pos)
            .ok_or_else(|| SourceError(format!("no GPU at position {pos}")))?
            .index;
        self.nvml.device_by_index(index).map_err(describe)
    }
}

/// Each card's device file, `/dev/nvidia<minor>`, by UUID (cards whose number NVML cannot
/// tell are left out).
pub fn device_files(
    nvml: &Nvml,
    inventory: &[GpuInfo],
) -> std::collections::BTreeMap<String, std::path::PathBuf> {
    inventory
        .iter()
        .filter_map(|card| {
            let minor = nvml.device_by_index(card.index).ok()?.minor_number().ok()?;
            Some((card.uuid.clone(), format!("/dev/nvidia{minor}").into()))
        })
        .collect()
}

/// Every card NVML enumerates, in its index order (PCI bus order).
pub fn read_inventory(nvml: &Nvml, node: &str) -> Result<Vec<GpuInfo>, NvmlError> {
    let count = nvml.device_count()?;
    (0..count)
        .map(|index| {
            let device = nvml.device_by_index(index)?;
            Ok(GpuInfo {
                node: node.to_string(),
                uuid: device.uuid()?,
                index,
                name: device.name()?,
                pci_bus_id: device.pci_info()?.bus_id,
                memory_total_bytes: device.memory_info()?.total,
            })
        })
        .collect()
}

/// An error that makes the card unhealthy, in words an operator can act on.
fn describe(err: NvmlError) -> SourceError {
    SourceError(match err {
        NvmlError::GpuLost => "GPU has fallen off the bus or is otherwise inaccessible".into(),
        other => format!("NVML: {other}"),
    })
}

/// Reads an optional counter: a card that does not support it gives `None`, any other error
/// makes the card unhealthy.
fn optional<T>(result: Result<T, NvmlError>) -> Result<Option<T>, SourceError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(describe(e)),
    }
}

/// One card's counters: the calls the poll makes per card per tick. Shared with the benchmark
/// so that "raw NVML" and "poll" measure the same calls.
pub fn read_device_counters(device: &Device<'_>, at_ms: i64) -> Result<GpuSample, SourceError> {
    let utilization = device.utilization_rates().map_err(describe)?;
    let memory = device.memory_info().map_err(describe)?;
    Ok(GpuSample {
        at_ms,
        utilization_gpu_pct: utilization.gpu,
        utilization_memory_pct: utilization.memory,
        memory_used_bytes: memory.used,
        temperature_c: optional(device.temperature(TemperatureSensor::Gpu))?,
        power_watts: optional(device.power_usage())?.map(|mw| mw as f64 / 1000.0),
        power_limit_watts: optional(device.enforced_power_limit())?.map(|mw| mw as f64 / 1000.0),
        sm_clock_mhz: optional(device.clock_info(Clock::SM))?,
        energy_mj: optional(device.total_energy_consumption())?,
    })
}

/// Each process's mean SM and memory-bandwidth share (percent) over the driver's samples newer
/// than `*last_seen_us`, which moves on to the newest one read. A process with no sample in
/// that window did no work in it (0 %). `None`: the driver gives no per-process samples for
/// this card (then only card-level figures exist).
pub fn read_process_shares(
    device: &Device<'_>,
    last_seen_us: &mut u64,
) -> Option<std::collections::HashMap<u32, (u32, u32)>> {
    let samples = match device.process_utilization_stats(*last_seen_us) {
        Ok(samples) => samples,
        // No sample newer than the last one: nothing ran.
        Err(NvmlError::NotFound) => Vec::new(),
        Err(_) => return None,
    };
    Some(average_shares(
        samples
            .iter()
            .map(|s| (s.pid, s.timestamp, s.sm_util, s.mem_util)),
        last_seen_us,
    ))
}

/// The mean (sm, mem) per pid of samples `(pid, timestamp, sm, mem)`; `last_seen_us` becomes
/// the newest timestamp.
fn average_shares(
    samples: impl Iterator<Item = (u32, u64, u32, u32)>,
    last_seen_us: &mut u64,
) -> std::collections::HashMap<u32, (u32, u32)> {
    let mut sums: std::collections::HashMap<u32, (u64, u64, u64)> = Default::default();
    for (pid, at, sm, mem) in samples {
        *last_seen_us = (*last_seen_us).max(at);
        let entry = sums.entry(pid).or_default();
        *entry = (
            entry.0 + u64::from(sm),
            entry.1 + u64::from(mem),
            entry.2 + 1,
        );
    }
    sums.into_iter()
        .map(|(pid, (sm, mem, n))| {
            let mean = |x: u64| ((x as f64 / n as f64).round() as u32).min(100);
            (pid, (mean(sm), mean(mem)))
        })
        .collect()
}

impl GpuSource for NvmlSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Nvml
    }

    fn inventory(&self) -> &[GpuInfo] {
        &self.inventory
    }

    fn read_counters(&mut self, pos: usize, at_ms: i64) -> Result<GpuSample, SourceError> {
        read_device_counters(&self.device(pos)?, at_ms)
    }

    fn read_processes(&mut self, pos: usize) -> Result<Vec<GpuProcess>, SourceError> {
        let index = self
            .inventory
            .get(pos)
            .ok_or_else(|| SourceError(format!("no GPU at position {pos}")))?
            .index;
        let device = self.nvml.device_by_index(index).map_err(describe)?;
        let raw = device.running_compute_processes().map_err(describe)?;
        let shares = read_process_shares(&device, &mut self.last_process_sample_us[pos]);
        Ok(raw
            .into_iter()
            .map(|p| {
                let owner = self.procs.owner(p.pid);
                let share = shares
                    .as_ref()
                    .map(|s| s.get(&p.pid).copied().unwrap_or((0, 0)));
                GpuProcess {
                    pid: p.pid,
                    used_memory_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => Some(bytes),
                        UsedGpuMemory::Unavailable => None,
                    },
                    user: owner.as_ref().and_then(|o| o.user.clone()),
                    container: owner.as_ref().and_then(|o| o.container.clone()),
                    command: owner.map(|o| o.command),
                    lane: None,
                    sm_pct: share.map(|s| s.0),
                    mem_pct: share.map(|s| s.1),
                    simulated: false,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::average_shares;

    #[test]
    fn per_process_samples_average_per_pid_and_the_window_moves_to_the_newest() {
        let mut last = 100;
        let shares = average_shares(
            [
                (7, 150, 40, 10),
                (8, 160, 60, 30),
                (7, 210, 50, 20),
                (8, 205, 61, 31),
            ]
            .into_iter(),
            &mut last,
        );
        assert_eq!(shares[&7], (45, 15));
        assert_eq!(shares[&8], (61, 31));
        assert_eq!(last, 210);
        let mut last = 5;
        assert!(average_shares(std::iter::empty(), &mut last).is_empty());
        assert_eq!(last, 5);
    }
}
