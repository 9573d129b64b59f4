//! Notebooks in a booking: a member whose login profile activates a virtual environment with
//! Jupyter Server (installed from PyPI's wheels, `make tools-test`) types `lanes jupyter`, and
//! works in it through the portal: a kernel's cell prints the booked card and the member's uid.
//! The attacks on `/sessions/ID/`: another member, another site's websocket, paths that climb
//! out, a guessed id, Jupyter's token looked for in pages, answers and logs. The session ends
//! with the booking, and by itself when idle. Root only (jobs switch users); CI runs as root.

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_login_account, lanes_bin, wait_until, Session, TestApp};
use lanes_types::enforcement::Policy;
use lanes_types::job::{Job, JobState};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A member whose login profile has Jupyter.
const MEMBER: &str = "lanes-test-nb";
/// A member whose login profile has none.
const BARE: &str = "lanes-test-shell";

/// The member with Jupyter in `~/jvenv` (tests/notebook-member.sh, which CI's wheels feed);
/// `None` (skipped) without root.
fn jupyter_member() -> Option<PathBuf> {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: notebooks run as their member's Unix account, which needs root");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebook-member.sh");
    let made = std::process::Command::new("bash")
        .arg(script)
        .arg(MEMBER)
        .output()
        .expect("the member is made");
    assert!(made.status.success(), "{made:?}");
    Some(PathBuf::from(String::from_utf8_lossy(&made.stdout).trim()))
}

/// `lanes ARGS` as the member types it, with their token, to its end.
async fn lanes(app: &TestApp, token: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(lanes_bin())
        .args(args)
        .env("LANES_URL", app.url(""))
        .env("LANES_TOKEN", token)
        .env("HOME", "/nonexistent")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .await
        .expect("lanes runs")
}

/// An API token of session `cookie`'s member, for the terminal client.
async fn token_of(app: &TestApp, cookie: &str) -> String {
    app.create_token(cookie, "terminal").await["secret"]
        .as_str()
        .expect("a token")
        .to_string()
}

/// `lanes jupyter --booking BOOKING`, typed by the member: its link, and the session's id.
async fn open_notebook(app: &TestApp, token: &str, booking: i64) -> (String, i64) {
    let out = lanes(app, token, &["jupyter", "--booking", &booking.to_string()]).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let url = stdout.trim().to_string();
    let id = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a session's link: {url}"));
    (url, id)
}

/// A raw request line to the portal (no client library tidies its path), and the status.
async fn raw_status(app: &TestApp, path: &str, cookie: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n",
        app.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The token of the session whose run directory is under `jobs_dir`.
fn token_in(jobs_dir: &Path) -> String {
    for entry in std::fs::read_dir(jobs_dir).unwrap().flatten() {
        if let Ok(token) = std::fs::read_to_string(entry.path().join("session-token")) {
            return token;
        }
    }
    panic!("no session token under {}", jobs_dir.display());
}

/// Runs `code` in a new kernel of session `id`, over the kernel's websocket through the
/// portal, as the member's browser does; what it printed.
async fn run_cell(app: &TestApp, ada: &Session<'_>, id: i64, code: &str) -> String {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let http = reqwest::Client::new();
    let kernel: serde_json::Value = http
        .post(app.url(&format!("/sessions/{id}/api/kernels")))
        .header("cookie", &ada.cookie)
        .json(&serde_json::json!({"name": "python3"}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .expect("a kernel starts")
        .json()
        .await
        .unwrap();
    let kernel = kernel["id"].as_str().expect("a kernel id").to_string();
    let mut request = app.ws_request_as(
        &format!("/sessions/{id}/api/kernels/{kernel}/channels"),
        &ada.cookie,
    );
    request
        .headers_mut()
        .insert("origin", format!("http://{}", app.addr).parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the kernel's websocket opens through the portal");
    let execute = serde_json::json!({
        "header": {"msg_id": "lanes-1", "username": MEMBER, "session": "lanes-test",
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": false, "store_history": false,
                    "user_expressions": {}, "allow_stdin": false, "stop_on_error": true},
    });
    socket
        .send(Message::text(execute.to_string()))
        .await
        .unwrap();
    let mut printed = String::new();
    let read = async {
        while let Some(Ok(message)) = socket.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            if value["parent_header"]["msg_id"] != "lanes-1" {
                continue;
            }
            match value["header"]["msg_type"].as_str() {
                Some("stream") => printed.push_str(value["content"]["text"].as_str().unwrap()),
                Some("error") => panic!("the cell failed: {value}"),
                Some("status") if value["content"]["execution_state"] == "idle" => break,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the cell ran within 60 s");
    printed
}

async fn job_over(ada: &Session<'_>, id: i64, seconds: u64) -> Job {
    wait_until(
        Duration::from_secs(seconds),
        "the session's end",
        || async {
            let job = ada.job(id).await;
            job.state.is_over().then_some(job)
        },
    )
    .await
}

#[tokio::test]
async fn a_member_works_in_their_notebook_through_the_portal_and_only_they_can() {
    let Some(_home) = jupyter_member() else {
        return;
    };
    let app = TestApp::spawn(2).await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let eve = Session {
        app: &app,
        cookie: app.sign_up("eve", Role::User).await,
    };
    let admin = app.sign_up("root-admin", Role::Admin).await;
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[1].info.uuid.clone()], 600).await;
    let token = token_of(&app, &ada.cookie).await;

    // Typed as a member types it: one command, and a link to open.
    let (url, id) = open_notebook(&app, &token, booking.id).await;
    assert_eq!(url, app.url(&format!("/sessions/{id}/")));
    let job = ada.job(id).await;
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.booking_id, Some(booking.id));
    assert_eq!(
        job.session_path().as_deref(),
        Some(&*format!("/sessions/{id}/"))
    );

    // A cell sees the booked card alone, and runs as the member.
    let printed = run_cell(
        &app,
        &ada,
        id,
        "import os\nprint(os.environ.get('CUDA_VISIBLE_DEVICES'), os.getuid())",
    )
    .await;
    let uid = nix::unistd::User::from_name(MEMBER).unwrap().unwrap().uid;
    assert_eq!(printed.trim(), format!("{} {uid}", gpus[1].info.uuid));

    // Only its owner: another member and an admin are refused, a guessed id is nothing.
    let status = |cookie: String, path: String| {
        let url = app.url(&path);
        async move {
            reqwest::Client::new()
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let api = format!("/sessions/{id}/api/status");
    assert_eq!(status(ada.cookie.clone(), api.clone()).await, 200);
    assert_eq!(status(eve.cookie.clone(), api.clone()).await, 403);
    assert_eq!(status(admin.clone(), api.clone()).await, 403);
    // Unless the admins chose to open members' notebooks, and then with a token, never from
    // an admin's browser, where the member's pages would act with the admin's cookie.
    let boss = app.client_with(&admin);
    let mut settings = boss.settings().await.unwrap();
    settings.admins_open_sessions = true;
    boss.save_settings(&settings).await.expect("saved");
    let admin_token = token_of(&app, &admin).await;
    let with_token = |token: String| {
        let url = app.url(&api);
        async move {
            let answer = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (code, said) = status_and_text(&app, &admin, &api).await;
    assert_eq!(code, 403, "an admin's browser: {said}");
    assert!(said.contains("API token"), "{said}");
    assert_eq!(with_token(admin_token.clone()).await.0, 200);
    assert_eq!(status(eve.cookie.clone(), api.clone()).await, 403);
    settings.admins_open_sessions = false;
    boss.save_settings(&settings).await.expect("saved");
    assert_eq!(status(admin.clone(), api.clone()).await, 403);
    assert_eq!(with_token(admin_token).await.0, 403);
    assert_eq!(
        status(ada.cookie.clone(), "/sessions/987654/api/status".into()).await,
        404
    );
    assert_eq!(status(ada.cookie.clone(), "/sessions/x/".into()).await, 404);
    let anonymous = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let away = anonymous.get(app.url(&api)).send().await.unwrap();
    assert_eq!(away.status(), 303, "anonymous visitors are sent to log in");
    // A websocket from another site, with the member's cookie, is refused.
    let mut foreign =
        app.ws_request_as(&format!("/sessions/{id}/api/events/subscribe"), &ada.cookie);
    foreign
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(foreign).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("a foreign origin got {:?}", other.map(|_| ())),
    }
    // Paths that climb out of the session, written plainly or encoded.
    for path in [
        format!("/sessions/{id}/../../admin"),
        format!("/sessions/{id}/%2e%2e/%2e%2e/api/v1/users"),
        format!("/sessions/{id}/api/..%2F..%2F"),
    ] {
        let got = raw_status(&app, &path, &ada.cookie).await;
        assert!(got == 400 || got == 404, "{path}: {got}");
    }
    assert_eq!(
        raw_status(&app, &format!("/sessions/{id}/../../admin"), &ada.cookie).await,
        400
    );

    // Jupyter's token stays on the server: not in its pages, the API, the job's logs.
    let secret = token_in(&app.data_dir.path().join("jobs"));
    let page = reqwest::Client::new()
        .get(app.url(&format!("/sessions/{id}/")))
        .header("cookie", &ada.cookie)
        .send()
        .await
        .unwrap();
    assert!(page.status().is_success() || page.status().is_redirection());
    assert!(!page.text().await.unwrap().contains(&secret));
    for path in [
        format!("/api/v1/jobs/{id}"),
        format!("/api/v1/jobs/{id}/log"),
        format!("/api/v1/jobs/{id}/log?stream=stderr"),
        api.clone(),
        format!("/sessions/{id}/api/kernels"),
    ] {
        let text = reqwest::Client::new()
            .get(app.url(&path))
            .header("cookie", &ada.cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!text.contains(&secret), "{path} shows Jupyter's token");
    }

    // The booking's end ends it.
    ada.client()
        .withdraw_booking(booking.id)
        .await
        .expect("released");
    let ended = job_over(&ada, id, 60).await;
    assert!(
        matches!(ended.state, JobState::Killed | JobState::Exited),
        "{ended:?}"
    );
    assert_eq!(status(ada.cookie.clone(), api.clone()).await, 409);
    app.stop().await;
}

#[tokio::test]
async fn a_member_without_jupyter_is_told_what_to_install() {
    if !nix::unistd::Uid::effective().is_root() {
        return;
    }
    ensure_login_account(BARE, "/bin/sh", &[]);
    let app = TestApp::spawn(1).await;
    let bob = Session {
        app: &app,
        cookie: app.sign_up(BARE, Role::User).await,
    };
    let token = token_of(&app, &bob.cookie).await;
    // No booking yet: told how to get one.
    let none = lanes(&app, &token, &["jupyter"]).await;
    assert_eq!(none.status.code(), Some(1), "{none:?}");
    assert!(String::from_utf8_lossy(&none.stderr).contains("lanes jupyter --gpus 1"));
    // One card booked by the command itself, and a clear word on what is missing.
    let out = lanes(&app, &token, &["jupyter", "--gpus", "1", "--for", "30m"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Jupyter is not installed in your login environment")
            && stderr.contains("pip install --user jupyterlab"),
        "{stderr}"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_idle_notebook_ends_by_itself() {
    let Some(_home) = jupyter_member() else {
        return;
    };
    let app = TestApp::spawn(1).await;
    let admin = app.sign_up("idle-admin", Role::Admin).await;
    app.client_with(&admin)
        .save_policy(&Policy {
            idle_window_s: 2,
            ..Policy::default()
        })
        .await
        .expect("the policy is saved");
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 900).await;
    let token = token_of(&app, &ada.cookie).await;
    let (_, id) = open_notebook(&app, &token, booking.id).await;
    // A kernel used once, then left alone (its tab open): it is culled, then Jupyter, which
    // looks once a minute, finds nothing running and ends the session.
    assert_eq!(run_cell(&app, &ada, id, "print(6 * 7)").await.trim(), "42");
    let ended = job_over(&ada, id, 100).await;
    assert_eq!(ended.state, JobState::Exited, "{ended:?}");
    let log = ada
        .client()
        .job_log(
            id,
            &lanes_types::query::LogQuery {
                stream: Some("stderr".into()),
                tail: None,
            },
            None,
        )
        .await
        .unwrap()
        .text;
    assert!(log.contains("shutting down"), "{log}");
    app.stop().await;
}

async fn status_and_text(app: &TestApp, cookie: &str, path: &str) -> (u16, String) {
    let answer = reqwest::Client::new()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}
