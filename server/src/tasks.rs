//! Background tasks that cannot die silently: a panic is logged, counted and the task starts
//! again, so one bad value never leaves the queue, the runner or the history writer dead while
//! the web keeps answering.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a task that panicked waits before it starts again (a panic at once on every start
/// must not spin).
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// Panics of background tasks since the process started (for `/metrics` and `/healthz`).
pub static PANICS: AtomicU64 = AtomicU64::new(0);

/// Runs `make()`'s task until it returns or `shutdown` fires; when it panics, logs the panic and
/// runs a fresh one. The returned handle ends when the task does.
pub fn supervise<F, Fut>(
    name: &'static str,
    shutdown: CancellationToken,
    mut make: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match tokio::spawn(make()).await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    PANICS.fetch_add(1, Ordering::Relaxed);
                    let payload = e.into_panic();
                    let message = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "(no message)".into());
                    tracing::error!(task = name, panic = %message, "a background task panicked; starting it again");
                }
                Err(_) => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(RESTART_AFTER) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    })
}

/// Waits until `receiver`'s value changes; never returns once its sender is gone. In a
/// `select!`, a closed channel must not be a ready branch: `watch::Receiver::changed` answers
/// `Err` at once and forever after its sender drops, and a loop that takes that as a wake-up
/// runs back to back (the queue once spun a core that way on SQLite, whose leadership sender
/// was dropped at the start).
pub async fn changed<T>(receiver: &mut tokio::sync::watch::Receiver<T>) {
    if receiver.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Panics of background tasks so far.
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_task_that_panics_is_started_again_until_it_finishes() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let before = panics();
        let handle = supervise("test", CancellationToken::new(), move || {
            let runs = counted.clone();
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("overflow");
                }
            }
        });
        handle.await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert!(panics() >= before + 2);
    }

    #[tokio::test]
    async fn a_watch_whose_sender_is_gone_never_wakes_a_loop() {
        let mut gone = tokio::sync::watch::Sender::new(true).subscribe();
        let mut wakes = 0;
        let deadline = tokio::time::sleep(Duration::from_millis(100));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = changed(&mut gone) => wakes += 1,
                _ = &mut deadline => break,
            }
            assert!(wakes < 10, "a closed channel woke the loop again and again");
        }
        assert_eq!(wakes, 0);
        // A live one still wakes it, once per change.
        let (sender, mut live) = tokio::sync::watch::channel(false);
        sender.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(1), changed(&mut live))
            .await
            .expect("a change wakes the waiter");
    }
}
