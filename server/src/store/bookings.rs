//! SQL of bookings, maintenance blocks and quotas. Every write that could make two holds
//! overlap runs in one `BEGIN IMMEDIATE` transaction: SQLite then admits one writer at a
//! time, so the overlap check and the insert cannot interleave with another booking's.

use super::{at, insert_audit, ms, AuditEntry, Store, StoreError};
use crate::audit::AuditAction;
use crate::bookings::pick::{self, FreeGpu};
use crate::bookings::quota::{self, BookedSlot, GroupUse};
use crate::bookings::rules::{self, Withdrawal};
use crate::bookings::{BookingError, CardChoice, NewBooking};
use crate::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::booking::{
    Booking, CreateMaintenance, GpuRef, MaintenanceBlock, Quota, QuotaUse, Quotas,
};
use sqlx::{Sqlite, Transaction};
use std::collections::BTreeMap;

type Tx<'a> = Transaction<'a, Sqlite>;

/// A card as the booking tables know it.
#[derive(Clone, Debug, sqlx::FromRow)]
struct CardRow {
    id: i64,
    node: String,
    uuid: String,
    idx: i64,
}

impl CardRow {
    fn gpu(&self) -> GpuRef {
        GpuRef {
            node: self.node.clone(),
            uuid: self.uuid.clone(),
        }
    }
}

const CARD_COLUMNS: &str = "g.id, n.name AS node, g.uuid, g.idx";

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
    ) -> Result<Booking, BookingError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let cards = match &new.cards {
            CardChoice::Named(uuids) => {
                let slot = cards_in_slot(&mut tx, uuids, (new.start, new.end), None).await?;
                if !slot.taken.is_empty() {
                    let names: Vec<String> = slot.taken.iter().map(|g| g.uuid.clone()).collect();
                    return Err(slot.conflict(format!(
                        "{} already booked or in maintenance for part of this slot",
                        names.join(", ")
                    )));
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
                    });
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
            Err(refusal) if new.enforce_quota => return Err(refusal.into()),
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

    /// Cancels an upcoming booking or releases an active one (its end becomes `now`, and the
    /// rest of the slot is free at once).
    pub async fn withdraw_booking(
        &self,
        id: i64,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, BookingError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let booking = self.booking(id, now).await?.ok_or(BookingError::NotFound)?;
        let Some(withdrawal) = rules::withdrawal(booking.state) else {
            return Err(BookingError::invalid(
                "withdraw_live_only",
                format!(
                    "the booking is {}; only upcoming or active ones can be withdrawn",
                    booking.state.as_str()
                ),
            ));
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
        self.emit(Event::CardsChanged(change));
        self.booking(id, now).await?.ok_or(BookingError::NotFound)
    }

    /// Moves a booking's end later, if its cards are free until then and quotas allow.
    pub async fn extend_booking(
        &self,
        id: i64,
        new_end: DateTime<Utc>,
        enforce_quota: bool,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, BookingError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let booking = self.booking(id, now).await?.ok_or(BookingError::NotFound)?;
        rules::check_extension(booking.state, booking.end, new_end)?;
        let uuids: Vec<String> = booking.gpus.iter().map(|g| g.uuid.clone()).collect();
        let slot = cards_in_slot(&mut tx, &uuids, (booking.end, new_end), Some(id)).await?;
        if !slot.taken.is_empty() {
            return Err(slot.conflict("the cards are not free until the new end".into()));
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
            Err(refusal) if enforce_quota => return Err(refusal.into()),
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
        self.emit(Event::CardsChanged(Change::BookingExtended));
        self.booking(id, now).await?.ok_or(BookingError::NotFound)
    }

    /// Every quota: the default, and overrides per group and per user.
    pub async fn quotas(&self) -> Result<Quotas, StoreError> {
        let mut conn = self.pool.acquire().await?;
        read_quotas(&mut conn).await
    }

    /// Replaces every quota with `quotas`, which names groups and users that must exist.
    pub async fn save_quotas(
        &self,
        quotas: &Quotas,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        sqlx::query("DELETE FROM quotas").execute(&mut *tx).await?;
        let mut rows = vec![("default", String::new(), &quotas.default)];
        rows.extend(quotas.groups.iter().map(|(g, q)| ("group", g.clone(), q)));
        rows.extend(quotas.users.iter().map(|(u, q)| ("user", u.clone(), q)));
        for (scope, name, quota) in rows {
            let table = match scope {
                "group" => Some("groups WHERE name = ?1"),
                "user" => Some("users WHERE username = ?1"),
                _ => None,
            };
            if let Some(table) = table {
                let exists: Option<i64> = sqlx::query_scalar(&format!("SELECT 1 FROM {table}"))
                    .bind(&name)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Err(StoreError::Invalid(format!("no {scope} named {name:?}")));
                }
            }
            sqlx::query(
                "INSERT INTO quotas (scope, name, max_gpus, gpu_hours_per_week, max_booking_hours,
                                     max_days_ahead, max_upcoming)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .bind(scope)
            .bind(&name)
            .bind(quota.max_gpus)
            .bind(quota.gpu_hours_per_week)
            .bind(quota.max_booking_hours)
            .bind(quota.max_days_ahead)
            .bind(quota.max_upcoming)
            .execute(&mut *tx)
            .await?;
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Each user's and each group's use now, against the limits that apply to them.
    pub async fn quota_use(&self, now: DateTime<Utc>) -> Result<Vec<QuotaUse>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let quotas = read_quotas(&mut conn).await?;
        let holds: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT b.user_id, b.start_ms, b.end_ms, COUNT(*)
             FROM bookings b JOIN booking_gpus bg ON bg.booking_id = b.id
             WHERE b.status != 'cancelled' AND b.end_ms > ?1
             GROUP BY b.id",
        )
        .bind(ms(now))
        .fetch_all(&mut *conn)
        .await?;
        let users: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, username FROM users ORDER BY username")
                .fetch_all(&mut *conn)
                .await?;
        let memberships: Vec<(String, i64)> = sqlx::query_as(
            "SELECT g.name, m.user_id FROM groups g JOIN group_members m ON m.group_id = g.id",
        )
        .fetch_all(&mut *conn)
        .await?;
        let groups: Vec<String> = sqlx::query_scalar("SELECT name FROM groups ORDER BY name")
            .fetch_all(&mut *conn)
            .await?;
        let holds_of = |members: &[i64]| -> Vec<BookedSlot> {
            holds
                .iter()
                .filter(|(u, ..)| members.contains(u))
                .map(|&(_, s, e, n)| BookedSlot {
                    start: at(s),
                    end: at(e),
                    gpus: n as u32,
                })
                .collect()
        };
        let mut uses = Vec::new();
        for (id, username) in &users {
            let their_groups: Vec<String> = memberships
                .iter()
                .filter(|(_, u)| u == id)
                .map(|(g, _)| g.clone())
                .collect();
            let (gpus_now, gpu_hours_week, upcoming) = quota::current_use(&holds_of(&[*id]), now);
            uses.push(QuotaUse {
                kind: "user".into(),
                name: username.clone(),
                limits: quota::personal_limits(&quotas, username, &their_groups),
                gpus_now,
                gpu_hours_week,
                upcoming,
            });
        }
        for group in &groups {
            let members: Vec<i64> = memberships
                .iter()
                .filter(|(g, _)| g == group)
                .map(|&(_, u)| u)
                .collect();
            let (gpus_now, gpu_hours_week, upcoming) = quota::current_use(&holds_of(&members), now);
            uses.push(QuotaUse {
                kind: "group".into(),
                name: group.clone(),
                limits: quotas.groups.get(group).cloned().unwrap_or_default(),
                gpus_now,
                gpu_hours_week,
                upcoming,
            });
        }
        Ok(uses)
    }

    /// Takes cards out of service for a window. Cards already booked in it are a conflict:
    /// the admin cancels or moves those bookings first.
    pub async fn create_maintenance(
        &self,
        request: &CreateMaintenance,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<MaintenanceBlock, BookingError> {
        if !rules::is_sane_time(request.start) || !rules::is_sane_time(request.end) {
            return Err(rules::InvalidSlot::OutOfRange.into());
        }
        if request.end <= request.start {
            return Err(rules::InvalidSlot::EndNotAfterStart.into());
        }
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let slot =
            cards_in_slot(&mut tx, &request.gpus, (request.start, request.end), None).await?;
        if !slot.bookings.is_empty() {
            let message = format!(
                "bookings {:?} hold these cards in that window; cancel or move them first",
                slot.bookings
            );
            return Err(slot.conflict(message));
        }
        let cards = slot.cards;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO maintenance (start_ms, end_ms, reason, created_at, created_by)
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
        )
        .bind(ms(request.start))
        .bind(ms(request.end))
        .bind(&request.reason)
        .bind(now)
        .bind(audit.actor_user_id)
        .fetch_one(&mut *tx)
        .await?;
        let slot = (request.start, request.end);
        hold_cards(&mut tx, Holder::Maintenance(id), &cards, slot, audit, now).await?;
        tx.commit().await?;
        self.emit(Event::CardsChanged(Change::MaintenanceChanged));
        Ok(MaintenanceBlock {
            id,
            gpus: cards.iter().map(CardRow::gpu).collect(),
            start: request.start,
            end: request.end,
            reason: request.reason.clone(),
        })
    }

    /// Ends a maintenance block (the cards are bookable again); `false` if there is none.
    pub async fn delete_maintenance(
        &self,
        id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let _turn = self.writer.lock().await;
        let mut tx = self.begin_immediate().await?;
        let deleted = sqlx::query("DELETE FROM maintenance WHERE id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if deleted {
            insert_audit(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        if deleted {
            self.emit(Event::CardsChanged(Change::MaintenanceChanged));
        }
        Ok(deleted)
    }

    /// Maintenance blocks that end after `from`.
    pub async fn maintenance_blocks(
        &self,
        from: DateTime<Utc>,
    ) -> Result<Vec<MaintenanceBlock>, StoreError> {
        let rows: Vec<(i64, i64, i64, String, String, String)> = sqlx::query_as(
            "SELECT m.id, m.start_ms, m.end_ms, m.reason, n.name, g.uuid
             FROM maintenance m
             JOIN maintenance_gpus mg ON mg.maintenance_id = m.id
             JOIN gpus g ON g.id = mg.gpu_id JOIN nodes n ON n.id = g.node_id
             WHERE m.end_ms > ?1 ORDER BY m.start_ms, m.id, n.name, g.idx",
        )
        .bind(ms(from))
        .fetch_all(&self.pool)
        .await?;
        let mut blocks: Vec<MaintenanceBlock> = Vec::new();
        for (id, start, end, reason, node, uuid) in rows {
            if blocks.last().is_none_or(|b| b.id != id) {
                blocks.push(MaintenanceBlock {
                    id,
                    gpus: Vec::new(),
                    start: at(start),
                    end: at(end),
                    reason,
                });
            }
            if let Some(block) = blocks.last_mut() {
                block.gpus.push(GpuRef { node, uuid });
            }
        }
        Ok(blocks)
    }
}

/// What a request's cards hold during `[start, end)`: the cards with these UUIDs (an unknown
/// one is refused by name), the live bookings other than `except` and the maintenance blocks
/// that hold any of them then, and which cards those take. One statement, since each is a
/// round trip to the database thread inside the write transaction.
async fn cards_in_slot(
    tx: &mut Tx<'_>,
    uuids: &[String],
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    except: Option<i64>,
) -> Result<SlotCards, BookingError> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        card: CardRow,
        bookings: Option<String>,
        maintenance: Option<String>,
    }
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {CARD_COLUMNS},
                (SELECT group_concat(bg.booking_id) FROM booking_gpus bg
                 WHERE bg.gpu_id = g.id AND bg.live = 1 AND bg.end_ms > ?2 AND bg.start_ms < ?3
                   AND (?4 IS NULL OR bg.booking_id != ?4)) AS bookings,
                (SELECT group_concat(mg.maintenance_id) FROM maintenance_gpus mg
                 WHERE mg.gpu_id = g.id AND mg.end_ms > ?2 AND mg.start_ms < ?3) AS maintenance
         FROM gpus g JOIN nodes n ON n.id = g.node_id
         WHERE g.uuid IN (SELECT value FROM json_each(?1)) ORDER BY n.name, g.idx"
    ))
    .bind(serde_json::to_string(uuids).unwrap_or_default())
    .bind(ms(start))
    .bind(ms(end))
    .bind(except)
    .fetch_all(&mut **tx)
    .await?;
    if let Some(unknown) = uuids
        .iter()
        .find(|u| !rows.iter().any(|r| &r.card.uuid == *u))
    {
        return Err(BookingError::invalid(
            "unknown_gpu",
            format!("no GPU with UUID {unknown:?}"),
        ));
    }
    if rows.len() != uuids.len() {
        return Err(BookingError::invalid(
            "ambiguous_gpu",
            "a GPU UUID is known on more than one node",
        ));
    }
    let ids = |list: &Option<String>| -> Vec<i64> {
        list.as_deref()
            .unwrap_or_default()
            .split(',')
            .filter_map(|id| id.parse().ok())
            .collect()
    };
    let mut slot = SlotCards::default();
    for row in rows {
        let (b, m) = (ids(&row.bookings), ids(&row.maintenance));
        if !b.is_empty() || !m.is_empty() {
            slot.taken.push(row.card.gpu());
        }
        slot.bookings.extend(b);
        slot.maintenance.extend(m);
        slot.cards.push(row.card);
    }
    for list in [&mut slot.bookings, &mut slot.maintenance] {
        list.sort_unstable();
        list.dedup();
    }
    Ok(slot)
}

#[derive(Default)]
struct SlotCards {
    cards: Vec<CardRow>,
    bookings: Vec<i64>,
    maintenance: Vec<i64>,
    taken: Vec<GpuRef>,
}

impl SlotCards {
    fn conflict(self, message: String) -> BookingError {
        BookingError::Conflict {
            message,
            gpus: self.taken,
            bookings: self.bookings,
            maintenance: self.maintenance,
        }
    }
}

/// What holds cards for a slot.
#[derive(Clone, Copy)]
enum Holder {
    Booking(i64),
    Maintenance(i64),
}

/// Records that `holder` holds `cards` for `slot` (one statement for all cards), and audits it
/// with the holder as target.
async fn hold_cards(
    tx: &mut Tx<'_>,
    holder: Holder,
    cards: &[CardRow],
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    audit: AuditEntry,
    now: DateTime<Utc>,
) -> Result<(), BookingError> {
    let (sql, id, target) = match holder {
        Holder::Booking(id) => (
            "INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms)
             SELECT ?1, value, ?2, ?3 FROM json_each(?4)",
            id,
            format!("booking {id}"),
        ),
        Holder::Maintenance(id) => (
            "INSERT INTO maintenance_gpus (maintenance_id, gpu_id, start_ms, end_ms)
             SELECT ?1, value, ?2, ?3 FROM json_each(?4)",
            id,
            format!("maintenance {id}"),
        ),
    };
    let card_ids: Vec<i64> = cards.iter().map(|c| c.id).collect();
    sqlx::query(sql)
        .bind(id)
        .bind(ms(start))
        .bind(ms(end))
        .bind(serde_json::to_string(&card_ids).unwrap_or_default())
        .execute(&mut **tx)
        .await?;
    insert_audit(tx, &AuditEntry { target, ..audit }, now).await?;
    Ok(())
}

/// Cards free for all of `[start, end)`, with the end of their latest earlier booking.
async fn free_cards(
    tx: &mut Tx<'_>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Vec<(CardRow, Option<i64>)>, BookingError> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        card: CardRow,
        last_end: Option<i64>,
    }
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {CARD_COLUMNS},
                (SELECT MAX(bg.end_ms) FROM booking_gpus bg JOIN bookings b ON b.id = bg.booking_id
                 WHERE bg.gpu_id = g.id AND b.status != 'cancelled' AND bg.start_ms < ?1) AS last_end
         FROM gpus g JOIN nodes n ON n.id = g.node_id
         WHERE NOT EXISTS (SELECT 1 FROM booking_gpus bg WHERE bg.gpu_id = g.id AND bg.live = 1
                           AND bg.start_ms < ?2 AND bg.end_ms > ?1)
           AND NOT EXISTS (SELECT 1 FROM maintenance_gpus mg WHERE mg.gpu_id = g.id
                           AND mg.start_ms < ?2 AND mg.end_ms > ?1)
         ORDER BY n.name, g.idx"
    ))
    .bind(ms(start))
    .bind(ms(end))
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.card, r.last_end)).collect())
}

/// Reads what the quota rules need about `user_id` and their groups, and applies them to
/// `request` (a new booking, or booking `replacing` with its new slot).
async fn check_quota(
    tx: &mut Tx<'_>,
    user_id: i64,
    request: &BookedSlot,
    replacing: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Result<(), quota::Refusal>, BookingError> {
    // The quota rows that can apply: the default, the user's own, and their groups' (with
    // the group's id, for summing over members). One statement.
    #[derive(sqlx::FromRow)]
    struct Row {
        scope: String,
        name: String,
        group_id: Option<i64>,
        #[sqlx(flatten)]
        quota: QuotaRow,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT q.scope, q.name, g.id AS group_id, q.max_gpus, q.gpu_hours_per_week,
                q.max_booking_hours, q.max_days_ahead, q.max_upcoming
         FROM quotas q LEFT JOIN groups g ON q.scope = 'group' AND g.name = q.name
         WHERE q.scope = 'default'
            OR (q.scope = 'user' AND q.name = (SELECT username FROM users WHERE id = ?1))
            OR (q.scope = 'group' AND g.id IN (SELECT group_id FROM group_members WHERE user_id = ?1))",
    )
    .bind(user_id)
    .fetch_all(&mut **tx)
    .await?;
    let mut quotas = Quotas::default();
    let mut username = String::new();
    let mut groups: Vec<(i64, String)> = Vec::new();
    for row in rows {
        let quota = Quota::from(row.quota);
        match (row.scope.as_str(), row.group_id) {
            ("user", _) => {
                username = row.name.clone();
                quotas.users.insert(row.name, quota);
            }
            ("group", Some(id)) => {
                groups.push((id, row.name.clone()));
                quotas.groups.insert(row.name, quota);
            }
            _ => quotas.default = quota,
        }
    }
    let names: Vec<String> = groups.iter().map(|(_, n)| n.clone()).collect();
    let limits = quota::personal_limits(&quotas, &username, &names);
    let group_limits: Vec<(i64, &String, &Quota)> = groups
        .iter()
        .filter_map(|(id, name)| quotas.groups.get(name).map(|q| (*id, name, q)))
        .filter(|(_, _, q)| **q != Quota::default())
        .collect();
    if limits == Quota::default() && group_limits.is_empty() {
        // No limit applies: nothing to read.
        return Ok(Ok(()));
    }
    // What can matter: holds within a week either side of the request, and the number of
    // bookings not yet started.
    let window = (request.start - quota::week(), request.end + quota::week());
    let mine = holds(tx, &[user_id], window, replacing, now).await?;
    let mut group_holds = Vec::new();
    for (group_id, name, group_limits) in group_limits {
        let members: Vec<i64> =
            sqlx::query_scalar("SELECT user_id FROM group_members WHERE group_id = ?1")
                .bind(group_id)
                .fetch_all(&mut **tx)
                .await?;
        let held = holds(tx, &members, window, replacing, now).await?;
        group_holds.push((name.clone(), group_limits.clone(), held));
    }
    let uses: Vec<GroupUse<'_>> = group_holds
        .iter()
        .map(|(name, limits, holds)| GroupUse {
            name,
            limits,
            holds,
        })
        .collect();
    Ok(quota::check(&limits, &mine, &uses, request, now))
}

/// Holds of `members` that overlap `window` or have not started by `now` (for the count of
/// upcoming bookings), leaving out booking `except`.
async fn holds(
    tx: &mut Tx<'_>,
    members: &[i64],
    window: (DateTime<Utc>, DateTime<Utc>),
    except: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Vec<BookedSlot>, BookingError> {
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT b.start_ms, b.end_ms, COUNT(*)
         FROM bookings b JOIN booking_gpus bg ON bg.booking_id = b.id
         WHERE b.user_id IN (SELECT value FROM json_each(?1)) AND b.status != 'cancelled'
           AND ((b.end_ms > ?2 AND b.start_ms < ?3) OR b.start_ms > ?5)
           AND (?4 IS NULL OR b.id != ?4)
         GROUP BY b.id",
    )
    .bind(serde_json::to_string(members).unwrap_or_default())
    .bind(ms(window.0))
    .bind(ms(window.1))
    .bind(except)
    .bind(ms(now))
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(s, e, n)| BookedSlot {
            start: at(s),
            end: at(e),
            gpus: n as u32,
        })
        .collect())
}

/// A quota's limits as stored.
#[derive(sqlx::FromRow)]
struct QuotaRow {
    max_gpus: Option<u32>,
    gpu_hours_per_week: Option<f64>,
    max_booking_hours: Option<f64>,
    max_days_ahead: Option<f64>,
    max_upcoming: Option<u32>,
}

impl From<QuotaRow> for Quota {
    fn from(r: QuotaRow) -> Self {
        Quota {
            max_gpus: r.max_gpus,
            gpu_hours_per_week: r.gpu_hours_per_week,
            max_booking_hours: r.max_booking_hours,
            max_days_ahead: r.max_days_ahead,
            max_upcoming: r.max_upcoming,
        }
    }
}

async fn read_quotas(conn: &mut sqlx::SqliteConnection) -> Result<Quotas, StoreError> {
    #[derive(sqlx::FromRow)]
    struct Row {
        scope: String,
        name: String,
        #[sqlx(flatten)]
        quota: QuotaRow,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT scope, name, max_gpus, gpu_hours_per_week, max_booking_hours, max_days_ahead,
                max_upcoming FROM quotas",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut quotas = Quotas::default();
    for r in rows {
        let quota = Quota::from(r.quota);
        match r.scope.as_str() {
            "group" => {
                quotas.groups.insert(r.name, quota);
            }
            "user" => {
                quotas.users.insert(r.name, quota);
            }
            _ => quotas.default = quota,
        }
    }
    Ok(quotas)
}
