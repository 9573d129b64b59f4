//! History benchmark: 30 days × 8 simulated cards at one reading a second, written through the
//! store's real write, rollup and pruning functions (in one-minute batches instead of the
//! server's five seconds, so that loading takes minutes, not an hour), then the database size on
//! disk, the bytes a raw reading's metric takes (in compressed blocks, and as the rows they were
//! before), and query latency for 1 h, 24 h, 7 d and 30 d ranges at 1,000 points. On SQLite in
//! a scratch file, or on an empty PostgreSQL database given by URL. `--openmetrics FILE` writes
//! the same readings for `promtool tsdb create-blocks-from openmetrics`, and `--keep DIR` keeps
//! the database for a server (bench/history-prometheus.sh compares the two over HTTP).

use lanes_server::history::{plan, Metric, Reading, Retention};
use lanes_server::store::Store;
use lanes_server::telemetry::sim::SimulatedFleet;
use lanes_server::telemetry::GpuSource;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const GPUS: u32 = 8;
const BATCH_S: i64 = 60;

/// Where the readings go besides the store: one OpenMetrics file per metric, joined at the end.
struct OpenMetrics {
    out: PathBuf,
    parts: Vec<(PathBuf, std::io::BufWriter<std::fs::File>)>,
}

/// The metric families the readings become, in stored units (integers, as Lanes keeps them:
/// Prometheus's float encoding compresses integer values best, so this favours it).
const FAMILIES: [&str; 5] = [
    "lanes_gpu_utilization_percent",
    "lanes_gpu_memory_used_mib",
    "lanes_gpu_temperature_celsius",
    "lanes_gpu_power_deciwatts",
    "lanes_gpu_sm_clock_mhz",
];

impl OpenMetrics {
    fn new(out: &Path) -> Self {
        let parts = FAMILIES
            .iter()
            .map(|name| {
                let path = out.with_extension(format!("{name}.part"));
                let file = std::fs::File::create(&path).expect("an OpenMetrics part");
                (path, std::io::BufWriter::with_capacity(1 << 20, file))
            })
            .collect();
        Self {
            out: out.to_path_buf(),
            parts,
        }
    }

    fn add(&mut self, uuid: &str, r: &Reading) {
        let values = [
            Some(r.util),
            Some(r.mem_mib),
            r.temp_c,
            r.power_dw,
            r.clock_mhz,
        ];
        for ((_, part), (name, value)) in self.parts.iter_mut().zip(FAMILIES.iter().zip(values)) {
            if let Some(v) = value {
                writeln!(part, "{name}{{gpu=\"{uuid}\"}} {v} {}", r.t).expect("written");
            }
        }
    }

    /// The file promtool reads: each family whole, then `# EOF`.
    fn finish(self) {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&self.out).expect("the OpenMetrics file"),
        );
        for ((path, part), name) in self.parts.into_iter().zip(FAMILIES) {
            drop(part.into_inner().expect("flushed"));
            writeln!(out, "# TYPE {name} gauge").expect("written");
            let mut part = std::fs::File::open(&path).expect("a part");
            std::io::copy(&mut part, &mut out).expect("copied");
            std::fs::remove_file(&path).expect("a part removed");
        }
        writeln!(out, "# EOF").expect("written");
        out.flush().expect("flushed");
    }
}

pub async fn run(
    days: i64,
    queries: usize,
    database_url: Option<String>,
    keep: Option<PathBuf>,
    openmetrics: Option<PathBuf>,
) {
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("lanes-history-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let mut openmetrics = openmetrics.as_deref().map(OpenMetrics::new);
    let db = dir.join("lanes.db");
    let url = database_url.unwrap_or_else(|| format!("sqlite://{}", db.display()));
    let store = Store::open(&url).await.expect("the store opens");
    let mut fleet = SimulatedFleet::new("bench", GPUS, 7);
    store
        .inventory()
        .record("bench", fleet.inventory(), chrono::Utc::now())
        .await
        .expect("the inventory");
    let ids = store.history().gpu_ids().await.expect("card ids");
    let uuids: Vec<String> = fleet.inventory().iter().map(|g| g.uuid.clone()).collect();
    let cards: Vec<i64> = uuids
        .iter()
        .map(|uuid| ids[&("bench".to_string(), uuid.clone())])
        .collect();
    let retention = Retention::default();
    let end = chrono::Utc::now().timestamp() / 60 * 60;
    let start = end - days * 86_400;
    let loading = Instant::now();
    let mut batch = Vec::with_capacity((BATCH_S * GPUS as i64) as usize);
    let mut written = 0u64;
    let mut t = start;
    while t < end {
        batch.clear();
        for s in t..(t + BATCH_S).min(end) {
            for (pos, card) in cards.iter().enumerate() {
                let sample = fleet.read_counters(pos, s * 1000).expect("a reading");
                let reading = Reading::of(&sample);
                if let Some(om) = openmetrics.as_mut() {
                    om.add(&uuids[pos], &reading);
                }
                batch.push((*card, reading));
            }
        }
        store
            .history()
            .insert_readings(&batch)
            .await
            .expect("insert");
        written += batch.len() as u64;
        t += BATCH_S;
        store
            .history()
            .roll_up(t - BATCH_S, t)
            .await
            .expect("roll up");
        if t % 600 == 0 {
            let before = |keep: std::time::Duration| t - keep.as_secs() as i64;
            store
                .history()
                .prune(before(retention.raw), before(retention.minute), None)
                .await
                .expect("prune");
            if t % 86_400 == 0 {
                // What autovacuum does on a server that runs it (this one's is off).
                store.backups().vacuum().await.expect("vacuum");
            }
        }
    }
    let load_s = loading.elapsed().as_secs_f64();
    if let Some(om) = openmetrics {
        om.finish();
    }
    let bytes: u64 = match store.backend() {
        lanes_server::store::Backend::Sqlite => {
            store.close().await;
            std::fs::read_dir(&dir)
                .expect("the scratch dir")
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        }
        lanes_server::store::Backend::Postgres => {
            let size = store.backups().bytes().await.expect("the database size");
            store.close().await;
            size
        }
    };
    // After the file's size: the scratch table it writes would count there.
    let raw = raw_bytes(&url, url.starts_with("sqlite:")).await;
    println!("| readings written | {written} ({days} days × {GPUS} cards × 1 s) |");
    println!(
        "| load time | {load_s:.0} s ({:.0} readings/s, with rollups and pruning) |",
        written as f64 / load_s
    );
    println!(
        "| database on disk | {:.1} MiB |",
        bytes as f64 / 1_048_576.0
    );
    println!(
        "| bytes per raw-equivalent reading | {:.2} |",
        bytes as f64 / written as f64
    );
    println!(
        "| raw readings kept (48 h) | {} readings, {} samples (a metric of a card at a second) |",
        raw.readings, raw.samples
    );
    println!(
        "| bytes per raw sample, compressed blocks and head | {:.2} ({} bytes) |",
        raw.stored as f64 / raw.samples as f64,
        raw.stored
    );
    println!(
        "| bytes per raw sample, the same readings as rows (the table before blocks) | {:.2} ({} bytes) |",
        raw.as_rows as f64 / raw.samples as f64,
        raw.as_rows
    );
    println!("| end of the loaded range (Unix seconds) | {end} |");
    println!();
    println!("| range | resolution | bucket | points per card | p50 | p99 |");
    println!("|---|---|---|---|---|---|");
    let store = Store::open(&url).await.expect("the store opens again");
    for (label, range) in [
        ("1 h", 3600),
        ("24 h", 86_400),
        ("7 d", 7 * 86_400),
        ("30 d", 30 * 86_400),
    ] {
        let range = range.min(days * 86_400);
        let (from, to) = (end - range, end);
        let p = plan(from, to, 1000, &retention, end);
        let mut times = Vec::with_capacity(queries);
        let mut points = 0;
        for _ in 0..queries {
            let began = Instant::now();
            let found = store
                .history()
                .read(&cards, Metric::Utilization, from, to, p)
                .await
                .expect("a query");
            times.push(began.elapsed().as_secs_f64() * 1e3);
            points = found.values().map(Vec::len).max().unwrap_or(0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {label} | {:?} | {} s | {points} | {:.2} ms | {:.2} ms |",
            p.resolution,
            p.bucket_s,
            crate::percentile(&times, 50.0),
            crate::percentile(&times, 99.0)
        );
    }
    store.close().await;
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A raw row: card id, time, util, memory, temperature, power, clock.
type RawRow = (i64, i64, i64, i64, Option<i64>, Option<i64>, Option<i64>);

/// What raw readings take in the database.
struct RawBytes {
    readings: u64,
    samples: u64,
    /// Blocks and head, with their indexes, as the database stores them.
    stored: u64,
    /// The same readings as one row each, in a table like `samples_raw`.
    as_rows: u64,
}

/// Bytes the raw tables take: pages on SQLite (its `dbstat` table), relations with their
/// indexes and TOAST on PostgreSQL. The same readings are then written as rows to a scratch
/// table measured the same way, for the figure before blocks.
async fn raw_bytes(url: &str, sqlite: bool) -> RawBytes {
    sqlx::any::install_default_drivers();
    let pool = &sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("the database");
    let size = |table: &'static str| {
        let sql = if sqlite {
            format!("SELECT CAST(COALESCE(SUM(pgsize), 0) AS BIGINT) FROM dbstat WHERE name = '{table}'")
        } else {
            format!("SELECT pg_total_relation_size('{table}')")
        };
        async move {
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(pool)
                .await
                .expect("a table's size") as u64
        }
    };
    let stored = size("samples_blocks").await + size("samples_raw").await;
    let blocks: Vec<(i64, Vec<u8>)> = sqlx::query_as("SELECT gpu_id, data FROM samples_blocks")
        .fetch_all(pool)
        .await
        .expect("the blocks");
    let head: Vec<RawRow> = sqlx::query_as(
        "SELECT gpu_id, t, util, mem_mib, temp_c, power_dw, clock_mhz FROM samples_raw",
    )
    .fetch_all(pool)
    .await
    .expect("the head");
    let mut rows = Vec::new();
    for (gpu, data) in &blocks {
        let readings = lanes_server::history::block::decode(data).expect("a block");
        rows.extend(readings.into_iter().map(|r| (*gpu, r)));
    }
    for (gpu, t, util, mem_mib, temp_c, power_dw, clock_mhz) in head {
        let r = Reading {
            t,
            util,
            mem_mib,
            temp_c,
            power_dw,
            clock_mhz,
        };
        rows.push((gpu, r));
    }
    let samples: u64 = rows
        .iter()
        .map(|(_, r)| 2 + [r.temp_c, r.power_dw, r.clock_mhz].iter().flatten().count() as u64)
        .sum();
    let table = if sqlite {
        "CREATE TABLE bench_rows (gpu_id INTEGER NOT NULL, t INTEGER NOT NULL, util INTEGER NOT NULL,
         mem_mib INTEGER NOT NULL, temp_c INTEGER, power_dw INTEGER, clock_mhz INTEGER,
         PRIMARY KEY (gpu_id, t)) WITHOUT ROWID"
    } else {
        "CREATE TABLE bench_rows (gpu_id BIGINT NOT NULL, t BIGINT NOT NULL, util BIGINT NOT NULL,
         mem_mib BIGINT NOT NULL, temp_c BIGINT, power_dw BIGINT, clock_mhz BIGINT,
         PRIMARY KEY (gpu_id, t)); CREATE INDEX bench_rows_t ON bench_rows (t)"
    };
    sqlx::raw_sql(table)
        .execute(pool)
        .await
        .expect("a scratch table");
    // Small statements: SQLite looks each `$N` up among the statement's others.
    for chunk in rows.chunks(200) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let b = i * 7;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7
                )
            })
            .collect();
        let sql = format!("INSERT INTO bench_rows VALUES {}", values.join(", "));
        let mut q = sqlx::query(&sql);
        for (g, r) in chunk {
            q = q
                .bind(*g)
                .bind(r.t)
                .bind(r.util)
                .bind(r.mem_mib)
                .bind(r.temp_c)
                .bind(r.power_dw)
                .bind(r.clock_mhz);
        }
        q.execute(pool).await.expect("rows");
    }
    if !sqlite {
        sqlx::raw_sql("VACUUM ANALYZE bench_rows")
            .execute(pool)
            .await
            .expect("vacuum");
    }
    let as_rows = size("bench_rows").await;
    sqlx::raw_sql("DROP TABLE bench_rows")
        .execute(pool)
        .await
        .expect("dropped");
    pool.close().await;
    RawBytes {
        readings: rows.len() as u64,
        samples,
        stored,
        as_rows,
    }
}
