//! SQL of usage reports: what the history says about each booking's cards, and counts of
//! violations and jobs per user.
//!
//! Counts behind the pool-level gauges of `/metrics`, read at each scrape: a handful of
//! indexed counts, cheap at Prometheus' pace.

use super::sql::Stamp;
use super::StoreError;
use crate::history::Resolution;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

repository!(
    /// Totals for reports and gauges, read in one snapshot.
    Reports, reports
);

/// What the history says about one booking's cards inside a period.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CardUse {
    /// Card-hours weighted by utilization.
    pub used_hours: f64,
    /// Card-hours in buckets whose mean utilization was under the threshold.
    pub idle_hours: f64,
    /// Mean utilization over all readings.
    pub avg_utilization_pct: Option<f64>,
    pub peak_memory_mib: Option<i64>,
}

/// booking id, used hours, idle hours, mean utilization, peak memory (MiB).
type UseRow = (i64, f64, f64, Option<f64>, Option<i64>);

impl Reports<'_> {
    /// Per booking (not cancelled) overlapping `[from, to)` (Unix seconds): its cards' use from
    /// `resolution`'s buckets (minutes or hours) that start inside both the period and the
    /// booking's slot. Each stored reading stands for `reading_s` seconds (the poll interval,
    /// at least one second: the history keeps one reading a second).
    pub async fn booking_card_use(
        &self,
        from: i64,
        to: i64,
        idle_threshold_pct: u32,
        resolution: Resolution,
        reading_s: f64,
    ) -> Result<HashMap<i64, CardUse>, StoreError> {
        let table = resolution.table();
        let bucket_s = resolution.seconds();
        let hours = bucket_s as f64 / 3600.0;
        // A bucket counts for the share of it that readings cover (a card read for half an hour
        // of an hour bucket counts half an hour), so that gaps are neither use nor idleness.
        // Arithmetic in double precision (PostgreSQL would otherwise compute in `numeric`).
        let (least, greatest) = (self.backend.least(), self.backend.greatest());
        let real = "DOUBLE PRECISION";
        let covered = format!("{least}(CAST(1 AS {real}), s.n * $4 / CAST({bucket_s} AS {real}))");
        let mean = format!("CAST(s.util_sum AS {real}) / s.n");
        let rows: Vec<UseRow> = sqlx::query_as(&format!(
            "SELECT bg.booking_id,
                    COALESCE(SUM({mean} * {covered}), 0) / 100 * CAST({hours:.12} AS {real}),
                    COALESCE(SUM(CASE WHEN {mean} < $3 THEN {covered} ELSE 0 END), 0)
                        * CAST({hours:.12} AS {real}),
                    CAST(SUM(s.util_sum) AS {real}) / NULLIF(SUM(s.n), 0),
                    MAX(s.mem_max)
             FROM booking_gpus bg
             JOIN bookings b ON b.id = bg.booking_id
             JOIN {table} s ON s.gpu_id = bg.gpu_id
                 AND s.t >= {greatest}(bg.start_ms / 1000, $1) AND s.t < {least}(bg.end_ms / 1000, $2)
             WHERE b.status != 'cancelled' AND bg.end_ms > $1 * 1000 AND bg.start_ms < $2 * 1000
             GROUP BY bg.booking_id"
        ))
        // Planned for this period (see history.rs).
        .persistent(false)
        .bind(from)
        .bind(to)
        .bind(f64::from(idle_threshold_pct))
        .bind(reading_s)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, used, idle, avg, peak)| {
                (
                    id,
                    CardUse {
                        used_hours: used,
                        idle_hours: idle,
                        avg_utilization_pct: avg,
                        peak_memory_mib: peak,
                    },
                )
            })
            .collect())
    }

    /// Violations first seen in `[from, to)`, per Lanes user.
    pub async fn violation_counts(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<HashMap<i64, i64>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT user_id, COUNT(*) FROM violations
             WHERE user_id IS NOT NULL AND first_seen_ms >= $1 AND first_seen_ms < $2
             GROUP BY user_id",
        )
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    /// Jobs started in `[from, to)`, per user.
    pub async fn job_counts(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<HashMap<i64, i64>, StoreError> {
        let rows: Vec<(i64, super::sql::Stamp)> =
            sqlx::query_as("SELECT user_id, started_at FROM jobs WHERE started_at IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        let mut counts = HashMap::new();
        for (user, started) in rows {
            if (from..to).contains(&started.0) {
                *counts.entry(user).or_default() += 1;
            }
        }
        Ok(counts)
    }

    /// Jobs started in `[from, to)` per project of their booking (`None`: no project).
    pub async fn project_job_counts(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<HashMap<Option<String>, i64>, StoreError> {
        let rows: Vec<(Option<String>, super::sql::Stamp)> = sqlx::query_as(
            "SELECT b.project, j.started_at FROM jobs j JOIN bookings b ON b.id = j.booking_id
             WHERE j.started_at IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut counts = HashMap::new();
        for (project, started) in rows {
            if (from..to).contains(&started.0) {
                *counts.entry(project).or_default() += 1;
            }
        }
        Ok(counts)
    }
}

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

impl Reports<'_> {
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
