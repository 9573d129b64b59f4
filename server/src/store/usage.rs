//! SQL of energy and per-process use: minutes added to as readings arrive, and what reports
//! and the dashboard read back (per booking, per job, per Unix account).

use super::{Store, StoreError};
use crate::history::usage::{ProcessKey, ProcessUse};
use std::collections::HashMap;

/// One card's minute as the writer adds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MinuteUse {
    pub energy_mj: u64,
    pub processes: HashMap<ProcessKey, ProcessUse>,
}

/// Per-process use over a period, summed per Unix account and job.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessTotal {
    pub unix_user: String,
    /// 0: not a Lanes job.
    pub job_id: i64,
    /// The job's owner, for a job's processes.
    pub job_user_id: Option<i64>,
    /// Card-hours weighted by the card's utilization times the process's SM share.
    pub used_hours: f64,
    /// Hours the process was on a card.
    pub hours_on_card: f64,
    pub mean_sm_pct: Option<f64>,
    pub energy_mj: f64,
}

/// What one booking's cards drew inside its slot and a period, and how much of their use and
/// energy per-process samples gave to someone.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BookingEnergy {
    pub energy_mj: f64,
    /// Utilization-weighted card-hours that per-process samples split between processes.
    pub attributed_hours: f64,
    /// Energy that per-process samples gave to processes.
    pub attributed_mj: f64,
}

impl Store {
    /// Adds minutes of use (card id, minute start) to what is stored, in one transaction.
    pub async fn add_usage(
        &self,
        minutes: &HashMap<(i64, i64), MinuteUse>,
    ) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        const ENERGY_ROWS: usize = 5_000; // 3 values a row
        const PROCESS_ROWS: usize = 3_000; // 9 values a row
        let mut energy: Vec<(i64, i64, i64)> = minutes
            .iter()
            .map(|((gpu, t), m)| (*gpu, *t, m.energy_mj as i64))
            .collect();
        energy.sort_unstable();
        let mut processes: Vec<(i64, i64, &ProcessKey, &ProcessUse)> = minutes
            .iter()
            .flat_map(|((gpu, t), m)| m.processes.iter().map(move |(k, u)| (*gpu, *t, k, u)))
            .collect();
        processes.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut tx = self.begin().await?;
        for chunk in energy.chunks(ENERGY_ROWS) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| format!("({})", super::sql::placeholders(i * 3 + 1, 3)))
                .collect();
            let sql = format!(
                "INSERT INTO energy_1m (gpu_id, t, mj) VALUES {}
                 ON CONFLICT (gpu_id, t) DO UPDATE SET mj = energy_1m.mj + excluded.mj",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql);
            for (gpu, t, mj) in chunk {
                query = query.bind(*gpu).bind(*t).bind(*mj);
            }
            query.execute(&mut *tx).await?;
        }
        for chunk in processes.chunks(PROCESS_ROWS) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| format!("({})", super::sql::placeholders(i * 9 + 1, 9)))
                .collect();
            let add = ["ms", "used_pct_ms", "sm_pct_ms", "mem_pct_ms", "mj"]
                .map(|c| format!("{c} = process_use_1m.{c} + excluded.{c}"))
                .join(", ");
            let sql = format!(
                "INSERT INTO process_use_1m
                     (gpu_id, t, unix_user, job_id, ms, used_pct_ms, sm_pct_ms, mem_pct_ms, mj)
                 VALUES {}
                 ON CONFLICT (gpu_id, t, unix_user, job_id) DO UPDATE SET {add}",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql);
            for (gpu, t, key, u) in chunk {
                let ms = |x: f64| (x * 1000.0).round() as i64;
                query = query
                    .bind(*gpu)
                    .bind(*t)
                    .bind(&key.unix_user)
                    .bind(key.job_id)
                    .bind(ms(u.seconds))
                    .bind(ms(u.used_pct_s))
                    .bind(ms(u.sm_pct_s))
                    .bind(ms(u.mem_pct_s))
                    .bind(u.energy_mj.round() as i64);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Per-process use in minutes starting inside `[from, to)` (Unix seconds), per Unix
    /// account and job.
    pub async fn process_totals(
        &self,
        from: i64,
        to: i64,
    ) -> Result<Vec<ProcessTotal>, StoreError> {
        type Row = (String, i64, Option<i64>, i64, i64, i64, i64);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT p.unix_user, p.job_id, j.user_id,
                    CAST(SUM(p.used_pct_ms) AS BIGINT), CAST(SUM(p.ms) AS BIGINT),
                    CAST(SUM(p.sm_pct_ms) AS BIGINT), CAST(SUM(p.mj) AS BIGINT)
             FROM process_use_1m p LEFT JOIN jobs j ON j.id = p.job_id
             WHERE p.gpu_id IN (SELECT id FROM gpus) AND p.t >= $1 AND p.t < $2
             GROUP BY p.unix_user, p.job_id, j.user_id
             ORDER BY p.unix_user, p.job_id",
        )
        .persistent(false)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(unix_user, job_id, job_user_id, used, ms, sm, mj)| ProcessTotal {
                    unix_user,
                    job_id,
                    job_user_id,
                    used_hours: used as f64 / 100.0 / 3_600_000.0,
                    hours_on_card: ms as f64 / 3_600_000.0,
                    mean_sm_pct: (ms > 0).then(|| sm as f64 / ms as f64),
                    energy_mj: mj as f64,
                },
            )
            .collect())
    }

    /// Per booking (not cancelled) overlapping `[from, to)` (Unix seconds): the energy of its
    /// cards in minutes starting inside both its slot and the period, and how much of their
    /// use and energy per-process samples gave to processes.
    pub async fn booking_energy(
        &self,
        from: i64,
        to: i64,
    ) -> Result<HashMap<i64, BookingEnergy>, StoreError> {
        let (least, greatest) = (self.backend.least(), self.backend.greatest());
        let inside = |alias: &str| {
            format!(
                "{alias}.gpu_id = bg.gpu_id AND {alias}.t >= {greatest}(bg.start_ms / 1000, $1)
                 AND {alias}.t < {least}(bg.end_ms / 1000, $2)"
            )
        };
        let overlapping = "WHERE b.status != 'cancelled'
             AND bg.end_ms > $1 * 1000 AND bg.start_ms < $2 * 1000";
        let energy: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "SELECT bg.booking_id, CAST(COALESCE(SUM(e.mj), 0) AS BIGINT)
             FROM booking_gpus bg JOIN bookings b ON b.id = bg.booking_id
             JOIN energy_1m e ON {on} {overlapping}
             GROUP BY bg.booking_id",
            on = inside("e"),
        ))
        .persistent(false)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let attributed: Vec<(i64, i64, i64)> = sqlx::query_as(&format!(
            "SELECT bg.booking_id, CAST(COALESCE(SUM(p.used_pct_ms), 0) AS BIGINT),
                    CAST(COALESCE(SUM(p.mj), 0) AS BIGINT)
             FROM booking_gpus bg JOIN bookings b ON b.id = bg.booking_id
             JOIN process_use_1m p ON {on} {overlapping}
             GROUP BY bg.booking_id",
            on = inside("p"),
        ))
        .persistent(false)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let mut out: HashMap<i64, BookingEnergy> = HashMap::new();
        for (id, mj) in energy {
            out.entry(id).or_default().energy_mj = mj as f64;
        }
        for (id, used, mj) in attributed {
            let e = out.entry(id).or_default();
            e.attributed_hours = used as f64 / 100.0 / 3_600_000.0;
            e.attributed_mj = mj as f64;
        }
        Ok(out)
    }
}
