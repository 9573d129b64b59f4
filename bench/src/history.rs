//! History benchmark: 30 days × 8 simulated cards at one reading a second, written through the
//! store's real write, rollup and pruning functions (in one-minute batches instead of the
//! server's five seconds, so that loading takes minutes, not an hour), then the database size on
//! disk and query latency for 1 h, 24 h, 7 d and 30 d ranges at 1,000 points. On SQLite in a
//! scratch file, or on an empty PostgreSQL database given by URL.

use lanes_server::history::{plan, Metric, Reading, Retention};
use lanes_server::store::Store;
use lanes_server::telemetry::sim::SimulatedFleet;
use lanes_server::telemetry::GpuSource;
use std::time::Instant;

const GPUS: u32 = 8;
const BATCH_S: i64 = 60;

pub async fn run(days: i64, queries: usize, database_url: Option<String>) {
    let dir = std::env::temp_dir().join(format!("lanes-history-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
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
    let cards: Vec<i64> = fleet
        .inventory()
        .iter()
        .map(|g| ids[&("bench".to_string(), g.uuid.clone())])
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
                batch.push((*card, Reading::of(&sample)));
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
    let _ = std::fs::remove_dir_all(&dir);
}
