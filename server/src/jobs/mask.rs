//! The device mask: exactly the booked cards, named by UUID, in the order CUDA will number them,
//! and a job environment in which nothing the user passes can widen it.

use lanes_types::booking::GpuRef;
use lanes_types::GpuInfo;
use std::collections::BTreeMap;

/// The cards a job may see, in PCI bus order (the order CUDA numbers them under
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID`, so the job's device 0 is the booked card on the lowest bus).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMask {
    uuids: Vec<String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    #[error("a job needs at least one booked card on this node")]
    Empty,
    #[error("card {0} is booked on node {1}, not on this node ({2})")]
    OtherNode(String, String, String),
    #[error("card {0} is not present on this node")]
    Missing(String),
    #[error("the variable {0} is set by Lanes and cannot be given")]
    Reserved(String),
    #[error("invalid environment variable name {0:?}")]
    BadName(String),
}

impl DeviceMask {
    /// The mask for `booked` cards on `node`, whose cards are `inventory`.
    pub fn for_cards(
        booked: &[GpuRef],
        node: &str,
        inventory: &[GpuInfo],
    ) -> Result<Self, MaskError> {
        if booked.is_empty() {
            return Err(MaskError::Empty);
        }
        let mut cards = Vec::new();
        for gpu in booked {
            if gpu.node != node {
                return Err(MaskError::OtherNode(
                    gpu.uuid.clone(),
                    gpu.node.clone(),
                    node.into(),
                ));
            }
            let info = inventory
                .iter()
                .find(|i| i.uuid == gpu.uuid)
                .ok_or_else(|| MaskError::Missing(gpu.uuid.clone()))?;
            cards.push(info);
        }
        cards.sort_by(|a, b| {
            a.pci_bus_id
                .to_lowercase()
                .cmp(&b.pci_bus_id.to_lowercase())
        });
        cards.dedup_by(|a, b| a.uuid == b.uuid);
        Ok(Self {
            uuids: cards.into_iter().map(|c| c.uuid.clone()).collect(),
        })
    }

    pub fn uuids(&self) -> &[String] {
        &self.uuids
    }

    /// The value of `CUDA_VISIBLE_DEVICES` and `NVIDIA_VISIBLE_DEVICES`.
    pub fn value(&self) -> String {
        self.uuids.join(",")
    }

    /// Its cards as people read them, "GPU 0 (GPU-…)", in `inventory`'s order.
    pub fn cards_named(&self, inventory: &[GpuInfo]) -> Vec<String> {
        inventory
            .iter()
            .filter(|i| self.uuids.contains(&i.uuid))
            .map(|i| format!("GPU {} ({})", i.index, i.uuid))
            .collect()
    }
}

/// Variables only Lanes sets: each selects or reorders devices, or names the job, so a value
/// from the user could widen or confuse the mask.
pub const RESERVED: [&str; 9] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "GPU_DEVICE_ORDINAL",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
];

/// Checks the variables a user asks for: valid names, none that Lanes sets itself. A reserved
/// name is an error, not a silent drop, so that the user learns why a setting has no effect.
pub fn check_extra_env(extra: &BTreeMap<String, String>) -> Result<(), MaskError> {
    for name in extra.keys() {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(MaskError::BadName(name.clone()));
        }
        if RESERVED.contains(&name.as_str()) || name.starts_with("LANES_") {
            return Err(MaskError::Reserved(name.clone()));
        }
    }
    Ok(())
}

/// What the job is, for its environment.
pub struct JobFacts {
    pub job_id: i64,
    pub booking_end: chrono::DateTime<chrono::Utc>,
    /// Where its notice before a stop will be written (`LANES_NOTICE_FILE`).
    pub notice_file: String,
    /// How often it was preempted and queued again before this run (`LANES_RESTART_COUNT`).
    pub restart_count: u32,
}

/// The variables nothing may override: the mask and the job's facts. They go on top of the
/// job's environment (its login profile's, a clean one, or a given one, then its own
/// variables), so neither the profile nor the request can widen the mask.
pub fn fixed_environment(mask: &DeviceMask, facts: &JobFacts) -> Vec<(String, String)> {
    vec![
        ("CUDA_VISIBLE_DEVICES".into(), mask.value()),
        ("NVIDIA_VISIBLE_DEVICES".into(), mask.value()),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
        ("LANES_JOB_ID".into(), facts.job_id.to_string()),
        (
            "LANES_BOOKING_END".into(),
            facts
                .booking_end
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
        ("LANES_NOTICE_FILE".into(), facts.notice_file.clone()),
        (
            "LANES_RESTART_COUNT".into(),
            facts.restart_count.to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::doctor::resolve_visible_devices;

    fn card(index: u32, bus: &str) -> GpuInfo {
        GpuInfo {
            node: "n1".into(),
            uuid: format!("GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}"),
            index,
            name: "H200".into(),
            pci_bus_id: bus.into(),
            memory_total_bytes: 1 << 37,
        }
    }

    fn inventory() -> Vec<GpuInfo> {
        vec![
            card(0, "00000000:18:00.0"),
            card(1, "00000000:2A:00.0"),
            card(2, "00000000:3A:00.0"),
            card(3, "00000000:5D:00.0"),
        ]
    }

    fn booked(cards: &[&GpuInfo]) -> Vec<GpuRef> {
        cards
            .iter()
            .map(|c| GpuRef {
                node: c.node.clone(),
                uuid: c.uuid.clone(),
            })
            .collect()
    }

    #[test]
    fn the_mask_names_exactly_the_booked_cards_in_bus_order_and_cuda_agrees() {
        let inv = inventory();
        let mask = DeviceMask::for_cards(&booked(&[&inv[3], &inv[1]]), "n1", &inv).unwrap();
        assert_eq!(mask.uuids(), [inv[1].uuid.clone(), inv[3].uuid.clone()]);
        // Resolved the way CUDA resolves it (the rules checked on real cards), the job sees
        // cards 1 and 3, in that order, and nothing else.
        let seen = resolve_visible_devices(&mask.value(), &inv);
        assert_eq!(seen.visible, vec![1, 3]);
    }

    #[test]
    fn cards_of_other_nodes_or_unknown_cards_make_no_mask() {
        let inv = inventory();
        let mut elsewhere = booked(&[&inv[0]]);
        elsewhere[0].node = "n2".into();
        assert!(matches!(
            DeviceMask::for_cards(&elsewhere, "n1", &inv),
            Err(MaskError::OtherNode(..))
        ));
        let mut gone = booked(&[&inv[0]]);
        gone[0].uuid = "GPU-gone".into();
        assert_eq!(
            DeviceMask::for_cards(&gone, "n1", &inv),
            Err(MaskError::Missing("GPU-gone".into()))
        );
        assert_eq!(
            DeviceMask::for_cards(&[], "n1", &inv),
            Err(MaskError::Empty)
        );
    }

    #[test]
    fn nothing_the_user_passes_can_widen_the_mask() {
        let inv = inventory();
        let mask = DeviceMask::for_cards(&booked(&[&inv[2]]), "n1", &inv).unwrap();
        for name in [
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "LANES_JOB_ID",
        ] {
            let extra = BTreeMap::from([(name.to_string(), "0,1,2,3".to_string())]);
            assert_eq!(
                check_extra_env(&extra),
                Err(MaskError::Reserved(name.into()))
            );
        }
        let extra = BTreeMap::from([("A=B".to_string(), "x".to_string())]);
        assert!(matches!(
            check_extra_env(&extra),
            Err(MaskError::BadName(_))
        ));
        let extra = BTreeMap::from([("WANDB_MODE".to_string(), "offline".to_string())]);
        assert_eq!(check_extra_env(&extra), Ok(()));

        let facts = JobFacts {
            job_id: 7,
            booking_end: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            notice_file: "/run/lanes/notices/7-ab12/notice.json".into(),
            restart_count: 2,
        };
        let env: BTreeMap<_, _> = fixed_environment(&mask, &facts).into_iter().collect();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], inv[2].uuid);
        assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], inv[2].uuid);
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(env["LANES_JOB_ID"], "7");
        assert_eq!(env["LANES_BOOKING_END"], "2027-01-15T08:00:00Z");
        assert_eq!(
            env["LANES_NOTICE_FILE"],
            "/run/lanes/notices/7-ab12/notice.json"
        );
        assert_eq!(env["LANES_RESTART_COUNT"], "2");
    }
}
