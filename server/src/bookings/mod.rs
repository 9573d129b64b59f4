//! Bookings: who holds which cards when. The rules here are plain Rust with no I/O: slot
//! validation and states (`rules`), fairness quotas (`quota`), choosing cards for an "any N"
//! request (`pick`), and finding the earliest free windows (`find`). The store runs them inside the write transaction that inserts.

pub mod find;
pub mod pick;
pub mod quota;
pub mod rules;

pub use lanes_types::booking::{Booking, BookingState, GpuRef, Quota, Quotas};

/// Why a booking operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BookingError {
    /// Against a rule of slots or requests; `rule` names it for the API, `args` are the
    /// values its sentence names (for saying it in the caller's language).
    #[error("{message}")]
    Invalid {
        rule: &'static str,
        message: String,
        args: Vec<(&'static str, String)>,
    },
    /// Over a quota.
    #[error(transparent)]
    Quota(#[from] quota::Refusal),
    /// Cards already held (or in maintenance) for part of the slot.
    #[error("{message}")]
    Conflict {
        message: String,
        gpus: Vec<GpuRef>,
        bookings: Vec<i64>,
        maintenance: Vec<i64>,
    },
    #[error("no such booking")]
    NotFound,
}

impl BookingError {
    pub fn invalid(rule: &'static str, message: impl Into<String>) -> Self {
        BookingError::Invalid {
            rule,
            message: message.into(),
            args: Vec::new(),
        }
    }
}

impl From<rules::InvalidSlot> for BookingError {
    fn from(e: rules::InvalidSlot) -> Self {
        let rule = match e {
            rules::InvalidSlot::EndNotAfterStart => "end_after_start",
            rules::InvalidSlot::StartInPast => "start_not_in_past",
            rules::InvalidSlot::NotLonger => "extend_later",
            rules::InvalidSlot::NotExtendable => "extend_live_only",
            rules::InvalidSlot::BeyondHorizon(_) => "horizon",
            rules::InvalidSlot::OutOfRange => "time_range",
        };
        let args = match e {
            rules::InvalidSlot::BeyondHorizon(days) => vec![("days", days.to_string())],
            _ => Vec::new(),
        };
        BookingError::Invalid {
            rule,
            message: e.to_string(),
            args,
        }
    }
}

/// Which cards a request wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardChoice {
    /// These cards, by UUID.
    Named(Vec<String>),
    /// Any this many free cards, chosen by [`pick::pick`].
    Any(u32),
}

/// A booking to make, already authorized: `owner` is who it is for.
#[derive(Clone, Debug)]
pub struct NewBooking {
    pub owner: lanes_types::account::User,
    pub cards: CardChoice,
    pub start: chrono::DateTime<chrono::Utc>,
    pub end: chrono::DateTime<chrono::Utc>,
    pub note: String,
    /// Whether quotas refuse (off for admins, who may go beyond; a would-be refusal is then
    /// only written to the audit log).
    pub enforce_quota: bool,
    /// Lend the cards to preemptible queue jobs while they sit idle.
    pub lend: bool,
}

/// Longest note accepted.
pub const MAX_NOTE: usize = 1000;
/// Most cards one request may name.
pub const MAX_CARDS: usize = 1024;

/// Checks what can be checked before touching the database.
pub fn check_request(
    new: &NewBooking,
    now: chrono::DateTime<chrono::Utc>,
    horizon_days: u32,
) -> Result<(), BookingError> {
    rules::check_new_slot(new.start, new.end, now)?;
    rules::check_end(new.end, now, horizon_days)?;
    if new.note.chars().count() > MAX_NOTE {
        return Err(BookingError::invalid(
            "note_length",
            format!("the note must be at most {MAX_NOTE} characters"),
        ));
    }
    match &new.cards {
        CardChoice::Named(uuids) if uuids.is_empty() || uuids.len() > MAX_CARDS => Err(
            BookingError::invalid("gpus", format!("name 1 to {MAX_CARDS} GPUs")),
        ),
        CardChoice::Named(uuids) => {
            let mut seen = std::collections::BTreeSet::new();
            match uuids.iter().find(|u| !seen.insert(u.as_str())) {
                Some(dup) => Err(BookingError::invalid(
                    "gpus",
                    format!("GPU {dup} is named twice"),
                )),
                None => Ok(()),
            }
        }
        CardChoice::Any(0) => Err(BookingError::invalid("count", "count must be at least 1")),
        CardChoice::Any(n) if *n as usize > MAX_CARDS => Err(BookingError::invalid(
            "count",
            format!("count must be at most {MAX_CARDS}"),
        )),
        CardChoice::Any(_) => Ok(()),
    }
}
