//! Starting a job's process: as the booking user's Unix account (or, when the server does not
//! run as root, as the server's own user: single-user mode), in a session and process group of
//! its own so that the whole tree can be signalled, with exactly the environment it was given,
//! and its output in log files.

use nix::unistd::{Gid, Uid, User};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Whom a job runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The booking user's Unix account (the server runs as root).
    Account {
        name: String,
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
        home: String,
    },
    /// The server's own user: it is not root, so it cannot become anyone else.
    SingleUser { name: String, home: String },
}

impl Identity {
    pub fn name(&self) -> &str {
        match self {
            Identity::Account { name, .. } | Identity::SingleUser { name, .. } => name,
        }
    }

    pub fn home(&self) -> &str {
        match self {
            Identity::Account { home, .. } | Identity::SingleUser { home, .. } => home,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0} has no Unix account for jobs; an admin sets one on the admin page")]
    NoUnixAccount(String),
    #[error("the Unix account {0:?} does not exist on this host")]
    UnknownAccount(String),
    #[error("jobs never run as root: the account {0:?} has uid 0")]
    RootAccount(String),
    #[error("a job needs a command")]
    EmptyCommand,
    #[error("cannot write the job's log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("cannot look up the Unix account {0:?}: {1}")]
    Lookup(String, nix::Error),
}

/// Whom a job of the Lanes user `username` (Unix account `unix_user`) runs as on this host.
pub fn identity(username: &str, unix_user: Option<&str>) -> Result<Identity, LaunchError> {
    if !Uid::effective().is_root() {
        let me = User::from_uid(Uid::effective())
            .ok()
            .flatten()
            .map(|u| (u.name, u.dir.to_string_lossy().into_owned()))
            .unwrap_or_else(|| (Uid::effective().to_string(), "/".into()));
        return Ok(Identity::SingleUser {
            name: me.0,
            home: me.1,
        });
    }
    let name = unix_user.ok_or_else(|| LaunchError::NoUnixAccount(username.into()))?;
    let account = User::from_name(name)
        .map_err(|e| LaunchError::Lookup(name.into(), e))?
        .ok_or_else(|| LaunchError::UnknownAccount(name.into()))?;
    if account.uid.is_root() {
        return Err(LaunchError::RootAccount(name.into()));
    }
    let c_name = CString::new(name).map_err(|_| LaunchError::UnknownAccount(name.into()))?;
    let groups = nix::unistd::getgrouplist(&c_name, account.gid)
        .map_err(|e| LaunchError::Lookup(name.into(), e))?;
    Ok(Identity::Account {
        name: name.into(),
        uid: account.uid.as_raw(),
        gid: account.gid.as_raw(),
        groups: groups.into_iter().map(Gid::as_raw).collect(),
        home: account.dir.to_string_lossy().into_owned(),
    })
}

/// What to start.
pub struct Launch<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// The complete environment; nothing of the server's is inherited.
    pub env: &'a [(String, String)],
    pub identity: &'a Identity,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
}

fn log_file(path: &Path) -> Result<File, LaunchError> {
    // Readable by the server only; the API shows it to the job's owner and admins.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| LaunchError::Log {
            path: path.into(),
            source,
        })
}

/// Starts the job. The child leaves the server's session (so signals to its process group reach
/// the whole job and nothing else), then drops to the account's groups, gid and uid before the
/// command runs.
pub fn spawn(launch: &Launch<'_>) -> Result<Child, LaunchError> {
    let (program, args) = launch.argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(launch.cwd)
        .stdin(Stdio::null())
        .stdout(log_file(launch.stdout)?)
        .stderr(log_file(launch.stderr)?);
    let account = match launch.identity {
        Identity::Account {
            uid, gid, groups, ..
        } => Some((
            Uid::from_raw(*uid),
            Gid::from_raw(*gid),
            groups.iter().map(|g| Gid::from_raw(*g)).collect::<Vec<_>>(),
        )),
        Identity::SingleUser { .. } => None,
    };
    // SAFETY: between fork and exec the closure only makes system calls (setsid, setgroups,
    // setgid, setuid) on values prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            if let Some((uid, gid, groups)) = &account {
                nix::unistd::setgroups(groups)?;
                nix::unistd::setgid(*gid)?;
                nix::unistd::setuid(*uid)?;
            }
            Ok(())
        });
    }
    command.spawn().map_err(|source| LaunchError::Spawn {
        command: program.clone(),
        source,
    })
}
