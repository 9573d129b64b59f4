//! History over HTTP, Lanes against Prometheus, holding the same readings (loaded by
//! `lanes-bench history --keep DIR --openmetrics FILE`, imported by promtool; the script
//! bench/history-prometheus.sh starts both servers). For each range both are asked for the
//! utilization of every card in the same buckets: Lanes by `GET /api/v1/history` at 1,000
//! points (min, mean and max per bucket), Prometheus by `query_range` with the step Lanes chose
//! and `min_over_time`, `avg_over_time` and `max_over_time` over one step, the three sent at
//! once (the same answer: three series per card). Prometheus's mean alone is timed too. The
//! two are asked in turn, so that both see the same machine. A time runs until the whole answer
//! has arrived (the last of Prometheus's three); answers are read as JSON after the clock.

use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A `lanes serve` holding the readings.
    #[arg(long)]
    lanes: String,
    /// API token for it.
    #[arg(long, env = "LANES_TOKEN")]
    token: String,
    /// The Prometheus holding the same readings, e.g. http://127.0.0.1:9090.
    #[arg(long)]
    prometheus: String,
    /// The end of the loaded readings (Unix seconds), as `lanes-bench history` printed it.
    #[arg(long)]
    end: i64,
    /// Days loaded: ranges longer than that are left out.
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Timed queries per range and server.
    #[arg(long, default_value_t = 100)]
    queries: usize,
}

/// An answer's whole body, and when it had all arrived: a server's latency is until its last
/// byte, not how long one client library takes to read the JSON into a tree (which depends on
/// each answer's shape as much as on its server). Answers are read into trees after the clock.
async fn body(request: reqwest::RequestBuilder) -> (Vec<u8>, Instant) {
    let body = request
        .send()
        .await
        .expect("the server answers")
        .error_for_status()
        .expect("the server answers 200")
        .bytes()
        .await
        .expect("a body");
    let arrived = Instant::now();
    (body.to_vec(), arrived)
}

/// One Lanes query's answer.
async fn lanes(client: &reqwest::Client, args: &Args, from: i64, to: i64) -> (Vec<u8>, Instant) {
    let iso = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .expect("a time")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let request = client
        .get(format!("http://{}/api/v1/history", args.lanes))
        .bearer_auth(&args.token)
        .query(&[
            ("from", iso(from)),
            ("to", iso(to)),
            ("points", "1000".to_string()),
            ("metric", "utilization".to_string()),
        ]);
    body(request).await
}

/// A Lanes answer's bucket width and the points it holds over every card.
fn lanes_points(answer: &[u8]) -> (i64, usize) {
    let answer: serde_json::Value = serde_json::from_slice(answer).expect("JSON");
    let points = answer["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["points"].as_array().map_or(0, Vec::len))
        .sum();
    (answer["bucket_s"].as_i64().expect("bucket_s"), points)
}

/// One Prometheus range query's answer.
async fn prometheus(
    client: &reqwest::Client,
    args: &Args,
    function: &str,
    from: i64,
    to: i64,
    step: i64,
) -> (Vec<u8>, Instant) {
    let request = client
        .get(format!("{}/api/v1/query_range", args.prometheus))
        .query(&[
            (
                "query",
                format!("{function}(lanes_gpu_utilization_percent[{step}s])"),
            ),
            ("start", (from + step).to_string()),
            ("end", to.to_string()),
            ("step", step.to_string()),
        ]);
    body(request).await
}

/// The points a Prometheus answer holds over every series.
fn prometheus_points(answer: &[u8]) -> usize {
    let answer: serde_json::Value = serde_json::from_slice(answer).expect("JSON");
    answer["data"]["result"]
        .as_array()
        .expect("a result")
        .iter()
        .map(|s| s["values"].as_array().map_or(0, Vec::len))
        .sum()
}

fn summary(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (
        crate::percentile(times, 50.0),
        crate::percentile(times, 99.0),
    )
}

pub async fn run(args: Args) {
    let client = reqwest::Client::new();
    println!("| range | Lanes bucket | Lanes points | Lanes p50 | Lanes p99 | Prometheus min+avg+max p50 | p99 | Prometheus avg only p50 | p99 | Prometheus points (avg) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (label, range) in [
        ("1 h", 3600),
        ("24 h", 86_400),
        ("7 d", 7 * 86_400),
        ("30 d", 30 * 86_400),
    ] {
        if range > args.days * 86_400 {
            continue;
        }
        let (from, to) = (args.end - range, args.end);
        let (step, _) = lanes_points(&lanes(&client, &args, from, to).await.0);
        // Warm-up: both servers' caches and connections.
        for _ in 0..3 {
            lanes(&client, &args, from, to).await;
            prometheus(&client, &args, "avg_over_time", from, to, step).await;
        }
        let (mut ours, mut theirs, mut mean) = (Vec::new(), Vec::new(), Vec::new());
        let (mut our_points, mut their_points) = (0, 0);
        let ms = |began: Instant, arrived: Instant| (arrived - began).as_secs_f64() * 1e3;
        for _ in 0..args.queries {
            let began = Instant::now();
            let (answer, arrived) = lanes(&client, &args, from, to).await;
            ours.push(ms(began, arrived));
            our_points = lanes_points(&answer).1;
            // The three side by side, until the last of them has arrived.
            let began = Instant::now();
            let ((_, a), (_, b), (_, c)) = futures::future::join3(
                prometheus(&client, &args, "min_over_time", from, to, step),
                prometheus(&client, &args, "avg_over_time", from, to, step),
                prometheus(&client, &args, "max_over_time", from, to, step),
            )
            .await;
            theirs.push(ms(began, a.max(b).max(c)));
            let began = Instant::now();
            let (answer, arrived) =
                prometheus(&client, &args, "avg_over_time", from, to, step).await;
            mean.push(ms(began, arrived));
            their_points = prometheus_points(&answer);
        }
        let (o50, o99) = summary(&mut ours);
        let (t50, t99) = summary(&mut theirs);
        let (m50, m99) = summary(&mut mean);
        println!(
            "| {label} | {step} s | {our_points} | {o50:.1} ms | {o99:.1} ms | {t50:.1} ms | {t99:.1} ms | {m50:.1} ms | {m99:.1} ms | {their_points} |"
        );
    }
}
