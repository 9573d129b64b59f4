//! A card's health beyond "it answers": its error counters, the Xid events the driver reports,
//! and the verdict Lanes draws from them (`healthy`, `degraded`, `failing`), with the reasons in
//! words. The verdict is the health keeper's; these are only the shapes on the wire.

use crate::booking::GpuRef;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a card is, as far as its counters and events tell.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum HealthLevel {
    #[default]
    Healthy,
    /// Worth a look: throttling for heat or power trouble, correctable errors growing.
    Degraded,
    /// Not to be trusted with new work: an Xid that means hardware or driver trouble, a
    /// pending row remap, uncorrectable ECC errors, or the card is lost.
    Failing,
}

impl HealthLevel {
    pub const ALL: [HealthLevel; 3] = [
        HealthLevel::Healthy,
        HealthLevel::Degraded,
        HealthLevel::Failing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HealthLevel::Healthy => "healthy",
            HealthLevel::Degraded => "degraded",
            HealthLevel::Failing => "failing",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// One reason for a card's level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// The driver reported an Xid error that points at the card or the driver.
    Xid { xid: u32 },
    /// Uncorrectable (double-bit) ECC errors since the driver loaded.
    UncorrectableEcc { count: u64 },
    /// Correctable ECC errors grew since the last reading.
    CorrectableEccGrowth { added: u64 },
    /// A row remap waits for a reset of the card.
    RemapPending,
    /// The card could not remap a row: it has run out of spare rows.
    RemapFailed,
    /// Retired pages wait for a reset (cards without row remapping).
    RetirementPending,
    /// The clocks are held down by hardware or thermal trouble (not the power cap).
    Throttled { reasons: Vec<String> },
    /// PCIe replays grew: the link to the card is noisy.
    PcieReplays { added: u64 },
    /// NVML says the card is lost (fallen off the bus or otherwise unreachable).
    Lost,
    /// A reading failed for another reason.
    Unreadable { error: String },
}

impl Finding {
    /// The level this finding puts a card at.
    pub fn level(&self) -> HealthLevel {
        match self {
            Finding::Xid { xid } => xid_class(*xid).level(),
            Finding::UncorrectableEcc { .. }
            | Finding::RemapPending
            | Finding::RemapFailed
            | Finding::RetirementPending
            | Finding::Lost => HealthLevel::Failing,
            Finding::CorrectableEccGrowth { .. }
            | Finding::Throttled { .. }
            | Finding::PcieReplays { .. }
            | Finding::Unreadable { .. } => HealthLevel::Degraded,
        }
    }

    /// Its stable name (metrics labels, the timeline, translations).
    pub fn code(&self) -> &'static str {
        match self {
            Finding::Xid { .. } => "xid",
            Finding::UncorrectableEcc { .. } => "uncorrectable_ecc",
            Finding::CorrectableEccGrowth { .. } => "correctable_ecc_growth",
            Finding::RemapPending => "remap_pending",
            Finding::RemapFailed => "remap_failed",
            Finding::RetirementPending => "retirement_pending",
            Finding::Throttled { .. } => "throttled",
            Finding::PcieReplays { .. } => "pcie_replays",
            Finding::Lost => "lost",
            Finding::Unreadable { .. } => "unreadable",
        }
    }

    /// In English words, with the Xid's meaning (logs, messages, the terminal).
    pub fn words(&self) -> String {
        match self {
            Finding::Xid { xid } => format!("Xid {xid}: {}", xid_meaning(*xid)),
            Finding::UncorrectableEcc { count } => {
                format!("{count} uncorrectable ECC error(s) since the driver loaded")
            }
            Finding::CorrectableEccGrowth { added } => {
                format!("{added} new correctable ECC error(s)")
            }
            Finding::RemapPending => "a memory row remap waits for a reset of the card".into(),
            Finding::RemapFailed => {
                "a memory row could not be remapped (no spare rows left)".into()
            }
            Finding::RetirementPending => "retired memory pages wait for a reset".into(),
            Finding::Throttled { reasons } => {
                format!("clocks held down: {}", reasons.join(", "))
            }
            Finding::PcieReplays { added } => format!("{added} new PCIe replays"),
            Finding::Lost => "NVML reports the GPU lost (fallen off the bus)".into(),
            Finding::Unreadable { error } => format!("reading failed: {error}"),
        }
    }
}

/// What an Xid says about whose fault it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidClass {
    /// The application's fault (a bad kernel, a page fault): the process is told, not the card.
    Application,
    /// Hardware or driver trouble: the card is failing.
    Card,
    /// Not known to mean trouble by itself: worth a look.
    Other,
}

impl XidClass {
    pub fn level(self) -> HealthLevel {
        match self {
            XidClass::Application => HealthLevel::Healthy,
            XidClass::Card => HealthLevel::Failing,
            XidClass::Other => HealthLevel::Degraded,
        }
    }
}

/// Whose fault an Xid is, after NVIDIA's Xid catalogue.
pub fn xid_class(xid: u32) -> XidClass {
    match xid {
        13 | 31 | 43 | 45 | 68 => XidClass::Application,
        48 | 61 | 62 | 64 | 74 | 79 | 92 | 94 | 95 | 119 | 120 | 121 | 140 => XidClass::Card,
        _ => XidClass::Other,
    }
}

/// An Xid's meaning in a few words (NVIDIA's Xid catalogue).
pub fn xid_meaning(xid: u32) -> &'static str {
    match xid {
        13 => "graphics engine exception (usually the application's fault)",
        31 => "GPU memory page fault (usually the application's fault)",
        43 => "GPU stopped processing (the application was stopped)",
        45 => "preemptive cleanup after an earlier error",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller halt (reset the card)",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failed",
        68 => "video processor exception",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error (reset the card to remap)",
        95 => "uncontained ECC error (reset the card)",
        119 | 120 => "GSP firmware error (reset the card)",
        121 => "C2C link error",
        140 => "unrecovered ECC error",
        _ => "see NVIDIA's Xid catalogue",
    }
}

/// An Xid as the driver reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub xid: u32,
    pub at_ms: i64,
    /// The process it was raised for, when the driver says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// A card's health verdict: its level and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub level: HealthLevel,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

impl Condition {
    pub fn is_healthy(&self) -> bool {
        self.level == HealthLevel::Healthy
    }

    /// The findings in English, joined ("Xid 79: GPU has fallen off the bus; …").
    pub fn words(&self) -> String {
        self.findings
            .iter()
            .map(Finding::words)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A card's error counters as last read (`None`: the card does not keep that counter).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthCounters {
    /// ECC errors since the driver loaded (volatile) and over the card's life (aggregate).
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_aggregate: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    /// Rows remapped for correctable and uncorrectable errors; a remap pending a reset; a
    /// remap that failed.
    pub remapped_correctable: Option<u32>,
    pub remapped_uncorrectable: Option<u32>,
    pub remap_pending: Option<bool>,
    pub remap_failed: Option<bool>,
    /// Pages retired for single- and double-bit errors, and whether more wait for a reset.
    pub retired_single_bit: Option<u32>,
    pub retired_double_bit: Option<u32>,
    pub retirement_pending: Option<bool>,
    /// Every active reason the clocks are held down, by NVML's name (`hw_slowdown`, …).
    pub throttle: Vec<String>,
    pub pcie_replays: Option<u64>,
    /// Xid errors seen since Lanes started watching this card, by Xid.
    pub xids: BTreeMap<u32, u64>,
}

/// The throttle reasons that mean trouble (the others, such as the power cap or idle clocks,
/// are a card doing as told).
pub const TROUBLE_THROTTLE: [&str; 4] = [
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
];

/// A card's health as the keeper holds it (`GET /api/v1/health`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CardHealth {
    pub gpu: GpuRef,
    pub index: u32,
    pub condition: Condition,
    /// Since when it is at this level (unknown for a card never judged other than healthy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// The open-ended maintenance block that drains it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<i64>,
    /// The counters as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<HealthCounters>,
}

/// One change of a card's health (the history page's timeline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthChange {
    pub gpu: GpuRef,
    pub at: DateTime<Utc>,
    pub level: HealthLevel,
    pub findings: Vec<Finding>,
    /// What made it: `seen` (a reading), `cleared` (an admin), `reset` (the counters read
    /// clean after a reset), `process` (an application's Xid).
    pub cause: HealthCause,
    /// The admin who cleared it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The process an application's Xid was raised for, and whose it is ("1234 (alice: python)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthCause {
    Seen,
    Cleared,
    Reset,
    /// An application's Xid: the process was at fault, the card keeps its level.
    Process,
}

impl HealthCause {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthCause::Seen => "seen",
            HealthCause::Cleared => "cleared",
            HealthCause::Reset => "reset",
            HealthCause::Process => "process",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            HealthCause::Seen,
            HealthCause::Cleared,
            HealthCause::Reset,
            HealthCause::Process,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// `GET /api/v1/health/changes`: one card's timeline, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthChangesQuery {
    pub node: Option<String>,
    pub uuid: Option<String>,
    pub limit: Option<u32>,
}

/// What happens to a card found failing, and who hears of a degraded one (admins set it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthPolicy {
    /// Take a failing card out of service: no new bookings or queue starts until an admin
    /// clears it (or a reset shows its counters clean).
    pub drain_failing: bool,
    /// Stop the jobs running on a failing card (off: they are left to finish or fail).
    pub stop_jobs_on_failing: bool,
    /// Tell admins (the lab channel) when a card turns degraded.
    pub warn_degraded: bool,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            drain_failing: true,
            stop_jobs_on_failing: false,
            warn_degraded: true,
        }
    }
}

/// A fault to inject into a simulated card (`POST /api/v1/sim/faults`; simulated fleets only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum InjectFault {
    /// An Xid event, optionally raised for a process.
    Xid {
        gpu: String,
        xid: u32,
        #[serde(default)]
        pid: Option<u32>,
    },
    /// ECC errors added to the volatile and aggregate counters.
    Ecc {
        gpu: String,
        #[serde(default)]
        corrected: u64,
        #[serde(default)]
        uncorrected: u64,
    },
    /// A row remap pending a reset.
    RemapPending {
        gpu: String,
    },
    /// Clocks held down for this reason (an NVML reason name such as `hw_slowdown`); empty
    /// clears.
    Throttle {
        gpu: String,
        reasons: Vec<String>,
    },
    PcieReplays {
        gpu: String,
        added: u64,
    },
    /// The card falls off the bus: every reading fails as lost.
    Lost {
        gpu: String,
    },
    /// The card is reset: volatile counters zero, pending remaps applied, back on the bus.
    Reset {
        gpu: String,
    },
}

impl InjectFault {
    pub fn gpu(&self) -> &str {
        match self {
            InjectFault::Xid { gpu, .. }
            | InjectFault::Ecc { gpu, .. }
            | InjectFault::RemapPending { gpu }
            | InjectFault::Throttle { gpu, .. }
            | InjectFault::PcieReplays { gpu, .. }
            | InjectFault::Lost { gpu }
            | InjectFault::Reset { gpu } => gpu,
        }
    }
}

/// `POST /api/v1/health/clear`: an admin puts a card back in service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearHealth {
    pub gpu: GpuRef,
    /// Why (kept in the audit log).
    #[serde(default)]
    pub note: String,
}

/// `POST /api/v1/bookings/{id}/move`: one card of a booking exchanged for another of the same
/// node, free for the rest of the booking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveCard {
    pub from: GpuRef,
    pub to: GpuRef,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_xids_leave_the_card_healthy_and_hardware_ones_fail_it() {
        for xid in [13, 31, 43] {
            assert_eq!(xid_class(xid), XidClass::Application, "{xid}");
        }
        for xid in [48, 64, 79, 94, 95] {
            assert_eq!(Finding::Xid { xid }.level(), HealthLevel::Failing, "{xid}");
        }
        assert_eq!(Finding::Xid { xid: 63 }.level(), HealthLevel::Degraded);
        assert!(Finding::Xid { xid: 79 }
            .words()
            .contains("fallen off the bus"));
    }

    #[test]
    fn findings_and_faults_keep_their_wire_names() {
        let f = serde_json::to_value(Finding::Xid { xid: 79 }).unwrap();
        assert_eq!(f, serde_json::json!({"kind": "xid", "xid": 79}));
        let fault: InjectFault =
            serde_json::from_str(r#"{"fault":"xid","gpu":"GPU-1","xid":13,"pid":7}"#).unwrap();
        assert_eq!(fault.gpu(), "GPU-1");
        assert!(serde_json::from_str::<InjectFault>(r#"{"fault":"xid","gpu":"g"}"#).is_err());
        let healthy = serde_json::to_value(Condition::default()).unwrap();
        assert_eq!(healthy, serde_json::json!({"level": "healthy"}));
    }
}
