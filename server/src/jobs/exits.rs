//! Wakes the runner when a job's process ends, instead of the runner looking every few
//! hundred milliseconds: a pidfd (Linux 5.3+) per watched process, which becomes readable when
//! the process exits, whoever its parent is (a job re-adopted after a restart is not our child).

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// A pidfd for `pid`, or `None` where the kernel has none (or the process is already gone).
fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; the
    // descriptor is owned by nobody else.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just opened for us and is closed only by the OwnedFd.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wakes `wake` once `pid` has exited (or at once when it cannot be watched: the caller then
/// looks, finds it running, and sets its own deadline). Returns whether it could watch.
pub fn notify_on_exit(pid: u32, wake: Arc<Notify>) -> bool {
    let Some(fd) = pidfd(pid) else {
        return false;
    };
    // SAFETY: an OwnedFd's descriptor stays open and the same until the AsyncFd drops it.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) })
    else {
        return false;
    };
    tokio::spawn(async move {
        // Readable once the process has exited; an error also means there is nothing to wait for.
        let _ = fd.readable().await;
        wake.notify_one();
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_runner_is_woken_when_a_process_exits_and_not_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let wake = Arc::new(Notify::new());
        assert!(notify_on_exit(child.id(), wake.clone()));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the process still runs"
        );
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .expect("woken when the process exits");
        // Woken because it exited: it can be reaped now, without waiting.
        assert!(child.try_wait().unwrap().is_some());
    }

    #[test]
    fn a_process_that_does_not_exist_cannot_be_watched() {
        assert!(pidfd(u32::MAX / 2).is_none());
    }
}
