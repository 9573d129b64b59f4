//! Which instance starts queue jobs: the one holding the queue leader's advisory lock (see
//! `store::Leadership`). Every instance tries each second; when the leader dies its session
//! ends, PostgreSQL frees the lock, and the next try of another instance wins. Two leaders at
//! once cannot start a job twice anyway: a start is a booking the exclusion constraint admits
//! once and a state change from `queued` made once.

use crate::events::{Change, Event};
use crate::store::Store;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a follower tries to take the lead, and a leader checks its connection.
const TRY_EVERY: Duration = Duration::from_secs(1);

/// Starts the election; the receiver says whether this instance leads now. On SQLite it
/// always does.
pub fn start(store: Store, shutdown: CancellationToken) -> watch::Receiver<bool> {
    let Some(mut leadership) = store.leadership() else {
        return watch::Sender::new(true).subscribe();
    };
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let leading = leadership.hold().await;
            let changed = sender.send_if_modified(|was| std::mem::replace(was, leading) != leading);
            if changed {
                if leading {
                    tracing::info!("this instance now leads the queue");
                    store
                        .events()
                        .emit_here(Event::QueueChanged(Change::PoolChanged));
                } else {
                    tracing::warn!("this instance no longer leads the queue");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(TRY_EVERY) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    });
    receiver
}
