//! A booking write's decisions, made between what the repository read under the owner's turn
//! and what it writes: which cards, whether the quota lets it go ahead, what the audit says,
//! and how a withdrawal ends the booking. Pure functions: the repository reads, calls one of
//! these, then writes what it decided. To add a booking rule, change the function here that
//! decides it and its test below.

use super::pick::{self, FreeGpu};
use super::quota::Refusal;
use super::rules::{self, Withdrawal};
use super::{Booking, BookingError, GpuRef, Rule};
use crate::audit::AuditAction;
use crate::runtime::events::Change;
use chrono::{DateTime, Duration, Utc};

/// What holds a slot's cards besides the booking being written (read under its turn).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// The asked cards somebody else holds for part of the slot.
    pub taken: Vec<GpuRef>,
    /// The bookings that hold them.
    pub bookings: Vec<i64>,
    /// The maintenance blocks that hold them.
    pub maintenance: Vec<i64>,
}

impl Holds {
    fn conflict(self, message: String) -> BookingError {
        BookingError::Conflict {
            message,
            gpus: self.taken,
            bookings: self.bookings,
            maintenance: self.maintenance,
        }
    }
}

/// Named cards are booked as asked when nobody holds any of them in the slot.
pub fn named_cards(holds: Holds) -> Result<(), BookingError> {
    if holds.taken.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = holds.taken.iter().map(|g| g.uuid.as_str()).collect();
    let message = format!(
        "{} already booked or in maintenance for part of this slot",
        names.join(", ")
    );
    Err(holds.conflict(message))
}

/// `count` cards among those free for the whole slot, as [`pick::pick`] chooses them.
pub fn any_cards(free: &[FreeGpu], count: u32) -> Result<Vec<GpuRef>, BookingError> {
    pick::pick(free, count as usize).ok_or_else(|| BookingError::Conflict {
        message: format!(
            "only {} GPUs are free for the whole slot; {count} were asked for",
            free.len()
        ),
        gpus: Vec::new(),
        bookings: Vec::new(),
        maintenance: Vec::new(),
    })
}

/// A request for more cards than the largest node has: refused as such (422, rule `count`),
/// not as "only N are free", which suggests that waiting would help.
pub fn beyond_pool(asked: u32, largest: usize) -> Option<BookingError> {
    (asked as usize > largest).then_some(BookingError::BeyondPool { asked, largest })
}

/// A booking's end moves later only when nobody holds its cards between its end and the new one.
pub fn extension_cards(holds: Holds) -> Result<(), BookingError> {
    if holds.taken.is_empty() {
        return Ok(());
    }
    Err(holds.conflict("the cards are not free until the new end".into()))
}

/// A maintenance block takes its cards only when no booking holds them in its window (other
/// maintenance may overlap: it takes nothing from anyone).
pub fn maintenance_cards(holds: Holds) -> Result<(), BookingError> {
    if holds.bookings.is_empty() {
        return Ok(());
    }
    let message = format!(
        "bookings {:?} hold these cards in that window; cancel or move them first",
        holds.bookings
    );
    Err(holds.conflict(message))
}

/// Whether a write the quota refuses goes ahead: not when quotas are enforced (members); when
/// they are not (admins), it does, and the audit line says what it is beyond. `detail` is the
/// audit detail the write had; the answer is the one to write.
pub fn within_quota(
    verdict: Result<(), Refusal>,
    enforce: bool,
    detail: String,
) -> Result<String, BookingError> {
    match verdict {
        Ok(()) => Ok(detail),
        Err(refusal) if enforce => Err(refusal.into()),
        Err(refusal) if detail.is_empty() => Ok(format!("beyond quota: {refusal}")),
        Err(refusal) => Ok(format!("{detail}; beyond quota: {refusal}")),
    }
}

/// How a withdrawal leaves a booking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Withdrawn {
    /// The status it is stored with.
    pub status: &'static str,
    /// Its end from now on (unchanged when cancelled).
    pub end: DateTime<Utc>,
    /// Whether its cards stay held until that end (a release) or not at all (a cancel).
    pub live: bool,
    pub action: AuditAction,
    /// What the change is announced as; `by` (who asked) tells an idle release or the queue's.
    pub change: Change,
}

/// Cancels an upcoming booking or releases an active one (its end becomes `now`, and the rest
/// of the slot is free at once); refuses any other.
pub fn withdraw(
    booking: &Booking,
    by: AuditAction,
    now: DateTime<Utc>,
) -> Result<Withdrawn, BookingError> {
    let Some(withdrawal) = rules::withdrawal(booking.state) else {
        return Err(BookingError::invalid(
            Rule::WithdrawLiveOnly,
            format!(
                "the booking is {}; only upcoming or active ones can be withdrawn",
                booking.state.as_str()
            ),
        ));
    };
    Ok(match withdrawal {
        Withdrawal::Cancel => Withdrawn {
            status: "cancelled",
            end: booking.end,
            live: false,
            action: AuditAction::BookingCancel,
            change: Change::BookingCancelled,
        },
        Withdrawal::Release => Withdrawn {
            status: "released",
            // A slot keeps at least a millisecond (a job may end the moment it started).
            end: now.max(booking.start + Duration::milliseconds(1)),
            live: true,
            action: AuditAction::BookingRelease,
            change: match by {
                AuditAction::BookingReleaseIdle => Change::IdleReleased,
                AuditAction::QueueRelease => Change::QueueJobReleased,
                _ => Change::BookingReleased,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bookings::quota::Refusal;
    use crate::bookings::BookingState;

    fn gpu(uuid: &str) -> GpuRef {
        GpuRef {
            node: "n1".into(),
            uuid: uuid.into(),
        }
    }

    fn free(uuid: &str, index: i64) -> FreeGpu {
        FreeGpu {
            gpu: gpu(uuid),
            index,
            last_booked: None,
        }
    }

    fn booking(state: BookingState, start: DateTime<Utc>, end: DateTime<Utc>) -> Booking {
        Booking {
            id: 7,
            user_id: 1,
            username: "ana".into(),
            display_name: "Ana".into(),
            gpus: vec![gpu("GPU-a")],
            start,
            end,
            state,
            created_at: start,
            ..Default::default()
        }
    }

    #[test]
    fn named_cards_held_by_anyone_are_refused_with_who_holds_them() {
        assert!(named_cards(Holds::default()).is_ok());
        let holds = Holds {
            taken: vec![gpu("GPU-a"), gpu("GPU-b")],
            bookings: vec![3],
            maintenance: vec![9],
        };
        match named_cards(holds) {
            Err(BookingError::Conflict {
                message,
                gpus,
                bookings,
                maintenance,
            }) => {
                assert_eq!(
                    message,
                    "GPU-a, GPU-b already booked or in maintenance for part of this slot"
                );
                assert_eq!(gpus, vec![gpu("GPU-a"), gpu("GPU-b")]);
                assert_eq!((bookings, maintenance), (vec![3], vec![9]));
            }
            other => panic!("{other:?}"),
        }
        // More than the largest node has: no wait helps, and the refusal says so.
        assert!(beyond_pool(3, 8).is_none());
        match beyond_pool(20, 8) {
            Some(
                e @ BookingError::BeyondPool {
                    asked: 20,
                    largest: 8,
                },
            ) => {
                assert_eq!(e.rule(), Some(Rule::Count));
                assert!(e
                    .to_string()
                    .starts_with("the pool's largest node has 8 GPUs; 20 were asked for"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn any_cards_takes_what_pick_chooses_or_says_how_many_are_free() {
        let cards = [free("GPU-a", 0), free("GPU-b", 1)];
        assert_eq!(any_cards(&cards, 2).unwrap().len(), 2);
        match any_cards(&cards, 3) {
            Err(BookingError::Conflict { message, gpus, .. }) => {
                assert_eq!(
                    message,
                    "only 2 GPUs are free for the whole slot; 3 were asked for"
                );
                assert!(gpus.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_extension_needs_its_cards_free_until_the_new_end() {
        assert!(extension_cards(Holds::default()).is_ok());
        let taken = Holds {
            taken: vec![gpu("GPU-a")],
            bookings: vec![4],
            maintenance: vec![],
        };
        match extension_cards(taken) {
            Err(BookingError::Conflict {
                message, bookings, ..
            }) => {
                assert_eq!(message, "the cards are not free until the new end");
                assert_eq!(bookings, vec![4]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn maintenance_waits_for_bookings_but_not_for_other_maintenance() {
        let under_maintenance = Holds {
            taken: vec![gpu("GPU-a")],
            bookings: vec![],
            maintenance: vec![2],
        };
        assert!(maintenance_cards(under_maintenance).is_ok());
        let booked = Holds {
            taken: vec![gpu("GPU-a")],
            bookings: vec![5, 6],
            maintenance: vec![],
        };
        match maintenance_cards(booked) {
            Err(BookingError::Conflict { message, .. }) => assert_eq!(
                message,
                "bookings [5, 6] hold these cards in that window; cancel or move them first"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_quota_refusal_stops_members_and_is_audited_for_admins() {
        let refusal = || Refusal::Gpus {
            group: None,
            peak: 3,
            at: "Mon 10:00".into(),
            max: 2,
        };
        assert_eq!(within_quota(Ok(()), true, "x".into()).unwrap(), "x");
        assert!(matches!(
            within_quota(Err(refusal()), true, "x".into()),
            Err(BookingError::Quota(_))
        ));
        let admitted = within_quota(Err(refusal()), false, "end a → b".into()).unwrap();
        assert_eq!(admitted, format!("end a → b; beyond quota: {}", refusal()));
        let bare = within_quota(Err(refusal()), false, String::new()).unwrap();
        assert_eq!(bare, format!("beyond quota: {}", refusal()));
    }

    #[test]
    fn upcoming_bookings_are_cancelled_and_active_ones_released_now() {
        let now = Utc::now();
        let hour = Duration::hours(1);
        let upcoming = booking(BookingState::Upcoming, now + hour, now + hour * 2);
        let cancel = withdraw(&upcoming, AuditAction::BookingRelease, now).unwrap();
        assert_eq!(
            (cancel.status, cancel.end, cancel.live),
            ("cancelled", upcoming.end, false)
        );
        assert_eq!(cancel.change, Change::BookingCancelled);

        let active = booking(BookingState::Active, now - hour, now + hour);
        let release = withdraw(&active, AuditAction::BookingRelease, now).unwrap();
        assert_eq!(
            (release.status, release.end, release.live),
            ("released", now, true)
        );
        assert_eq!(release.change, Change::BookingReleased);
        let idle = withdraw(&active, AuditAction::BookingReleaseIdle, now).unwrap();
        assert_eq!(idle.change, Change::IdleReleased);
        let queue = withdraw(&active, AuditAction::QueueRelease, now).unwrap();
        assert_eq!(queue.change, Change::QueueJobReleased);

        // A booking released the moment it started keeps a millisecond.
        let starting = booking(BookingState::Active, now, now + hour);
        let release = withdraw(&starting, AuditAction::BookingRelease, now).unwrap();
        assert_eq!(release.end, now + Duration::milliseconds(1));

        let ended = booking(BookingState::Ended, now - hour * 2, now - hour);
        match withdraw(&ended, AuditAction::BookingRelease, now) {
            Err(BookingError::Invalid { rule, .. }) => assert_eq!(rule, Rule::WithdrawLiveOnly),
            other => panic!("{other:?}"),
        }
    }
}
