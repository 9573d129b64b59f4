//! Which instance starts queue jobs: the one holding the queue leader's advisory lock (see
//! `store::Leadership`). Every other instance waits in line for it in one statement; when the
//! leader dies its session ends and PostgreSQL hands the lock to one waiting at once. The
//! leader checks its connection each second (a protocol ping, no transaction). Two leaders at
//! once cannot start a job twice anyway: a start is a booking the exclusion constraint admits
//! once and a state change from `queued` made once.

use crate::store::Store;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a leader checks its connection, and a follower whose wait in line ended (or whose
/// connection failed) waits before it gets in line again.
const TRY_EVERY: Duration = Duration::from_secs(1);

/// Starts the election; the receiver says whether this instance leads now. On SQLite it
/// always does.
pub fn start(store: Store, shutdown: CancellationToken) -> watch::Receiver<bool> {
    if store.leadership().is_none() {
        return watch::Sender::new(true).subscribe();
    }
    let (sender, receiver) = watch::channel(false);
    crate::runtime::tasks::supervise("leader election", shutdown.clone(), move || {
        run(store.clone(), sender.clone(), shutdown.clone())
    });
    receiver
}

/// Holds or waits for the lock until `shutdown`; a restart starts on a fresh connection (the
/// old one, and any lock on it, went with the task that panicked).
async fn run(store: Store, sender: watch::Sender<bool>, shutdown: CancellationToken) {
    let Some(mut leadership) = store.leadership() else {
        return;
    };
    {
        loop {
            let leading = tokio::select! {
                leading = leadership.hold() => leading,
                _ = shutdown.cancelled() => break,
            };
            let changed = sender.send_if_modified(|was| std::mem::replace(was, leading) != leading);
            if changed {
                // The queue wakes on the change itself (and reads its settings again).
                if leading {
                    tracing::info!("this instance now leads the queue");
                } else {
                    tracing::warn!("this instance no longer leads the queue");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(TRY_EVERY) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
    // Leading ends with the task (its connection, and the lock, are gone).
    sender.send_if_modified(|was| std::mem::replace(was, false));
}
