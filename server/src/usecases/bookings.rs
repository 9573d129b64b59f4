//! Booking use cases: book, withdraw (cancel an upcoming booking, release an active one),
//! extend, and find the earliest free slots. Who may change a booking: its owner or an admin.

use super::Said;
use super::UseCaseError;
use crate::audit::AuditAction;
use crate::bookings::Rule;
use crate::bookings::{check_request, rules, BookingError, CardChoice, NewBooking};
use crate::store::{AuditEntry, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::{Booking, CreateBooking, FreeSlot};
use lanes_types::query::SlotQuery;

/// Books cards for `actor`, or (admins only) for the user the request names. Admins are not
/// held to quotas; the audit line says for whom an admin booked. `portal`: the booking
/// horizon in days, whether bookings lend their idle cards unless the request says, and the
/// projects a booking may carry (the owner's group's default when it names none).
pub async fn book(
    store: &Store,
    actor: &User,
    request: CreateBooking,
    portal: &lanes_types::account::PortalSettings,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    let (horizon_days, lend_by_default) =
        (portal.booking_horizon_days, portal.lend_idle_by_default);
    let owner = match &request.user {
        Some(name) if name != &actor.username => {
            if !actor.is_admin() {
                return Err(UseCaseError::Forbidden(
                    "only admins may book for another user".into(),
                ));
            }
            store
                .accounts()
                .by_username(name)
                .await?
                .filter(|u| u.enabled)
                .ok_or_else(|| {
                    UseCaseError::Unprocessable(format!("no enabled user named {name:?}").into())
                })?
        }
        _ => actor.clone(),
    };
    let cards = match (request.gpus, request.count) {
        (Some(uuids), None) => CardChoice::Named(uuids),
        (None, Some(count)) => CardChoice::Any(count),
        _ => {
            return Err(BookingError::invalid(
                Rule::GpusOrCount,
                "give either `gpus` (a list of UUIDs) or `count`, not both",
            )
            .into())
        }
    };
    let project = match request.project.filter(|p| !p.is_empty()) {
        Some(name) => Some(known_project(portal, &name)?),
        None => {
            (store.accounts())
                .group_project(&portal.group_projects, owner.id)
                .await?
        }
    };
    let new = NewBooking {
        owner: owner.clone(),
        cards,
        start: request.start,
        end: request.end,
        note: request.note,
        enforce_quota: !actor.is_admin(),
        lend: request.lend.unwrap_or(lend_by_default),
        project,
    };
    check_request(&new, now, horizon_days)?;
    let mut detail = format!("{} → {}", new.start.to_rfc3339(), new.end.to_rfc3339());
    if owner.id != actor.id {
        detail.push_str(&format!("; for {}", owner.username));
    }
    if new.lend {
        detail.push_str("; lends its idle cards");
    }
    if let Some(project) = &new.project {
        detail.push_str(&format!("; project {project}"));
    }
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingCreate, "").detail(detail);
    Ok(store.bookings().create(&new, audit, now).await?)
}

/// `name` if it is one of the admins' projects, else a refusal that names the projects there are.
pub fn known_project(
    portal: &lanes_types::account::PortalSettings,
    name: &str,
) -> Result<String, UseCaseError> {
    if portal.projects.iter().any(|p| p.name == name) {
        return Ok(name.to_string());
    }
    let known: Vec<&str> = portal.projects.iter().map(|p| p.name.as_str()).collect();
    Err(UseCaseError::Unprocessable(
        match known.is_empty() {
            true => format!("{name:?} is not a project: the admins have defined none"),
            false => format!(
                "{name:?} is not a project; the projects are {}",
                known.join(", ")
            ),
        }
        .into(),
    ))
}

/// The booking, or "no such booking".
pub async fn find(store: &Store, id: i64, now: DateTime<Utc>) -> Result<Booking, UseCaseError> {
    store
        .bookings()
        .get(id, now)
        .await?
        .ok_or(UseCaseError::NotFound(Said::NoSuchBooking))
}

/// The booking, if `actor` may change it: its owner or an admin.
pub async fn changeable(
    store: &Store,
    actor: &User,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    let booking = find(store, id, now).await?;
    if booking.user_id != actor.id && !actor.is_admin() {
        return Err(UseCaseError::Forbidden(Said::NotYourBooking));
    }
    Ok(booking)
}

/// Exchanges one card of a booking for a free card of the same node (its owner or an admin):
/// how a member leaves a failing card. A card taken meanwhile is a conflict; nothing changes.
pub async fn move_card(
    store: &Store,
    actor: &User,
    id: i64,
    request: &lanes_types::health::MoveCard,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    changeable(store, actor, id, now).await?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingMove, "");
    Ok(store
        .bookings()
        .move_card(id, &request.from, &request.to, audit, now)
        .await?)
}

/// Cancels an upcoming booking or releases an active one.
pub async fn withdraw(
    store: &Store,
    actor: &User,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    changeable(store, actor, id, now).await?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingWithdraw, "");
    Ok(store.bookings().withdraw(id, audit, now).await?)
}

/// Takes back the cards booking `id` lends now (its owner or an admin): the borrowers get
/// SIGTERM, SIGKILL after the queue's lending grace, and wait in the queue again. The booking
/// as it is after.
pub async fn reclaim(
    store: &Store,
    actor: &User,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    let booking = changeable(store, actor, id, now).await?;
    if booking.loan_of.is_some() {
        return Err(BookingError::invalid(
            Rule::Loan,
            "this booking is itself a loan of another booking's cards; its holder takes them back",
        )
        .into());
    }
    let audit = AuditEntry::new(Some(actor.id), AuditAction::LoanReclaim, "")
        .detail("asked for by its holder");
    store.lending().reclaim_loans(id, audit, now).await?;
    find(store, id, now).await
}

/// Moves a booking's end later. A queue job's booking keeps its length: the scheduler sized it
/// to the job's time limit, and a longer one would let the job run past the limit admins set.
pub async fn extend(
    store: &Store,
    actor: &User,
    id: i64,
    end: DateTime<Utc>,
    horizon_days: u32,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    changeable(store, actor, id, now).await?;
    if let Some(job) = store.jobs().queued_of_booking(id).await? {
        return Err(BookingError::invalid(
            Rule::QueueBooking,
            format!(
                "this booking holds the cards of queue job {job}; it lasts the job's time limit and cannot be extended"
            ),
        )
        .into());
    }
    rules::check_end(end, now, horizon_days).map_err(BookingError::from)?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingExtend, "");
    Ok(store
        .bookings()
        .extend(id, end, !actor.is_admin(), audit, now)
        .await?)
}

/// The most windows one search returns.
pub const MAX_SLOTS: u32 = 50;

/// The earliest windows in which `query.gpus` cards of one node are free for `query.duration`
/// and `actor` may book them (admins are not held to quotas, as when they book).
pub async fn find_slots(
    store: &Store,
    actor: &User,
    query: SlotQuery,
    horizon_days: u32,
    now: DateTime<Utc>,
) -> Result<Vec<FreeSlot>, UseCaseError> {
    use lanes_types::units;
    let duration = units::parse_duration(&query.duration).map_err(UseCaseError::BadRequest)?;
    let min_memory_bytes = query
        .min_memory
        .as_deref()
        .map(units::parse_bytes)
        .transpose()
        .map_err(UseCaseError::BadRequest)?;
    if query.gpus == 0 || query.gpus as usize > crate::bookings::MAX_CARDS {
        return Err(BookingError::invalid(
            Rule::Count,
            format!("gpus must be 1 to {}", crate::bookings::MAX_CARDS),
        )
        .into());
    }
    if duration <= chrono::Duration::zero() {
        return Err(BookingError::invalid(Rule::Duration, "the duration must be positive").into());
    }
    let limit = query.limit.unwrap_or(5);
    if limit == 0 || limit > MAX_SLOTS {
        return Err(
            BookingError::invalid(Rule::Limit, format!("limit must be 1 to {MAX_SLOTS}")).into(),
        );
    }
    let horizon = now + chrono::Duration::days(i64::from(horizon_days));
    let from = query.from.unwrap_or(now).max(now);
    let to = query
        .to
        .unwrap_or(from + chrono::Duration::days(7))
        .min(horizon);
    if !rules::is_sane_time(from) || to - from < duration {
        return Err(BookingError::invalid(
            Rule::TimeRange,
            format!(
                "the range from {} to {} is shorter than {} (bookings end at most {horizon_days} days ahead)",
                from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                lanes_types::units::format_duration(duration),
            ),
        )
        .into());
    }
    let search = crate::bookings::find::Search {
        count: query.gpus,
        duration,
        from,
        to,
        limit: limit as usize,
    };
    let filter = crate::store::CardFilter {
        node: query.node,
        min_memory_bytes,
    };
    Ok(store
        .bookings()
        .free_slots(actor.id, &search, &filter, !actor.is_admin(), now)
        .await?)
}
