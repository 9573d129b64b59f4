//! SQL the job queue reads: what holds each card from now on, what each user held lately
//! (for fair share), and the queue's settings and shares.

use super::{AuditEntry, StoreError};
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::queue::{QueueSettings, Shares};

repository!(
    /// The queue's settings and shares, and what its passes read of cards and usage.
    Queue, queue
);

/// A booking or maintenance block on a card that ends after the time asked about: what the
/// scheduler must place queue jobs around.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct CardBlock {
    pub node: String,
    pub uuid: String,
    pub start_ms: i64,
    pub end_ms: i64,
    /// The booking's owner (`None` for maintenance).
    pub user_id: Option<i64>,
    /// The queue job the booking holds the card for, if it is one's (or a loan).
    pub queue_job: Option<i64>,
}

/// A span of time a user held some cards (what fair share counts as use).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct UsageSpan {
    pub user_id: i64,
    pub start_ms: i64,
    pub end_ms: i64,
    pub gpus: i64,
}

const QUEUE_SETTINGS: &str = "queue";
const SHARES: &str = "shares";

impl Queue<'_> {
    /// Live bookings and maintenance blocks on any card that end after `from`.
    pub async fn card_blocks(&self, from: DateTime<Utc>) -> Result<Vec<CardBlock>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT n.name AS node, g.uuid, bg.start_ms, bg.end_ms, b.user_id,
                    (SELECT j.id FROM jobs j WHERE j.booking_id = b.id AND j.gpus IS NOT NULL
                     ORDER BY j.id LIMIT 1) AS queue_job
             FROM booking_gpus bg
             JOIN bookings b ON b.id = bg.booking_id
             JOIN gpus g ON g.id = bg.gpu_id JOIN nodes n ON n.id = g.node_id
             WHERE bg.live = 1 AND bg.end_ms > $1
             UNION ALL
             SELECT n.name, g.uuid, mg.start_ms, mg.end_ms, NULL, NULL
             FROM maintenance_gpus mg
             JOIN gpus g ON g.id = mg.gpu_id JOIN nodes n ON n.id = g.node_id
             WHERE mg.end_ms > $1",
        )
        .bind(from.timestamp_millis())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Bookings (and so queue jobs) that held cards after `since`, per user: what fair share
    /// counts as use.
    pub async fn usage_spans(&self, since: DateTime<Utc>) -> Result<Vec<UsageSpan>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT b.user_id, b.start_ms, b.end_ms, COUNT(*) AS gpus
             FROM bookings b JOIN booking_gpus bg ON bg.booking_id = b.id
             WHERE b.status != 'cancelled' AND b.end_ms > $1
             GROUP BY b.id",
        )
        .bind(since.timestamp_millis())
        .fetch_all(&self.pool)
        .await?)
    }

    /// The queue's settings; ones saved before their values were bounded, and now out of
    /// range, give way to the defaults (with a warning) rather than overflow the scheduler.
    pub async fn settings(&self) -> Result<QueueSettings, StoreError> {
        let settings: QueueSettings = self.store.settings().get(QUEUE_SETTINGS).await?;
        Ok(match settings.check() {
            Ok(()) => settings,
            Err(why) => {
                tracing::warn!(%why, "the saved queue settings are out of range; using the defaults");
                QueueSettings::default()
            }
        })
    }

    pub async fn save_settings(
        &self,
        settings: &QueueSettings,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.store
            .settings()
            .save(QUEUE_SETTINGS, settings, audit, now)
            .await?;
        self.emit(Event::QueueChanged(Change::QueueSettingsChanged));
        Ok(())
    }

    pub async fn shares(&self) -> Result<Shares, StoreError> {
        self.store.settings().get(SHARES).await
    }

    pub async fn save_shares(
        &self,
        shares: &Shares,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.store
            .settings()
            .save(SHARES, shares, audit, now)
            .await?;
        self.emit(Event::QueueChanged(Change::SharesChanged));
        Ok(())
    }
}
