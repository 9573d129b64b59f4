//! What time it is, for everything that decides by time: the readings' timestamps, slot ends,
//! reminders, the queue's deadlines, what the API calls "now". A server runs on the system
//! clock; a test runs its server on a clock it can move forward, so "three seconds later" or
//! "past the slot's end" is a call, not a wait.
//!
//! Only wall-clock time goes through here. Intervals a task measures for itself (how long a
//! pass took, a retry's backoff) stay on `Instant` and tokio's timers.

use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// The system clock, or the system clock moved forward by what a test asked for. Cloning
/// shares the clock: every part of one server sees the same time.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// Milliseconds this clock runs ahead of the system's; `None` on a server.
    ahead_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock, as every server runs on.
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock that starts at the system's time and that [`Clock::advance`] moves forward:
    /// for tests, and for the simulator's replay of traces.
    pub fn adjustable() -> Self {
        Self {
            ahead_ms: Some(Arc::new(AtomicI64::new(0))),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        match &self.ahead_ms {
            None => now,
            Some(ahead) => now + chrono::Duration::milliseconds(ahead.load(Ordering::Acquire)),
        }
    }

    /// Milliseconds since the Unix epoch, now.
    pub fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// Moves an adjustable clock forward (never back: time read once stays in the past).
    ///
    /// # Panics
    /// On the system clock, which nothing may move, and for a negative step.
    pub fn advance(&self, by: chrono::Duration) {
        assert!(by >= chrono::Duration::zero(), "a clock only moves forward");
        self.ahead_ms
            .as_ref()
            .expect("only an adjustable clock moves")
            .fetch_add(by.num_milliseconds(), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adjustable_clock_moves_forward_and_its_clones_with_it() {
        let clock = Clock::adjustable();
        let seen = clock.clone();
        let before = seen.now();
        clock.advance(chrono::Duration::hours(2));
        let after = seen.now();
        assert!(after - before >= chrono::Duration::hours(2));
        assert!(after - before < chrono::Duration::hours(2) + chrono::Duration::seconds(5));
    }

    #[test]
    fn the_system_clock_is_the_systems() {
        let now = Clock::system().now();
        assert!((Utc::now() - now).num_seconds().abs() <= 1);
    }

    #[test]
    #[should_panic(expected = "only an adjustable clock moves")]
    fn the_system_clock_cannot_be_moved() {
        Clock::system().advance(chrono::Duration::seconds(1));
    }
}
