//! Jobs outlive the server: kill -9 the `lanes` binary while jobs run and start it again. A job
//! whose process still runs is re-adopted and stopped at its slot's end; a job whose slot ended
//! while the server was down is stopped at once; a job whose process vanished is marked lost.

use chrono::Utc;
use lanes_server::telemetry::procinfo;
use lanes_tests::{ensure_unix_account, lanes_bin, session_cookie, wait_until};
use lanes_types::booking::Booking;
use lanes_types::job::{Job, JobState};
use lanes_types::GpuState;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";

struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(data: &Path) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(lanes_bin())
            .args(["serve", "--gpus", "sim:2", "--sim-background", "false"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--data-dir", data.to_str().unwrap()])
            .args(["--poll-interval", "100ms", "--job-grace", "1s"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lanes serve starts");
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        wait_until(Duration::from_secs(10), "the server comes up", || async {
            reqwest::get(format!("{}/healthz", server.base))
                .await
                .is_ok_and(|r| r.status().is_success())
                .then_some(())
        })
        .await;
        server
    }

    fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

struct Client {
    http: reqwest::Client,
    cookie: String,
}

impl Client {
    async fn login(server: &Server) -> Client {
        let http = reqwest::Client::new();
        let resp = http
            .post(format!("{}/api/v1/auth/login", server.base))
            .json(&json!({"username": ACCOUNT, "password": "restart passphrase"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let cookie = session_cookie(&resp).unwrap();
        Client { http, cookie }
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        server: &Server,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> T {
        let mut request = self
            .http
            .request(method, format!("{}{path}", server.base))
            .header("cookie", &self.cookie);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let resp = request.send().await.unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    async fn job(&self, server: &Server, id: i64) -> Job {
        self.call(
            server,
            reqwest::Method::GET,
            &format!("/api/v1/jobs/{id}"),
            None,
        )
        .await
    }

    async fn book(&self, server: &Server, card: &str, seconds: i64) -> Booking {
        let start = Utc::now();
        let end = start + chrono::Duration::seconds(seconds);
        self.call(
            server,
            reqwest::Method::POST,
            "/api/v1/bookings",
            Some(json!({"gpus": [card], "start": start, "end": end})),
        )
        .await
    }

    async fn submit(&self, server: &Server, booking: i64) -> Job {
        self.call(
            server,
            reqwest::Method::POST,
            "/api/v1/jobs",
            Some(json!({"booking_id": booking, "argv": ["sleep", "600"]})),
        )
        .await
    }
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
    let mut add = Command::new(lanes_bin())
        .args(["user", "add", "--username", ACCOUNT, "--unix-user", ACCOUNT])
        .args(["--password-stdin", "--data-dir", data.to_str().unwrap()])
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

    let first = Server::start(&data).await;
    let client = Client::login(&first).await;
    let gpus: Vec<GpuState> = client
        .call(&first, reqwest::Method::GET, "/api/v1/gpus", None)
        .await;
    let long = client.book(&first, &gpus[0].info.uuid, 12).await;
    let short = client.book(&first, &gpus[1].info.uuid, 4).await;
    let kept = client.submit(&first, long.id).await;
    let vanishing = client.submit(&first, long.id).await;
    let overdue = client.submit(&first, short.id).await;
    let mut pids = Vec::new();
    for job in [&kept, &vanishing, &overdue] {
        let pid = wait_until(Duration::from_secs(5), "the job starts", || async {
            client.job(&first, job.id).await.pid
        })
        .await;
        pids.push(pid);
    }

    first.kill_9();
    // While the server is down: one job's process dies, and the short booking ends.
    killpg(Pid::from_raw(pids[1] as i32), Signal::SIGKILL).unwrap();
    let wait = (short.end - Utc::now()).num_milliseconds() + 500;
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    assert!(!gone(pids[0]) && !gone(pids[2]), "jobs outlive the server");

    let restarted_at = Utc::now();
    let second = Server::start(&data).await;
    let settle = |id: i64| {
        let client = &client;
        let second = &second;
        async move {
            wait_until(
                Duration::from_secs(10),
                &format!("job {id} ends"),
                || async { Some(client.job(second, id).await).filter(|job| job.state.is_over()) },
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
    let running = client.job(&second, kept.id).await;
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
