//! Copies what this node's jobs write into the database (PostgreSQL, several nodes), so that
//! every portal shows and tails their logs. The log files stay the job's own record: the copy
//! follows them by offset, so a restart or an outage of the database only delays it, and a
//! part copied twice is stored once. Logs are capped by `--job-log-limit` as the files are.

use crate::jobs::log_watch::{Follower, LogWatch};
use crate::store::{Store, Stream};
use chrono::Utc;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long new output waits to be copied after it was written, so that a job printing
/// without pause costs a few copies a second: what a tail on another portal lags by, at most.
/// It is also how often files are read again where inotify is not available.
const EVERY: Duration = Duration::from_millis(300);
/// How soon a copy that failed (the database away) is tried again.
const RETRY: Duration = Duration::from_secs(2);
/// Largest piece copied in one row.
const CHUNK: usize = 256 * 1024;
/// Jobs that ended this long ago are no longer looked at (unless seen running before).
const AFTER_END: chrono::Duration = chrono::Duration::minutes(10);

/// Turns a log directory's name into its stdout and stderr files.
pub type LogPaths = dyn Fn(&str) -> Option<(PathBuf, PathBuf)> + Send + Sync;

/// Starts copying `node`'s job logs. It wakes when a job starts or ends (an event: the jobs
/// logging here are listed again) and when a log file grows (`log_watch`); with no job logging
/// here, or every logging job quiet, it does nothing at all.
pub fn start(
    store: Store,
    node: String,
    log_paths: Arc<LogPaths>,
    log_watch: Option<LogWatch>,
    clock: crate::runtime::clock::Clock,
    shutdown: CancellationToken,
) {
    crate::runtime::tasks::supervise("log shipper", shutdown.clone(), move || {
        run(
            store.clone(),
            node.clone(),
            log_paths.clone(),
            log_watch.clone(),
            clock.clone(),
            shutdown.clone(),
        )
    });
}

async fn run(
    store: Store,
    node: String,
    log_paths: Arc<LogPaths>,
    log_watch: Option<LogWatch>,
    clock: crate::runtime::clock::Clock,
    shutdown: CancellationToken,
) {
    // Bytes copied so far, by job and stream; a job stays here until copied after its end.
    let mut copied: HashMap<(i64, Stream), u64> = HashMap::new();
    let mut seen: HashMap<i64, String> = HashMap::new();
    // A watch on each file of the jobs seen (a file that cannot be watched is read again
    // every EVERY instead).
    let mut grows: HashMap<PathBuf, Follower> = HashMap::new();
    let mut events = store.events().subscribe();
    let mut list = true;
    loop {
        let since = clock.now() - AFTER_END;
        let copied_all = match copy_once(
            &store,
            &node,
            &*log_paths,
            &mut copied,
            &mut seen,
            list,
            since,
        )
        .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "job logs wait for the database");
                false
            }
        };
        list = !copied_all;
        if copied_all && seen.is_empty() {
            grows.clear();
            // No job logs here: nothing to copy until one starts, which a job event says.
            tokio::select! {
                _ = events.changed(crate::runtime::events::Event::concerns_shipper) => list = true,
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        let files: Vec<PathBuf> = seen
            .values()
            .filter_map(|dir| log_paths(dir))
            .flat_map(|(out, err)| [out, err])
            .collect();
        grows.retain(|path, _| files.contains(path));
        let mut unwatched = log_watch.is_none();
        for path in files {
            if grows.contains_key(&path) {
                continue;
            }
            match log_watch.as_ref().map(|watch| watch.follow(&path)) {
                Some(Ok(follower)) => {
                    grows.insert(path, follower);
                }
                _ => unwatched = true,
            }
        }
        // Read again after EVERY only what no watch covers, or after a failed copy.
        let look_again = if !copied_all {
            Some(RETRY)
        } else if unwatched {
            Some(EVERY)
        } else {
            None
        };
        let poll = async {
            match look_again {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        let grown = async {
            if grows.is_empty() {
                return std::future::pending().await;
            }
            let waits = grows
                .values_mut()
                .map(|follower| Box::pin(follower.changed()));
            futures::future::select_all(waits).await;
        };
        tokio::select! {
            () = grown => {
                // Output arrived: copy it after a moment, with whatever follows it meanwhile.
                tokio::select! {
                    _ = tokio::time::sleep(EVERY) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
            () = poll => {}
            _ = events.changed(crate::runtime::events::Event::concerns_shipper) => list = true,
            _ = shutdown.cancelled() => break,
        }
    }
}

async fn copy_once(
    store: &Store,
    node: &str,
    log_paths: &LogPaths,
    copied: &mut HashMap<(i64, Stream), u64>,
    seen: &mut HashMap<i64, String>,
    list: bool,
    ended_since: chrono::DateTime<Utc>,
) -> Result<(), crate::store::StoreError> {
    // Between listings, the jobs known are copied and none is taken as over.
    let mut over: HashMap<i64, bool> = seen.keys().map(|id| (*id, false)).collect();
    if list {
        over.clear();
        for (id, dir, ended) in store.job_logs().jobs_logging_on(node, ended_since).await? {
            seen.insert(id, dir);
            over.insert(id, ended);
        }
    }
    let jobs: Vec<(i64, String)> = seen.iter().map(|(id, d)| (*id, d.clone())).collect();
    for (id, dir) in jobs {
        let Some((stdout, stderr)) = log_paths(&dir) else {
            seen.remove(&id);
            continue;
        };
        for (stream, path) in [(Stream::Stdout, stdout), (Stream::Stderr, stderr)] {
            let offset = match copied.get(&(id, stream)) {
                Some(&offset) => offset,
                None => store.job_logs().log_copied(id, stream).await?,
            };
            let mut at = offset;
            loop {
                let piece = read_at(&path, at);
                if piece.is_empty() {
                    break;
                }
                store.job_logs().append(id, stream, at, &piece).await?;
                at += piece.len() as u64;
            }
            copied.insert((id, stream), at);
        }
        // Over (or no longer listed, so over long ago) and copied whole: done with it.
        if over.get(&id).copied().unwrap_or(true) {
            seen.remove(&id);
            copied.retain(|(job, _), _| *job != id);
        }
    }
    Ok(())
}

/// Up to [`CHUNK`] bytes of `path` from `offset`; nothing when there are none or no file.
fn read_at(path: &std::path::Path, offset: u64) -> Vec<u8> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::with_capacity(CHUNK);
    match file.take(CHUNK as u64).read_to_end(&mut buf) {
        Ok(_) => buf,
        Err(_) => Vec::new(),
    }
}
