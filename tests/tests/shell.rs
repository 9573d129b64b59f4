//! `lanes shell`: a member's login shell in a terminal of its own (tmux), inside their booking
//! on the node: the booked card's mask, the booking's cgroup behind the device wall, recorded
//! as a job of the booking; what it starts dies when the booking ends. And the refusals: root,
//! an account no member has, someone else's booking. Root only (it moves processes between
//! cgroups and switches users); CI runs as root.

use lanes_server::accounts::Role;
use lanes_server::jobs::wall::Isolation;
use lanes_server::ops::serve::ServeConfig;
use lanes_tests::{
    booking_of, cards, ensure_login_account, ensure_unix_account, lanes_bin, tmux, wait_until,
    Session, TestApp,
};
use lanes_types::enforcement::Policy;
use lanes_types::job::{JobNote, JobState, Standing};
use lanes_types::queue::{QueueSettings, QueueState, SubmitJob};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// A member with a real login shell and a home (the job tests' account has neither).
const MEMBER: &str = "lanes-test-shell";
/// Another member, whose shell asks for the first one's booking.
const OTHER: &str = "lanes-test-job";
/// The simulated cards' device files: card 0's is `/dev/null`, which every shell opens.
const DEVICES: [&str; 2] = ["/dev/null", "/dev/zero"];

/// Whether `pid` still runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// The lanes binary and the socket's directory, where every account can reach them.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    /// The accounts and the place, as root; `None` (the test is skipped) otherwise: shells
    /// move processes between cgroups and switch users.
    fn ready() -> Option<Self> {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: lanes shell moves processes and switches users, which needs root");
            return None;
        }
        ensure_login_account(MEMBER, "/bin/sh", &[]);
        ensure_unix_account(OTHER);
        Some(Self::new())
    }

    /// A server of `gpus` simulated cards whose shell socket is here.
    async fn app(&self, gpus: u32, adjust: impl FnOnce(&mut ServeConfig)) -> TestApp {
        let socket = self.socket();
        TestApp::spawn_configured(gpus, |config| {
            config.shell_socket = Some(socket);
            adjust(config);
        })
        .await
    }

    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lanes-shell-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(lanes_bin(), dir.path().join("lanes")).unwrap();
        Self { dir }
    }

    fn lanes(&self) -> PathBuf {
        self.dir.path().join("lanes")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("shell.sock")
    }

    /// `lanes shell ARGS` as Unix user `user` (root when `None`), to its end (awaited: the
    /// server answering it runs on this test's thread).
    async fn shell_as(&self, user: Option<&str>, args: &[&str]) -> std::process::Output {
        let mut command = match user {
            Some(user) => {
                let mut c = tokio::process::Command::new("runuser");
                c.args(["-u", user, "--"]).arg(self.lanes());
                c
            }
            None => tokio::process::Command::new(self.lanes()),
        };
        command
            .arg("shell")
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .await
            .expect("lanes shell runs")
    }
}

#[tokio::test]
async fn a_members_shell_lives_in_their_booking_and_dies_with_it() {
    let Some(place) = Place::ready() else {
        return;
    };
    let app = place
        .app(2, |config| {
            config.isolation = Isolation::Cgroup;
            config.sim.device_files = DEVICES.iter().map(Into::into).collect();
        })
        .await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 600).await;

    // Typed in a terminal of the member's own: the shell says where it is, starts a sleeper
    // in the background and lives on.
    let tmux_socket = place.dir.path().join("tmux");
    let line = format!(
        "runuser -u {MEMBER} -- {} shell --socket {}",
        place.lanes().display(),
        place.socket().display()
    );
    tmux(
        &tmux_socket,
        &["new-session", "-d", "-x", "200", "-y", "30", &line],
    );
    let _kill = scopeguard(tmux_socket.clone());
    let screen = || tmux(&tmux_socket, &["capture-pane", "-p", "-J"]);
    wait_until(Duration::from_secs(15), "the shell's banner", || async {
        screen().contains("lanes: in booking").then_some(())
    })
    .await;
    tmux(
        &tmux_socket,
        &[
            "send-keys",
            "echo \"mask=$CUDA_VISIBLE_DEVICES uid=$(id -u) job=$LANES_JOB_ID\"; sleep 1000 & echo \"child=$!\"",
            "Enter",
        ],
    );
    let shown = wait_until(Duration::from_secs(10), "the shell's answers", || async {
        // The typed line shows "child=$!" at once; the answer is a line of its own.
        let text = screen();
        let answered = answer(&text, "child=").is_some_and(|pid| pid.parse::<u32>().is_ok());
        answered.then_some(text)
    })
    .await;
    assert!(
        shown.contains(&format!("in booking #{}", booking.id)),
        "{shown}"
    );
    let expected_uid = nix::unistd::User::from_name(MEMBER)
        .unwrap()
        .unwrap()
        .uid
        .as_raw();
    let mask_line = answer(&shown, "mask=").unwrap_or_default();
    assert!(
        mask_line.starts_with(&format!("{} uid={expected_uid} job=", gpus[0].info.uuid)),
        "{shown}"
    );
    let child: u32 = answer(&shown, "child=")
        .and_then(|p| p.parse().ok())
        .expect("the sleeper's pid");
    assert!(alive(child));

    // A running job of the booking, named shell, behind the wall, with the sleeper in its
    // cgroup; the audit log says who opened it.
    let job_id: i64 = mask_line
        .rsplit("job=")
        .next()
        .and_then(|j| j.trim().parse().ok())
        .expect("LANES_JOB_ID");
    let job = ada.job(job_id).await;
    assert_eq!(job.booking_id, Some(booking.id));
    assert_eq!(job.name, "shell");
    assert_eq!(job.state, JobState::Running);
    let wall = job.device_wall.clone().unwrap_or_default();
    assert!(wall.contains("its cgroup: "), "{wall}");
    let cgroup = wall
        .rsplit("its cgroup: ")
        .next()
        .unwrap()
        .trim_end_matches(')');
    let of_child = std::fs::read_to_string(format!("/proc/{child}/cgroup")).unwrap();
    assert!(of_child.contains(cgroup), "{of_child} lacks {cgroup}");
    let admin = app.sign_up("admin", Role::Admin).await;
    let audit = app
        .client_with(&admin)
        .audit(&Default::default())
        .await
        .unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "job.shell" && a.actor.as_deref() == Some(MEMBER)),
        "{audit:?}"
    );

    assert!(job.is_shell(), "{:?}", job.started_in);

    // A second shell in the same booking, left with `exit`: it ends as exited (Lanes did not
    // start it, so it has no status of it), not as a failure.
    let second_socket = place.dir.path().join("tmux2");
    tmux(
        &second_socket,
        &["new-session", "-d", "-x", "200", "-y", "30", &line],
    );
    let _kill_second = scopeguard(second_socket.clone());
    wait_until(Duration::from_secs(15), "the second shell", || async {
        tmux(&second_socket, &["capture-pane", "-p", "-J"])
            .contains("lanes: in booking")
            .then_some(())
    })
    .await;
    tmux(&second_socket, &["send-keys", "exit", "Enter"]);
    let second = wait_until(Duration::from_secs(15), "the second shell ends", || async {
        let jobs = ada.client().jobs(&Default::default()).await.ok()?;
        jobs.into_iter()
            .find(|j| j.id != job_id && j.state.is_over())
    })
    .await;
    assert_eq!(second.state, JobState::Exited, "{second:?}");
    assert!(second.is_shell());
    // Issue 69, item 3: left, which is how a shell ends, never "failed" nor "re-adopted".
    assert_eq!(second.note, Some(JobNote::ShellLeft), "{second:?}");
    assert_eq!(second.standing(), Standing::Completed, "{second:?}");
    assert!(alive(child), "the first shell's sleeper lives on");

    // The booking is given back: the shell and its sleeper end with it.
    ada.client().withdraw_booking(booking.id).await.unwrap();
    wait_until(Duration::from_secs(15), "the sleeper dies", || async {
        (!alive(child)).then_some(())
    })
    .await;
    let ended = ada.finished(job_id, 15).await;
    assert!(ended.state.is_over(), "{ended:?}");
}

#[tokio::test]
async fn a_shell_is_refused_to_root_to_strangers_and_in_someone_elses_booking() {
    let Some(place) = Place::ready() else {
        return;
    };
    let app = place.app(2, |_| {}).await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    app.sign_up(OTHER, Role::User).await;
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 600).await;
    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // Root: never, whatever it asks.
    let out = place
        .shell_as(None, &["--booking", &booking.id.to_string()])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("never as root"), "{}", text(&out));
    // An account no member has.
    let out = place.shell_as(Some("nobody"), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no Lanes member has the Unix account nobody"),
        "{}",
        text(&out)
    );
    // Another member asking for Ada's booking learns nothing of it.
    let out = place
        .shell_as(Some(OTHER), &["--booking", &booking.id.to_string()])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("you have no booking #{}", booking.id)),
        "{}",
        text(&out)
    );
    // ... and without one of their own on this node, is told to book.
    let out = place.shell_as(Some(OTHER), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no active booking on testnode"),
        "{}",
        text(&out)
    );
    // No Lanes at the socket: unreachable (3), saying where it looked.
    let out = std::process::Command::new(place.lanes())
        .args(["shell", "--socket", "/nonexistent/shell.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("/nonexistent/shell.sock"),
        "{}",
        text(&out)
    );
    // Nothing was recorded for any of them.
    let jobs = ada.client().jobs(&Default::default()).await.unwrap();
    assert!(jobs.is_empty(), "{jobs:?}");
}

// Issue 68, item 3 ─ A flood of the socket (0666: every local account may knock) holds a few
// descriptors of its account's, never the server's, and another account is answered as ever.
#[tokio::test]
async fn a_flood_of_the_shell_socket_is_refused_at_the_door_and_other_accounts_still_get_in() {
    let Some(place) = Place::ready() else {
        return;
    };
    let app = place.app(1, |_| {}).await;
    app.sign_up(OTHER, Role::User).await;
    // Forty silent connections from one account (root, here): four are held while they may
    // still speak, the others are told so and closed at once.
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(
            tokio::net::UnixStream::connect(place.socket())
                .await
                .unwrap(),
        );
    }
    // What the door said at once is there to read well within its 2 s wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refused = 0;
    for stream in &held {
        let mut answer = [0u8; 512];
        if let Ok(n) = stream.try_read(&mut answer) {
            let answer = String::from_utf8_lossy(&answer[..n]);
            assert!(
                answer.contains("too many lanes shell requests at once"),
                "{answer}"
            );
            refused += 1;
        }
    }
    assert_eq!(refused, 36, "four held, the rest refused at once");
    // Meanwhile another account's request is read and answered in full.
    let out = place.shell_as(Some(OTHER), &[]).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no active booking on testnode"), "{said}");
    // The silent ones are let go within the door's short wait.
    for stream in &mut held {
        let mut answer = String::new();
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_string(stream, &mut answer),
        )
        .await
        .expect("closed within the wait")
        .unwrap();
        // (Those refused at once were read above.)
        assert!(
            answer.is_empty() || answer.contains("no request within 2 s"),
            "{answer}"
        );
    }
}

// Issue 68, item 8 ─ One process joins once, and an account opens shells at a bounded rate.
#[tokio::test]
async fn a_process_joins_one_booking_once_and_an_account_opens_shells_at_a_bounded_rate() {
    let Some(place) = Place::ready() else {
        return;
    };
    let app = place.app(1, |_| {}).await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let gpus = cards(&app).await;
    ada.book(&[gpus[0].info.uuid.clone()], 600).await;
    // One process asking twice: in once, then told it is in already.
    let twice = "import socket, sys\n\
        for _ in range(2):\n\
        \x20   s = socket.socket(socket.AF_UNIX)\n\
        \x20   s.connect(sys.argv[1])\n\
        \x20   s.sendall(b'{}\\n')\n\
        \x20   print(s.makefile().readline().strip())\n";
    let out = tokio::process::Command::new("runuser")
        .args(["-u", MEMBER, "--", "python3", "-c", twice])
        .arg(place.socket())
        .output()
        .await
        .unwrap();
    let answers = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = answers.lines().collect();
    assert_eq!(lines.len(), 2, "{answers}");
    assert!(lines[0].contains("\"joined\""), "{answers}");
    assert!(lines[1].contains("already inside a Lanes job"), "{answers}");
    // New processes, one after another: a burst of ten requests (the two above were two),
    // then one more each 6 s; whatever time the machine takes, the account is refused long
    // before a flood's thousands.
    let mut let_in = 0;
    let mut refused = false;
    for _ in 0..20 {
        let out = place.shell_as(Some(MEMBER), &[]).await;
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        if said.contains("too many shells opened lately") {
            refused = true;
            break;
        }
        assert!(out.status.success(), "{said}");
        let_in += 1;
    }
    assert!(refused, "twenty shells in a row were let in");
    assert!(let_in >= 8, "only {let_in} let in");
    let shells = ada.client().jobs(&Default::default()).await.unwrap();
    assert_eq!(
        shells.len(),
        1 + let_in,
        "one job per shell let in, none refused"
    );
}

#[tokio::test]
async fn a_shell_in_a_lending_booking_takes_its_cards_back() {
    let Some(place) = Place::ready() else {
        return;
    };
    let app = place
        .app(1, |config| {
            config.sim.background = false;
        })
        .await;
    let admin = app.client_with(&app.sign_up("admin", Role::Admin).await);
    admin
        .save_policy(&Policy {
            idle_threshold_pct: 5,
            idle_window_s: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    admin
        .save_queue_settings(&QueueSettings {
            lending_grace_s: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let ada = Session {
        app: &app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let bob = app.client_with(&app.sign_up(OTHER, Role::User).await);
    let gpus = cards(&app).await;
    let start = chrono::Utc::now();
    let mut request = booking_of(
        &[gpus[0].info.uuid.clone()],
        start,
        start + chrono::Duration::minutes(10),
    );
    request.lend = Some(true);
    let booking = ada.client().book(&request).await.unwrap();
    let borrower = bob
        .enqueue(&SubmitJob {
            project: None,
            preemptible: true,
            ..lanes_tests::queue_job(1, 600, &["sleep", "600"])
        })
        .await
        .unwrap();
    let state_of = |id: i64| {
        let bob = &bob;
        async move {
            let view = bob.queue().await.ok()?;
            view.jobs.into_iter().find(|j| j.id == id)
        }
    };
    wait_until(Duration::from_secs(20), "the job to borrow", || async {
        state_of(borrower.id)
            .await
            .filter(|j| j.state == QueueState::Running && j.borrowed_from == Some(booking.id))
    })
    .await;
    // Ada opens a shell in her booking: the borrower is told and goes back to the queue.
    let out = place
        .shell_as(
            Some(MEMBER),
            &["--booking", &booking.id.to_string(), "--", "true"],
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(Duration::from_secs(20), "the borrower requeued", || async {
        state_of(borrower.id)
            .await
            .filter(|j| j.state == QueueState::Requeued)
    })
    .await;
}

/// What the shell printed after `name` (the answer, not the typed line that shows `name$`),
/// wherever the prompt left it on its line.
fn answer(screen: &str, name: &str) -> Option<String> {
    screen.lines().find_map(|l| {
        let rest = &l[l.find(name)? + name.len()..];
        (!rest.starts_with('$') && !rest.starts_with('"')).then(|| rest.trim().to_string())
    })
}

/// Kills the tmux server when the test ends, however it ends.
fn scopeguard(socket: PathBuf) -> impl Drop {
    struct Kill(PathBuf);
    impl Drop for Kill {
        fn drop(&mut self) {
            tmux(&self.0, &["kill-server"]);
        }
    }
    Kill(socket)
}
