//! The device wall: each job in a cgroup of its own that admits only its booked cards' device
//! files, as Slurm's `ConstrainDevices` does. On cgroup v2 an eBPF device program refuses the
//! other cards ([`bpf`]); on cgroup v1 the `devices` controller does (`devices.deny`). The job's
//! process joins its cgroup between fork and exec, before any of the user's code (their login
//! profile included) runs; at the end the whole cgroup is killed, so nothing escapes by
//! `setsid()` or a double fork; the cgroup's counters give the job's CPU time and peak memory.
//!
//! Where neither works (no root, no controller) the wall is off, and says why: jobs then run
//! with the device mask alone (`CUDA_VISIBLE_DEVICES`), which a job can override.

mod bpf;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup job cgroups go under unless `--cgroup-parent` (`LANES_CGROUP_PARENT`) says.
pub const DEFAULT_PARENT: &str = "/lanes";

/// What `--isolation` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// The cgroup wall where the host allows it (v2 on a unified hierarchy, else v1 with the
    /// devices controller), else the mask alone, said at start and by `lanes doctor`.
    Cgroup,
    /// Only the cgroup v2 eBPF device program (fails to start when it cannot be had).
    CgroupV2,
    /// Only the cgroup v1 devices controller (fails to start when it cannot be had).
    CgroupV1,
    /// The device mask alone.
    None,
}

/// The wall as this host has it.
#[derive(Clone, Debug)]
pub struct Wall {
    kind: Kind,
    /// The cgroup (path inside each hierarchy) under which job cgroups are made.
    parent: String,
    /// Device files of this node's cards, by card UUID.
    devices: BTreeMap<String, (u32, u32)>,
}

#[derive(Clone, Debug)]
enum Kind {
    Off(String),
    V2 {
        mount: PathBuf,
        /// Whether the memory controller reaches job cgroups (peak memory).
        memory: bool,
    },
    V1 {
        /// Mount point of each controller used: devices first, then freezer, cpuacct, memory.
        hierarchies: Vec<(&'static str, PathBuf)>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum WallError {
    #[error("the cgroup device wall is not available here: {0}")]
    Unavailable(String),
    #[error("cannot make the job's cgroup {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot wall off the other cards in {path}: {source}")]
    Devices {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl WallError {
    /// The reason alone, without "not available here", for joining two reasons in one line.
    fn reason(&self) -> String {
        match self {
            WallError::Unavailable(why) => why.clone(),
            other => other.to_string(),
        }
    }
}

/// A job's cgroup: one directory on v2, one per controller on v1 (same relative path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCgroup {
    /// The path inside the hierarchies, as stored with the job (e.g. `/lanes/job-12`).
    pub path: String,
    dirs: Vec<PathBuf>,
    version: u8,
}

/// What a job's cgroup counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cpu_seconds: Option<f64>,
    pub peak_memory_bytes: Option<u64>,
}

/// A mounted file system: mount point, type, super options.
type Mount = (PathBuf, String, String);

fn mountinfo() -> Vec<Mount> {
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype source super
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let options = right.nth(1).unwrap_or("").to_string();
            Some((PathBuf::from(mount), fstype, options))
        })
        .collect()
}

/// Whether this host has the unified cgroup hierarchy alone (cgroup v2 at /sys/fs/cgroup),
/// not cgroup v1 or the hybrid of both.
pub fn unified_hierarchy() -> bool {
    unified_in(&mountinfo())
}

fn unified_in(mounts: &[Mount]) -> bool {
    mounts
        .iter()
        .any(|(m, t, _)| t == "cgroup2" && m == Path::new("/sys/fs/cgroup"))
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
}

/// The cgroups directly below cgroup directory `dir` (never through a link).
fn child_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Makes `dir` (one level; its parent must exist) unless it exists.
fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// The (major, minor) of a character device file.
pub fn device_number(path: &Path) -> std::io::Result<(u32, u32)> {
    let meta = std::fs::metadata(path)?;
    if !meta.file_type().is_char_device() {
        return Err(std::io::Error::other(format!(
            "{} is not a character device",
            path.display()
        )));
    }
    let rdev = meta.rdev();
    Ok((
        nix::sys::stat::major(rdev) as u32,
        nix::sys::stat::minor(rdev) as u32,
    ))
}

impl Wall {
    /// A wall that is off, saying why.
    pub fn off(reason: impl Into<String>) -> Self {
        Self {
            kind: Kind::Off(reason.into()),
            parent: String::new(),
            devices: BTreeMap::new(),
        }
    }

    /// Sets up the wall `isolation` asks for under the cgroup `parent` (e.g. `/lanes`), for
    /// cards whose device files are `device_files` (UUID → path). Proves it works by walling a
    /// probe cgroup. `Isolation::Cgroup` falls back to the mask alone, saying why; the explicit
    /// kinds fail instead.
    pub fn set_up(
        isolation: Isolation,
        parent: &str,
        device_files: &BTreeMap<String, PathBuf>,
    ) -> Result<Self, WallError> {
        let parent = format!("/{}", parent.trim_matches('/'));
        let mut devices = BTreeMap::new();
        for (uuid, path) in device_files {
            let number = device_number(path)
                .map_err(|e| WallError::Unavailable(format!("card {uuid}'s device file: {e}")))?;
            devices.insert(uuid.clone(), number);
        }
        let mounts = mountinfo();
        let tried = match isolation {
            Isolation::None => return Ok(Self::off("--isolation none")),
            _ if !nix::unistd::Uid::effective().is_root() => Err(WallError::Unavailable(
                "Lanes does not run as root, so it cannot make cgroups for jobs".into(),
            )),
            Isolation::CgroupV2 => Self::set_up_v2(&mounts, &parent),
            Isolation::CgroupV1 => Self::set_up_v1(&mounts, &parent),
            Isolation::Cgroup => {
                if unified_in(&mounts) {
                    Self::set_up_v2(&mounts, &parent)
                } else {
                    Self::set_up_v1(&mounts, &parent).or_else(|v1| {
                        Self::set_up_v2(&mounts, &parent).map_err(|v2| {
                            WallError::Unavailable(format!("{}; {}", v1.reason(), v2.reason()))
                        })
                    })
                }
            }
        };
        let ready = tried.and_then(|kind| {
            let wall = Self {
                kind,
                parent,
                devices,
            };
            wall.probe().map(|()| wall)
        });
        match ready {
            Err(e) if isolation == Isolation::Cgroup => Ok(Self::off(format!(
                "the cgroup device wall is not available here: {}",
                e.reason()
            ))),
            other => other,
        }
    }

    fn set_up_v2(mounts: &[Mount], parent: &str) -> Result<Kind, WallError> {
        let unavailable = |why: String| WallError::Unavailable(format!("cgroup v2: {why}"));
        let mount = mounts
            .iter()
            .find(|(_, t, _)| t == "cgroup2")
            .map(|(m, _, _)| m.clone())
            .ok_or_else(|| unavailable("no cgroup2 file system is mounted".into()))?;
        let dir = mount.join(parent.trim_start_matches('/'));
        make_dir(&dir).map_err(|e| unavailable(format!("cannot make {}: {e}", dir.display())))?;
        // Job cgroups get the memory controller when the parent's parent hands it down (on a
        // systemd host the root does); then peak memory is counted. Not having it is no error.
        let _ = write_file(&dir.join("cgroup.subtree_control"), "+memory");
        let memory = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
        Ok(Kind::V2 { mount, memory })
    }

    fn set_up_v1(mounts: &[Mount], parent: &str) -> Result<Kind, WallError> {
        let find = |controller: &str| {
            mounts
                .iter()
                .find(|(_, t, options)| {
                    t == "cgroup" && options.split(',').any(|o| o == controller)
                })
                .map(|(m, _, _)| m.clone())
        };
        let mut hierarchies = Vec::new();
        for controller in ["devices", "freezer", "cpuacct", "memory"] {
            let Some(mount) = find(controller) else {
                if controller == "devices" {
                    return Err(WallError::Unavailable(
                        "cgroup v1: the devices controller is not mounted".into(),
                    ));
                }
                continue;
            };
            // Two controllers may share a mount (cpu,cpuacct): one directory serves both.
            if hierarchies.iter().any(|(_, m)| *m == mount) {
                continue;
            }
            let dir = mount.join(parent.trim_start_matches('/'));
            match make_dir(&dir) {
                Ok(()) => hierarchies.push((controller, mount)),
                Err(e) if controller == "devices" => {
                    return Err(WallError::Unavailable(format!(
                        "cgroup v1: cannot make {}: {e}",
                        dir.display()
                    )))
                }
                Err(_) => {}
            }
        }
        Ok(Kind::V1 { hierarchies })
    }

    /// Walls a probe cgroup off one device, so that a wall that would fail is known at start,
    /// not at the first job.
    fn probe(&self) -> Result<(), WallError> {
        let probe = self.create_named(&format!("probe-{}", std::process::id()), &[(1, 3)])?;
        let removed = probe.remove();
        removed.map_err(|source| WallError::Create {
            path: probe.dirs[0].clone(),
            source,
        })
    }

    pub fn is_on(&self) -> bool {
        !matches!(self.kind, Kind::Off(_))
    }

    /// One line for the log, `lanes doctor` and job headers.
    /// The wall a run is behind, in words, with its cgroup when it has one (what a job
    /// records as its `device_wall`).
    pub fn describe_for(&self, cgroup: Option<&JobCgroup>) -> String {
        match cgroup {
            Some(c) => format!("{} (its cgroup: {})", self.describe(), c.path),
            None => self.describe(),
        }
    }

    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Off(why) => format!("off, device mask only ({why})"),
            Kind::V2 { memory, .. } => format!(
                "cgroup v2 with an eBPF device program, job cgroups under {}{}",
                self.parent,
                if *memory {
                    ""
                } else {
                    " (no memory controller there: peak memory is not counted)"
                }
            ),
            Kind::V1 { hierarchies } => format!(
                "cgroup v1 devices controller, job cgroups under {} ({})",
                self.parent,
                hierarchies
                    .iter()
                    .map(|(c, _)| *c)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The device numbers to refuse a job booked on `cards`: every other card of this node.
    pub fn refused_for(&self, cards: &[String]) -> Vec<(u32, u32)> {
        let allowed: Vec<(u32, u32)> = cards
            .iter()
            .filter_map(|c| self.devices.get(c).copied())
            .collect();
        let mut refused: Vec<(u32, u32)> = self
            .devices
            .values()
            .copied()
            .filter(|d| !allowed.contains(d))
            .collect();
        refused.sort_unstable();
        refused.dedup();
        refused
    }

    /// Makes the cgroup of job `id`, walled off every card of this node but `cards`: named
    /// `job-<id>-<random>`, so that a job id that comes back (a recreated database) or another
    /// server under the same parent never meets it. `None` when the wall is off.
    pub fn create(&self, id: i64, cards: &[String]) -> Result<Option<JobCgroup>, WallError> {
        self.create_labelled(&id.to_string(), cards)
    }

    /// As [`Wall::create`], for a run whose job id is not known yet (`lanes shell` joins its
    /// cgroup before its record exists): `job-<label>-<random>`.
    pub fn create_labelled(
        &self,
        label: &str,
        cards: &[String],
    ) -> Result<Option<JobCgroup>, WallError> {
        let id = label;
        if !self.is_on() {
            return Ok(None);
        }
        let suffix = super::random_hex(4).map_err(|source| WallError::Create {
            path: self.parent.clone().into(),
            source,
        })?;
        self.create_named(&format!("job-{id}-{suffix}"), &self.refused_for(cards))
            .map(Some)
    }

    fn create_named(&self, name: &str, refused: &[(u32, u32)]) -> Result<JobCgroup, WallError> {
        let path = format!("{}/{name}", self.parent);
        let cgroup = self.reopen(&path).ok_or_else(|| WallError::Create {
            path: path.clone().into(),
            source: std::io::Error::other("the wall is off"),
        })?;
        // A directory left by an earlier run with nothing in it goes; one with processes in it
        // is not ours to reuse.
        if cgroup.dirs[0].exists() {
            cgroup.remove().map_err(|source| WallError::Create {
                path: cgroup.dirs[0].clone(),
                source,
            })?;
        }
        for dir in &cgroup.dirs {
            std::fs::create_dir(dir).map_err(|source| WallError::Create {
                path: dir.clone(),
                source,
            })?;
        }
        let walled = match &self.kind {
            Kind::V2 { .. } => std::fs::File::open(&cgroup.dirs[0])
                .and_then(|dir| bpf::attach_filter(&dir, refused)),
            _ => refused.iter().try_for_each(|(major, minor)| {
                write_file(
                    &cgroup.dirs[0].join("devices.deny"),
                    &format!("c {major}:{minor} rwm"),
                )
            }),
        };
        if let Err(source) = walled {
            let _ = cgroup.remove();
            return Err(WallError::Devices {
                path: cgroup.dirs[0].clone(),
                source,
            });
        }
        Ok(cgroup)
    }

    /// The cgroup at `path` (as stored with a job), whether or not it exists; `None` when the
    /// wall is off.
    pub fn reopen(&self, path: &str) -> Option<JobCgroup> {
        let relative = path.trim_start_matches('/');
        let (dirs, version) = match &self.kind {
            Kind::Off(_) => return None,
            Kind::V2 { mount, .. } => (vec![mount.join(relative)], 2),
            Kind::V1 { hierarchies } => (
                hierarchies.iter().map(|(_, m)| m.join(relative)).collect(),
                1,
            ),
        };
        Some(JobCgroup {
            path: path.to_string(),
            dirs,
            version,
        })
    }

    /// The cgroup of process `pid` (in the hierarchy the wall uses), when it is one of the job
    /// cgroups under this wall's parent; read from `/proc/PID/cgroup`.
    pub fn cgroup_of(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        self.cgroup_in(&text)
    }

    fn cgroup_in(&self, proc_cgroup: &str) -> Option<String> {
        let path = proc_cgroup.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let ours = match &self.kind {
                Kind::V2 { .. } => controllers.is_empty(),
                Kind::V1 { .. } => controllers.split(',').any(|c| c == "devices"),
                Kind::Off(_) => false,
            };
            ours.then_some(path)
        })?;
        // A child of a job's cgroup (a Docker job's container) is the job's.
        let rest = path.strip_prefix(&self.parent)?.strip_prefix("/job-")?;
        let job = rest.split('/').next().unwrap_or(rest);
        Some(format!("{}/job-{job}", self.parent))
    }
}

impl JobCgroup {
    /// `cgroup.procs` of each directory, open for writing: the child writes "0" to each between
    /// fork and exec, which moves it into the cgroup (opened before the fork, so the child
    /// needs no allocation and no permission of its own).
    pub fn join_handles(&self) -> std::io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|d| {
                OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::libc::O_CLOEXEC)
                    .open(d.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect()
    }

    /// Moves process `pid` (all its threads) into the cgroup, in each hierarchy.
    pub fn admit(&self, pid: u32) -> std::io::Result<()> {
        for dir in &self.dirs {
            write_file(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Every process in the cgroup now, and in its children (on v2: Docker's client in its
    /// leaf, a Docker job's container in a child).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.dirs[0].clone()];
        while let Some(dir) = dirs.pop() {
            pids.extend(
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse::<u32>().ok()),
            );
            if self.version == 2 {
                dirs.extend(child_dirs(&dir));
            }
        }
        pids
    }

    /// A leaf below the job's cgroup for Docker's client (v2): the kernel lets a cgroup that
    /// holds processes have no children with controllers, so the client stays out of the
    /// job's own directory, where the container's cgroup goes. Still behind the wall (its
    /// device filter holds for every descendant), still the job's (killed, signalled and
    /// counted with it).
    pub fn client_leaf(&self) -> std::io::Result<JobCgroup> {
        if self.version != 2 {
            return Ok(self.clone());
        }
        let leaf = self.dirs[0].join("client");
        make_dir(&leaf)?;
        Ok(JobCgroup {
            path: format!("{}/client", self.path),
            dirs: vec![leaf],
            version: 2,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    /// Sends `signal` to every process in the cgroup (a job's SIGTERM reaches what left its
    /// process group too).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    }

    /// Kills everything in the cgroup at once: `cgroup.kill` on v2; elsewhere it freezes the
    /// cgroup (so nothing forks meanwhile), SIGKILLs every process and thaws it.
    pub fn kill(&self) {
        let dir = &self.dirs[0];
        if self.version == 2 && write_file(&dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        let (freeze, frozen, thaw, state) = if self.version == 2 {
            ("cgroup.freeze", "1", "0", "cgroup.freeze")
        } else {
            ("freezer.state", "FROZEN", "THAWED", "freezer.state")
        };
        let freezer = self.dirs.iter().find(|d| d.join(freeze).exists()).cloned();
        if let Some(f) = &freezer {
            let _ = write_file(&f.join(freeze), frozen);
            for _ in 0..50 {
                let now = std::fs::read_to_string(f.join(state)).unwrap_or_default();
                if now.trim() == frozen || now.contains("frozen 1") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.signal(nix::sys::signal::Signal::SIGKILL);
        if let Some(f) = &freezer {
            let _ = write_file(&f.join(freeze), thaw);
        }
    }

    /// CPU time and peak memory so far.
    pub fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        for dir in &self.dirs {
            if let Ok(stat) = std::fs::read_to_string(dir.join("cpu.stat")) {
                if let Some(us) = stat.lines().find_map(|l| l.strip_prefix("usage_usec ")) {
                    usage.cpu_seconds = us.trim().parse::<f64>().ok().map(|us| us / 1e6);
                }
            }
            if let Ok(ns) = std::fs::read_to_string(dir.join("cpuacct.usage")) {
                usage.cpu_seconds = ns.trim().parse::<f64>().ok().map(|ns| ns / 1e9);
            }
            for file in ["memory.peak", "memory.max_usage_in_bytes"] {
                if let Ok(bytes) = std::fs::read_to_string(dir.join(file)) {
                    usage.peak_memory_bytes = bytes.trim().parse().ok();
                }
            }
        }
        usage
    }

    /// Removes the cgroup's directories (once it is empty; the kernel refuses before).
    pub fn remove(&self) -> std::io::Result<()> {
        let mut result = Ok(());
        if self.version == 2 {
            // Children first, deepest first (Docker's client leaf, a container's).
            let mut found = Vec::new();
            let mut dirs = child_dirs(&self.dirs[0]);
            while let Some(dir) = dirs.pop() {
                dirs.extend(child_dirs(&dir));
                found.push(dir);
            }
            for dir in found.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        for dir in &self.dirs {
            match std::fs::remove_dir(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => result = Err(e),
                _ => {}
            }
        }
        result
    }

    /// Whether any of its directories is still there.
    pub fn exists(&self) -> bool {
        self.dirs.iter().any(|d| d.exists())
    }
}

/// Moves the calling process into each cgroup whose `cgroup.procs` is open as `handles`. For
/// the child between fork and exec: one `write` system call per handle, nothing allocated.
pub fn join(handles: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    for &fd in handles {
        // SAFETY: a write of one byte from a static buffer to a descriptor we hold.
        if unsafe { nix::libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(kind: Kind) -> Wall {
        Wall {
            kind,
            parent: "/lanes".into(),
            devices: BTreeMap::from([
                ("GPU-a".to_string(), (195, 0)),
                ("GPU-b".to_string(), (195, 1)),
                ("GPU-c".to_string(), (195, 2)),
            ]),
        }
    }

    #[test]
    fn a_job_is_refused_every_card_of_its_node_but_its_own() {
        let w = wall(Kind::V2 {
            mount: "/sys/fs/cgroup".into(),
            memory: true,
        });
        assert_eq!(w.refused_for(&["GPU-b".into()]), vec![(195, 0), (195, 2)]);
        assert_eq!(
            w.refused_for(&["GPU-a".into(), "GPU-b".into(), "GPU-c".into()]),
            vec![]
        );
    }

    #[test]
    fn a_process_cgroup_is_read_from_the_hierarchy_the_wall_uses_and_only_under_its_parent() {
        let v2 = wall(Kind::V2 {
            mount: "/sys/fs/cgroup".into(),
            memory: true,
        });
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            v2.cgroup_in("0::/lanes/job-12-ab\n"),
            some("/lanes/job-12-ab")
        );
        assert_eq!(v2.cgroup_in("0::/other/job-12-ab\n"), None);
        assert_eq!(v2.cgroup_in("0::/lanesx/job-12-ab\n"), None);
        assert_eq!(v2.cgroup_in("0::/lanes/probe-1\n"), None);
        assert_eq!(
            v2.cgroup_in("0::/lanes/job-12-ab/0123abcd\n"),
            some("/lanes/job-12-ab")
        );
        let v1 = wall(Kind::V1 {
            hierarchies: vec![("devices", "/sys/fs/cgroup/devices".into())],
        });
        let text = "5:devices:/lanes/job-7-cd\n4:memory:/lanes/job-9-ef\n0::/\n";
        assert_eq!(v1.cgroup_in(text), some("/lanes/job-7-cd"));
        assert_eq!(Wall::off("x").cgroup_in(text), None);
    }
}
