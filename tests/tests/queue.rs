//! The job queue against the real server: a queued job starts the moment cards free up, under
//! the same mask and identity as booked jobs; it never runs into a booking; it is stopped at
//! its time limit; the concurrent-GPU quota holds it back; every waiting job says why; bad
//! submissions are refused with nothing queued; only admins change the queue's settings.

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, wait_until, Session, TestApp};
use lanes_types::booking::Booking;
use lanes_types::queue::{QueueState, QueueView, QueuedJob};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ACCOUNT: &str = "lanes-test-job";

async fn submit(session: &Session<'_>, body: Value) -> QueuedJob {
    let (status, text) = session
        .call(Method::POST, "/api/v1/queue", Some(body))
        .await;
    assert_eq!(status, 201, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn queue(session: &Session<'_>) -> QueueView {
    let (status, text) = session.call(Method::GET, "/api/v1/queue", None).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
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
        json!({"gpus": 2, "time_limit_s": 60, "argv": ["/bin/sh", "-c", "env | sort; sleep 1"],
               "name": "envdump"}),
    )
    .await;
    assert_eq!(job.state, QueueState::Pending);
    // It says why it waits and when it may start: when the booking ends.
    let waiting = until(&owner, job.id, 5, |j| j.estimated_start.is_some()).await;
    assert_eq!(
        waiting.reason.as_deref(),
        Some("needs 2 cards, 0 free for its time limit")
    );
    let expected = booking.end.timestamp();
    let estimate = waiting.estimated_start.unwrap().timestamp();
    assert!((estimate - expected).abs() <= 1, "{estimate} vs {expected}");
    assert_eq!(waiting.position, Some(1));

    // The booking is given back: the job starts at once.
    let (status, text) = other
        .call(
            Method::DELETE,
            &format!("/api/v1/bookings/{}", booking.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{text}");
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
    let (_, log) = owner
        .call(Method::GET, &format!("/api/v1/jobs/{}/log", job.id), None)
        .await;
    let mask = format!("{},{}", gpus[0].info.uuid, gpus[1].info.uuid);
    assert!(
        log.contains(&format!("CUDA_VISIBLE_DEVICES={mask}\n")),
        "{log}"
    );
    assert!(log.contains(&format!("USER={ACCOUNT}\n")), "{log}");
    // Its booking was released when it ended: the cards are free again.
    let (_, text) = owner
        .call(
            Method::GET,
            &format!("/api/v1/bookings/{}", done.booking_id.unwrap()),
            None,
        )
        .await;
    let held: Booking = serde_json::from_str(&text).unwrap();
    assert_eq!(held.state.as_str(), "released", "{held:?}");
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
    let (status, text) = other
        .call(
            Method::POST,
            "/api/v1/bookings",
            Some(json!({"gpus": [card], "start": start, "end": start + chrono::Duration::seconds(60)})),
        )
        .await;
    assert_eq!(status, 201, "{text}");
    let booking: Booking = serde_json::from_str(&text).unwrap();
    let long = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    let short = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 5, "argv": ["sleep", "1"]}),
    )
    .await;
    // The short job fits before the booking and starts; the long one waits until after it.
    until(&owner, short.id, 5, |j| j.state == QueueState::Running).await;
    let long = until(&owner, long.id, 5, |j| j.estimated_start.is_some()).await;
    assert_eq!(long.state, QueueState::Pending);
    assert!(long.estimated_start.unwrap() >= booking.end, "{long:?}");
    let done = until(&owner, short.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(done.state, QueueState::Completed, "{done:?}");
    // Still waiting: the card is free now, but not for ten minutes.
    let long = until(&owner, long.id, 5, |j| j.reason.is_some()).await;
    assert_eq!(long.state, QueueState::Pending);
    assert_eq!(
        long.reason.as_deref(),
        Some("needs 1 card, 0 free for its time limit")
    );
    app.stop().await;
}

#[tokio::test]
async fn a_queued_job_is_stopped_at_its_time_limit_and_cancel_works_in_every_state() {
    let app = TestApp::spawn_configured(2, |c| c.job_grace = Duration::from_millis(500)).await;
    let owner = member(&app).await;
    let job = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 2, "argv": ["sleep", "600"]}),
    )
    .await;
    // Running in the queue's words covers "booked, about to start": wait for the start itself.
    let running = until(&owner, job.id, 5, |j| j.started_at.is_some()).await;
    let over = until(&owner, job.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(over.state, QueueState::TimedOut, "{over:?}");
    let ran = over.ended_at.unwrap() - running.started_at.unwrap();
    assert!(ran >= chrono::Duration::seconds(2), "{ran}");

    // Cancel a running one and a waiting one (two cards, three one-card... jobs of two cards).
    let first = submit(
        &owner,
        json!({"gpus": 2, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    let second = submit(
        &owner,
        json!({"gpus": 2, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    until(&owner, first.id, 5, |j| j.state == QueueState::Running).await;
    let (status, text) = owner
        .call(
            Method::DELETE,
            &format!("/api/v1/queue/{}", second.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<QueuedJob>(&text).unwrap().state,
        QueueState::Cancelled
    );
    let (status, _) = owner
        .call(Method::DELETE, &format!("/api/v1/queue/{}", first.id), None)
        .await;
    assert_eq!(status, 200);
    let first = until(&owner, first.id, 10, |j| j.state != QueueState::Running).await;
    assert_eq!(first.state, QueueState::Cancelled, "{first:?}");
    let (status, text) = owner
        .call(Method::DELETE, &format!("/api/v1/queue/{}", first.id), None)
        .await;
    assert_eq!(status, 422, "{text}");
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
    let (status, text) = admin
        .call(
            Method::PUT,
            "/api/v1/quotas",
            Some(json!({"users": {ACCOUNT: {"max_gpus": 1}}})),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let a = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    let b = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    until(&owner, a.id, 5, |j| j.state == QueueState::Running).await;
    let b_wait = until(&owner, b.id, 5, |j| j.reason.is_some()).await;
    assert_eq!(b_wait.state, QueueState::Pending);
    assert_eq!(
        b_wait.reason.as_deref(),
        Some("over your concurrent-GPU limit (1 of 1 held during its time limit)")
    );
    // The limit is the user's: the admin's job goes ahead on a free card.
    ensure_unix_account("boss");
    let c = submit(
        &admin,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"]}),
    )
    .await;
    until(&admin, c.id, 5, |j| j.state == QueueState::Running).await;
    // When the first ends, the second starts.
    owner
        .call(Method::DELETE, &format!("/api/v1/queue/{}", a.id), None)
        .await;
    until(&owner, b.id, 10, |j| j.state == QueueState::Running).await;
    for id in [b.id, c.id] {
        admin
            .call(Method::DELETE, &format!("/api/v1/queue/{id}"), None)
            .await;
    }
    app.stop().await;
}

#[tokio::test]
async fn bad_submissions_are_refused_with_a_reason_and_nothing_is_queued() {
    let app = TestApp::spawn(2).await;
    let owner = member(&app).await;
    let cases = [
        (
            json!({"gpus": 0, "time_limit_s": 60, "argv": ["true"]}),
            422,
            "gpus must be between 1 and 2",
        ),
        (
            json!({"gpus": 3, "time_limit_s": 60, "argv": ["true"]}),
            422,
            "the pool has 2 card(s)",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 0, "argv": ["true"]}),
            422,
            "time_limit_s must be between 1",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 99_999_999, "argv": ["true"]}),
            422,
            "maximum",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 60, "argv": []}),
            422,
            "argv needs at least the command",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 60, "argv": ["true"], "min_memory_bytes": 1u64 << 50}),
            422,
            "with that much memory",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 60, "argv": ["true"], "env": {"CUDA_VISIBLE_DEVICES": "0"}}),
            422,
            "CUDA_VISIBLE_DEVICES",
        ),
        (
            json!({"gpus": 1, "time_limit_s": 60, "argv": ["true"], "priority": 9}),
            400,
            "priority",
        ),
        (json!({"gpus": "two", "argv": ["true"]}), 400, "gpus"),
    ];
    for (body, want, says) in cases {
        let (status, text) = owner
            .call(Method::POST, "/api/v1/queue", Some(body.clone()))
            .await;
        assert_eq!(status, want, "{body}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"));
        assert!(
            error["message"].as_str().unwrap_or_default().contains(says),
            "{body}: {text}"
        );
    }
    // Without an admin default, a time limit is required.
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let mut settings: Value = serde_json::from_str(
        &admin
            .call(Method::GET, "/api/v1/queue/settings", None)
            .await
            .1,
    )
    .unwrap();
    settings["default_time_limit_s"] = Value::Null;
    let (status, text) = admin
        .call(
            Method::PUT,
            "/api/v1/queue/settings",
            Some(settings.clone()),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = owner
        .call(
            Method::POST,
            "/api/v1/queue",
            Some(json!({"gpus": 1, "argv": ["true"]})),
        )
        .await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("time_limit_s is required"), "{text}");
    settings["half_life_s"] = json!(1);
    let (status, text) = admin
        .call(Method::PUT, "/api/v1/queue/settings", Some(settings))
        .await;
    assert_eq!(status, 422, "{text}");
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
    let job = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"], "name": "train"}),
    )
    .await;
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
    let (status, _) = other
        .call(Method::DELETE, &format!("/api/v1/queue/{}", job.id), None)
        .await;
    assert_eq!(status, 403);

    let shares = json!({"groups": {}, "users": {ACCOUNT: 3.0}});
    let (status, _) = other
        .call(Method::PUT, "/api/v1/shares", Some(shares.clone()))
        .await;
    assert_eq!(status, 403);
    let (status, text) = admin
        .call(Method::PUT, "/api/v1/shares", Some(shares))
        .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = admin
        .call(
            Method::PUT,
            "/api/v1/shares",
            Some(json!({"users": {"x": -1}})),
        )
        .await;
    assert_eq!(status, 422, "{text}");
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
    let waiting = submit(
        &owner,
        json!({"gpus": 1, "time_limit_s": 600, "argv": ["sleep", "600"], "name": "later"}),
    )
    .await;
    let me: Value =
        serde_json::from_str(&owner.call(Method::GET, "/api/v1/me", None).await.1).unwrap();
    let (status, text) = admin
        .call(
            Method::PATCH,
            &format!("/api/v1/users/{}", me["id"]),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let held = until(&admin, waiting.id, 5, |j| {
        j.position.is_none() && j.reason.is_some()
    })
    .await;
    assert_eq!(
        held.reason.as_deref(),
        Some("its owner's account is disabled")
    );
    admin
        .call(
            Method::DELETE,
            &format!("/api/v1/queue/{}", waiting.id),
            None,
        )
        .await;
    admin
        .call(Method::DELETE, &format!("/api/v1/queue/{}", job.id), None)
        .await;
    app.stop().await;
}

#[tokio::test]
async fn a_booking_names_its_queue_job_by_its_link_and_a_note_cannot_pretend_to_be_one() {
    let app = TestApp::spawn(2).await;
    let ada = member(&app).await;
    let gpus = cards(&app).await;
    let start = chrono::Utc::now();
    let (status, body) = ada
        .call(
            Method::POST,
            "/api/v1/bookings",
            Some(json!({
                "gpus": [gpus[1].info.uuid],
                "start": start,
                "end": start + chrono::Duration::minutes(5),
                "note": "queue job 7: pretend",
            })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let own: Booking = serde_json::from_str(&body).unwrap();
    assert_eq!(own.queue_job, None, "a note is only a note");
    let job = submit(
        &ada,
        json!({"gpus": 1, "time_limit_s": 60, "argv": ["/bin/sleep", "5"]}),
    )
    .await;
    let running = until(&ada, job.id, 10, |j| j.booking_id.is_some()).await;
    let (status, body) = ada
        .call(
            Method::GET,
            &format!("/api/v1/bookings/{}", running.booking_id.unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let held: Booking = serde_json::from_str(&body).unwrap();
    assert_eq!(held.queue_job, Some(job.id));
    let (_, body) = ada
        .call(Method::GET, &format!("/api/v1/bookings/{}", own.id), None)
        .await;
    let own: Booking = serde_json::from_str(&body).unwrap();
    assert_eq!(own.queue_job, None);
    ada.call(Method::DELETE, &format!("/api/v1/queue/{}", job.id), None)
        .await;
    app.stop().await;
}
