//! PostgreSQL as the shared state: two `lanes serve` processes on one database never hand out
//! a card twice for one moment, the database itself refuses overlapping holds, and a lab moves
//! from SQLite onto PostgreSQL with nothing lost. These need the PostgreSQL run
//! (`LANES_TEST_POSTGRES`); the SQLite run says so and passes them by.

use chrono::{DateTime, Duration, DurationRound, Utc};
use lanes_client::Client;
use lanes_server::accounts::Role;
use lanes_tests::{on_postgres, run_lanes, ServerProcess, TestApp, TestDb};
use lanes_types::account::NewToken;
use lanes_types::booking::{Booking, CreateBooking};
use lanes_types::query::{AuditQuery, BookingQuery, HistoryQuery, ReportQuery};

fn postgres_run(what: &str) -> bool {
    if !on_postgres() {
        eprintln!("PostgreSQL only, covered by the PostgreSQL run: {what}");
    }
    on_postgres()
}

/// Members `m0`… with the password "`name` passphrase", made straight in the database.
async fn members(url: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("m{i}");
        lanes_tests::add_user(url, &name, &format!("{name} passphrase"), Role::User).await;
        names.push(name);
    }
    names
}

/// Each member signed in once; the session works on every server of the database.
async fn sign_in_all(server: &ServerProcess, names: &[String]) -> Vec<Client> {
    let mut clients = Vec::new();
    for name in names {
        let (client, _) = Client::new(&server.base)
            .login(name, &format!("{name} passphrase"))
            .await
            .unwrap();
        clients.push(client);
    }
    clients
}

fn against(client: &Client, server: &ServerProcess) -> Client {
    Client::new(&server.base).as_(client.credentials().clone())
}

fn slot(base: DateTime<Utc>, hour: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        base + Duration::hours(hour),
        base + Duration::hours(hour + 1),
    )
}

fn status(answer: &lanes_client::Result<Booking>) -> u16 {
    match answer {
        Ok(_) => 201,
        Err(e) => e.status().map_or(0, |s| s.as_u16()),
    }
}

struct TwoServers {
    _tmp: tempfile::TempDir,
    _servers: [ServerProcess; 2],
    db: TestDb,
    /// 64 clients of 8 members, every other one on the second server.
    clients: Vec<Client>,
    cards: Vec<String>,
}

async fn two_servers() -> TwoServers {
    let tmp = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(tmp.path()).await;
    let names = members(&db.url, 8).await;
    // A node with the cards, and a portal without any that serves the same pool.
    let node = ["--gpus", "sim:8", "--node-name", "n1"];
    let portal = ["--gpus", "none", "--node-name", "portal"];
    let a = ServerProcess::start(&tmp.path().join("a"), &db.url, &node).await;
    let b = ServerProcess::start(&tmp.path().join("b"), &db.url, &portal).await;
    let signed_in = sign_in_all(&a, &names).await;
    let clients: Vec<Client> = (0..64)
        .map(|i| {
            let member = &signed_in[i % names.len()];
            if i % 2 == 0 {
                member.clone()
            } else {
                against(member, &b)
            }
        })
        .collect();
    let mut gpus = clients[0].gpus().await.unwrap();
    gpus.sort_by(|x, y| x.info.pci_bus_id.cmp(&y.info.pci_bus_id));
    let cards = gpus.into_iter().map(|g| g.info.uuid).collect();
    TwoServers {
        _tmp: tmp,
        _servers: [a, b],
        db,
        clients,
        cards,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_on_two_servers_get_exactly_one_booking_per_round() {
    if !postgres_run("two servers racing for one card") {
        return;
    }
    let pool = two_servers().await;
    let base = (Utc::now() + Duration::days(2))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let card = &pool.cards[3];
    for round in 0..100 {
        let (start, end) = slot(base, round);
        let request = lanes_tests::booking_of(std::slice::from_ref(card), start, end);
        let answers =
            futures::future::join_all(pool.clients.iter().map(|c| c.book(&request))).await;
        let codes: Vec<u16> = answers.iter().map(status).collect();
        let won = codes.iter().filter(|c| **c == 201).count();
        let lost = codes.iter().filter(|c| **c == 409).count();
        assert_eq!(
            (won, lost),
            (1, 63),
            "round {round}: {codes:?} {:?}",
            answers.iter().find(|a| !matches!(status(a), 201 | 409))
        );
    }
    let held = pool.clients[1]
        .bookings(&BookingQuery {
            gpu: Some(card.clone()),
            ..BookingQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(held.len(), 100);
    // Both servers granted some: the race really ran across processes.
    let by_server: std::collections::BTreeSet<i64> = held.iter().map(|b| b.user_id).collect();
    assert!(by_server.len() > 1, "grants went to one member only");
    drop(pool.db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_n_requests_on_two_servers_hand_out_each_free_card_once() {
    if !postgres_run("two servers racing for any free cards") {
        return;
    }
    let pool = two_servers().await;
    let base = (Utc::now() + Duration::days(3))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    for round in 0..20 {
        let (start, end) = slot(base, round);
        // Six of eight cards taken; the two left go to one or two of the 64 requests.
        let six = lanes_tests::booking_of(&pool.cards[..6], start, end);
        pool.clients[0].book(&six).await.unwrap();
        let count = if round % 2 == 0 { 1 } else { 2 };
        let request = CreateBooking {
            project: None,
            gpus: None,
            count: Some(count),
            ..lanes_tests::booking_of(&[], start, end)
        };
        let answers =
            futures::future::join_all(pool.clients.iter().map(|c| c.book(&request))).await;
        let codes: Vec<u16> = answers.iter().map(status).collect();
        assert!(
            codes.iter().all(|c| *c == 201 || *c == 409),
            "round {round}: {codes:?}"
        );
        let granted: Vec<&Booking> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
        assert_eq!(
            granted.len(),
            2 / count as usize,
            "round {round}: {codes:?}"
        );
        let mut cards: Vec<String> = granted
            .iter()
            .flat_map(|b| b.gpus.iter().map(|g| g.uuid.clone()))
            .collect();
        cards.sort();
        let mut free = pool.cards[6..].to_vec();
        free.sort();
        assert_eq!(cards, free, "round {round}: the two free cards, each once");
    }
}

#[tokio::test]
async fn the_database_itself_refuses_overlapping_holds_of_one_card() {
    if !postgres_run("the exclusion constraint") {
        return;
    }
    let app = TestApp::spawn(2).await;
    let member = app.client_with(&app.sign_up("ada", Role::User).await);
    let card = lanes_tests::cards(&app).await[0].info.uuid.clone();
    let start = Utc::now() + Duration::hours(1);
    let booking = member
        .book(&lanes_tests::booking_of(
            std::slice::from_ref(&card),
            start,
            start + Duration::hours(2),
        ))
        .await
        .unwrap();
    // A second hold written behind Lanes' back, overlapping by one millisecond.
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
    let second: i64 = sqlx::query_scalar(
        "INSERT INTO bookings (user_id, start_ms, end_ms, created_at)
         SELECT user_id, end_ms - 1, end_ms + 3600000, created_at FROM bookings WHERE id = $1
         RETURNING id",
    )
    .bind(booking.id)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let overlap = sqlx::query(
        "INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms)
         SELECT $2, gpu_id, end_ms - 1, end_ms + 3600000 FROM booking_gpus WHERE booking_id = $1",
    )
    .bind(booking.id)
    .bind(second)
    .execute(&mut conn)
    .await
    .unwrap_err();
    let code = overlap
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.to_string());
    assert_eq!(code.as_deref(), Some("23P01"), "{overlap}");
    // Back to back is fine, and so is a cancelled hold (not live) over it.
    sqlx::query(
        "INSERT INTO booking_gpus (booking_id, gpu_id, start_ms, end_ms, live)
         SELECT $2, gpu_id, start_ms, end_ms, 0 FROM booking_gpus WHERE booking_id = $1",
    )
    .bind(booking.id)
    .bind(second)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_moved_from_sqlite_to_postgres_finds_everything_and_old_secrets_still_work() {
    if !postgres_run("lanes db copy into PostgreSQL") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", tmp.path().join("old.db").display());
    let on_sqlite = sqlite.clone();
    let old = TestApp::spawn_configured(3, move |c| c.database_url = on_sqlite).await;
    let admin = old.client_with(&old.sign_up("root-admin", Role::Admin).await);
    let member = old.client_with(&old.sign_up("ada", Role::User).await);
    let token = member
        .create_token(&NewToken {
            name: "laptop".into(),
        })
        .await
        .unwrap();
    let cards = lanes_tests::cards(&old).await;
    let now = Utc::now();
    let booked = member
        .book(&lanes_tests::booking_of(
            &[cards[0].info.uuid.clone()],
            now - Duration::seconds(1),
            now + Duration::hours(1),
        ))
        .await
        .unwrap();
    member
        .book(&lanes_tests::booking_of(
            &[cards[1].info.uuid.clone(), cards[2].info.uuid.clone()],
            now + Duration::hours(2),
            now + Duration::hours(3),
        ))
        .await
        .unwrap();
    let cancelled = member
        .book(&lanes_tests::booking_of(
            &[cards[1].info.uuid.clone()],
            now + Duration::hours(5),
            now + Duration::hours(6),
        ))
        .await
        .unwrap();
    member.withdraw_booking(cancelled.id).await.unwrap();
    // History at every level: raw readings now, rollups once a minute has passed in the
    // store's eyes (the writer rolls up what is complete). Everything read until a flush is
    // written by it; the range ends a moment before, so no later reading falls in it. The
    // poller's first readings may still be on their way: flushed again until there are some.
    let (range, history_before) = lanes_tests::wait_until(
        std::time::Duration::from_secs(10),
        "readings to copy",
        || async {
            let flushed = Utc::now();
            old.hooks.history.run().await;
            let range = HistoryQuery {
                from: Some(now - Duration::seconds(5)),
                to: Some(flushed - Duration::milliseconds(250)),
                points: Some(10_000),
                ..HistoryQuery::default()
            };
            let history = admin.history(&range).await.unwrap();
            let read = history.series.iter().any(|s| !s.points.is_empty());
            read.then_some((range, history))
        },
    )
    .await;
    let period = ReportQuery {
        from: Some(now - Duration::hours(1)),
        to: Some(now + Duration::hours(4)),
        table: None,
    };
    let everything = BookingQuery {
        include_cancelled: true,
        ..BookingQuery::default()
    };
    let bookings_before = admin.bookings(&everything).await.unwrap();
    let report_before = admin.usage_report(&period).await.unwrap();
    old.stop().await;
    // The audit log as the old server left it (stopping writes nothing to it).
    let audit_before = {
        let store = lanes_server::store::Store::open(&sqlite).await.unwrap();
        let lines = store.audit_log().recent(1_000).await.unwrap();
        store.close().await;
        lines
    };

    let target = TestDb::fresh(tmp.path()).await;
    let out = run_lanes(&["db", "copy", "--from", &sqlite, "--to", &target.url]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for table in [
        "users",
        "bookings",
        "audit_log",
        "samples_raw",
        "api_tokens",
    ] {
        let line = report
            .lines()
            .find(|l| l.starts_with(table))
            .unwrap_or_else(|| panic!("{table} in {report}"));
        let rows: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(rows > 0, "{line}");
    }
    // A second copy into the now full database is refused and changes nothing.
    let again = run_lanes(&["db", "copy", "--from", &sqlite, "--to", &target.url]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    let on_postgres = target.url.clone();
    let new = TestApp::spawn_configured(3, move |c| c.database_url = on_postgres).await;
    // The old password and the old token still work.
    let (member, _) = new
        .anonymous()
        .login("ada", "ada passphrase")
        .await
        .unwrap();
    let by_token = new
        .anonymous()
        .as_(lanes_client::Credentials::Token(token.secret.clone()));
    assert_eq!(by_token.me().await.unwrap().username, "ada");
    let (admin, _) = new
        .anonymous()
        .login("root-admin", "root-admin passphrase")
        .await
        .unwrap();
    let bookings_after = admin.bookings(&everything).await.unwrap();
    assert_eq!(
        bookings_after
            .iter()
            .map(|b| (b.id, &b.gpus, b.start, b.end, b.state))
            .collect::<Vec<_>>(),
        bookings_before
            .iter()
            .map(|b| (b.id, &b.gpus, b.start, b.end, b.state))
            .collect::<Vec<_>>()
    );
    let history_after = admin.history(&range).await.unwrap();
    assert_eq!(history_after.series, history_before.series);
    let report_after = admin.usage_report(&period).await.unwrap();
    // Energy is the one figure that grows by the second: the new server's poller adds to the
    // minute in progress of the live booking. It was copied if it did not go down.
    let without_energy = |rows: &[lanes_types::report::UsageRow]| {
        let mut value = serde_json::to_value(rows).unwrap();
        for row in value.as_array_mut().unwrap() {
            let row = row.as_object_mut().unwrap();
            for key in ["energy_kwh", "cost", "co2e_kg"] {
                row.remove(key);
            }
        }
        value
    };
    assert_eq!(
        without_energy(&report_after.users),
        without_energy(&report_before.users)
    );
    for (after, before) in report_after.users.iter().zip(&report_before.users) {
        assert!(
            after.energy_kwh >= before.energy_kwh,
            "{after:?} {before:?}"
        );
    }
    let audit_after = admin
        .audit(&AuditQuery {
            limit: Some(1_000),
            ..Default::default()
        })
        .await
        .unwrap();
    let old_lines: Vec<_> = audit_after
        .iter()
        .filter(|a| a.id <= audit_before[0].id)
        .cloned()
        .collect();
    assert_eq!(old_lines, audit_before);
    let copy_line = audit_after
        .iter()
        .find(|a| a.action == "database.copy")
        .expect("the copy is audited");
    assert!(copy_line.id > audit_before[0].id);
    assert!(
        copy_line.detail.starts_with("copied from sqlite://"),
        "{copy_line:?}"
    );
    // New rows continue after the copied ids.
    let next = member
        .book(&lanes_tests::booking_of(
            &[cards[0].info.uuid.clone()],
            now + Duration::hours(7),
            now + Duration::hours(8),
        ))
        .await
        .unwrap();
    assert!(next.id > booked.id.max(cancelled.id), "{next:?}");
    new.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_away_requests_get_503_the_poller_runs_on_and_lanes_comes_back() {
    if !postgres_run("PostgreSQL going away while serving") {
        return;
    }
    let Some(pg) = lanes_tests::PrivatePostgres::start() else {
        return;
    };
    let url = pg.url("postgres");
    let on = url.clone();
    let app = TestApp::spawn_configured(2, move |c| c.database_url = on).await;
    let member = app.client_with(&app.sign_up("ada", Role::User).await);
    let card = lanes_tests::cards(&app).await[0].info.uuid.clone();
    let base = (Utc::now() + Duration::days(1))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let book = |hour: i64| {
        let (start, end) = slot(base, hour);
        let request = lanes_tests::booking_of(std::slice::from_ref(&card), start, end);
        let member = member.clone();
        async move { member.book(&request).await }
    };
    let mut accepted = vec![book(0).await.unwrap().id, book(1).await.unwrap().id];
    // A dashboard connected before anything happens.
    let mut live = member.telemetry().await.unwrap();

    // An admin ends every connection of Lanes: the pool opens new ones, nobody notices.
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE pid <> pg_backend_pid() AND datname = current_database()",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "Lanes had connections to end");
    admin.close().await.unwrap();
    accepted.push(
        lanes_tests::wait_until(
            std::time::Duration::from_secs(10),
            "a booking after",
            || async { book(2).await.ok().map(|b| b.id) },
        )
        .await,
    );

    // The server stops: a clear 503 with a JSON body, soon, and nothing half-done.
    pg.down();
    let asked = std::time::Instant::now();
    let (status, body) = lanes_tests::refusal(book(3).await);
    assert_eq!(status, 503, "{body:?}");
    assert_eq!(body.code, "unavailable", "{body:?}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(10));
    let health = app.get_anonymous("/healthz").await;
    assert_eq!(health.status(), 503);
    // The poller and the live channel run on without the database.
    for _ in 0..3 {
        let message = tokio::time::timeout(std::time::Duration::from_secs(5), live.next())
            .await
            .expect("a tick within 5 s while the database is away");
        assert!(message.is_some_and(|m| m.is_ok()));
    }

    // The server is back: Lanes reconnects by itself.
    pg.up();
    accepted.push(
        lanes_tests::wait_until(
            std::time::Duration::from_secs(20),
            "bookings work again",
            || async { book(4).await.ok().map(|b| b.id) },
        )
        .await,
    );
    let held: Vec<i64> = member
        .bookings(&BookingQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(
        held, accepted,
        "every booking answered 201 is there, and only those"
    );
    app.stop().await;
}

#[test]
fn a_wrong_postgres_password_is_refused_in_one_line_without_the_password() {
    if !postgres_run("a wrong PostgreSQL password") {
        return;
    }
    let Some(pg) = lanes_tests::PrivatePostgres::start() else {
        return;
    };
    let url = format!(
        "postgres://postgres:not-{}@127.0.0.1:{}/postgres",
        pg.password, pg.port
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = run_lanes(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--database-url",
        &url,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(!stderr.contains(&pg.password), "{stderr}");
    assert!(!data.exists(), "nothing was left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_of_one_group_racing_never_go_past_the_groups_quota() {
    if !postgres_run("a group quota under concurrent bookings") {
        return;
    }
    use lanes_types::account::{CreateGroup, UserPatch};
    use lanes_types::booking::{Quota, Quotas};
    let app = TestApp::spawn(8).await;
    let admin = app.client_with(&app.sign_up("boss", Role::Admin).await);
    admin
        .create_group(&CreateGroup {
            name: "lab".into(),
            description: String::new(),
        })
        .await
        .unwrap();
    let mut members = Vec::new();
    for i in 0..8 {
        let name = format!("m{i}");
        let cookie = app.sign_up(&name, Role::User).await;
        let id = app.client_with(&cookie).me().await.unwrap().id;
        admin
            .update_user(
                id,
                &UserPatch {
                    groups: Some(vec!["lab".into()]),
                    ..UserPatch::default()
                },
            )
            .await
            .unwrap();
        members.push(app.client_with(&cookie));
    }
    let mut quotas = Quotas::default();
    quotas.groups.insert(
        "lab".into(),
        Quota {
            max_gpus: Some(2),
            ..Quota::default()
        },
    );
    admin.save_quotas(&quotas).await.unwrap();
    let cards: Vec<String> = lanes_tests::cards(&app)
        .await
        .into_iter()
        .map(|g| g.info.uuid)
        .collect();
    let base = (Utc::now() + Duration::days(1))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    for round in 0..10 {
        let (start, end) = slot(base, round);
        // Eight members, eight different cards, one moment: the group may hold two.
        let answers = futures::future::join_all(members.iter().zip(&cards).map(|(m, card)| {
            let request = lanes_tests::booking_of(std::slice::from_ref(card), start, end);
            async move { m.book(&request).await }
        }))
        .await;
        let codes: Vec<u16> = answers.iter().map(status).collect();
        assert_eq!(
            codes.iter().filter(|c| **c == 201).count(),
            2,
            "round {round}: {codes:?}"
        );
        assert!(
            codes.iter().all(|c| *c == 201 || *c == 422),
            "round {round}: {codes:?}"
        );
    }
    app.stop().await;
}
