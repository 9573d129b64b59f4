//! A job that runs in a container image, and a process on a card that runs in a container.
//!
//! What a request may ask for is checked here, the same way in the terminal client (before it
//! sends anything) and in the server (before it records anything): an image reference or a
//! `.sif` path that no runtime could read as an option, host directories to mount, and a short
//! list of runtime options. Everything else (`--privileged`, `--device`, `--pid=host`, a user,
//! capabilities) is refused by name: a job's container gets exactly its booked cards and its
//! member's own rights, as any job does.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The program that runs a job's container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerRuntime {
    /// Rootless Podman as the member (their own image store and subuid range): the default.
    Podman,
    /// Apptainer (or Singularity) for `.sif` images, as the member; no daemon, no privilege.
    Apptainer,
    /// Docker's rootful daemon, only where the admin enables it: `--user UID:GID`, no
    /// privilege, Lanes' labels, in a child of the job's cgroup.
    Docker,
}

impl ContainerRuntime {
    pub const ALL: [ContainerRuntime; 3] = [Self::Podman, Self::Apptainer, Self::Docker];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Podman => "podman",
            Self::Apptainer => "apptainer",
            Self::Docker => "docker",
        }
    }
}

impl fmt::Display for ContainerRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ContainerRuntime {
    type Err = ContainerError;
    fn from_str(s: &str) -> Result<Self, ContainerError> {
        match s {
            "podman" => Ok(Self::Podman),
            "apptainer" | "singularity" => Ok(Self::Apptainer),
            "docker" => Ok(Self::Docker),
            other => Err(ContainerError::Runtime(other.into())),
        }
    }
}

/// What a job's request says about its container (`container` in `POST /api/v1/jobs` and
/// `POST /api/v1/queue`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// An image reference (`localhost/train:1`, `docker.io/pytorch/pytorch:2.5.1`) in the
    /// member's own store, or the absolute path of a `.sif` file.
    pub image: String,
    /// The runtime; absent: Apptainer for a `.sif` path, Podman otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<ContainerRuntime>,
    /// Host directories to mount, `HOST:CONTAINER` or `HOST:CONTAINER:ro`. The host directory
    /// must be the member's own (their home, or a directory they own) or one the admin
    /// shares. The job's working directory is always mounted at the same path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Runtime options from a short list: `--shm-size=SIZE`, `--ipc=host`,
    /// `--entrypoint=PROGRAM`, `--read-only`, `--tmpfs=PATH`, `--network=none`. Anything else
    /// is refused by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// A host directory mounted into a job's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub host: String,
    pub container: String,
    pub read_only: bool,
}

/// A runtime option a job may give, once checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerOption {
    /// `--shm-size=SIZE`: PyTorch's data loaders share batches through `/dev/shm`.
    ShmSize(String),
    /// `--ipc=host`: the host's IPC namespace (NCCL and data loaders), as PyTorch's images
    /// suggest; for Docker only where the admin allows host namespaces.
    IpcHost,
    /// `--entrypoint=PROGRAM`.
    Entrypoint(String),
    /// `--read-only`: the image's file system read-only.
    ReadOnly,
    /// `--tmpfs=PATH`.
    Tmpfs(String),
    /// `--network=none`: no network at all.
    NoNetwork,
}

/// Why a container request is refused, in words a member can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerError {
    Image(String),
    Runtime(String),
    SifNeedsApptainer(String),
    Volume { volume: String, why: String },
    Refused { option: String, why: String },
    Unknown(String),
    Value { option: String, why: String },
    TooMany,
}

impl fmt::Display for ContainerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Image(image) => write!(
                f,
                "{image:?} is not an image: give a reference such as localhost/train:1 or \
                 docker.io/pytorch/pytorch:2.5.1 (letters, digits and . _ - / : @ only, not \
                 starting with -), or the absolute path of a .sif file"
            ),
            Self::Runtime(name) => write!(
                f,
                "{name:?} is not a container runtime Lanes runs: podman, apptainer or docker"
            ),
            Self::SifNeedsApptainer(runtime) => {
                write!(f, "a .sif image runs with apptainer, not {runtime}")
            }
            Self::Volume { volume, why } => write!(f, "volume {volume:?}: {why}"),
            Self::Refused { option, why } => {
                write!(
                    f,
                    "{option} is not allowed in a Lanes job's container: {why}"
                )
            }
            Self::Unknown(option) => write!(
                f,
                "{option} is not an option a Lanes job's container may take; allowed: \
                 --shm-size=SIZE, --ipc=host, --entrypoint=PROGRAM, --read-only, --tmpfs=PATH, \
                 --network=none (volumes with --volume)"
            ),
            Self::Value { option, why } => write!(f, "{option}: {why}"),
            Self::TooMany => write!(
                f,
                "a container may have at most {MAX_ITEMS} volumes and options"
            ),
        }
    }
}

impl std::error::Error for ContainerError {}

/// Most volumes, and most options, one container may have.
pub const MAX_ITEMS: usize = 64;

/// Whether `image` names a `.sif` file (an absolute path): Apptainer's.
pub fn is_sif(image: &str) -> bool {
    image.starts_with('/') && image.ends_with(".sif")
}

/// Checks an image reference the way registries spell them (`[host[:port]/]path[:tag][@digest]`)
/// or an absolute `.sif` path: nothing a runtime could take for an option, a second argument
/// or a shell word.
pub fn check_image(image: &str) -> Result<(), ContainerError> {
    let bad = || ContainerError::Image(image.into());
    if image.is_empty() || image.len() > 512 || image.starts_with('-') {
        return Err(bad());
    }
    if is_sif(image) {
        let safe = image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@".contains(c))
            && !image.split('/').any(|part| part == "..");
        return if safe { Ok(()) } else { Err(bad()) };
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let (algorithm, hex) = digest.split_once(':').ok_or_else(bad)?;
        let valid = !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && hex.len() >= 32
            && hex.chars().all(|c| c.is_ascii_hexdigit());
        if !valid {
            return Err(bad());
        }
    }
    // A tag follows the last ':' after the last '/' (a ':' before it is a registry's port).
    let last_part = name.rsplit('/').next().unwrap_or(name);
    let (path, tag) = match last_part.split_once(':') {
        Some((_, tag)) => (&name[..name.len() - tag.len() - 1], Some(tag)),
        None => (name, None),
    };
    if let Some(tag) = tag {
        let valid = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && !tag.starts_with(['.', '-']);
        if !valid {
            return Err(bad());
        }
    }
    let mut parts = path.split('/').peekable();
    let mut first = true;
    while let Some(part) = parts.next() {
        let registry =
            first && parts.peek().is_some() && (part.contains(['.', ':']) || part == "localhost");
        first = false;
        let allowed = |c: char| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || "._-".contains(c)
                || (registry && (c == ':' || c.is_ascii_uppercase()))
        };
        let valid = !part.is_empty()
            && part.chars().all(allowed)
            && part.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !valid {
            return Err(bad());
        }
    }
    Ok(())
}

/// Paths no volume may mount over inside a container: the runtime's own.
const SYSTEM_TARGETS: [&str; 4] = ["/proc", "/sys", "/dev", "/"];

/// A clean absolute path: no `..`, no empty or `.` parts, nothing a runtime reads as a separator.
fn clean_absolute(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    if path.chars().any(|c| c.is_control() || c == ',' || c == ':') {
        return Err(format!("{path:?} holds a character a mount cannot take"));
    }
    if path.split('/').skip(1).any(|p| p == ".." || p == ".") {
        return Err(format!("{path:?} is not a plain path (it holds . or ..)"));
    }
    Ok(())
}

/// Reads `HOST:CONTAINER[:ro|:rw]`.
pub fn parse_volume(volume: &str) -> Result<Volume, ContainerError> {
    let refuse = |why: String| ContainerError::Volume {
        volume: volume.into(),
        why,
    };
    let parts: Vec<&str> = volume.split(':').collect();
    let (host, target, read_only) = match parts.as_slice() {
        [host, target] => (*host, *target, false),
        [host, target, "ro"] => (*host, *target, true),
        [host, target, "rw"] => (*host, *target, false),
        [_, _, other] => {
            return Err(refuse(format!(
                "{other:?} is not a mount mode: ro or rw only"
            )))
        }
        _ => {
            return Err(refuse(
                "write it HOST:CONTAINER or HOST:CONTAINER:ro, both absolute paths".into(),
            ))
        }
    };
    clean_absolute(host).map_err(&refuse)?;
    clean_absolute(target).map_err(&refuse)?;
    let target_trimmed = target.trim_end_matches('/');
    let system = SYSTEM_TARGETS.iter().any(|s| {
        let s = s.trim_end_matches('/');
        target_trimmed.is_empty()
            || target_trimmed == s
            || (!s.is_empty() && target_trimmed.starts_with(&format!("{s}/")))
    });
    if system {
        return Err(refuse(format!(
            "{target} is the runtime's own (/, /proc, /sys, /dev and below)"
        )));
    }
    Ok(Volume {
        host: match host.trim_end_matches('/') {
            "" => "/".into(),
            trimmed => trimmed.into(),
        },
        container: target.into(),
        read_only,
    })
}

/// Reads one runtime option of the allowed list; anything else is refused by name, with why.
pub fn parse_option(option: &str) -> Result<ContainerOption, ContainerError> {
    let (name, value) = match option.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (option, None),
    };
    let value_of = |why: &str| {
        value
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ContainerError::Value {
                option: name.into(),
                why: why.into(),
            })
    };
    let refused = |why: &str| ContainerError::Refused {
        option: option.into(),
        why: why.into(),
    };
    match name {
        "--shm-size" => {
            let size = value_of("give a size, e.g. --shm-size=8g")?;
            let digits = size.trim_end_matches(['b', 'k', 'm', 'g', 'B', 'K', 'M', 'G']);
            let unit = &size[digits.len()..];
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || unit.len() > 1 {
                return Err(ContainerError::Value {
                    option: name.into(),
                    why: format!("{size:?} is not a size: a number and b, k, m or g (8g)"),
                });
            }
            Ok(ContainerOption::ShmSize(size.to_lowercase()))
        }
        "--ipc" => match value {
            Some("host") => Ok(ContainerOption::IpcHost),
            _ => Err(ContainerError::Value {
                option: name.into(),
                why: "only --ipc=host may be given (the default is the container's own)".into(),
            }),
        },
        "--entrypoint" => {
            let program = value_of("give a program, e.g. --entrypoint=/usr/bin/python3")?;
            if program.starts_with('-') || program.chars().any(char::is_control) {
                return Err(ContainerError::Value {
                    option: name.into(),
                    why: format!("{program:?} is not a program"),
                });
            }
            Ok(ContainerOption::Entrypoint(program.into()))
        }
        "--read-only" if value.is_none() => Ok(ContainerOption::ReadOnly),
        "--tmpfs" => {
            let path = value_of("give a path, e.g. --tmpfs=/scratch")?;
            clean_absolute(path).map_err(|why| ContainerError::Value {
                option: name.into(),
                why,
            })?;
            Ok(ContainerOption::Tmpfs(path.into()))
        }
        "--network" | "--net" => match value {
            Some("none") => Ok(ContainerOption::NoNetwork),
            _ => Err(refused(
                "a job's container shares the node's network as any job does, or has none \
                 (--network=none)",
            )),
        },
        "--privileged" | "--cap-add" | "--security-opt" | "--userns" | "--user" | "-u"
        | "--group-add" | "--uidmap" | "--gidmap" => {
            Err(refused("it runs with the member's own rights and no more"))
        }
        "--device" | "--gpus" | "--device-cgroup-rule" => Err(refused(
            "Lanes gives the container exactly the booked cards",
        )),
        "--pid" | "--uts" | "--cgroupns" | "--cgroup-parent" | "--cgroups" => Err(refused(
            "a job's container stays inside the job, with its own processes",
        )),
        "--volume" | "-v" | "--mount" => Err(refused("give volumes with --volume HOST:CONTAINER")),
        "--env" | "-e" | "--env-file" => Err(refused(
            "give variables with the job's own --env, which reaches the container",
        )),
        _ => Err(ContainerError::Unknown(option.into())),
    }
}

impl ContainerSpec {
    /// The runtime it runs with: the one asked for, else Apptainer for a `.sif` file, else
    /// Podman.
    pub fn runtime(&self) -> ContainerRuntime {
        self.runtime.unwrap_or(if is_sif(&self.image) {
            ContainerRuntime::Apptainer
        } else {
            ContainerRuntime::Podman
        })
    }

    /// Checks everything that can be checked without the host: the image, the runtime for it,
    /// each volume and option.
    pub fn check(&self) -> Result<(Vec<Volume>, Vec<ContainerOption>), ContainerError> {
        check_image(&self.image)?;
        let runtime = self.runtime();
        if is_sif(&self.image) && runtime != ContainerRuntime::Apptainer {
            return Err(ContainerError::SifNeedsApptainer(runtime.to_string()));
        }
        if self.volumes.len() > MAX_ITEMS || self.options.len() > MAX_ITEMS {
            return Err(ContainerError::TooMany);
        }
        let volumes = self
            .volumes
            .iter()
            .map(|v| parse_volume(v))
            .collect::<Result<Vec<_>, _>>()?;
        let options = self
            .options
            .iter()
            .map(|o| parse_option(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((volumes, options))
    }
}

/// Why a job's container did not start, typed so that pages say it in their language.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "failure", rename_all = "snake_case")]
pub enum ContainerFailure {
    /// The runtime is not installed on the node (or Docker is not enabled for jobs).
    RuntimeMissing {
        runtime: ContainerRuntime,
        node: String,
    },
    /// Docker jobs are off on this node: the admin enables them.
    DockerDisabled { node: String },
    /// Rootless Podman needs a subordinate uid and gid range for the member.
    NoSubuid { user: String, node: String },
    /// The image is not in the member's own image store on the node.
    ImageMissing {
        image: String,
        user: String,
        node: String,
    },
    /// A volume the member may not mount.
    Volume { volume: String, why: String },
    /// Docker jobs need the device wall (their container goes in a child of the job's cgroup).
    NeedsWall { node: String },
    /// Docker jobs need the unified cgroup v2 hierarchy: on cgroup v1 (or a hybrid host) the
    /// container's cgroups are either outside the wall or refused the device rules Docker's
    /// runtime writes for every container.
    DockerNeedsCgroupV2 { node: String },
    /// The runtime refused or failed, in its own words.
    Runtime {
        runtime: ContainerRuntime,
        said: String,
    },
}

impl fmt::Display for ContainerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RuntimeMissing { runtime, node } => write!(
                f,
                "the container runtime {runtime} is not installed on node {node}; `lanes doctor` \
                 there lists the runtimes it finds"
            ),
            Self::DockerDisabled { node } => write!(
                f,
                "Docker jobs are not enabled on node {node} (its daemon runs as root); run the image \
                 with podman, or ask an admin to start the node with --docker-jobs"
            ),
            Self::NoSubuid { user, node } => write!(
                f,
                "{user} has no subordinate uid range on node {node}, which rootless podman needs; an \
                 admin adds one (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 \
                 {user}); `lanes doctor` lists who lacks one"
            ),
            Self::ImageMissing { image, user, node } => write!(
                f,
                "the image {image} is not in {user}'s image store on node {node}; add it there as \
                 {user} first (podman pull {image}, or podman load -i FILE)"
            ),
            Self::Volume { volume, why } => write!(f, "volume {volume}: {why}"),
            Self::NeedsWall { node } => write!(
                f,
                "Docker jobs need the device wall, which is off on node {node}; run the image with \
                 podman"
            ),
            Self::DockerNeedsCgroupV2 { node } => write!(
                f,
                "Docker jobs need cgroup v2 alone, which node {node} does not have: on cgroup \
                 v1 Docker's runtime writes device rules for every container that the device \
                 wall forbids; run the image with podman"
            ),
            Self::Runtime { runtime, said } => write!(f, "{runtime} failed: {said}"),
        }
    }
}

/// A process on a card that runs in a container, as the watchdog read it from the host.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContainerRef {
    /// `podman`, `docker`, `containerd`, `cri-o` or `apptainer`.
    pub runtime: String,
    /// The container's id (its first 12 characters), where the runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl ContainerRef {
    /// "container `train` (image `localhost/train:1`)", as violations and `lanes status` say it.
    pub fn describe(&self) -> String {
        let name = self
            .name
            .clone()
            .or_else(|| self.id.clone())
            .unwrap_or_else(|| "?".into());
        match &self.image {
            Some(image) => format!("{} container `{name}` (image `{image}`)", self.runtime),
            None => format!("{} container `{name}`", self.runtime),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_read_as_registries_spell_them_and_nothing_else() {
        for good in [
            "alpine",
            "localhost/lanes-test:1",
            "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "registry.lab.example:5000/team/train:v3",
            "ghcr.io/org/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "/home/ada/images/train.sif",
        ] {
            assert_eq!(check_image(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "--privileged",
            "-v/:/host",
            "alpine; rm -rf ~",
            "alpine $(id)",
            "alpine --device=/dev/nvidia1",
            "Alpine",
            "alpine:",
            "alpine:-x",
            "a//b",
            "alpine\nx",
            "/home/ada/../bob/x.sif",
            "/home/ada/x y.sif",
            "ghcr.io/x@sha256:zz",
        ] {
            assert!(
                matches!(check_image(bad), Err(ContainerError::Image(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn volumes_are_two_clean_absolute_paths_and_never_the_runtimes_own() {
        assert_eq!(
            parse_volume("/home/ada/data:/data:ro").unwrap(),
            Volume {
                host: "/home/ada/data".into(),
                container: "/data".into(),
                read_only: true
            }
        );
        for bad in [
            "/home/ada/data",
            "data:/data",
            "/home/ada/../bob:/x",
            "/home/ada:/data:rw,exec",
            "/home/ada:/data:z",
            "/home/ada:/proc/1",
            "/home/ada:/dev",
            "/home/ada:/",
            "/a:/b:ro:x",
        ] {
            assert!(parse_volume(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_outside_the_short_list_are_refused_by_name() {
        assert_eq!(
            parse_option("--shm-size=8G"),
            Ok(ContainerOption::ShmSize("8g".into()))
        );
        assert_eq!(parse_option("--ipc=host"), Ok(ContainerOption::IpcHost));
        assert_eq!(
            parse_option("--network=none"),
            Ok(ContainerOption::NoNetwork)
        );
        for (bad, says) in [
            ("--privileged", "own rights"),
            ("--device=/dev/nvidia1", "exactly the booked cards"),
            ("--gpus=all", "exactly the booked cards"),
            ("--pid=host", "its own processes"),
            ("--network=host", "shares the node's network"),
            ("--cap-add=SYS_ADMIN", "own rights"),
            ("--user=0", "own rights"),
            ("-v=/home/bob:/x", "--volume"),
            ("--shm-size=8g;id", "not a size"),
            ("--ipc=container:x", "only --ipc=host"),
            ("--rm=false", "not an option"),
        ] {
            let refused = parse_option(bad).unwrap_err().to_string();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }

    #[test]
    fn a_sif_image_runs_with_apptainer_and_anything_else_with_podman_unless_asked() {
        let spec = |image: &str, runtime| ContainerSpec {
            image: image.into(),
            runtime,
            volumes: vec![],
            options: vec![],
        };
        assert_eq!(
            spec("/srv/x.sif", None).runtime(),
            ContainerRuntime::Apptainer
        );
        assert_eq!(spec("alpine", None).runtime(), ContainerRuntime::Podman);
        assert_eq!(
            spec("alpine", Some(ContainerRuntime::Docker)).runtime(),
            ContainerRuntime::Docker
        );
        assert!(matches!(
            spec("/srv/x.sif", Some(ContainerRuntime::Podman)).check(),
            Err(ContainerError::SifNeedsApptainer(_))
        ));
        let json = r#"{"image":"alpine","privileged":true}"#;
        assert!(serde_json::from_str::<ContainerSpec>(json).is_err());
    }
}
