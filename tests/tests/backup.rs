//! `lanes backup` and `lanes restore`: a consistent copy of a serving SQLite database taken
//! under write load, and put back in place of a lost one.

use lanes_server::accounts::Role;
use lanes_tests::{run_lanes, sqlite_only, TestApp};
use lanes_types::booking::Booking;
use lanes_types::query::BookingQuery;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_write_load_restores_to_a_consistent_database() {
    if sqlite_only("lanes backup of the SQLite file") {
        return;
    }
    let app = TestApp::spawn(4).await;
    let member = app.client_with(&app.sign_up("ada", Role::User).await);
    let cards: Vec<String> = lanes_tests::cards(&app)
        .await
        .into_iter()
        .map(|g| g.info.uuid)
        .collect();
    // Bookings, one after another, until told to stop; `written` counts them.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, member, cards) = (stop.clone(), member.clone(), cards.clone());
        let written = written.clone();
        tokio::spawn(async move {
            let base = chrono::Utc::now() + chrono::Duration::days(1);
            let mut made: Vec<Booking> = Vec::new();
            let mut i = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let start = base + chrono::Duration::minutes(i);
                let card = cards[(i % 4) as usize].clone();
                let request =
                    lanes_tests::booking_of(&[card], start, start + chrono::Duration::minutes(1));
                made.push(member.book(&request).await.expect("booked"));
                written.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
            made
        })
    };
    // Some written before the backup starts, and some more while and after it runs.
    let writes = |at_least: usize| {
        let written = written.clone();
        lanes_tests::wait_until(
            std::time::Duration::from_secs(20),
            "bookings being written",
            move || {
                let n = written.load(Ordering::SeqCst);
                async move { (n >= at_least).then_some(n) }
            },
        )
    };
    let before = writes(5).await;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("lanes-backup.db");
    let url = app.database_url();
    let out = run_lanes(&[
        "backup",
        "--database-url",
        &url,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    writes(before + 5).await;
    stop.store(true, Ordering::Relaxed);
    let made = writer.await.unwrap();
    app.stop().await;
    // A backup never overwrites.
    let again = run_lanes(&[
        "backup",
        "--database-url",
        &url,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));

    // Restored into a new data dir and served.
    let data = tmp.path().join("restored");
    let out = run_lanes(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = run_lanes(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an existing database needs --replace"
    );
    let restored_url = format!("sqlite://{}", data.join("lanes.db").display());
    let (dir, on) = (data.clone(), restored_url.clone());
    let restored = TestApp::spawn_configured(4, move |c| {
        c.data_dir = dir;
        c.database_url = on;
    })
    .await;
    let (again, _) = restored
        .anonymous()
        .login("ada", "ada passphrase")
        .await
        .expect("the old password works on the restored database");
    let back = again.bookings(&BookingQuery::default()).await.unwrap();
    // One snapshot: the bookings made before some moment, each whole, none after it.
    assert!(
        !back.is_empty() && back.len() < made.len(),
        "{} of {}",
        back.len(),
        made.len()
    );
    let prefix: Vec<(i64, &Vec<_>)> = made[..back.len()].iter().map(|b| (b.id, &b.gpus)).collect();
    assert_eq!(
        back.iter().map(|b| (b.id, &b.gpus)).collect::<Vec<_>>(),
        prefix
    );
    restored.stop().await;
    // Each booking has its audit line, and no line names a booking that is not there.
    let store = lanes_server::store::Store::open(&restored_url)
        .await
        .unwrap();
    let lines = store.audit_log().recent(100_000).await.unwrap();
    assert!(
        lines
            .iter()
            .any(|a| a.action == "database.restore" && a.detail.contains("lanes-backup.db")),
        "the restore is audited"
    );
    let mut audited: Vec<String> = lines
        .into_iter()
        .filter(|a| a.action == "booking.create")
        .map(|a| a.target)
        .collect();
    audited.sort();
    let mut want: Vec<String> = back.iter().map(|b| format!("booking {}", b.id)).collect();
    want.sort();
    assert_eq!(audited, want);
    store.close().await;

    // Not a Lanes database: refused, and nothing is replaced.
    let junk = tmp.path().join("junk.db");
    std::fs::write(&junk, b"not a database").unwrap();
    let out = run_lanes(&[
        "restore",
        "--from",
        junk.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--replace",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(data.join("lanes.db").exists());
}

/// The SQLite database stays whole while everything touches it at once: `/healthz` hammered,
/// two API writers, and other processes adding users and taking backups (as the README tells
/// an admin to do while the server serves). Every acknowledged write is there afterwards and
/// the database (and every backup) passes `integrity_check`. A health check that opened and
/// closed the file once dropped the server's locks: the next `lanes user add` deleted the
/// live WAL, and acknowledged writes were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_stays_whole_under_health_checks_writers_and_other_processes() {
    if sqlite_only("the SQLite file shared with other processes") {
        return;
    }
    use std::time::{Duration, Instant};
    let account = "lanes-test-job";
    lanes_tests::ensure_unix_account(account);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let url = format!("sqlite://{}", data.join("lanes.db").display());
    let server = lanes_tests::ServerProcess::start(&data, &url, &["--gpus", "sim:2"]).await;
    let (setup, _) = lanes_client::Client::new(&server.base)
        .login("nobody", "x")
        .await
        .map_or_else(
            |_| (None::<lanes_client::Client>, ()),
            |(c, _)| (Some(c), ()),
        );
    assert!(setup.is_none(), "no account yet");
    let add_user = |name: &str| {
        let (data, name) = (data.clone(), name.to_string());
        move || lanes_user_add(&data, &name, account)
    };
    let (ok, err) = tokio::task::spawn_blocking(add_user("writer"))
        .await
        .unwrap();
    assert!(ok, "{err}");
    let (writer, _) = lanes_client::Client::new(&server.base)
        .login("writer", "soak passphrase")
        .await
        .expect("the first user logs in");
    // Quiet rounds first, as an admin works by hand: a health check, a user added from the
    // terminal, a token made through the API. An idle server is where lost locks hurt most.
    let mut quiet_users = Vec::new();
    let mut quiet_tokens = Vec::new();
    for round in 0..6 {
        let health = reqwest::get(format!("{}/healthz", server.base))
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let name = format!("quiet{round}");
        let (ok, err) = tokio::task::spawn_blocking(add_user(&name)).await.unwrap();
        assert!(ok, "lanes user add {name}: {err}");
        let made = writer
            .create_token(&lanes_types::account::NewToken {
                name: format!("quiet {round}"),
            })
            .await
            .expect("a token is made");
        quiet_tokens.push(made.token.id);
        quiet_users.push(name);
    }
    let until = Instant::now() + Duration::from_secs(10);

    let health = {
        let base = server.base.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut checks = 0;
            while Instant::now() < until {
                let answer = client.get(format!("{base}/healthz")).send().await.unwrap();
                assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
                checks += 1;
            }
            checks
        })
    };
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let writer = writer.clone();
            tokio::spawn(async move {
                let mut made = Vec::new();
                let mut failed = 0;
                while Instant::now() < until {
                    let name = format!("soak {w}-{}", made.len() + failed);
                    let new = lanes_types::account::NewToken { name };
                    match writer.create_token(&new).await {
                        Ok(created) => made.push(created.token.id),
                        Err(e) => {
                            failed += 1;
                            eprintln!("a write failed: {e}");
                        }
                    }
                }
                (made, failed)
            })
        })
        .collect();
    let others = {
        let data = data.clone();
        let tmp = tmp.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let mut added = Vec::new();
            let mut backups = Vec::new();
            let mut round = 0;
            while Instant::now() < until {
                let name = format!("soak{round}");
                let (ok, err) = lanes_user_add(&data, &name, account);
                assert!(ok, "lanes user add {name}: {err}");
                added.push(name);
                if round % 4 == 0 {
                    let to = tmp.join(format!("backup-{round}.db"));
                    let out = lanes_tests::run_lanes(&[
                        "backup",
                        "--data-dir",
                        data.to_str().unwrap(),
                        "--to",
                        to.to_str().unwrap(),
                    ]);
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    backups.push(to);
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(150));
            }
            (added, backups)
        })
    };
    let checks = health.await.unwrap();
    let (mut added, backups) = others.await.unwrap();
    added.extend(quiet_users);
    let mut acknowledged = quiet_tokens;
    for writer in writers {
        let (made, failed) = writer.await.unwrap();
        assert_eq!(failed, 0, "API writes failed");
        acknowledged.extend(made);
    }
    assert!(
        checks > 50 && added.len() > 10 && acknowledged.len() > 50,
        "{checks} health checks, {} users, {} tokens",
        added.len(),
        acknowledged.len()
    );

    // Every acknowledged write is there: the added users log in now, and after a crash every
    // write is in the file, as a process of its own reads it.
    for name in &added {
        let login = lanes_client::Client::new(&server.base)
            .login(name, "soak passphrase")
            .await;
        assert!(
            login.is_ok(),
            "{name} was added and cannot log in: {login:?}"
        );
    }
    server.kill_9();
    for db in std::iter::once(data.join("lanes.db")).chain(backups.clone()) {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let check: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(check, "ok", "{}", db.display());
        if db == data.join("lanes.db") {
            let tokens: Vec<i64> = sqlx::query_scalar("SELECT id FROM api_tokens")
                .fetch_all(&mut conn)
                .await
                .unwrap();
            let lost: Vec<&i64> = acknowledged
                .iter()
                .filter(|id| !tokens.contains(id))
                .collect();
            assert!(
                lost.is_empty(),
                "{} acknowledged tokens lost: {lost:?}",
                lost.len()
            );
            let users: Vec<String> = sqlx::query_scalar("SELECT username FROM users")
                .fetch_all(&mut conn)
                .await
                .unwrap();
            let lost: Vec<&String> = added.iter().filter(|u| !users.contains(u)).collect();
            assert!(lost.is_empty(), "added users lost: {lost:?}");
        }
        let _ = conn.close().await;
    }
}

/// `lanes user add NAME` in a process of its own, on the data dir a server serves.
fn lanes_user_add(data: &std::path::Path, name: &str, unix_user: &str) -> (bool, String) {
    use std::io::Write;
    let mut add = std::process::Command::new(lanes_tests::lanes_bin())
        .args(["user", "add", "--username", name, "--unix-user", unix_user])
        .args(["--password-stdin", "--data-dir", data.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"soak passphrase\n")
        .unwrap();
    let out = add.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
