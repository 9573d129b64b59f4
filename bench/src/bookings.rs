//! Booking creation under concurrent load: `POST /api/v1/bookings` on a running `lanes serve`
//! against a bare axum handler that reads the same JSON body and answers 201 with JSON, served
//! from this process on loopback in the same run. Every Lanes request books a distinct card ×
//! hour, so each one runs the whole path (login check, validation, the IMMEDIATE transaction
//! with its overlap and quota queries, the insert, the audit line) and succeeds.

use axum::routing::post;
use axum::{Json, Router};
use lanes_types::booking::CreateBooking;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
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

/// The floor of a durable booking through the same driver: one row written in its own
/// `BEGIN IMMEDIATE` transaction on a SQLite file with Lanes' settings (WAL, synchronous
/// NORMAL), with no checks at all.
async fn bare_insert(
    axum::extract::State(pool): axum::extract::State<SqlitePool>,
    Json(request): Json<CreateBooking>,
) -> (axum::http::StatusCode, Json<CreateBooking>) {
    let write = async {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO bookings (gpu, start_ms, end_ms, note) VALUES (?1, ?2, ?3, ?4)")
            .bind(request.gpus.as_ref().and_then(|g| g.first()).cloned())
            .bind(request.start.timestamp_millis())
            .bind(request.end.timestamp_millis())
            .bind(&request.note)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    };
    let status = match write.await {
        Ok(()) => axum::http::StatusCode::CREATED,
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(request))
}

/// Serves `app` on a random loopback port; returns its address.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("an address").to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn serve_bare() -> String {
    serve(Router::new().route("/api/v1/bookings", post(bare))).await
}

async fn serve_bare_insert(dir: &std::path::Path) -> String {
    let options = SqliteConnectOptions::new()
        .filename(dir.join("bare.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5));
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .expect("a database");
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bookings
         (id INTEGER PRIMARY KEY, gpu TEXT, start_ms INTEGER, end_ms INTEGER, note TEXT)",
    )
    .execute(&pool)
    .await
    .expect("a table");
    serve(
        Router::new()
            .route("/api/v1/bookings", post(bare_insert))
            .with_state(pool),
    )
    .await
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
    let gpus: Vec<lanes_types::GpuState> = client
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
    let dir = std::env::temp_dir().join(format!("lanes-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary dir");
    let targets = [
        (
            "bare axum handler",
            format!("http://{}/api/v1/bookings", serve_bare().await),
            None,
        ),
        (
            "bare axum + one sqlx SQLite insert",
            format!("http://{}/api/v1/bookings", serve_bare_insert(&dir).await),
            None,
        ),
        (
            "lanes POST /api/v1/bookings",
            format!("http://{addr}/api/v1/bookings"),
            Some(token.to_string()),
        ),
    ];
    // Warm each up (connections, caches) with bookings ten years later, so that the warm-up
    // never conflicts with the measured run; then measure one after another.
    for (_, url, token) in &targets {
        let later = base + chrono::Duration::days(3650);
        let _ = load(
            url.clone(),
            token.clone(),
            cards.clone(),
            later,
            200,
            concurrency,
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut figures = Vec::new();
    for (name, url, token) in &targets {
        let f = load(
            url.clone(),
            token.clone(),
            cards.clone(),
            base,
            requests,
            concurrency,
        )
        .await;
        println!(
            "| {name} | {concurrency} | {} | {:.0} | {:.2} | {:.2} | {} |",
            f.requests,
            f.per_second(),
            f.p50_ms,
            f.p99_ms,
            f.failures
        );
        figures.push(f.per_second());
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!();
    println!(
        "Lanes booking throughput is {:.1}% of the bare handler's (target ≥ 30%) and {:.1}% of \
         the bare durable insert's.",
        figures[2] / figures[0] * 100.0,
        figures[2] / figures[1] * 100.0
    );
}
