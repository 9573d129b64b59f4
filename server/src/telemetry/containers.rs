//! Which container a process on a card runs in, and whose it is.
//!
//! A process in a container shows up on the host as its runtime's root (rootful Docker), an
//! unknown subordinate uid (rootless Podman with a user inside), or its member's uid. NVML gives
//! only its host pid; this reads the rest from the host:
//!
//! 1. the container: its cgroup (`docker-<id>.scope`, `/docker/<id>`, `libpod-<id>`,
//!    `cri-containerd-<id>`, `crio-<id>`), else the runtime's monitor among its ancestors
//!    (`conmon -c <id> -n <name>`, `containerd-shim -id <id> -namespace moby`), else
//!    Apptainer's variables in its environment;
//! 2. its name and image: Podman's `containers.json` beside the container's bundle, Docker's
//!    `config.v2.json`, Apptainer's image path;
//! 3. its person: the owner of its user namespace (a rootless runtime's user), else the user
//!    its monitor runs as (rootless Podman's conmon), else the member Lanes' label names (a
//!    Docker job Lanes started), else the process's own uid for Apptainer (no daemon, no
//!    namespace of another's). A container nobody can be tied to has no owner: it is never
//!    taken for root's.
//!
//! Results are kept per process (pid and start time), so a poll reads /proc once per new
//! process, not once per reading.

use lanes_types::container::ContainerRef;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Whose a container is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    Uid(u32),
    /// A Lanes member named by the container's label (Docker jobs).
    Member(String),
    Unknown,
}

/// A process's container and its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InContainer {
    pub container: ContainerRef,
    pub owner: Owner,
}

/// How far up the process tree the runtime's monitor is looked for.
const MAX_ANCESTORS: usize = 24;
/// Most processes remembered; then the memory starts over.
const MAX_REMEMBERED: usize = 8192;

pub struct ContainerReader {
    proc_root: PathBuf,
    docker_root: PathBuf,
    /// (pid, start ticks) → what was found (None: not in a container).
    seen: HashMap<(u32, u64), Option<InContainer>>,
    /// Container id → name, image and labels from the runtime's files.
    meta: HashMap<String, Meta>,
    init_userns: Option<PathBuf>,
}

#[derive(Clone, Debug, Default)]
struct Meta {
    name: Option<String>,
    image: Option<String>,
    lanes_user: Option<String>,
}

impl Default for ContainerReader {
    fn default() -> Self {
        Self::new("/proc", "/var/lib/docker")
    }
}

/// A container id: 64 hex digits.
fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The runtime and container id a cgroup path names, if it names one.
pub fn cgroup_container(proc_cgroup: &str) -> Option<(&'static str, String)> {
    for line in proc_cgroup.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        for part in path.split('/').rev() {
            let part = part.trim_end_matches(".scope");
            let found = [
                ("docker-", "docker"),
                ("libpod-conmon-", "podman"),
                ("libpod-", "podman"),
                ("cri-containerd-", "containerd"),
                ("crio-conmon-", "cri-o"),
                ("crio-", "cri-o"),
            ]
            .iter()
            .find_map(|(prefix, runtime)| {
                part.strip_prefix(prefix)
                    .filter(|id| is_id(id))
                    .map(|id| (*runtime, id.to_string()))
            });
            if found.is_some() {
                return found;
            }
            // A bare id: Docker's cgroupfs driver (`/docker/<id>`, or `<--cgroup-parent>/<id>`
            // for a Docker job under its job's cgroup), or a Kubernetes pod's.
            if is_id(part) {
                let runtime = if path.contains("kubepods") {
                    "containerd"
                } else {
                    "docker"
                };
                return Some((runtime, part.to_string()));
            }
        }
    }
    None
}

/// What a runtime monitor's command line says: container id, name, and (Podman) its bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MonitorArgs {
    pub runtime: &'static str,
    pub id: Option<String>,
    pub name: Option<String>,
    pub bundle: Option<PathBuf>,
}

/// Reads a monitor's argv: `conmon ... -c ID -n NAME -b BUNDLE` (Podman, CRI-O) or
/// `containerd-shim-runc-v2 -namespace moby -id ID` (Docker, containerd).
pub fn monitor_args(comm: &str, argv: &[String]) -> Option<MonitorArgs> {
    let value = |flags: &[&str]| {
        argv.windows(2)
            .find(|w| flags.contains(&w[0].as_str()))
            .map(|w| w[1].clone())
            .or_else(|| {
                argv.iter().find_map(|a| {
                    flags
                        .iter()
                        .find_map(|f| a.strip_prefix(&format!("{f}=")).map(String::from))
                })
            })
    };
    if comm == "conmon" {
        let crio = argv.iter().any(|a| a.contains("crio"));
        return Some(MonitorArgs {
            runtime: if crio { "cri-o" } else { "podman" },
            id: value(&["-c", "--cid"]),
            name: value(&["-n", "--name"]),
            bundle: value(&["-b", "--bundle"]).map(PathBuf::from),
        });
    }
    if comm.starts_with("containerd-shim") {
        let namespace = value(&["-namespace", "--namespace"]);
        return Some(MonitorArgs {
            runtime: if namespace.as_deref() == Some("moby") {
                "docker"
            } else {
                "containerd"
            },
            id: value(&["-id", "--id"]),
            name: None,
            bundle: None,
        });
    }
    None
}

/// The real uid of a `status` file (its `Uid:` line: real, effective, saved, fs). Read here
/// rather than through `procinfo`, which reads containers through this module.
fn uid_in(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The parent pid from /proc/PID/stat.
fn parent_in(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The uid that created the user namespace `fd` is (`NS_GET_OWNER_UID`).
fn userns_owner(ns: &Path) -> Option<u32> {
    use std::os::fd::AsRawFd;
    const NS_GET_OWNER_UID: nix::libc::c_ulong = 0xb704;
    let file = std::fs::File::open(ns).ok()?;
    let mut uid: nix::libc::uid_t = 0;
    // SAFETY: the ioctl writes one uid_t into `uid`, which lives across the call.
    let done = unsafe { nix::libc::ioctl(file.as_raw_fd(), NS_GET_OWNER_UID as _, &mut uid) };
    (done == 0).then_some(uid)
}

impl ContainerReader {
    pub fn new(proc_root: impl Into<PathBuf>, docker_root: impl Into<PathBuf>) -> Self {
        let proc_root = proc_root.into();
        let init_userns = std::fs::read_link(proc_root.join("1/ns/user")).ok();
        Self {
            proc_root,
            docker_root: docker_root.into(),
            seen: HashMap::new(),
            meta: HashMap::new(),
            init_userns,
        }
    }

    fn read(&self, pid: u32, file: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(pid.to_string()).join(file)).ok()
    }

    fn argv(&self, pid: u32) -> Vec<String> {
        std::fs::read(self.proc_root.join(pid.to_string()).join("cmdline"))
            .map(|bytes| {
                bytes
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The container process `pid` (started at `start_ticks`) runs in, and whose it is.
    pub fn of(&mut self, pid: u32, start_ticks: u64) -> Option<InContainer> {
        if let Some(known) = self.seen.get(&(pid, start_ticks)) {
            return known.clone();
        }
        let found = self.look(pid);
        if self.seen.len() >= MAX_REMEMBERED {
            self.seen.clear();
        }
        self.seen.insert((pid, start_ticks), found.clone());
        found
    }

    fn look(&mut self, pid: u32) -> Option<InContainer> {
        let by_cgroup = self.read(pid, "cgroup").and_then(|c| {
            cgroup_container(&c).map(|(runtime, id)| MonitorArgs {
                runtime,
                id: Some(id),
                ..Default::default()
            })
        });
        // The runtime's monitor among its ancestors: the container's id and name (and for a
        // rootless runtime, its user).
        let mut monitor: Option<(MonitorArgs, Option<u32>)> = None;
        let mut at = self.read(pid, "stat").and_then(|s| parent_in(&s));
        for _ in 0..MAX_ANCESTORS {
            let Some(parent) = at.filter(|p| *p > 1) else {
                break;
            };
            let comm = self.read(parent, "comm").unwrap_or_default();
            if let Some(args) = monitor_args(comm.trim_end(), &self.argv(parent)) {
                let uid = self.read(parent, "status").and_then(|s| uid_in(&s));
                monitor = Some((args, uid));
                break;
            }
            at = self.read(parent, "stat").and_then(|s| parent_in(&s));
        }
        let environ = std::fs::read(self.proc_root.join(pid.to_string()).join("environ")).ok();
        let apptainer = environ.as_deref().and_then(|env| {
            env.split(|b| *b == 0).find_map(|entry| {
                let entry = String::from_utf8_lossy(entry);
                ["APPTAINER_CONTAINER=", "SINGULARITY_CONTAINER="]
                    .iter()
                    .find_map(|p| entry.strip_prefix(p).map(String::from))
            })
        });
        let process_uid = self.read(pid, "status").and_then(|s| uid_in(&s));
        let (args, monitor_uid) = match (by_cgroup, monitor) {
            (Some(mut by_cgroup), Some((args, uid))) => {
                if args.id == by_cgroup.id {
                    by_cgroup.name = args.name;
                    by_cgroup.bundle = args.bundle;
                }
                (by_cgroup, uid)
            }
            (Some(by_cgroup), None) => (by_cgroup, None),
            (None, Some((args, uid))) => (args, uid),
            (None, None) => {
                let image = apptainer?;
                return Some(InContainer {
                    container: ContainerRef {
                        runtime: "apptainer".into(),
                        id: None,
                        name: Path::new(&image)
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned()),
                        image: Some(image),
                    },
                    // No daemon and no namespace of another's: the process's own user.
                    owner: process_uid.map_or(Owner::Unknown, Owner::Uid),
                });
            }
        };
        let meta = args
            .id
            .as_ref()
            .map(|id| self.meta_of(args.runtime, id, args.bundle.as_deref()))
            .unwrap_or_default();
        let userns = self.proc_root.join(pid.to_string()).join("ns/user");
        let own_namespace = std::fs::read_link(&userns)
            .ok()
            .is_some_and(|ns| Some(&ns) != self.init_userns.as_ref());
        let namespace_owner = own_namespace
            .then(|| userns_owner(&userns))
            .flatten()
            .filter(|uid| *uid != 0);
        let owner = match (
            namespace_owner,
            monitor_uid.filter(|u| *u != 0),
            &meta.lanes_user,
        ) {
            (Some(uid), _, _) | (None, Some(uid), _) => Owner::Uid(uid),
            (None, None, Some(member)) => Owner::Member(member.clone()),
            _ => Owner::Unknown,
        };
        Some(InContainer {
            container: ContainerRef {
                runtime: args.runtime.into(),
                id: args.id.as_ref().map(|id| id.chars().take(12).collect()),
                name: args.name.or(meta.name),
                image: meta.image,
            },
            owner,
        })
    }

    fn meta_of(&mut self, runtime: &str, id: &str, bundle: Option<&Path>) -> Meta {
        if let Some(meta) = self.meta.get(id) {
            return meta.clone();
        }
        let meta = match runtime {
            "docker" => docker_meta(
                &self
                    .docker_root
                    .join("containers")
                    .join(id)
                    .join("config.v2.json"),
            ),
            _ => bundle
                .and_then(|b| b.parent()?.parent().map(|d| d.join("containers.json")))
                .map(|file| podman_meta(&file, id))
                .unwrap_or_default(),
        };
        if self.meta.len() >= MAX_REMEMBERED {
            self.meta.clear();
        }
        self.meta.insert(id.to_string(), meta.clone());
        meta
    }
}

/// Name and image of container `id` in a Podman (containers/storage) `containers.json`.
fn podman_meta(file: &Path, id: &str) -> Meta {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Meta::default();
    };
    let Ok(list) = serde_json::from_str::<Vec<serde_json::Value>>(&text) else {
        return Meta::default();
    };
    let Some(entry) = list.iter().find(|c| c["id"] == id) else {
        return Meta::default();
    };
    let metadata: serde_json::Value = entry["metadata"]
        .as_str()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    Meta {
        name: entry["names"][0].as_str().map(String::from),
        image: metadata["image-name"].as_str().map(String::from),
        lanes_user: None,
    }
}

/// Name, image and Lanes' member label of a Docker container's `config.v2.json`.
fn docker_meta(file: &Path) -> Meta {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Meta::default();
    };
    let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Meta::default();
    };
    Meta {
        name: config["Name"]
            .as_str()
            .map(|n| n.trim_start_matches('/').to_string()),
        image: config["Config"]["Image"].as_str().map(String::from),
        lanes_user: config["Config"]["Labels"]["lanes.user"]
            .as_str()
            .map(String::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "ae56bf346ef710fbfa2ea204661fb59cfaa71e7c63014e8984d54b5ce52da490";

    #[test]
    fn cgroups_name_the_containers_of_every_runtime() {
        for (text, runtime) in [
            (format!("0::/system.slice/docker-{ID}.scope\n"), "docker"),
            (format!("12:devices:/docker/{ID}\n"), "docker"),
            (format!("0::/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-{ID}.scope/container\n"), "podman"),
            (format!("0::/machine.slice/libpod-{ID}.scope\n"), "podman"),
            (format!("0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-{ID}.scope\n"), "containerd"),
            (format!("0::/kubepods/burstable/pod1/{ID}\n"), "containerd"),
            (format!("0::/system.slice/crio-{ID}.scope\n"), "cri-o"),
            (format!("0::/lanes/job-12-ab/{ID}\n"), "docker"),
        ] {
            assert_eq!(cgroup_container(&text), Some((runtime, ID.to_string())), "{text}");
        }
        for plain in [
            "0::/user.slice/user-1001.slice/session-3.scope\n",
            "5:devices:/lanes/job-7-cd\n0::/\n",
        ] {
            assert_eq!(cgroup_container(plain), None, "{plain}");
        }
    }

    #[test]
    fn monitors_say_the_container_id_and_name() {
        let argv: Vec<String> = [
            "/usr/bin/conmon",
            "--api-version",
            "1",
            "-c",
            ID,
            "-u",
            ID,
            "-r",
            "/usr/bin/runc",
            "-b",
            "/home/ada/.local/share/containers/storage/vfs-containers/x/userdata",
            "-n",
            "train",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let args = monitor_args("conmon", &argv).unwrap();
        assert_eq!(args.runtime, "podman");
        assert_eq!(args.id.as_deref(), Some(ID));
        assert_eq!(args.name.as_deref(), Some("train"));
        let shim: Vec<String> = [
            "/usr/bin/containerd-shim-runc-v2",
            "-namespace",
            "moby",
            "-id",
            ID,
            "-address",
            "/run/containerd/containerd.sock",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let args = monitor_args("containerd-shim", &shim).unwrap();
        assert_eq!((args.runtime, args.id.as_deref()), ("docker", Some(ID)));
        assert_eq!(monitor_args("bash", &[]), None);
    }

    #[test]
    fn names_and_images_come_from_the_runtimes_own_files() {
        let dir = std::env::temp_dir().join(format!("lanes-ctr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let podman = dir.join("containers.json");
        std::fs::write(
            &podman,
            format!(r#"[{{"id":"{ID}","names":["train"],"metadata":"{{\"image-name\":\"localhost/train:1\",\"name\":\"train\"}}"}}]"#),
        )
        .unwrap();
        let meta = podman_meta(&podman, ID);
        assert_eq!(meta.name.as_deref(), Some("train"));
        assert_eq!(meta.image.as_deref(), Some("localhost/train:1"));
        let docker = dir.join("config.v2.json");
        std::fs::write(
            &docker,
            r#"{"Name":"/lanes-job-3-ab","Config":{"Image":"pytorch/pytorch:2.5.1","Labels":{"lanes.user":"ada"}}}"#,
        )
        .unwrap();
        let meta = docker_meta(&docker);
        assert_eq!(meta.name.as_deref(), Some("lanes-job-3-ab"));
        assert_eq!(meta.lanes_user.as_deref(), Some("ada"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_plain_process_is_in_no_container() {
        let mut reader = ContainerReader::default();
        let me = std::process::id();
        assert_eq!(reader.of(me, 1), None);
    }
}
