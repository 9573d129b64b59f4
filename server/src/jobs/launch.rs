//! Starting a job's process: as the booking user's Unix account (or, when the server does not
//! run as root, as the server's own user: single-user mode), in a session and process group of
//! its own (and its cgroup, behind the device wall) so that the whole tree can be signalled, in
//! the environment the user would have in a login shell on this host (or a clean one, or one
//! the client gave), in its working directory entered as that user, and its output in capped
//! log files. When it cannot start, the error says why in one line a user can act on.

use super::wall::{self, JobCgroup};
use lanes_types::job::{EnvironmentBase, StartedIn};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
        shell: String,
    },
    /// The server's own user: it is not root, so it cannot become anyone else.
    SingleUser {
        name: String,
        home: String,
        shell: String,
    },
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

    /// The server's own root account: Docker's client, which talks to a root daemon with a
    /// command line Lanes alone built, runs as it.
    pub fn server_root() -> Self {
        Identity::SingleUser {
            name: "root".into(),
            home: "/".into(),
            shell: "/bin/sh".into(),
        }
    }

    /// The account's uid and gid (none in single-user mode): the owner of files Lanes writes
    /// for the job.
    pub fn ids_raw(&self) -> Option<(u32, u32)> {
        match self {
            Identity::Account { uid, gid, .. } => Some((*uid, *gid)),
            Identity::SingleUser { .. } => None,
        }
    }

    /// The ids a child switches to (none in single-user mode): uid, gid and groups.
    fn ids(&self) -> Option<(Uid, Gid, Vec<Gid>)> {
        match self {
            Identity::Account {
                uid, gid, groups, ..
            } => Some((
                Uid::from_raw(*uid),
                Gid::from_raw(*gid),
                groups.iter().map(|g| Gid::from_raw(*g)).collect(),
            )),
            Identity::SingleUser { .. } => None,
        }
    }

    /// The account's login shell.
    pub fn shell(&self) -> &str {
        match self {
            Identity::Account { shell, .. } | Identity::SingleUser { shell, .. } => shell,
        }
    }
}

impl LaunchError {
    /// What a job that could not start says, typed where pages have its words.
    pub fn note(&self) -> lanes_types::job::JobNote {
        use lanes_types::job::JobNote;
        match self {
            LaunchError::NotFound {
                program,
                environment,
                path,
            } => JobNote::NotOnPath {
                program: program.clone(),
                environment: environment.clone(),
                path: path.clone(),
            },
            other => JobNote::Said {
                text: other.to_string(),
            },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0} has no Unix account for jobs; an admin sets one on the admin page")]
    NoUnixAccount(String),
    #[error("the Unix account {0:?} does not exist on this host")]
    UnknownAccount(String),
    #[error("{program}: not found on the PATH of {environment} (PATH={path})")]
    NotFound {
        program: String,
        environment: StartedIn,
        path: String,
    },
    #[error("{program}: {user} may not run it ({why})")]
    NotRunnable {
        program: String,
        user: String,
        why: String,
    },
    #[error("the login profile of {user} ({shell} as a login shell) {why}")]
    Profile {
        user: String,
        shell: String,
        why: String,
    },
    #[error("cannot put the job in its cgroup: {0}")]
    Cgroup(std::io::Error),
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
    #[error("cannot enter {dir} as {user}: {}", errno_text(.source))]
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
    pub shell: String,
}

impl ServerAccount {
    pub fn current() -> Self {
        let uid = Uid::effective();
        let (name, home, shell) = User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| {
                (
                    u.name,
                    u.dir.to_string_lossy().into_owned(),
                    u.shell.to_string_lossy().into_owned(),
                )
            })
            .unwrap_or_else(|| (uid.to_string(), "/".into(), "/bin/sh".into()));
        Self {
            root: uid.is_root(),
            name,
            home,
            shell,
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
            shell: server.shell.clone(),
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
        shell: account.shell.to_string_lossy().into_owned(),
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
pub struct Launch {
    pub argv: Vec<String>,
    /// Entered as the job's user, after the identity switch.
    pub cwd: PathBuf,
    /// Whether the job asked for `cwd`: then failing to enter it fails the job; otherwise (the
    /// home) the job starts in `/` instead, as a login does.
    pub cwd_required: bool,
    /// What the environment starts from (the admin's default already applied), and whether
    /// that came from the admin's setting rather than the request.
    pub base: EnvironmentBase,
    pub base_by_admin: bool,
    /// The job's own variables, on top of the base.
    pub extra: BTreeMap<String, String>,
    /// The device mask and the job's facts (`LANES_*`), on top of everything: nothing the
    /// profile or the user sets overrides them.
    pub fixed: Vec<(String, String)>,
    pub identity: Identity,
    /// A directory made for this job alone; `stdout` and `stderr` are created in it.
    pub log_dir: PathBuf,
    /// Bytes kept of each stream; then a marker line, and the rest is read and dropped.
    pub log_limit: u64,
    /// The `lanes` binary, which keeps the logs (`lanes keep-log`); `/proc/self/exe` in the
    /// server, whatever became of its file since it started.
    pub keeper: PathBuf,
    /// The job's cgroup behind the device wall; every process of the job (its login profile
    /// first) starts in it.
    pub cgroup: Option<JobCgroup>,
    /// Lines that open the job's stderr log (job, cards, wall); the environment's line follows.
    pub header: Vec<String>,
    /// How long the login profile may take.
    pub profile_timeout: Duration,
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

impl Launch {
    /// `argv` as `identity` in `/`, in a clean environment, with no wall and no header; the
    /// runner sets the rest.
    pub fn clean(argv: Vec<String>, identity: Identity, log_dir: PathBuf, keeper: PathBuf) -> Self {
        Self {
            argv,
            cwd: "/".into(),
            cwd_required: true,
            base: EnvironmentBase::Clean,
            base_by_admin: false,
            extra: BTreeMap::new(),
            fixed: Vec::new(),
            identity,
            log_dir,
            log_limit: 1 << 30,
            keeper,
            cgroup: None,
            header: Vec::new(),
            profile_timeout: Duration::from_secs(10),
        }
    }
}

/// The environment every job starts from: the account's identity, a locale, a plain `PATH`.
fn account_environment(identity: &Identity) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("HOME".into(), identity.home().into()),
        ("USER".into(), identity.name().into()),
        ("LOGNAME".into(), identity.name().into()),
        ("SHELL".into(), identity.shell().into()),
        ("PATH".into(), CLEAN_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ])
}

const CLEAN_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Shells that refuse a login (service accounts): such an account gets the clean environment.
fn refuses_login(shell: &str) -> bool {
    shell.is_empty() || shell.ends_with("/nologin") || shell.ends_with("/false")
}

/// What a job's processes start as, prepared before any fork: the account to switch to (none
/// in single-user mode) and the cgroup handles to join.
struct StartAs {
    account: Option<(Uid, Gid, Vec<Gid>)>,
    join: Vec<OwnedFd>,
}

impl StartAs {
    /// Makes `command` start as this child: in a session of its own, in the job's cgroup (as
    /// root, before anything else), as the account, in `dir` (or `/` when `dir` cannot be
    /// entered and is not `required`).
    fn prepare(&self, command: &mut Command, dir: CString, required: bool) {
        let account = self.account.clone();
        let join: Vec<RawFd> = self.join.iter().map(|fd| fd.as_raw_fd()).collect();
        // SAFETY: between fork and exec the closure only makes system calls (setsid, write,
        // setgroups, setgid, setuid, chdir) on values prepared before the fork; it allocates
        // nothing.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setsid()?;
                wall::join(&join)?;
                become_account(&account)?;
                // As the user, so that their permissions decide, never root's.
                if nix::libc::chdir(dir.as_ptr()) != 0
                    && (required || nix::libc::chdir(c"/".as_ptr()) != 0)
                {
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    return Err(std::io::Error::from_raw_os_error(ENTER_DIR_FAILED | errno));
                }
                Ok(())
            });
        }
    }
}

/// A system error in words, without the "(os error N)" a user cannot act on.
fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
        None => e.to_string(),
    }
}

/// Runs the account's shell as a login shell (`-bash`, as `login` starts it), which reads the
/// system's and the user's profile, and captures the environment it ends with (`env -0` after
/// a random marker, so anything the profile prints is told apart). The profile is the user's
/// code: it runs as the user, in the job's cgroup, with its messages in the job's stderr log.
/// Slurm's `--get-user-env` does the same with `su - USER -c env`.
fn login_environment(
    launch: &Launch,
    start_as: &StartAs,
    base: &BTreeMap<String, String>,
    stderr: &OwnedFd,
) -> Result<BTreeMap<String, String>, LaunchError> {
    let shell = launch.identity.shell();
    let failed = |why: String| LaunchError::Profile {
        user: launch.identity.name().into(),
        shell: shell.into(),
        why,
    };
    // Written by the shell through the descriptor it inherits, read back here, never left on
    // disk (it may hold the user's secrets).
    let capture_path = launch.log_dir.join("login-environment");
    let capture = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .mode(0o600)
        .open(&capture_path)
        .map_err(|e| failed(e.to_string()))?;
    let _ = std::fs::remove_file(&capture_path);
    let mut reader = capture.try_clone().map_err(|e| failed(e.to_string()))?;
    let marker = super::random_hex(8).map_err(|e| failed(e.to_string()))?;
    let env_program = if Path::new("/usr/bin/env").exists() {
        "/usr/bin/env"
    } else {
        "env"
    };
    let name = shell.rsplit('/').next().unwrap_or(shell);
    let mut command = Command::new(shell);
    command
        .arg0(format!("-{name}"))
        .args([
            "-c",
            &format!("echo lanes-env-{marker}; exec {env_program} -0"),
        ])
        .env_clear()
        .envs(base)
        .stdin(Stdio::null())
        .stdout(Stdio::from(capture))
        .stderr(Stdio::from(
            stderr.try_clone().map_err(|e| failed(e.to_string()))?,
        ));
    let home = CString::new(launch.identity.home()).unwrap_or_else(|_| c"/".into());
    start_as.prepare(&mut command, home, false);
    let mut process = command
        .spawn()
        .map_err(|e| failed(format!("could not start: {}", errno_text(&e))))?;
    drop(command);
    let status = wait_within(&mut process, launch.profile_timeout).ok_or_else(|| {
        failed(format!(
            "did not finish within {} s",
            launch.profile_timeout.as_secs()
        ))
    })?;
    let mut output = Vec::new();
    reader
        .seek(std::io::SeekFrom::Start(0))
        .and_then(|_| reader.take(MAX_PROFILE_OUTPUT).read_to_end(&mut output))
        .map_err(|e| failed(e.to_string()))?;
    let wanted = format!("lanes-env-{marker}\n");
    let Some(at) = output
        .windows(wanted.len())
        .position(|w| w == wanted.as_bytes())
    else {
        return Err(failed(match status.code() {
            Some(code) => format!("exited with status {code} before its environment was read"),
            None => "was killed before its environment was read".into(),
        }));
    };
    if !status.success() {
        return Err(failed(format!(
            "failed (exit status {})",
            status.code().unwrap_or(-1)
        )));
    }
    Ok(parse_environment(&output[at + wanted.len()..]))
}

/// Waits for `child` (the leader of its own process group) until `limit`; past it, kills the
/// group and returns `None`.
fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Most bytes read of what a login profile prints.
const MAX_PROFILE_OUTPUT: u64 = 4 << 20;

/// `env -0` output: `NAME=value` entries ended by NUL. Variables that describe the shell that
/// printed them, not the job, are left out.
fn parse_environment(bytes: &[u8]) -> BTreeMap<String, String> {
    bytes
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (name, value) = text.split_once('=')?;
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !["PWD", "OLDPWD", "SHLVL", "_"].contains(&name);
            valid.then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

/// The environment a job gets, and what it is in words: its base (the login profile, a clean
/// environment, or one given), its identity, its own variables, then the fixed ones.
fn environment(
    launch: &Launch,
    start_as: &StartAs,
    stderr: &OwnedFd,
) -> Result<(BTreeMap<String, String>, StartedIn), LaunchError> {
    let user = launch.identity.name().to_string();
    let shell = launch.identity.shell().to_string();
    let identity = account_environment(&launch.identity);
    let (mut env, described) = match &launch.base {
        EnvironmentBase::Login if refuses_login(&shell) => (
            identity.clone(),
            StartedIn::CleanShellRefuses { user, shell },
        ),
        EnvironmentBase::Login => {
            let mut env = identity.clone();
            env.extend(login_environment(launch, start_as, &identity, stderr)?);
            (env, StartedIn::Login { user, shell })
        }
        EnvironmentBase::Clean => (
            identity.clone(),
            StartedIn::Clean {
                by_admin: launch.base_by_admin,
            },
        ),
        EnvironmentBase::Given(vars) => (
            vars.clone(),
            StartedIn::Given {
                variables: vars.len(),
            },
        ),
    };
    // The identity is the account's, whatever the base says.
    for name in ["HOME", "USER", "LOGNAME", "SHELL"] {
        env.insert(name.into(), identity[name].clone());
    }
    env.extend(launch.extra.clone());
    env.extend(launch.fixed.iter().cloned());
    Ok((env, described))
}

/// Starts the job: log keepers first, then (for the login environment) the user's profile,
/// then the command itself, each in the job's session and cgroup, as the job's user. The
/// command is found on the `PATH` of the environment it gets and run with its argv exactly as
/// given (never through a shell). The log header (stderr) says what it got.
pub fn spawn(launch: &Launch) -> Result<Spawned, LaunchError> {
    let (program, args) = launch.argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    let cwd = launch.cwd.to_string_lossy().into_owned();
    check_dir(&cwd)?;
    let c_cwd = CString::new(cwd.clone()).map_err(|_| LaunchError::RelativeDir(cwd.clone()))?;
    let account = launch.identity.ids();
    let join = match &launch.cgroup {
        Some(cgroup) => cgroup.join_handles().map_err(LaunchError::Cgroup)?,
        None => Vec::new(),
    };
    let start_as = StartAs { account, join };
    let (stdout_path, stderr_path) = log_files(&launch.log_dir);
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
        let keeper = start_keeper(
            &launch.keeper,
            read_end,
            file,
            launch.log_limit,
            &start_as.account,
        )
        .map_err(log_err)?;
        keepers.push(keeper);
        writers.push(write_end);
    }
    let stderr = writers.pop().expect("two pipes");
    let stdout = writers.pop().expect("two pipes");
    let started = start_command(launch, &start_as, program, args, &c_cwd, stdout, stderr);
    match started {
        Ok((child, environment)) => Ok(Spawned {
            child,
            keepers,
            environment,
        }),
        Err(e) => {
            reap(keepers);
            Err(e)
        }
    }
}

/// Writes the header, builds the environment, finds the command and starts it. The parent's
/// ends of the pipes close when this returns; the keepers then see the end of the output when
/// the job's last process closes its own.
fn start_command(
    launch: &Launch,
    start_as: &StartAs,
    program: &str,
    args: &[String],
    cwd: &CString,
    stdout: OwnedFd,
    stderr: OwnedFd,
) -> Result<(Child, StartedIn), LaunchError> {
    let header_err = |source| LaunchError::Log {
        path: launch.log_dir.join("stderr"),
        source,
    };
    let mut header = File::from(stderr.try_clone().map_err(header_err)?);
    for line in &launch.header {
        writeln!(header, "lanes: {line}").map_err(header_err)?;
    }
    let started = || {
        let (env, described) = environment(launch, start_as, &stderr)?;
        writeln!(header, "lanes: environment: {described}").map_err(header_err)?;
        let path = env.get("PATH").cloned().unwrap_or_default();
        let not_found = || LaunchError::NotFound {
            program: program.into(),
            environment: described.clone(),
            path: path.clone(),
        };
        // Found on the job's PATH by exec in the child, after it became the job's user: a
        // directory the user cannot search hides what is in it (looked up as root, "may not run
        // it" against "not found" told a member which programs another's 0700 directory holds).
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        start_as.prepare(&mut command, cwd.clone(), launch.cwd_required);
        let process = command
            .spawn()
            .map_err(|source| match source.raw_os_error() {
                Some(code) if code & ENTER_DIR_FAILED == ENTER_DIR_FAILED => {
                    LaunchError::EnterDir {
                        dir: launch.cwd.to_string_lossy().into_owned(),
                        user: launch.identity.name().into(),
                        source: std::io::Error::from_raw_os_error(code & !ENTER_DIR_FAILED),
                    }
                }
                Some(nix::libc::ENOENT) => not_found(),
                Some(nix::libc::EACCES | nix::libc::ENOEXEC | nix::libc::EPERM) => {
                    LaunchError::NotRunnable {
                        program: program.into(),
                        user: launch.identity.name().into(),
                        why: errno_text(&source),
                    }
                }
                _ => LaunchError::Spawn {
                    command: program.into(),
                    source,
                },
            })?;
        Ok((process, described))
    };
    let started = started();
    if let Err(e) = &started {
        let _ = writeln!(header, "lanes: the job did not start: {e}");
    }
    started
}

/// Runs one of Lanes' own short commands (a container's removal) to its end as `identity`,
/// in `cgroup` when given (so that whatever it leaves there goes with the cgroup), from `/`,
/// in the account's clean environment; kills it after `timeout`. Returns what it printed on
/// stderr when it failed.
pub fn run_to_end(
    identity: &Identity,
    argv: &[String],
    cgroup: Option<&JobCgroup>,
    timeout: Duration,
) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("no command")?;
    let account = identity.ids();
    let join = match cgroup {
        Some(c) => c.join_handles().map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    let start_as = StartAs { account, join };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(account_environment(identity))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    start_as.prepare(&mut command, c"/".into(), true);
    let mut child = command.spawn().map_err(|e| errno_text(&e))?;
    let status = wait_within(&mut child, timeout)
        .ok_or_else(|| format!("did not finish within {} s", timeout.as_secs()))?;
    if status.success() {
        return Ok(());
    }
    let mut said = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = (&mut stderr).take(4096).read_to_string(&mut said);
    }
    Err(format!("{status}: {}", said.trim()))
}

/// A started job: its process, and the keepers of its two logs (which finish a moment after
/// the job's last writer, once they have written everything).
pub struct Spawned {
    pub child: Child,
    pub keepers: Vec<Child>,
    /// The environment it got.
    pub environment: StartedIn,
}

/// Waits for children (log keepers, a job stopped before it ran) in the background, so none
/// is left a zombie.
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
            shell: "/bin/sh".into(),
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
    fn a_captured_environment_keeps_the_profiles_variables_but_not_the_capturing_shells() {
        let env = parse_environment(
            b"PATH=/opt/venv/bin:/usr/bin\0LAB=a=b\0PWD=/home/ada\0SHLVL=1\0_=/usr/bin/env\0\
              BASH_FUNC_x%%=() { :; }\0MULTI=one\ntwo\0",
        );
        assert_eq!(
            env,
            BTreeMap::from([
                ("PATH".to_string(), "/opt/venv/bin:/usr/bin".to_string()),
                ("LAB".to_string(), "a=b".to_string()),
                ("MULTI".to_string(), "one\ntwo".to_string()),
            ])
        );
    }

    #[test]
    fn accounts_that_refuse_logins_are_known_by_their_shell() {
        for shell in ["/usr/sbin/nologin", "/sbin/nologin", "/bin/false", ""] {
            assert!(refuses_login(shell), "{shell}");
        }
        for shell in ["/bin/bash", "/usr/bin/zsh", "/bin/sh"] {
            assert!(!refuses_login(shell), "{shell}");
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
