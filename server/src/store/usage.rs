//! SQL of energy and per-process use: minutes added to as readings arrive, and what reports
//! and the dashboard read back (per booking, per job, per Unix account).

use super::StoreError;
use crate::history::usage::{ProcessKey, ProcessUse};
use std::collections::HashMap;

repository!(
    /// GPU use per minute, per process and per booking, and energy.
    Usage, usage
);

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

impl Usage<'_> {
    /// Adds minutes of use (card id, minute start) to what is stored, in one transaction.
    pub async fn add(&self, minutes: &HashMap<(i64, i64), MinuteUse>) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        add_usage_in(&mut tx, minutes).await?;
        tx.commit().await?;
        Ok(())
    }

    /// What a report needs of energy and per-process use over `[from, to)` (Unix seconds):
    /// each booking's energy and its attributed part ([`Usage::booking_energy`]) and each
    /// account's and job's per-process totals. Read from one snapshot, so the parts add up to
    /// the whole while the history writer goes on adding to the minute in progress.
    pub async fn energy_and_processes(
        &self,
        from: i64,
        to: i64,
    ) -> Result<(HashMap<i64, BookingEnergy>, Vec<ProcessTotal>), StoreError> {
        let mut tx = self.begin_snapshot().await?;
        let energy = self.booking_energy_in(&mut tx, from, to).await?;
        let processes = self.process_totals_in(&mut tx, from, to).await?;
        tx.commit().await?;
        Ok((energy, processes))
    }

    /// Per-process use over `[from, to)` (Unix seconds), per Unix account and job. A minute
    /// the period cuts counts for the part of it inside.
    async fn process_totals_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        from: i64,
        to: i64,
    ) -> Result<Vec<ProcessTotal>, StoreError> {
        type Row = (String, i64, Option<i64>, f64, f64, f64, f64);
        let (least, greatest) = (self.backend.least(), self.backend.greatest());
        let real = "DOUBLE PRECISION";
        let part = format!("(CAST({least}(p.t + 60, $2) - {greatest}(p.t, $1) AS {real}) / 60)");
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT p.unix_user, p.job_id, j.user_id,
                    SUM(p.used_pct_ms * {part}), SUM(p.ms * {part}),
                    SUM(p.sm_pct_ms * {part}), SUM(p.mj * {part})
             FROM process_use_1m p LEFT JOIN jobs j ON j.id = p.job_id
             WHERE p.gpu_id IN (SELECT id FROM gpus) AND p.t > $1 - 60 AND p.t < $2
             GROUP BY p.unix_user, p.job_id, j.user_id
             ORDER BY p.unix_user, p.job_id"
        ))
        .persistent(false)
        .bind(from)
        .bind(to)
        .fetch_all(&mut *conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(unix_user, job_id, job_user_id, used, ms, sm, mj)| ProcessTotal {
                    unix_user,
                    job_id,
                    job_user_id,
                    used_hours: used / 100.0 / 3_600_000.0,
                    hours_on_card: ms / 3_600_000.0,
                    mean_sm_pct: (ms > 0.0).then(|| sm / ms),
                    energy_mj: mj,
                },
            )
            .collect())
    }

    /// Per booking (not cancelled) overlapping `[from, to)` (Unix seconds): the energy its
    /// cards drew inside both its slot and the period, and how much of their use and energy
    /// per-process samples gave to processes. A minute the slot or the period cuts counts for
    /// the part of it inside (a booking that started 20 s ago has 20 s of energy). Its two
    /// sums are read from one snapshot.
    pub async fn booking_energy(
        &self,
        from: i64,
        to: i64,
    ) -> Result<HashMap<i64, BookingEnergy>, StoreError> {
        let mut tx = self.begin_snapshot().await?;
        let energy = self.booking_energy_in(&mut tx, from, to).await?;
        tx.commit().await?;
        Ok(energy)
    }

    async fn booking_energy_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        from: i64,
        to: i64,
    ) -> Result<HashMap<i64, BookingEnergy>, StoreError> {
        let (least, greatest) = (self.backend.least(), self.backend.greatest());
        let real = "DOUBLE PRECISION";
        let lo = format!("{greatest}(CAST(bg.start_ms AS {real}) / 1000, CAST($1 AS {real}))");
        let hi = format!("{least}(CAST(bg.end_ms AS {real}) / 1000, CAST($2 AS {real}))");
        let part = |alias: &str| {
            format!("(CAST({least}({alias}.t + 60, {hi}) - {greatest}({alias}.t, {lo}) AS {real}) / 60)")
        };
        let on = |alias: &str| {
            format!("{alias}.gpu_id = bg.gpu_id AND {alias}.t + 60 > {lo} AND {alias}.t < {hi}")
        };
        // Two sums per booking over one of the minute tables.
        let sums = |table: &str, alias: &str, first: &str, second: &str| {
            let part = part(alias);
            format!(
                "SELECT bg.booking_id, COALESCE(SUM({alias}.{first} * {part}), 0),
                        COALESCE(SUM({alias}.{second} * {part}), 0)
                 FROM booking_gpus bg JOIN bookings b ON b.id = bg.booking_id
                 JOIN {table} {alias} ON {on}
                 WHERE b.status != 'cancelled'
                   AND bg.end_ms > $1 * 1000 AND bg.start_ms < $2 * 1000
                 GROUP BY bg.booking_id",
                on = on(alias),
            )
        };
        let mut rows: Vec<Vec<(i64, f64, f64)>> = Vec::new();
        for sql in [
            sums("energy_1m", "e", "mj", "mj"),
            sums("process_use_1m", "p", "used_pct_ms", "mj"),
        ] {
            rows.push(
                sqlx::query_as(&sql)
                    .persistent(false)
                    .bind(from)
                    .bind(to)
                    .fetch_all(&mut *conn)
                    .await?,
            );
        }
        let (energy, attributed) = (std::mem::take(&mut rows[0]), std::mem::take(&mut rows[1]));
        let mut out: HashMap<i64, BookingEnergy> = HashMap::new();
        for (id, mj, _) in energy {
            out.entry(id).or_default().energy_mj = mj;
        }
        for (id, used, mj) in attributed {
            let e = out.entry(id).or_default();
            e.attributed_hours = used / 100.0 / 3_600_000.0;
            e.attributed_mj = mj;
        }
        Ok(out)
    }
}

/// Adds minutes of use (card id, minute start) to what is stored, within `tx`.
pub(super) async fn add_usage_in(
    tx: &mut super::Tx<'static>,
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
        query.execute(&mut **tx).await?;
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
        query.execute(&mut **tx).await?;
    }
    Ok(())
}
