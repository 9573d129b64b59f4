//! Jobs outlive the server: kill -9 the `lanes` binary while jobs run and start it again. A job
//! whose process still runs is re-adopted and stopped at its slot's end; a job whose slot ended
//! while the server was down is stopped at once; a job whose process vanished is marked lost.

use chrono::Utc;
use lanes_client::Client;
use lanes_server::telemetry::procinfo;
use lanes_tests::{ensure_unix_account, lanes_bin, wait_until, ServerProcess as Server, TestDb};
use lanes_types::booking::Booking;
use lanes_types::job::{Job, JobState};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";

/// A client of `server` carrying the test user's session (sessions outlive restarts).
async fn log_in(server: &Server) -> Client {
    Client::new(&server.base)
        .login(ACCOUNT, "restart passphrase")
        .await
        .expect("the test user logs in")
        .0
}

/// The same session, against a server started again on another port.
fn against(client: &Client, server: &Server) -> Client {
    Client::new(&server.base).as_(client.credentials().clone())
}

async fn book(client: &Client, card: &str, seconds: i64) -> Booking {
    let start = Utc::now();
    let end = start + chrono::Duration::seconds(seconds);
    client
        .book(&lanes_tests::booking_of(&[card.to_string()], start, end))
        .await
        .expect("the booking is made")
}

async fn submit(client: &Client, booking: i64) -> Job {
    client
        .submit_job(&lanes_tests::Session::job_request(
            booking,
            &["sleep", "600"],
        ))
        .await
        .expect("the job is submitted")
}

async fn job(client: &Client, id: i64) -> Job {
    client.job(id).await.expect("the job is there")
}

/// Moves booking `id`'s end to a moment ago, in the database of a server that is down: what
/// the passing of its slot's end would have written.
async fn end_booking(url: &str, id: i64) {
    use sqlx::Connection;
    let end_ms = Utc::now().timestamp_millis() - 1;
    let update = "UPDATE bookings SET end_ms = $1 WHERE id = $2";
    let changed = if lanes_tests::on_postgres() {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        let done = sqlx::query(update).bind(end_ms).bind(id).execute(&mut conn);
        done.await.unwrap().rows_affected()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        let done = sqlx::query(update).bind(end_ms).bind(id).execute(&mut conn);
        done.await.unwrap().rows_affected()
    };
    assert_eq!(changed, 1, "booking {id} is in the database");
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i64) -> bool {
    procinfo::stat(pid as u32).is_none_or(|s| s.state == 'Z')
}

#[tokio::test]
async fn jobs_survive_a_killed_server_and_are_enforced_after_the_restart() {
    ensure_unix_account(ACCOUNT);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let db = TestDb::fresh(tmp.path()).await;
    let mut add = Command::new(lanes_bin())
        .args(["user", "add", "--username", ACCOUNT, "--unix-user", ACCOUNT])
        .args(["--password-stdin", "--data-dir", data.to_str().unwrap()])
        .args(["--database-url", &db.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"restart passphrase\n")
        .unwrap();
    assert!(add.wait().unwrap().success());

    let first = Server::start(&data, &db.url, &["--gpus", "sim:2"]).await;
    let client = log_in(&first).await;
    let gpus = client.gpus().await.unwrap();
    let long = book(&client, &gpus[0].info.uuid, 8).await;
    let short = book(&client, &gpus[1].info.uuid, 600).await;
    let kept = submit(&client, long.id).await;
    let vanishing = submit(&client, long.id).await;
    let overdue = submit(&client, short.id).await;
    let mut pids = Vec::new();
    for job in [&kept, &vanishing, &overdue] {
        let pid = wait_until(Duration::from_secs(5), "the job starts", || async {
            self::job(&client, job.id).await.pid
        })
        .await;
        pids.push(pid);
    }

    first.kill_9();
    // While the server is down: one job's process dies, and the short booking's slot ends
    // (its end moved to a moment ago in the database, as the clock would have moved it).
    killpg(Pid::from_raw(pids[1] as i32), Signal::SIGKILL).unwrap();
    end_booking(&db.url, short.id).await;
    assert!(!gone(pids[0]) && !gone(pids[2]), "jobs outlive the server");

    let restarted_at = Utc::now();
    let second = Server::start(&data, &db.url, &["--gpus", "sim:2"]).await;
    let client = against(&client, &second);
    let settle = |id: i64| {
        let client = &client;
        async move {
            wait_until(
                Duration::from_secs(10),
                &format!("job {id} ends"),
                || async { Some(job(client, id).await).filter(|job| job.state.is_over()) },
            )
            .await
        }
    };
    let lost = settle(vanishing.id).await;
    assert_eq!(lost.state, JobState::Lost, "{lost:?}");
    let stopped = settle(overdue.id).await;
    assert_eq!(stopped.state, JobState::Killed, "{stopped:?}");
    assert!(
        stopped.message.contains("end of its booking"),
        "{stopped:?}"
    );
    let late = (stopped.ended_at.unwrap() - restarted_at).num_milliseconds();
    assert!(late < 5_000, "stopped {late} ms after the restart");
    assert!(gone(pids[2]));

    // The re-adopted job runs on, the same process, until its slot ends.
    let running = job(&client, kept.id).await;
    assert_eq!(
        (running.state, running.pid),
        (JobState::Running, Some(pids[0]))
    );
    let ended = settle(kept.id).await;
    assert_eq!(ended.state, JobState::Killed, "{ended:?}");
    let after_end = (ended.ended_at.unwrap() - long.end).num_milliseconds();
    assert!(
        (0..1_500).contains(&after_end),
        "stopped {after_end} ms after its slot's end"
    );
    assert!(gone(pids[0]));
    second.kill_9();
}

/// `lanes serve` with `args`, expected to stop by itself within 20 s: its status and stderr.
fn serve_refused(data: &std::path::Path, url: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(lanes_bin())
        .args([
            "serve",
            "--sim-background",
            "false",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--data-dir", data.to_str().unwrap(), "--database-url", url])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lanes serve {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Two servers never serve one data dir, database or node at once: a second one is refused
/// with one line and status 2 (as a busy port is), a portal without cards never takes a GPU
/// node's name, and a process replaced with `--take-over` stops serving and says why.
#[tokio::test]
async fn a_second_server_on_what_another_serves_is_refused_and_a_displaced_one_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let db = TestDb::fresh(tmp.path()).await;
    let node = ["--gpus", "sim:2", "--node-name", "twin"];
    let first = Server::start(&data, &db.url, &node).await;
    let (status, stderr) = serve_refused(&data, &db.url, &node);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("already serves the data dir"), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("lanes: error"))
            .count(),
        1,
        "{stderr}"
    );
    let health = reqwest::get(format!("{}/healthz", first.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "the first goes on serving");
    if !lanes_tests::on_postgres() {
        // One SQLite database, reached from another data dir: refused the same way.
        let (status, stderr) = serve_refused(&tmp.path().join("elsewhere"), &db.url, &node);
        assert_eq!(status, Some(2), "{stderr}");
        assert!(stderr.contains("already serves the database"), "{stderr}");
        return;
    }
    // Several nodes on PostgreSQL: a live node's name is refused, even from another data dir.
    let other = tmp.path().join("other");
    let (status, stderr) = serve_refused(&other, &db.url, &node);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("serves node twin"), "{stderr}");
    // A portal without cards may not take it, even when told to take over.
    let (status, stderr) = serve_refused(
        &other,
        &db.url,
        &["--gpus", "none", "--node-name", "twin", "--take-over"],
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("node twin serves GPUs"), "{stderr}");
    // Taken over: the new one serves, the old one stops serving and exits with status 1.
    let second = Server::start(&other, &db.url, &[&node[..], &["--take-over"]].concat()).await;
    let mut first = first;
    let started = std::time::Instant::now();
    let exited = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the displaced server goes on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(exited.code(), Some(1));
    assert!(reqwest::get(format!("{}/healthz", first.base))
        .await
        .is_err());
    let health = reqwest::get(format!("{}/healthz", second.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
