//! The job queue against the real server: a queued job starts the moment cards free up, under
//! the same mask and identity as booked jobs; it never runs into a booking; it is stopped at
//! its time limit; the concurrent-GPU quota holds it back; every waiting job says why; bad
//! submissions are refused with nothing queued; only admins change the queue's settings.

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, refusal, refused, wait_until, Session, TestApp};
use lanes_types::account::UserPatch;
use lanes_types::booking::{Booking, CreateBooking, Quota, Quotas};
use lanes_types::queue::{QueueState, QueueView, QueuedJob, Shares, SubmitJob, WaitReason};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ACCOUNT: &str = "lanes-test-job";

/// `argv` for `gpus` cards for up to `limit_s` seconds.
fn work(gpus: u32, limit_s: i64, argv: &[&str]) -> SubmitJob {
    lanes_tests::queue_job(gpus, limit_s, argv)
}

/// `work` with a name.
fn named(name: &str, job: SubmitJob) -> SubmitJob {
    SubmitJob {
        project: None,
        name: Some(name.into()),
        ..job
    }
}

async fn submit(session: &Session<'_>, job: SubmitJob) -> QueuedJob {
    session
        .client()
        .enqueue(&job)
        .await
        .expect("the job is queued")
}

async fn queue(session: &Session<'_>) -> QueueView {
    session.client().queue().await.expect("the queue is shown")
}

async fn cancel(session: &Session<'_>, id: i64) -> lanes_client::Result<QueuedJob> {
    session.client().dequeue(id).await
}

/// Books `cards` for `owner` from `start` for `seconds`, with `note`.
async fn book_at(
    owner: &Session<'_>,
    cards: &[String],
    start: chrono::DateTime<chrono::Utc>,
    seconds: i64,
    note: &str,
) -> Booking {
    let end = start + chrono::Duration::seconds(seconds);
    let request = CreateBooking {
        project: None,
        note: note.into(),
        ..lanes_tests::booking_of(cards, start, end)
    };
    owner
        .client()
        .book(&request)
        .await
        .expect("the booking is made")
}

/// Waits (up to `seconds`) until the queue shows `job` satisfying `done`.
async fn until(
    session: &Session<'_>,
    job: i64,
    seconds: u64,
    done: impl Fn(&QueuedJob) -> bool,
) -> QueuedJob {
    wait_until(
        Duration::from_secs(seconds),
        &format!("queue job {job} gets there"),
        || async {
            let view = queue(session).await;
            view.jobs.into_iter().find(|j| j.id == job && done(j))
        },
    )
    .await
}

/// Whether a pass has explained the job's wait (a job submitted since the last pass waits "for
/// the next scheduling pass" until one does).
fn explained(job: &QueuedJob) -> bool {
    job.reason.is_some() && job.wait != Some(WaitReason::NextPass)
}

async fn member(app: &TestApp) -> Session<'_> {
    ensure_unix_account(ACCOUNT);
    Session {
        app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    }
}

#[tokio::test]
async fn a_queued_job_starts_within_a_second_of_its_cards_freeing_under_their_mask() {
    let app = TestApp::spawn(2).await;
    let owner = member(&app).await;
    let other = Session {
        app: &app,
        cookie: app.sign_up("booker", Role::User).await,
    };
    let gpus = cards(&app).await;
    let uuids: Vec<String> = gpus.iter().map(|g| g.info.uuid.clone()).collect();
    let booking = other.book(&uuids, 600).await;
    let job = submit(
        &owner,
        // It lasts a second, so the queue is seen showing it running on its cards.
        named(
            "envdump",
            work(2, 60, &["/bin/sh", "-c", "env | sort; sleep 1"]),
        ),
    )
    .await;
    assert_eq!(job.state, QueueState::Pending);
    // It says why it waits and when it may start: when the booking ends.
    let waiting = until(&owner, job.id, 5, |j| j.estimated_start.is_some()).await;
    assert_eq!(
        waiting.reason.as_deref(),
        Some("needs 2 cards, 0 free for its time limit")
    );
    assert_eq!(waiting.wait, Some(WaitReason::Cards { needs: 2, free: 0 }));
    let expected = booking.end.timestamp();
    let estimate = waiting.estimated_start.unwrap().timestamp();
    assert!((estimate - expected).abs() <= 1, "{estimate} vs {expected}");
    assert_eq!(waiting.position, Some(1));

    // The booking is given back: the job starts at once.
    other
        .client()
        .withdraw_booking(booking.id)
        .await
        .expect("the booking is given back");
    let freed = Instant::now();
    let running = until(&owner, job.id, 5, |j| j.state != QueueState::Pending).await;
    let waited = freed.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "started {waited:?} after the cards freed"
    );
    assert_eq!(running.cards.len(), 2, "{running:?}");

    let done = until(&owner, job.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(done.state, QueueState::Completed, "{done:?}");
    let log = owner.log(job.id).await;
    let mask = format!("{},{}", gpus[0].info.uuid, gpus[1].info.uuid);
    assert!(
        log.contains(&format!("CUDA_VISIBLE_DEVICES={mask}\n")),
        "{log}"
    );
    assert!(log.contains(&format!("USER={ACCOUNT}\n")), "{log}");
    // Its booking is released as it ends (just after its end is recorded): the cards are
    // free again.
    let held = lanes_tests::wait_until(
        Duration::from_secs(2),
        "the booking is released",
        || async {
            let held = owner
                .client()
                .booking(done.booking_id.unwrap())
                .await
                .unwrap();
            (held.state.as_str() == "released").then_some(held)
        },
    )
    .await;
    assert!(held.note.starts_with(&format!("queue job {}", job.id)));
    app.stop().await;
}

#[tokio::test]
async fn a_queued_job_never_runs_into_a_booking_and_short_work_fills_the_gap() {
    let app = TestApp::spawn(1).await;
    let owner = member(&app).await;
    let other = Session {
        app: &app,
        cookie: app.sign_up("booker", Role::User).await,
    };
    let card = cards(&app).await[0].info.uuid.clone();
    // The card is booked from 30 s from now, for a minute.
    let start = chrono::Utc::now() + chrono::Duration::seconds(30);
    let booking = book_at(&other, &[card], start, 60, "").await;
    let long = submit(&owner, work(1, 600, &["sleep", "600"])).await;
    let short = submit(&owner, work(1, 5, &["sleep", "1"])).await;
    // The short job fits before the booking and starts; the long one waits until after it.
    until(&owner, short.id, 5, |j| j.state == QueueState::Running).await;
    let long = until(&owner, long.id, 5, |j| j.estimated_start.is_some()).await;
    assert_eq!(long.state, QueueState::Pending);
    assert!(long.estimated_start.unwrap() >= booking.end, "{long:?}");
    let done = until(&owner, short.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(done.state, QueueState::Completed, "{done:?}");
    // Still waiting: the card is free now, but not for ten minutes.
    let long = until(&owner, long.id, 5, explained).await;
    assert_eq!(long.state, QueueState::Pending);
    assert_eq!(
        long.reason.as_deref(),
        Some("needs 1 card, 0 free for its time limit")
    );
    assert_eq!(long.wait, Some(WaitReason::Cards { needs: 1, free: 0 }));
    app.stop().await;
}

#[tokio::test]
async fn a_queued_job_is_stopped_at_its_time_limit_and_cancel_works_in_every_state() {
    let app = TestApp::spawn_configured(2, |c| c.job_grace = Duration::from_millis(500)).await;
    let owner = member(&app).await;
    let job = submit(&owner, work(1, 2, &["sleep", "600"])).await;
    // Running in the queue's words covers "booked, about to start": wait for the start itself.
    let running = until(&owner, job.id, 5, |j| j.started_at.is_some()).await;
    let over = until(&owner, job.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(over.state, QueueState::TimedOut, "{over:?}");
    // The time limit is the slot the queue booked for it: two seconds, and the job ran to its
    // end. (Measured from the process's start it is a few milliseconds less: the slot starts
    // when the queue books it, the process a moment later.)
    let slot = owner
        .client()
        .booking(over.booking_id.unwrap())
        .await
        .unwrap();
    assert_eq!(
        slot.end - slot.start,
        chrono::Duration::seconds(2),
        "{slot:?}"
    );
    assert!(
        running.started_at.unwrap() >= slot.start,
        "{running:?} {slot:?}"
    );
    assert!(over.ended_at.unwrap() >= slot.end, "{over:?} {slot:?}");

    // Cancel a running one and a waiting one (two cards, three one-card... jobs of two cards).
    let first = submit(&owner, work(2, 600, &["sleep", "600"])).await;
    let second = submit(&owner, work(2, 600, &["sleep", "600"])).await;
    until(&owner, first.id, 5, |j| j.state == QueueState::Running).await;
    let answer = cancel(&owner, second.id)
        .await
        .expect("a waiting job is cancelled");
    assert_eq!(answer.state, QueueState::Cancelled);
    cancel(&owner, first.id)
        .await
        .expect("a running job is cancelled");
    let first = until(&owner, first.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(first.state, QueueState::Cancelled, "{first:?}");
    assert_eq!(refused(cancel(&owner, first.id).await), 422, "already over");
    app.stop().await;
}

#[tokio::test]
async fn the_concurrent_gpu_quota_holds_queued_jobs_back_but_not_others() {
    let app = TestApp::spawn(3).await;
    let owner = member(&app).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let one_card = Quota {
        max_gpus: Some(1),
        ..Quota::default()
    };
    let quotas = Quotas {
        users: [(ACCOUNT.to_string(), one_card)].into(),
        ..Quotas::default()
    };
    admin.client().save_quotas(&quotas).await.unwrap();
    let a = submit(&owner, work(1, 600, &["sleep", "600"])).await;
    let b = submit(&owner, work(1, 600, &["sleep", "600"])).await;
    until(&owner, a.id, 5, |j| j.state == QueueState::Running).await;
    let b_wait = until(&owner, b.id, 5, explained).await;
    assert_eq!(b_wait.state, QueueState::Pending);
    assert_eq!(
        b_wait.reason.as_deref(),
        Some("over your concurrent-GPU limit (1 of 1 held during its time limit)")
    );
    assert_eq!(
        b_wait.wait,
        Some(WaitReason::OverLimit {
            limit: 1,
            in_use: 1
        })
    );
    // The limit is the user's: the admin's job goes ahead on a free card.
    ensure_unix_account("boss");
    let c = submit(&admin, work(1, 600, &["sleep", "600"])).await;
    until(&admin, c.id, 5, |j| j.state == QueueState::Running).await;
    // When the first ends, the second starts.
    cancel(&owner, a.id).await.unwrap();
    until(&owner, b.id, 10, |j| j.state == QueueState::Running).await;
    for id in [b.id, c.id] {
        cancel(&admin, id).await.unwrap();
    }
    app.stop().await;
}

// Issue 69, item 4: a job its member's own limit could never let start is refused at once,
// naming the limit, in the queue's forecast as at submit; nothing waits forever.
#[tokio::test]
async fn a_queue_job_wider_than_its_members_limit_is_refused_and_never_waits() {
    let app = TestApp::spawn(3).await;
    let owner = member(&app).await;
    let admin = app.client_with(&app.sign_up("boss", Role::Admin).await);
    let quotas = Quotas {
        default: Quota {
            max_gpus: Some(2),
            ..Quota::default()
        },
        ..Quotas::default()
    };
    admin.save_quotas(&quotas).await.unwrap();
    let (status, body) = refusal(owner.client().enqueue(&work(3, 600, &["true"])).await);
    assert_eq!(status, 422, "{body:?}");
    assert!(
        body.message.contains("your limit is 2 GPUs at once")
            && body.message.contains("a job of 3 GPUs could never start"),
        "{body:?}"
    );
    let forecast = owner
        .client()
        .forecast_start(&lanes_types::queue::ForecastRequest {
            gpus: 3,
            time_limit_s: Some(600),
            min_memory_bytes: None,
        })
        .await;
    assert_eq!(refused(forecast), 422);
    assert!(queue(&owner).await.jobs.is_empty());
    // Within the limit, it queues as ever.
    let fits = submit(&owner, work(2, 600, &["sleep", "600"])).await;
    cancel(&owner, fits.id).await.unwrap();
    app.stop().await;
}

#[tokio::test]
async fn bad_submissions_are_refused_with_a_reason_and_nothing_is_queued() {
    let app = TestApp::spawn(2).await;
    let owner = member(&app).await;
    let mine = owner.client();
    let huge_memory = SubmitJob {
        project: None,
        min_memory_bytes: Some(1u64 << 50),
        ..work(1, 60, &["true"])
    };
    let reserved = SubmitJob {
        project: None,
        env: Some([("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string())].into()),
        environment: None,
        ..work(1, 60, &["true"])
    };
    let refusals = [
        (work(0, 60, &["true"]), "1 to 2 GPUs: the pool has 2"),
        (work(3, 60, &["true"]), "the pool has 2"),
        (
            work(1, 0, &["true"]),
            "the time limit must be from 1 second",
        ),
        (work(1, 99_999_999, &["true"]), "maximum"),
        (work(1, 60, &[]), "argv needs at least the command"),
        (huge_memory, "with that much memory"),
        (reserved, "CUDA_VISIBLE_DEVICES"),
    ];
    for (job, says) in refusals {
        let (status, body) = refusal(mine.enqueue(&job).await);
        assert_eq!(status, 422, "{job:?}: {body:?}");
        assert!(body.message.contains(says), "{job:?}: {body:?}");
    }
    // Fields the API does not know, or of the wrong type, are malformed (raw bodies).
    let malformed = [
        (
            json!({"gpus": 1, "time_limit_s": 60, "argv": ["true"], "priority": 9}),
            "priority",
        ),
        (json!({"gpus": "two", "argv": ["true"]}), "gpus"),
    ];
    for (body, says) in malformed {
        let (status, text) = owner
            .call(Method::POST, "/api/v1/queue", Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"));
        assert!(
            error["message"].as_str().unwrap_or_default().contains(says),
            "{body}: {text}"
        );
    }
    // Without an admin default, a time limit is required.
    let admin = app.client_with(&app.sign_up("boss", Role::Admin).await);
    let mut settings = admin.queue_settings().await.unwrap();
    settings.default_time_limit_s = None;
    admin.save_queue_settings(&settings).await.unwrap();
    let no_limit = SubmitJob {
        project: None,
        time_limit_s: None,
        ..work(1, 60, &["true"])
    };
    let (status, body) = refusal(mine.enqueue(&no_limit).await);
    assert_eq!(status, 422);
    assert!(
        body.message.contains("time_limit_s is required"),
        "{body:?}"
    );
    settings.half_life_s = 1;
    assert_eq!(refused(admin.save_queue_settings(&settings).await), 422);
    assert!(queue(&owner).await.jobs.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn everyone_sees_the_queue_but_only_owners_see_commands_and_only_admins_set_shares() {
    let app = TestApp::spawn(1).await;
    let owner = member(&app).await;
    let other = Session {
        app: &app,
        cookie: app.sign_up("someone", Role::User).await,
    };
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let job = submit(&owner, named("train", work(1, 600, &["sleep", "600"]))).await;
    until(&owner, job.id, 5, |j| j.state == QueueState::Running).await;
    let seen = queue(&other).await;
    let theirs = seen.jobs.iter().find(|j| j.id == job.id).unwrap();
    assert_eq!(
        (theirs.username.as_str(), theirs.name.as_str()),
        (ACCOUNT, "train")
    );
    assert!(theirs.argv.is_empty());
    assert_eq!(queue(&owner).await.jobs[0].argv, vec!["sleep", "600"]);
    // Someone else may not cancel it.
    assert_eq!(refused(cancel(&other, job.id).await), 403);

    let shares = |user: &str, share: f64| Shares {
        groups: Default::default(),
        users: [(user.to_string(), share)].into(),
    };
    let three = shares(ACCOUNT, 3.0);
    assert_eq!(refused(other.client().save_shares(&three).await), 403);
    admin.client().save_shares(&three).await.unwrap();
    let negative = shares("x", -1.0);
    assert_eq!(refused(admin.client().save_shares(&negative).await), 422);
    // Standings follow the shares: 3 of the 5 users' shares (all in no group).
    wait_until(
        Duration::from_secs(5),
        "the standings follow the shares",
        || async {
            let view = queue(&other).await;
            // Its running job counts as use once a second has passed.
            view.standings
                .iter()
                .any(|s| s.username == ACCOUNT && (s.share - 0.6).abs() < 1e-9 && s.gpu_hours > 0.0)
                .then_some(())
        },
    )
    .await;
    // A job of an account disabled while it waits says so.
    let waiting = submit(&owner, named("later", work(1, 600, &["sleep", "600"]))).await;
    let me = owner.client().me().await.unwrap();
    let disable = UserPatch {
        enabled: Some(false),
        ..Default::default()
    };
    admin.client().update_user(me.id, &disable).await.unwrap();
    // The pass that follows the change says why (before it, the job waits for a pass).
    let held = until(&admin, waiting.id, 5, |j| {
        j.position.is_none() && j.reason.as_deref() != Some("waiting for the next scheduling pass")
    })
    .await;
    assert_eq!(
        held.reason.as_deref(),
        Some("its owner's account is disabled")
    );
    assert_eq!(held.wait, Some(WaitReason::OwnerDisabled));
    cancel(&admin, waiting.id).await.unwrap();
    cancel(&admin, job.id).await.unwrap();
    app.stop().await;
}

#[tokio::test]
async fn a_booking_names_its_queue_job_by_its_link_and_a_note_cannot_pretend_to_be_one() {
    let app = TestApp::spawn(2).await;
    let ada = member(&app).await;
    let gpus = cards(&app).await;
    let start = chrono::Utc::now();
    let own = book_at(
        &ada,
        &[gpus[1].info.uuid.clone()],
        start,
        300,
        "queue job 7: pretend",
    )
    .await;
    assert_eq!(own.queue_job, None, "a note is only a note");
    let job = submit(&ada, work(1, 60, &["/bin/sleep", "5"])).await;
    let running = until(&ada, job.id, 10, |j| j.booking_id.is_some()).await;
    let bookings = ada.client();
    let held = bookings.booking(running.booking_id.unwrap()).await.unwrap();
    assert_eq!(held.queue_job, Some(job.id));
    let own = bookings.booking(own.id).await.unwrap();
    assert_eq!(own.queue_job, None);
    cancel(&ada, job.id).await.unwrap();
    app.stop().await;
}

/// An idle server (no jobs waiting, nothing booked) runs no scheduling pass unless an event
/// or a deadline asks for one: on SQLite the queue once ran passes back to back, spinning a
/// core, because a closed channel counted as a wake-up. The readings, the enforcer's
/// judgments and the history's writes of an idle server do not wake it either; a submission
/// wakes it at once.
#[tokio::test]
async fn an_idle_server_runs_no_queue_pass_until_something_happens() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(2).await;
    let mut passes = app.hooks.queue_passes.clone();
    // Leading (at once on SQLite, once the lock is held on PostgreSQL), and a pass since:
    // every pass reads the leadership first, so none is owed to its change any more.
    let mut leading = app.hooks.leading.clone();
    leading.wait_for(|&leads| leads).await.expect("leads");
    app.hooks.queue.run().await;
    let settled = *passes.borrow_and_update();
    // Twenty readings of the idle cards, each judged by the enforcer, and the history
    // written: what an idle server does all day.
    let mut ticks = app.hooks.telemetry.subscribe_raw();
    for _ in 0..20 {
        ticks.recv().await.expect("the cards are read");
    }
    app.hooks.enforcer.run().await;
    app.hooks.history.run().await;
    let idle = *passes.borrow_and_update() - settled;
    assert_eq!(idle, 0, "passes of an idle queue over 20 readings");

    let session = member(&app).await;
    let before = *passes.borrow_and_update();
    submit(&session, work(1, 60, &["true"])).await;
    tokio::time::timeout(Duration::from_secs(5), passes.wait_for(|&n| n > before))
        .await
        .expect("a submission wakes the queue")
        .expect("the queue is running");
}

#[tokio::test]
async fn under_least_attained_service_a_long_preemptible_job_makes_way_for_a_new_one_and_resumes() {
    let app = TestApp::spawn(1).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    admin
        .client()
        .save_queue_settings(&lanes_types::queue::QueueSettings {
            policy: lanes_types::queue::Policy::Las,
            lending_grace_s: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let owner = member(&app).await;
    ensure_unix_account("lanes-test-holder");
    let other = Session {
        app: &app,
        cookie: app.sign_up("lanes-test-holder", Role::User).await,
    };
    // Says when its notice comes; ignores SIGTERM (so SIGKILL ends it).
    let long = submit(
        &owner,
        SubmitJob {
            project: None,
            preemptible: true,
            ..work(
                1,
                4 * 3_600,
                &[
                    "/bin/sh",
                    "-c",
                    "trap 'echo notice' USR1; trap 'echo term' TERM; echo run $LANES_RESTART_COUNT; while :; do sleep 0.1; done",
                ],
            )
        },
    )
    .await;
    until(&owner, long.id, 10, |j| j.state == QueueState::Running).await;
    // Two hours on the card: two GPU-hours attained, a level below a new job.
    let clock = &app.hooks.clock;
    clock.advance(chrono::Duration::hours(2));
    let short = submit(&other, work(1, 600, &["/bin/sh", "-c", "echo short"])).await;
    let back = until(&owner, long.id, 20, |j| j.state == QueueState::Requeued).await;
    assert_eq!(back.requeues, 1);
    // It says why: it made way, it was not on lent cards.
    assert!(
        matches!(
            back.note,
            Some(lanes_types::job::JobNote::Requeued { made_way: true, .. })
        ),
        "{:?}",
        back.note
    );
    assert!(
        back.message
            .contains("it made way for a job that had received less GPU time"),
        "{}",
        back.message
    );
    let log = owner.log(long.id).await;
    assert!(log.contains("notice") && log.contains("term"), "{log}");
    let done = until(&other, short.id, 20, |j| j.state == QueueState::Completed).await;
    assert_eq!(done.exit_code, Some(0));
    // It resumes, told it is its second run, with the service it received counted.
    until(&owner, long.id, 20, |j| j.state == QueueState::Running).await;
    wait_until(Duration::from_secs(10), "the second run", || async {
        owner.log(long.id).await.contains("run 1").then_some(())
    })
    .await;
    let job = owner.job(long.id).await;
    let attained = job.queue.unwrap().attained_gpu_s;
    assert!((7_200..7_300).contains(&attained), "{attained}");
    // Its preemption is in the audit log.
    let (status, audit) = admin
        .call(
            reqwest::Method::GET,
            "/api/v1/audit?action=queue.preempt",
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert!(audit.contains(&format!("job {}", long.id)), "{audit}");
    cancel(&owner, long.id).await.unwrap();
    app.stop().await;
}

#[tokio::test]
async fn a_forecast_says_when_a_job_would_start_beside_the_earliest_slot_and_queues_nothing() {
    use lanes_types::queue::ForecastRequest;
    let app = TestApp::spawn(1).await;
    let owner = member(&app).await;
    let client = owner.client();
    let ask = |gpus: u32, limit: i64| ForecastRequest {
        gpus,
        time_limit_s: Some(limit),
        min_memory_bytes: None,
    };
    // A free card and an empty queue: now, and a slot to book now.
    let f = client.forecast_start(&ask(1, 600)).await.unwrap();
    let now = chrono::Utc::now();
    let soon = now + chrono::Duration::seconds(5);
    assert!(
        f.p50.is_some_and(|t| t <= soon) && f.p90.is_some_and(|t| t <= soon),
        "{f:?}"
    );
    assert_eq!(f.history, 0);
    assert!(f.samples > 1, "{f:?}");
    assert!(
        f.earliest_booking.as_ref().is_some_and(|s| s.start <= soon),
        "{f:?}"
    );
    // The card runs a job for up to ten minutes; no job has ended, so each is taken to run to
    // its limit: the likely start, the late one and the queue's own estimate are its end.
    let running = submit(&owner, work(1, 600, &["sleep", "600"])).await;
    let running = until(&owner, running.id, 10, |j| j.started_at.is_some()).await;
    let limit_end = running.started_at.unwrap() + chrono::Duration::seconds(600);
    let f = client.forecast_start(&ask(1, 60)).await.unwrap();
    let near = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.is_some_and(|t| (t - limit_end).num_seconds().abs() <= 2)
    };
    assert!(
        near(f.p50) && near(f.p90) && near(f.by_time_limits),
        "{f:?} {limit_end}"
    );
    // Booking instead: the queue job's booking holds the card until then too.
    let slot = f.earliest_booking.expect("a slot to book");
    assert!((slot.start - limit_end).num_seconds() >= -2, "{slot:?}");
    // Nothing was queued by asking.
    assert_eq!(queue(&owner).await.jobs.len(), 1);
    // Asked as a submission is checked: more cards than the pool has, a limit past the
    // admin's maximum.
    let (status, body) = refusal(client.forecast_start(&ask(2, 60)).await);
    assert_eq!(status, 422);
    assert!(body.message.contains("GPUs: the pool has 1"), "{body:?}");
    let (status, body) = refusal(client.forecast_start(&ask(1, 400 * 86_400)).await);
    assert_eq!(status, 422);
    assert!(body.message.contains("time limit"), "{body:?}");
    app.stop().await;
}
