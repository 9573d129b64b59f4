//! Utilization history: rollup arithmetic on known sequences (across bucket edges), retention
//! that removes only what is due, queries that pick the right resolution, and history that
//! survives a restart with the downtime as a gap.

use lanes_server::history::block::{COMPACT_EVERY_S, WINDOW_S};
use lanes_server::history::{plan, Metric, Plan, Reading, Resolution, Retention};
use lanes_server::store::Store;
use lanes_tests::{wait_until, TestApp, TestDb};
use lanes_types::query::HistoryQuery;
use lanes_types::GpuInfo;
use std::time::Duration;

async fn store_with_card(db: &TestDb) -> (Store, i64) {
    let store = Store::open(&db.url).await.unwrap();
    let card = GpuInfo {
        node: "n1".into(),
        uuid: "GPU-A".into(),
        index: 0,
        name: "test".into(),
        pci_bus_id: "00000000:18:00.0".into(),
        memory_total_bytes: 1 << 30,
    };
    store
        .inventory()
        .record("n1", &[card], chrono::Utc::now())
        .await
        .unwrap();
    let id = store.history().gpu_ids().await.unwrap()[&("n1".to_string(), "GPU-A".to_string())];
    (store, id)
}

fn reading(t: i64, util: i64) -> Reading {
    Reading {
        t,
        util,
        mem_mib: util * 10,
        temp_c: Some(40 + util / 10),
        power_dw: (t % 2 == 0).then_some(1000 + util),
        clock_mhz: None,
    }
}

/// A utilization that is not smooth, so wrong bucket edges change the figures.
fn util_at(t: i64) -> i64 {
    (t * 37) % 101
}

/// min, mean, max of `f` over the seconds in `[from, to)` that have readings in `ts`.
fn expected(
    ts: &[i64],
    from: i64,
    to: i64,
    f: impl Fn(i64) -> Option<i64>,
) -> Option<(f64, f64, f64)> {
    let vals: Vec<i64> = ts
        .iter()
        .filter(|t| (from..to).contains(*t))
        .filter_map(|t| f(*t))
        .collect();
    if vals.is_empty() {
        return None;
    }
    let sum: i64 = vals.iter().sum();
    Some((
        *vals.iter().min().unwrap() as f64,
        sum as f64 / vals.len() as f64,
        *vals.iter().max().unwrap() as f64,
    ))
}

async fn buckets(
    store: &Store,
    id: i64,
    metric: Metric,
    from: i64,
    to: i64,
    p: Plan,
) -> Vec<(i64, f64, f64, f64)> {
    store
        .history()
        .read(&[id], metric, from, to, p)
        .await
        .unwrap()
        .remove(&id)
        .unwrap_or_default()
        .into_iter()
        .map(|b| (b.t, b.min, b.avg, b.max))
        .collect()
}

#[tokio::test]
async fn minute_and_hour_rollups_keep_exact_min_mean_and_max_across_bucket_edges() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, id) = store_with_card(&db).await;
    // Seconds 3,530 to 3,729 with every seventh missing: a minute edge every 60 s and the hour
    // edge at 3,600 fall inside.
    let ts: Vec<i64> = (3530..3730).filter(|t| t % 7 != 0).collect();
    let first: Vec<(i64, Reading)> = ts
        .iter()
        .filter(|t| **t < 3650)
        .map(|t| (id, reading(*t, util_at(*t))))
        .collect();
    store.history().insert_readings(&first).await.unwrap();
    // Written up to 3,650: minutes before 3,600 are whole, the one at 3,600 is not.
    assert_eq!(store.history().roll_up(3530, 3650).await.unwrap().0, 3600);
    let rest: Vec<(i64, Reading)> = ts
        .iter()
        .filter(|t| **t >= 3650)
        .map(|t| (id, reading(*t, util_at(*t))))
        .collect();
    store.history().insert_readings(&rest).await.unwrap();
    assert_eq!(
        store.history().roll_up(3650, 7300).await.unwrap(),
        (7260, 7200)
    );

    let minutes = Plan {
        resolution: Resolution::Minute,
        bucket_s: 60,
    };
    let got = buckets(&store, id, Metric::Utilization, 3480, 3780, minutes).await;
    let want: Vec<(i64, f64, f64, f64)> = (3480..3780)
        .step_by(60)
        .filter_map(|m| {
            expected(&ts, m, m + 60, |t| Some(util_at(t))).map(|(a, b, c)| (m, a, b, c))
        })
        .collect();
    assert_eq!(got, want);
    // Power is missing from odd seconds: its mean is over the seconds that have it.
    let got = buckets(&store, id, Metric::Power, 3480, 3780, minutes).await;
    let want: Vec<(i64, f64, f64, f64)> = (3480..3780)
        .step_by(60)
        .filter_map(|m| {
            expected(&ts, m, m + 60, |t| {
                (t % 2 == 0).then_some(1000 + util_at(t))
            })
            .map(|(a, b, c)| (m, a, b, c))
        })
        .collect();
    assert_eq!(got, want);
    // Hours merge minutes exactly: the same figures as straight from the readings.
    let hours = Plan {
        resolution: Resolution::Hour,
        bucket_s: 3600,
    };
    let got = buckets(&store, id, Metric::Memory, 0, 7200, hours).await;
    let want: Vec<(i64, f64, f64, f64)> = [0, 3600]
        .into_iter()
        .filter_map(|h| {
            expected(&ts, h, h + 3600, |t| Some(util_at(t) * 10)).map(|(a, b, c)| (h, a, b, c))
        })
        .collect();
    assert_eq!(got, want);
    // Wider output buckets merge rollups the same way (two minutes apiece).
    let got = buckets(
        &store,
        id,
        Metric::Utilization,
        3480,
        3780,
        Plan {
            resolution: Resolution::Minute,
            bucket_s: 120,
        },
    )
    .await;
    let want: Vec<(i64, f64, f64, f64)> = (3480..3780)
        .step_by(120)
        .filter_map(|m| {
            expected(&ts, m, m + 120, |t| Some(util_at(t))).map(|(a, b, c)| (m, a, b, c))
        })
        .collect();
    assert_eq!(got, want);
    store.close().await;
}

#[tokio::test]
async fn what_is_not_rolled_up_yet_is_answered_from_raw_readings() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, id) = store_with_card(&db).await;
    let ts: Vec<i64> = (100..290).filter(|t| t % 5 != 0).collect();
    let rows: Vec<(i64, Reading)> = ts.iter().map(|t| (id, reading(*t, util_at(*t)))).collect();
    store.history().insert_readings(&rows).await.unwrap();
    let minutes = Plan {
        resolution: Resolution::Minute,
        bucket_s: 60,
    };
    let want: Vec<(i64, f64, f64, f64)> = (60..300)
        .step_by(60)
        .filter_map(|m| {
            expected(&ts, m, m + 60, |t| Some(util_at(t))).map(|(a, b, c)| (m, a, b, c))
        })
        .collect();
    // A fresh install: nothing rolled up, every bucket from the readings.
    assert_eq!(
        buckets(&store, id, Metric::Utilization, 60, 300, minutes).await,
        want
    );
    // Minutes up to 180 rolled up: those from the rollups, the rest still from readings, and
    // the figures are the same.
    assert_eq!(store.history().roll_up(100, 200).await.unwrap().0, 180);
    assert_eq!(
        buckets(&store, id, Metric::Utilization, 60, 300, minutes).await,
        want
    );
    store.close().await;
}

#[tokio::test]
async fn retention_removes_only_what_is_due_and_never_what_is_not_rolled_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, id) = store_with_card(&db).await;
    let now = 10 * 86_400;
    let ts = [
        now - 3 * 86_400,
        now - 2 * 86_400 - 1,
        now - 2 * 86_400,
        now - 60,
        now - 1,
    ];
    let rows: Vec<(i64, Reading)> = ts.iter().map(|t| (id, reading(*t, 50))).collect();
    store.history().insert_readings(&rows).await.unwrap();
    let raw = Plan {
        resolution: Resolution::Raw,
        bucket_s: 1,
    };
    let count = |p: Plan| {
        let store = &store;
        async move {
            buckets(store, id, Metric::Utilization, 0, now, p)
                .await
                .len()
        }
    };
    // Nothing rolled up yet: nothing may go, whatever retention says.
    store.history().prune(now, now, Some(now)).await.unwrap();
    assert_eq!(count(raw).await, 5);

    store.history().roll_up(0, now).await.unwrap();
    store
        .history()
        .prune(now - 2 * 86_400, now - 2 * 86_400, None)
        .await
        .unwrap();
    // Raw readings older than 48 h went; the one exactly 48 h old stays.
    let left: Vec<i64> = buckets(&store, id, Metric::Utilization, 0, now, raw)
        .await
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(left, vec![now - 2 * 86_400, now - 60, now - 1]);
    // Minutes: only those older than 48 h and already in an hour went.
    let minutes = Plan {
        resolution: Resolution::Minute,
        bucket_s: 60,
    };
    let left: Vec<i64> = buckets(&store, id, Metric::Utilization, 0, now, minutes)
        .await
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(left, vec![now - 2 * 86_400, now - 60]);
    // Hours are kept forever.
    let hours = Plan {
        resolution: Resolution::Hour,
        bucket_s: 3600,
    };
    // (The hours of now - 3 d, now - 2 d - 1 s, now - 2 d and now - 60 s.)
    assert_eq!(count(hours).await, 4);
    store.close().await;
}

#[tokio::test]
async fn a_query_answers_from_the_resolution_its_range_needs() {
    let app = TestApp::spawn(1).await;
    let viewer = app.client_with(&app.viewer_cookie().await);
    let uuid = viewer.gpus().await.unwrap()[0].info.uuid.clone();
    // Ten days ago, two hours of readings at 60 % written straight to the store.
    let store = Store::open(&app.database_url()).await.unwrap();
    let id = store.history().gpu_ids().await.unwrap()[&("testnode".to_string(), uuid.clone())];
    let start = chrono::Utc::now().timestamp() / 3600 * 3600 - 10 * 86_400;
    let rows: Vec<(i64, Reading)> = (start..start + 7200)
        .map(|t| (id, reading(t, 60)))
        .collect();
    store.history().insert_readings(&rows).await.unwrap();
    store.history().roll_up(start, start + 7200).await.unwrap();
    store.close().await;

    let at = |t: i64| chrono::DateTime::from_timestamp(t, 0);
    let query = |metric: &str, from: i64, to: i64, points: i64| HistoryQuery {
        gpu: Some(uuid.clone()),
        metric: Some(metric.into()),
        from: at(from),
        to: at(to),
        points: Some(points),
    };
    let ask = |from: i64, to: i64, points: i64| {
        let (viewer, query) = (&viewer, query("utilization", from, to, points));
        async move { viewer.history(&query).await.expect("the history answers") }
    };
    // Two hours at 1,000 points would want raw seconds, but ten days back retention keeps
    // only minutes: one-minute buckets.
    let a = ask(start, start + 7200, 1000).await;
    assert_eq!((a.resolution.as_str(), a.bucket_s), ("1m", 60));
    assert_eq!(a.series.len(), 1);
    assert_eq!(a.series[0].points.len(), 120);
    // At 100 points, two minutes a bucket.
    let a = ask(start, start + 7200, 100).await;
    assert_eq!(
        (a.resolution.as_str(), a.bucket_s, a.series[0].points.len()),
        ("1m", 120, 60)
    );
    assert!(a.series[0]
        .points
        .iter()
        .all(|p| (p.min, p.avg, p.max) == (60.0, 60.0, 60.0)));
    // Two points for two hours: hour buckets.
    let a = ask(start, start + 7200, 2).await;
    assert_eq!(
        (a.resolution.as_str(), a.bucket_s, a.series[0].points.len()),
        ("1h", 3600, 2)
    );
    // Memory comes back in bytes.
    let a = viewer
        .history(&query("memory", start, start + 7200, 2))
        .await
        .unwrap();
    assert_eq!(a.series[0].points[0].avg, 600.0 * 1_048_576.0);
    // Bad input: a clear 4xx (raw query strings: the typed query cannot misspell a metric).
    for (query, status) in [
        ("metric=heat", 400),
        ("points=0", 400),
        ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", 400),
        ("gpu=GPU-nope", 404),
    ] {
        let r = app.get(&format!("/api/v1/history?{query}")).await;
        assert_eq!(r.status().as_u16(), status, "{query}");
    }
    app.stop().await;
}

#[tokio::test]
async fn history_survives_a_restart_and_the_downtime_is_a_gap() {
    let data = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(data.path()).await;
    // One clock for both runs, as the machine's would be.
    let clock = lanes_server::runtime::clock::Clock::adjustable();
    let on = |config: &mut lanes_server::ops::serve::ServeConfig| {
        config.data_dir = data.path().to_path_buf();
        config.database_url = db.url.clone();
        config.clock = clock.clone();
    };
    let first = TestApp::spawn_configured(1, on).await;
    let started = clock.now();
    let since = HistoryQuery {
        from: Some(started - chrono::Duration::seconds(5)),
        points: Some(10_000),
        ..HistoryQuery::default()
    };
    // The seconds written so far, once the writer has flushed what it holds (asked, not
    // waited for), when `enough` says they are enough.
    async fn written(
        app: &TestApp,
        viewer: &lanes_client::Client,
        since: &HistoryQuery,
        enough: impl Fn(&[i64]) -> bool,
    ) -> Vec<i64> {
        wait_until(Duration::from_secs(10), "seconds of history", || async {
            app.hooks.history.run().await;
            let a = viewer.history(since).await.unwrap();
            assert_eq!((a.resolution.as_str(), a.bucket_s), ("raw", 1));
            let seconds: Vec<i64> = a.series[0].points.iter().map(|p| p.t_ms / 1000).collect();
            enough(&seconds).then_some(seconds)
        })
        .await
    }
    let viewer = first.client_with(&first.viewer_cookie().await);
    written(&first, &viewer, &since, |s| s.len() >= 2).await;
    first.stop().await;
    let stopped = clock.now();
    // Three seconds down: the clock moves on while nothing runs. Readings carry the clock's
    // seconds, and this test is about what the store holds for a downtime (a gap, not zeros).
    clock.advance(chrono::Duration::seconds(3));
    let second = TestApp::spawn_configured(1, on).await;
    // The viewer the first run made logs in to the second.
    let viewer = second.client_with(&second.login("viewer", "viewer passphrase").await);
    let seconds = written(&second, &viewer, &since, |s| {
        s.iter().any(|t| *t > stopped.timestamp() + 1)
    })
    .await;
    let before = seconds
        .iter()
        .filter(|t| **t <= stopped.timestamp())
        .count();
    let after = seconds
        .iter()
        .filter(|t| **t > stopped.timestamp() + 1)
        .count();
    assert!(before >= 2, "the first run's seconds are kept: {seconds:?}");
    assert!(
        after >= 1,
        "the second run's seconds are there: {seconds:?}"
    );
    // Nothing was written while the server was down: the gap has no buckets, not zeros.
    let gap = (stopped.timestamp() + 1)..(stopped.timestamp() + 3);
    assert!(
        !seconds.iter().any(|t| gap.contains(t)),
        "no readings in the downtime {gap:?}: {seconds:?}"
    );
    second.stop().await;
    // The plan for a 1 h range at 1,000 points reads raw seconds, 4 to a bucket.
    let now = 1_800_000_000;
    assert_eq!(
        plan(now - 3600, now, 1000, &Retention::default(), now),
        Plan {
            resolution: Resolution::Raw,
            bucket_s: 4
        }
    );
}

#[tokio::test]
async fn a_reports_gpu_hours_match_a_constructed_scenario() {
    use lanes_server::accounts::{NewUser, Role};
    use lanes_server::bookings::{CardChoice, NewBooking};
    use lanes_server::store::AuditEntry;
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, a) = store_with_card(&db).await;
    let second = GpuInfo {
        node: "n1".into(),
        uuid: "GPU-B".into(),
        index: 1,
        name: "test".into(),
        pci_bus_id: "00000000:29:00.0".into(),
        memory_total_bytes: 1 << 30,
    };
    let first = GpuInfo {
        uuid: "GPU-A".into(),
        index: 0,
        pci_bus_id: "00000000:18:00.0".into(),
        ..second.clone()
    };
    store
        .inventory()
        .record("n1", &[first, second], chrono::Utc::now())
        .await
        .unwrap();
    let b = store.history().gpu_ids().await.unwrap()[&("n1".to_string(), "GPU-B".to_string())];
    let owner = store
        .accounts()
        .create(
            &NewUser {
                username: "ada".into(),
                display_name: "Ada".into(),
                email: None,
                unix_user: None,
                role: Role::User,
            },
            "not a real hash",
            &AuditEntry::new(None, lanes_server::audit::AuditAction::UserCreate, "ada"),
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    // Two cards booked for two hours, a day ago.
    let t0 = chrono::Utc::now().timestamp() / 3600 * 3600 - 86_400;
    let at = |t: i64| chrono::DateTime::from_timestamp(t, 0).unwrap();
    let booking = store
        .bookings()
        .create(
            &NewBooking {
                project: None,
                owner,
                cards: CardChoice::Named(vec!["GPU-A".into(), "GPU-B".into()]),
                start: at(t0),
                end: at(t0 + 7200),
                note: String::new(),
                enforce_quota: false,
                lend: false,
            },
            AuditEntry::new(None, lanes_server::audit::AuditAction::BookingCreate, ""),
            at(t0 - 60),
        )
        .await
        .unwrap();
    // Card A: 50 % for the first hour, idle the second. Card B: 100 % for half an hour, then
    // no readings at all (the server was down): unknown, so neither used nor idle.
    let mut rows: Vec<(i64, Reading)> = (t0..t0 + 7200)
        .map(|t| (a, reading(t, if t < t0 + 3600 { 50 } else { 0 })))
        .collect();
    rows.extend((t0..t0 + 1800).map(|t| (b, reading(t, 100))));
    // Readings outside the slot do not count.
    rows.extend((t0 - 600..t0).map(|t| (a, reading(t, 100))));
    store.history().insert_readings(&rows).await.unwrap();
    store.history().roll_up(t0 - 600, t0 + 7300).await.unwrap();
    let used = store
        .reports()
        .booking_card_use(t0 - 3600, t0 + 3 * 3600, 5, Resolution::Minute, 1.0)
        .await
        .unwrap()[&booking.id];
    // A: 1 h × 0.5 + 1 h × 0; B: 0.5 h × 1.0.
    assert!((used.used_hours - 1.0).abs() < 1e-9, "{used:?}");
    // A's second hour.
    assert!((used.idle_hours - 1.0).abs() < 1e-9, "{used:?}");
    // (3,600 s × 50 + 3,600 s × 0 + 1,800 s × 100) / 9,000 s.
    assert!(
        (used.avg_utilization_pct.unwrap() - 40.0).abs() < 1e-9,
        "{used:?}"
    );
    assert_eq!(used.peak_memory_mib, Some(1000));
    // The same figures from hour buckets: B's hour counts for the half hour it was read.
    let hourly = store
        .reports()
        .booking_card_use(t0 - 3600, t0 + 3 * 3600, 5, Resolution::Hour, 1.0)
        .await
        .unwrap()[&booking.id];
    assert!((hourly.used_hours - 1.0).abs() < 1e-9, "{hourly:?}");
    assert!((hourly.idle_hours - 1.0).abs() < 1e-9, "{hourly:?}");
    // A period that cuts the slot in half counts only its half: A's busy hour.
    let half = store
        .reports()
        .booking_card_use(t0, t0 + 3600, 5, Resolution::Minute, 1.0)
        .await
        .unwrap()[&booking.id];
    assert!((half.used_hours - 1.0).abs() < 1e-9, "{half:?}");
    assert!(half.idle_hours.abs() < 1e-9, "{half:?}");
    store.close().await;
}

#[tokio::test]
async fn the_last_reading_of_a_second_is_kept_whether_it_came_in_the_same_batch_or_later() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, id) = store_with_card(&db).await;
    // Polls faster than once a second give several readings of one second in one batch.
    store
        .history()
        .insert_readings(&[
            (id, reading(100, 10)),
            (id, reading(100, 90)),
            (id, reading(101, 5)),
        ])
        .await
        .unwrap();
    let raw = Plan {
        resolution: Resolution::Raw,
        bucket_s: 1,
    };
    let got = buckets(&store, id, Metric::Utilization, 100, 102, raw).await;
    assert_eq!(got, vec![(100, 90.0, 90.0, 90.0), (101, 5.0, 5.0, 5.0)]);
    store
        .history()
        .insert_readings(&[(id, reading(100, 40))])
        .await
        .unwrap();
    let got = buckets(&store, id, Metric::Utilization, 100, 101, raw).await;
    assert_eq!(got, vec![(100, 40.0, 40.0, 40.0)]);
    store.close().await;
}

/// A metric at a plan, and its buckets.
type Answer = (Metric, Plan, Vec<(i64, f64, f64, f64)>);

/// Asserts two sets of answers are equal, naming the first bucket that differs.
fn same_answers(got: &[Answer], want: &[Answer]) {
    for ((metric, plan, g), (_, _, w)) in got.iter().zip(want) {
        let first = g.iter().zip(w).find(|(a, b)| a != b);
        assert!(
            first.is_none() && g.len() == w.len(),
            "{metric:?} at {plan:?}: {} buckets against {}, first difference {first:?}",
            g.len(),
            w.len()
        );
    }
    assert_eq!(got.len(), want.len());
}

/// Blocks and head rows of the history, read straight from the database.
async fn stored(url: &str) -> (i64, i64) {
    use sqlx::Connection;
    let counts = "SELECT (SELECT COUNT(*) FROM samples_blocks), (SELECT COUNT(*) FROM samples_raw)";
    if lanes_tests::on_postgres() {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_as(counts).fetch_one(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_as(counts).fetch_one(&mut conn).await.unwrap()
    }
}

/// Every metric of the card over `[from, to)` at raw resolution, in buckets of 1 s and of 7 s
/// (edges that fall inside blocks), and by the minute.
async fn every_answer(store: &Store, id: i64, from: i64, to: i64) -> Vec<Answer> {
    let mut answers = Vec::new();
    for metric in [
        Metric::Utilization,
        Metric::Memory,
        Metric::Temperature,
        Metric::Power,
        Metric::SmClock,
    ] {
        for plan in [
            Plan {
                resolution: Resolution::Raw,
                bucket_s: 1,
            },
            Plan {
                resolution: Resolution::Raw,
                bucket_s: 7,
            },
            Plan {
                resolution: Resolution::Minute,
                bucket_s: 60,
            },
        ] {
            answers.push((
                metric,
                plan,
                buckets(store, id, metric, from, to, plan).await,
            ));
        }
    }
    answers
}

#[tokio::test]
async fn raw_readings_move_into_compressed_blocks_and_every_answer_stays_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let (store, id) = store_with_card(&db).await;
    // Five windows' worth of readings from the middle of one, every eleventh second missing,
    // and a poll gap of 90 s.
    const W: i64 = WINDOW_S;
    let start = 1_800_000_000 / W * W + W / 2;
    let ts: Vec<i64> = (start..start + 5 * W)
        .filter(|t| t % 11 != 0 && !(start + W + 100..start + W + 190).contains(t))
        .collect();
    let rows: Vec<(i64, Reading)> = ts.iter().map(|t| (id, reading(*t, util_at(*t)))).collect();
    store.history().insert_readings(&rows).await.unwrap();
    let (from, to) = (start - 120, start + 5 * W + 120);
    // Before any rollup, every answer comes from raw rows.
    let before = every_answer(&store, id, from, to).await;
    assert_eq!(stored(&db.url).await, (0, ts.len() as i64));
    // Rolled up to the last whole minute: the windows before its window edge are blocks.
    let (minutes, _) = store.history().roll_up(start, start + 5 * W).await.unwrap();
    let edge = minutes / COMPACT_EVERY_S * COMPACT_EVERY_S;
    let (blocks, head) = stored(&db.url).await;
    let in_blocks = ts.iter().filter(|t| **t < edge).count() as i64;
    assert_eq!(
        blocks,
        (edge - start + W / 2 + W - 1) / W,
        "one block per window, the last one so far"
    );
    assert_eq!(head, ts.len() as i64 - in_blocks, "the rest stays rows");
    same_answers(&every_answer(&store, id, from, to).await, &before);

    // A reading that comes late into a window in a block (a second that was missing, and a
    // second polled again, whose newer reading wins) is rolled up with the others.
    let late = [
        (id, reading(start + W + 101, 100)),
        (id, reading(start + 2 * W + 1, 0)),
    ];
    store.history().insert_readings(&late).await.unwrap();
    store
        .history()
        .roll_up(start + W + 101, start + 5 * W)
        .await
        .unwrap();
    let mut all: Vec<(i64, Reading)> = rows
        .iter()
        .filter(|(_, r)| r.t != start + 2 * W + 1)
        .copied()
        .chain(late)
        .collect();
    all.sort_by_key(|(_, r)| r.t);
    // The same answers as a fresh database given every reading at once.
    let dir2 = tempfile::tempdir().unwrap();
    let db2 = TestDb::fresh(dir2.path()).await;
    let (fresh, id2) = store_with_card(&db2).await;
    let all2: Vec<(i64, Reading)> = all.iter().map(|(_, r)| (id2, *r)).collect();
    fresh.history().insert_readings(&all2).await.unwrap();
    let want = every_answer(&fresh, id2, from, to).await;
    same_answers(&every_answer(&store, id, from, to).await, &want);
    // And once compacted again, they still are.
    let (blocks, head) = stored(&db.url).await;
    assert!(blocks >= 4, "{blocks} blocks");
    assert!(head < all.len() as i64 / 2, "{head} rows left in the head");
    fresh.close().await;

    // Retention takes a block once its last reading is older than raw readings are kept:
    // kept from the middle of the second window, the first goes and the second stays whole.
    store
        .history()
        .prune(start + W, i64::MIN, None)
        .await
        .unwrap();
    let raw = Plan {
        resolution: Resolution::Raw,
        bucket_s: 1,
    };
    let left = buckets(&store, id, Metric::Utilization, from, to, raw).await;
    assert_eq!(
        left.first().map(|b| b.0),
        ts.iter().find(|t| **t >= start + W / 2).copied()
    );
    assert_eq!(
        left.len(),
        all.iter().filter(|(_, r)| r.t >= start + W / 2).count()
    );
    store.close().await;
}
