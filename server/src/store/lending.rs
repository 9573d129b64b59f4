//! SQL of lending: an idle booking's cards lent to a preemptible queue job (a loan: a booking of
//! the borrower inside the host's slot, its card rows in lane 1), taken back when the holder
//! starts work, and the borrower sent back to the queue.

use super::sql::{flag, placeholders, Stamp};
use super::{at, insert_audit, ms, AuditEntry, Lock, StoreError};
use crate::bookings::Rule;
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::{Booking, BookingState, GpuRef};
use lanes_types::coded::Coded;

repository!(
    /// Loans of idle booked cards to preemptible queue jobs, and taking them back.
    Lending, lending
);

/// A loan to make: for `borrower`'s queue job, cards of one or more bookings (`parts`: each
/// host and the cards it lends, all on one node), up to `end` (never past a host's end).
pub struct NewLoan<'a> {
    pub parts: &'a [(i64, Vec<GpuRef>)],
    pub borrower: &'a User,
    pub end: DateTime<Utc>,
    pub note: &'a str,
}

/// A host booking's start, end, lending flag, idle mark and own loan link.
type HostRow = (i64, i64, i64, Option<i64>, Option<i64>);

impl Lending<'_> {
    /// Active bookings that lend their cards, sit idle (the watchdog marked them), and lend
    /// them to nobody now.
    pub async fn lendable(&self, now: DateTime<Utc>) -> Result<Vec<Booking>, StoreError> {
        let filter = super::BookingFilter {
            from: Some(now),
            to: Some(now + chrono::Duration::milliseconds(1)),
            ..Default::default()
        };
        let mut bookings = self.store.bookings().list(&filter, now).await?;
        bookings.retain(|b| {
            b.state == BookingState::Active
                && b.lend
                && b.loan_of.is_none()
                && b.queue_job.is_none()
                && b.idle_since.is_some()
                && b.lent_to.is_none()
        });
        if bookings.is_empty() {
            return Ok(bookings);
        }
        // A holder's own job waiting to start (or running) in it: the cards are about to be
        // used, whatever the last readings said.
        let sql = format!(
            "SELECT DISTINCT booking_id FROM jobs
             WHERE state IN ('queued', 'running') AND booking_id IN ({})",
            placeholders(1, bookings.len())
        );
        let mut query = sqlx::query_scalar::<_, i64>(&sql);
        for b in &bookings {
            query = query.bind(b.id);
        }
        let busy: Vec<i64> = query.fetch_all(&self.pool).await?;
        bookings.retain(|b| !busy.contains(&b.id));
        Ok(bookings)
    }

    /// Lends `cards` of booking `host` to `borrower` from `now` to `end` (at most the host's
    /// end), if the host still lends, is active and idle, and none of them is lent already.
    /// A refusal (`StoreError::Refused`) means the next pass may try again.
    pub async fn create_loan(
        &self,
        loan: &NewLoan<'_>,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Booking, StoreError> {
        let NewLoan {
            parts,
            borrower,
            end,
            note,
        } = *loan;
        let refused = |why: &str| {
            StoreError::Refused(crate::bookings::BookingError::invalid(
                Rule::NotLendable,
                why,
            ))
        };
        let Some(&(first_host, _)) = parts.first() else {
            return Err(refused("nothing to lend"));
        };
        let _turn = self.write_turn().await;
        let mut tx = self
            .begin_serial(&[
                Lock::Shared(super::sql::lock::CARDS),
                Lock::User(borrower.id),
            ])
            .await?;
        let now_ms = ms(now);
        let mut end_ms = ms(end);
        // Each host's own card rows for the cards asked of it: (host, card row).
        let mut rows: Vec<(i64, i64)> = Vec::new();
        for (host, cards) in parts {
            let row: Option<HostRow> = sqlx::query_as(
                "SELECT start_ms, end_ms, lend, idle_since_ms, loan_of FROM bookings
                 WHERE id = $1 AND status = 'live'",
            )
            .bind(*host)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((start_ms, host_end_ms, lend, idle, None)) = row else {
                return Err(refused("the booking is gone or is itself a loan"));
            };
            if lend == 0 || idle.is_none() || start_ms > now_ms || host_end_ms <= now_ms {
                return Err(refused("the booking does not lend its cards now"));
            }
            end_ms = end_ms.min(host_end_ms);
            if cards.is_empty() || rows.iter().any(|(h, _)| h == host) {
                return Err(refused("nothing to lend"));
            }
            let sql = format!(
                "SELECT bg.gpu_id FROM booking_gpus bg
                 JOIN gpus g ON g.id = bg.gpu_id JOIN nodes n ON n.id = g.node_id
                 WHERE bg.booking_id = $1 AND bg.lane = 0 AND bg.live = 1
                   AND (n.name || ' ' || g.uuid) IN ({})",
                placeholders(2, cards.len())
            );
            let mut query = sqlx::query_scalar::<_, i64>(&sql).bind(*host);
            for card in cards {
                query = query.bind(format!("{} {}", card.node, card.uuid));
            }
            let ids: Vec<i64> = query.fetch_all(&mut *tx).await?;
            if ids.len() != cards.len() {
                return Err(refused("those are not all cards of the booking"));
            }
            rows.extend(ids.into_iter().map(|id| (*host, id)));
        }
        if end_ms <= now_ms {
            return Err(refused("nothing to lend"));
        }
        let mut nodes: Vec<&str> = parts
            .iter()
            .flat_map(|(_, cards)| cards.iter().map(|c| c.node.as_str()))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.len() > 1 {
            return Err(refused("a loan takes cards of one node"));
        }
        // One loan of a card at a time (PostgreSQL's constraint says so too).
        let sql = format!(
            "SELECT COUNT(*) FROM booking_gpus WHERE lane = 1 AND live = 1
               AND end_ms > $1 AND gpu_id IN ({})",
            placeholders(2, rows.len())
        );
        let mut query = sqlx::query_scalar::<_, i64>(&sql).bind(now_ms);
        for (_, id) in &rows {
            query = query.bind(*id);
        }
        if query.fetch_one(&mut *tx).await? > 0 {
            return Err(refused("a card is lent already"));
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO bookings (user_id, start_ms, end_ms, note, created_at, created_by, loan_of)
             VALUES ($1, $2, $3, $4, $5, NULL, $6) RETURNING id",
        )
        .bind(borrower.id)
        .bind(now_ms)
        .bind(end_ms)
        .bind(note)
        .bind(Stamp(now))
        .bind(first_host)
        .fetch_one(&mut *tx)
        .await?;
        for (host, gpu) in &rows {
            sqlx::query(
                "INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms, lane, lent_by)
                 VALUES ($1, $2, $3, $4, 1, $5)",
            )
            .bind(id)
            .bind(*gpu)
            .bind(now_ms)
            .bind(end_ms)
            .bind(*host)
            .execute(&mut *tx)
            .await
            .map_err(super::slots::overlap_or)?;
        }
        let hosts: Vec<String> = parts.iter().map(|(h, _)| format!("booking {h}")).collect();
        let audit = AuditEntry {
            target: hosts.join(", "),
            ..audit
        };
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.emit(Event::CardsChanged(Change::BookingCreated));
        Ok(Booking {
            id,
            user_id: borrower.id,
            username: borrower.username.clone(),
            display_name: borrower.display_name.clone(),
            gpus: parts.iter().flat_map(|(_, cards)| cards.clone()).collect(),
            start: at(now_ms),
            end: at(end_ms),
            note: note.to_string(),
            state: BookingState::Active,
            created_at: now,
            loan_of: Some(first_host),
            lenders: parts.iter().map(|(h, _)| *h).collect(),
            ..Default::default()
        })
    }

    /// Takes back what booking `host` lent: its live loans end now (their runners stop the
    /// borrowers, which go back to the queue). Returns how many there were.
    pub async fn reclaim_loans(
        &self,
        host: i64,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin().await?;
        let ended = super::bookings::end_loans(&mut tx, host, now).await?;
        if ended > 0 {
            // Lendable again only once it has sat idle again for the idle window, counted from
            // now (as "still using it" does): the holder came back for it.
            sqlx::query("UPDATE bookings SET idle_since_ms = NULL, in_use_ms = $2 WHERE id = $1")
                .bind(host)
                .bind(ms(now))
                .execute(&mut *tx)
                .await?;
            let audit = AuditEntry {
                target: format!("booking {host}"),
                ..audit
            };
            insert_audit(&mut tx, &audit, now).await?;
        }
        tx.commit().await?;
        if ended > 0 {
            self.emit(Event::CardsChanged(Change::BookingReleased));
        }
        Ok(ended)
    }

    /// Whether a borrower of booking `id`'s cards has yet to go: its loan is live, or its job
    /// still runs (stopping after its loan was taken back).
    pub async fn borrowers_present(&self, id: i64, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM bookings l LEFT JOIN jobs j ON j.booking_id = l.id
             WHERE l.id IN ({LOANS_OF_HOST}) AND l.status != 'cancelled'
               AND ((l.status = 'live' AND l.start_ms <= $2 AND l.end_ms > $2)
                    OR j.state IN ('queued', 'running'))",
            LOANS_OF_HOST = super::bookings::LOANS_OF_HOST
        ))
        .bind(id)
        .bind(ms(now))
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    /// Sends a running queue job back to the queue (its lent cards were taken back): it waits
    /// again, in its old place, with no booking and no process.
    pub async fn requeue_job(
        &self,
        id: i64,
        note: &lanes_types::job::JobNote,
        attained_gpu_s: i64,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let requeued = sqlx::query(
            "UPDATE jobs SET state = 'pending', booking_id = NULL, pid = NULL, pid_start = NULL,
                 boot_id = NULL, stop_requested_ms = NULL, stop_reason = NULL, started_at = NULL,
                 exit_code = NULL, signal = NULL, message = $2, requeues = requeues + 1,
                 cancel_requested = $3, notice = NULL, preempt_requested_ms = NULL,
                 attained_gpu_s = attained_gpu_s + $4
             WHERE id = $1 AND state IN ('running', 'queued') AND cancel_requested = 0",
        )
        .bind(id)
        .bind(note.code())
        .bind(flag(false))
        .bind(attained_gpu_s.max(0))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if requeued {
            let audit = AuditEntry {
                target: format!("job {id}"),
                ..audit
            };
            insert_audit(&mut tx, &audit, now).await?;
        }
        tx.commit().await?;
        if requeued {
            self.emit(Event::QueueChanged(Change::QueueSubmitted));
            // Its process is gone from the cards it borrowed: the holder's job may start.
            self.emit(Event::CardsChanged(Change::JobEnded));
        }
        Ok(requeued)
    }
}
