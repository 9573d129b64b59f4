//! The terminal client against the real server, as a lab member types it: `lanes login` through
//! a pseudo-terminal (tmux), then every command with the saved token; `lanes run` gives its
//! command exactly the booked cards, returns its status, and releases what it booked, even on
//! SIGINT; exit statuses 2 (usage), 1 (refused), 3 (unreachable).

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, lanes_bin, tmux, wait_until, Session, TestApp};
use lanes_types::booking::{Booking, BookingState};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// A shell of one user: a home of its own, the portal's URL and (after `token`) a token.
struct Shell {
    home: tempfile::TempDir,
    url: String,
    token: Option<String>,
    node: String,
}

impl Shell {
    fn new(app: &TestApp) -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            url: app.url(""),
            token: None,
            node: "testnode".into(),
        }
    }

    async fn with_token(app: &TestApp, cookie: &str) -> Self {
        let token = app.create_token(cookie, "terminal test").await;
        Self {
            token: Some(token["secret"].as_str().unwrap().to_string()),
            ..Self::new(app)
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(lanes_bin());
        command
            .args(args)
            .env("HOME", self.home.path())
            .env_remove("XDG_CONFIG_HOME")
            .env("LANES_NODE", &self.node)
            .env("LANES_URL", &self.url)
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        match &self.token {
            Some(token) => command.env("LANES_TOKEN", token),
            None => command.env_remove("LANES_TOKEN"),
        };
        command
    }

    async fn lanes(&self, args: &[&str]) -> Output {
        self.command(args).output().await.expect("lanes runs")
    }

    /// Runs, expects success, and gives stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.lanes(args).await;
        assert!(
            out.status.success(),
            "lanes {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, args: &[&str]) -> T {
        // Right after the command's name: anything after `--` belongs to the job.
        let mut all = args.to_vec();
        all.insert(1, "--json");
        serde_json::from_str(&self.ok(&all).await).expect("JSON on stdout")
    }

    fn config(&self) -> std::path::PathBuf {
        self.home.path().join(".config/lanes/config.toml")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command running in a terminal of its own (tmux on a socket of its own), `width` wide:
/// what a person sees, and keys they type.
struct Terminal(std::path::PathBuf);

impl Terminal {
    fn start(socket: std::path::PathBuf, width: u32, line: &str) -> Self {
        let width = width.to_string();
        tmux(
            &socket,
            &["new-session", "-d", "-x", &width, "-y", "20", line],
        );
        Self(socket)
    }

    fn screen(&self) -> String {
        tmux(&self.0, &["capture-pane", "-p"])
    }

    /// Waits until the screen shows `what`.
    async fn shows(&self, what: &str) {
        wait_until(Duration::from_secs(10), what, || async move {
            self.screen().contains(what).then_some(())
        })
        .await
    }

    fn type_line(&self, text: &str) {
        tmux(&self.0, &["send-keys", text, "Enter"]);
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        tmux(&self.0, &["kill-server"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_at_a_terminal_keeps_a_private_token_and_logout_revokes_it() {
    let app = TestApp::spawn(2).await;
    app.create_user("alice", "alice passphrase", Role::User)
        .await;
    let shell = Shell::new(&app);
    let socket = shell.home.path().join("tmux.sock");
    // LANES_URL is not set in the terminal: the URL comes from the command line.
    let line = format!(
        "env -u LANES_URL -u LANES_TOKEN HOME={} {} login {}; sleep 60",
        shell.home.path().display(),
        lanes_bin().display(),
        shell.url
    );
    let terminal = Terminal::start(socket, 160, &line);
    terminal.shows("Username").await;
    terminal.type_line("alice");
    terminal.shows("Password:").await;
    terminal.type_line("alice passphrase");
    terminal.shows("Logged in").await;
    let screen = terminal.screen();
    drop(terminal);
    assert!(!screen.contains("alice passphrase"), "no echo: {screen}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(shell.config())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let saved = std::fs::read_to_string(shell.config()).unwrap();
    assert!(saved.contains("token = \"") && saved.contains("username = \"alice\""));

    // The saved login is what the next command uses (the URL from the file, too).
    let mut from_file = shell.command(&["bookings"]);
    from_file.env_remove("LANES_URL");
    let out = from_file.output().await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    // A file others can read is refused, not used.
    std::fs::set_permissions(shell.config(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = shell.lanes(&["bookings"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("others may read it"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(shell.config(), std::fs::Permissions::from_mode(0o600)).unwrap();

    let token = saved
        .lines()
        .find_map(|l| l.strip_prefix("token = \""))
        .map(|t| t.trim_end_matches('"').to_string())
        .unwrap();
    assert_eq!(app.me_with_token(&token).await.status(), 200);
    shell.ok(&["logout"]).await;
    assert_eq!(app.me_with_token(&token).await.status(), 401, "revoked");
    assert!(!shell.config().exists());
    let out = shell.lanes(&["bookings"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "no login left: {}",
        stderr(&out)
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_gives_the_command_exactly_its_booked_cards_and_its_status_and_releases_them() {
    let app = TestApp::spawn(4).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    let out = shell
        .lanes(&[
            "run", "--gpus", "2", "--for", "30m", "--",
            "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; echo $NVIDIA_VISIBLE_DEVICES; echo $CUDA_DEVICE_ORDER $LANES_BOOKING_ID; exit 3",
        ])
        .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let session = Session {
        app: &app,
        cookie: cookie.clone(),
    };
    let bookings: Vec<Booking> = shell.json(&["bookings", "--past"]).await;
    assert_eq!(bookings.len(), 1, "{bookings:?}");
    let booking = &bookings[0];
    assert_eq!(booking.state, BookingState::Released, "released at exit");
    assert!(booking.note.starts_with("lanes run: sh -c"));
    // Exactly the booked cards, in PCI bus order.
    let in_bus_order: Vec<String> = cards(&app)
        .await
        .into_iter()
        .filter(|g| booking.gpus.iter().any(|b| b.uuid == g.info.uuid))
        .map(|g| g.info.uuid)
        .collect();
    assert_eq!(in_bus_order.len(), 2);
    assert_eq!(lines[0], in_bus_order.join(","));
    assert_eq!(lines[1], lines[0]);
    assert_eq!(lines[2], format!("PCI_BUS_ID {}", booking.id));

    // Inside an existing booking: `lanes run` alone uses it and leaves it booked.
    let gpus = cards(&app).await;
    let mine = session.book(&[gpus[3].info.uuid.clone()], 600).await;
    let out = shell
        .ok(&["run", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"])
        .await;
    assert_eq!(out.trim(), gpus[3].info.uuid);
    let env = shell.ok(&["env"]).await;
    assert!(env.contains(&format!(
        "export CUDA_VISIBLE_DEVICES='{}'",
        gpus[3].info.uuid
    )));
    let still = session.client().booking(mine.id).await.unwrap();
    assert_eq!(still.state, BookingState::Active);
    // A command that cannot start: the shell's 127.
    let out = shell.lanes(&["run", "--", "no-such-program-here"]).await;
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_at_once_get_different_cards_and_sigint_releases_what_run_booked() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    let start = |_: u32| {
        let mut command = shell.command(&[
            "run",
            "--gpus",
            "1",
            "--",
            "python3",
            "-c",
            "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(30)",
        ]);
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // As a shell starts a foreground job: SIGINT at its default, even when this test runs
        // in the background (which ignores it, and the ignoring is inherited).
        unsafe {
            command.pre_exec(|| {
                nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGINT,
                    nix::sys::signal::SigHandler::SigDfl,
                )
                .map(drop)
                .map_err(std::io::Error::from)
            });
        }
        command.spawn().unwrap()
    };
    let (mut one, mut two) = (start(1), start(2));
    use tokio::io::AsyncBufReadExt;
    let first_line = |child: &mut tokio::process::Child| {
        let stdout = child.stdout.take().unwrap();
        async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("the command starts")
                .unwrap()
                .unwrap()
        }
    };
    let (a, b) = tokio::join!(first_line(&mut one), first_line(&mut two));
    assert_ne!(a, b, "two runs, two cards");
    let session = Session {
        app: &app,
        cookie: cookie.clone(),
    };
    let active = |session: &Session<'_>| {
        let client = session.client();
        async move {
            client
                .bookings(&Default::default())
                .await
                .unwrap()
                .into_iter()
                .filter(|b| b.state == BookingState::Active)
                .count()
        }
    };
    assert_eq!(active(&session).await, 2);
    // SIGINT from another process (as `kill -INT` sends it): passed on to the command, which
    // ends by it (Python's KeyboardInterrupt); the booking is released and the status is the
    // shell's 130.
    for child in [&one, &two] {
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    }
    for child in [&mut one, &mut two] {
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("lanes run ends after SIGINT")
            .unwrap();
        assert_eq!(status.code(), Some(130));
    }
    assert_eq!(active(&session).await, 0, "both bookings released");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_clearly_off_the_pool_or_away_from_the_bookings_cards() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let mut shell = Shell::with_token(&app, &cookie).await;
    let out = shell.lanes(&["run", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("you hold no active booking on testnode"),
        "{}",
        stderr(&out)
    );
    shell.node = "laptop".into();
    let out = shell.lanes(&["run", "--gpus", "1", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("this host (laptop) is not a GPU node")
            && stderr(&out).contains("testnode"),
        "{}",
        stderr(&out)
    );
    // Somebody else's booking is not a lane for this user.
    let bob = app.sign_up("bob", Role::User).await;
    let gpus = cards(&app).await;
    let theirs = Session {
        app: &app,
        cookie: bob,
    }
    .book(&[gpus[0].info.uuid.clone()], 600)
    .await;
    shell.node = "testnode".into();
    let out = shell
        .lanes(&["run", "--booking", &theirs.id.to_string(), "--", "true"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is bob's, not yours"),
        "{}",
        stderr(&out)
    );
    // Two cards asked, one free: the earliest window is named.
    let out = shell.lanes(&["run", "--gpus", "2", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the earliest window is"),
        "{}",
        stderr(&out)
    );
    app.stop().await;
}

/// A bare number is no duration: `--for 90` once booked 90 seconds without a word.
#[tokio::test]
async fn a_duration_without_its_unit_is_refused_with_the_units_it_could_mean() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    for args in [
        &["book", "--gpus", "1", "--for", "90", "-y"][..],
        &["submit", "--gpus", "1", "--time", "90", "--", "true"][..],
    ] {
        let out = shell.lanes(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("\"90\" has no unit: write 90m for minutes, 90h for hours"),
            "{}",
            stderr(&out)
        );
    }
    let client = app.client_with(&cookie);
    let mine = client
        .bookings(&Default::default())
        .await
        .expect("bookings");
    assert!(mine.is_empty(), "nothing was booked: {mine:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_from_the_shell_book_find_extend_release_and_cancel() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    let now: Booking = shell
        .json(&["book", "--gpus", "2", "--for", "2h", "--note", "ablation"])
        .await;
    assert_eq!((now.state, now.gpus.len()), (BookingState::Active, 2));
    assert_eq!(now.note, "ablation");
    // Both cards are held for two hours: the earliest two-card hour is when they end.
    let slots: Vec<lanes_types::booking::FreeSlot> =
        shell.json(&["slots", "--gpus", "2", "--for", "1h"]).await;
    assert_eq!(slots[0].start, now.end);
    let extended: Booking = shell.json(&["extend", &now.id.to_string(), "30m"]).await;
    assert_eq!(extended.end, now.end + chrono::Duration::minutes(30));
    let later: Booking = shell
        .json(&["book", "--gpus", "2", "--for", "1h", "--earliest", "-y"])
        .await;
    assert_eq!(
        (later.start, later.state),
        (extended.end, BookingState::Upcoming)
    );
    // Without -y and without a terminal, --earliest will not guess.
    let out = shell
        .lanes(&["book", "--gpus", "1", "--for", "1h", "--earliest"])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // Another extension would run into the later booking of the same cards: the server's
    // refusal.
    let out = shell.lanes(&["extend", &now.id.to_string(), "1h"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not free until the new end"));
    // release and cancel each say which one the other is for.
    let out = shell.lanes(&["cancel", &now.id.to_string()]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("lanes release"));
    let released: Booking = shell.json(&["release", &now.id.to_string()]).await;
    assert_eq!(released.state, BookingState::Released);
    let cancelled: Booking = shell.json(&["cancel", &later.id.to_string()]).await;
    assert_eq!(cancelled.state, BookingState::Cancelled);
    let table = shell.ok(&["bookings", "--past"]).await;
    assert!(
        table.contains("released") && table.contains("ablation"),
        "{table}"
    );
    assert!(!table.contains('\x1b'), "plain when piped");

    // Bad usage is 2, a refusal 1, a server that is not there 3.
    let out = shell.lanes(&["book", "--for", "soon"]).await;
    assert_eq!(out.status.code(), Some(2));
    let out = shell.lanes(&["book", "--gpus", "9"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the pool's largest node has 2 GPUs; 9 were asked for"),
        "{}",
        stderr(&out)
    );
    let mut gone = shell.command(&["bookings"]);
    gone.env("LANES_URL", "http://127.0.0.1:9");
    let out = gone.output().await.unwrap();
    assert_eq!(out.status.code(), Some(3));
    // One sentence, not three layers of library text.
    assert_eq!(
        stderr(&out).trim(),
        "lanes: error: nothing answers at http://127.0.0.1:9 (connection refused): is `lanes serve` running there, and on that port?"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_history_and_report_show_the_pool_and_completions_are_printed() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    let booked: Booking = shell.json(&["book", "--gpus", "1", "--for", "1h"]).await;
    let status = shell.ok(&["status"]).await;
    assert!(
        status.contains("testnode · up · simulated · 2 cards"),
        "{status}"
    );
    assert!(status.contains("alice until"), "{status}");
    assert!(!status.contains('\x1b'), "plain when piped");
    let pool: serde_json::Value = shell.json(&["status"]).await;
    assert_eq!(pool["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(pool["bookings"][0]["id"], booked.id);
    // A watch streams one JSON object per reading.
    let mut watch = shell.command(&["status", "--watch", "--json"]);
    watch.stdout(std::process::Stdio::piped());
    let mut child = watch.spawn().unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a redraw per reading")
            .unwrap()
            .unwrap();
        let pool: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(pool["gpus"].as_array().unwrap().len(), 2);
    }
    child.kill().await.unwrap();

    let history = shell.ok(&["history", "--since", "10m"]).await;
    assert!(
        history.contains("GPU 0 · testnode") && history.contains("GPU 1 · testnode"),
        "{history}"
    );
    // Memory in GiB, as nvidia-smi users read it (it once printed raw bytes), once the
    // readings are written.
    let memory = wait_until(
        Duration::from_secs(10),
        "memory readings in GiB",
        || async {
            app.hooks.history.run().await;
            let out = shell
                .ok(&["history", "--since", "10m", "--metric", "memory"])
                .await;
            out.contains(" GiB").then_some(out)
        },
    )
    .await;
    assert!(!memory.contains("bytes"), "{memory}");
    let report = shell.ok(&["report"]).await;
    assert!(report.contains("alice"), "{report}");
    let csv = shell.ok(&["report", "--csv"]).await;
    assert!(csv.lines().next().unwrap().contains(','), "{csv}");
    let bash = shell.ok(&["completions", "bash"]).await;
    assert!(bash.contains("_lanes") && bash.contains("submit"));
    let help = shell.ok(&["--help"]).await;
    let client_at = help.find("Client commands").unwrap();
    let server_at = help.find("Server commands").unwrap();
    assert!(help[client_at..server_at].contains("  run "));
    assert!(help[server_at..].contains("  serve "));
    assert!(shell.ok(&["book", "--help"]).await.contains("Examples:"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_job_followed_from_the_shell_exits_with_the_jobs_status() {
    const ACCOUNT: &str = "lanes-test-cli";
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up(ACCOUNT, Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    let booking: Booking = shell.json(&["book", "--gpus", "1", "--for", "10m"]).await;
    let booking_id = booking.id.to_string();
    let follow = async |command: &[&str]| {
        let mut args = vec!["submit", "--booking", &booking_id, "--follow", "--"];
        args.extend_from_slice(command);
        shell.lanes(&args).await
    };
    let out = follow(&["sh", "-c", "echo from the job; exit 4"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("from the job"));
    let done: Vec<lanes_types::job::Job> = shell.json(&["jobs"]).await;
    let log = shell.ok(&["logs", &done[0].id.to_string()]).await;
    assert_eq!(log, "from the job\n");
    // A job that cannot start says why where its owner looks: at the end of --follow, and
    // under `lanes logs` (it once ended "job N failed" with nothing else).
    let out = follow(&["no-such-program-lanes"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("failed: no-such-program-lanes: not found on the PATH"),
        "{}",
        stderr(&out)
    );
    let jobs = shell.ok(&["jobs"]).await;
    assert!(
        // Status 4: failed, as the queue and the pages say it.
        jobs.contains("failed") && jobs.contains("echo from the job"),
        "{jobs}"
    );
    // A queue job: queued, listed, cancelled.
    let queued: serde_json::Value = shell
        .json(&[
            "submit", "--gpus", "2", "--time", "1h", "--", "sleep", "600",
        ])
        .await;
    let id = queued["id"].as_i64().unwrap();
    let queue = shell.ok(&["queue"]).await;
    assert!(
        queue.contains(&id.to_string()) && queue.contains("sleep 600"),
        "{queue}"
    );
    let cancelled: serde_json::Value = shell.json(&["cancel-job", &id.to_string()]).await;
    assert_eq!(cancelled["state"], "cancelled");
    // Issue 69, item 15: a running job asked to stop is said to be stopping, not "running".
    let running: lanes_types::job::Job = shell
        .json(&["submit", "--booking", &booking_id, "--", "sleep", "600"])
        .await;
    let id = running.id.to_string();
    wait_until(Duration::from_secs(10), "the job runs", || async {
        let jobs: Vec<lanes_types::job::Job> = shell.json(&["jobs"]).await;
        jobs.into_iter()
            .any(|j| j.id == running.id && j.state == lanes_types::job::JobState::Running)
            .then_some(())
    })
    .await;
    let out = shell.lanes(&["cancel-job", &id]).await;
    assert!(out.status.success(), "{out:?}");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("Job {id} is being stopped")),
        "{said}"
    );
    assert!(!said.contains("running"), "{said}");
    app.stop().await;
}

/// A listener that records every request's head, for checking what was sent where.
async fn recorder() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 65536];
            let n = conn.read(&mut buf).await.unwrap_or(0);
            keep.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = conn
                .write_all(
                    b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
    });
    (url, seen)
}

/// Secrets go only where they were meant to: `lanes login` follows no redirect (a 307 to
/// another origin would get the password again), and a saved token never travels with a
/// `LANES_URL` naming another portal.
#[tokio::test]
async fn the_terminal_client_sends_a_password_or_token_only_to_the_portal_it_was_meant_for() {
    use std::os::unix::fs::PermissionsExt;
    let app = TestApp::spawn(1).await;
    app.create_user("alice", "alice passphrase", Role::User)
        .await;
    let (elsewhere, seen) = recorder().await;

    // A saved login for this portal, and LANES_URL naming another one.
    let shell = Shell::new(&app);
    std::fs::create_dir_all(shell.config().parent().unwrap()).unwrap();
    std::fs::write(
        shell.config(),
        format!(
            "url = \"{}\"\ntoken = \"lanes_secret_saved_token\"\n",
            shell.url
        ),
    )
    .unwrap();
    std::fs::set_permissions(shell.config(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut other = shell.command(&["bookings"]);
    other.env("LANES_URL", &elsewhere);
    let out = other.output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the saved login is for"),
        "{}",
        stderr(&out)
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );

    // A portal that answers the login with a redirect to another origin.
    let target = format!("{elsewhere}/api/v1/auth/login");
    let redirector = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, target)],
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirecting = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirector).await });
    let socket = shell.home.path().join("tmux.sock");
    let line = format!(
        "env -u LANES_URL -u LANES_TOKEN HOME={} {} login {redirecting} --username alice; \
         echo exit=$?; sleep 60",
        shell.home.path().display(),
        lanes_bin().display(),
    );
    let terminal = Terminal::start(socket, 200, &line);
    // The portal is asked whether it answers before anyone types a password: the redirect
    // ends the login there.
    terminal.shows("exit=").await;
    let screen = terminal.screen();
    drop(terminal);
    assert!(
        screen.contains("exit=1") || screen.contains("exit=2"),
        "{screen}"
    );
    assert!(screen.contains("sends this request to"), "{screen}");
    assert!(
        !screen.contains("Password:"),
        "no password asked for: {screen}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    app.stop().await;
}

/// The first admin, as the README says: `lanes user add` on a terminal asks for the password
/// twice without echo (it once waited silently on standard input and echoed what was pasted),
/// and says what an account without a Unix account cannot do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_add_on_a_terminal_asks_twice_without_echo() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let socket = home.path().join("tmux.sock");
    let line = format!(
        "env -u LANES_DATABASE_URL {} user add --username ada --admin --data-dir {}; sleep 60",
        lanes_bin().display(),
        data.display()
    );
    let terminal = Terminal::start(socket, 200, &line);
    terminal
        .shows("New password for ada (at least 10 characters):")
        .await;
    terminal.type_line("the first passphrase");
    terminal.shows("The same again:").await;
    terminal.type_line("the first passphrase");
    terminal.shows("created admin \"ada\"").await;
    let screen = terminal.screen();
    drop(terminal);
    assert!(!screen.contains("first passphrase"), "no echo: {screen}");
    assert!(
        screen.contains("ada has no Unix account, so their jobs cannot start"),
        "{screen}"
    );
}

fn user(args: &[&str], data: &Path, stdin: &str) -> Output {
    let data = data.to_str().unwrap();
    lanes_tests::lanes_with_input(&[&["user"], args, &["--data-dir", data]].concat(), stdin)
}

/// An operator's account chores without a server: list, a forgotten password, disable and
/// enable, each refusing what it cannot do with exit status 2.
#[tokio::test]
async fn user_list_passwd_disable_and_enable_work_on_the_database() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let ok = |out: Output| {
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = ok(user(&["list"], &data, ""));
    assert!(listed.contains("no accounts yet"), "{listed}");
    ok(user(
        &[
            "add",
            "--username",
            "root-admin",
            "--admin",
            "--password-stdin",
        ],
        &data,
        "admin passphrase\n",
    ));
    let added = user(
        &[
            "add",
            "--username",
            "ada",
            "--unix-user",
            "nobody",
            "--password-stdin",
        ],
        &data,
        "old passphrase 1\n",
    );
    assert!(
        stderr(&added).is_empty(),
        "nobody exists here: {}",
        stderr(&added)
    );
    let listed = ok(user(&["list"], &data, ""));
    let ada_line = listed
        .lines()
        .find(|l| l.starts_with("ada "))
        .unwrap_or_default();
    assert!(
        ada_line.contains("user") && ada_line.contains("nobody") && ada_line.ends_with("yes"),
        "{listed}"
    );

    // A forgotten password: the new one signs in, the old one does not.
    ok(user(
        &["passwd", "ada", "--password-stdin"],
        &data,
        "new passphrase 2\n",
    ));
    let url = format!("sqlite://{}", data.join("lanes.db").display());
    let store = lanes_server::store::Store::open(&url).await.unwrap();
    let (_, hash) = store.accounts().credentials("ada").await.unwrap().unwrap();
    assert!(lanes_server::accounts::password::verify(
        "new passphrase 2",
        &hash
    ));
    store.close().await;

    ok(user(&["disable", "ada"], &data, ""));
    assert!(ok(user(&["list"], &data, "")).contains("no (disabled)"));
    ok(user(&["enable", "ada"], &data, ""));
    assert!(!ok(user(&["list"], &data, "")).contains("no (disabled)"));

    for (args, needle) in [
        (
            &["passwd", "nobody-here", "--password-stdin"][..],
            "no account \"nobody-here\"",
        ),
        (&["disable", "root-admin"][..], "no enabled admin"),
        (&["passwd", "ada"][..], "--password-stdin"),
    ] {
        let out = user(args, &data, "another passphrase\n");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

/// A member whose terminal speaks Chinese gets the server's refusals whole in Chinese: the
/// refusals a member provokes most (no such booking or job, someone else's booking, a queue
/// job too wide or too long, a booking wider than any node). Once they came as "与当前状态冲突：
/// only 5 GPUs are free …", the code's sentence in Chinese and the detail in English.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chinese_terminal_gets_the_servers_refusals_in_chinese_only() {
    const ACCOUNT: &str = "lanes-test-cli";
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(2).await;
    let ada = app.sign_up(ACCOUNT, Role::User).await;
    let bob = app.sign_up("bob", Role::User).await;
    let shell = Shell::with_token(&app, &ada).await;
    let bobs = Shell::with_token(&app, &bob).await;
    let theirs: Booking = bobs.json(&["book", "--gpus", "1", "--for", "1h"]).await;
    let theirs = theirs.id.to_string();
    let provoked: [&[&str]; 8] = [
        &["cancel", "99999"],
        &["release", &theirs],
        &["cancel-job", "99999"],
        &["logs", "99999"],
        &["submit", "--gpus", "20", "--time", "1h", "--", "true"],
        &["submit", "--gpus", "1", "--time", "30d", "--", "true"],
        &["submit", "--booking", &theirs, "--", "true"],
        &["book", "--gpus", "20", "--for", "1h"],
    ];
    for args in provoked {
        let out = shell
            .command(args)
            .env("LANG", "zh_CN.UTF-8")
            .output()
            .await
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "lanes {args:?}: {}",
            stderr(&out)
        );
        // "lanes: error: MESSAGE [code: rule]": the code and rule are for scripts, the rest
        // for people.
        let said = stderr(&out);
        let message = said
            .trim()
            .strip_prefix("lanes: error: ")
            .unwrap_or(&said)
            .rsplit_once(" [")
            .map_or(said.as_str(), |(message, _)| message)
            .replace("GPU", "");
        assert!(
            message
                .chars()
                .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
                && !message.chars().any(|c| c.is_ascii_alphabetic()),
            "lanes {args:?} in a Chinese terminal: {said}"
        );
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_dry_run_says_when_it_would_start_and_queues_nothing() {
    let app = TestApp::spawn(2).await;
    let cookie = app.sign_up("alice", Role::User).await;
    let shell = Shell::with_token(&app, &cookie).await;
    // As a member types it, without a command: nothing is needed to ask.
    let said = shell
        .ok(&["submit", "--dry-run", "--gpus", "2", "--time", "1h"])
        .await;
    assert!(
        said.contains("If you queue this now (fairshare policy), it would start at once."),
        "{said}"
    );
    assert!(
        said.contains("The earliest slot you could book instead:"),
        "{said}"
    );
    assert!(said.contains("Nothing was queued."), "{said}");
    let f: lanes_types::queue::QueueForecast = shell
        .json(&[
            "submit",
            "--dry-run",
            "--gpus",
            "1",
            "--time",
            "10m",
            "--",
            "python3",
            "train.py",
        ])
        .await;
    assert!(f.p50.is_some() && f.earliest_booking.is_some(), "{f:?}");
    let queue = app.client_with(&cookie).queue().await.unwrap();
    assert!(
        queue.jobs.is_empty(),
        "nothing was queued: {:?}",
        queue.jobs
    );
    // Too many cards: refused as a submission would be, with the server's reason (status 1).
    let out = shell
        .lanes(&["submit", "--dry-run", "--gpus", "3", "--time", "1h"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the pool has 2"), "{}", stderr(&out));
    app.stop().await;
}
