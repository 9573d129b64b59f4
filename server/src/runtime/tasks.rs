//! The one supervisor of every background task (the table in `docs/architecture.md` names each,
//! and what wakes it): a panic is logged, counted per task (`lanes_task_restarts_total{task}`)
//! and the task starts again, so one bad value never leaves the queue, the runner or the
//! notifier dead while the web keeps answering.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a task that panicked waits before it starts again (a panic at once on every start
/// must not spin).
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// Panics of background tasks since the process started (for `/metrics` and `/healthz`).
pub static PANICS: AtomicU64 = AtomicU64::new(0);

/// Restarts after a panic, by task, for every task started under the supervisor (zero until
/// one panics, so each task is a series from its start).
static RESTARTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

fn restarts_mut() -> std::sync::MutexGuard<'static, BTreeMap<&'static str, u64>> {
    RESTARTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Each supervised task's restarts so far, by name.
pub fn restarts() -> Vec<(&'static str, u64)> {
    restarts_mut().iter().map(|(k, v)| (*k, *v)).collect()
}

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
    restarts_mut().entry(name).or_insert(0);
    tokio::spawn(async move {
        loop {
            match tokio::spawn(make()).await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    PANICS.fetch_add(1, Ordering::Relaxed);
                    *restarts_mut().entry(name).or_insert(0) += 1;
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

/// Passes of a task on request: a test (or a tool) asks for one and waits until a pass that
/// started after it asked has finished, instead of sleeping until the task would have looked
/// by itself. The task reads [`Passes::asked`] before a pass, reports it with
/// [`Passes::served`] after, and wakes on [`Passes::requested`].
#[derive(Clone, Default)]
pub struct Passes {
    wake: std::sync::Arc<tokio::sync::Notify>,
    /// Passes asked for so far.
    asked: std::sync::Arc<AtomicU64>,
    /// The last request a finished pass served.
    served: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl Passes {
    /// Asks for a pass that starts after this call and returns once it has finished.
    pub async fn run(&self) {
        let ask = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        self.wake.notify_one();
        let mut served = self.served.subscribe();
        let _ = served.wait_for(|s| *s >= ask).await;
    }

    /// The requests so far: read before a pass, handed to [`Passes::served`] after it.
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }

    /// Whether a request waits for a pass.
    pub fn wanted(&self) -> bool {
        self.asked() > *self.served.borrow()
    }

    /// A pass that started when [`Passes::asked`] said `asked` has finished.
    pub fn served(&self, asked: u64) {
        self.served.send_if_modified(|served| {
            let newer = asked > *served;
            if newer {
                *served = asked;
            }
            newer
        });
    }

    /// Ready when a pass is asked for that no pass has served yet (a request made while the
    /// task was busy is kept; one that the busy pass already served wakes nothing).
    pub async fn requested(&self) {
        loop {
            self.wake.notified().await;
            if self.wanted() {
                return;
            }
        }
    }
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

    // The clock is paused: the second between restarts passes as soon as nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_is_started_again_until_it_finishes() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let before = panics();
        let restarts_of = |name| {
            restarts()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, n)| n)
        };
        assert_eq!(restarts_of("panics twice"), None);
        let handle = supervise("panics twice", CancellationToken::new(), move || {
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
        assert_eq!(
            restarts_of("panics twice"),
            Some(2),
            "counted for the task by name"
        );
    }

    // The clock is paused: the hour passes as soon as the loop waits, and only then.
    #[tokio::test(start_paused = true)]
    async fn a_watch_whose_sender_is_gone_never_wakes_a_loop() {
        let mut gone = tokio::sync::watch::Sender::new(true).subscribe();
        let mut wakes = 0;
        let deadline = tokio::time::sleep(Duration::from_secs(3600));
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

    #[tokio::test]
    async fn a_pass_asked_for_is_one_that_started_after_the_request() {
        let passes = Passes::default();
        // A task that runs a pass whenever asked, and says which passes started when.
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn({
            let passes = passes.clone();
            async move {
                loop {
                    passes.requested().await;
                    let asked = passes.asked();
                    started_tx.send(asked).unwrap();
                    tokio::task::yield_now().await;
                    passes.served(asked);
                }
            }
        });
        // A pass that ended before the request does not serve it.
        passes.served(0);
        assert!(!passes.wanted());
        passes.run().await;
        assert_eq!(started.recv().await, Some(1), "the pass saw the request");
        assert!(!passes.wanted());
        // Requests made together are served by passes that started after each.
        let (a, b) = (passes.clone(), passes.clone());
        tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(a.run(), b.run());
        })
        .await
        .expect("both requests served");
        assert!(!passes.wanted());
        task.abort();
    }

    // Paused: the hour passes at once when nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn a_request_served_by_a_pass_woken_otherwise_starts_no_second_pass() {
        let passes = Passes::default();
        let waiter = tokio::spawn({
            let passes = passes.clone();
            async move { passes.run().await }
        });
        while passes.asked() == 0 {
            tokio::task::yield_now().await;
        }
        // A pass that an event woke, started after the request: it serves it.
        passes.served(passes.asked());
        waiter.await.unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(3600), passes.requested()).await;
        assert!(woken.is_err(), "the request's wake-up started another pass");
        // A new request still wakes the task.
        let again = passes.clone();
        let run = tokio::spawn(async move { again.run().await });
        tokio::time::timeout(Duration::from_secs(1), passes.requested())
            .await
            .expect("a new request wakes the task");
        passes.served(passes.asked());
        run.await.unwrap();
    }
}
