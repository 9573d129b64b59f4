//! Real cards through NVML (the library behind nvidia-smi), loaded at run time so that the
//! binary starts on machines without a driver.

use super::kmsg::KernelLog;
use super::procinfo::ProcReader;
use super::{GpuSource, OpenError, SourceError};
use lanes_types::health::{HealthCounters, XidEvent};
use lanes_types::{GpuInfo, GpuProcess, GpuSample, SourceKind};
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

pub struct NvmlSource {
    /// Kept for the life of the process.
    nvml: &'static Nvml,
    inventory: Vec<GpuInfo>,
    procs: ProcReader,
    /// Per card, the newest per-process utilization sample read (the driver's CPU timestamp,
    /// microseconds): the next read asks only for newer ones.
    last_process_sample_us: Vec<u64>,
    /// Where the driver logs Xid errors (`None`: not readable here, or not asked for).
    kernel_log: Option<KernelLog>,
    /// Each card's PCI address, to name the card an Xid line is about.
    addresses: Vec<Option<(u32, u32, u32)>>,
}

/// The most kernel log records one poll reads (the rest wait for the next): a flood of
/// messages must not stall the readings.
const RECORDS_PER_POLL: usize = 256;

impl NvmlSource {
    pub fn open(node: &str) -> Result<Self, OpenError> {
        Self::open_with(node, true)
    }

    /// Opens the cards, with or without reading Xid errors from the kernel log (without: the
    /// benchmark's reference). The NVML handle is kept for the life of the process; a process
    /// opens its cards once.
    pub fn open_with(node: &str, events: bool) -> Result<Self, OpenError> {
        let nvml: &'static Nvml = Box::leak(Box::new(
            Nvml::init().map_err(|e| OpenError::NvmlUnavailable(e.to_string()))?,
        ));
        let inventory =
            read_inventory(nvml, node).map_err(|e| OpenError::NvmlUnavailable(e.to_string()))?;
        if inventory.is_empty() {
            return Err(OpenError::NoGpus);
        }
        let kernel_log = if events {
            match KernelLog::open() {
                Ok(log) => {
                    tracing::info!("Xid errors: read from the kernel log (/dev/kmsg)");
                    Some(log)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Xid errors: the kernel log (/dev/kmsg) cannot be read here; cards are judged by their error counters alone");
                    None
                }
            }
        } else {
            None
        };
        Ok(Self {
            kernel_log,
            addresses: inventory
                .iter()
                .map(|c| super::kmsg::pci_address(&c.pci_bus_id))
                .collect(),
            nvml,
            last_process_sample_us: vec![0; inventory.len()],
            inventory,
            procs: ProcReader::default(),
        })
    }

    /// Each card's device file, `/dev/nvidia<minor>` (the minor number NVML reports), by UUID;
    /// a card whose number cannot be read has none (the wall then leaves it alone).
    pub fn device_files(&self) -> std::collections::BTreeMap<String, std::path::PathBuf> {
        device_files(self.nvml, &self.inventory)
    }

    /// The driver handle, for `lanes doctor` and the benchmarks.
    pub fn nvml(&self) -> &Nvml {
        self.nvml
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
        NvmlError::GpuLost => super::LOST.into(),
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

/// One card's error counters (`None` where the card keeps no such counter).
pub fn read_device_health(nvml: &Nvml, device: &Device<'_>) -> Result<HealthCounters, SourceError> {
    let ecc = |error, counter| optional(device.total_ecc_errors(error, counter));
    let retired =
        |cause| optional(device.retired_pages(cause)).map(|pages| pages.map(|p| p.len() as u32));
    let mut counters = HealthCounters {
        ecc_corrected_volatile: ecc(MemoryError::Corrected, EccCounter::Volatile)?,
        ecc_uncorrected_volatile: ecc(MemoryError::Uncorrected, EccCounter::Volatile)?,
        ecc_corrected_aggregate: ecc(MemoryError::Corrected, EccCounter::Aggregate)?,
        ecc_uncorrected_aggregate: ecc(MemoryError::Uncorrected, EccCounter::Aggregate)?,
        retired_single_bit: retired(RetirementCause::MultipleSingleBitEccErrors)?,
        retired_double_bit: retired(RetirementCause::DoubleBitEccError)?,
        retirement_pending: optional(device.are_pages_pending_retired())?,
        throttle: optional(device.current_throttle_reasons())?
            .map(|reasons| {
                reasons
                    .iter_names()
                    .map(|(name, _)| name.to_ascii_lowercase())
                    .collect()
            })
            .unwrap_or_default(),
        pcie_replays: optional(device.pcie_replay_counter())?.map(u64::from),
        ..Default::default()
    };
    if let Some((corr, unc, pending, failed)) = remapped_rows(nvml, device)? {
        counters.remapped_correctable = Some(corr);
        counters.remapped_uncorrectable = Some(unc);
        counters.remap_pending = Some(pending);
        counters.remap_failed = Some(failed);
    }
    Ok(counters)
}

/// Remapped rows (correctable, uncorrectable, pending, failed): not wrapped by nvml-wrapper,
/// so called through its loaded library. `None` on cards without row remapping (before
/// Ampere) and drivers without the call.
fn remapped_rows(
    nvml: &Nvml,
    device: &Device<'_>,
) -> Result<Option<(u32, u32, bool, bool)>, SourceError> {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetRemappedRows.is_err() {
        return Ok(None);
    }
    let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: the symbol was found above; the handle is a live device of this NVML handle;
    // the four out-pointers are valid for the call.
    let code = unsafe {
        lib.nvmlDeviceGetRemappedRows(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failed,
        )
    };
    optional(nvml_wrapper::error::nvml_try(code))
        .map(|ok| ok.map(|()| (corr, unc, pending != 0, failed != 0)))
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

    fn read_health(&mut self, pos: usize) -> Result<HealthCounters, SourceError> {
        read_device_health(self.nvml, &self.device(pos)?)
    }

    fn take_xids(&mut self) -> Vec<(usize, XidEvent)> {
        let Some(log) = &mut self.kernel_log else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        for record in log.take(RECORDS_PER_POLL) {
            let Some(pos) = self.addresses.iter().position(|a| *a == Some(record.pci)) else {
                continue;
            };
            tracing::warn!(
                card = self.inventory[pos].index,
                xid = record.xid,
                pid = record.pid,
                process = record.name,
                "Xid {}: {}",
                record.xid,
                lanes_types::health::xid_meaning(record.xid)
            );
            taken.push((
                pos,
                XidEvent {
                    xid: record.xid,
                    at_ms: chrono::Utc::now().timestamp_millis(),
                    pid: record.pid,
                },
            ));
        }
        taken
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
