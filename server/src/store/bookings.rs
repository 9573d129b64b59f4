//! SQL of bookings. Every write that could make two holds
//! overlap runs in one `BEGIN IMMEDIATE` transaction: SQLite then admits one writer at a
//! time, so the overlap check and the insert cannot interleave with another booking's.

use super::quotas::check_quota;
use super::slots::*;
use super::{at, insert_audit, ms, AuditEntry, Store, StoreError};
use crate::audit::AuditAction;
use crate::bookings::pick::{self, FreeGpu};
use crate::bookings::quota::BookedSlot;
use crate::bookings::rules::{self, Withdrawal};
use crate::bookings::{BookingError, CardChoice, NewBooking};
use crate::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, GpuRef};
use sqlx::Sqlite;
use std::collections::BTreeMap;

/// Which bookings to list.
#[derive(Clone, Debug, Default)]
pub struct BookingFilter {
    /// Bookings that end after this...
    pub from: Option<DateTime<Utc>>,
    /// ...and start before this.
    pub to: Option<DateTime<Utc>>,
    pub user_id: Option<i64>,
    pub gpu_uuid: Option<String>,
    /// Include cancelled bookings.
    pub include_cancelled: bool,
}

impl Store {
    /// Books cards for a slot: checks the slot is free on every card (and, if asked, the
    /// owner's quotas), then inserts, all in one immediate transaction.
    pub async fn create_booking(
        &self,
        new: &NewBooking,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let cards = match &new.cards {
            CardChoice::Named(uuids) => {
                let slot = cards_in_slot(&mut tx, uuids, (new.start, new.end), None).await?;
                if !slot.taken.is_empty() {
                    let names: Vec<String> = slot.taken.iter().map(|g| g.uuid.clone()).collect();
                    return Err(slot
                        .conflict(format!(
                            "{} already booked or in maintenance for part of this slot",
                            names.join(", ")
                        ))
                        .into());
                }
                slot.cards
            }
            CardChoice::Any(count) => {
                let free = free_cards(&mut tx, new.start, new.end).await?;
                let candidates: Vec<FreeGpu> = free
                    .iter()
                    .map(|(card, last)| FreeGpu {
                        gpu: card.gpu(),
                        index: card.idx,
                        last_booked: last.map(at),
                    })
                    .collect();
                let Some(chosen) = pick::pick(&candidates, *count as usize) else {
                    return Err(BookingError::Conflict {
                        message: format!(
                            "only {} GPUs are free for the whole slot; {count} were asked for",
                            free.len()
                        ),
                        gpus: Vec::new(),
                        bookings: Vec::new(),
                        maintenance: Vec::new(),
                    }
                    .into());
                };
                free.into_iter()
                    .map(|(card, _)| card)
                    .filter(|card| chosen.contains(&card.gpu()))
                    .collect()
            }
        };
        let request = BookedSlot {
            start: new.start,
            end: new.end,
            gpus: cards.len() as u32,
        };
        let verdict = check_quota(&mut tx, new.owner.id, &request, None, now).await?;
        let audit = match verdict {
            Err(refusal) if new.enforce_quota => return Err(BookingError::from(refusal).into()),
            Err(refusal) => {
                let detail = format!("{}; beyond quota: {refusal}", audit.detail);
                audit.detail(detail)
            }
            Ok(()) => audit,
        };
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO bookings (user_id, start_ms, end_ms, note, created_at, created_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )
        .bind(new.owner.id)
        .bind(ms(new.start))
        .bind(ms(new.end))
        .bind(&new.note)
        .bind(now)
        .bind(audit.actor_user_id)
        .fetch_one(&mut *tx)
        .await?;
        hold_cards(
            &mut tx,
            Holder::Booking(id),
            &cards,
            (new.start, new.end),
            audit,
            now,
        )
        .await?;
        tx.commit().await?;
        self.emit(Event::CardsChanged(Change::BookingCreated));
        Ok(Booking {
            id,
            user_id: new.owner.id,
            username: new.owner.username.clone(),
            display_name: new.owner.display_name.clone(),
            gpus: cards.iter().map(CardRow::gpu).collect(),
            start: new.start,
            end: new.end,
            note: new.note.clone(),
            state: rules::state_at(new.start, new.end, false, false, now),
            created_at: now,
            idle_since: None,
            queue_job: None,
        })
    }

    /// One booking, with its state at `now`.
    pub async fn booking(
        &self,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Booking>, StoreError> {
        let filter = BookingFilter {
            include_cancelled: true,
            ..Default::default()
        };
        Ok(self
            .list_bookings(&filter, Some(id), now)
            .await?
            .into_iter()
            .next())
    }

    /// Bookings matching `filter`, by start time.
    pub async fn bookings(
        &self,
        filter: &BookingFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<Booking>, StoreError> {
        self.list_bookings(filter, None, now).await
    }

    async fn list_bookings(
        &self,
        filter: &BookingFilter,
        id: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Vec<Booking>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            user_id: i64,
            username: String,
            display_name: String,
            start_ms: i64,
            end_ms: i64,
            note: String,
            status: String,
            created_at: DateTime<Utc>,
            idle_since_ms: Option<i64>,
            queue_job: Option<i64>,
        }
        // Built per call, so that each filter present can use its index.
        let mut sql = sqlx::QueryBuilder::<Sqlite>::new(
            "SELECT b.id, b.user_id, u.username, u.display_name, b.start_ms, b.end_ms, b.note,
                    b.status, b.created_at, b.idle_since_ms,
                    (SELECT j.id FROM jobs j WHERE j.booking_id = b.id AND j.gpus IS NOT NULL
                     LIMIT 1) AS queue_job
             FROM bookings b JOIN users u ON u.id = b.user_id WHERE 1 = 1",
        );
        if let Some(id) = id {
            sql.push(" AND b.id = ").push_bind(id);
        }
        if let Some(from) = filter.from {
            sql.push(" AND b.end_ms > ").push_bind(ms(from));
        }
        if let Some(to) = filter.to {
            sql.push(" AND b.start_ms < ").push_bind(ms(to));
        }
        if let Some(user_id) = filter.user_id {
            sql.push(" AND b.user_id = ").push_bind(user_id);
        }
        if !filter.include_cancelled {
            sql.push(" AND b.status != 'cancelled'");
        }
        if let Some(uuid) = &filter.gpu_uuid {
            sql.push(
                " AND EXISTS (SELECT 1 FROM booking_gpus bg JOIN gpus g ON g.id = bg.gpu_id
                   WHERE bg.booking_id = b.id AND g.uuid = ",
            )
            .push_bind(uuid.clone())
            .push(")");
        }
        sql.push(" ORDER BY b.start_ms, b.id");
        let rows: Vec<Row> = sql.build_query_as().fetch_all(&self.pool).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let cards: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT bg.booking_id, n.name, g.uuid
             FROM booking_gpus bg JOIN gpus g ON g.id = bg.gpu_id JOIN nodes n ON n.id = g.node_id
             WHERE bg.booking_id IN (SELECT value FROM json_each(?1))
             ORDER BY n.name, g.idx",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .fetch_all(&self.pool)
        .await?;
        let mut by_booking: BTreeMap<i64, Vec<GpuRef>> = BTreeMap::new();
        for (booking, node, uuid) in cards {
            by_booking
                .entry(booking)
                .or_default()
                .push(GpuRef { node, uuid });
        }
        Ok(rows
            .into_iter()
            .map(|r| {
                let (start, end) = (at(r.start_ms), at(r.end_ms));
                Booking {
                    state: rules::state_at(
                        start,
                        end,
                        r.status == "cancelled",
                        r.status == "released",
                        now,
                    ),
                    gpus: by_booking.remove(&r.id).unwrap_or_default(),
                    id: r.id,
                    user_id: r.user_id,
                    username: r.username,
                    display_name: r.display_name,
                    start,
                    end,
                    note: r.note,
                    created_at: r.created_at,
                    idle_since: r.idle_since_ms.map(at),
                    queue_job: r.queue_job,
                }
            })
            .collect())
    }

    /// Starts a change of booking `id`: this store's write turn, an IMMEDIATE transaction, and
    /// the booking as it is now ("no such booking" when there is none).
    async fn change_booking(
        &self,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<
        (
            tokio::sync::MutexGuard<'_, ()>,
            sqlx::Transaction<'static, sqlx::Sqlite>,
            Booking,
        ),
        StoreError,
    > {
        let turn = self.writer.lock().await;
        let tx = self.begin_immediate().await?;
        let booking = self
            .booking(id, now)
            .await?
            .ok_or(StoreError::from(BookingError::NotFound))?;
        Ok((turn, tx, booking))
    }

    /// Cancels an upcoming booking or releases an active one (its end becomes `now`, and the
    /// rest of the slot is free at once).
    pub async fn withdraw_booking(
        &self,
        id: i64,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let (_turn, mut tx, booking) = self.change_booking(id, now).await?;
        let Some(withdrawal) = rules::withdrawal(booking.state) else {
            return Err(BookingError::invalid(
                "withdraw_live_only",
                format!(
                    "the booking is {}; only upcoming or active ones can be withdrawn",
                    booking.state.as_str()
                ),
            )
            .into());
        };
        let (status, end, action) = match withdrawal {
            Withdrawal::Cancel => ("cancelled", booking.end, AuditAction::BookingCancel),
            // A slot keeps at least a millisecond (a job may end the moment it started).
            Withdrawal::Release => (
                "released",
                now.max(booking.start + chrono::Duration::milliseconds(1)),
                AuditAction::BookingRelease,
            ),
        };
        sqlx::query("UPDATE bookings SET status = ?2, end_ms = ?3 WHERE id = ?1")
            .bind(id)
            .bind(status)
            .bind(ms(end))
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE booking_gpus SET live = ?2, end_ms = ?3 WHERE booking_id = ?1")
            .bind(id)
            .bind(withdrawal == Withdrawal::Release)
            .bind(ms(end))
            .execute(&mut *tx)
            .await?;
        // Who asked (the enforcer, the queue) tells which change it was.
        let change = match (withdrawal, audit.action) {
            (Withdrawal::Cancel, _) => Change::BookingCancelled,
            (Withdrawal::Release, AuditAction::BookingReleaseIdle) => Change::IdleReleased,
            (Withdrawal::Release, AuditAction::QueueRelease) => Change::QueueJobReleased,
            (Withdrawal::Release, _) => Change::BookingReleased,
        };
        let audit = AuditEntry {
            action,
            target: format!("booking {id}"),
            ..audit
        };
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        // Read back before anyone hears of it, so the answer is the booking as this call left it.
        let booking = self.booking(id, now).await?;
        self.emit(Event::CardsChanged(change));
        booking.ok_or(BookingError::NotFound.into())
    }

    /// Moves a booking's end later, if its cards are free until then and quotas allow.
    pub async fn extend_booking(
        &self,
        id: i64,
        new_end: DateTime<Utc>,
        enforce_quota: bool,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let (_turn, mut tx, booking) = self.change_booking(id, now).await?;
        rules::check_extension(booking.state, booking.end, new_end).map_err(BookingError::from)?;
        let uuids: Vec<String> = booking.gpus.iter().map(|g| g.uuid.clone()).collect();
        let slot = cards_in_slot(&mut tx, &uuids, (booking.end, new_end), Some(id)).await?;
        if !slot.taken.is_empty() {
            return Err(slot
                .conflict("the cards are not free until the new end".into())
                .into());
        }
        let cards = slot.cards;
        let request = BookedSlot {
            start: booking.start,
            end: new_end,
            gpus: cards.len() as u32,
        };
        let verdict = check_quota(&mut tx, booking.user_id, &request, Some(id), now).await?;
        let mut detail = format!(
            "end {} → {}",
            booking.end.to_rfc3339(),
            new_end.to_rfc3339()
        );
        match verdict {
            Err(refusal) if enforce_quota => return Err(BookingError::from(refusal).into()),
            Err(refusal) => detail.push_str(&format!("; beyond quota: {refusal}")),
            Ok(()) => {}
        }
        sqlx::query("UPDATE bookings SET end_ms = ?2 WHERE id = ?1")
            .bind(id)
            .bind(ms(new_end))
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE booking_gpus SET end_ms = ?2 WHERE booking_id = ?1")
            .bind(id)
            .bind(ms(new_end))
            .execute(&mut *tx)
            .await?;
        let audit = AuditEntry {
            action: AuditAction::BookingExtend,
            target: format!("booking {id}"),
            ..audit
        }
        .detail(detail);
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        // Read back before anyone hears of it, so the answer is the booking as this call left it.
        let booking = self.booking(id, now).await?;
        self.emit(Event::CardsChanged(Change::BookingExtended));
        booking.ok_or(BookingError::NotFound.into())
    }
}
