//! Booking use cases: book, withdraw (cancel an upcoming booking, release an active one) and
//! extend. Who may change a booking: its owner or an admin.

use super::UseCaseError;
use crate::audit::AuditAction;
use crate::bookings::{check_request, rules, BookingError, CardChoice, NewBooking};
use crate::store::{AuditEntry, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::{Booking, CreateBooking};

/// Books cards for `actor`, or (admins only) for the user the request names. Admins are not
/// held to quotas; the audit line says for whom an admin booked.
pub async fn book(
    store: &Store,
    actor: &User,
    request: CreateBooking,
    horizon_days: u32,
    now: DateTime<Utc>,
) -> Result<Booking, UseCaseError> {
    let owner = match &request.user {
        Some(name) if name != &actor.username => {
            if !actor.is_admin() {
                return Err(UseCaseError::Forbidden(
                    "only admins may book for another user".into(),
                ));
            }
            store
                .user_by_username(name)
                .await?
                .filter(|u| u.enabled)
                .ok_or_else(|| {
                    UseCaseError::Unprocessable(format!("no enabled user named {name:?}"))
                })?
        }
        _ => actor.clone(),
    };
    let cards = match (request.gpus, request.count) {
        (Some(uuids), None) => CardChoice::Named(uuids),
        (None, Some(count)) => CardChoice::Any(count),
        _ => {
            return Err(BookingError::invalid(
                "gpus_or_count",
                "give either `gpus` (a list of UUIDs) or `count`, not both",
            )
            .into())
        }
    };
    let new = NewBooking {
        owner: owner.clone(),
        cards,
        start: request.start,
        end: request.end,
        note: request.note,
        enforce_quota: !actor.is_admin(),
    };
    check_request(&new, now, horizon_days)?;
    let mut detail = format!("{} → {}", new.start.to_rfc3339(), new.end.to_rfc3339());
    if owner.id != actor.id {
        detail.push_str(&format!("; for {}", owner.username));
    }
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingCreate, "").detail(detail);
    Ok(store.create_booking(&new, audit, now).await?)
}

/// The booking, or "no such booking".
pub async fn find(store: &Store, id: i64, now: DateTime<Utc>) -> Result<Booking, UseCaseError> {
    store
        .booking(id, now)
        .await?
        .ok_or_else(|| UseCaseError::NotFound("no such booking".into()))
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
        return Err(UseCaseError::Forbidden(
            "only the booking's owner or an admin may change it".into(),
        ));
    }
    Ok(booking)
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
    Ok(store.withdraw_booking(id, audit, now).await?)
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
    if let Some(job) = store.queue_job_of_booking(id).await? {
        return Err(BookingError::invalid(
            "queue_booking",
            format!(
                "this booking holds the cards of queue job {job}; it lasts the job's time limit and cannot be extended"
            ),
        )
        .into());
    }
    rules::check_end(end, now, horizon_days).map_err(BookingError::from)?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::BookingExtend, "");
    Ok(store
        .extend_booking(id, end, !actor.is_admin(), audit, now)
        .await?)
}
