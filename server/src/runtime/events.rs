//! The service's one internal bus. A write says what it changed, after it committed; the tasks
//! that care (the queue, the job runner) listen. Nothing wakes another task by hand, so a new
//! write path cannot forget to: it goes through the store, and the store emits. With several
//! nodes on one PostgreSQL, every event is also relayed to the other processes
//! (`cluster::bus`, LISTEN/NOTIFY), which emit it on their own bus as if written there.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use tokio::sync::{broadcast, mpsc};

/// What changed. Listeners only learn *that* they should look again; they read the state itself
/// from the store, so a missed or coalesced event loses nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A write freed or took a card: the queue runs a pass, the runner checks its jobs.
    CardsChanged(Change),
    /// What the queue weighs changed, without any card changing hands: a job joined or left
    /// the queue, or the queue's settings or shares changed. The queue runs a pass.
    QueueChanged(Change),
    /// A job was submitted, started by the queue, or asked to stop: the runner looks now.
    JobsChanged(Change),
    /// What the watchdog judges processes by changed without a card changing hands: a job's
    /// process started, an account's Unix user changed, a booking was confirmed in use. The
    /// enforcer reads its facts again.
    WatchChanged(Change),
    /// Messages were queued in the outbox: the deliverer looks now.
    OutboxChanged(Change),
}

/// Which write it was, for listeners that log and for tests that check each path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Change {
    BookingCreated,
    BookingCancelled,
    BookingReleased,
    BookingExtended,
    /// The enforcer released a booking that sat idle past its grace period.
    IdleReleased,
    /// A queue job ended and its booking was released.
    QueueJobReleased,
    MaintenanceChanged,
    /// A card was put back in service (its drain ended): the health keepers read it again.
    HealthCleared,
    /// A card of a booking was exchanged for another.
    BookingMoved,
    JobSubmitted,
    JobStarted,
    JobCancelled,
    JobEnded,
    /// A running job was given notice of its stop.
    JobNoticed,
    /// The queue asked to preempt a running job for a waiting one.
    JobPreempted,
    QueueSubmitted,
    QueueSettingsChanged,
    SharesChanged,
    /// An account was disabled or enabled: its waiting jobs wait or may start.
    AccountChanged,
    /// An account was made, or its Unix user changed.
    AccountsChanged,
    /// A job's process started (it has a pid now).
    JobRunning,
    /// A member said "still using it" to an idle booking.
    InUseConfirmed,
    /// Messages were queued for delivery.
    MessagesQueued,
    /// Settings were saved (policy, portal, notifications, ...).
    SettingsChanged,
    /// A node came back or went silent, or the link to the other nodes was restored (events
    /// may have been missed meanwhile): look again.
    PoolChanged,
}

impl Event {
    pub fn change(self) -> Change {
        match self {
            Event::CardsChanged(c)
            | Event::QueueChanged(c)
            | Event::JobsChanged(c)
            | Event::WatchChanged(c)
            | Event::OutboxChanged(c) => c,
        }
    }

    /// Whether the queue should run a pass for it.
    pub fn concerns_queue(self) -> bool {
        matches!(self, Event::CardsChanged(_) | Event::QueueChanged(_))
    }

    /// Whether the enforcer's facts (this node's bookings, running jobs, accounts) may have
    /// changed: every event but a queued message may, so it reads them again after any.
    pub fn concerns_enforcer(self) -> bool {
        !matches!(self, Event::OutboxChanged(_))
    }

    /// Whether settings kept in memory must be read again.
    pub fn changes_settings(self) -> bool {
        matches!(self.change(), Change::SettingsChanged | Change::PoolChanged)
    }

    /// Whether the deliverer has messages to look at.
    pub fn concerns_deliverer(self) -> bool {
        matches!(self, Event::OutboxChanged(_))
    }

    /// Whether booking or job reminders, or a quota warning, may be due earlier than planned:
    /// a booking was made or changed, a job started or ended.
    pub fn concerns_reminders(self) -> bool {
        matches!(
            self,
            Event::CardsChanged(_)
                | Event::JobsChanged(_)
                | Event::WatchChanged(Change::JobRunning)
        )
    }

    /// Whether a job may have started or ended (the log shipper lists the jobs logging here).
    pub fn concerns_shipper(self) -> bool {
        matches!(
            self,
            Event::JobsChanged(_)
                | Event::WatchChanged(Change::JobRunning)
                | Event::CardsChanged(Change::JobEnded | Change::PoolChanged)
        )
    }

    /// Whether the queue's settings or shares may have changed (on any node), or the pool
    /// (after which another node's change may have been missed): the queue reads them again.
    pub fn changes_queue_settings(self) -> bool {
        matches!(
            self.change(),
            Change::QueueSettingsChanged | Change::SharesChanged | Change::PoolChanged
        )
    }

    /// Whether the job runner should look at its jobs for it.
    pub fn concerns_runner(self) -> bool {
        matches!(self, Event::CardsChanged(_) | Event::JobsChanged(_))
    }
}

/// Events a listener may fall behind by before it only learns "something changed".
const BACKLOG: usize = 1024;

/// The sending side; cheap to clone. Sending with nobody listening is not an error.
#[derive(Clone, Debug)]
pub struct Events {
    sender: broadcast::Sender<Event>,
    /// Where this process's events go to reach the other nodes, once the relay is set up.
    relay: Arc<OnceLock<mpsc::UnboundedSender<Event>>>,
}

impl Default for Events {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BACKLOG).0,
            relay: Arc::default(),
        }
    }
}

impl Events {
    /// Says what a write of this process changed, here and to the other nodes.
    pub fn emit(&self, event: Event) {
        self.emit_here(event);
        // The node that queued a message delivers it (another takes it up only when that one
        // died, within the deliverer's longest sleep): a NOTIFY to every node would only make
        // them all race for it.
        if matches!(event, Event::OutboxChanged(_)) {
            return;
        }
        if let Some(relay) = self.relay.get() {
            let _ = relay.send(event);
        }
    }

    /// Says what changed to this process's listeners only (an event another node relayed).
    pub fn emit_here(&self, event: Event) {
        tracing::debug!(?event, "event");
        let _ = self.sender.send(event);
    }

    /// From now on, every event this process emits is also handed to the returned receiver
    /// (the relay to the other nodes). `None` if a relay was set up already.
    pub fn relay(&self) -> Option<mpsc::UnboundedReceiver<Event>> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.relay.set(sender).ok().map(|()| receiver)
    }

    pub fn subscribe(&self) -> Listener {
        Listener {
            receiver: self.sender.subscribe(),
        }
    }
}

/// One listener's end of the bus.
pub struct Listener {
    receiver: broadcast::Receiver<Event>,
}

/// What woke a listener: every event it took, or that it fell behind (then anything may have
/// happened).
#[derive(Clone, Debug, Default)]
pub struct Woken {
    events: Vec<Event>,
    lagged: bool,
}

impl Woken {
    /// Whether an event that `which` accepts may be among those that woke the listener.
    pub fn may_include(&self, which: fn(Event) -> bool) -> bool {
        self.lagged || self.events.iter().any(|&e| which(e))
    }
}

impl Listener {
    /// Waits for an event that `wanted` accepts, then takes every event already waiting, so a
    /// burst of writes costs one look. Falling behind counts as a wanted event (something
    /// changed). Never returns once the bus is gone.
    pub async fn changed(&mut self, wanted: fn(Event) -> bool) -> Woken {
        let mut woken = Woken::default();
        loop {
            match self.receiver.recv().await {
                Ok(event) => {
                    woken.events.push(event);
                    if wanted(event) {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    woken.lagged = true;
                    break;
                }
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
        self.drain(&mut woken);
        woken
    }

    /// Takes every event already waiting, without waiting: whether one that `wanted` accepts
    /// was among them (or the listener fell behind).
    pub fn pending(&mut self, wanted: fn(Event) -> bool) -> bool {
        let mut woken = Woken::default();
        self.drain(&mut woken);
        woken.may_include(wanted)
    }

    /// Adds every event already waiting to `woken`.
    fn drain(&mut self, woken: &mut Woken) {
        loop {
            match self.receiver.try_recv() {
                Ok(event) => woken.events.push(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => woken.lagged = true,
                Err(_) => break,
            }
        }
    }

    /// The next event as it was emitted (for tests and tools that watch the bus).
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            match self.receiver.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_of_events_costs_one_look_and_unwanted_ones_none() {
        let events = Events::default();
        let mut listener = events.subscribe();
        events.emit(Event::JobsChanged(Change::JobSubmitted));
        events.emit(Event::CardsChanged(Change::BookingCreated));
        events.emit(Event::CardsChanged(Change::BookingCancelled));
        listener.changed(Event::concerns_queue).await;
        // The burst was drained: nothing is left to wake the listener again.
        let again = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            listener.changed(Event::concerns_queue),
        )
        .await;
        assert!(
            again.is_err(),
            "a drained burst must not wake the queue twice"
        );
        events.emit(Event::JobsChanged(Change::JobStarted));
        let unwanted = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            listener.changed(Event::concerns_queue),
        )
        .await;
        assert!(
            unwanted.is_err(),
            "the queue does not look for a runner-only event"
        );
    }

    #[tokio::test]
    async fn a_listener_learns_which_events_woke_it() {
        let events = Events::default();
        let mut listener = events.subscribe();
        events.emit(Event::QueueChanged(Change::QueueSubmitted));
        let woken = listener.changed(Event::concerns_queue).await;
        assert!(!woken.may_include(Event::changes_queue_settings));
        events.emit(Event::JobsChanged(Change::JobStarted));
        events.emit(Event::QueueChanged(Change::SharesChanged));
        let woken = listener.changed(Event::concerns_queue).await;
        assert!(woken.may_include(Event::changes_queue_settings));
    }

    #[tokio::test]
    async fn a_listener_that_fell_behind_still_learns_something_changed() {
        let events = Events::default();
        let mut listener = events.subscribe();
        for _ in 0..BACKLOG + 10 {
            events.emit(Event::JobsChanged(Change::JobStarted));
        }
        let woken = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            listener.changed(Event::concerns_queue),
        )
        .await
        .expect("lagging counts as a change");
        assert!(
            woken.may_include(Event::changes_queue_settings),
            "after a lag, anything may have changed"
        );
    }
}
