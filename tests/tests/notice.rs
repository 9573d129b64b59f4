//! Notice before a stop, against the real server with its clock moved by the test: a booked job
//! is told its lead before the slot ends (the file named in LANES_NOTICE_FILE, readable by the
//! job's user alone, and the signal, which only reaches a process that catches it), is told
//! again when its booking is extended, and gets SIGTERM at the end; a job may ask for more
//! notice and another signal, within the admin's bound. (A borrower's notice at a reclaim, its
//! checkpoint and its requeue: tests/tests/lending.rs.)

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, refusal, wait_until, Session, TestApp};
use lanes_types::job::{CreateJob, Job, JobState, StopReason};
use lanes_types::notice::{NoticeRequest, NoticeSignal};
use lanes_types::queue::QueueSettings;
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";

/// Says when it starts (with its notice file and restart count), prints its notice when the
/// signal comes (USR1 or USR2), and leaves on SIGTERM.
const TOLD: &str = r#"trap 'echo "usr1: $(tr -d "\n " < "$LANES_NOTICE_FILE")"' USR1
trap 'echo "usr2: $(tr -d "\n " < "$LANES_NOTICE_FILE")"' USR2
trap 'echo got-term; exit 0' TERM
echo "started file=$LANES_NOTICE_FILE restart=$LANES_RESTART_COUNT"
if [ -e "$LANES_NOTICE_FILE" ]; then echo early; fi
while :; do sleep 0.1; done"#;

async fn said(owner: &Session<'_>, job: i64, what: &str) -> String {
    wait_until(
        Duration::from_secs(10),
        &format!("job {job} says {what}"),
        || async {
            let log = owner.log(job).await;
            log.contains(what).then_some(log)
        },
    )
    .await
}

async fn notice_of(owner: &Session<'_>, job: i64) -> Option<lanes_types::notice::JobNotice> {
    owner.job(job).await.notice
}

async fn submit(owner: &Session<'_>, booking: i64, notice: Option<NoticeRequest>) -> Job {
    owner
        .client()
        .submit_job(&CreateJob {
            notice,
            ..Session::job_request(booking, &["/bin/sh", "-c", TOLD])
        })
        .await
        .expect("submitted")
}

#[tokio::test]
async fn a_booked_job_is_told_its_lead_before_the_slot_ends_and_stopped_at_the_end() {
    let uid = ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(1).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    admin
        .client()
        .save_queue_settings(&QueueSettings {
            notice_lead_s: 120,
            ..Default::default()
        })
        .await
        .unwrap();
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[0].info.uuid.clone()], 600).await;
    let job = submit(&owner, booking.id, None).await;
    let log = said(&owner, job.id, "started").await;
    assert!(log.contains("restart=0"), "{log}");
    assert!(!log.contains("early"), "{log}");
    let file = log
        .split("file=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("LANES_NOTICE_FILE is set")
        .to_string();
    assert!(
        file.starts_with(app.notice_dir.path().to_str().unwrap()),
        "{file}"
    );
    assert_eq!(notice_of(&owner, job.id).await, None);

    // A second before the lead: nothing yet.
    let clock = &app.hooks.clock;
    clock.advance(booking.end - clock.now() - chrono::Duration::seconds(121));
    app.hooks.runner.run().await;
    assert_eq!(notice_of(&owner, job.id).await, None);
    assert!(!std::path::Path::new(&file).exists());
    // At the lead: the file, then the signal its shell traps.
    clock.advance(chrono::Duration::seconds(2));
    app.hooks.runner.run().await;
    let told = notice_of(&owner, job.id).await.expect("told");
    assert_eq!(
        (
            told.reason,
            told.stop_at,
            told.signal,
            told.requeue,
            told.restart_count
        ),
        (
            StopReason::BookingEnded,
            booking.end,
            NoticeSignal::Usr1,
            false,
            0
        )
    );
    assert_eq!(told.kill_at - told.stop_at, chrono::Duration::seconds(1));
    let log = said(&owner, job.id, "usr1: {").await;
    assert!(log.contains(r#""reason":"booking_ended""#), "{log}");
    // Its user's alone to read, in a directory nobody lists.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o600));
    let dir = std::fs::metadata(app.notice_dir.path()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o711);
    // Told once: another look sends nothing more.
    app.hooks.runner.run().await;
    assert_eq!(owner.log(job.id).await.matches("usr1:").count(), 1);

    // The holder extends the booking: the notice is withdrawn, and given again at the new
    // end's lead.
    let extended = owner
        .client()
        .extend_booking(
            booking.id,
            &lanes_types::booking::ExtendBooking {
                end: booking.end + chrono::Duration::minutes(10),
            },
        )
        .await
        .expect("extended");
    app.hooks.runner.run().await;
    wait_until(Duration::from_secs(5), "the notice withdrawn", || async {
        notice_of(&owner, job.id).await.is_none().then_some(())
    })
    .await;
    assert!(!std::path::Path::new(&file).exists());
    clock.advance(extended.end - clock.now() - chrono::Duration::seconds(119));
    app.hooks.runner.run().await;
    let again = notice_of(&owner, job.id).await.expect("told again");
    assert_eq!(again.stop_at, extended.end);
    wait_until(Duration::from_secs(10), "the second notice", || async {
        (owner.log(job.id).await.matches("usr1:").count() == 2).then_some(())
    })
    .await;

    // At the end: SIGTERM, and it leaves; its notice goes with the run.
    clock.advance(extended.end - clock.now() + chrono::Duration::milliseconds(10));
    app.hooks.runner.run().await;
    said(&owner, job.id, "got-term").await;
    let done = owner.finished(job.id, 20).await;
    assert_eq!((done.state, done.exit_code), (JobState::Exited, Some(0)));
    assert_eq!(done.message, "stopped at the end of its booking");
    wait_until(
        Duration::from_secs(5),
        "the notice directory removed",
        || async { (!std::path::Path::new(&file).parent().unwrap().exists()).then_some(()) },
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_job_asks_for_more_notice_and_another_signal_within_the_admins_bound() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(1).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    admin
        .client()
        .save_queue_settings(&QueueSettings {
            notice_lead_s: 60,
            notice_max_s: 900,
            ..Default::default()
        })
        .await
        .unwrap();
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[0].info.uuid.clone()], 3600).await;
    // More than the admin allows: refused, saying the bound.
    let greedy = owner
        .client()
        .submit_job(&CreateJob {
            notice: Some(NoticeRequest {
                lead_s: Some(1800),
                signal: None,
            }),
            ..Session::job_request(booking.id, &["/bin/true"])
        })
        .await;
    let (status, body) = refusal(greedy);
    assert_eq!(status, 422);
    assert!(body.message.contains("from 0 to 900"), "{}", body.message);
    // An unknown signal is refused by the API's schema.
    let (status, _) = owner
        .call(
            reqwest::Method::POST,
            "/api/v1/jobs",
            Some(serde_json::json!({
                "booking_id": booking.id, "argv": ["/bin/true"],
                "notice": {"signal": "SIGKILL"}
            })),
        )
        .await;
    assert!((400..500).contains(&status), "{status}");

    let asked = NoticeRequest {
        lead_s: Some(600),
        signal: Some(NoticeSignal::Usr2),
    };
    let job = submit(&owner, booking.id, Some(asked)).await;
    assert_eq!(job.notice_request, asked);
    said(&owner, job.id, "started").await;
    let clock = &app.hooks.clock;
    clock.advance(booking.end - clock.now() - chrono::Duration::seconds(601));
    app.hooks.runner.run().await;
    assert_eq!(notice_of(&owner, job.id).await, None);
    clock.advance(chrono::Duration::seconds(2));
    app.hooks.runner.run().await;
    let told = notice_of(&owner, job.id).await.expect("told");
    assert_eq!(told.signal, NoticeSignal::Usr2);
    let log = said(&owner, job.id, "usr2: {").await;
    assert!(!log.contains("usr1:"), "{log}");
    owner.client().cancel_job(job.id).await.unwrap();
    owner.finished(job.id, 20).await;
    app.stop().await;
}
