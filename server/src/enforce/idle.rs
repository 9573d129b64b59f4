//! Idle bookings (pure): each card's recent utilization, and whether a booking's cards averaged
//! under the threshold for the whole window.

use std::collections::{HashMap, VecDeque};

/// How long after the window a card's history must reach back: readings are not exactly aligned.
const COVERAGE_SLACK_MS: i64 = 2_000;
/// An idle booking is busy again once its cards average over the threshold for this long.
pub const WAKE_WINDOW_MS: i64 = 60_000;

/// Recent utilization readings per card (UUID).
#[derive(Debug, Default)]
pub struct UtilHistory {
    cards: HashMap<String, VecDeque<(i64, u32)>>,
}

impl UtilHistory {
    pub fn record(&mut self, card: &str, at_ms: i64, utilization_pct: u32) {
        let points = self.cards.entry(card.to_string()).or_default();
        if points.back().is_some_and(|(t, _)| *t >= at_ms) {
            return;
        }
        points.push_back((at_ms, utilization_pct));
    }

    /// Forgets readings older than `before_ms`.
    pub fn trim(&mut self, before_ms: i64) {
        for points in self.cards.values_mut() {
            while points.front().is_some_and(|(t, _)| *t < before_ms) {
                points.pop_front();
            }
        }
    }

    /// Mean utilization of `cards` over readings since `from_ms`; `None` unless every card's
    /// history reaches back that far (the server has not watched long enough to say).
    pub fn mean_since(&self, cards: &[String], from_ms: i64) -> Option<f64> {
        let mut sum = 0u64;
        let mut count = 0u64;
        for card in cards {
            let points = self.cards.get(card)?;
            if points.front()?.0 > from_ms + COVERAGE_SLACK_MS {
                return None;
            }
            for (_, util) in points.iter().filter(|(t, _)| *t >= from_ms) {
                sum += u64::from(*util);
                count += 1;
            }
        }
        (count > 0).then(|| sum as f64 / count as f64)
    }
}

/// A booking as the idle check sees it.
pub struct Watch<'a> {
    pub cards: &'a [String],
    pub start_ms: i64,
    pub idle: bool,
}

/// The booking's idle state after this look: `Some(true)` idle, `Some(false)` in use, `None`
/// unchanged (not enough history yet).
pub fn judge(
    booking: &Watch<'_>,
    history: &UtilHistory,
    threshold_pct: u32,
    window_ms: i64,
    now_ms: i64,
) -> Option<bool> {
    let threshold = f64::from(threshold_pct);
    if booking.idle {
        let recent = window_ms.min(WAKE_WINDOW_MS);
        let mean = history.mean_since(booking.cards, now_ms - recent)?;
        return Some(mean < threshold);
    }
    if now_ms - booking.start_ms < window_ms {
        return Some(false);
    }
    let mean = history.mean_since(booking.cards, now_ms - window_ms)?;
    Some(mean < threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(readings: &[(&str, i64, u32)]) -> UtilHistory {
        let mut h = UtilHistory::default();
        for (card, t, u) in readings {
            h.record(card, *t, *u);
        }
        h
    }

    #[test]
    fn the_mean_covers_every_card_and_needs_history_reaching_back() {
        let h = history(&[("a", 0, 0), ("a", 1000, 10), ("b", 0, 20), ("b", 1000, 30)]);
        let cards = vec!["a".to_string(), "b".to_string()];
        assert_eq!(h.mean_since(&cards, 0), Some(15.0));
        assert_eq!(h.mean_since(&cards, 500), Some(20.0));
        assert_eq!(h.mean_since(&cards, -10_000), None);
        assert_eq!(h.mean_since(&["c".to_string()], 0), None);
    }

    #[test]
    fn a_booking_is_idle_only_after_a_whole_quiet_window_and_wakes_on_load() {
        let cards = vec!["a".to_string()];
        let mut h = UtilHistory::default();
        for s in 0..=120 {
            h.record("a", s * 1000, if s < 10 { 50 } else { 1 });
        }
        let fresh = Watch {
            cards: &cards,
            start_ms: 100_000,
            idle: false,
        };
        // Started 20 s ago: too young for a 60 s window.
        assert_eq!(judge(&fresh, &h, 5, 60_000, 120_000), Some(false));
        let old = Watch {
            start_ms: 0,
            ..fresh
        };
        assert_eq!(judge(&old, &h, 5, 60_000, 120_000), Some(true));
        // The busy first ten seconds fall inside a 120 s window: mean about 5.05, not under 5.
        assert_eq!(judge(&old, &h, 5, 120_000, 120_000), Some(false));
        for s in 121..=180 {
            h.record("a", s * 1000, 40);
        }
        let idle = Watch { idle: true, ..old };
        assert_eq!(judge(&idle, &h, 5, 600_000, 180_000), Some(false));
        h.trim(170_000);
        assert_eq!(judge(&idle, &h, 5, 600_000, 180_000), None);
    }
}
