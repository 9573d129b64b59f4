//! Wire types of bookings, quotas and maintenance blocks, shared by the REST API and the pages.
//!
//! Times are UTC instants (RFC 3339 on the wire); a slot is the half-open interval
//! `[start, end)`, so back-to-back bookings do not overlap.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A card, named the one way that is unique across nodes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuRef {
    pub node: String,
    pub uuid: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BookingState {
    #[default]
    Upcoming,
    Active,
    Ended,
    Cancelled,
    /// Given back while active: the rest of the slot was freed.
    Released,
}

impl BookingState {
    pub fn as_str(self) -> &'static str {
        match self {
            BookingState::Upcoming => "upcoming",
            BookingState::Active => "active",
            BookingState::Ended => "ended",
            BookingState::Cancelled => "cancelled",
            BookingState::Released => "released",
        }
    }

    /// Whether the booking still holds (or will hold) its cards.
    pub fn holds_cards(self) -> bool {
        matches!(self, BookingState::Upcoming | BookingState::Active)
    }
}

/// A booking. `Default` is an empty upcoming booking at the epoch, for building one field by
/// field (`Booking { id, start, end, ..Default::default() }`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    pub id: i64,
    pub user_id: i64,
    pub username: String,
    pub display_name: String,
    pub gpus: Vec<GpuRef>,
    pub start: DateTime<Utc>,
    /// End of the slot; moved earlier when the booking is released early.
    pub end: DateTime<Utc>,
    pub note: String,
    pub state: BookingState,
    pub created_at: DateTime<Utc>,
    /// Since when its cards have sat idle (the watchdog's idle check); `None` while in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<DateTime<Utc>>,
    /// When its holder last said "still using it" (a one-click answer to an idle warning):
    /// the idle watch starts a new window there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_use_at: Option<DateTime<Utc>>,
    /// The queue job whose cards it holds (the scheduler made it), by the job's link to it,
    /// never by its note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_job: Option<i64>,
    /// Its holder lets preemptible queue jobs borrow its cards while they sit idle.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lend: bool,
    /// A loan: the booking whose idle cards this queue job borrows (it ends when that
    /// booking's holder takes them back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loan_of: Option<i64>,
    /// A loan: every booking whose idle cards it borrows, `loan_of` first (several, all on one
    /// node, for a job wider than one booking; any of their holders' return ends the loan).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lenders: Vec<i64>,
    /// The queue job that borrows its cards now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lent_to: Option<i64>,
    /// The project it is for (statements count its GPU-hours there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

/// Body of `POST /api/v1/bookings`: either `gpus` (UUIDs) or `count`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBooking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    #[serde(default)]
    pub note: String,
    /// Admins only: book for this user instead of oneself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Lend the cards to preemptible queue jobs while they sit idle (taken back as soon as the
    /// holder starts work); absent: as the portal's default says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lend: Option<bool>,
    /// The project it is for, one the admins defined; absent: the holder's group's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

/// Body of `PATCH /api/v1/bookings/{id}`: a later end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendBooking {
    pub end: DateTime<Utc>,
}

/// Limits of one scope; `None` means "no limit here" (a user or group without a value falls
/// back to the default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Most GPUs held at any instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<u32>,
    /// Most GPU-hours within any 7 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours_per_week: Option<f64>,
    /// Longest single booking, in hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_booking_hours: Option<f64>,
    /// How far ahead a booking may end, in days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_days_ahead: Option<f64>,
    /// Most bookings not yet started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_upcoming: Option<u32>,
}

/// All quotas (`GET|PUT /api/v1/quotas`): the default, and overrides by group and by user.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    #[serde(default)]
    pub default: Quota,
    #[serde(default)]
    pub groups: BTreeMap<String, Quota>,
    #[serde(default)]
    pub users: BTreeMap<String, Quota>,
}

/// A window in which cards are out of service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceBlock {
    pub id: i64,
    pub gpus: Vec<GpuRef>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub reason: String,
}

/// Body of `POST /api/v1/maintenance`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateMaintenance {
    pub gpus: Vec<String>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    #[serde(default)]
    pub reason: String,
}

/// Whose limits a quota use measures: a member's or a group's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaHolder {
    User,
    Group,
}

/// A user's or group's use against its limits, for the admin quota page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaUse {
    /// `user` or `group` on the wire.
    pub kind: QuotaHolder,
    pub name: String,
    pub limits: Quota,
    /// GPUs held now.
    pub gpus_now: u32,
    /// GPU-hours booked in the 7 days from now.
    pub gpu_hours_week: f64,
    pub upcoming: u32,
}

/// An answer of `GET /api/v1/slots`: a window in which `gpus` (all of one node) are free for
/// the whole slot and the caller's quota allows booking them. Book it by naming these cards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeSlot {
    pub node: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The cards to book, in the node's index order.
    pub gpus: Vec<GpuRef>,
    /// How many of the node's cards are free for this whole window (at least `gpus.len()`).
    pub free_cards: u32,
}

/// Who holds `card` at `now` (a live booking of it that has begun and not ended), and its next
/// booking after that: what the dashboard cards and `lanes status` say.
pub fn holder_and_next<'a>(
    bookings: &'a [Booking],
    card: &GpuRef,
    now: DateTime<Utc>,
) -> (Option<&'a Booking>, Option<&'a Booking>) {
    let mut on_card: Vec<&Booking> = bookings
        .iter()
        // A loan runs on its host's cards inside the host's slot: the host holds them.
        .filter(|b| b.state.holds_cards() && b.end > now && b.gpus.contains(card))
        .filter(|b| b.loan_of.is_none())
        .collect();
    on_card.sort_by_key(|b| b.start);
    let holder = on_card.iter().find(|b| b.start <= now).copied();
    let next = on_card.iter().find(|b| b.start > now).copied();
    (holder, next)
}
