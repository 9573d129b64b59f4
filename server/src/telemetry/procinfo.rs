//! Who owns a process and what it runs, read from /proc. NVML gives only pids; people need
//! names.

use super::containers::Owner;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Owner and command of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOwner {
    pub uid: u32,
    /// The person it is: its account's name (or "uid N" for an account the host does not
    /// name); for a process in a container, the container's owner, and `None` when nobody can
    /// be tied to the container.
    pub user: Option<String>,
    pub command: String,
    /// The container it runs in.
    pub container: Option<lanes_types::container::ContainerRef>,
}

/// Reads /proc (or another procfs root, for tests), caching uid → name lookups, which go
/// through NSS and may be slow (LDAP).
pub struct ProcReader {
    root: PathBuf,
    users: HashMap<u32, Option<String>>,
    containers: Option<super::containers::ContainerReader>,
}

impl Default for ProcReader {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl ProcReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            containers: (root == Path::new("/proc"))
                .then(super::containers::ContainerReader::default),
            root,
            users: HashMap::new(),
        }
    }

    /// Without looking for containers (the figure it is measured against).
    pub fn without_containers(mut self) -> Self {
        self.containers = None;
        self
    }

    fn name_of(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| user_name(uid))
            .clone()
            .unwrap_or_else(|| format!("uid {uid}"))
    }

    /// `None` when the process is gone or hidden from us (another pid namespace).
    pub fn owner(&mut self, pid: u32) -> Option<ProcessOwner> {
        let dir = self.root.join(pid.to_string());
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let uid = real_uid(&status)?;
        let command = read_comm(&dir).unwrap_or_default();
        let start = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
            .map_or(0, |s| s.start_ticks);
        let found = self.containers.as_mut().and_then(|c| c.of(pid, start));
        let (user, container) = match found {
            None => (Some(self.name_of(uid)), None),
            Some(found) => {
                let user = match found.owner {
                    Owner::Uid(owner) => Some(self.name_of(owner)),
                    Owner::Member(name) => Some(name),
                    Owner::Unknown => None,
                };
                (user, Some(found.container))
            }
        };
        Some(ProcessOwner {
            uid,
            user,
            command,
            container,
        })
    }
}

/// The path of a process's executable (`/proc/PID/exe`), as the kernel knows it; `None` when
/// it is gone or hidden. A deleted executable reads as its old path with " (deleted)".
pub fn exe(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The real uid from the `Uid:` line of /proc/PID/status (real, effective, saved, fs).
pub fn real_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
}

/// What /proc/PID/stat says about a process that matters for tracking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// One letter: R, S, D, Z (zombie), T, ...
    pub state: char,
    /// Session id: a Lanes job leads its own session, so its whole tree has the job's pid here.
    pub session: u32,
    /// Start time in clock ticks since boot: with the boot id it names one process for good,
    /// where a pid alone may be reused.
    pub start_ticks: u64,
}

/// Parses /proc/PID/stat. The command (field 2) is in parentheses and may hold spaces or
/// parentheses itself, so fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 of proc(5).
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        session: fields.get(3)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// The stat of process `pid` in the real /proc; `None` when it is gone.
pub fn stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This boot's id: process start times are only comparable within one boot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn read_comm(dir: &Path) -> Option<String> {
    let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_string())
}

fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_uid_is_the_first_field_of_the_uid_line() {
        let status = "Name:\tpython\nUmask:\t0022\nUid:\t1001\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
        assert_eq!(real_uid(status), Some(1001));
        assert_eq!(real_uid("Name:\tx\n"), None);
        assert_eq!(real_uid("Uid:\tnope\n"), None);
    }

    #[test]
    fn owner_reads_uid_and_command_from_a_proc_tree() {
        let root = std::env::temp_dir().join(format!("lanes-proc-{}", std::process::id()));
        let dir = root.join("4242");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), "Name:\tpython\nUid:\t0\t0\t0\t0\n").unwrap();
        std::fs::write(dir.join("comm"), "python\n").unwrap();
        let mut reader = ProcReader::new(&root);
        let owner = reader.owner(4242).unwrap();
        assert_eq!(owner.uid, 0);
        assert_eq!(owner.user.as_deref(), Some("root"));
        assert_eq!(owner.command, "python");
        assert_eq!(reader.owner(4243), None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line =
            "4242 (py (thon) x) S 1 4242 4240 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 3 0 987654 1 2";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                state: 'S',
                session: 4240,
                start_ticks: 987654
            })
        );
        assert_eq!(parse_stat("4242 (x) S 1"), None);
        let me = stat(std::process::id()).unwrap();
        assert_eq!(
            me.session,
            nix::unistd::getsid(None).unwrap().as_raw() as u32
        );
        assert!(!boot_id().is_empty());
    }

    #[test]
    fn our_own_process_is_found_in_the_real_proc() {
        let owner = ProcReader::default().owner(std::process::id()).unwrap();
        assert_eq!(owner.uid, nix::unistd::getuid().as_raw());
        assert!(!owner.command.is_empty());
    }
}
