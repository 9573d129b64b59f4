//! `lanes doctor`: what the driver says about this host, and what a job started here with the
//! current environment would see. The mask rules are plain functions, tested below.

use crate::jobs::wall::{Isolation, Wall, DEFAULT_PARENT};
use crate::telemetry::nvml::{device_files, read_inventory};
use lanes_types::GpuInfo;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How one entry of `CUDA_VISIBLE_DEVICES` resolves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum MaskEntry {
    /// Selects the card at this position of the inventory.
    Card {
        text: String,
        index: u32,
        uuid: String,
    },
    /// CUDA rejects this entry, and with it every entry after it.
    Invalid { text: String, reason: String },
    /// Comes after an invalid entry, so CUDA never looks at it.
    Ignored { text: String },
}

/// What `CUDA_VISIBLE_DEVICES` makes visible, following CUDA's rules (checked against CUDA on
/// real cards with `bench/mask-vs-cuda.sh`):
/// - the first entry sets the form: a list of indices (in CUDA's enumeration order), or of UUIDs
///   (`GPU-` plus the full UUID or a unique prefix of it);
/// - an index is read like `strtoul`: leading digits count and the rest is dropped (`1gpu` is 1);
/// - reading stops at the first entry that is invalid (no such card, negative, the other form),
///   and the cards before it stay visible;
/// - a card named twice makes no card visible at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VisibleDevices {
    pub value: String,
    pub entries: Vec<MaskEntry>,
    /// Inventory positions of the visible cards, in the order CUDA numbers them.
    pub visible: Vec<usize>,
}

/// Resolves a `CUDA_VISIBLE_DEVICES` value against the cards in CUDA's enumeration order.
pub fn resolve_visible_devices(value: &str, cuda_order: &[GpuInfo]) -> VisibleDevices {
    let mut entries = Vec::new();
    let mut visible: Vec<usize> = Vec::new();
    let mut stopped = false;
    let texts: Vec<&str> = if value.trim().is_empty() {
        Vec::new()
    } else {
        value.split(',').map(str::trim).collect()
    };
    let uuid_form = texts.first().is_some_and(|t| t.starts_with("GPU-"));
    for text in texts {
        if stopped {
            entries.push(MaskEntry::Ignored { text: text.into() });
            continue;
        }
        let resolved = if uuid_form {
            resolve_uuid(text, cuda_order)
        } else {
            resolve_index(text, cuda_order)
        };
        match resolved {
            Ok(pos) if visible.contains(&pos) => {
                stopped = true;
                visible.clear();
                entries.push(MaskEntry::Invalid {
                    text: text.into(),
                    reason: "names a card already listed, so CUDA shows no card at all".into(),
                });
            }
            Ok(pos) => {
                visible.push(pos);
                entries.push(MaskEntry::Card {
                    text: text.into(),
                    index: cuda_order[pos].index,
                    uuid: cuda_order[pos].uuid.clone(),
                });
            }
            Err(reason) => {
                stopped = true;
                entries.push(MaskEntry::Invalid {
                    text: text.into(),
                    reason,
                });
            }
        }
    }
    VisibleDevices {
        value: value.into(),
        entries,
        visible,
    }
}

fn resolve_index(text: &str, cards: &[GpuInfo]) -> Result<usize, String> {
    if text.starts_with("GPU-") || text.starts_with("MIG-") {
        return Err(
            "a UUID in a list that began with an index (CUDA takes one form per list)".into(),
        );
    }
    if text.starts_with('-') {
        return Err("negative: hides this and every later entry".into());
    }
    let digits = &text[..text.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() {
        return Err("neither an index nor a GPU- UUID".into());
    }
    match digits.parse::<usize>() {
        Ok(index) if index < cards.len() => Ok(index),
        _ => Err(format!(
            "no card {digits}: this host has {} (0 to {})",
            cards.len(),
            cards.len().saturating_sub(1)
        )),
    }
}

fn resolve_uuid(text: &str, cards: &[GpuInfo]) -> Result<usize, String> {
    if text.starts_with("MIG-") {
        return Err("a MIG instance, not a whole card (MIG is not bookable yet)".into());
    }
    if !text.starts_with("GPU-") {
        return Err(
            "not a GPU- UUID in a list that began with one (CUDA takes one form per list)".into(),
        );
    }
    let matches: Vec<usize> = (0..cards.len())
        .filter(|&i| cards[i].uuid.starts_with(text))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err("no card has a UUID starting with this".into()),
        _ => Err(format!(
            "ambiguous: the UUID prefix matches {} cards",
            matches.len()
        )),
    }
}

/// Whether CUDA numbers cards differently from `nvidia-smi` (NVML, PCI bus order) here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderCheck {
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` is set: CUDA indices equal nvidia-smi indices.
    PciBusOrderSet,
    /// Default order (FASTEST_FIRST), but the cards are all one model, so ties fall back to PCI
    /// bus order and indices agree.
    SameModel,
    /// Default order with mixed models: CUDA puts the fastest card first, so CUDA index N may
    /// not be nvidia-smi's GPU N.
    MayDiffer,
}

pub fn check_order(cuda_device_order: Option<&str>, cards: &[GpuInfo]) -> OrderCheck {
    if cuda_device_order == Some("PCI_BUS_ID") {
        return OrderCheck::PciBusOrderSet;
    }
    let first = cards.first().map(|c| &c.name);
    if cards.iter().all(|c| Some(&c.name) == first) {
        OrderCheck::SameModel
    } else {
        OrderCheck::MayDiffer
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub driver_version: String,
    pub nvml_version: String,
    /// CUDA driver API version, e.g. "12.4".
    pub cuda_driver_version: String,
    pub gpus: Vec<GpuInfo>,
    pub cuda_device_order: Option<String>,
    pub order: OrderCheck,
    pub cuda_visible_devices: Option<VisibleDevices>,
    pub device_wall: WallCheck,
    pub containers: ContainersCheck,
    /// Each card's error counters, and whether it reports Xid and ECC events.
    pub health: Vec<CardCounters>,
    /// Whether the server can read Xid errors from the kernel log (`/dev/kmsg`), or why not.
    pub xid_log: Result<(), String>,
}

/// One card's error counters as the health keeper reads them.
#[derive(Debug, Serialize)]
pub struct CardCounters {
    pub index: u32,
    pub counters: Result<lanes_types::health::HealthCounters, String>,
    /// The events this card can report of those the keeper registers (`xid`, `ecc`).
    pub events: Vec<&'static str>,
}

/// Reads every card's error counters and the events it supports.
fn check_health(nvml: &nvml_wrapper::Nvml, gpus: &[GpuInfo]) -> Vec<CardCounters> {
    use nvml_wrapper::bitmasks::event::EventTypes;
    gpus.iter()
        .map(|g| match nvml.device_by_index(g.index) {
            Ok(device) => {
                let supported = device
                    .supported_event_types()
                    .unwrap_or(EventTypes::empty());
                let mut events = Vec::new();
                if supported.contains(EventTypes::CRITICAL_XID_ERROR) {
                    events.push("xid");
                }
                if supported
                    .intersects(EventTypes::SINGLE_BIT_ECC_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR)
                {
                    events.push("ecc");
                }
                CardCounters {
                    index: g.index,
                    counters: crate::telemetry::nvml::read_device_health(nvml, &device)
                        .map_err(|e| e.0),
                    events,
                }
            }
            Err(e) => CardCounters {
                index: g.index,
                counters: Err(e.to_string()),
                events: Vec::new(),
            },
        })
        .collect()
}

/// One card's counters in a line or two ("n/a": the card keeps no such counter).
fn render_counters(c: &lanes_types::health::HealthCounters) -> String {
    let n = |v: Option<u64>| v.map_or("n/a".to_string(), |v| v.to_string());
    let n32 = |v: Option<u32>| n(v.map(u64::from));
    let yes = |v: Option<bool>| match v {
        Some(true) => "YES",
        Some(false) => "no",
        None => "n/a",
    };
    format!(
        "ECC volatile corrected {} uncorrected {}, aggregate corrected {} uncorrected {}\n      \
         remapped rows correctable {} uncorrectable {}, remap pending {}, remap failed {}\n      \
         retired pages single-bit {} double-bit {}, retirement pending {}\n      \
         clocks held down by: {}; PCIe replays {}",
        n(c.ecc_corrected_volatile),
        n(c.ecc_uncorrected_volatile),
        n(c.ecc_corrected_aggregate),
        n(c.ecc_uncorrected_aggregate),
        n32(c.remapped_correctable),
        n32(c.remapped_uncorrectable),
        yes(c.remap_pending),
        yes(c.remap_failed),
        n32(c.retired_single_bit),
        n32(c.retired_double_bit),
        yes(c.retirement_pending),
        if c.throttle.is_empty() {
            "nothing".to_string()
        } else {
            c.throttle.join(", ")
        },
        n(c.pcie_replays),
    )
}

/// What jobs in containers would find here.
#[derive(Debug, Serialize)]
pub struct ContainersCheck {
    /// Each runtime found: its name, program and version.
    pub runtimes: Vec<RuntimeFound>,
    /// `nvidia.com/gpu` device names in the host's CDI specs (`/etc/cdi`, `/var/run/cdi`).
    pub cdi_devices: Vec<String>,
    /// Whether Docker jobs are enabled (`LANES_DOCKER_JOBS`, as `lanes serve --docker-jobs`).
    pub docker_jobs: bool,
    /// Whether the host has cgroup v2 alone, which Docker jobs need.
    pub cgroup_v2_only: bool,
    /// Each login account of this host, and whether rootless Podman is ready for it.
    pub accounts: Vec<SubuidCheck>,
}

#[derive(Debug, Serialize)]
pub struct RuntimeFound {
    pub runtime: String,
    pub program: String,
    pub version: String,
}

#[derive(Debug, Serialize)]
pub struct SubuidCheck {
    pub account: String,
    pub subuid: bool,
    pub subgid: bool,
}

/// Looks for the container runtimes, CDI specs and subordinate id ranges jobs would use.
pub fn check_containers() -> ContainersCheck {
    use crate::jobs::container::{cdi_gpu_names, has_subordinate_range, ContainerHost, CDI_DIRS};
    let docker_jobs = std::env::var("LANES_DOCKER_JOBS").is_ok_and(|v| v == "true" || v == "1");
    let host = ContainerHost::discover(
        "",
        crate::jobs::container::ContainerPolicy {
            docker: docker_jobs,
            ..Default::default()
        },
        &BTreeMap::new(),
    );
    let runtimes = host
        .runtimes()
        .iter()
        .map(|(runtime, program)| {
            let version = std::process::Command::new(program)
                .arg("--version")
                .output()
                .ok()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "unknown (--version failed)".into());
            RuntimeFound {
                runtime: runtime.to_string(),
                program: program.display().to_string(),
                version,
            }
        })
        .collect();
    let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
    let subgid = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let accounts = passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let uid: u32 = fields.get(2)?.parse().ok()?;
            let shell = fields.get(6).copied().unwrap_or("");
            let login = (1000..60000).contains(&uid)
                && !shell.ends_with("nologin")
                && !shell.ends_with("false");
            login.then(|| SubuidCheck {
                account: fields[0].to_string(),
                subuid: has_subordinate_range(&subuid, fields[0], uid),
                subgid: has_subordinate_range(&subgid, fields[0], uid),
            })
        })
        .collect();
    ContainersCheck {
        runtimes,
        cdi_devices: cdi_gpu_names(&CDI_DIRS).into_iter().collect(),
        docker_jobs,
        cgroup_v2_only: crate::jobs::wall::unified_hierarchy(),
        accounts,
    }
}

fn render_containers(c: &ContainersCheck) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "Containers:
",
    );
    if c.runtimes.is_empty() {
        out.push_str(
            "  no runtime found (podman, apptainer, docker): jobs with --image cannot run here\n",
        );
    }
    for r in &c.runtimes {
        let _ = writeln!(out, "  {:<10} {} ({})", r.runtime, r.version, r.program);
    }
    let _ = writeln!(
        out,
        "  Docker jobs: {}",
        if c.docker_jobs && !c.cgroup_v2_only {
            "enabled, but refused on this host: Docker jobs need cgroup v2 alone (docs/containers.md)"
        } else if c.docker_jobs {
            "enabled (--docker-jobs): the client runs as root, the container as the member"
        } else {
            "off (rootless podman and apptainer need no leave; --docker-jobs enables Docker)"
        }
    );
    if c.cdi_devices.is_empty() {
        out.push_str("  CDI: no nvidia.com/gpu spec in /etc/cdi or /var/run/cdi; containers get the booked cards' device files (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml makes one)\n");
    } else {
        let _ = writeln!(out, "  CDI: nvidia.com/gpu = {}", c.cdi_devices.join(", "));
    }
    let missing: Vec<&str> = c
        .accounts
        .iter()
        .filter(|a| !(a.subuid && a.subgid))
        .map(|a| a.account.as_str())
        .collect();
    let _ = writeln!(
        out,
        "  Rootless podman: {} of {} login accounts have subuid and subgid ranges",
        c.accounts.len() - missing.len(),
        c.accounts.len()
    );
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "    without: {} (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 ACCOUNT)",
            missing.join(", ")
        );
    }
    out
}

/// Whether jobs here would run behind the device wall (`--isolation cgroup`), and why not.
#[derive(Debug, Serialize)]
pub struct WallCheck {
    pub on: bool,
    pub description: String,
}

/// Sets the wall up the way `lanes serve` would (a probe cgroup walled off one device proves
/// it), under `LANES_CGROUP_PARENT` or the default parent.
fn check_wall(device_files: &BTreeMap<String, PathBuf>) -> WallCheck {
    let parent = std::env::var("LANES_CGROUP_PARENT").unwrap_or_else(|_| DEFAULT_PARENT.into());
    match Wall::set_up(Isolation::Cgroup, &parent, device_files) {
        Ok(wall) => WallCheck {
            on: wall.is_on(),
            description: wall.describe(),
        },
        Err(e) => WallCheck {
            on: false,
            description: e.to_string(),
        },
    }
}

fn render_wall(wall: &WallCheck) -> String {
    if wall.on {
        format!("Device wall:    on: {}\n", wall.description)
    } else {
        format!(
            "Device wall:    {}\n  Jobs would run with CUDA_VISIBLE_DEVICES alone, which a job can override.\n",
            wall.description
        )
    }
}

/// Runs the checks and prints them; returns the process exit status.
pub fn run(json: bool) -> i32 {
    let report = match gather() {
        Ok(report) => report,
        Err(message) => {
            let wall = check_wall(&BTreeMap::new());
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "error": "no_driver", "message": message, "device_wall": wall, "containers": check_containers() })
                );
            } else {
                println!("NVIDIA driver: not found");
                println!("  {message}");
                println!("  Lanes can still run: `lanes serve` falls back to a simulated fleet.");
                print!("{}", render_wall(&wall));
                print!("{}", render_containers(&check_containers()));
            }
            return 1;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", render(&report));
    }
    0
}

fn gather() -> Result<Report, String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| {
        format!("NVML could not be loaded ({e}); is the NVIDIA driver installed and loaded?")
    })?;
    let text = |r: Result<String, nvml_wrapper::error::NvmlError>| {
        r.unwrap_or_else(|e| format!("unknown ({e})"))
    };
    let cuda = nvml
        .sys_cuda_driver_version()
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let node = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let gpus =
        read_inventory(&nvml, &node).map_err(|e| format!("NVML could not list the GPUs: {e}"))?;
    let cuda_device_order = std::env::var("CUDA_DEVICE_ORDER").ok();
    let order = check_order(cuda_device_order.as_deref(), &gpus);
    let cuda_visible_devices = std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .map(|v| resolve_visible_devices(&v, &gpus));
    let device_wall = check_wall(&device_files(&nvml, &gpus));
    let health = check_health(&nvml, &gpus);
    Ok(Report {
        health,
        xid_log: crate::telemetry::kmsg::KernelLog::open()
            .map(drop)
            .map_err(|e| e.to_string()),
        device_wall,
        containers: check_containers(),
        driver_version: text(nvml.sys_driver_version()),
        nvml_version: text(nvml.sys_nvml_version()),
        cuda_driver_version: cuda,
        gpus,
        cuda_device_order,
        order,
        cuda_visible_devices,
    })
}

/// The report as people read it.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "NVIDIA driver:  {}", r.driver_version);
    let _ = writeln!(out, "NVML:           {}", r.nvml_version);
    let _ = writeln!(out, "CUDA (driver):  {}", r.cuda_driver_version);
    let _ = writeln!(
        out,
        "GPUs:           {} (nvidia-smi order = PCI bus order)",
        r.gpus.len()
    );
    for g in &r.gpus {
        let _ = writeln!(
            out,
            "  {:>2}  {}  {}  {}  {:.0} GiB",
            g.index,
            g.uuid,
            g.pci_bus_id,
            g.name,
            g.memory_total_bytes as f64 / (1u64 << 30) as f64
        );
    }
    let _ = match &r.xid_log {
        Ok(()) => writeln!(out, "Xid errors:     read from the kernel log (/dev/kmsg)"),
        Err(e) => writeln!(
            out,
            "Xid errors:     the kernel log (/dev/kmsg) cannot be read ({e}): cards are judged by their counters alone"
        ),
    };
    let _ = writeln!(out, "Error counters (what Lanes judges card health by):");
    for c in &r.health {
        let events = if c.events.is_empty() {
            "no Xid or ECC events".to_string()
        } else {
            format!("reports {} events", c.events.join(" and "))
        };
        match &c.counters {
            Ok(counters) => {
                let _ = writeln!(
                    out,
                    "  {:>2}  {events}\n      {}",
                    c.index,
                    render_counters(counters)
                );
            }
            Err(e) => {
                let _ = writeln!(out, "  {:>2}  {events}; counters unreadable: {e}", c.index);
            }
        }
    }
    let order = r
        .cuda_device_order
        .as_deref()
        .unwrap_or("unset (FASTEST_FIRST)");
    let _ = writeln!(out, "CUDA_DEVICE_ORDER: {order}");
    match r.order {
        OrderCheck::PciBusOrderSet => {}
        OrderCheck::SameModel => {
            let _ = writeln!(
                out,
                "  ok: all cards are one model, so CUDA's default order equals PCI bus order"
            );
        }
        OrderCheck::MayDiffer => {
            let _ = writeln!(
                out,
                "  WARNING: cards of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID:\n  \
                 CUDA numbers the fastest card 0, so CUDA index N may not be nvidia-smi's GPU N.\n  \
                 Set CUDA_DEVICE_ORDER=PCI_BUS_ID (Lanes jobs always get it) or select cards by UUID."
            );
        }
    }
    match &r.cuda_visible_devices {
        None => {
            let _ = writeln!(
                out,
                "CUDA_VISIBLE_DEVICES: unset (a process here sees all {} cards)",
                r.gpus.len()
            );
        }
        Some(v) => {
            let _ = writeln!(
                out,
                "CUDA_VISIBLE_DEVICES: {:?} → {} visible",
                v.value,
                v.visible.len()
            );
            for (n, e) in v.entries.iter().enumerate() {
                let _ = match e {
                    MaskEntry::Card { text, index, uuid } if v.visible.is_empty() => {
                        writeln!(
                            out,
                            "  {text:<12} → GPU {index} ({uuid}), but hidden: see below"
                        )
                    }
                    MaskEntry::Card { text, index, uuid } => {
                        writeln!(out, "  {text:<12} → CUDA device {n}: GPU {index} ({uuid})")
                    }
                    MaskEntry::Invalid { text, reason } => {
                        writeln!(
                            out,
                            "  {text:<12} → INVALID: {reason}; CUDA stops reading here"
                        )
                    }
                    MaskEntry::Ignored { text } => {
                        writeln!(out, "  {text:<12} → ignored (after an invalid entry)")
                    }
                };
            }
        }
    }
    out.push_str(&render_wall(&r.device_wall));
    out.push_str(&render_containers(&r.containers));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cards() -> Vec<GpuInfo> {
        [
            "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
            "GPU-89aa0000-0000-0000-0000-000000000001",
            "GPU-1234abcd-0000-0000-0000-000000000002",
        ]
        .iter()
        .enumerate()
        .map(|(i, uuid)| GpuInfo {
            node: "n".into(),
            uuid: uuid.to_string(),
            index: i as u32,
            name: "NVIDIA H200".into(),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
            memory_total_bytes: 1,
        })
        .collect()
    }

    #[test]
    fn indices_select_cards_in_the_order_given() {
        let v = resolve_visible_devices("2,0", &cards());
        assert_eq!(v.visible, [2, 0]);
    }

    #[test]
    fn full_uuids_and_unique_gpu_prefixes_select_cards() {
        let v =
            resolve_visible_devices("GPU-1234abcd-0000-0000-0000-000000000002,GPU-893", &cards());
        assert_eq!(v.visible, [2, 0]);
    }

    #[test]
    fn an_ambiguous_prefix_is_invalid_and_hides_the_rest() {
        let v = resolve_visible_devices("GPU-1,GPU-89,GPU-8932", &cards());
        assert_eq!(v.visible, [2]);
        assert!(
            matches!(&v.entries[1], MaskEntry::Invalid { reason, .. } if reason.contains("ambiguous"))
        );
        assert_eq!(
            v.entries[2],
            MaskEntry::Ignored {
                text: "GPU-8932".into()
            }
        );
    }

    #[test]
    fn the_first_entry_sets_the_form_and_the_other_form_stops_the_list() {
        // As CUDA did on two H200s: "1,GPU-<card 0>,7,0" shows card 1 only.
        assert_eq!(
            resolve_visible_devices("1,GPU-8932f937,7,0", &cards()).visible,
            [1]
        );
        assert_eq!(resolve_visible_devices("GPU-1234,0", &cards()).visible, [2]);
    }

    #[test]
    fn an_out_of_range_index_keeps_the_cards_before_it() {
        // As CUDA did: "0,7,1" shows card 0 only.
        assert_eq!(resolve_visible_devices("0,7,1", &cards()).visible, [0]);
    }

    #[test]
    fn indices_are_read_like_strtoul() {
        assert_eq!(resolve_visible_devices("1gpu,2x", &cards()).visible, [1, 2]);
    }

    #[test]
    fn negative_bare_uuid_mig_and_garbage_hide_everything_from_there() {
        for bad in ["-1", "8932f937", "MIG-abc", "GPU-", "GPU-ffff", "x"] {
            let v = resolve_visible_devices(bad, &cards());
            assert!(v.visible.is_empty(), "{bad}");
            assert!(matches!(v.entries[0], MaskEntry::Invalid { .. }), "{bad}");
        }
    }

    #[test]
    fn a_repeated_card_makes_no_card_visible() {
        // As CUDA did: "0,0" shows nothing.
        assert!(resolve_visible_devices("0,0", &cards()).visible.is_empty());
        let v = resolve_visible_devices("GPU-8932f937,GPU-1234,GPU-8932", &cards());
        assert!(v.visible.is_empty());
        assert!(
            matches!(&v.entries[2], MaskEntry::Invalid { reason, .. } if reason.contains("no card at all"))
        );
    }

    #[test]
    fn an_empty_value_hides_every_card_and_spaces_are_trimmed() {
        assert!(resolve_visible_devices("", &cards()).visible.is_empty());
        assert_eq!(resolve_visible_devices(" 1 , 2 ", &cards()).visible, [1, 2]);
    }

    #[test]
    fn order_warning_only_for_mixed_models_without_pci_bus_order() {
        let mut mixed = cards();
        mixed[1].name = "NVIDIA A100".into();
        assert_eq!(check_order(None, &cards()), OrderCheck::SameModel);
        assert_eq!(check_order(None, &mixed), OrderCheck::MayDiffer);
        assert_eq!(
            check_order(Some("FASTEST_FIRST"), &mixed),
            OrderCheck::MayDiffer
        );
        assert_eq!(
            check_order(Some("PCI_BUS_ID"), &mixed),
            OrderCheck::PciBusOrderSet
        );
    }

    #[test]
    fn the_text_report_names_each_visible_card_and_the_invalid_entry() {
        let gpus = cards();
        let report = Report {
            health: Vec::new(),
            xid_log: Ok(()),
            driver_version: "560.35".into(),
            nvml_version: "12.560".into(),
            cuda_driver_version: "12.6".into(),
            order: check_order(None, &gpus),
            cuda_visible_devices: Some(resolve_visible_devices("1,x", &gpus)),
            cuda_device_order: None,
            gpus,
            device_wall: WallCheck {
                on: false,
                description: "off, device mask only (no root)".into(),
            },
            containers: ContainersCheck {
                runtimes: vec![RuntimeFound {
                    runtime: "podman".into(),
                    program: "/usr/bin/podman".into(),
                    version: "podman version 4.3.1".into(),
                }],
                cdi_devices: vec![],
                docker_jobs: false,
                cgroup_v2_only: true,
                accounts: vec![
                    SubuidCheck {
                        account: "ada".into(),
                        subuid: true,
                        subgid: true,
                    },
                    SubuidCheck {
                        account: "bob".into(),
                        subuid: false,
                        subgid: false,
                    },
                ],
            },
        };
        let text = render(&report);
        assert!(text.contains("CUDA device 0: GPU 1 (GPU-89aa"), "{text}");
        assert!(
            text.contains("  podman     podman version 4.3.1 (/usr/bin/podman)"),
            "{text}"
        );
        assert!(
            text.contains("Rootless podman: 1 of 2 login accounts"),
            "{text}"
        );
        assert!(text.contains("without: bob (usermod"), "{text}");
        assert!(text.contains("x            → INVALID"), "{text}");
        assert!(
            text.contains("Device wall:    off, device mask only (no root)\n  Jobs would run"),
            "{text}"
        );
    }
}
