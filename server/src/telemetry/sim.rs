//! A simulated node for machines without an NVIDIA driver: demos, development and tests.
//!
//! Each card alternates between idle spells and jobs. A job's load rises and falls in phases
//! (training steps with evaluation dips), memory ramps up to what the job allocates, and
//! temperature and power follow the load with a lag. Everything is driven by the timestamps
//! passed in and a seeded generator, so a seed and a sequence of times give the same readings.

use super::{GpuSource, SourceError};
use lanes_types::health::{HealthCounters, InjectFault, XidEvent};
use lanes_types::{GpuInfo, GpuProcess, GpuSample, SourceKind};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};

const MEMORY_TOTAL_BYTES: u64 = 150_754_820_096; // what NVML reports for an H200
const POWER_LIMIT_WATTS: f64 = 700.0;
const IDLE_POWER_WATTS: f64 = 72.0;
const AMBIENT_C: f64 = 30.0;
const IDLE_CLOCK_MHZ: u32 = 345;
const BOOST_CLOCK_MHZ: u32 = 1980;
/// Simulated driver context memory on an idle card.
const IDLE_MEMORY_BYTES: f64 = 4.0 * 1024.0 * 1024.0;

/// Owners of the background's made-up jobs. The colon is what no Unix account name can hold
/// (it separates `/etc/passwd`'s fields), so no real member is ever taken for one of them.
pub const USERS: [&str; 6] = [
    "sim:curie",
    "sim:hopper",
    "sim:noether",
    "sim:shannon",
    "sim:turing",
    "sim:lovelace",
];
const COMMANDS: [&str; 5] = ["python", "torchrun", "python3", "jupyter-kernel", "vllm"];

/// Pids of made-up processes start above Linux's largest possible pid (`PID_MAX_LIMIT`,
/// 2^22), so that no signal meant for one can ever reach a real process.
pub const FAKE_PID_BASE: u32 = 5_000_000;

/// A process on simulated cards that the random background did not make: a Lanes job (its
/// real pid) or one injected by a test or a demo (a made-up pid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraProcess {
    pub pid: u32,
    pub cards: Vec<String>,
    pub user: String,
    pub command: String,
    pub memory_bytes: u64,
    pub utilization_pct: u32,
}

/// What the rest of the server does to a simulated node: the runner attaches its jobs so that
/// their cards show load and their pids; tests inject unbooked processes; the watchdog's
/// signals end made-up processes. Shared between the fleet (on the poller thread) and them.
#[derive(Debug, Default)]
pub struct SimControl {
    state: Mutex<ControlState>,
}

#[derive(Debug, Default)]
struct ControlState {
    extra: Vec<ExtraProcess>,
    /// Made-up pids signalled to death (background jobs end at their next reading).
    killed: std::collections::HashSet<u32>,
    next_pid: u32,
    /// Injected faults, by card UUID.
    faults: std::collections::HashMap<String, SimFaults>,
}

/// What injected faults left on one simulated card: its counters as NVML would report them,
/// Xids not yet read, and whether it is off the bus.
#[derive(Clone, Debug, Default)]
struct SimFaults {
    counters: HealthCounters,
    xids: Vec<XidEvent>,
    lost: bool,
}

impl SimFaults {
    fn apply(&mut self, fault: &InjectFault, at_ms: i64) {
        let c = &mut self.counters;
        let add = |counter: &mut Option<u64>, n: u64| *counter = Some(counter.unwrap_or(0) + n);
        match fault {
            InjectFault::Xid { xid, pid, .. } => self.xids.push(XidEvent {
                xid: *xid,
                at_ms,
                pid: *pid,
            }),
            InjectFault::Ecc {
                corrected,
                uncorrected,
                ..
            } => {
                add(&mut c.ecc_corrected_volatile, *corrected);
                add(&mut c.ecc_corrected_aggregate, *corrected);
                add(&mut c.ecc_uncorrected_volatile, *uncorrected);
                add(&mut c.ecc_uncorrected_aggregate, *uncorrected);
            }
            InjectFault::RemapPending { .. } => c.remap_pending = Some(true),
            InjectFault::Throttle { reasons, .. } => c.throttle = reasons.clone(),
            InjectFault::PcieReplays { added, .. } => add(&mut c.pcie_replays, *added),
            InjectFault::Lost { .. } => self.lost = true,
            InjectFault::Reset { .. } => {
                // A reset zeroes the volatile counts and applies a pending remap.
                c.ecc_corrected_volatile = Some(0);
                c.ecc_uncorrected_volatile = Some(0);
                if c.remap_pending == Some(true) {
                    c.remap_pending = Some(false);
                    c.remapped_uncorrectable = Some(c.remapped_uncorrectable.unwrap_or(0) + 1);
                }
                self.lost = false;
            }
        }
    }

    /// The counters of a card with nothing injected: every counter kept, all clean.
    fn clean() -> Self {
        Self {
            counters: HealthCounters {
                ecc_corrected_volatile: Some(0),
                ecc_uncorrected_volatile: Some(0),
                ecc_corrected_aggregate: Some(0),
                ecc_uncorrected_aggregate: Some(0),
                remapped_correctable: Some(0),
                remapped_uncorrectable: Some(0),
                remap_pending: Some(false),
                remap_failed: Some(false),
                pcie_replays: Some(0),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

impl SimControl {
    fn state(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a made-up process on `cards`; returns its pid.
    pub fn inject(&self, mut process: ExtraProcess) -> u32 {
        let mut state = self.state();
        state.next_pid += 1;
        process.pid = FAKE_PID_BASE + state.next_pid;
        let pid = process.pid;
        state.extra.push(process);
        pid
    }

    /// Shows a real process (a Lanes job) on `cards` with its load.
    pub fn attach(&self, process: ExtraProcess) {
        let mut state = self.state();
        state.extra.retain(|p| p.pid != process.pid);
        state.extra.push(process);
    }

    pub fn detach(&self, pid: u32) {
        self.state().extra.retain(|p| p.pid != pid);
    }

    /// Ends a made-up process as a signal would; `false` for a pid that is not made up.
    pub fn kill(&self, pid: u32) -> bool {
        if pid < FAKE_PID_BASE {
            return false;
        }
        let mut state = self.state();
        state.extra.retain(|p| p.pid != pid);
        state.killed.insert(pid);
        true
    }

    /// Injects a fault into the card `fault` names (its next reading shows it).
    pub fn inject_fault(&self, fault: &InjectFault, at_ms: i64) {
        self.state()
            .faults
            .entry(fault.gpu().to_string())
            .or_insert_with(SimFaults::clean)
            .apply(fault, at_ms);
    }

    fn faults(&self, uuid: &str) -> SimFaults {
        self.state()
            .faults
            .get(uuid)
            .cloned()
            .unwrap_or_else(SimFaults::clean)
    }

    fn take_xids(&self) -> Vec<(String, XidEvent)> {
        let mut state = self.state();
        let mut taken = Vec::new();
        for (uuid, faults) in &mut state.faults {
            taken.extend(faults.xids.drain(..).map(|x| (uuid.clone(), x)));
        }
        taken
    }

    fn on_card(&self, uuid: &str) -> (Vec<ExtraProcess>, std::collections::HashSet<u32>) {
        let state = self.state();
        let extra = state
            .extra
            .iter()
            .filter(|p| p.cards.iter().any(|c| c == uuid))
            .cloned()
            .collect();
        (extra, state.killed.clone())
    }
}

/// A fleet of simulated cards on one node.
pub struct SimulatedFleet {
    inventory: Vec<GpuInfo>,
    cards: Vec<SimCard>,
    /// A card that fails every reading, to exercise the unhealthy path end to end.
    faulty: Option<usize>,
    /// A card that runs hot and at its power cap, for trying alerts.
    hot: Option<usize>,
    control: Arc<SimControl>,
    /// Random jobs of made-up users come and go (off: cards idle unless something is attached).
    background: bool,
    /// The device file (major, minor) standing for each card, where one was given: a real
    /// process holding it open is on the card, as a CUDA process holding `/dev/nvidiaN` is.
    devices: Vec<Option<(u32, u32)>>,
    holders: DeviceHolders,
}

/// Which real processes hold which device files open, read from /proc at most every
/// [`HOLDERS_FRESH`], so one poll over every card reads it once.
#[derive(Default)]
struct DeviceHolders {
    read_at: Option<std::time::Instant>,
    by_device: std::collections::HashMap<(u32, u32), Vec<u32>>,
    procs: Option<super::procinfo::ProcReader>,
}

const HOLDERS_FRESH: std::time::Duration = std::time::Duration::from_millis(200);

impl DeviceHolders {
    fn of(&mut self, wanted: &[(u32, u32)], device: (u32, u32)) -> Vec<u32> {
        let stale = self.read_at.is_none_or(|at| at.elapsed() >= HOLDERS_FRESH);
        if stale {
            self.by_device = holders(wanted);
            self.read_at = Some(std::time::Instant::now());
        }
        self.by_device.get(&device).cloned().unwrap_or_default()
    }
}

/// The (major, minor) of a character device file.
fn device_number(path: &std::path::Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok()?;
    meta.file_type().is_char_device().then(|| {
        (
            nix::sys::stat::major(meta.rdev()) as u32,
            nix::sys::stat::minor(meta.rdev()) as u32,
        )
    })
}

/// Every process with one of `wanted`'s device files open, by device: each descriptor's target
/// is looked at by its device number, so a file reached through a container's own `/dev` counts.
fn holders(wanted: &[(u32, u32)]) -> std::collections::HashMap<(u32, u32), Vec<u32>> {
    let mut found: std::collections::HashMap<(u32, u32), Vec<u32>> = Default::default();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return found;
    };
    for process in processes.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Some(number) = device_number(&fd.path()) else {
                continue;
            };
            if wanted.contains(&number) {
                let pids = found.entry(number).or_default();
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
    }
    found
}

struct SimJob {
    until_ms: i64,
    started_ms: i64,
    peak_util: f64,
    /// Length of one train/eval cycle.
    period_ms: f64,
    memory_bytes: f64,
    process: GpuProcess,
}

struct SimCard {
    rng: ChaCha8Rng,
    last_ms: Option<i64>,
    job: Option<SimJob>,
    idle_until_ms: i64,
    util: f64,
    memory: f64,
    temperature: f64,
    /// The energy counter, millijoules (seeded: a card's counter runs from driver load).
    energy_mj: f64,
    /// Milliseconds the last reading stands for.
    last_dt_ms: f64,
}

impl SimulatedFleet {
    pub fn new(node: &str, count: u32, seed: u64) -> Self {
        // Named after the node too: two simulated nodes of one pool never share a UUID.
        let node_hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut naming = ChaCha8Rng::seed_from_u64(seed ^ node_hash);
        let inventory = (0..count)
            .map(|index| GpuInfo {
                node: node.to_string(),
                uuid: format!(
                    "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    naming.next_u32(),
                    naming.next_u32() & 0xffff,
                    naming.next_u32() & 0xffff,
                    naming.next_u32() & 0xffff,
                    naming.next_u64() & 0xffff_ffff_ffff,
                ),
                index,
                name: "Simulated H200".to_string(),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index * 0x11),
                memory_total_bytes: MEMORY_TOTAL_BYTES,
            })
            .collect();
        let cards = (0..count)
            .map(|index| SimCard {
                rng: ChaCha8Rng::seed_from_u64(
                    seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(index as u64 + 1)),
                ),
                last_ms: None,
                job: None,
                idle_until_ms: 0,
                util: 0.0,
                memory: IDLE_MEMORY_BYTES,
                temperature: AMBIENT_C + 2.0,
                // As if the driver had been loaded some days ago.
                energy_mj: uniform(&mut naming, 1e8, 1e11).round(),
                last_dt_ms: 0.0,
            })
            .collect();
        Self {
            inventory,
            cards,
            faulty: None,
            hot: None,
            control: Arc::default(),
            background: true,
            devices: Vec::new(),
            holders: DeviceHolders::default(),
        }
    }

    /// Gives the cards device files (in order); with `holders`, a real process holding one
    /// open is listed on its card, its owner and container read from /proc as for a real card.
    pub fn with_device_files(mut self, files: &[std::path::PathBuf], holders: bool) -> Self {
        self.devices = files.iter().map(|f| device_number(f)).collect();
        if holders && !files.is_empty() {
            self.holders.procs = Some(super::procinfo::ProcReader::default());
        }
        self
    }

    /// Turns the random background jobs on or off.
    pub fn with_background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// The handle through which jobs and tests act on this fleet.
    pub fn control(&self) -> Arc<SimControl> {
        self.control.clone()
    }

    /// Makes the card at `pos` fail every reading from now on, as a card that fell off the bus.
    pub fn with_faulty_card(mut self, pos: Option<usize>) -> Self {
        self.faulty = pos;
        self
    }

    /// Makes the card at `pos` run flat out at 93 °C on its power cap, clocks pulled down, as a
    /// card with a failed fan does.
    pub fn with_hot_card(mut self, pos: Option<usize>) -> Self {
        self.hot = pos;
        self
    }
}

impl SimulatedFleet {
    /// Real processes holding card `pos`'s device file open, other than those `extra` shows.
    fn holding(&mut self, pos: usize, extra: &[ExtraProcess]) -> Vec<GpuProcess> {
        let Some(device) = self.devices.get(pos).copied().flatten() else {
            return Vec::new();
        };
        if self.holders.procs.is_none() {
            return Vec::new();
        }
        let wanted: Vec<(u32, u32)> = self.devices.iter().flatten().copied().collect();
        let pids = self.holders.of(&wanted, device);
        let Some(procs) = self.holders.procs.as_mut() else {
            return Vec::new();
        };
        pids.into_iter()
            .filter(|pid| !extra.iter().any(|p| p.pid == *pid))
            .filter_map(|pid| {
                let owner = procs.owner(pid)?;
                Some(GpuProcess {
                    pid,
                    used_memory_bytes: Some(HOLDER_MEMORY_BYTES),
                    user: owner.user,
                    command: Some(owner.command),
                    sm_pct: None,
                    mem_pct: None,
                    lane: None,
                    simulated: false,
                    container: owner.container,
                })
            })
            .collect()
    }
}

/// What a process holding a simulated card's device file is shown to hold of its memory.
const HOLDER_MEMORY_BYTES: u64 = 512 << 20;

/// A uniform draw from [lo, hi).
fn uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    lo + unit * (hi - lo)
}

/// Moves `value` toward `target` as a first-order lag with time constant `tau_ms`.
fn approach(value: f64, target: f64, dt_ms: f64, tau_ms: f64) -> f64 {
    value + (target - value) * (1.0 - (-dt_ms / tau_ms).exp())
}

impl SimCard {
    fn advance(&mut self, at_ms: i64, extra: &[ExtraProcess], background: bool) {
        let first = self.last_ms.is_none() && background;
        // A long pause (or a clock step back) is treated as one poll interval.
        let dt = match self.last_ms {
            Some(last) if at_ms > last => ((at_ms - last) as f64).min(60_000.0),
            _ => 1000.0,
        };
        self.last_ms = Some(at_ms);
        self.last_dt_ms = dt;
        if first {
            // Start some cards busy so a fresh dashboard is not all idle.
            if uniform(&mut self.rng, 0.0, 1.0) < 0.6 {
                let started_ago = uniform(&mut self.rng, 0.0, 120_000.0) as i64;
                self.start_job(at_ms - started_ago);
                if let Some(job) = &self.job {
                    self.memory = job.memory_bytes;
                    self.util = job.peak_util * 0.8;
                    self.temperature = AMBIENT_C + self.util * 0.45;
                }
            } else {
                self.idle_until_ms = at_ms + uniform(&mut self.rng, 5_000.0, 90_000.0) as i64;
            }
        }
        // Attached processes take the card: a background job makes way for them.
        if self
            .job
            .as_ref()
            .is_some_and(|j| at_ms >= j.until_ms || !extra.is_empty())
        {
            self.end_job(at_ms);
        }
        if self.job.is_none() && background && extra.is_empty() && at_ms >= self.idle_until_ms {
            self.start_job(at_ms);
        }
        let noise = uniform(&mut self.rng, -4.0, 4.0);
        let attached = (!extra.is_empty()).then(|| {
            let util: u32 = extra.iter().map(|p| p.utilization_pct).sum();
            let memory: u64 = extra.iter().map(|p| p.memory_bytes).sum();
            (
                (f64::from(util.min(100)) + noise).clamp(0.0, 100.0),
                (memory as f64).min(MEMORY_TOTAL_BYTES as f64),
            )
        });
        let (target_util, target_memory) = match (&self.job, attached) {
            (_, Some(load)) => load,
            (None, None) => (noise.max(0.0) * 0.25, IDLE_MEMORY_BYTES),
            (Some(job), None) => {
                let phase = ((at_ms - job.started_ms) as f64 / job.period_ms).fract();
                // 85 % of each cycle trains at full load, the rest evaluates at a third of it.
                let load = if phase < 0.85 { 1.0 } else { 0.35 };
                // Memory is allocated over the first ~20 s of a job.
                (job.peak_util * load + noise, job.memory_bytes)
            }
        };
        // Load builds up over a few seconds but stops at once when the process exits.
        let busy = self.job.is_some() || attached.is_some();
        let util_tau_ms = if busy { 2_500.0 } else { 300.0 };
        self.util = approach(self.util, target_util, dt, util_tau_ms).clamp(0.0, 100.0);
        self.memory = approach(self.memory, target_memory, dt, 6_000.0);
        self.temperature = approach(self.temperature, AMBIENT_C + self.util * 0.45, dt, 40_000.0);
    }

    fn end_job(&mut self, at_ms: i64) {
        self.job = None;
        self.idle_until_ms = at_ms + uniform(&mut self.rng, 10_000.0, 180_000.0) as i64;
    }

    fn start_job(&mut self, at_ms: i64) {
        let duration = uniform(&mut self.rng, 120_000.0, 1_200_000.0) as i64;
        let user = USERS[(self.rng.next_u32() as usize) % USERS.len()];
        let command = COMMANDS[(self.rng.next_u32() as usize) % COMMANDS.len()];
        self.job = Some(SimJob {
            until_ms: at_ms + duration,
            started_ms: at_ms,
            peak_util: uniform(&mut self.rng, 55.0, 100.0),
            period_ms: uniform(&mut self.rng, 20_000.0, 90_000.0),
            memory_bytes: uniform(&mut self.rng, 0.15, 0.95) * MEMORY_TOTAL_BYTES as f64,
            process: GpuProcess {
                pid: FAKE_PID_BASE + 1_000_000 + self.rng.next_u32() % 1_000_000,
                used_memory_bytes: None,
                user: Some(user.to_string()),
                command: Some(command.to_string()),
                lane: None,
                sm_pct: None,
                mem_pct: None,
                simulated: true,
                container: None,
            },
        });
    }
}

impl GpuSource for SimulatedFleet {
    fn kind(&self) -> SourceKind {
        SourceKind::Simulated
    }

    fn inventory(&self) -> &[GpuInfo] {
        &self.inventory
    }

    fn read_counters(&mut self, pos: usize, at_ms: i64) -> Result<GpuSample, SourceError> {
        if self.faulty == Some(pos) {
            return Err(SourceError(
                "simulated fault: GPU has fallen off the bus".into(),
            ));
        }
        if (self.inventory.get(pos)).is_some_and(|c| self.control.faults(&c.uuid).lost) {
            return Err(SourceError(super::LOST.into()));
        }
        let card = self
            .cards
            .get_mut(pos)
            .ok_or_else(|| SourceError(format!("no simulated GPU at position {pos}")))?;
        let (extra, killed) = self.control.on_card(&self.inventory[pos].uuid);
        if card
            .job
            .as_ref()
            .is_some_and(|j| killed.contains(&j.process.pid))
        {
            card.end_job(at_ms);
        }
        card.advance(at_ms, &extra, self.background);
        if self.hot == Some(pos) {
            card.energy_mj += POWER_LIMIT_WATTS * card.last_dt_ms;
            return Ok(GpuSample {
                at_ms,
                utilization_gpu_pct: 100,
                utilization_memory_pct: 60,
                memory_used_bytes: card.memory.round() as u64,
                temperature_c: Some(93),
                power_watts: Some(POWER_LIMIT_WATTS),
                power_limit_watts: Some(POWER_LIMIT_WATTS),
                sm_clock_mhz: Some(BOOST_CLOCK_MHZ / 2),
                energy_mj: Some(card.energy_mj as u64),
            });
        }
        let util = card.util.round() as u32;
        let power =
            IDLE_POWER_WATTS + card.util / 100.0 * (POWER_LIMIT_WATTS * 0.92 - IDLE_POWER_WATTS);
        let power = (power * 10.0).round() / 10.0;
        // The counter integrates the power drawn over the period the reading stands for.
        card.energy_mj += power * card.last_dt_ms;
        Ok(GpuSample {
            at_ms,
            utilization_gpu_pct: util,
            utilization_memory_pct: (card.util * 0.6).round() as u32,
            memory_used_bytes: card.memory.round() as u64,
            temperature_c: Some(card.temperature.round() as u32),
            power_watts: Some(power),
            power_limit_watts: Some(POWER_LIMIT_WATTS),
            sm_clock_mhz: Some(if util > 2 {
                BOOST_CLOCK_MHZ - (util / 10) * 15
            } else {
                IDLE_CLOCK_MHZ
            }),
            energy_mj: Some(card.energy_mj as u64),
        })
    }

    fn read_health(&mut self, pos: usize) -> Result<HealthCounters, SourceError> {
        let card = (self.inventory.get(pos))
            .ok_or_else(|| SourceError(format!("no simulated GPU at position {pos}")))?;
        let faults = self.control.faults(&card.uuid);
        if faults.lost {
            return Err(SourceError(super::LOST.into()));
        }
        Ok(faults.counters)
    }

    fn take_xids(&mut self) -> Vec<(usize, XidEvent)> {
        let taken = self.control.take_xids();
        taken
            .into_iter()
            .filter_map(|(uuid, xid)| {
                let pos = self.inventory.iter().position(|c| c.uuid == uuid)?;
                Some((pos, xid))
            })
            .collect()
    }

    fn read_processes(&mut self, pos: usize) -> Result<Vec<GpuProcess>, SourceError> {
        let uuid = (self.inventory.get(pos))
            .ok_or_else(|| SourceError(format!("no simulated GPU at position {pos}")))?
            .uuid
            .clone();
        let (extra, _) = self.control.on_card(&uuid);
        let holding = self.holding(pos, &extra);
        let card = self
            .cards
            .get(pos)
            .ok_or_else(|| SourceError(format!("no simulated GPU at position {pos}")))?;
        // Per-process samples as the driver gives them: the card's load split between its
        // processes by what each asks of it.
        let (card_sm, card_mem) = (card.util, card.util * 0.6);
        let background = card.job.iter().map(|job| GpuProcess {
            used_memory_bytes: Some(card.memory.round() as u64),
            sm_pct: Some(card_sm.round() as u32),
            mem_pct: Some(card_mem.round() as u32),
            ..job.process.clone()
        });
        let asked: f64 = extra.iter().map(|p| f64::from(p.utilization_pct)).sum();
        let share = move |p: &ExtraProcess, of: f64| {
            let part = if asked > 0.0 {
                f64::from(p.utilization_pct) / asked
            } else {
                0.0
            };
            Some((of * part).round() as u32)
        };
        let attached = extra.into_iter().map(move |p| GpuProcess {
            pid: p.pid,
            // Each holds what it asked for once the card's memory has ramped up to the total.
            used_memory_bytes: Some(p.memory_bytes.min(card.memory.round() as u64)),
            sm_pct: share(&p, card_sm),
            mem_pct: share(&p, card_mem),
            user: Some(p.user),
            command: Some(p.command),
            lane: None,
            simulated: false,
            container: None,
        });
        Ok(background.chain(attached).chain(holding).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64, gpus: u32, seconds: i64) -> Vec<Vec<GpuSample>> {
        let mut fleet = SimulatedFleet::new("sim", gpus, seed);
        (0..seconds)
            .map(|s| {
                (0..gpus as usize)
                    .map(|g| {
                        fleet
                            .read_counters(g, 1_700_000_000_000 + s * 1000)
                            .unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_fleet_and_readings() {
        let a = SimulatedFleet::new("sim", 4, 7);
        let b = SimulatedFleet::new("sim", 4, 7);
        assert_eq!(a.inventory(), b.inventory());
        assert_eq!(run(7, 4, 50), run(7, 4, 50));
        assert_ne!(run(7, 4, 50), run(8, 4, 50));
    }

    #[test]
    fn cards_have_distinct_uuids_in_nvidia_form_and_ascending_pci_ids() {
        let fleet = SimulatedFleet::new("sim", 8, 1);
        let inv = fleet.inventory();
        for (i, g) in inv.iter().enumerate() {
            assert_eq!(g.index as usize, i);
            assert!(
                g.uuid.starts_with("GPU-") && g.uuid.len() == 40,
                "{}",
                g.uuid
            );
        }
        let mut uuids: Vec<_> = inv.iter().map(|g| &g.uuid).collect();
        uuids.dedup();
        assert_eq!(uuids.len(), 8);
        assert!(inv.windows(2).all(|w| w[0].pci_bus_id < w[1].pci_bus_id));
    }

    #[test]
    fn readings_stay_in_physical_range_over_an_hour() {
        for row in run(3, 8, 3600) {
            for s in row {
                assert!(s.utilization_gpu_pct <= 100);
                assert!(s.memory_used_bytes <= MEMORY_TOTAL_BYTES);
                let p = s.power_watts.unwrap();
                assert!(
                    (IDLE_POWER_WATTS - 1.0..=POWER_LIMIT_WATTS).contains(&p),
                    "{p}"
                );
                assert!((25..=80).contains(&s.temperature_c.unwrap()));
            }
        }
    }

    #[test]
    fn load_rises_and_falls_and_memory_and_heat_follow_it() {
        let samples = run(11, 8, 3600);
        for g in 0..8 {
            let util: Vec<u32> = samples
                .iter()
                .map(|row| row[g].utilization_gpu_pct)
                .collect();
            let busy = util.iter().filter(|u| **u >= 40).count();
            let idle = util.iter().filter(|u| **u <= 2).count();
            assert!(
                busy > 60 && idle > 60,
                "gpu {g}: {busy} busy, {idle} idle seconds"
            );
        }
        // Across the fleet, hotter and hungrier seconds are the busier ones.
        let flat: Vec<&GpuSample> = samples.iter().flatten().collect();
        let mean = |f: &dyn Fn(&GpuSample) -> f64, hot: bool| {
            let xs: Vec<f64> = flat
                .iter()
                .filter(|s| (s.utilization_gpu_pct >= 50) == hot)
                .map(|s| f(s))
                .collect();
            xs.iter().sum::<f64>() / xs.len() as f64
        };
        let temp = |s: &GpuSample| s.temperature_c.unwrap() as f64;
        let power = |s: &GpuSample| s.power_watts.unwrap();
        let mem = |s: &GpuSample| s.memory_used_bytes as f64;
        assert!(mean(&temp, true) > mean(&temp, false) + 5.0);
        assert!(mean(&power, true) > mean(&power, false) * 2.0);
        assert!(mean(&mem, true) > mean(&mem, false) * 2.0);
    }

    #[test]
    fn a_busy_card_lists_its_job_and_an_idle_card_lists_none() {
        let mut fleet = SimulatedFleet::new("sim", 8, 5);
        let mut saw_busy = false;
        let mut saw_idle = false;
        for s in 0..600 {
            for g in 0..8 {
                let sample = fleet.read_counters(g, s * 1000).unwrap();
                let procs = fleet.read_processes(g).unwrap();
                if sample.utilization_gpu_pct >= 50 {
                    assert_eq!(procs.len(), 1);
                    assert!(procs[0].user.is_some() && procs[0].used_memory_bytes.is_some());
                    saw_busy = true;
                }
                saw_idle |= procs.is_empty();
            }
        }
        assert!(saw_busy && saw_idle);
    }

    #[test]
    fn two_processes_on_a_card_get_its_load_split_by_what_they_ask_and_energy_counts_power() {
        let mut fleet = SimulatedFleet::new("sim", 1, 9).with_background(false);
        let control = fleet.control();
        let uuid = fleet.inventory()[0].uuid.clone();
        for (user, pct) in [("ada", 40), ("bo", 60)] {
            control.inject(ExtraProcess {
                pid: 0,
                cards: vec![uuid.clone()],
                user: user.into(),
                command: "python3".into(),
                memory_bytes: 1 << 30,
                utilization_pct: pct,
            });
        }
        let mut energy = Vec::new();
        let mut power_integral_mj = 0.0;
        for s in 0..60 {
            let sample = fleet.read_counters(0, 1_000_000 + s * 1000).unwrap();
            if s > 0 {
                power_integral_mj += sample.power_watts.unwrap() * 1000.0;
            }
            energy.push(sample.energy_mj.unwrap());
        }
        let sample = fleet.read_counters(0, 1_060_000).unwrap();
        power_integral_mj += sample.power_watts.unwrap() * 1000.0;
        let processes = fleet.read_processes(0).unwrap();
        let sm: Vec<u32> = processes.iter().map(|p| p.sm_pct.unwrap()).collect();
        let total = sm[0] + sm[1];
        assert!(
            total.abs_diff(sample.utilization_gpu_pct) <= 1,
            "{sm:?} vs {sample:?}"
        );
        assert!(sm[0] * 10 / total == 4 || sm[0] * 10 / total == 3, "{sm:?}");
        let delta = (sample.energy_mj.unwrap() - energy[0]) as f64;
        assert!(
            (delta - power_integral_mj).abs() / power_integral_mj < 0.001,
            "{delta} {power_integral_mj}"
        );
        assert!(energy.windows(2).all(|w| w[1] > w[0]));
    }
}
