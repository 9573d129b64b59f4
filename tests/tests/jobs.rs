//! Jobs against the real server (as root in CI, so jobs run as a test Unix account): a job in
//! an active booking runs under the booking's mask as its user; one that outlives its slot gets
//! SIGTERM at the end and SIGKILL after the grace period; only its owner (or an admin) sees
//! its log or cancels it.

use lanes_client::LogEvent;
use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, refusal, refused, wait_until, Session, TestApp};
use lanes_types::job::{CreateJob, JobState};
use lanes_types::query::{JobQuery, LogQuery};

/// A Unix account for jobs; the Lanes user of the same name runs as it.
const ACCOUNT: &str = "lanes-test-job";

#[tokio::test]
async fn a_job_runs_under_its_bookings_mask_as_its_user_and_its_log_shows_it() {
    let uid = ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(4).await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    // Booked in the reverse of bus order: the mask still lists them in bus order.
    let booking = owner
        .book(&[gpus[3].info.uuid.clone(), gpus[1].info.uuid.clone()], 600)
        .await;
    let job = owner
        .submit(booking.id, &["/bin/sh", "-c", "id -u; env | sort"])
        .await;
    assert_eq!(job.state, JobState::Queued);
    let done = owner.finished(job.id, 10).await;
    assert_eq!(
        (done.state, done.exit_code),
        (JobState::Exited, Some(0)),
        "{done:?}"
    );
    let log = owner.log(job.id).await;
    let mut lines = log.lines();
    assert_eq!(
        lines.next(),
        Some(uid.to_string().as_str()),
        "runs as {ACCOUNT}: {log}"
    );
    let mask = format!("{},{}", gpus[1].info.uuid, gpus[3].info.uuid);
    assert!(
        log.contains(&format!("CUDA_VISIBLE_DEVICES={mask}\n")),
        "{log}"
    );
    assert!(
        log.contains(&format!("NVIDIA_VISIBLE_DEVICES={mask}\n")),
        "{log}"
    );
    assert!(log.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID\n"), "{log}");
    assert!(log.contains(&format!("LANES_JOB_ID={}\n", job.id)), "{log}");
    if nix::unistd::Uid::effective().is_root() {
        assert_ne!(uid, 0, "never root");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_job_outliving_its_slot_gets_sigterm_at_the_end_and_sigkill_after_the_grace() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn_configured(2, |config| {
        config.job_grace = std::time::Duration::from_secs(3);
    })
    .await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[0].info.uuid.clone()], 600).await;
    // Ignores SIGTERM (after saying it got it), so only SIGKILL ends it.
    let job = owner
        .submit(
            booking.id,
            &[
                "/bin/sh",
                "-c",
                "trap 'echo got-term' TERM; echo started; while :; do sleep 0.1; done",
            ],
        )
        .await;
    let said = |what: &'static str| {
        let owner = &owner;
        async move {
            let limit = std::time::Duration::from_secs(10);
            wait_until(limit, &format!("the job says {what}"), || async {
                owner.log(job.id).await.contains(what).then_some(())
            })
            .await
        }
    };
    said("started\n").await;
    // To the slot's end: SIGTERM, which the job survives.
    let clock = &app.hooks.clock;
    clock.advance(booking.end - clock.now() + chrono::Duration::milliseconds(10));
    app.hooks.runner.run().await;
    said("got-term\n").await;
    let stopping = owner.client().job(job.id).await.unwrap();
    assert_eq!(stopping.state, JobState::Running, "{stopping:?}");
    // Two seconds into the grace, still nothing (the clock also moves with real time, so the
    // last second is left as slack); at the grace, SIGKILL.
    clock.advance(chrono::Duration::milliseconds(2_000));
    app.hooks.runner.run().await;
    let stopping = owner.client().job(job.id).await.unwrap();
    assert_eq!(stopping.state, JobState::Running, "{stopping:?}");
    clock.advance(chrono::Duration::milliseconds(1_000));
    app.hooks.runner.run().await;
    let done = owner.finished(job.id, 20).await;
    assert_eq!(
        (done.state, done.signal),
        (JobState::Killed, Some(9)),
        "{done:?}"
    );
    assert_eq!(done.message, "stopped at the end of its booking");
    let after_end = (done.ended_at.unwrap() - booking.end).num_milliseconds();
    assert!(
        (3_000..=5_000).contains(&after_end),
        "killed {after_end} ms after the slot's end"
    );
    app.stop().await;
}

#[tokio::test]
async fn only_the_owner_or_an_admin_reads_a_log_or_cancels_and_a_cancel_stops_the_job() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(2).await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let other = Session {
        app: &app,
        cookie: app.sign_up("mallory", Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[1].info.uuid.clone()], 600).await;
    let job = owner
        .submit(
            booking.id,
            &["/bin/sh", "-c", "echo secret-output; sleep 600"],
        )
        .await;
    lanes_tests::wait_until(
        std::time::Duration::from_secs(5),
        "the job runs",
        || async { (owner.job(job.id).await.state == JobState::Running).then_some(()) },
    )
    .await;
    let (mine, theirs) = (owner.client(), other.client());
    let log = LogQuery::default();
    assert_eq!(refused(theirs.job_log(job.id, &log, None).await), 403);
    assert_eq!(refused(theirs.cancel_job(job.id).await), 403);
    assert_eq!(refused(theirs.job(job.id).await), 403);
    let listed = theirs.jobs(&JobQuery::default()).await.unwrap();
    assert!(listed.is_empty(), "others' jobs are not listed: {listed:?}");
    // Submitting into someone else's booking is refused: the job would run as them.
    let into_theirs = Session::job_request(booking.id, &["true"]);
    assert_eq!(refused(theirs.submit_job(&into_theirs).await), 403);
    // Reserved variables and empty commands are refused by name.
    let reserved = CreateJob {
        env: Some([("CUDA_VISIBLE_DEVICES".to_string(), "0,1".to_string())].into()),
        environment: None,
        ..Session::job_request(booking.id, &["true"])
    };
    let (status, body) = refusal(mine.submit_job(&reserved).await);
    assert_eq!(status, 422);
    assert!(body.message.contains("CUDA_VISIBLE_DEVICES"), "{body:?}");
    let empty = Session::job_request(booking.id, &[]);
    assert_eq!(refused(mine.submit_job(&empty).await), 422);

    // Its output is written before it is cancelled (under load, its shell may not have run
    // `echo` yet when it is marked running).
    lanes_tests::wait_until(
        std::time::Duration::from_secs(10),
        "the job's output",
        || async { (owner.log(job.id).await == "secret-output\n").then_some(()) },
    )
    .await;
    mine.cancel_job(job.id).await.expect("the owner cancels");
    let done = owner.finished(job.id, 10).await;
    assert_eq!(
        (done.state, done.signal),
        (JobState::Killed, Some(15)),
        "{done:?}"
    );
    assert_eq!(done.message, "cancelled");
    assert_eq!(owner.log(job.id).await, "secret-output\n");
    assert_eq!(refused(mine.cancel_job(job.id).await), 422, "already over");
    app.stop().await;
}

#[tokio::test]
async fn the_log_tail_sends_output_as_it_is_written_and_closes_when_the_job_is_over() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(1).await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[0].info.uuid.clone()], 600).await;
    let job = owner
        .submit(
            booking.id,
            &["/bin/sh", "-c", "echo one; sleep 1; echo two"],
        )
        .await;
    let mut tail = owner
        .client()
        .follow_log(job.id, &LogQuery::default())
        .await
        .expect("the owner may follow the log");
    let mut pieces = Vec::new();
    let (code, reason) = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), tail.next()).await {
            Ok(Some(Ok(LogEvent::Output(text)))) => pieces.push(text),
            Ok(Some(Ok(LogEvent::Closed { code, reason }))) => break (code, reason),
            other => panic!("the tail ended without a close: {other:?}"),
        }
    };
    assert_eq!(pieces.concat(), "one\ntwo\n");
    assert!(
        pieces.len() >= 2,
        "sent as written, not at the end: {pieces:?}"
    );
    assert_eq!((code, reason.as_str()), (1000, "the job is over"));

    // Someone else may not follow it.
    let stranger = app.client_with(&app.viewer_cookie().await);
    let refused = stranger.follow_log(job.id, &LogQuery::default()).await;
    assert!(refused.is_err(), "a stranger's upgrade is refused");
    app.stop().await;
}

/// Zombie processes whose parent is `parent`.
fn zombies_of(parent: u32) -> Vec<String> {
    let parent = parent.to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces, so split after its ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        if fields.next() == Some("Z") && fields.next() == Some(parent.as_str()) {
            found.push(format!("{head})"));
        }
    }
    found
}

/// A job cancelled at the moment it starts (booked or queued) is stopped, every process it
/// started is reaped, and a queue job's booking is given back: a member looping
/// submit-and-cancel once left zombies for good (and so used up process ids) and, now and
/// then, a queue job's cards booked to its time limit. The server is a process of its own, so
/// that its children are its alone.
#[tokio::test]
async fn a_job_cancelled_as_it_starts_leaves_no_zombie_and_holds_no_booking() {
    ensure_unix_account(ACCOUNT);
    let tmp = tempfile::tempdir().unwrap();
    let db = lanes_tests::TestDb::fresh(tmp.path()).await;
    lanes_tests::add_user(&db.url, ACCOUNT, "zombie passphrase", Role::User).await;
    let server =
        lanes_tests::ServerProcess::start(&tmp.path().join("data"), &db.url, &["--gpus", "sim:2"])
            .await;
    let (client, _) = lanes_client::Client::new(&server.base)
        .login(ACCOUNT, "zombie passphrase")
        .await
        .expect("logged in");
    let gpus = client.gpus().await.unwrap();
    let start = chrono::Utc::now();
    let booking = client
        .book(&lanes_tests::booking_of(
            &[gpus[0].info.uuid.clone()],
            start,
            start + chrono::Duration::seconds(600),
        ))
        .await
        .expect("booked");
    for round in 0..60u64 {
        let job = client
            .submit_job(&Session::job_request(booking.id, &["sleep", "30"]))
            .await
            .expect("submitted");
        // Cancelled at once, or a moment later while the runner may be starting it.
        tokio::time::sleep(std::time::Duration::from_millis(round % 4 * 15)).await;
        let _ = client.cancel_job(job.id).await;
    }
    for round in 0..60u64 {
        let queued = client
            .enqueue(&lanes_tests::queue_job(1, 600, &["sleep", "30"]))
            .await
            .expect("queued");
        tokio::time::sleep(std::time::Duration::from_millis(round % 4 * 15)).await;
        let _ = client.dequeue(queued.id).await;
    }
    let pid = server.child.id();
    lanes_tests::wait_until(
        std::time::Duration::from_secs(30),
        "every job is over, reaped, and no queue job holds a booking",
        || async {
            let jobs = client.jobs(&JobQuery::default()).await.ok()?;
            let running = jobs.iter().filter(|j| !j.state.is_over()).count();
            let held = client
                .bookings(&lanes_types::query::BookingQuery::default())
                .await
                .ok()?
                .into_iter()
                .filter(|b| b.id != booking.id)
                .filter(|b| {
                    matches!(
                        b.state,
                        lanes_types::booking::BookingState::Active
                            | lanes_types::booking::BookingState::Upcoming
                    )
                })
                .count();
            let zombies = zombies_of(pid);
            if running == 0 && held == 0 && zombies.is_empty() {
                Some(())
            } else {
                eprintln!("{running} jobs not over, {held} bookings held, zombies {zombies:?}");
                None
            }
        },
    )
    .await;
}
