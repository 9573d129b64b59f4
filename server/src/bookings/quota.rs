//! Fairness quotas. Admins set a default, and overrides per group and per user.
//!
//! - Limits on a user's total use (GPUs at any instant, GPU-hours in any 7 days, upcoming
//!   bookings) come from the user's own override, else the default.
//! - Limits on one booking (its length, how far ahead it ends) come from the user's override,
//!   else the strictest of the user's groups, else the default.
//! - A group's total-use limits bound the sum over all its members.

use super::{Quota, Quotas};
use chrono::{DateTime, Duration, Utc};
use lanes_types::rule::Rule;

/// A booking as quotas see it: a slot and how many cards it books.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BookedSlot {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub gpus: u32,
}

impl BookedSlot {
    pub fn hours(&self) -> f64 {
        (self.end - self.start).num_milliseconds() as f64 / 3_600_000.0
    }

    /// GPU-hours of this hold inside `[from, to)`.
    pub fn gpu_hours_in(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
        let start = self.start.max(from);
        let end = self.end.min(to);
        if end <= start {
            return 0.0;
        }
        (end - start).num_milliseconds() as f64 / 3_600_000.0 * f64::from(self.gpus)
    }

    fn holds_at(&self, t: DateTime<Utc>) -> bool {
        self.start <= t && t < self.end
    }
}

/// The rolling window of the GPU-hours limit.
pub fn week() -> Duration {
    Duration::days(7)
}

/// Why a booking was refused: the limit it would break, with the use and the request, typed.
/// `group` is the limited group's name, `None` for the member's own limit. Its `Display` is
/// the English sentence; pages and the API say it in the caller's language from the fields.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// The booking is `hours` long; the longest allowed is `max`.
    BookingHours { hours: f64, max: f64 },
    /// The booking ends `days` from now; bookings may end up to `max` days ahead.
    DaysAhead { days: f64, max: f64 },
    /// The holder would hold `peak` GPUs at `at`; its limit is `max`.
    Gpus {
        group: Option<String>,
        peak: u32,
        at: String,
        max: u32,
    },
    /// The holder would use `hours` GPU-hours in the 7 days from `from`; its limit is `max`.
    GpuHours {
        group: Option<String>,
        hours: f64,
        from: String,
        max: f64,
    },
    /// The holder would have `upcoming` upcoming bookings; its limit is `max`.
    Upcoming {
        group: Option<String>,
        upcoming: u32,
        max: u32,
    },
}

impl Refusal {
    /// The rule it breaks, as the API names it.
    pub fn rule(&self) -> Rule {
        match self {
            Refusal::BookingHours { .. } => Rule::MaxBookingHours,
            Refusal::DaysAhead { .. } => Rule::MaxDaysAhead,
            Refusal::Gpus { .. } => Rule::MaxGpus,
            Refusal::GpuHours { .. } => Rule::GpuHoursPerWeek,
            Refusal::Upcoming { .. } => Rule::MaxUpcoming,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holder = |group: &Option<String>| match group {
            None => ("you".to_string(), "your"),
            Some(name) => (format!("group {name}"), "its"),
        };
        match self {
            Refusal::BookingHours { hours, max } => write!(
                f,
                "the booking is {hours:.1} h long; your longest allowed is {max} h"
            ),
            Refusal::DaysAhead { days, max } => write!(
                f,
                "the booking ends {days:.1} days from now; you may book up to {max} days ahead"
            ),
            Refusal::Gpus {
                group,
                peak,
                at,
                max,
            } => {
                let (whose, limit_of) = holder(group);
                write!(
                    f,
                    "{whose} would hold {peak} GPUs at {at}; {limit_of} limit is {max}"
                )
            }
            Refusal::GpuHours {
                group,
                hours,
                from,
                max,
            } => {
                let (whose, limit_of) = holder(group);
                write!(
                    f,
                    "{whose} would use {hours:.1} GPU-hours in the 7 days from {from}; \
                     {limit_of} limit is {max}"
                )
            }
            Refusal::Upcoming {
                group,
                upcoming,
                max,
            } => {
                let (whose, limit_of) = holder(group);
                write!(
                    f,
                    "{whose} would have {upcoming} upcoming bookings; {limit_of} limit is {max}"
                )
            }
        }
    }
}

impl std::error::Error for Refusal {}

/// One of the requesting user's groups: its limits and every member's holds (the user's
/// included).
pub struct GroupUse<'a> {
    pub name: &'a str,
    pub limits: &'a Quota,
    pub holds: &'a [BookedSlot],
}

/// The limits that apply to `username`, a member of `groups`, for their own use and bookings.
pub fn personal_limits(quotas: &Quotas, username: &str, groups: &[String]) -> Quota {
    let own = quotas.users.get(username).cloned().unwrap_or_default();
    let default = &quotas.default;
    let strictest_group = |field: fn(&Quota) -> Option<f64>| {
        groups
            .iter()
            .filter_map(|g| quotas.groups.get(g).and_then(field))
            .min_by(f64::total_cmp)
    };
    Quota {
        max_gpus: own.max_gpus.or(default.max_gpus),
        gpu_hours_per_week: own.gpu_hours_per_week.or(default.gpu_hours_per_week),
        max_upcoming: own.max_upcoming.or(default.max_upcoming),
        max_booking_hours: own
            .max_booking_hours
            .or_else(|| strictest_group(|q| q.max_booking_hours))
            .or(default.max_booking_hours),
        max_days_ahead: own
            .max_days_ahead
            .or_else(|| strictest_group(|q| q.max_days_ahead))
            .or(default.max_days_ahead),
    }
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// Most cards held at one instant during `request`, counting `request`, and the first instant
/// that has it.
pub fn peak_gpus(holds: &[BookedSlot], request: &BookedSlot) -> (u32, DateTime<Utc>) {
    let candidates = std::iter::once(request.start).chain(
        holds
            .iter()
            .map(|h| h.start)
            .filter(|&s| request.start < s && s < request.end),
    );
    let mut best = (0, request.start);
    for t in candidates {
        let held: u32 = holds
            .iter()
            .chain(std::iter::once(request))
            .filter(|h| h.holds_at(t))
            .map(|h| h.gpus)
            .sum();
        if held > best.0 || (held == best.0 && t < best.1) {
            best = (held, t);
        }
    }
    best
}

/// Most GPU-hours inside one 7-day window that overlaps `request`, counting `request`, and the
/// start of that window. The total over a sliding window peaks when one of its edges meets the
/// edge of a hold, so only those windows are tried.
pub fn peak_week_hours(holds: &[BookedSlot], request: &BookedSlot) -> (f64, DateTime<Utc>) {
    let all: Vec<BookedSlot> = holds
        .iter()
        .chain(std::iter::once(request))
        .copied()
        .collect();
    let mut best = (0.0, request.start);
    for from in all.iter().flat_map(|h| [h.start, h.end - week()]) {
        let to = from + week();
        if !(from < request.end && request.start < to) {
            continue;
        }
        let total: f64 = all.iter().map(|h| h.gpu_hours_in(from, to)).sum();
        if total > best.0 + 1e-9 {
            best = (total, from);
        }
    }
    best
}

/// Checks a new (or extended) booking `request` against the user's `limits`, given the user's
/// other holds `mine` and the use of each of their groups.
pub fn check(
    limits: &Quota,
    mine: &[BookedSlot],
    groups: &[GroupUse<'_>],
    request: &BookedSlot,
    now: DateTime<Utc>,
) -> Result<(), Refusal> {
    if let Some(max) = limits.max_booking_hours {
        if request.hours() > max + 1e-9 {
            return Err(Refusal::BookingHours {
                hours: request.hours(),
                max,
            });
        }
    }
    if let Some(max) = limits.max_days_ahead {
        let ahead = (request.end - now).num_milliseconds() as f64 / 86_400_000.0;
        if ahead > max + 1e-9 {
            return Err(Refusal::DaysAhead { days: ahead, max });
        }
    }
    let total_use = |holds: &[BookedSlot], quota: &Quota, group: Option<&str>| {
        let group = || group.map(str::to_string);
        if let Some(max) = quota.max_gpus {
            let (peak, at) = peak_gpus(holds, request);
            if peak > max {
                return Err(Refusal::Gpus {
                    group: group(),
                    peak,
                    at: when(at),
                    max,
                });
            }
        }
        if let Some(max) = quota.gpu_hours_per_week {
            let (hours, from) = peak_week_hours(holds, request);
            if hours > max + 1e-9 {
                return Err(Refusal::GpuHours {
                    group: group(),
                    hours,
                    from: when(from),
                    max,
                });
            }
        }
        if let (Some(max), true) = (quota.max_upcoming, request.start > now) {
            let upcoming = holds.iter().filter(|h| h.start > now).count() as u32 + 1;
            if upcoming > max {
                return Err(Refusal::Upcoming {
                    group: group(),
                    upcoming,
                    max,
                });
            }
        }
        Ok(())
    };
    total_use(mine, limits, None)?;
    for group in groups {
        total_use(group.holds, group.limits, Some(group.name))?;
    }
    Ok(())
}

/// Current use for the quota page: GPUs held now and GPU-hours booked in the next 7 days
/// (holds outside that week count for neither; bookings not yet started are counted in SQL).
pub fn current_use(holds: &[BookedSlot], now: DateTime<Utc>) -> (u32, f64) {
    let now_gpus = holds
        .iter()
        .filter(|h| h.holds_at(now))
        .map(|h| h.gpus)
        .sum();
    let week_hours = holds
        .iter()
        .map(|h| h.gpu_hours_in(now, now + week()))
        .sum();
    (now_gpus, week_hours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    fn hold(from: i64, to: i64, gpus: u32) -> BookedSlot {
        BookedSlot {
            start: t(from),
            end: t(to),
            gpus,
        }
    }

    fn limit(f: impl FnOnce(&mut Quota)) -> Quota {
        let mut q = Quota::default();
        f(&mut q);
        q
    }

    #[test]
    fn a_refusal_names_the_limit_the_use_and_the_moment() {
        let limits = limit(|q| q.max_gpus = Some(4));
        let mine = [hold(10, 20, 2), hold(14, 16, 2)];
        let err = check(&limits, &mine, &[], &hold(12, 18, 2), t(0)).unwrap_err();
        assert_eq!(err.rule(), Rule::MaxGpus);
        assert_eq!(
            err.to_string(),
            format!("you would hold 6 GPUs at {}; your limit is 4", when(t(14)))
        );
        // Back to back with the peak is fine.
        assert!(check(&limits, &mine, &[], &hold(16, 18, 2), t(0)).is_ok());
    }

    #[test]
    fn gpu_hours_count_within_any_seven_days() {
        let limits = limit(|q| q.gpu_hours_per_week = Some(40.0));
        // 30 GPU-hours on day 0; another 20 on day 6 is over, on day 8 it is not.
        let mine = [hold(0, 15, 2)];
        let err = check(&limits, &mine, &[], &hold(6 * 24, 6 * 24 + 10, 2), t(0)).unwrap_err();
        assert_eq!(err.rule(), Rule::GpuHoursPerWeek);
        assert!(
            err.to_string().contains("would use 50.0 GPU-hours"),
            "{}",
            err
        );
        assert!(check(&limits, &mine, &[], &hold(8 * 24, 8 * 24 + 10, 2), t(0)).is_ok());
    }

    #[test]
    fn length_horizon_and_upcoming_count_are_limited() {
        let limits = limit(|q| {
            q.max_booking_hours = Some(8.0);
            q.max_days_ahead = Some(14.0);
            q.max_upcoming = Some(2);
        });
        let rule = |mine: &[BookedSlot], r: BookedSlot| {
            check(&limits, mine, &[], &r, t(0)).err().map(|e| e.rule())
        };
        assert_eq!(rule(&[], hold(1, 10, 1)), Some(Rule::MaxBookingHours));
        assert_eq!(
            rule(&[], hold(15 * 24, 15 * 24 + 1, 1)),
            Some(Rule::MaxDaysAhead)
        );
        assert_eq!(
            rule(&[hold(1, 2, 1), hold(3, 4, 1)], hold(5, 6, 1)),
            Some(Rule::MaxUpcoming)
        );
        assert_eq!(rule(&[hold(1, 2, 1)], hold(5, 6, 1)), None);
    }

    #[test]
    fn a_group_limit_bounds_the_sum_over_its_members() {
        let group_limit = limit(|q| q.max_gpus = Some(8));
        let members = [hold(0, 10, 4), hold(0, 10, 3)];
        let groups = [GroupUse {
            name: "vision",
            limits: &group_limit,
            holds: &members,
        }];
        let err = check(&Quota::default(), &[], &groups, &hold(5, 6, 2), t(0)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("group vision would hold 9 GPUs"),
            "{}",
            err
        );
        assert!(check(&Quota::default(), &[], &groups, &hold(5, 6, 1), t(0)).is_ok());
    }

    #[test]
    fn the_most_specific_limit_wins() {
        let quotas = Quotas {
            default: limit(|q| {
                q.max_gpus = Some(2);
                q.max_booking_hours = Some(24.0);
            }),
            groups: BTreeMap::from([
                ("a".into(), limit(|q| q.max_booking_hours = Some(12.0))),
                ("b".into(), limit(|q| q.max_booking_hours = Some(6.0))),
            ]),
            users: BTreeMap::from([("ada".into(), limit(|q| q.max_gpus = Some(8)))]),
        };
        let ada = personal_limits(&quotas, "ada", &["a".into(), "b".into()]);
        assert_eq!(ada.max_gpus, Some(8));
        assert_eq!(ada.max_booking_hours, Some(6.0));
        let bob = personal_limits(&quotas, "bob", &[]);
        assert_eq!((bob.max_gpus, bob.max_booking_hours), (Some(2), Some(24.0)));
    }

    /// Brute force: GPUs held at each whole hour, and GPU-hours in each 7-day window starting
    /// at a whole hour (all holds in these tests start and end on whole hours).
    fn brute_peaks(holds: &[BookedSlot]) -> (u32, f64) {
        let mut gpus = 0;
        let mut hours: f64 = 0.0;
        for h in -200..400 {
            gpus = gpus.max(
                holds
                    .iter()
                    .filter(|x| x.holds_at(t(h)))
                    .map(|x| x.gpus)
                    .sum(),
            );
            hours = hours.max(
                holds
                    .iter()
                    .map(|x| x.gpu_hours_in(t(h), t(h) + week()))
                    .sum(),
            );
        }
        (gpus, hours)
    }

    proptest! {
        /// Whatever sequence of requests arrives, accepting only what `check` allows never
        /// puts a user over the GPU or GPU-hours limit at any moment.
        #[test]
        fn accepted_bookings_never_exceed_the_limits(
            requests in prop::collection::vec((0i64..200, 1i64..48, 1u32..5), 1..40),
            max_gpus in 1u32..8,
            max_hours in 10.0f64..400.0,
        ) {
            let limits = Quota {
                max_gpus: Some(max_gpus),
                gpu_hours_per_week: Some(max_hours),
                ..Quota::default()
            };
            let mut accepted: Vec<BookedSlot> = Vec::new();
            for (start, length, gpus) in requests {
                let request = hold(start, start + length, gpus);
                if check(&limits, &accepted, &[], &request, t(0)).is_ok() {
                    accepted.push(request);
                }
            }
            let (peak_gpus, peak_hours) = brute_peaks(&accepted);
            prop_assert!(peak_gpus <= max_gpus, "{peak_gpus} > {max_gpus}");
            prop_assert!(peak_hours <= max_hours + 1e-6, "{peak_hours} > {max_hours}");
        }

        /// The fast peaks agree with brute force.
        #[test]
        fn peaks_match_brute_force(
            holds in prop::collection::vec((0i64..200, 1i64..48, 1u32..5), 1..12),
        ) {
            let holds: Vec<BookedSlot> = holds.into_iter().map(|(s, l, g)| hold(s, s + l, g)).collect();
            let (request, rest) = holds.split_last().unwrap();
            let (brute_gpus, _) = brute_peaks(&holds);
            let (gpus, _) = peak_gpus(rest, request);
            // The fast peak only looks inside the request; it never exceeds the global one and
            // equals it when the request is part of the peak.
            prop_assert!(gpus <= brute_gpus);
            let inside = (request.start.timestamp()..request.end.timestamp())
                .step_by(3600)
                .map(|s| holds.iter().filter(|x| x.holds_at(DateTime::from_timestamp(s, 0).unwrap())).map(|x| x.gpus).sum::<u32>())
                .max()
                .unwrap();
            prop_assert_eq!(gpus, inside);
        }
    }
}
