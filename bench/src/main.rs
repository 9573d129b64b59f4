//! Lanes benchmarks. Each prints a figure and the reference it is measured against; see
//! docs/benchmarks.md for results and bench/run.sh for the full run.
//!
//! - `poll`: cost of one poll per GPU (the server's `Sampler`) against the raw NVML calls it
//!   makes, in the same process and run. Needs a driver (the device machine).
//! - `fanout`: websocket fan-out of a running `lanes serve` to N clients on loopback: latency
//!   from the tick's sample time to its receipt by each client, and the server's RSS.
//! - `bookings`: booking creation throughput and latency on a running `lanes serve` against a
//!   bare axum handler in the same run.
//! - `history`: 30 days × 8 cards of readings through the store's write, rollup and pruning
//!   path; database size and query latency per range.
//! - `history-http`: the same readings in a `lanes serve` and in Prometheus, each asked over
//!   HTTP for 1 h, 24 h, 7 d and 30 d at 1,000 points (bench/history-prometheus.sh).
//! - `schedule`: one scheduling pass over a deep queue against sorting it.
//! - `notebook`: a kernel message's round trip through the portal's `/sessions/ID/` proxy
//!   against the same Jupyter on its own socket, and what an open, idle session costs the
//!   server (bench/notebook.sh starts it).
//! - `attribution`: reading the owners of a poll's processes with container attribution
//!   against without it (bench/containers.sh starts the processes).

mod attribution;
mod bookings;
mod history;
mod notebook;
mod prometheus;
mod schedule;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use lanes_types::TelemetryMessage;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Poll cost per GPU against the raw NVML calls.
    Poll {
        /// Polls of the whole node to time, per variant.
        #[arg(long, default_value_t = 2000)]
        rounds: u32,
    },
    /// Websocket fan-out latency and server RSS.
    Fanout {
        /// Server address (a running `lanes serve`).
        #[arg(long)]
        addr: String,
        /// Server pid, for its RSS.
        #[arg(long)]
        pid: u32,
        /// Number of websocket clients.
        #[arg(long)]
        clients: usize,
        /// Seconds to measure after every client is connected.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// API token the clients authenticate with.
        #[arg(long, env = "LANES_TOKEN")]
        token: String,
        /// Ticks each client should get per second (one per node at 1 Hz), for the expected
        /// count.
        #[arg(long, default_value_t = 1)]
        ticks_per_second: u64,
    },
    /// Booking creation under concurrent load against a bare axum handler.
    Bookings {
        /// Server address (a running `lanes serve`, no quotas set).
        #[arg(long)]
        addr: String,
        /// API tokens of the booking users, comma-separated: client `i` uses token `i % n`.
        #[arg(long, env = "LANES_TOKEN", value_delimiter = ',')]
        token: Vec<String>,
        #[arg(long, default_value_t = 4000)]
        requests: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// The reference for a server on PostgreSQL: a database where the bare handler's one
        /// insert goes (its table is made there).
        #[arg(long)]
        postgres: Option<String>,
        /// Days from now to the first booked hour (a second run on one server starts later).
        #[arg(long, default_value_t = 1)]
        days_ahead: i64,
    },
    /// One scheduling pass over a deep queue.
    Schedule {
        #[arg(long, default_value_t = 10_000)]
        pending: usize,
        #[arg(long, default_value_t = 64)]
        gpus: usize,
        #[arg(long, default_value_t = 100)]
        runs: usize,
    },
    /// Owners of a poll's processes with container attribution against without.
    Attribution {
        /// The processes a poll lists (comma-separated pids).
        #[arg(long, value_delimiter = ',', required = true)]
        pids: Vec<u32>,
        #[arg(long, default_value_t = 2000)]
        rounds: u32,
    },
    /// A kernel message through the portal's proxy against Jupyter's own socket.
    Notebook(notebook::Args),
    /// History storage size and query latency (all 8 cards, 1,000 points).
    History {
        #[arg(long, default_value_t = 30)]
        days: i64,
        /// Timed queries per range.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// An empty PostgreSQL database to load instead of a scratch SQLite file.
        #[arg(long)]
        database_url: Option<String>,
        /// Keep the SQLite database in this directory (for `lanes serve`) instead of removing it.
        #[arg(long)]
        keep: Option<std::path::PathBuf>,
        /// Also write the readings here as OpenMetrics, for promtool.
        #[arg(long)]
        openmetrics: Option<std::path::PathBuf>,
    },
    /// History over HTTP: a `lanes serve` and a Prometheus holding the same readings, asked for
    /// the same ranges (bench/history-prometheus.sh loads and starts both).
    HistoryHttp(prometheus::Args),
}

fn main() {
    match Cli::parse().command {
        Command::Poll { rounds } => poll(rounds),
        Command::Attribution { pids, rounds } => attribution::run(pids, rounds),
        Command::Fanout {
            addr,
            pid,
            clients,
            seconds,
            token,
            ticks_per_second,
        } => tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(fanout(
                &addr,
                pid,
                clients,
                seconds * ticks_per_second,
                seconds,
                &token,
            )),
        Command::Bookings {
            addr,
            token,
            requests,
            concurrency,
            postgres,
            days_ahead,
        } => tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(bookings::run(
                &addr,
                &token,
                requests,
                concurrency,
                postgres.as_deref(),
                days_ahead,
            )),
        Command::Schedule {
            pending,
            gpus,
            runs,
        } => schedule::run(pending, gpus, runs),
        Command::Notebook(args) => tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(notebook::run(args)),
        Command::History {
            days,
            queries,
            database_url,
            keep,
            openmetrics,
        } => tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(history::run(days, queries, database_url, keep, openmetrics)),
        Command::HistoryHttp(args) => tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(prometheus::run(args)),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Median of `runs` timings of `f`, each of `rounds` calls, in microseconds per call.
fn time_per_call(runs: usize, rounds: u32, mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..rounds {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

fn poll(rounds: u32) {
    use lanes_server::telemetry::nvml::NvmlSource;
    use lanes_server::telemetry::poller::Sampler;
    use lanes_server::telemetry::GpuSource;
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

    let source = match NvmlSource::open("bench") {
        Ok(s) => s,
        Err(e) => {
            eprintln!("poll benchmark needs a driver: {e}");
            std::process::exit(2);
        }
    };
    let gpus = source.inventory().len();
    // The reference: the same NVML calls per card, straight through nvml-wrapper.
    let nvml = nvml_wrapper::Nvml::init().expect("NVML loads a second time");
    let raw = || {
        for i in 0..gpus as u32 {
            let d = nvml.device_by_index(i).unwrap();
            std::hint::black_box((
                d.utilization_rates().ok(),
                d.memory_info().ok(),
                d.temperature(TemperatureSensor::Gpu).ok(),
                d.power_usage().ok(),
                d.enforced_power_limit().ok(),
                d.clock_info(Clock::SM).ok(),
            ));
        }
    };
    let raw_processes = || {
        for i in 0..gpus as u32 {
            let d = nvml.device_by_index(i).unwrap();
            std::hint::black_box(d.running_compute_processes().ok());
        }
    };
    let mut sampler = Sampler::new(Box::new(source));
    let mut t = 0i64;
    // Warm up both paths (driver caches, page faults) before timing.
    for _ in 0..50 {
        raw();
        sampler.poll(0, false);
    }
    let runs = 7;
    let raw_us = time_per_call(runs, rounds, raw);
    let poll_us = time_per_call(runs, rounds, || {
        t += 1;
        std::hint::black_box(sampler.poll(t, false));
    });
    let raw_proc_us = time_per_call(runs, rounds / 10, || {
        raw();
        raw_processes();
    });
    let poll_proc_us = time_per_call(runs, rounds / 10, || {
        t += 1;
        std::hint::black_box(sampler.poll(t, true));
    });
    let per_gpu = |us: f64| us / gpus as f64;
    println!(
        "GPUs: {gpus}; median of {runs} runs of {rounds} node polls (processes: {} polls)",
        rounds / 10
    );
    println!("| variant | raw NVML µs/GPU | lanes poll µs/GPU | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| counters only | {:.1} | {:.1} | {:.2}× |",
        per_gpu(raw_us),
        per_gpu(poll_us),
        poll_us / raw_us
    );
    println!(
        "| counters + process list | {:.1} | {:.1} | {:.2}× |",
        per_gpu(raw_proc_us),
        per_gpu(poll_proc_us),
        poll_proc_us / raw_proc_us
    );
    drop(sampler);
    // Card health: the same polls reading Xids from the kernel log and the error counters
    // at the process interval, against a sampler without either (same run, interleaved: bare,
    // health, bare again).
    let bare = || {
        Sampler::new(Box::new(
            NvmlSource::open_with("bench", false).expect("NVML opens"),
        ))
        .without_health()
    };
    let mut without = bare();
    let mut with = Sampler::new(Box::new(NvmlSource::open("bench").expect("NVML opens")));
    for _ in 0..50 {
        without.poll(0, true);
        with.poll(0, true);
    }
    let mut timed = |sampler: &mut Sampler, refresh: bool, rounds: u32| {
        time_per_call(runs, rounds, || {
            t += 1;
            std::hint::black_box(sampler.poll(t, refresh));
        })
    };
    let tick_bare = timed(&mut without, false, rounds);
    let tick_health = timed(&mut with, false, rounds);
    let tick_bare_again = timed(&mut without, false, rounds);
    let full_bare = timed(&mut without, true, rounds / 10);
    let full_health = timed(&mut with, true, rounds / 10);
    let full_bare_again = timed(&mut without, true, rounds / 10);
    println!();
    println!("Card health (Xids read from the kernel log + error counters) against the same poll without them:");
    println!("| poll | without µs/GPU | with µs/GPU | without, again | extra |");
    println!("|---|---|---|---|---|");
    for (what, a, b, c) in [
        (
            "every tick (counters; Xids taken)",
            tick_bare,
            tick_health,
            tick_bare_again,
        ),
        (
            "process interval (+ process list; + error counters)",
            full_bare,
            full_health,
            full_bare_again,
        ),
    ] {
        let reference = (a + c) / 2.0;
        println!(
            "| {what} | {:.1} | {:.1} | {:.1} | {:+.1} % |",
            per_gpu(a),
            per_gpu(b),
            per_gpu(c),
            (b / reference - 1.0) * 100.0
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn now_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// `ticks` is how many ticks each client should get in `seconds`.
async fn fanout(addr: &str, pid: u32, clients: usize, ticks: u64, seconds: u64, token: &str) {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let rss_idle = rss_kib(pid);
    let url = format!("ws://{addr}/api/v1/telemetry/ws");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<f64>();
    let measuring = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut request = url.as_str().into_client_request().expect("a websocket URL");
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("a header value"),
        );
        let (ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("the server accepts the client");
        let tx = tx.clone();
        let measuring = measuring.clone();
        tasks.push(tokio::spawn(async move {
            let (_sink, mut stream) = ws.split();
            while let Some(Ok(msg)) = stream.next().await {
                let received = now_ms_f64();
                let Ok(text) = msg.into_text() else { continue };
                if !measuring.load(std::sync::atomic::Ordering::Relaxed) {
                    continue;
                }
                // Only the tag and timestamp are needed; clients parse the whole message, as
                // a browser would.
                if let Ok(TelemetryMessage::Tick { at_ms, .. }) = serde_json::from_str(&text) {
                    let _ = tx.send(received - at_ms as f64);
                }
            }
        }));
    }
    drop(tx);
    tokio::time::sleep(Duration::from_secs(2)).await;
    measuring.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut rss_peak = 0;
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_peak = rss_peak.max(rss_kib(pid));
    }
    measuring.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Ok(l) = rx.try_recv() {
        latencies.push(l);
    }
    for t in &tasks {
        t.abort();
    }
    latencies.sort_by(f64::total_cmp);
    let expected = clients as u64 * ticks;
    println!(
        "| {clients} | {} of ~{expected} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
        latencies.len(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN),
        rss_idle as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
    );
}
