//! Slots and their states. A slot is the half-open interval `[start, end)`: one that ends at
//! 14:00 and one that starts at 14:00 do not overlap.

use super::{BookingState, Rule};
use chrono::{DateTime, Duration, Utc};

/// How far in the past a start may lie and still count as "now" (clocks differ a little, and
/// a form takes a moment to submit).
pub fn start_grace() -> Duration {
    Duration::minutes(2)
}

/// Why a slot is not acceptable.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSlot {
    #[error("the end must be after the start")]
    EndNotAfterStart,
    #[error("the start is in the past")]
    StartInPast,
    #[error("the new end must be later than the current end")]
    NotLonger,
    #[error("only upcoming or active bookings can be extended")]
    NotExtendable,
    #[error("bookings may end at most {0} days ahead (the admin's booking horizon)")]
    BeyondHorizon(u32),
    #[error("times must lie between 1970 and 9999")]
    OutOfRange,
}

impl InvalidSlot {
    /// The rule it breaks, as the API names it.
    pub fn rule(&self) -> Rule {
        match self {
            InvalidSlot::EndNotAfterStart => Rule::EndAfterStart,
            InvalidSlot::StartInPast => Rule::StartNotInPast,
            InvalidSlot::NotLonger => Rule::ExtendLater,
            InvalidSlot::NotExtendable => Rule::ExtendLiveOnly,
            InvalidSlot::BeyondHorizon(_) => Rule::Horizon,
            InvalidSlot::OutOfRange => Rule::TimeRange,
        }
    }
}

pub fn overlaps(a: (DateTime<Utc>, DateTime<Utc>), b: (DateTime<Utc>, DateTime<Utc>)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The earliest and latest times the API accepts at all (any field, any endpoint): beyond
/// them date arithmetic overflows and no booking, report or history makes sense.
pub fn time_bounds() -> (DateTime<Utc>, DateTime<Utc>) {
    (
        DateTime::from_timestamp(0, 0).unwrap_or_default(),
        // 9999-12-31T23:59:59Z
        DateTime::from_timestamp(253_402_300_799, 0).unwrap_or_default(),
    )
}

/// Whether `t` lies within [`time_bounds`].
pub fn is_sane_time(t: DateTime<Utc>) -> bool {
    let (first, last) = time_bounds();
    (first..=last).contains(&t)
}

/// Checks where a slot, new or extended, may end: within the times the API takes at all and
/// within the booking horizon seen from `now`.
pub fn check_end(
    end: DateTime<Utc>,
    now: DateTime<Utc>,
    horizon_days: u32,
) -> Result<(), InvalidSlot> {
    if !is_sane_time(end) {
        return Err(InvalidSlot::OutOfRange);
    }
    let within = now
        .checked_add_signed(Duration::days(i64::from(horizon_days)))
        .is_some_and(|limit| end <= limit);
    if within {
        Ok(())
    } else {
        Err(InvalidSlot::BeyondHorizon(horizon_days))
    }
}

/// Checks a new slot at `now`.
pub fn check_new_slot(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), InvalidSlot> {
    if !is_sane_time(start) || !is_sane_time(end) {
        return Err(InvalidSlot::OutOfRange);
    }
    if end <= start {
        return Err(InvalidSlot::EndNotAfterStart);
    }
    if start < now - start_grace() {
        return Err(InvalidSlot::StartInPast);
    }
    Ok(())
}

/// What the stored facts of a booking mean at `now`.
pub fn state_at(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    cancelled: bool,
    released: bool,
    now: DateTime<Utc>,
) -> BookingState {
    if cancelled {
        BookingState::Cancelled
    } else if released {
        BookingState::Released
    } else if now < start {
        BookingState::Upcoming
    } else if now < end {
        BookingState::Active
    } else {
        BookingState::Ended
    }
}

/// What `DELETE /api/v1/bookings/{id}` does to a booking in `state`.
#[derive(Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// Not started: the whole booking goes.
    Cancel,
    /// Running: it ends now, and the rest of the slot is free at once.
    Release,
}

pub fn withdrawal(state: BookingState) -> Option<Withdrawal> {
    match state {
        BookingState::Upcoming => Some(Withdrawal::Cancel),
        BookingState::Active => Some(Withdrawal::Release),
        _ => None,
    }
}

/// Checks moving a booking's end from `end` to `new_end` at `now`.
pub fn check_extension(
    state: BookingState,
    end: DateTime<Utc>,
    new_end: DateTime<Utc>,
) -> Result<(), InvalidSlot> {
    if !state.holds_cards() {
        return Err(InvalidSlot::NotExtendable);
    }
    if new_end <= end {
        return Err(InvalidSlot::NotLonger);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    #[test]
    fn back_to_back_slots_do_not_overlap_but_any_shared_moment_does() {
        assert!(!overlaps((t(0), t(2)), (t(2), t(4))));
        assert!(!overlaps((t(2), t(4)), (t(0), t(2))));
        assert!(overlaps((t(0), t(3)), (t(2), t(4))));
        assert!(overlaps((t(0), t(9)), (t(2), t(4))));
    }

    #[test]
    fn a_slot_must_end_after_it_starts_and_not_start_in_the_past() {
        assert_eq!(check_new_slot(t(1), t(2), t(0)), Ok(()));
        assert_eq!(
            check_new_slot(t(2), t(2), t(0)),
            Err(InvalidSlot::EndNotAfterStart)
        );
        assert_eq!(
            check_new_slot(t(0), t(2), t(1)),
            Err(InvalidSlot::StartInPast)
        );
        // "Now", as a form sends it a moment later, is fine.
        assert_eq!(
            check_new_slot(t(1), t(2), t(1) + Duration::seconds(30)),
            Ok(())
        );
    }

    #[test]
    fn states_follow_the_clock_unless_cancelled_or_released() {
        assert_eq!(
            state_at(t(1), t(2), false, false, t(0)),
            BookingState::Upcoming
        );
        assert_eq!(
            state_at(t(1), t(2), false, false, t(1)),
            BookingState::Active
        );
        assert_eq!(
            state_at(t(1), t(2), false, false, t(2)),
            BookingState::Ended
        );
        assert_eq!(
            state_at(t(1), t(2), true, false, t(0)),
            BookingState::Cancelled
        );
        assert_eq!(
            state_at(t(1), t(2), false, true, t(5)),
            BookingState::Released
        );
        assert_eq!(withdrawal(BookingState::Upcoming), Some(Withdrawal::Cancel));
        assert_eq!(withdrawal(BookingState::Active), Some(Withdrawal::Release));
        assert_eq!(withdrawal(BookingState::Ended), None);
    }
}
