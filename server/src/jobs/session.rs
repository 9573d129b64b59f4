//! Notebooks in a booking: the member's own Jupyter, started as a job of the booking (their
//! Unix account, login environment, cgroup and mask; notice and stop with the booking), that
//! listens only on a Unix socket in a directory of its run that the member owns and nobody
//! else may enter. The portal reaches it there (it is root, or the member's own account on a
//! server without root) and serves it at `/sessions/ID/` to its owner (`http/sessions.rs`).
//!
//! Jupyter's token is made here, kept in the run's log directory (the server's alone) and given
//! to the job in its environment (`JUPYTER_TOKEN`, which Jupyter reads): it never reaches a
//! browser, a page or a log. Idle notebooks are culled by Jupyter's own well-kept machinery,
//! set from the idle-booking policy's window: a kernel idle that long is shut down (even with
//! a tab open: an open tab is how notebooks hold cards overnight), and a server with no
//! kernels and no activity for the window shuts itself down, ending the session. A kernel
//! running a cell is busy, so a long GPU computation is never culled.

use super::notice;
use lanes_types::job::{session_path, SessionKind};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The run's directory its session listens in (the member's, 0700), inside the run's notice
/// directory, which jobs may pass through but not list.
pub fn dir(notice_dir: &Path, run: &str) -> PathBuf {
    notice::run_dir(notice_dir, run).join("session")
}

/// The socket the session listens on.
pub fn socket(notice_dir: &Path, run: &str) -> PathBuf {
    dir(notice_dir, run).join("jupyter.sock")
}

fn token_file(jobs_dir: &Path, run: &str) -> PathBuf {
    jobs_dir.join(run).join("session-token")
}

/// The session's token, as the portal sends it to Jupyter.
pub fn token(jobs_dir: &Path, run: &str) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(token_file(jobs_dir, run))?
        .trim()
        .to_string())
}

/// What the runner starts for a session, and what it adds to the job's environment.
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// For the log's header.
    pub line: String,
}

/// The login shell runs this with Jupyter's options: JupyterLab where the member has it, else
/// Jupyter Server, else a message that says what to install (exit status 127, as a shell
/// says of a command it cannot find).
const START: &str = r#"for program in jupyter-lab jupyter-server; do
  if command -v "$program" >/dev/null 2>&1; then exec "$program" "$@"; fi
done
echo "lanes jupyter: Jupyter is not installed in your login environment (PATH=$PATH). Install it where your login profile finds it, for example: python3 -m pip install --user jupyterlab (or into the virtual environment your ~/.profile activates), then open the notebook again." >&2
exit 127"#;

/// What the member's session directory may hold, where the server can mount: a tmpfs of its
/// own, so that a member writing there meets its limit and not the node's `/run` (where the
/// notice directory is, and every daemon's runtime files). Jupyter keeps only its socket here.
const DIR_LIMIT: &str = "size=1m,nr_inodes=64";

/// Mounts the session directory's own small tmpfs, owned by `uid`:`gid`, mode 0700.
fn cap(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use nix::mount::{mount, MsFlags};
    mount(
        Some("lanes-session"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(format!("{DIR_LIMIT},mode=0700,uid={uid},gid={gid}").as_str()),
    )
    .map_err(std::io::Error::from)
}

/// Takes a session directory's tmpfs away (lazily: a process still in it keeps it until it
/// leaves), leaving the plain directory to be removed. Nothing when it has none.
pub fn uncap(dir: &Path) {
    let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
}

/// Makes the session's directory (the member's: `owner` is their uid and gid, `None` when
/// the server runs jobs as itself) and token, and the command that starts it.
pub fn prepare(
    kind: SessionKind,
    jobs_dir: &Path,
    notice_dir: &Path,
    run: &str,
    job: i64,
    owner: Option<(u32, u32)>,
    idle: Duration,
) -> std::io::Result<Prepared> {
    let dir = dir(notice_dir, run);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let mut limit = "its own account's (the server runs jobs as itself)".to_string();
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        limit = match cap(&dir, uid, gid) {
            Ok(()) => "a 1 MiB tmpfs of its own".into(),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "a session's directory is not capped");
                format!("not capped (its tmpfs could not be mounted: {e})")
            }
        };
    }
    let token = super::random_hex(24)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(token_file(jobs_dir, run))?;
    std::io::Write::write_all(&mut file, token.as_bytes())?;
    let socket = socket(notice_dir, run);
    let idle_s = idle.as_secs().max(1);
    let argv = match kind {
        SessionKind::Jupyter => [
            "/bin/sh",
            "-c",
            START,
            "lanes-jupyter",
            "--no-browser",
            &format!("--ServerApp.sock={}", socket.display()),
            "--ServerApp.sock_mode=0600",
            &format!("--ServerApp.base_url={}", session_path(job)),
            &format!("--ServerApp.shutdown_no_activity_timeout={idle_s}"),
            &format!("--MappingKernelManager.cull_idle_timeout={idle_s}"),
            &format!(
                "--MappingKernelManager.cull_interval={}",
                (idle_s / 4).clamp(1, 300)
            ),
            "--MappingKernelManager.cull_connected=True",
        ]
        .map(String::from)
        .to_vec(),
    };
    Ok(Prepared {
        argv,
        env: vec![("JUPYTER_TOKEN".into(), token)],
        line: format!(
            "session: Jupyter at {} through the portal, listening on {} (its directory: {limit}); idle kernels and an idle server end after {}",
            session_path(job),
            socket.display(),
            humantime::format_duration(Duration::from_secs(idle_s))
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_listens_in_its_runs_directory_and_its_token_stays_out_of_its_command() {
        let root = tempfile::tempdir().unwrap();
        let (jobs, notices) = (root.path().join("jobs"), root.path().join("notice"));
        let run = crate::jobs::new_run_dir(&jobs, "7").unwrap();
        notice::prepare(&notices, &run).unwrap();
        let prepared = prepare(
            SessionKind::Jupyter,
            &jobs,
            &notices,
            &run,
            7,
            None,
            Duration::from_secs(1800),
        )
        .unwrap();
        let token = token(&jobs, &run).unwrap();
        assert_eq!(token.len(), 48);
        assert_eq!(prepared.env, vec![("JUPYTER_TOKEN".into(), token.clone())]);
        assert!(prepared.argv.iter().all(|a| !a.contains(&token)));
        assert!(!prepared.line.contains(&token));
        let sock = socket(&notices, &run);
        assert!(prepared
            .argv
            .contains(&format!("--ServerApp.sock={}", sock.display())));
        assert!(prepared
            .argv
            .contains(&"--ServerApp.base_url=/sessions/7/".to_string()));
        assert!(prepared
            .argv
            .contains(&"--MappingKernelManager.cull_idle_timeout=1800".to_string()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir(&notices, &run))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // Where the server can mount (root), the member's directory is a small tmpfs of its
        // own: filling it stops at its limit, not at the node's /run.
        if nix::unistd::geteuid().is_root() {
            let (jobs, notices) = (root.path().join("jobs2"), root.path().join("notice2"));
            let run = crate::jobs::new_run_dir(&jobs, "8").unwrap();
            notice::prepare(&notices, &run).unwrap();
            let prepared = prepare(
                SessionKind::Jupyter,
                &jobs,
                &notices,
                &run,
                8,
                Some((65534, 65534)),
                Duration::from_secs(60),
            )
            .unwrap();
            assert!(prepared.line.contains("1 MiB tmpfs"), "{}", prepared.line);
            let fill = dir(&notices, &run).join("fill");
            let written = std::fs::write(&fill, vec![0u8; 2 << 20]);
            assert_eq!(
                written.map_err(|e| e.raw_os_error()),
                Err(Some(nix::libc::ENOSPC)),
                "2 MiB into a 1 MiB directory"
            );
            uncap(&dir(&notices, &run));
            notice::remove(&notices, &run);
            assert!(!notice::run_dir(&notices, &run).exists(), "removed whole");
        }
        // A token is made once per run: a second session in the same run is refused.
        assert!(prepare(
            SessionKind::Jupyter,
            &jobs,
            &notices,
            &run,
            7,
            None,
            Duration::from_secs(1)
        )
        .is_err());
    }
}
