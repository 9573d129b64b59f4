//! SQL of maintenance blocks: admins take cards out of service for a slot.

use super::slots::*;
use super::sql::{lock, Stamp};
use super::{at, insert_audit, ms, AuditEntry, Lock, StoreError};
use crate::bookings::BookingError;
use crate::bookings::{plan, rules};
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::booking::{CreateMaintenance, GpuRef, MaintenanceBlock};

repository!(
    /// Maintenance blocks that take cards out of service.
    Maintenance, maintenance
);

impl Maintenance<'_> {
    /// Takes cards out of service for a window. Cards already booked in it are a conflict:
    /// the admin cancels or moves those bookings first.
    pub async fn create(
        &self,
        request: &CreateMaintenance,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<MaintenanceBlock, StoreError> {
        if !rules::is_sane_time(request.start) || !rules::is_sane_time(request.end) {
            return Err(BookingError::from(rules::InvalidSlot::OutOfRange).into());
        }
        if request.end <= request.start {
            return Err(BookingError::from(rules::InvalidSlot::EndNotAfterStart).into());
        }
        let _turn = self.write_turn().await;
        let mut tx = self.begin_serial(&[Lock::Exclusive(lock::CARDS)]).await?;
        let slot =
            cards_in_slot(&mut tx, &request.gpus, (request.start, request.end), None).await?;
        plan::maintenance_cards(slot.holds)?;
        let cards = slot.cards;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO maintenance (start_ms, end_ms, reason, created_at, created_by)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(ms(request.start))
        .bind(ms(request.end))
        .bind(&request.reason)
        .bind(Stamp(now))
        .bind(audit.actor_user_id)
        .fetch_one(&mut *tx)
        .await?;
        let slot = (request.start, request.end);
        hold_for_maintenance(&mut tx, id, &cards, slot, audit, now).await?;
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
    pub async fn delete(
        &self,
        id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin_serial(&[Lock::Exclusive(lock::CARDS)]).await?;
        let deleted = sqlx::query("DELETE FROM maintenance WHERE id = $1")
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
    pub async fn blocks(&self, from: DateTime<Utc>) -> Result<Vec<MaintenanceBlock>, StoreError> {
        let rows: Vec<(i64, i64, i64, String, String, String)> = sqlx::query_as(
            "SELECT m.id, m.start_ms, m.end_ms, m.reason, n.name, g.uuid
             FROM maintenance m
             JOIN maintenance_gpus mg ON mg.maintenance_id = m.id
             JOIN gpus g ON g.id = mg.gpu_id JOIN nodes n ON n.id = g.node_id
             WHERE m.end_ms > $1 ORDER BY m.start_ms, m.id, n.name, g.idx",
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
