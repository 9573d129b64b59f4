//! Tells whoever follows a job's log file that it grew, as the kernel sees it (inotify): one
//! instance per server, one watch per followed file however many follow it, removed when the
//! last follower leaves. A follower wakes when output arrives, never on a timer.

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What a file's watch wakes on: something written, the writer closing it, the file going away.
const MASK: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

#[derive(Clone)]
pub struct LogWatch {
    inner: Arc<Inner>,
}

struct Inner {
    inotify: AsyncFd<Instance>,
    files: Mutex<Files>,
}

/// The inotify instance, as tokio's reactor takes it (by its raw descriptor).
struct Instance(Inotify);

impl std::os::fd::AsRawFd for Instance {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// The files watched: each one's watch, how many follow it, and the counter its changes bump.
#[derive(Default)]
struct Files {
    by_path: HashMap<PathBuf, WatchDescriptor>,
    by_watch: HashMap<WatchDescriptor, Watched>,
}

struct Watched {
    path: PathBuf,
    followers: usize,
    changes: watch::Sender<u64>,
}

impl LogWatch {
    /// Starts the one reader of the server's inotify instance; it ends with `shutdown`.
    pub fn start(shutdown: CancellationToken) -> std::io::Result<Self> {
        let inotify = Instance(Inotify::init(
            InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC,
        )?);
        // SAFETY: the Inotify owns its descriptor, which stays open and the same until the
        // AsyncFd drops it.
        let inotify =
            unsafe { AsyncFd::register_with_interest(inotify, tokio::io::Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
        let watch = Self {
            inner: Arc::new(Inner {
                inotify,
                files: Mutex::default(),
            }),
        };
        let reader = watch.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = reader.read() => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(watch)
    }

    fn files(&self) -> std::sync::MutexGuard<'_, Files> {
        self.inner
            .files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn read(&self) {
        loop {
            let Ok(mut ready) = self.inner.inotify.readable().await else {
                tracing::warn!("the log watch stopped: its inotify instance failed");
                return;
            };
            let events = match ready
                .try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from))
            {
                Ok(Ok(events)) => events,
                Ok(Err(e)) => {
                    // Not "nothing to read" (that is the next arm): look again a second later
                    // rather than at once.
                    tracing::warn!(error = %e, "the log watch could not read its events");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
                Err(_would_block) => continue,
            };
            let mut files = self.files();
            for event in events {
                if let Some(watched) = files.by_watch.get(&event.wd) {
                    watched.changes.send_modify(|n| *n += 1);
                }
                if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The kernel dropped the watch (the file went away): forget it.
                    if let Some(watched) = files.by_watch.remove(&event.wd) {
                        files.by_path.remove(&watched.path);
                    }
                }
            }
        }
    }

    /// Follows `path` (an existing file) until the returned follower is dropped.
    pub fn follow(&self, path: &Path) -> std::io::Result<Follower> {
        let mut files = self.files();
        let wd = match files.by_path.get(path) {
            Some(wd) => *wd,
            None => {
                let wd = self.inner.inotify.get_ref().0.add_watch(path, MASK)?;
                files.by_path.insert(path.to_path_buf(), wd);
                files.by_watch.entry(wd).or_insert_with(|| Watched {
                    path: path.to_path_buf(),
                    followers: 0,
                    changes: watch::Sender::new(0),
                });
                wd
            }
        };
        let watched = files
            .by_watch
            .get_mut(&wd)
            .expect("a watch for every watched path");
        watched.followers += 1;
        let changes = watched.changes.subscribe();
        Ok(Follower {
            watch: self.clone(),
            wd,
            changes,
        })
    }

    /// How many files are watched now (for tests).
    pub fn watched(&self) -> usize {
        self.files().by_watch.len()
    }
}

/// One follower of one file.
pub struct Follower {
    watch: LogWatch,
    wd: WatchDescriptor,
    changes: watch::Receiver<u64>,
}

impl Follower {
    /// Ready once the file changed since the last call (or since following began); never
    /// ready again after the file went away.
    pub async fn changed(&mut self) {
        crate::runtime::tasks::changed(&mut self.changes).await
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut files = self.watch.files();
        let Some(watched) = files.by_watch.get_mut(&self.wd) else {
            return;
        };
        watched.followers -= 1;
        if watched.followers == 0 {
            if let Some(watched) = files.by_watch.remove(&self.wd) {
                files.by_path.remove(&watched.path);
            }
            let _ = self.watch.inner.inotify.get_ref().0.rm_watch(self.wd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::io::Write;
    use std::time::Duration;

    #[tokio::test]
    async fn a_follower_wakes_when_its_file_grows_and_the_watch_goes_with_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let mut file = std::fs::File::create(&path).unwrap();
        let shutdown = CancellationToken::new();
        let watch = LogWatch::start(shutdown.clone()).unwrap();
        let mut one = watch.follow(&path).unwrap();
        let mut two = watch.follow(&path).unwrap();
        assert_eq!(watch.watched(), 1, "one watch for one file");
        // Nothing written: nothing to wake for.
        assert!(one.changed().now_or_never().is_none());
        file.write_all(b"step 1\n").unwrap();
        for follower in [&mut one, &mut two] {
            tokio::time::timeout(Duration::from_secs(5), follower.changed())
                .await
                .expect("the write wakes every follower");
        }
        // Woken once per change, not again for the same one.
        assert!(one.changed().now_or_never().is_none());
        drop(one);
        assert_eq!(watch.watched(), 1, "the other still follows");
        drop(two);
        assert_eq!(watch.watched(), 0, "the last follower took the watch along");
        // Following again works, and a file that goes away wakes its follower once.
        let mut three = watch.follow(&path).unwrap();
        drop(file);
        std::fs::remove_file(&path).unwrap();
        tokio::time::timeout(Duration::from_secs(5), three.changed())
            .await
            .expect("the removal wakes the follower");
        shutdown.cancel();
    }
}
