//! SQL of the utilization history: batched inserts of readings, rollups into minute and hour
//! buckets (incremental, resumable after a restart), retention, and range queries.

use super::sql::Tx;
use super::StoreError;
use crate::history::block::{self, COMPACT_EVERY_S, WINDOW_S};
use crate::history::{Metric, Plan, Reading, Resolution};
use std::collections::HashMap;

repository!(
    /// Readings of every card over time, raw and rolled up.
    History, history
);

/// One output bucket of a query: its start (Unix seconds) and the metric's min, mean and max,
/// in stored units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub t: i64,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
}

// Tables are keyed on (gpu_id, t): every statement that selects by time names the cards too
// (`gpu_id IN (SELECT id FROM gpus)`), so that SQLite walks one key range per card instead of
// scanning the table. Rollups and pruning run as one-off statements (`persistent(false)`):
// PostgreSQL then plans each for its own bounds. A statement it keeps prepared is planned,
// after a few runs, for any bounds, and `t < $1` planned for any bound is a scan of the whole
// table.

/// Columns of a rollup row after `gpu_id, t`, each as an aggregate over `source`.
fn rollup_columns(from_raw: bool) -> String {
    let mut cols = Vec::new();
    if from_raw {
        cols.push("COUNT(*)".to_string());
        for col in ["util", "mem_mib"] {
            cols.push(format!("MIN({col}), SUM({col}), MAX({col})"));
        }
        for col in ["temp_c", "power_dw", "clock_mhz"] {
            cols.push(format!("COUNT({col}), MIN({col}), SUM({col}), MAX({col})"));
        }
    } else {
        cols.push("SUM(n)".to_string());
        for p in ["util", "mem"] {
            cols.push(format!("MIN({p}_min), SUM({p}_sum), MAX({p}_max)"));
        }
        for p in ["temp", "power", "clock"] {
            cols.push(format!(
                "SUM({p}_n), MIN({p}_min), SUM({p}_sum), MAX({p}_max)"
            ));
        }
    }
    cols.join(", ")
}

/// Columns of every rollup table after `gpu_id, t`, in order.
const ROLLUP_COLUMNS: [&str; 19] = [
    "n",
    "util_min",
    "util_sum",
    "util_max",
    "mem_min",
    "mem_sum",
    "mem_max",
    "temp_n",
    "temp_min",
    "temp_sum",
    "temp_max",
    "power_n",
    "power_min",
    "power_sum",
    "power_max",
    "clock_n",
    "clock_min",
    "clock_sum",
    "clock_max",
];

/// `ON CONFLICT … DO UPDATE` that replaces every column but the key (what SQLite's
/// `INSERT OR REPLACE` did, in the form both backends take).
fn replace_on_conflict(columns: &[&str]) -> String {
    let set: Vec<String> = columns
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!("ON CONFLICT (gpu_id, t) DO UPDATE SET {}", set.join(", "))
}

/// bucket start, min, mean, max.
type BucketRow = (i64, Option<f64>, Option<f64>, Option<f64>);

/// A rollup resolution's name in `history_progress`.
fn level_name(resolution: Resolution) -> &'static str {
    match resolution {
        Resolution::Raw => "raw",
        Resolution::Minute => "1m",
        Resolution::TenMinutes => "10m",
        Resolution::Hour => "1h",
    }
}

impl History<'_> {
    /// Writes readings (card id, reading) in one transaction. A second reading of the same card
    /// in the same second replaces the first.
    pub async fn insert_readings(&self, readings: &[(i64, Reading)]) -> Result<(), StoreError> {
        self.write_readings(readings, &HashMap::new()).await
    }

    /// Writes readings (as [`History::insert_readings`]) and adds minutes of use (as
    /// [`Usage::add`]) in one transaction: the history writer's flush.
    pub async fn write_readings(
        &self,
        readings: &[(i64, Reading)],
        minutes: &HashMap<(i64, i64), super::usage::MinuteUse>,
    ) -> Result<(), StoreError> {
        // The last reading of each card and second (PostgreSQL refuses a statement whose
        // `ON CONFLICT DO UPDATE` would change one row twice).
        let mut last: HashMap<(i64, i64), usize> = HashMap::with_capacity(readings.len());
        for (i, (gpu, r)) in readings.iter().enumerate() {
            last.insert((*gpu, r.t), i);
        }
        let readings: Vec<(i64, Reading)> = readings
            .iter()
            .enumerate()
            .filter(|(i, (gpu, r))| last.get(&(*gpu, r.t)) == Some(i))
            .map(|(_, reading)| *reading)
            .collect();
        let mut tx = self.begin().await?;
        if !minutes.is_empty() {
            super::usage::add_usage_in(&mut tx, minutes).await?;
        }
        insert_raw(
            &mut tx,
            &readings,
            &replace_on_conflict(&["util", "mem_mib", "temp_c", "power_dw", "clock_mhz"]),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Card ids by (node, UUID), for the writer.
    pub async fn gpu_ids(&self) -> Result<HashMap<(String, String), i64>, StoreError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT n.name, g.uuid, g.id FROM gpus g JOIN nodes n ON n.id = g.node_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(n, u, id)| ((n, u), id)).collect())
    }

    /// Rolls readings up into every whole minute, and minutes into every whole hour, that ends
    /// at or before `complete_until` (Unix seconds: everything earlier has been written) and was
    /// not rolled up before, or holds readings from `touched_from` on (written since the last
    /// rollup, however late they came). Returns the new progress of both levels.
    pub async fn roll_up(
        &self,
        touched_from: i64,
        complete_until: i64,
    ) -> Result<(i64, i64), StoreError> {
        // It reads, then writes: IMMEDIATE takes the write lock first (waiting out other
        // writers), so a commit elsewhere cannot make its read snapshot stale (SQLITE_BUSY_SNAPSHOT).
        let mut tx = self.begin_immediate().await?;
        let mut done = Vec::new();
        for (level, from, bucket, from_raw) in [
            ("1m", "samples_raw", 60, true),
            ("10m", "samples_1m", 600, false),
            ("1h", "samples_10m", 3600, false),
        ] {
            let previous: Option<i64> =
                sqlx::query_scalar("SELECT done_until FROM history_progress WHERE level = $1")
                    .bind(level)
                    .fetch_optional(&mut *tx)
                    .await?;
            // A first rollup starts at the oldest data there is; later ones where they left
            // off, or earlier if readings came late.
            let start = match previous {
                Some(s) => s.min(touched_from.div_euclid(bucket) * bucket),
                None => {
                    let oldest: Option<i64> =
                        sqlx::query_scalar(&format!("SELECT MIN(t) FROM {from}"))
                            .fetch_one(&mut *tx)
                            .await?;
                    oldest.map_or(i64::MAX, |t| t.div_euclid(bucket) * bucket)
                }
            };
            // A coarser level may only use buckets of the finer one that are final.
            let limit = match done.last() {
                Some(finer_done) => complete_until.min(*finer_done),
                None => complete_until,
            };
            let end = limit.div_euclid(bucket) * bucket;
            // Readings that came late into minutes already rolled up: their windows' blocks go
            // back to raw rows, so that the minutes are rolled up again from every reading.
            if level == "1m" && previous.is_some_and(|p| start < p) {
                restore_blocks(&mut tx, start).await?;
            }
            if start < end {
                let into = match level {
                    "1m" => "samples_1m",
                    "10m" => "samples_10m",
                    _ => "samples_1h",
                };
                sqlx::query(&format!(
                    "INSERT INTO {into} (gpu_id, t, {})
                     SELECT gpu_id, (t / {bucket}) * {bucket}, {}
                     FROM {from} WHERE gpu_id IN (SELECT id FROM gpus) AND t >= $1 AND t < $2
                     GROUP BY gpu_id, t / {bucket}
                     {}",
                    ROLLUP_COLUMNS.join(", "),
                    rollup_columns(from_raw),
                    replace_on_conflict(&ROLLUP_COLUMNS)
                ))
                // Planned for these bounds, not for any (see the note above).
                .persistent(false)
                .bind(start)
                .bind(end)
                .execute(&mut *tx)
                .await?;
            }
            // Progress never moves back: a late batch re-rolls old buckets, nothing more.
            let progress = previous.map_or(end, |p| p.max(end));
            sqlx::query(
                "INSERT INTO history_progress (level, done_until) VALUES ($1, $2)
                 ON CONFLICT (level) DO UPDATE SET done_until = excluded.done_until",
            )
            .bind(level)
            .bind(progress)
            .execute(&mut *tx)
            .await?;
            done.push(progress);
        }
        compact(
            &mut tx,
            done[0].div_euclid(COMPACT_EVERY_S) * COMPACT_EVERY_S,
        )
        .await?;
        tx.commit().await?;
        Ok((done[0], done[2]))
    }

    /// Deletes what is older than each resolution keeps (`None`: keep forever), but never raw
    /// readings or minutes that are not rolled up yet.
    pub async fn prune(
        &self,
        raw_before: i64,
        minute_before: i64,
        hour_before: Option<i64>,
    ) -> Result<u64, StoreError> {
        // Reads, then writes: see `roll_up`.
        let mut tx = self.begin_immediate().await?;
        let progress = |level: &'static str| {
            sqlx::query_scalar::<_, i64>("SELECT done_until FROM history_progress WHERE level = $1")
                .bind(level)
        };
        let minutes_done = progress("1m")
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(i64::MIN);
        let tens_done = progress("10m")
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(i64::MIN);
        let hours_done = progress("1h")
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(i64::MIN);
        let mut removed = 0;
        for (table, before) in [
            ("samples_raw", Some(raw_before.min(minutes_done))),
            // A block goes once its newest reading is older than raw readings are kept.
            (
                "samples_blocks",
                Some(raw_before.min(minutes_done).saturating_sub(WINDOW_S - 1)),
            ),
            ("samples_1m", Some(minute_before.min(tens_done))),
            ("samples_10m", hour_before.map(|b| b.min(hours_done))),
            ("samples_1h", hour_before),
            ("energy_1m", hour_before),
            ("process_use_1m", hour_before),
        ] {
            let Some(before) = before else { continue };
            let t = if table == "samples_blocks" { "t0" } else { "t" };
            removed += sqlx::query(&format!(
                "DELETE FROM {table} WHERE gpu_id IN (SELECT id FROM gpus) AND {t} < $1"
            ))
            .persistent(false)
            .bind(before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(removed)
    }

    /// One metric of the cards in `gpus` (card ids; all when empty) over `[from, to)`, in
    /// buckets as `plan` says, by card id. Buckets without readings are absent: a gap.
    pub async fn read(
        &self,
        gpus: &[i64],
        metric: Metric,
        from: i64,
        to: i64,
        plan: Plan,
    ) -> Result<HashMap<i64, Vec<Bucket>>, StoreError> {
        let width = plan.bucket_s;
        let cards: Vec<i64> = if gpus.is_empty() {
            sqlx::query_scalar("SELECT id FROM gpus")
                .fetch_all(&self.pool)
                .await?
        } else {
            gpus.to_vec()
        };
        let mut series = self
            .buckets(&cards, metric, plan.resolution, from, to, width)
            .await?;
        // Rollups lag the readings (a minute, ten, an hour): the buckets after the last one
        // rolled up come from raw readings, which are kept until they are, so a fresh install
        // and the last minutes of any range show data at once.
        if plan.resolution != Resolution::Raw {
            let done: Option<i64> =
                sqlx::query_scalar("SELECT done_until FROM history_progress WHERE level = $1")
                    .bind(level_name(plan.resolution))
                    .fetch_optional(&self.pool)
                    .await?;
            let done = done.unwrap_or(from).max(from);
            if done < to {
                let tail = from + (done - from) / width * width;
                let recent = self
                    .buckets(&cards, metric, Resolution::Raw, tail, to, width)
                    .await?;
                for (card, fresh) in recent {
                    let buckets = series.entry(card).or_default();
                    let kept: Vec<Bucket> = buckets
                        .drain(..)
                        .filter(|b| b.t < tail || !fresh.iter().any(|f| f.t == b.t))
                        .collect();
                    *buckets = kept.into_iter().chain(fresh).collect();
                    buckets.sort_by_key(|b| b.t);
                }
            }
        }
        Ok(series)
    }

    /// One metric of `cards` over `[from, to)` from one resolution's table, in buckets of
    /// `width` seconds starting at `from` (raw readings: [`History::raw_buckets`]).
    async fn buckets(
        &self,
        cards: &[i64],
        metric: Metric,
        resolution: Resolution,
        from: i64,
        to: i64,
        width: i64,
    ) -> Result<HashMap<i64, Vec<Bucket>>, StoreError> {
        if resolution == Resolution::Raw {
            return self.raw_buckets(cards, metric, from, to, width).await;
        }
        let (_, prefix) = metric.column();
        let count = if metric.always_present() {
            "n".to_string()
        } else {
            format!("{prefix}_n")
        };
        let aggregates = format!(
            "CAST(MIN({prefix}_min) AS DOUBLE PRECISION),
             CAST(SUM({prefix}_sum) AS DOUBLE PRECISION) / NULLIF(SUM({count}), 0),
             CAST(MAX({prefix}_max) AS DOUBLE PRECISION)"
        );
        let sql = format!(
            "SELECT $1 + ((t - $1) / {width}) * {width} AS b, {aggregates}
             FROM {} WHERE gpu_id = $3 AND t >= $1 AND t < $2
             GROUP BY b ORDER BY b",
            resolution.table()
        );
        // One query per card, run side by side on the pool's connections: each walks one key
        // range, and the bucket sort of one card's rows is smaller than of all of them.
        let answers = futures::future::try_join_all(cards.iter().map(|card| {
            sqlx::query_as::<_, BucketRow>(&sql)
                .bind(from)
                .bind(to)
                .bind(card)
                .fetch_all(&self.pool)
        }))
        .await?;
        let mut series: HashMap<i64, Vec<Bucket>> = HashMap::new();
        for (card, rows) in cards.iter().zip(answers) {
            let buckets: Vec<Bucket> = rows
                .into_iter()
                // A bucket where the metric was never reported (a card without power readings).
                .filter_map(|(t, min, avg, max)| {
                    Some(Bucket {
                        t,
                        min: min?,
                        avg: avg?,
                        max: max?,
                    })
                })
                .collect();
            if !buckets.is_empty() {
                series.insert(*card, buckets);
            }
        }
        Ok(series)
    }

    /// One metric of `cards` over `[from, to)` from raw readings, in buckets of `width` seconds
    /// starting at `from`: the compressed blocks' readings (decoded here, the metric's column
    /// only) and the head's (summed by the database), merged bucket by bucket. A reading is in
    /// one of the two, except for the moment between a late reading's write and the rollup
    /// right after it, which puts its block back into the head.
    async fn raw_buckets(
        &self,
        cards: &[i64],
        metric: Metric,
        from: i64,
        to: i64,
        width: i64,
    ) -> Result<HashMap<i64, Vec<Bucket>>, StoreError> {
        if cards.is_empty() {
            return Ok(HashMap::new());
        }
        let (raw, _) = metric.column();
        // Two statements for all the cards, side by side: the blocks, and the head summed by
        // the database. (A statement per card and kind, as before, spent more on handing
        // statements to the database's threads than on reading: 16 of them for 8 cards.)
        let ids = super::sql::placeholders(3, cards.len());
        let head_sql = format!(
            "SELECT gpu_id, $1 + ((t - $1) / {width}) * {width} AS b,
                    CAST(MIN({raw}) AS DOUBLE PRECISION), CAST(SUM({raw}) AS DOUBLE PRECISION),
                    COUNT({raw}), CAST(MAX({raw}) AS DOUBLE PRECISION)
             FROM samples_raw WHERE gpu_id IN ({ids}) AND t >= $1 AND t < $2
             GROUP BY gpu_id, b ORDER BY gpu_id, b"
        );
        // Blocks are aligned windows of WINDOW_S: one that starts after `from - WINDOW_S` may
        // hold readings of the range.
        let blocks_sql = format!(
            "SELECT gpu_id, data FROM samples_blocks
             WHERE gpu_id IN ({ids}) AND t0 > $1 AND t0 < $2"
        );
        let mut head = sqlx::query_as::<_, HeadRow>(&head_sql).bind(from).bind(to);
        let mut blocks = sqlx::query_as::<_, (i64, Vec<u8>)>(&blocks_sql)
            .bind(from - WINDOW_S)
            .bind(to);
        for card in cards {
            head = head.bind(*card);
            blocks = blocks.bind(*card);
        }
        let (head, blocks) =
            futures::future::try_join(head.fetch_all(&self.pool), blocks.fetch_all(&self.pool))
                .await?;
        let mut answers: HashMap<i64, (Vec<Vec<u8>>, Vec<HeadRow>)> = HashMap::new();
        for (card, data) in blocks {
            answers.entry(card).or_default().0.push(data);
        }
        for row in head {
            answers.entry(row.0).or_default().1.push(row);
        }
        let column = metric.block_column();
        let mut series = HashMap::new();
        for (card, (blocks, head)) in answers {
            let mut sums: std::collections::BTreeMap<i64, Sum> = Default::default();
            for data in blocks {
                let readings = block::decode_column(&data, column)?;
                for (t, v) in readings {
                    if t >= from && t < to {
                        let b = from + (t - from) / width * width;
                        let v = v as f64;
                        sums.entry(b).or_default().add(v, v, v, 1);
                    }
                }
            }
            for (_, b, min, sum, count, max) in head {
                if let (Some(min), Some(sum), Some(max)) = (min, sum, max) {
                    sums.entry(b).or_default().add(min, sum, max, count);
                }
            }
            let buckets: Vec<Bucket> = sums
                .into_iter()
                .filter(|(_, s)| s.count > 0)
                .map(|(t, s)| Bucket {
                    t,
                    min: s.min,
                    avg: s.sum / s.count as f64,
                    max: s.max,
                })
                .collect();
            if !buckets.is_empty() {
                series.insert(card, buckets);
            }
        }
        Ok(series)
    }
}

/// A damaged block is a database that holds something this version cannot read.
impl From<block::Corrupt> for StoreError {
    fn from(e: block::Corrupt) -> Self {
        StoreError::Database(e.to_string())
    }
}

/// Rows a statement writes to the history's tables. SQLite finds each `$N` among the
/// statement's others one by one (its parse time grows with the square of their number): a few
/// hundred rows a statement.
const ROWS_PER_STATEMENT: usize = 300;

/// A raw row: card id, time, util, memory, temperature, power, clock.
type RawRow = (i64, i64, i64, i64, Option<i64>, Option<i64>, Option<i64>);

/// A card's bucket of head readings: card, bucket, min, sum, count, max.
type HeadRow = (i64, i64, Option<f64>, Option<f64>, i64, Option<f64>);

/// A bucket's readings so far.
struct Sum {
    min: f64,
    sum: f64,
    max: f64,
    count: i64,
}

impl Default for Sum {
    fn default() -> Self {
        Self {
            min: f64::INFINITY,
            sum: 0.0,
            max: f64::NEG_INFINITY,
            count: 0,
        }
    }
}

impl Sum {
    fn add(&mut self, min: f64, sum: f64, max: f64, count: i64) {
        self.min = self.min.min(min);
        self.max = self.max.max(max);
        self.sum += sum;
        self.count += count;
    }
}

/// Moves head readings before `before` (a multiple of [`COMPACT_EVERY_S`]; every minute before
/// it is rolled up) into compressed blocks, one per card and window, at most six hours a pass
/// (an upgraded database catches up over a few passes). A window not over yet gets a block of
/// what it has so far, which the next pass decodes, extends and writes again: the head stays
/// at most ten minutes and a minute deep. `t1` of a block is where its pass ended (exclusive):
/// the head begins at the newest. Head rows are taken with `DELETE … RETURNING`, so a reading
/// another writer adds meanwhile stays in the head.
async fn compact(tx: &mut Tx<'_>, before: i64) -> Result<(), StoreError> {
    let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(t1) FROM samples_blocks")
        .fetch_one(&mut **tx)
        .await?;
    let oldest: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(t) FROM samples_raw
         WHERE gpu_id IN (SELECT id FROM gpus) AND t >= $1 AND t < $2",
    )
    .persistent(false)
    .bind(newest.unwrap_or(i64::MIN))
    .bind(before)
    .fetch_one(&mut **tx)
    .await?;
    let Some(oldest) = oldest else {
        return Ok(());
    };
    let until = before.min(oldest.div_euclid(COMPACT_EVERY_S) * COMPACT_EVERY_S + 6 * 3600);
    let mut rows: Vec<RawRow> = sqlx::query_as(
        "DELETE FROM samples_raw WHERE gpu_id IN (SELECT id FROM gpus) AND t >= $1 AND t < $2
             RETURNING gpu_id, t, util, mem_mib, temp_c, power_dw, clock_mhz",
    )
    .persistent(false)
    .bind(oldest)
    .bind(until)
    .fetch_all(&mut **tx)
    .await?;
    // The blocks so far of the windows these readings extend.
    let first_window = oldest.div_euclid(WINDOW_S) * WINDOW_S;
    let earlier: Vec<(i64, i64, Vec<u8>)> = sqlx::query_as(
        "SELECT gpu_id, t0, data FROM samples_blocks
         WHERE gpu_id IN (SELECT id FROM gpus) AND t0 >= $1 AND t0 < $2",
    )
    .persistent(false)
    .bind(first_window)
    .bind(until)
    .fetch_all(&mut **tx)
    .await?;
    let mut so_far: HashMap<(i64, i64), Vec<u8>> = earlier
        .into_iter()
        .map(|(gpu, t0, data)| ((gpu, t0), data))
        .collect();
    rows.sort_unstable_by_key(|r| (r.0, r.1));
    let mut blocks: Vec<(i64, i64, i64, i64, Vec<u8>)> = Vec::new();
    for window in
        rows.chunk_by(|a, b| a.0 == b.0 && a.1.div_euclid(WINDOW_S) == b.1.div_euclid(WINDOW_S))
    {
        let (gpu, t0) = (window[0].0, window[0].1.div_euclid(WINDOW_S) * WINDOW_S);
        let fresh =
            window.iter().map(
                |&(_, t, util, mem_mib, temp_c, power_dw, clock_mhz)| Reading {
                    t,
                    util,
                    mem_mib,
                    temp_c,
                    power_dw,
                    clock_mhz,
                },
            );
        let mut readings = match so_far.remove(&(gpu, t0)) {
            Some(data) => block::decode(&data)?,
            None => Vec::new(),
        };
        // A head reading of a second the block has is the newer one.
        let seconds: std::collections::HashSet<i64> = window.iter().map(|r| r.1).collect();
        readings.retain(|r| !seconds.contains(&r.t));
        readings.extend(fresh);
        readings.sort_unstable_by_key(|r| r.t);
        blocks.push((
            gpu,
            t0,
            until.min(t0 + WINDOW_S),
            readings.len() as i64,
            block::encode(&readings),
        ));
    }
    for chunk in blocks.chunks(ROWS_PER_STATEMENT) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("({})", super::sql::placeholders(i * 5 + 1, 5)))
            .collect();
        let sql = format!(
            "INSERT INTO samples_blocks (gpu_id, t0, t1, n, data) VALUES {}
             ON CONFLICT (gpu_id, t0) DO UPDATE
             SET t1 = excluded.t1, n = excluded.n, data = excluded.data",
            values.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for (gpu, t0, t1, n, data) in chunk {
            query = query
                .bind(*gpu)
                .bind(*t0)
                .bind(*t1)
                .bind(*n)
                .bind(data.as_slice());
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Puts the blocks of every window that ends after `from` back into raw rows (a reading
/// written since, for the same card and second, wins), for a rollup of late readings.
async fn restore_blocks(tx: &mut Tx<'_>, from: i64) -> Result<(), StoreError> {
    let blocks: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "DELETE FROM samples_blocks WHERE gpu_id IN (SELECT id FROM gpus) AND t0 > $1
         RETURNING gpu_id, data",
    )
    .persistent(false)
    .bind(from - WINDOW_S)
    .fetch_all(&mut **tx)
    .await?;
    let mut readings = Vec::new();
    for (gpu, data) in blocks {
        let decoded = block::decode(&data)?;
        readings.extend(decoded.into_iter().map(|r| (gpu, r)));
    }
    insert_raw(tx, &readings, "ON CONFLICT (gpu_id, t) DO NOTHING").await
}

/// Inserts raw rows (card id, reading), `on_conflict` saying what a second reading of the same
/// card and second does.
async fn insert_raw(
    tx: &mut Tx<'_>,
    readings: &[(i64, Reading)],
    on_conflict: &str,
) -> Result<(), StoreError> {
    for chunk in readings.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<String> = (0..chunk.len())
            .map(|i| format!("({})", super::sql::placeholders(i * 7 + 1, 7)))
            .collect();
        let sql = format!(
            "INSERT INTO samples_raw (gpu_id, t, util, mem_mib, temp_c, power_dw, clock_mhz)
             VALUES {} {on_conflict}",
            rows.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for (gpu, r) in chunk {
            query = query
                .bind(*gpu)
                .bind(r.t)
                .bind(r.util)
                .bind(r.mem_mib)
                .bind(r.temp_c)
                .bind(r.power_dw)
                .bind(r.clock_mhz);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}
