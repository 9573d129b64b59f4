//! Xid errors from the kernel log. The NVIDIA driver logs each one as
//! `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`; the
//! poller reads `/dev/kmsg` without blocking at each tick (one `read` per record, until none is
//! left), so a card is judged within one poll of its Xid, with no thread and no NVML call.
//!
//! Why not NVML's event sets: the kernel log names the process with the Xid (an event's data
//! does not), needs no thread blocked in NVML, and costs one failed `read` per tick when nothing
//! happened (+0.6 % of a poll on an H100, `docs/benchmarks.md`). The ECC events that the event
//! set also carried add nothing: the ECC counters are read at the process interval.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

/// The kernel log, opened at its end (what was logged before the server started was judged by
/// the counters read since).
pub struct KernelLog {
    file: std::fs::File,
}

/// One Xid the driver logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidRecord {
    /// The card's PCI address: domain, bus, device.
    pub pci: (u32, u32, u32),
    pub xid: u32,
    pub pid: Option<u32>,
    /// The process's name as the driver logged it.
    pub name: Option<String>,
}

impl KernelLog {
    /// `/dev/kmsg`, or why it cannot be read (not root, or no kernel log in this container).
    pub fn open() -> std::io::Result<Self> {
        Self::open_at("/dev/kmsg")
    }

    pub fn open_at(path: &str) -> std::io::Result<Self> {
        use std::io::Seek;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
            .open(path)?;
        // /dev/kmsg: to the end of the log; a plain file (tests) is read from its start.
        if path == "/dev/kmsg" {
            file.seek(std::io::SeekFrom::End(0))?;
        }
        Ok(Self { file })
    }

    /// The Xids logged since the last call, at most `max` records read (the rest wait for the
    /// next poll).
    pub fn take(&mut self, max: usize) -> Vec<XidRecord> {
        let mut found = Vec::new();
        let mut record = vec![0u8; 8192];
        for _ in 0..max {
            match self.file.read(&mut record) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&record[..n]);
                    // A plain file may hold many lines; /dev/kmsg gives one record per read.
                    found.extend(text.lines().filter_map(parse_record));
                }
                // Records were overwritten before this read: go on with the next.
                Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!(error = %e, "the kernel log could not be read this tick");
                    break;
                }
            }
        }
        found
    }
}

/// A /dev/kmsg record (`prio,seq,usec,flags;message`) or a plain `dmesg` line, if it is an
/// Xid.
pub fn parse_record(line: &str) -> Option<XidRecord> {
    let message = line.split_once(';').map_or(line, |(_, m)| m);
    let rest = &message[message.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (address, rest) = rest.split_once("):")?;
    let mut parts = rest.split(',').map(str::trim);
    let xid = parts.next()?.parse().ok()?;
    let (mut pid, mut name) = (None, None);
    for part in parts {
        if let Some(p) = part.strip_prefix("pid=") {
            pid = p.parse().ok();
        } else if let Some(n) = part.strip_prefix("name=") {
            name = Some(n.to_string()).filter(|n| !n.is_empty() && n != "<unknown>");
        }
    }
    Some(XidRecord {
        pci: pci_address(address)?,
        xid,
        pid,
        name,
    })
}

/// `0000:3b:00` (the driver's log) or `00000000:3B:00.0` (NVML's bus id): domain, bus, device.
pub fn pci_address(text: &str) -> Option<(u32, u32, u32)> {
    let text = text.split('.').next()?;
    let mut parts = text.split(':');
    let (domain, bus, device) = (parts.next()?, parts.next()?, parts.next()?);
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(device, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xid_line_names_its_card_process_and_number() {
        let record = "3,1742,123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.";
        assert_eq!(
            parse_record(record),
            Some(XidRecord {
                pci: (0, 0x3b, 0),
                xid: 79,
                pid: Some(1234),
                name: Some("python".into()),
            })
        );
        // Older drivers: no pid or name; dmesg's own format.
        let old = "[ 1234.5678] NVRM: Xid (PCI:0000:af:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1)";
        let parsed = parse_record(old).unwrap();
        assert_eq!(
            (parsed.pci, parsed.xid, parsed.pid),
            ((0, 0xaf, 0), 13, None)
        );
        assert_eq!(parse_record("6,1,2,-;usb 1-1: new device"), None);
        assert_eq!(parse_record("NVRM: Xid (PCI:zz): 79, x"), None);
        // NVML's bus id names the same card.
        assert_eq!(pci_address("00000000:3B:00.0"), pci_address("0000:3b:00"));
    }

    #[test]
    fn records_are_taken_once_and_a_missing_log_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(
            &path,
            "6,1,1,-;eth0: link up\n4,2,2,-;NVRM: Xid (PCI:0000:18:00): 48, pid=77, name=train, An uncorrectable double bit error\n",
        )
        .unwrap();
        let mut log = KernelLog::open_at(path.to_str().unwrap()).unwrap();
        let taken = log.take(64);
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].xid, taken[0].pid), (48, Some(77)));
        assert!(log.take(64).is_empty());
        assert!(KernelLog::open_at("/nonexistent/kmsg").is_err());
    }
}
