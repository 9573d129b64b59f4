//! Counts behind the pool-level gauges of `/metrics`, read at each scrape: a handful of
//! indexed counts, cheap at Prometheus' pace.

use super::sql::Stamp;
use super::{Store, StoreError};
use chrono::{DateTime, Utc};

/// The pool as the database has it at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolGauges {
    pub bookings_active: i64,
    pub bookings_upcoming: i64,
    /// Active bookings the watchdog marked idle.
    pub bookings_idle: i64,
    pub queue_waiting: i64,
    pub queue_running: i64,
    /// When the job that has waited longest was submitted.
    pub oldest_waiting_since: Option<DateTime<Utc>>,
    pub violations_open: i64,
    /// Cards each user holds now (users holding none are left out).
    pub gpus_held: Vec<(String, i64)>,
}

impl Store {
    pub async fn pool_gauges(&self, now: DateTime<Utc>) -> Result<PoolGauges, StoreError> {
        let now_ms = now.timestamp_millis();
        let count = |sql: &'static str| {
            let pool = self.pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .bind(now_ms)
                    .fetch_one(&pool)
                    .await
            }
        };
        let bookings_active = count(
            "SELECT COUNT(*) FROM bookings WHERE status = 'live' AND start_ms <= $1 AND end_ms > $1",
        )
        .await?;
        let bookings_upcoming =
            count("SELECT COUNT(*) FROM bookings WHERE status = 'live' AND start_ms > $1").await?;
        let bookings_idle = count(
            "SELECT COUNT(*) FROM bookings WHERE status = 'live' AND start_ms <= $1 AND end_ms > $1
               AND idle_since_ms IS NOT NULL",
        )
        .await?;
        let violations_open =
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM violations WHERE ended_ms IS NULL")
                .fetch_one(&self.pool)
                .await?;
        let queue: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM jobs
              WHERE gpus IS NOT NULL AND state IN ('pending', 'running') GROUP BY state",
        )
        .fetch_all(&self.pool)
        .await?;
        let of = |state: &str| {
            queue
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n)
        };
        let oldest: Option<Stamp> = sqlx::query_scalar(
            "SELECT MIN(created_at) FROM jobs WHERE gpus IS NOT NULL AND state = 'pending'",
        )
        .fetch_one(&self.pool)
        .await?;
        let gpus_held: Vec<(String, i64)> = sqlx::query_as(
            "SELECT u.username, COUNT(DISTINCT bg.gpu_id) FROM booking_gpus bg
               JOIN bookings b ON b.id = bg.booking_id JOIN users u ON u.id = b.user_id
              WHERE b.status = 'live' AND b.start_ms <= $1 AND b.end_ms > $1
              GROUP BY u.username ORDER BY u.username",
        )
        .bind(now_ms)
        .fetch_all(&self.pool)
        .await?;
        Ok(PoolGauges {
            bookings_active,
            bookings_upcoming,
            bookings_idle,
            queue_waiting: of("pending"),
            queue_running: of("running"),
            oldest_waiting_since: oldest.map(|s| s.0),
            violations_open,
            gpus_held,
        })
    }
}
