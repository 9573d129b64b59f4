//! Bookings: who holds which cards when. The rules here are plain Rust with no I/O: slot
//! validation and states (`rules`), fairness quotas (`quota`), choosing cards for an "any N"
//! request (`pick`), finding the earliest free windows (`find`), and each write's decisions
//! (`plan`), which the bookings repository calls between reading and writing, inside its
//! transaction.

pub mod find;
pub mod pick;
pub mod plan;
pub mod quota;
pub mod rules;

pub use lanes_types::booking::{Booking, BookingState, GpuRef, Quota, Quotas};
pub use lanes_types::rule::Rule;

/// Why a booking operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BookingError {
    /// A slot against the rules of slots (its own sentences, in every language).
    #[error(transparent)]
    Slot(#[from] rules::InvalidSlot),
    /// Against another rule of requests; `message` says it in English only.
    #[error("{message}")]
    Invalid { rule: Rule, message: String },
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
    /// More cards than any node of the pool has: no wait would ever give them.
    #[error("the pool's largest node has {largest} GPUs; {asked} were asked for (a booking's cards are on one node)")]
    BeyondPool { asked: u32, largest: usize },
}

impl BookingError {
    pub fn invalid(rule: Rule, message: impl Into<String>) -> Self {
        BookingError::Invalid {
            rule,
            message: message.into(),
        }
    }

    /// The rule it breaks, if it is against one.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            BookingError::Slot(slot) => Some(slot.rule()),
            BookingError::Invalid { rule, .. } => Some(*rule),
            BookingError::Quota(refusal) => Some(refusal.rule()),
            BookingError::BeyondPool { .. } => Some(Rule::Count),
            BookingError::Conflict { .. } | BookingError::NotFound => None,
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
    /// The project it is for.
    pub project: Option<String>,
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
            Rule::NoteLength,
            format!("the note must be at most {MAX_NOTE} characters"),
        ));
    }
    match &new.cards {
        CardChoice::Named(uuids) if uuids.is_empty() || uuids.len() > MAX_CARDS => Err(
            BookingError::invalid(Rule::Gpus, format!("name 1 to {MAX_CARDS} GPUs")),
        ),
        CardChoice::Named(uuids) => {
            let mut seen = std::collections::BTreeSet::new();
            match uuids.iter().find(|u| !seen.insert(u.as_str())) {
                Some(dup) => Err(BookingError::invalid(
                    Rule::Gpus,
                    format!("GPU {dup} is named twice"),
                )),
                None => Ok(()),
            }
        }
        CardChoice::Any(0) => Err(BookingError::invalid(
            Rule::Count,
            "count must be at least 1",
        )),
        CardChoice::Any(n) if *n as usize > MAX_CARDS => Err(BookingError::invalid(
            Rule::Count,
            format!("count must be at most {MAX_CARDS}"),
        )),
        CardChoice::Any(_) => Ok(()),
    }
}
