//! SQL of bookings. Every write that could make two holds overlap checks and writes in one
//! transaction. On SQLite it is `BEGIN IMMEDIATE`: one writer at a time, so the check and the
//! insert cannot interleave with another booking's. On PostgreSQL bookings of different users
//! run side by side and the database's exclusion constraint refuses overlapping holds, whatever
//! any process's code does; a request that loses such a race checks again and answers as if it
//! had come second (see [`Bookings::create`]).

use super::conn::{run_now, Arg, Conn, Kind, Row};
use super::quotas::check_quota;
use super::slots::*;
use super::sql::{flag, lock, placeholders, Stamp, Tx};
use super::{at, insert_audit, ms, AuditEntry, Lock, StoreError};
use crate::audit::AuditAction;
use crate::bookings::pick::FreeGpu;
use crate::bookings::plan;
use crate::bookings::quota::BookedSlot;
use crate::bookings::rules;
use crate::bookings::{BookingError, CardChoice, NewBooking};
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, BookingState, GpuRef};
use std::collections::BTreeMap;

repository!(
    /// Bookings: holds of cards for a slot, and the free windows between them.
    Bookings, bookings
);

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

/// How often a booking write that lost a race to the exclusion constraint checks again. Each
/// loss means another booking committed on one of its cards, so the next check sees it: a
/// named card is then refused as taken, an any-N request picks among the cards left.
const OVERLAP_RETRIES: usize = 16;

/// Runs a booking write, again while it loses races to other processes (see
/// [`OVERLAP_RETRIES`]).
async fn again_after_overlaps<F, Fut>(mut write: F) -> Result<Booking, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Booking, StoreError>>,
{
    let mut tries = 0;
    loop {
        match write().await {
            Err(StoreError::Overlap(_)) if tries < OVERLAP_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// Writes a checked booking, its holds of `cards` and its audit line: on PostgreSQL in one
/// statement (a data-modifying `WITH`, one round trip), on SQLite in three. Its id.
async fn insert_booking(
    conn: &mut impl Conn,
    new: &NewBooking,
    cards: &[CardRow],
    audit: &AuditEntry,
    now: DateTime<Utc>,
) -> Result<i64, StoreError> {
    let booking = "INSERT INTO bookings (user_id, start_ms, end_ms, note, created_at, created_by,
                                         lend, project)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
    let stamp = Stamp(now).text();
    let mut args: Vec<Arg<'_>> = vec![
        new.owner.id.into(),
        ms(new.start).into(),
        ms(new.end).into(),
        (&new.note).into(),
        stamp.as_str().into(),
        audit.actor_user_id.into(),
        flag(new.lend).into(),
        new.project.as_ref().into(),
    ];
    let id_of = |rows: Vec<Row>| match rows.first() {
        Some(row) => row.int(0),
        None => Err(StoreError::Database(
            "the new booking's id did not come back".into(),
        )),
    };
    if conn.backend() == super::Backend::Postgres {
        // $1-$8 the booking, $9-$11 the rest of its audit line (its time and actor are the
        // booking's $5 and $6), then the cards.
        let card_rows = (0..cards.len())
            .map(|i| format!("(CAST(${} AS BIGINT))", 12 + i))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "WITH b AS ({booking} RETURNING id),
                  g AS (INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms)
                        SELECT b.id, c.gpu_id, $2, $3 FROM b, (VALUES {card_rows}) AS c (gpu_id)),
                  a AS (INSERT INTO audit_log (at, actor_user_id, action, detail, remote_addr, target)
                        SELECT $5, $6, $9, $10, $11, 'booking ' || b.id FROM b)
             SELECT id FROM b"
        );
        args.extend::<[Arg<'_>; 3]>([
            audit.action.as_str().into(),
            (&audit.detail).into(),
            audit.remote_addr.as_ref().into(),
        ]);
        args.extend(cards.iter().map(|c| Arg::from(c.id)));
        return id_of(conn.rows(&sql, &args, &[Kind::Int]).await?);
    }
    let id = id_of(
        conn.rows(&format!("{booking} RETURNING id"), &args, &[Kind::Int])
            .await?,
    )?;
    let card_rows = (0..cards.len())
        .map(|i| format!("(CAST(${} AS BIGINT))", 4 + i))
        .collect::<Vec<_>>()
        .join(", ");
    let mut holds: Vec<Arg<'_>> = vec![id.into(), ms(new.start).into(), ms(new.end).into()];
    holds.extend(cards.iter().map(|c| Arg::from(c.id)));
    conn.execute(
        &format!(
            "INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms)
             SELECT $1, column1, $2, $3 FROM (VALUES {card_rows})"
        ),
        &holds,
    )
    .await?;
    let audit = AuditEntry {
        target: format!("booking {id}"),
        ..audit.clone()
    };
    insert_audit(conn, &audit, now).await?;
    Ok(id)
}

/// Checks and writes a new booking inside `conn`'s write transaction: the slot free on every
/// card (or enough free cards chosen), the owner's quotas, then the rows. The booking as
/// written. `fresh_since_ms`: heartbeats since then are nodes that are up.
async fn create_in(
    conn: &mut impl Conn,
    new: &NewBooking,
    audit: AuditEntry,
    now: DateTime<Utc>,
    fresh_since_ms: i64,
) -> Result<Booking, StoreError> {
    let cards = match &new.cards {
        CardChoice::Named(uuids) => {
            let slot = cards_in_slot(conn, uuids, (new.start, new.end), None).await?;
            plan::named_cards(slot.holds)?;
            slot.cards
        }
        CardChoice::Any(count) => {
            let free = free_cards(conn, new.start, new.end, fresh_since_ms).await?;
            let candidates: Vec<FreeGpu> = free
                .iter()
                .map(|(card, last)| FreeGpu {
                    gpu: card.gpu(),
                    index: card.idx,
                    last_booked: last.map(at),
                })
                .collect();
            let chosen = match plan::any_cards(&candidates, *count) {
                Ok(chosen) => chosen,
                Err(too_few) => {
                    let largest = largest_node(conn, fresh_since_ms).await?;
                    return Err(plan::beyond_pool(*count, largest).unwrap_or(too_few).into());
                }
            };
            let cards: Vec<CardRow> = free
                .into_iter()
                .map(|(card, _)| card)
                .filter(|card| chosen.contains(&card.gpu()))
                .collect();
            if conn.backend() == super::Backend::Postgres {
                // The cards were free when read; under their turns, are they still?
                let uuids: Vec<String> = cards.iter().map(|c| c.uuid.clone()).collect();
                let slot = cards_in_slot(conn, &uuids, (new.start, new.end), None).await?;
                if let Some(taken) = slot.holds.taken.first() {
                    return Err(StoreError::Overlap(format!(
                        "{} was taken while this booking chose it",
                        taken.uuid
                    )));
                }
            }
            cards
        }
    };
    let request = BookedSlot {
        start: new.start,
        end: new.end,
        gpus: cards.len() as u32,
    };
    let verdict = check_quota(conn, new.owner.id, &request, None, now).await?;
    let detail = plan::within_quota(verdict, new.enforce_quota, audit.detail.clone())?;
    let audit = audit.detail(detail);
    let id = insert_booking(conn, new, &cards, &audit, now).await?;
    Ok(Booking {
        id,
        user_id: new.owner.id,
        username: new.owner.username.clone(),
        display_name: new.owner.display_name.clone(),
        gpus: cards.iter().map(CardRow::gpu).collect(),
        // As stored, to the millisecond: the same times every later read gives.
        start: at(ms(new.start)),
        end: at(ms(new.end)),
        note: new.note.clone(),
        state: rules::state_at(new.start, new.end, false, false, now),
        created_at: now,
        idle_since: None,
        in_use_at: None,
        queue_job: None,
        lend: new.lend,
        loan_of: None,
        lenders: Vec::new(),
        lent_to: None,
        project: new.project.clone(),
    })
}

impl Bookings<'_> {
    /// Books cards for a slot: checks the slot is free on every card (and, if asked, the
    /// owner's quotas), then inserts, all in one transaction.
    pub async fn create(
        &self,
        new: &NewBooking,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        again_after_overlaps(|| self.try_create_booking(new, audit.clone(), now)).await
    }

    /// A transaction for changing `user_id`'s bookings: shares the cards with other bookings
    /// (maintenance waits) and takes the user's turn (their quota check sees their last
    /// booking).
    async fn begin_booking_write(&self, user_id: i64) -> Result<Tx<'static>, StoreError> {
        self.begin_serial(&[Lock::Shared(lock::CARDS), Lock::User(user_id)])
            .await
    }

    async fn try_create_booking(
        &self,
        new: &NewBooking,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let fresh = self.fresh_since_ms(now);
        let booking = match &self.local_writer {
            // The SQLite writer runs the whole write in its thread, with the bookings that
            // arrive meanwhile in the same transaction; it refuses, as the pool's writes do,
            // once the database file is gone.
            Some(writer) => {
                let new = new.clone();
                writer
                    .write(move |conn| run_now(create_in(conn, &new, audit, now, fresh)))
                    .await?
            }
            None => {
                let _turn = self.write_turn().await;
                let mut tx = self.begin_booking_write(new.owner.id).await?;
                let booking = create_in(&mut tx, new, audit, now, fresh).await?;
                tx.commit().await?;
                booking
            }
        };
        self.emit(Event::CardsChanged(Change::BookingCreated));
        Ok(booking)
    }

    /// One booking, with its state at `now`.
    pub async fn get(&self, id: i64, now: DateTime<Utc>) -> Result<Option<Booking>, StoreError> {
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
    pub async fn list(
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
            created_at: Stamp,
            idle_since_ms: Option<i64>,
            in_use_ms: Option<i64>,
            queue_job: Option<i64>,
            lend: i64,
            loan_of: Option<i64>,
            project: Option<String>,
        }
        // Built per call, so that each filter present can use its index.
        let mut sql = String::from(
            "SELECT b.id, b.user_id, u.username, u.display_name, b.start_ms, b.end_ms, b.note,
                    b.status, b.created_at, b.idle_since_ms, b.in_use_ms, b.lend, b.loan_of,
                    b.project,
                    (SELECT j.id FROM jobs j WHERE j.booking_id = b.id AND j.gpus IS NOT NULL
                     ORDER BY j.id LIMIT 1) AS queue_job
             FROM bookings b JOIN users u ON u.id = b.user_id WHERE 1 = 1",
        );
        let mut ints: Vec<i64> = Vec::new();
        let mut int_filter = |sql: &mut String, clause: &str, value: i64| {
            ints.push(value);
            sql.push_str(&format!(" AND {clause} ${}", ints.len()));
        };
        if let Some(id) = id {
            int_filter(&mut sql, "b.id =", id);
        }
        if let Some(from) = filter.from {
            int_filter(&mut sql, "b.end_ms >", ms(from));
        }
        if let Some(to) = filter.to {
            int_filter(&mut sql, "b.start_ms <", ms(to));
        }
        if let Some(user_id) = filter.user_id {
            int_filter(&mut sql, "b.user_id =", user_id);
        }
        if !filter.include_cancelled {
            sql.push_str(" AND b.status != 'cancelled'");
        }
        if filter.gpu_uuid.is_some() {
            sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM booking_gpus bg JOIN gpus g ON g.id = bg.gpu_id
                   WHERE bg.booking_id = b.id AND g.uuid = ${})",
                ints.len() + 1
            ));
        }
        sql.push_str(" ORDER BY b.start_ms, b.id");
        let mut query = sqlx::query_as::<_, Row>(&sql);
        for value in &ints {
            query = query.bind(*value);
        }
        if let Some(uuid) = &filter.gpu_uuid {
            query = query.bind(uuid.as_str());
        }
        let rows: Vec<Row> = query.fetch_all(&self.pool).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut cards: Vec<(i64, String, String, Option<i64>)> = Vec::new();
        // A bounded list per statement (PostgreSQL takes at most 65,535 parameters).
        for ids in rows.chunks(10_000) {
            let sql = format!(
                "SELECT bg.booking_id, n.name, g.uuid, bg.lent_by
                 FROM booking_gpus bg JOIN gpus g ON g.id = bg.gpu_id JOIN nodes n ON n.id = g.node_id
                 WHERE bg.booking_id IN ({})
                 ORDER BY n.name, g.idx",
                placeholders(1, ids.len())
            );
            let mut query = sqlx::query_as(&sql);
            for r in ids {
                query = query.bind(r.id);
            }
            cards.extend(query.fetch_all(&self.pool).await?);
        }
        // The queue job each lending booking's live loan (if any) runs now.
        let mut lent_to: BTreeMap<i64, i64> = BTreeMap::new();
        let lenders: Vec<i64> = rows.iter().filter(|r| r.lend != 0).map(|r| r.id).collect();
        for ids in lenders.chunks(10_000) {
            let sql = format!(
                "SELECT DISTINCT bg.lent_by, j.id FROM booking_gpus bg
                 JOIN bookings l ON l.id = bg.booking_id JOIN jobs j ON j.booking_id = l.id
                 WHERE bg.lane = 1 AND l.status = 'live' AND l.start_ms <= $1 AND l.end_ms > $1
                   AND bg.lent_by IN ({})",
                placeholders(2, ids.len())
            );
            let mut query = sqlx::query_as::<_, (i64, i64)>(&sql).bind(ms(now));
            for id in ids {
                query = query.bind(*id);
            }
            lent_to.extend(query.fetch_all(&self.pool).await?);
        }
        let mut by_booking: BTreeMap<i64, Vec<GpuRef>> = BTreeMap::new();
        let mut lenders_of: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (booking, node, uuid, lent_by) in cards {
            by_booking
                .entry(booking)
                .or_default()
                .push(GpuRef { node, uuid });
            if let Some(host) = lent_by {
                let hosts = lenders_of.entry(booking).or_default();
                if !hosts.contains(&host) {
                    hosts.push(host);
                }
            }
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
                    created_at: r.created_at.0,
                    idle_since: r.idle_since_ms.map(at),
                    in_use_at: r.in_use_ms.map(at),
                    queue_job: r.queue_job,
                    lend: r.lend != 0,
                    lenders: lenders_of
                        .remove(&r.id)
                        .map(|mut hosts| {
                            // The first host first.
                            hosts.sort_by_key(|h| (Some(*h) != r.loan_of, *h));
                            hosts
                        })
                        .unwrap_or_default(),
                    loan_of: r.loan_of,
                    lent_to: lent_to.get(&r.id).copied(),
                    project: r.project,
                }
            })
            .collect())
    }

    /// Starts a change of booking `id`: this store's write turn, a transaction serialized
    /// with the owner's other booking writes, and the booking as it is now ("no such booking"
    /// when there is none).
    async fn change_booking(
        &self,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<
        (
            Option<tokio::sync::MutexGuard<'_, ()>>,
            Tx<'static>,
            Booking,
        ),
        StoreError,
    > {
        let turn = self.write_turn().await;
        let tx = match self.backend {
            // The write lock serializes every booking write; no owner to look up.
            super::Backend::Sqlite => self.begin_serial(&[]).await?,
            super::Backend::Postgres => {
                let owner: Option<i64> =
                    sqlx::query_scalar("SELECT user_id FROM bookings WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                let owner = owner.ok_or(StoreError::from(BookingError::NotFound))?;
                self.begin_booking_write(owner).await?
            }
        };
        // Read under the owner's turn, so that no other change of it interleaves.
        let booking = self
            .get(id, now)
            .await?
            .ok_or(StoreError::from(BookingError::NotFound))?;
        Ok((turn, tx, booking))
    }

    /// Cancels an upcoming booking or releases an active one (its end becomes `now`, and the
    /// rest of the slot is free at once).
    pub async fn withdraw(
        &self,
        id: i64,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let (_turn, mut tx, booking) = self.change_booking(id, now).await?;
        let withdrawn = plan::withdraw(&booking, audit.action, now)?;
        let (end, action) = (withdrawn.end, withdrawn.action);
        sqlx::query("UPDATE bookings SET status = $2, end_ms = $3 WHERE id = $1")
            .bind(id)
            .bind(withdrawn.status)
            .bind(ms(end))
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE booking_gpus SET live = $2, end_ms = $3 WHERE booking_id = $1")
            .bind(id)
            .bind(flag(withdrawn.live))
            .bind(ms(end))
            .execute(&mut *tx)
            .await?;
        // Its loans end with it: a loan never outlives its host's hold.
        end_loans(&mut tx, id, end).await?;
        let audit = AuditEntry {
            action,
            target: format!("booking {id}"),
            ..audit
        };
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        // Read back before anyone hears of it, so the answer is the booking as this call left it.
        let booking = self.get(id, now).await?;
        self.emit(Event::CardsChanged(withdrawn.change));
        booking.ok_or(BookingError::NotFound.into())
    }

    /// Moves a booking's end later, if its cards are free until then and quotas allow.
    pub async fn extend(
        &self,
        id: i64,
        new_end: DateTime<Utc>,
        enforce_quota: bool,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        again_after_overlaps(|| {
            self.try_extend_booking(id, new_end, enforce_quota, audit.clone(), now)
        })
        .await
    }

    async fn try_extend_booking(
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
        plan::extension_cards(slot.holds)?;
        let cards = slot.cards;
        let request = BookedSlot {
            start: booking.start,
            end: new_end,
            gpus: cards.len() as u32,
        };
        let verdict = check_quota(&mut tx, booking.user_id, &request, Some(id), now).await?;
        let detail = format!(
            "end {} → {}",
            booking.end.to_rfc3339(),
            new_end.to_rfc3339()
        );
        let detail = plan::within_quota(verdict, enforce_quota, detail)?;
        sqlx::query("UPDATE bookings SET end_ms = $2 WHERE id = $1")
            .bind(id)
            .bind(ms(new_end))
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE booking_gpus SET end_ms = $2 WHERE booking_id = $1")
            .bind(id)
            .bind(ms(new_end))
            .execute(&mut *tx)
            .await
            .map_err(super::slots::overlap_or)?;
        let audit = AuditEntry {
            action: AuditAction::BookingExtend,
            target: format!("booking {id}"),
            ..audit
        }
        .detail(detail);
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        // Read back before anyone hears of it, so the answer is the booking as this call left it.
        let booking = self.get(id, now).await?;
        self.emit(Event::CardsChanged(Change::BookingExtended));
        booking.ok_or(BookingError::NotFound.into())
    }
}

impl Bookings<'_> {
    /// Exchanges card `from` of a live booking for `to`, a card of the same node that nothing
    /// holds for what is left of the booking (from now, or its start if later). A card taken
    /// meanwhile is a conflict and nothing changes; so is a job running on `from` (it runs
    /// under that card's mask: it is stopped or ends first).
    pub async fn move_card(
        &self,
        id: i64,
        from: &GpuRef,
        to: &GpuRef,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        again_after_overlaps(|| self.try_move_card(id, from, to, audit.clone(), now)).await
    }

    async fn try_move_card(
        &self,
        id: i64,
        from: &GpuRef,
        to: &GpuRef,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let refuse = |message: String| -> StoreError {
            BookingError::invalid(crate::bookings::Rule::MoveCard, message).into()
        };
        let (_turn, mut tx, booking) = self.change_booking(id, now).await?;
        if !matches!(booking.state, BookingState::Upcoming | BookingState::Active) {
            return Err(refuse(
                "only an upcoming or active booking's cards can move".into(),
            ));
        }
        if booking.loan_of.is_some() || booking.queue_job.is_some() {
            return Err(refuse(
                "a loan's or a queue job's cards move with the job, not by hand".into(),
            ));
        }
        if !booking.gpus.contains(from) {
            return Err(refuse(format!(
                "booking {id} does not hold GPU {}",
                from.uuid
            )));
        }
        if to.node != from.node || booking.gpus.contains(to) {
            return Err(refuse(
                "a card moves to another card of the same node that the booking does not hold"
                    .into(),
            ));
        }
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE booking_id = $1 AND state IN ('pending', 'running')",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        if running > 0 {
            return Err(refuse(
                "a job of this booking runs on its cards: cancel it (or let it end) first".into(),
            ));
        }
        let start = booking.start.max(now);
        let slot = cards_in_slot(
            &mut tx,
            std::slice::from_ref(&to.uuid),
            (start, booking.end),
            Some(id),
        )
        .await?;
        if slot.cards.iter().any(|c| c.node != to.node) {
            return Err(refuse(format!(
                "GPU {} is not on node {}",
                to.uuid, to.node
            )));
        }
        plan::extension_cards(slot.holds)?;
        let moved = sqlx::query(
            "UPDATE booking_gpus SET gpu_id = $3
             WHERE booking_id = $1 AND gpu_id = (SELECT g.id FROM gpus g JOIN nodes n
                                                 ON n.id = g.node_id
                                                 WHERE n.name = $2 AND g.uuid = $4)",
        )
        .bind(id)
        .bind(&from.node)
        .bind(slot.cards[0].id)
        .bind(&from.uuid)
        .execute(&mut *tx)
        .await
        .map_err(super::slots::overlap_or)?
        .rows_affected();
        if moved != 1 {
            return Err(refuse(format!(
                "booking {id} does not hold GPU {}",
                from.uuid
            )));
        }
        let audit = AuditEntry {
            action: AuditAction::BookingMove,
            target: format!("booking {id}"),
            ..audit
        }
        .detail(format!("{} → {} on {}", from.uuid, to.uuid, to.node));
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        let booking = self.get(id, now).await?;
        self.emit(Event::CardsChanged(Change::BookingMoved));
        booking.ok_or(BookingError::NotFound.into())
    }
}

/// The loans that borrow cards of the booking bound as `$1`.
pub(super) const LOANS_OF_HOST: &str =
    "SELECT DISTINCT booking_id FROM booking_gpus WHERE lane = 1 AND lent_by = $1";

/// Ends the live loans of booking `host`'s cards at `end` (or at once, for one that started
/// later): their borrowers' runners then stop them and the queue takes them back. A loan that
/// also borrows other bookings' cards ends whole (its job runs on all of them), and those cards
/// are free to lend again.
pub(super) async fn end_loans(
    tx: &mut Tx<'_>,
    host: i64,
    end: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let (greatest, end_ms) = (super::Backend::of(tx).greatest(), ms(end));
    let ended = sqlx::query(&format!(
        "UPDATE bookings SET status = 'released', end_ms = {greatest}(start_ms + 1, $2)
         WHERE id IN ({LOANS_OF_HOST}) AND status = 'live' AND end_ms > $2"
    ))
    .bind(host)
    .bind(end_ms)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    sqlx::query(&format!(
        "UPDATE booking_gpus SET end_ms = {greatest}(start_ms + 1, $2)
         WHERE booking_id IN ({LOANS_OF_HOST}) AND end_ms > $2"
    ))
    .bind(host)
    .bind(end_ms)
    .execute(&mut **tx)
    .await?;
    Ok(ended)
}
