//! Jobs in containers: what this node offers (runtimes, CDI specs, device files) and the one
//! command line that runs a job's image as its member, on exactly its booked cards, inside the
//! job's cgroup.
//!
//! - **Podman** (the default) runs rootless as the member: their own image store and subuid
//!   range, `--userns=keep-id` (the process is the member's uid inside and out), no cgroup of
//!   its own (`--cgroups=disabled`, or runc on a hybrid cgroup v1 host, where rootless runc
//!   makes none), so conmon and the container stay in the job's cgroup behind its device wall.
//! - **Apptainer** runs a `.sif` file as the member, in the job's cgroup (it has no daemon).
//! - **Docker** only where the admin enables it: its daemon is root, so the client runs as the
//!   server with a command line Lanes alone builds (`--user UID:GID`, every capability dropped,
//!   no new privileges, the container in a child of the job's cgroup, Lanes' labels), in a
//!   fixed clean environment of Lanes' own: none of the member's variables reaches the root
//!   client (`PATH`, `DOCKER_HOST`, `LD_PRELOAD` would make it run the member's code as root).
//!   The container's variables go to it as data, in a root-owned 0600 `--env-file` in the
//!   run's own directory; volumes and the working directory are handed to the daemon by the
//!   link-free path whose owner was checked, never by the path the member wrote.
//!
//! Cards: CDI names (`nvidia.com/gpu=<UUID>`) where a CDI spec names every booked card, else
//! the booked cards' device files and the driver's control files. For Podman and Apptainer
//! (which run as the member) the variables reach the container by name (`--env NAME`), their
//! values through the runtime's own environment, which only its owner can read, never on a
//! command line everyone's `ps` shows.

use super::launch::Identity;
use lanes_types::container::{
    ContainerFailure, ContainerOption, ContainerRuntime, ContainerSpec, Volume,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where runtimes are looked for (the server's, not a member's, `PATH`).
const SEARCH_PATH: [&str; 5] = [
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
];

/// The driver's files every CUDA process opens besides its cards.
const CONTROL_FILES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// The driver's user-space libraries a CUDA process loads, by soname (a prefix for those
/// named after the driver's version).
const DRIVER_LIBRARIES: [&str; 6] = [
    "libcuda.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    "libcudadebugger.so.1",
    "libnvidia-gpucomp.so.",
];

/// Where the driver's libraries go in a container without CDI: the directory NVIDIA's CUDA
/// images (and PyTorch's, built on them) already have on their `LD_LIBRARY_PATH`.
pub const DRIVER_LIBRARY_DIR: &str = "/usr/local/nvidia/lib64";

/// The driver's libraries in `ldconfig -p`'s listing (the 64-bit ones), by soname.
pub fn driver_libraries(ldconfig: &str) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for line in ldconfig.lines() {
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let mut words = left.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let wanted = DRIVER_LIBRARIES.iter().any(|w| {
            if w.ends_with('.') {
                name.starts_with(w)
            } else {
                name == *w
            }
        });
        if wanted && kind.contains("x86-64") && !found.iter().any(|(n, _)| n == name) {
            found.push((name.to_string(), PathBuf::from(path.trim())));
        }
    }
    found
}

/// Where CDI specs live (the CDI specification's default directories).
pub const CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// What the admin decided about containers on this node.
#[derive(Clone, Debug, Default)]
pub struct ContainerPolicy {
    /// Docker jobs are allowed (its daemon runs as root).
    pub docker: bool,
    /// Docker jobs may share the host's network and IPC namespaces.
    pub docker_host_namespaces: bool,
    /// Directories any member may mount (shared data sets), besides their own.
    pub shared_dirs: Vec<PathBuf>,
}

/// What this node offers for containers.
#[derive(Clone, Debug, Default)]
pub struct ContainerHost {
    pub node: String,
    pub policy: ContainerPolicy,
    /// Runtimes found, with their program.
    runtimes: BTreeMap<ContainerRuntime, PathBuf>,
    /// Card UUID → device file.
    device_files: BTreeMap<String, PathBuf>,
    control_files: Vec<PathBuf>,
    /// Device names of kind `nvidia.com/gpu` in the host's CDI specs.
    cdi: BTreeSet<String>,
    /// The driver's libraries (soname, file), mounted where no CDI spec does it.
    driver_libraries: Vec<(String, PathBuf)>,
    /// Podman's global options on this host (`--runtime runc` on hybrid cgroup v1, where crun
    /// refuses to run).
    podman_globals: Vec<String>,
    /// Whether rootless containers get `--cgroups=disabled` (they stay in the caller's cgroup).
    podman_no_cgroups: bool,
    /// The host has cgroup v1 hierarchies (v1 alone, or hybrid).
    cgroup_v1: bool,
    /// `/etc/subuid` (a test's own elsewhere).
    subuid_file: PathBuf,
}

/// The host side of what Podman and Docker mount, and where Docker reads the variables.
struct Mounts {
    /// The working directory's host path (mounted at the job's own `cwd`).
    cwd: String,
    volumes: Vec<Volume>,
    env_file: Option<PathBuf>,
}

/// A job's container command, ready to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub runtime: ContainerRuntime,
    pub argv: Vec<String>,
    /// Where the runtime takes the container's variables from its own environment by a prefix
    /// (Apptainer's `--cleanenv` passes only `APPTAINERENV_NAME`), rather than by `--env NAME`.
    pub env_prefix: Option<&'static str>,
    /// The client runs as the server (Docker's), not as the member.
    pub as_server: bool,
    /// The container's name in its runtime.
    pub name: Option<String>,
    /// How the cards reach it, for the job's log header.
    pub cards: String,
    /// Where the container's variables must be written (`--env-file`, Docker's) before the
    /// client starts, instead of reaching it through the client's own environment.
    pub env_file: Option<PathBuf>,
}

/// What a job's container is made of.
pub struct ContainerJob<'a> {
    pub spec: &'a ContainerSpec,
    pub job_id: i64,
    /// Unique for this job (its log directory's name): the container's name.
    pub tag: &'a str,
    pub username: &'a str,
    pub identity: &'a Identity,
    pub cards: &'a [String],
    /// The command, after the image: the runtimes read nothing after it as their options.
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// Names of the variables the container gets (the job's own and Lanes').
    pub env_names: Vec<String>,
    /// The job's cgroup (Docker's container goes in a child of it).
    pub cgroup: Option<&'a str>,
    /// The run's own directory (the server's alone), where Docker's `--env-file` is written.
    pub run_dir: &'a Path,
    /// The directory of its notice file, mounted read-only where it is on the host, so
    /// `LANES_NOTICE_FILE` names the same file inside.
    pub notice_dir: Option<String>,
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|name| {
        SEARCH_PATH
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| is_executable(p))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `nvidia.com/gpu` device names CDI specs in `dirs` declare (JSON or YAML, as
/// `nvidia-ctk cdi generate` writes them).
pub fn cdi_gpu_names(dirs: &[&str]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                names.extend(cdi_names_in(&text));
            }
        }
    }
    names
}

/// Device names of a spec of kind `nvidia.com/gpu`. JSON is read as JSON; YAML by its lines:
/// `kind:` at the top, then each `- name:` of the `devices:` list (the only form the spec and
/// its generators use).
pub fn cdi_names_in(text: &str) -> Vec<String> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
        if json["kind"] != "nvidia.com/gpu" {
            return Vec::new();
        }
        return json["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str().map(String::from))
            .collect();
    }
    let unquote = |v: &str| v.trim().trim_matches(['"', '\'']).to_string();
    let kind = text
        .lines()
        .find_map(|l| l.strip_prefix("kind:"))
        .map(unquote);
    if kind.as_deref() != Some("nvidia.com/gpu") {
        return Vec::new();
    }
    let mut in_devices = false;
    let mut names = Vec::new();
    for line in text.lines() {
        if !line.starts_with([' ', '-']) && !line.is_empty() {
            in_devices = line.starts_with("devices:");
            continue;
        }
        if in_devices {
            if let Some(name) = line.trim_start().strip_prefix("- name:") {
                names.push(unquote(name));
            }
        }
    }
    names
}

/// Whether `user` (or their uid) has a range in a subordinate id file's text.
pub fn has_subordinate_range(text: &str, user: &str, uid: u32) -> bool {
    text.lines().any(|line| {
        let mut fields = line.split(':');
        let owner = fields.next().unwrap_or("");
        let count: u64 = fields
            .nth(1)
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0);
        (owner == user || owner == uid.to_string()) && count > 0
    })
}

/// Where a Docker job's `--env-file` is, in its run's directory (the server's alone).
pub fn env_file_of(run_dir: &Path) -> PathBuf {
    run_dir.join("container.env")
}

/// Docker's `--env-file` for `vars`: one `NAME=value` a line, read by the client literally
/// (no quotes, no expansion). A value with a line break cannot be written so, and is refused.
pub fn env_file_text(vars: &[(String, String)]) -> Result<String, ContainerFailure> {
    let mut text = String::new();
    for (name, value) in vars {
        if value.contains(['\n', '\r']) || name.contains(['\n', '\r', '=']) {
            return Err(ContainerFailure::Runtime {
                runtime: ContainerRuntime::Docker,
                said: format!(
                    "the variable {name} holds a line break, which Docker's --env-file cannot \
                     carry; pass it through a file in a volume instead"
                ),
            });
        }
        text.push_str(name);
        text.push('=');
        text.push_str(value);
        text.push('\n');
    }
    Ok(text)
}

/// Writes Docker's `--env-file` at `path`: a new file (never one someone placed, never through
/// a link), readable by the server alone, which runs the client.
pub fn write_env_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    file.write_all(text.as_bytes())
}

impl Planned {
    /// What the runtime's own process gets besides `vars`, so that they reach the container.
    pub fn passed(&self, vars: &[(String, String)]) -> Vec<(String, String)> {
        match self.env_prefix {
            Some(prefix) => vars
                .iter()
                .map(|(name, value)| (format!("{prefix}{name}"), value.clone()))
                .collect(),
            None => Vec::new(),
        }
    }
}

impl ContainerHost {
    /// Looks at this host: runtimes, CDI specs, the driver's control files, and whether
    /// Podman must use runc (cgroup v1 hybrid hosts, where crun refuses).
    pub fn discover(
        node: &str,
        policy: ContainerPolicy,
        device_files: &BTreeMap<String, PathBuf>,
    ) -> Self {
        let cgroup_v1 = !super::wall::unified_hierarchy();
        let mut runtimes = BTreeMap::new();
        if let Some(p) = find_program(&["podman"]) {
            runtimes.insert(ContainerRuntime::Podman, p);
        }
        if let Some(p) = find_program(&["apptainer", "singularity"]) {
            runtimes.insert(ContainerRuntime::Apptainer, p);
        }
        if let Some(p) = find_program(&["docker"]) {
            runtimes.insert(ContainerRuntime::Docker, p);
        }
        let runc = find_program(&["runc"]);
        let (podman_globals, podman_no_cgroups) = match (cgroup_v1, runc) {
            // Rootless runc on cgroup v1 makes no cgroup: the container stays in the job's.
            (true, Some(runc)) => (
                vec![
                    "--runtime".into(),
                    runc.to_string_lossy().into_owned(),
                    "--cgroup-manager=cgroupfs".into(),
                ],
                false,
            ),
            _ => (vec!["--cgroup-manager=cgroupfs".into()], true),
        };
        let control_files: Vec<PathBuf> = CONTROL_FILES
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        // Only where a driver is installed (its control file is there).
        let driver_libraries = if control_files.is_empty() {
            Vec::new()
        } else {
            find_program(&["ldconfig"])
                .and_then(|ldconfig| std::process::Command::new(ldconfig).arg("-p").output().ok())
                .map(|o| driver_libraries(&String::from_utf8_lossy(&o.stdout)))
                .unwrap_or_default()
        };
        Self {
            node: node.into(),
            policy,
            runtimes,
            driver_libraries,
            device_files: device_files.clone(),
            control_files,
            cdi: cdi_gpu_names(&CDI_DIRS),
            podman_globals,
            podman_no_cgroups,
            cgroup_v1,
            subuid_file: "/etc/subuid".into(),
        }
    }

    /// The runtimes found, with their programs.
    pub fn runtimes(&self) -> &BTreeMap<ContainerRuntime, PathBuf> {
        &self.runtimes
    }

    /// The CDI device names found.
    pub fn cdi(&self) -> &BTreeSet<String> {
        &self.cdi
    }

    /// Podman's global options here (also for `podman rm` at the end).
    pub fn podman_globals(&self) -> &[String] {
        &self.podman_globals
    }

    /// Whether `user` may run rootless Podman here (a subuid range in `/etc/subuid`).
    pub fn subuid_ready(&self, user: &str, uid: u32) -> bool {
        std::fs::read_to_string(&self.subuid_file)
            .is_ok_and(|text| has_subordinate_range(&text, user, uid))
    }

    /// Checks a volume's host directory as the server sees it: it must exist, and be the
    /// member's own (under their home, or owned by them) or one the admin shares. Links are
    /// followed first, so a link in the member's home to another's is another's. Returns the
    /// link-free path that was checked: what a root daemon must be handed, so that a link the
    /// member places or retargets afterwards is never what it mounts.
    fn check_volume(
        &self,
        volume: &Volume,
        identity: &Identity,
    ) -> Result<PathBuf, ContainerFailure> {
        let refuse = |why: String| ContainerFailure::Volume {
            volume: format!("{}:{}", volume.host, volume.container),
            why,
        };
        let real = std::fs::canonicalize(&volume.host)
            .map_err(|e| refuse(format!("{} cannot be read: {}", volume.host, e.kind())))?;
        let home = std::fs::canonicalize(identity.home()).ok();
        let own_home = home
            .as_ref()
            .is_some_and(|h| h != Path::new("/") && real.starts_with(h));
        let owned = match identity {
            Identity::Account { uid, .. } => {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&real).is_ok_and(|m| m.uid() == *uid)
            }
            Identity::SingleUser { .. } => true,
        };
        let shared = self
            .policy
            .shared_dirs
            .iter()
            .any(|d| std::fs::canonicalize(d).is_ok_and(|d| real.starts_with(d)));
        let mountable = real
            .to_str()
            .is_some_and(|r| !r.chars().any(|c| c == ':' || c == ',' || c.is_control()));
        if !mountable {
            return Err(refuse(format!(
                "{} holds a character a mount cannot take (: or ,)",
                real.display()
            )));
        }
        if own_home || owned || shared {
            Ok(real)
        } else {
            Err(refuse(format!(
                "{} is not {}'s (not in their home, not theirs, not a directory the admin \
                 shares)",
                real.display(),
                identity.name()
            )))
        }
    }

    /// How the booked cards reach the container: CDI names where a spec names every card,
    /// else their device files and the driver's control files.
    fn card_devices(&self, runtime: ContainerRuntime, cards: &[String]) -> (Vec<String>, String) {
        let (devices, said) = self.card_files(runtime, cards);
        let cdi = devices.iter().any(|d| d.starts_with("nvidia.com/"));
        if cdi || self.driver_libraries.is_empty() || runtime == ContainerRuntime::Apptainer {
            return (devices, said);
        }
        let said = format!(
            "{said}; the driver's libraries in {DRIVER_LIBRARY_DIR} ({})",
            self.driver_libraries
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        (devices, said)
    }

    /// The driver's libraries as read-only mounts, where no CDI spec gives them.
    fn driver_mounts(&self, devices: &[String]) -> Vec<String> {
        if devices.iter().any(|d| d.starts_with("nvidia.com/")) {
            return Vec::new();
        }
        self.driver_libraries
            .iter()
            .map(|(name, file)| {
                let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
                format!("--volume={}:{DRIVER_LIBRARY_DIR}/{name}:ro", real.display())
            })
            .collect()
    }

    fn card_files(&self, runtime: ContainerRuntime, cards: &[String]) -> (Vec<String>, String) {
        let cdi = runtime != ContainerRuntime::Apptainer
            && !cards.is_empty()
            && cards.iter().all(|c| self.cdi.contains(c));
        if cdi {
            let names: Vec<String> = cards
                .iter()
                .map(|c| format!("nvidia.com/gpu={c}"))
                .collect();
            let said = format!("CDI {}", names.join(", "));
            return (names, said);
        }
        let mut files: Vec<String> = cards
            .iter()
            .filter_map(|c| self.device_files.get(c))
            .chain(&self.control_files)
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        files.dedup();
        let said = if files.is_empty() {
            "no device files (a simulated card without one)".to_string()
        } else {
            format!("device files {}", files.join(", "))
        };
        (files, said)
    }

    /// The command that runs `job`'s container, or why it cannot run here.
    pub fn plan(&self, job: &ContainerJob<'_>) -> Result<Planned, ContainerFailure> {
        let (volumes, options) = job.spec.check().map_err(|e| ContainerFailure::Runtime {
            runtime: job.spec.runtime(),
            said: e.to_string(),
        })?;
        let runtime = job.spec.runtime();
        // The working directory is mounted at its own path: a `:` or `,` in it would be read
        // as the mount's own fields or options.
        if job
            .cwd
            .chars()
            .any(|c| c == ':' || c == ',' || c.is_control())
        {
            return Err(ContainerFailure::Volume {
                volume: job.cwd.to_string(),
                why: "the working directory holds a character a mount cannot take (: or ,); \
                      run the container from another directory"
                    .into(),
            });
        }
        if runtime == ContainerRuntime::Docker && !self.policy.docker {
            return Err(ContainerFailure::DockerDisabled {
                node: self.node.clone(),
            });
        }
        let program = self
            .runtimes
            .get(&runtime)
            .ok_or_else(|| ContainerFailure::RuntimeMissing {
                runtime,
                node: self.node.clone(),
            })?
            .to_string_lossy()
            .into_owned();
        let mut checked = Vec::with_capacity(volumes.len());
        for volume in &volumes {
            checked.push(self.check_volume(volume, job.identity)?);
        }
        let name = format!("lanes-job-{}", job.tag);
        let (devices, cards) = self.card_devices(runtime, job.cards);
        match runtime {
            ContainerRuntime::Podman => {
                if let Identity::Account {
                    name: user, uid, ..
                } = job.identity
                {
                    if !self.subuid_ready(user, *uid) {
                        return Err(ContainerFailure::NoSubuid {
                            user: user.clone(),
                            node: self.node.clone(),
                        });
                    }
                }
                let mut argv = vec![program];
                argv.extend(self.podman_globals.iter().cloned());
                argv.extend(["run", "--rm", "--pull=never", "--userns=keep-id"].map(String::from));
                if self.podman_no_cgroups {
                    argv.push("--cgroups=disabled".into());
                }
                let mounts = Mounts {
                    cwd: job.cwd.into(),
                    volumes: volumes.clone(),
                    env_file: None,
                };
                self.common(&mut argv, job, &name, &devices, &mounts, &options, runtime)?;
                Ok(Planned {
                    runtime,
                    argv,
                    env_prefix: None,
                    as_server: false,
                    name: Some(name),
                    cards,
                    env_file: None,
                })
            }
            ContainerRuntime::Docker => {
                let Identity::Account {
                    uid, gid, groups, ..
                } = job.identity
                else {
                    return Err(ContainerFailure::DockerDisabled {
                        node: self.node.clone(),
                    });
                };
                // Checked on this host (a hybrid one): runc is refused `c *:* m` under the
                // wall's devices cgroup, and a Docker cgroup outside the unified hierarchy
                // would be outside a cgroup v2 wall.
                if self.cgroup_v1 {
                    return Err(ContainerFailure::DockerNeedsCgroupV2 {
                        node: self.node.clone(),
                    });
                }
                let cgroup = job.cgroup.ok_or_else(|| ContainerFailure::NeedsWall {
                    node: self.node.clone(),
                })?;
                // The daemon mounts as root: the working directory is checked as a volume is,
                // and every host path it gets is the link-free one that was checked.
                let cwd = self.check_volume(
                    &Volume {
                        host: job.cwd.into(),
                        container: job.cwd.into(),
                        read_only: false,
                    },
                    job.identity,
                )?;
                let env_file = env_file_of(job.run_dir);
                let mounts = Mounts {
                    cwd: cwd.to_string_lossy().into_owned(),
                    volumes: (volumes.iter().zip(&checked))
                        .map(|(v, real)| Volume {
                            host: real.to_string_lossy().into_owned(),
                            ..v.clone()
                        })
                        .collect(),
                    env_file: Some(env_file.clone()),
                };
                let mut argv: Vec<String> = vec![
                    program,
                    "run".into(),
                    "--rm".into(),
                    "--pull=never".into(),
                    format!("--user={uid}:{gid}"),
                    "--cap-drop=ALL".into(),
                    "--security-opt=no-new-privileges".into(),
                    format!("--cgroup-parent={cgroup}"),
                ];
                for group in groups.iter().filter(|g| *g != gid) {
                    argv.push(format!("--group-add={group}"));
                }
                self.common(&mut argv, job, &name, &devices, &mounts, &options, runtime)?;
                Ok(Planned {
                    runtime,
                    argv,
                    env_prefix: None,
                    as_server: true,
                    name: Some(name),
                    cards,
                    env_file: Some(env_file),
                })
            }
            ContainerRuntime::Apptainer => {
                let prefix = if program.ends_with("singularity") {
                    "SINGULARITYENV_"
                } else {
                    "APPTAINERENV_"
                };
                let mut argv = vec![program, "exec".into(), "--cleanenv".into()];
                if self.control_files.iter().any(|f| f.ends_with("nvidiactl")) {
                    argv.push("--nv".into());
                }
                argv.push(format!("--pwd={}", job.cwd));
                argv.push(format!("--bind={}", job.cwd));
                if let Some(dir) = &job.notice_dir {
                    argv.push(format!("--bind={dir}:{dir}:ro"));
                }
                for v in &volumes {
                    let mode = if v.read_only { ":ro" } else { "" };
                    argv.push(format!("--bind={}:{}{mode}", v.host, v.container));
                }
                for option in &options {
                    match option {
                        ContainerOption::IpcHost | ContainerOption::ReadOnly => {}
                        other => {
                            return Err(ContainerFailure::Runtime {
                                runtime,
                                said: format!(
                                    "{} is not something apptainer does; leave it out",
                                    describe_option(other)
                                ),
                            })
                        }
                    }
                }
                argv.push(job.spec.image.clone());
                argv.extend(job.argv.iter().cloned());
                Ok(Planned {
                    runtime,
                    argv,
                    // With --cleanenv only APPTAINERENV_* variables reach the container.
                    env_prefix: Some(prefix),
                    as_server: false,
                    name: None,
                    cards,
                    env_file: None,
                })
            }
        }
    }

    /// What Podman and Docker share: name, labels, network, cards, variables, mounts,
    /// options, then the image and the command.
    #[allow(clippy::too_many_arguments)]
    fn common(
        &self,
        argv: &mut Vec<String>,
        job: &ContainerJob<'_>,
        name: &str,
        devices: &[String],
        mounts: &Mounts,
        options: &[ContainerOption],
        runtime: ContainerRuntime,
    ) -> Result<(), ContainerFailure> {
        argv.push(format!("--name={name}"));
        for (key, value) in [
            ("lanes.job", job.job_id.to_string()),
            ("lanes.user", job.username.to_string()),
            ("lanes.node", self.node.clone()),
        ] {
            argv.push(format!("--label={key}={value}"));
        }
        let host_namespaces =
            runtime == ContainerRuntime::Podman || self.policy.docker_host_namespaces;
        let no_network = options.contains(&ContainerOption::NoNetwork);
        if no_network {
            argv.push("--network=none".into());
        } else if host_namespaces {
            argv.push("--network=host".into());
        }
        for device in devices {
            argv.push(format!("--device={device}"));
        }
        argv.extend(self.driver_mounts(devices));
        match &mounts.env_file {
            Some(file) => argv.push(format!("--env-file={}", file.display())),
            None => {
                for variable in &job.env_names {
                    argv.push(format!("--env={variable}"));
                }
            }
        }
        argv.push(format!("--volume={}:{}", mounts.cwd, job.cwd));
        argv.push(format!("--workdir={}", job.cwd));
        if let Some(dir) = &job.notice_dir {
            argv.push(format!("--volume={dir}:{dir}:ro"));
        }
        for v in &mounts.volumes {
            let mode = if v.read_only { ":ro" } else { "" };
            argv.push(format!("--volume={}:{}{mode}", v.host, v.container));
        }
        for option in options {
            match option {
                ContainerOption::ShmSize(size) => argv.push(format!("--shm-size={size}")),
                ContainerOption::IpcHost if host_namespaces => argv.push("--ipc=host".into()),
                ContainerOption::IpcHost => {
                    return Err(ContainerFailure::Runtime {
                        runtime,
                        said: "--ipc=host needs the admin's leave for Docker jobs on this node \
                               (--docker-host-namespaces); --shm-size=SIZE gives data loaders room"
                            .into(),
                    })
                }
                ContainerOption::Entrypoint(program) => {
                    argv.push(format!("--entrypoint={program}"))
                }
                ContainerOption::ReadOnly => argv.push("--read-only".into()),
                ContainerOption::Tmpfs(path) => argv.push(format!("--tmpfs={path}")),
                ContainerOption::NoNetwork => {}
            }
        }
        argv.push(job.spec.image.clone());
        argv.extend(job.argv.iter().cloned());
        Ok(())
    }

    /// The command that removes what is left of a job's container after its cgroup was
    /// killed (`--rm` does it when the runtime itself sees the end), and whether it runs as
    /// the server (Docker's) or the member.
    pub fn cleanup(&self, runtime: ContainerRuntime, name: &str) -> Option<(Vec<String>, bool)> {
        let program = self.runtimes.get(&runtime)?.to_string_lossy().into_owned();
        match runtime {
            ContainerRuntime::Podman => {
                let mut argv = vec![program];
                argv.extend(self.podman_globals.iter().cloned());
                argv.extend(["rm", "--force", "--ignore", name].map(String::from));
                Some((argv, false))
            }
            ContainerRuntime::Docker => Some((
                vec![program, "rm".into(), "--force".into(), name.into()],
                true,
            )),
            ContainerRuntime::Apptainer => None,
        }
    }
}

fn describe_option(option: &ContainerOption) -> String {
    match option {
        ContainerOption::ShmSize(_) => "--shm-size".into(),
        ContainerOption::IpcHost => "--ipc=host".into(),
        ContainerOption::Entrypoint(_) => "--entrypoint".into(),
        ContainerOption::ReadOnly => "--read-only".into(),
        ContainerOption::Tmpfs(_) => "--tmpfs".into(),
        ContainerOption::NoNetwork => "--network=none".into(),
    }
}

/// Why a container job's runtime failed, from the last lines of its stderr log, in the
/// member's words where the runtime's are known; `None` when the runtime did not fail (the
/// exit status is the command's own).
pub fn failure_of(
    runtime: ContainerRuntime,
    exit_code: Option<i64>,
    stderr_tail: &str,
    image: &str,
    user: &str,
    node: &str,
) -> Option<ContainerFailure> {
    // Podman and Docker exit 125 when they fail themselves (126/127: the command in the
    // image cannot run or is missing); Apptainer exits 255.
    let own = match runtime {
        ContainerRuntime::Podman | ContainerRuntime::Docker => matches!(exit_code, Some(125..=127)),
        ContainerRuntime::Apptainer => exit_code == Some(255),
    };
    if !own {
        return None;
    }
    let line = stderr_tail
        .lines()
        .rev()
        .find(|l| {
            let l = l.trim_start();
            l.starts_with("Error") || l.starts_with("FATAL") || l.starts_with("docker:")
        })
        .or_else(|| {
            stderr_tail
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty() && !l.starts_with("lanes:"))
        })?
        .trim()
        .to_string();
    let lower = line.to_lowercase();
    let missing_image = lower.contains("image not known")
        || lower.contains("no such image")
        || lower.contains("unable to find image")
        || (lower.contains("image") && lower.contains("not found"));
    if missing_image {
        return Some(ContainerFailure::ImageMissing {
            image: image.into(),
            user: user.into(),
            node: node.into(),
        });
    }
    if lower.contains("subuid") || lower.contains("subgid") || lower.contains("newuidmap") {
        return Some(ContainerFailure::NoSubuid {
            user: user.into(),
            node: node.into(),
        });
    }
    let said = line
        .trim_start_matches("Error: ")
        .trim_start_matches("FATAL: ")
        .chars()
        .take(400)
        .collect();
    Some(ContainerFailure::Runtime { runtime, said })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ada() -> Identity {
        Identity::Account {
            name: "ada".into(),
            uid: 1001,
            gid: 1001,
            groups: vec![1001, 44],
            home: "/".into(),
            shell: "/bin/bash".into(),
        }
    }

    fn host(docker: bool) -> ContainerHost {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!("lanes-subuid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let subuid = dir.join(format!("subuid-{made}"));
        std::fs::write(&subuid, "ada:100000:65536\n").unwrap();
        ContainerHost {
            node: "n1".into(),
            policy: ContainerPolicy {
                docker,
                // The tests' working directory; Docker's daemon mounts only what is shared or
                // the member's own.
                shared_dirs: if docker { vec!["/tmp".into()] } else { vec![] },
                ..Default::default()
            },
            runtimes: ContainerRuntime::ALL
                .into_iter()
                .map(|r| (r, PathBuf::from(format!("/usr/bin/{r}"))))
                .collect(),
            device_files: BTreeMap::from([
                ("GPU-a".into(), "/dev/nvidia0".into()),
                ("GPU-b".into(), "/dev/nvidia1".into()),
            ]),
            control_files: vec!["/dev/nvidiactl".into(), "/dev/nvidia-uvm".into()],
            driver_libraries: vec![],
            cdi: BTreeSet::new(),
            podman_globals: vec!["--cgroup-manager=cgroupfs".into()],
            podman_no_cgroups: true,
            cgroup_v1: false,
            subuid_file: subuid,
        }
    }

    fn spec(image: &str, runtime: Option<ContainerRuntime>) -> ContainerSpec {
        ContainerSpec {
            image: image.into(),
            runtime,
            volumes: vec![],
            options: vec!["--shm-size=8g".into()],
        }
    }

    fn job<'a>(
        spec: &'a ContainerSpec,
        identity: &'a Identity,
        cards: &'a [String],
    ) -> ContainerJob<'a> {
        ContainerJob {
            spec,
            job_id: 12,
            tag: "12-abcdef",
            username: "ada",
            identity,
            cards,
            argv: &[],
            cwd: "/tmp",
            env_names: vec!["CUDA_VISIBLE_DEVICES".into(), "LANES_JOB_ID".into()],
            cgroup: Some("/lanes/job-12-ab"),
            run_dir: Path::new("/var/lib/lanes/jobs/12-ab"),
            notice_dir: Some("/run/lanes/notices/12-ab".into()),
        }
    }

    #[test]
    fn dockers_root_client_gets_the_variables_as_a_file_and_the_checked_paths_never_links() {
        let dir = std::env::temp_dir().join(format!("lanes-docker-{}", std::process::id()));
        let real = dir.join("data");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let who = ada();
        let cards = vec!["GPU-a".to_string()];
        let s = ContainerSpec {
            volumes: vec![format!("{}:/data:ro", link.display())],
            ..spec("localhost/train:1", Some(ContainerRuntime::Docker))
        };
        let mut h = host(true);
        h.policy.shared_dirs = vec![std::env::temp_dir()];
        let planned = h.plan(&job(&s, &who, &cards)).unwrap();
        let argv = planned.argv.join(" ");
        // The variables: one root-owned file in the run's directory, never `--env NAME`
        // (which the client would fill from its own environment).
        let file = Path::new("/var/lib/lanes/jobs/12-ab/container.env");
        assert_eq!(planned.env_file.as_deref(), Some(file));
        assert!(
            argv.contains(&format!("--env-file={}", file.display())),
            "{argv}"
        );
        assert!(!argv.contains("--env="), "{argv}");
        // The daemon mounts the path that was checked, not the link the member wrote.
        assert!(
            argv.contains(&format!(
                "--volume={}:/data:ro",
                std::fs::canonicalize(&real).unwrap().display()
            )),
            "{argv}"
        );
        assert!(!argv.contains(&link.display().to_string()), "{argv}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_env_file_carries_each_value_literally_and_refuses_a_line_break() {
        let vars = |v: &str| vec![("A".to_string(), v.to_string())];
        assert_eq!(
            env_file_text(&vars("x = $HOME \"# y")).unwrap(),
            "A=x = $HOME \"# y\n"
        );
        for bad in ["a\nDOCKER_HOST=ssh://u@h", "a\rb"] {
            let refused = env_file_text(&vars(bad)).unwrap_err().to_string();
            assert!(refused.contains("line break"), "{refused}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("container.env");
        write_env_file(&path, "A=1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Never over a file (or a link) already there.
        assert!(write_env_file(&path, "A=2\n").is_err());
    }

    #[test]
    fn podman_runs_rootless_as_the_member_with_exactly_the_booked_cards() {
        let who = ada();
        let cards = vec!["GPU-b".to_string()];
        let s = spec("localhost/train:1", None);
        let planned = host(false).plan(&job(&s, &who, &cards)).unwrap();
        assert!(!planned.as_server);
        let argv = planned.argv.join(" ");
        assert!(argv.starts_with("/usr/bin/podman --cgroup-manager=cgroupfs run --rm --pull=never --userns=keep-id --cgroups=disabled --name=lanes-job-12-abcdef"), "{argv}");
        assert!(
            argv.contains("--device=/dev/nvidia1 --device=/dev/nvidiactl --device=/dev/nvidia-uvm"),
            "{argv}"
        );
        assert!(!argv.contains("/dev/nvidia0"), "{argv}");
        assert!(
            argv.contains("--env=CUDA_VISIBLE_DEVICES --env=LANES_JOB_ID"),
            "{argv}"
        );
        assert!(
            argv.contains("--label=lanes.job=12 --label=lanes.user=ada"),
            "{argv}"
        );
        assert!(argv.ends_with("--shm-size=8g localhost/train:1"), "{argv}");
    }

    #[test]
    fn without_cdi_the_drivers_libraries_are_mounted_read_only_where_cuda_images_look() {
        let listing = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1\n\
            \tlibnvidia-gpucomp.so.580.65.06 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-gpucomp.so.580.65.06\n\
            \tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
        let libs = driver_libraries(listing);
        let names: Vec<&str> = libs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "libnvidia-ml.so.1",
                "libnvidia-gpucomp.so.580.65.06",
                "libcuda.so.1"
            ]
        );
        let who = ada();
        let mut h = host(false);
        h.driver_libraries = libs;
        let s = spec("localhost/train:1", None);
        let argv = h
            .plan(&job(&s, &who, &["GPU-a".into()]))
            .unwrap()
            .argv
            .join(" ");
        assert!(
            argv.contains("--volume=/lib/x86_64-linux-gnu/libcuda.so.1:/usr/local/nvidia/lib64/libcuda.so.1:ro"),
            "{argv}"
        );
        h.cdi = ["GPU-a".to_string()].into();
        let argv = h
            .plan(&job(&s, &who, &["GPU-a".into()]))
            .unwrap()
            .argv
            .join(" ");
        assert!(!argv.contains("libcuda"), "CDI brings its own: {argv}");
    }

    #[test]
    fn cdi_names_are_used_where_a_spec_names_every_booked_card() {
        let who = ada();
        let mut h = host(false);
        h.cdi = ["GPU-b".to_string()].into();
        let s = spec("localhost/train:1", None);
        let argv = h
            .plan(&job(&s, &who, &["GPU-b".into()]))
            .unwrap()
            .argv
            .join(" ");
        assert!(argv.contains("--device=nvidia.com/gpu=GPU-b"), "{argv}");
        assert!(!argv.contains("/dev/nvidia"), "{argv}");
        // One card the spec does not name: device files for all.
        let argv = h
            .plan(&job(&s, &who, &["GPU-a".into(), "GPU-b".into()]))
            .unwrap()
            .argv
            .join(" ");
        assert!(
            argv.contains("--device=/dev/nvidia0 --device=/dev/nvidia1"),
            "{argv}"
        );
    }

    #[test]
    fn docker_only_where_enabled_and_then_as_the_members_uid_in_a_child_of_the_job_cgroup() {
        let who = ada();
        let cards = vec!["GPU-a".to_string()];
        let s = spec("localhost/train:1", Some(ContainerRuntime::Docker));
        assert!(matches!(
            host(false).plan(&job(&s, &who, &cards)),
            Err(ContainerFailure::DockerDisabled { .. })
        ));
        let planned = host(true).plan(&job(&s, &who, &cards)).unwrap();
        assert!(planned.as_server);
        let argv = planned.argv.join(" ");
        for part in [
            "--user=1001:1001",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            "--cgroup-parent=/lanes/job-12-ab",
            "--group-add=44",
            "--device=/dev/nvidia0",
        ] {
            assert!(argv.contains(part), "{part} in {argv}");
        }
        // No host network unless the admin allows it; --ipc=host refused likewise.
        assert!(!argv.contains("--network=host"), "{argv}");
        let ipc = ContainerSpec {
            options: vec!["--ipc=host".into()],
            ..s.clone()
        };
        assert!(host(true).plan(&job(&ipc, &who, &cards)).is_err());
        let mut wall_off = job(&s, &who, &cards);
        wall_off.cgroup = None;
        assert!(matches!(
            host(true).plan(&wall_off),
            Err(ContainerFailure::NeedsWall { .. })
        ));
        // On cgroup v1 (or hybrid) Docker's container would leave the wall, or runc would be
        // refused its device rules under it: refused before anything starts.
        let hybrid = ContainerHost {
            cgroup_v1: true,
            ..host(true)
        };
        assert!(matches!(
            hybrid.plan(&job(&s, &who, &cards)),
            Err(ContainerFailure::DockerNeedsCgroupV2 { .. })
        ));
    }

    #[test]
    fn apptainer_runs_a_sif_file_and_refuses_what_it_cannot_do() {
        let who = ada();
        let cards = vec!["GPU-a".to_string()];
        let s = ContainerSpec {
            options: vec![],
            ..spec("/srv/images/train.sif", None)
        };
        let planned = host(false).plan(&job(&s, &who, &cards)).unwrap();
        assert_eq!(
            planned.argv.join(" "),
            "/usr/bin/apptainer exec --cleanenv --nv --pwd=/tmp --bind=/tmp \
             --bind=/run/lanes/notices/12-ab:/run/lanes/notices/12-ab:ro /srv/images/train.sif"
        );
        let vars = [("CUDA_VISIBLE_DEVICES".to_string(), "GPU-a".to_string())];
        assert_eq!(
            planned.passed(&vars),
            [(
                "APPTAINERENV_CUDA_VISIBLE_DEVICES".to_string(),
                "GPU-a".to_string()
            )]
        );
        let shm = spec("/srv/images/train.sif", None);
        assert!(host(false).plan(&job(&shm, &who, &cards)).is_err());
    }

    #[test]
    fn a_working_directory_that_would_read_as_mount_fields_is_refused() {
        let who = ada();
        let s = spec("localhost/train:1", None);
        for cwd in ["/home/ada/x:/etc", "/home/ada/a,rw", "/home/ada/x\n"] {
            let mut asked = job(&s, &who, &[]);
            asked.cwd = cwd;
            let refused = host(false).plan(&asked).unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains("a character a mount cannot take"),
                "{cwd:?}: {refused}"
            );
        }
    }

    #[test]
    fn a_member_without_a_subuid_range_or_a_runtime_is_told_what_to_do() {
        let bob = Identity::Account {
            name: "bob".into(),
            uid: 1002,
            gid: 1002,
            groups: vec![],
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        let s = spec("localhost/train:1", None);
        let refused = host(false).plan(&job(&s, &bob, &[])).unwrap_err();
        assert!(matches!(refused, ContainerFailure::NoSubuid { .. }));
        assert!(
            refused.to_string().contains("usermod --add-subuids"),
            "{refused}"
        );
        let mut bare = host(false);
        bare.runtimes.clear();
        let refused = bare.plan(&job(&s, &ada(), &[])).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("podman is not installed on node n1"),
            "{refused}"
        );
    }

    #[test]
    fn volumes_must_be_the_members_own_or_shared() {
        let dir = std::env::temp_dir().join(format!("lanes-vol-{}", std::process::id()));
        let mine = dir.join("ada");
        let theirs = dir.join("bob");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&theirs).unwrap();
        let link = mine.join("to-bob");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&theirs, &link).unwrap();
        let who = Identity::Account {
            name: "ada".into(),
            uid: 4242,
            gid: 4242,
            groups: vec![],
            home: mine.to_string_lossy().into_owned(),
            shell: "/bin/sh".into(),
        };
        let h = host(false);
        let volume = |host: &Path| Volume {
            host: host.to_string_lossy().into_owned(),
            container: "/data".into(),
            read_only: true,
        };
        assert!(h.check_volume(&volume(&mine), &who).is_ok());
        for other in [&theirs, &link, Path::new("/etc")] {
            let refused = h.check_volume(&volume(other), &who).unwrap_err();
            assert!(refused.to_string().contains("is not ada's"), "{refused}");
        }
        let shared = ContainerHost {
            policy: ContainerPolicy {
                shared_dirs: vec![theirs.clone()],
                ..Default::default()
            },
            ..host(false)
        };
        assert!(shared.check_volume(&volume(&theirs), &who).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cdi_specs_are_read_in_json_and_yaml() {
        let yaml = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits: {}\n- name: GPU-1234\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits:\n  env:\n  - name: x\n";
        assert_eq!(cdi_names_in(yaml), vec!["0", "GPU-1234"]);
        let json = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"all"},{"name":"GPU-9"}]}"#;
        assert_eq!(cdi_names_in(json), vec!["all", "GPU-9"]);
        assert!(cdi_names_in("kind: vendor.com/fpga\ndevices:\n- name: x\n").is_empty());
    }

    #[test]
    fn subordinate_ranges_are_found_by_name_or_uid() {
        let text = "ada:100000:65536\n1003:300000:65536\nzero:1:0\n";
        assert!(has_subordinate_range(text, "ada", 1001));
        assert!(has_subordinate_range(text, "carol", 1003));
        assert!(!has_subordinate_range(text, "bob", 1002));
        assert!(!has_subordinate_range(text, "zero", 1004));
    }

    #[test]
    fn a_runtimes_own_failure_is_said_in_the_members_words() {
        let tail = "lanes: job 3\nError: localhost/nope:1: image not known\n";
        assert_eq!(
            failure_of(
                ContainerRuntime::Podman,
                Some(125),
                tail,
                "localhost/nope:1",
                "ada",
                "n1"
            ),
            Some(ContainerFailure::ImageMissing {
                image: "localhost/nope:1".into(),
                user: "ada".into(),
                node: "n1".into()
            })
        );
        // The command's own exit status is the command's.
        assert_eq!(
            failure_of(ContainerRuntime::Podman, Some(1), tail, "x", "ada", "n1"),
            None
        );
        let other = failure_of(
            ContainerRuntime::Podman,
            Some(126),
            "Error: runc: exec failed: permission denied\n",
            "x",
            "ada",
            "n1",
        );
        assert_eq!(
            other.unwrap().to_string(),
            "podman failed: runc: exec failed: permission denied"
        );
    }
}
