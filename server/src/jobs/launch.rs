//! Starting a job's process: as the booking user's Unix account (or, when the server does not
//! run as root, as the server's own user: single-user mode), in a session and process group of
//! its own so that the whole tree can be signalled, with exactly the environment it was given,
//! in its working directory entered as that user, and its output in capped log files.

use nix::unistd::{Gid, Uid, User};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
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
    #[error(
        "this server runs as {server:?}, not root, so every job would run as {server:?} (and could \
         read its database); it runs only jobs of users whose Unix account is {server:?}, and {user} \
         has {account}; an admin may set a user's Unix account to {server:?} to allow it"
    )]
    SingleUser {
        server: String,
        user: String,
        account: String,
    },
    #[error("a job needs a command")]
    EmptyCommand,
    #[error("the working directory must be an absolute path, not {0:?}")]
    RelativeDir(String),
    #[error("cannot enter {dir} as {user}: {source}")]
    EnterDir {
        dir: String,
        user: String,
        source: std::io::Error,
    },
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

/// Who the server itself runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAccount {
    pub root: bool,
    pub name: String,
    pub home: String,
}

impl ServerAccount {
    pub fn current() -> Self {
        let uid = Uid::effective();
        let (name, home) = User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| (u.name, u.dir.to_string_lossy().into_owned()))
            .unwrap_or_else(|| (uid.to_string(), "/".into()));
        Self {
            root: uid.is_root(),
            name,
            home,
        }
    }
}

/// Whom a job of the Lanes user `username` (Unix account `unix_user`) runs as on this host.
pub fn identity(username: &str, unix_user: Option<&str>) -> Result<Identity, LaunchError> {
    identity_on(&ServerAccount::current(), username, unix_user)
}

/// [`identity`] for a server running as `server`. Without root the server can only run jobs as
/// itself, and a job as the server's account could rewrite the server's database (make its
/// owner an admin): so only users whom an admin mapped to that very account may run jobs.
pub fn identity_on(
    server: &ServerAccount,
    username: &str,
    unix_user: Option<&str>,
) -> Result<Identity, LaunchError> {
    if !server.root {
        if unix_user != Some(server.name.as_str()) {
            return Err(LaunchError::SingleUser {
                server: server.name.clone(),
                user: username.into(),
                account: unix_user.map_or("none".into(), |a| format!("{a:?}")),
            });
        }
        return Ok(Identity::SingleUser {
            name: server.name.clone(),
            home: server.home.clone(),
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

/// A working directory a job may ask for: absolute (a relative one would resolve against the
/// server's directory). Whether the user may enter it is known only as that user, at start.
pub fn check_dir(dir: &str) -> Result<(), LaunchError> {
    if Path::new(dir).is_absolute() && !dir.contains('\0') {
        Ok(())
    } else {
        Err(LaunchError::RelativeDir(dir.into()))
    }
}

/// What to start.
pub struct Launch<'a> {
    pub argv: &'a [String],
    /// Entered as the job's user, after the identity switch.
    pub cwd: &'a Path,
    /// Whether the job asked for `cwd`: then failing to enter it fails the job; otherwise (the
    /// home) the job starts in `/` instead, as a login does.
    pub cwd_required: bool,
    /// The complete environment; nothing of the server's is inherited.
    pub env: &'a [(String, String)],
    pub identity: &'a Identity,
    /// A directory made for this job alone; `stdout` and `stderr` are created in it.
    pub log_dir: &'a Path,
    /// Bytes kept of each stream; then a marker line, and the rest is read and dropped.
    pub log_limit: u64,
    /// The `lanes` binary, which keeps the logs (`lanes keep-log`); `/proc/self/exe` in the
    /// server, whatever became of its file since it started.
    pub keeper: &'a Path,
}

/// The log files of a job in `dir`.
pub fn log_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("stdout"), dir.join("stderr"))
}

/// Creates a log file that must not exist yet and is never a link (a pre-made link would make
/// the server write where it points). Readable by the server only; the API shows it to the
/// job's owner and admins.
fn new_log_file(path: &Path) -> Result<File, LaunchError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .mode(0o600)
        .open(path)
        .map_err(|source| LaunchError::Log {
            path: path.into(),
            source,
        })
}

/// An error code no system call returns, to tell "could not enter the directory" from a failed
/// exec across the fork (only an errno crosses it).
const ENTER_DIR_FAILED: i32 = 0x4c00_0000;

/// Switches to the account (groups, gid, uid) in a child after fork. Only system calls on values
/// prepared before the fork.
fn become_account(account: &Option<(Uid, Gid, Vec<Gid>)>) -> std::io::Result<()> {
    if let Some((uid, gid, groups)) = account {
        nix::unistd::setgroups(groups)?;
        nix::unistd::setgid(*gid)?;
        nix::unistd::setuid(*uid)?;
    }
    Ok(())
}

/// Starts the process that keeps one stream's log (`lanes keep-log`): in a session of its own
/// (signals to the job's group do not reach it; it ends when the job's last writer closes the
/// pipe), with the log file as its output. It becomes the job's user itself, first thing, so
/// that the binary need not be executable by that user.
fn start_keeper(
    keeper: &Path,
    read_end: OwnedFd,
    file: File,
    limit: u64,
    account: &Option<(Uid, Gid, Vec<Gid>)>,
) -> std::io::Result<Child> {
    let mut command = Command::new(keeper);
    command
        .args(["keep-log", "--limit", &limit.to_string()])
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(read_end))
        .stdout(Stdio::from(file))
        .stderr(Stdio::null());
    if let Some((uid, gid, _)) = account {
        command.args([
            "--uid",
            &uid.as_raw().to_string(),
            "--gid",
            &gid.as_raw().to_string(),
        ]);
    }
    // SAFETY: only a system call, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    command.spawn()
}

/// Starts the job. The child leaves the server's session (so signals to its process group reach
/// the whole job and nothing else), drops to the account's groups, gid and uid, then enters its
/// working directory as that user before the command runs. Its output goes through two log
/// keepers into files in `log_dir`.
pub fn spawn(launch: &Launch<'_>) -> Result<Spawned, LaunchError> {
    let (program, args) = launch.argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    let cwd = launch.cwd.to_string_lossy().into_owned();
    check_dir(&cwd)?;
    let c_cwd = CString::new(cwd.clone()).map_err(|_| LaunchError::RelativeDir(cwd.clone()))?;
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
    let (stdout_path, stderr_path) = log_files(launch.log_dir);
    let mut writers = Vec::new();
    let mut keepers = Vec::new();
    for path in [&stdout_path, &stderr_path] {
        let file = new_log_file(path)?;
        let log_err = |source| LaunchError::Log {
            path: path.clone(),
            source,
        };
        let (read_end, write_end) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| log_err(e.into()))?;
        let keeper = start_keeper(launch.keeper, read_end, file, launch.log_limit, &account)
            .map_err(log_err)?;
        keepers.push(keeper);
        writers.push(write_end);
    }
    let stderr = writers.pop().expect("two pipes");
    let stdout = writers.pop().expect("two pipes");
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    let job_account = account.clone();
    let required = launch.cwd_required;
    // SAFETY: between fork and exec the closure only makes system calls (setsid, setgroups,
    // setgid, setuid, chdir) on values prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            become_account(&job_account)?;
            // As the user, so that their permissions decide, never root's.
            if nix::libc::chdir(c_cwd.as_ptr()) != 0
                && (required || nix::libc::chdir(c"/".as_ptr()) != 0)
            {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                return Err(std::io::Error::from_raw_os_error(ENTER_DIR_FAILED | errno));
            }
            Ok(())
        });
    }
    let started = command
        .spawn()
        .map_err(|source| match source.raw_os_error() {
            Some(code) if code & ENTER_DIR_FAILED == ENTER_DIR_FAILED => LaunchError::EnterDir {
                dir: cwd,
                user: launch.identity.name().into(),
                source: std::io::Error::from_raw_os_error(code & !ENTER_DIR_FAILED),
            },
            _ => LaunchError::Spawn {
                command: program.clone(),
                source,
            },
        });
    // The parent's ends of the pipes close with `command`; the keepers then see the end of
    // the output when the job's last process closes its own.
    drop(command);
    match started {
        Ok(child) => Ok(Spawned { child, keepers }),
        Err(e) => {
            reap(keepers);
            Err(e)
        }
    }
}

/// A started job: its process, and the keepers of its two logs (which finish a moment after
/// the job's last writer, once they have written everything).
pub struct Spawned {
    pub child: Child,
    pub keepers: Vec<Child>,
}

/// Waits for keepers in the background, so none is left a zombie.
pub fn reap(keepers: Vec<Child>) {
    if keepers.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        for mut keeper in keepers {
            let _ = keeper.wait();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(root: bool) -> ServerAccount {
        ServerAccount {
            root,
            name: "lanes".into(),
            home: "/var/lib/lanes".into(),
        }
    }

    #[test]
    fn without_root_only_users_mapped_to_the_servers_own_account_run_jobs() {
        let ok = identity_on(&server(false), "op", Some("lanes")).unwrap();
        assert_eq!(ok.name(), "lanes");
        for other in [Some("ada"), None] {
            let refused = identity_on(&server(false), "ada", other).unwrap_err();
            assert!(matches!(refused, LaunchError::SingleUser { .. }));
            assert!(refused.to_string().contains("runs as \"lanes\", not root"));
        }
    }

    #[test]
    fn working_directories_must_be_absolute() {
        assert!(check_dir("/home/ada/runs").is_ok());
        for bad in ["runs", "../../../../root", "", "./x"] {
            assert!(
                matches!(check_dir(bad), Err(LaunchError::RelativeDir(_))),
                "{bad}"
            );
        }
    }
}
