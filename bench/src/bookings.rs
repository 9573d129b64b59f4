//! Booking creation under concurrent load: `POST /api/v1/bookings` on a running `lanes serve`
//! against a bare axum handler that reads the same JSON body and answers 201 with JSON, served
//! from this process on loopback in the same run. Every Lanes request books a distinct card ×
//! hour, so each one runs the whole path (login check, validation, the IMMEDIATE transaction
//! with its overlap and quota queries, the insert, the audit line) and succeeds.

use axum::routing::post;
use axum::{Json, Router};
use lanes_app::model::booking::CreateBooking;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Figures {
    pub requests: usize,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub failures: usize,
}

impl Figures {
    pub fn per_second(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

async fn bare(Json(request): Json<CreateBooking>) -> (axum::http::StatusCode, Json<CreateBooking>) {
    (axum::http::StatusCode::CREATED, Json(request))
}

/// Serves the reference handler on a random loopback port; returns its address.
async fn serve_bare() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("an address").to_string();
    let app = Router::new().route("/api/v1/bookings", post(bare));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Sends `requests` bookings from `concurrency` clients; request `i` books card
/// `i % cards.len()` for hour `i / cards.len()` after `base`.
async fn load(
    url: String,
    token: Option<String>,
    cards: Arc<Vec<String>>,
    base: chrono::DateTime<chrono::Utc>,
    requests: usize,
    concurrency: usize,
) -> Figures {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .expect("a client");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, token, cards, next) = (
                client.clone(),
                url.clone(),
                token.clone(),
                cards.clone(),
                next.clone(),
            );
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failures = 0;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break;
                    }
                    let start = base + chrono::Duration::hours((i / cards.len()) as i64);
                    let body = CreateBooking {
                        gpus: Some(vec![cards[i % cards.len()].clone()]),
                        count: None,
                        start,
                        end: start + chrono::Duration::hours(1),
                        note: "bench".into(),
                        user: None,
                    };
                    let mut request = client.post(&url).json(&body);
                    if let Some(token) = &token {
                        request = request.bearer_auth(token);
                    }
                    let sent = Instant::now();
                    match request.send().await {
                        Ok(r) if r.status() == 201 => {
                            let _ = r.bytes().await;
                            latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                        }
                        _ => failures += 1,
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut failures = 0;
    for worker in workers {
        let (l, f) = worker.await.expect("a worker");
        latencies.extend(l);
        failures += f;
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    Figures {
        requests: latencies.len(),
        seconds,
        p50_ms: crate::percentile(&latencies, 50.0),
        p99_ms: crate::percentile(&latencies, 99.0),
        failures,
    }
}

pub async fn run(addr: &str, token: &str, requests: usize, concurrency: usize) {
    let client = reqwest::Client::new();
    let gpus: Vec<lanes_app::model::GpuState> = client
        .get(format!("http://{addr}/api/v1/gpus"))
        .bearer_auth(token)
        .send()
        .await
        .expect("the server answers")
        .json()
        .await
        .expect("a GPU list");
    let cards = Arc::new(gpus.into_iter().map(|g| g.info.uuid).collect::<Vec<_>>());
    let base = chrono::Utc::now() + chrono::Duration::days(1);
    let bare_addr = serve_bare().await;
    // Warm both up (connections, caches), then measure the reference first and Lanes second,
    // with bookings far apart so the warm-up never conflicts.
    let _ = load(
        format!("http://{bare_addr}/api/v1/bookings"),
        None,
        cards.clone(),
        base,
        200,
        concurrency,
    )
    .await;
    let _ = load(
        format!("http://{addr}/api/v1/bookings"),
        Some(token.into()),
        cards.clone(),
        base + chrono::Duration::days(3650),
        200,
        concurrency,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reference = load(
        format!("http://{bare_addr}/api/v1/bookings"),
        None,
        cards.clone(),
        base,
        requests,
        concurrency,
    )
    .await;
    let lanes = load(
        format!("http://{addr}/api/v1/bookings"),
        Some(token.into()),
        cards,
        base,
        requests,
        concurrency,
    )
    .await;
    for (name, f) in [
        ("bare axum handler", &reference),
        ("lanes POST /api/v1/bookings", &lanes),
    ] {
        println!(
            "| {name} | {concurrency} | {} | {:.0} | {:.2} | {:.2} | {} |",
            f.requests,
            f.per_second(),
            f.p50_ms,
            f.p99_ms,
            f.failures
        );
    }
    println!();
    println!(
        "Lanes booking throughput is {:.1}% of the bare handler's (target ≥ 30%).",
        lanes.per_second() / reference.per_second() * 100.0
    );
}
