//! Finding a slot: the earliest windows in which N cards of one node are free for a whole
//! duration and the caller's quota allows booking them. Plain Rust, no I/O, `now` passed in.
//!
//! Starts are tried at `from`, at every moment a hold ends (a card frees up exactly then), and
//! on every whole minute, up to the latest start that still ends by `to`. A card's freedom
//! changes only at its holds' edges, but a weekly GPU-hours quota can open at any moment, so the
//! minute grid is what makes "no earlier window fits" exact (to the minute) for every rule at
//! once. A node contributes one window per run of consecutive starts at which it fits: the
//! run's first start.

use super::quota::BookedSlot;
use super::GpuRef;
use chrono::{DateTime, Duration, DurationRound, Utc};
use lanes_types::booking::FreeSlot;

/// A card that may be booked, with the intervals in which it is held (bookings, maintenance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub gpu: GpuRef,
    /// Its index on its node: windows name cards in this order.
    pub index: i64,
    /// Half-open `[start, end)` holds, in any order.
    pub busy: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

/// What is asked: `count` cards of one node for `duration`, starting at `from` or later and
/// ending by `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Search {
    pub count: u32,
    pub duration: Duration,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// At most this many windows.
    pub limit: usize,
}

/// The grid step of starts after `from`.
pub fn step() -> Duration {
    Duration::minutes(1)
}

/// The starts tried, earliest first: `from`, the ends of `cards`' holds after it, and every
/// whole minute after it, up to the latest start that ends by `to`.
pub fn starts(search: &Search, cards: &[Card]) -> impl Iterator<Item = DateTime<Utc>> {
    let last = search.to - search.duration;
    let first_minute = search
        .from
        .duration_trunc(step())
        .map(|t| if t <= search.from { t + step() } else { t })
        .unwrap_or(search.from + step());
    let mut ends: Vec<DateTime<Utc>> = cards
        .iter()
        .flat_map(|c| c.busy.iter().map(|&(_, e)| e))
        .filter(|&e| e > search.from && e <= last && e.duration_trunc(step()).ok() != Some(e))
        .collect();
    ends.sort_unstable();
    ends.dedup();
    let minutes = std::iter::successors(Some(first_minute), |t| Some(*t + step()))
        .take_while(move |t| *t <= last);
    let mut ends = ends.into_iter().peekable();
    let merged = minutes.flat_map(move |minute| {
        // The hold ends before this minute, then the minute.
        let mut before = Vec::new();
        while let Some(end) = ends.next_if(|&e| e < minute) {
            before.push(end);
        }
        before.into_iter().chain(std::iter::once(minute))
    });
    std::iter::once(search.from)
        .chain(merged)
        .take_while(move |t| *t <= last)
}

/// Whether `card` is free for all of `[start, end)`.
pub fn is_free(card: &Card, start: DateTime<Utc>, end: DateTime<Utc>) -> bool {
    card.busy.iter().all(|&(s, e)| e <= start || end <= s)
}

/// The earliest windows, ranked by start then node name. `allowed` says whether the caller's
/// quota admits a booking of this slot.
pub fn find(
    cards: &[Card],
    search: &Search,
    allowed: impl Fn(&BookedSlot) -> bool,
) -> Vec<FreeSlot> {
    let count = search.count as usize;
    if count == 0 || search.limit == 0 || search.duration <= Duration::zero() {
        return Vec::new();
    }
    // Cards by node, in index order; each card's holds sorted by end, with a cursor that only
    // moves forward as starts grow (a hold that ended by a start stays behind it).
    let mut nodes: std::collections::BTreeMap<&str, Vec<Sweep<'_>>> = Default::default();
    for card in cards {
        let mut busy = card.busy.clone();
        busy.sort_by_key(|&(_, e)| e);
        nodes.entry(&card.gpu.node).or_default().push(Sweep {
            card,
            busy,
            next: 0,
        });
    }
    for node in nodes.values_mut() {
        node.sort_by_key(|s| s.card.index);
    }
    nodes.retain(|_, cards| cards.len() >= count);
    let mut found = Vec::new();
    // Nodes that fitted at the previous start: a run goes on, no new window.
    let mut fitted: std::collections::BTreeSet<&str> = Default::default();
    for start in starts(search, cards) {
        let end = start + search.duration;
        let mut quota: Option<bool> = None;
        let mut fitting = std::collections::BTreeSet::new();
        for (&node, sweeps) in nodes.iter_mut() {
            let free: Vec<&Card> = sweeps
                .iter_mut()
                .filter_map(|s| s.free_for(start, end).then_some(s.card))
                .collect();
            if free.len() < count {
                continue;
            }
            let within = *quota.get_or_insert_with(|| {
                allowed(&BookedSlot {
                    start,
                    end,
                    gpus: search.count,
                })
            });
            if !within {
                break;
            }
            fitting.insert(node);
            if !fitted.contains(node) {
                found.push(FreeSlot {
                    node: node.to_string(),
                    start,
                    end,
                    gpus: free.iter().take(count).map(|c| c.gpu.clone()).collect(),
                    free_cards: free.len() as u32,
                });
                if found.len() == search.limit {
                    return found;
                }
            }
        }
        fitted = fitting;
    }
    found
}

/// A card's holds and how far past them the starts have moved.
struct Sweep<'a> {
    card: &'a Card,
    /// Sorted by end.
    busy: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    /// Holds before this one ended by the current start.
    next: usize,
}

impl Sweep<'_> {
    /// Free for `[start, end)`; starts must not decrease between calls.
    fn free_for(&mut self, start: DateTime<Utc>, end: DateTime<Utc>) -> bool {
        while self.next < self.busy.len() && self.busy[self.next].1 <= start {
            self.next += 1;
        }
        // Holds still ahead end after `start`: any that begins before `end` overlaps.
        self.busy[self.next..].iter().all(|&(s, _)| s >= end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bookings::quota;
    use lanes_types::booking::Quota;
    use proptest::prelude::*;

    fn t(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minutes * 60, 0).unwrap()
    }

    fn card(node: &str, index: i64, busy: &[(i64, i64)]) -> Card {
        Card {
            gpu: GpuRef {
                node: node.into(),
                uuid: format!("GPU-{node}-{index}"),
            },
            index,
            busy: busy.iter().map(|&(s, e)| (t(s), t(e))).collect(),
        }
    }

    fn search(count: u32, minutes: i64, from: i64, to: i64) -> Search {
        Search {
            count,
            duration: Duration::minutes(minutes),
            from: t(from),
            to: t(to),
            limit: 5,
        }
    }

    #[test]
    fn the_earliest_window_of_each_node_comes_first_with_its_cards() {
        let cards = [
            card("a", 0, &[(0, 120)]),
            card("a", 1, &[]),
            card("b", 0, &[(0, 30)]),
            card("b", 1, &[(10, 60)]),
        ];
        let found = find(&cards, &search(2, 60, 0, 600), |_| true);
        let got: Vec<(&str, DateTime<Utc>)> =
            found.iter().map(|w| (w.node.as_str(), w.start)).collect();
        assert_eq!(got, [("b", t(60)), ("a", t(120))]);
        assert_eq!(found[1].gpus[0].uuid, "GPU-a-0");
        assert_eq!(found[0].end, t(120));
    }

    #[test]
    fn a_node_gives_a_new_window_only_after_a_gap() {
        // Node a fits from 0 to 100, not while the hold at 100..200 overlaps, and again from 200.
        let cards = [card("a", 0, &[(100, 200)])];
        let found = find(&cards, &search(1, 30, 0, 400), |_| true);
        let starts: Vec<_> = found.iter().map(|w| w.start).collect();
        assert_eq!(starts, [t(0), t(200)]);
    }

    #[test]
    fn a_start_off_the_minute_is_tried_then_the_grid() {
        let from = t(0) + Duration::seconds(20);
        let s = Search {
            from,
            ..search(1, 5, 0, 8)
        };
        let held = [card("a", 0, &[])];
        let tried: Vec<_> = starts(&s, &held).collect();
        assert_eq!(tried, [from, t(1), t(2), t(3)]);
        // A hold that ends off the minute: its end is a start of its own.
        let end = t(1) + Duration::seconds(30);
        let held = [Card {
            busy: vec![(t(0), end)],
            ..card("a", 0, &[])
        }];
        let found = find(&held, &s, |_| true);
        assert_eq!(found[0].start, end);
        let tried: Vec<_> = starts(&s, &held).collect();
        assert_eq!(tried, [from, t(1), end, t(2), t(3)]);
    }

    #[test]
    fn the_quota_moves_the_window_later() {
        // One GPU-hour a week, and an hour already booked from 0 to 60: the next hour may start
        // only when that one is a week in the past.
        let cards = [card("a", 0, &[]), card("a", 1, &[])];
        let mine = [quota::BookedSlot {
            start: t(0),
            end: t(60),
            gpus: 1,
        }];
        let limits = Quota {
            gpu_hours_per_week: Some(1.0),
            ..Quota::default()
        };
        let allowed = |slot: &BookedSlot| quota::check(&limits, &mine, &[], slot, t(0)).is_ok();
        let found = find(&cards, &search(1, 60, 0, 20_000), allowed);
        assert_eq!(found[0].start, t(0) + quota::week());
    }

    #[test]
    fn nothing_fits_when_too_few_cards_or_too_short_a_range() {
        let cards = [card("a", 0, &[]), card("b", 0, &[])];
        assert!(find(&cards, &search(2, 60, 0, 600), |_| true).is_empty());
        assert!(find(&cards, &search(1, 60, 0, 59), |_| true).is_empty());
        assert!(find(&cards, &search(1, 60, 0, 600), |_| false).is_empty());
    }

    proptest! {
        /// Every window is free and within quota, and no earlier start fits on its node (nor
        /// anywhere, for the first window), checked by trying every start without the sweep.
        #[test]
        fn windows_are_free_within_quota_and_none_earlier_fits(
            holds in proptest::collection::vec((0usize..5, 0i64..300, 1i64..120, 0i64..60), 0..12),
            mine in proptest::collection::vec((0i64..300, 1i64..200, 1u32..3), 0..4),
            count in 1u32..4,
            minutes in 1i64..120,
            max_gpus in proptest::option::of(1u32..5),
            weekly in proptest::option::of(1.0f64..12.0),
        ) {
            let names = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)];
            let cards: Vec<Card> = names.iter().enumerate().map(|(i, &(node, index))| {
                // Holds end off the minute too (a released booking ends when it was released).
                let busy = holds.iter().filter(|h| h.0 == i)
                    .map(|&(_, s, l, sec)| (t(s), t(s + l) + Duration::seconds(sec))).collect();
                Card { busy, ..card(node, index, &[]) }
            }).collect();
            let mine: Vec<BookedSlot> = mine.iter().map(|&(s, l, g)| BookedSlot {
                start: t(s), end: t(s + l), gpus: g,
            }).collect();
            let limits = Quota { max_gpus, gpu_hours_per_week: weekly, ..Quota::default() };
            let allowed = |slot: &BookedSlot| quota::check(&limits, &mine, &[], slot, t(0)).is_ok();
            let s = Search { limit: 50, ..search(count, minutes, 0, 600) };
            let found = find(&cards, &s, allowed);
            let fits = |node: &str, start: DateTime<Utc>| {
                let end = start + s.duration;
                let free = cards.iter().filter(|c| c.gpu.node == node && is_free(c, start, end)).count();
                free >= count as usize && allowed(&BookedSlot { start, end, gpus: count })
            };
            for w in &found {
                prop_assert_eq!(w.end - w.start, s.duration);
                prop_assert!(w.start >= s.from && w.end <= s.to);
                prop_assert_eq!(w.gpus.len(), count as usize);
                for gpu in &w.gpus {
                    prop_assert_eq!(&gpu.node, &w.node);
                    let c = cards.iter().find(|c| &c.gpu == gpu).unwrap();
                    prop_assert!(is_free(c, w.start, w.end));
                }
                let within = allowed(&BookedSlot { start: w.start, end: w.end, gpus: count });
                prop_assert!(within);
            }
            for node in ["a", "b"] {
                let first = found.iter().find(|w| w.node == node).map(|w| w.start);
                for start in starts(&s, &cards).take_while(|t| first.is_none_or(|f| *t < f)) {
                    let early = !fits(node, start);
                    prop_assert!(early, "{}", format!("{node} fits at {start} before {first:?}"));
                }
            }
            if let Some(first) = found.first() {
                prop_assert!(found.windows(2).all(|p| p[0].start <= p[1].start));
                for start in starts(&s, &cards).take_while(|t| *t < first.start) {
                    prop_assert!(!fits("a", start) && !fits("b", start));
                }
            }
        }
    }
}
