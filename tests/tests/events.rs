//! Every write that frees or takes a card says so on the event bus, and the queue runs a pass
//! for it at once: no path has to remember to wake anything. The queue's timed pass is set to
//! an hour here, so a pass seen within seconds was caused by the event.

use lanes_server::accounts::Role;
use lanes_server::events::{Change, Event, Listener};
use lanes_tests::{cards, ensure_unix_account, wait_until, Session, TestApp};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::enforcement::Policy;
use lanes_types::queue::{QueueState, QueuedJob};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";
/// Long enough that no timed pass falls inside a test.
const NO_TIMED_PASS: Duration = Duration::from_secs(3_600);
const SOON: Duration = Duration::from_secs(10);

async fn app() -> TestApp {
    TestApp::spawn_configured(2, |config| {
        config.queue_idle = NO_TIMED_PASS;
        // No simulated background load: an unused booking is idle.
        config.sim.background = false;
    })
    .await
}

/// Waits for `change` on the bus, ignoring other events.
async fn heard(listener: &mut Listener, change: Change) -> Event {
    tokio::time::timeout(SOON, async {
        loop {
            match listener.next().await {
                Some(event) if event.change() == change => return event,
                Some(_) => {}
                None => panic!("the bus closed"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {change:?} event"))
}

/// Runs `write`, then checks that it emitted `change` as a card change and that the queue ran
/// a pass after it.
async fn emits_and_queue_looks<F, Fut, T>(app: &TestApp, change: Change, write: F) -> T
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut listener = app.hooks.events.subscribe();
    let mut passes = app.hooks.queue_passes.clone();
    let before = *passes.borrow_and_update();
    let out = write().await;
    let event = heard(&mut listener, change).await;
    assert_eq!(event, Event::CardsChanged(change));
    tokio::time::timeout(SOON, passes.wait_for(|&n| n > before))
        .await
        .unwrap_or_else(|_| panic!("the queue ran no pass after {change:?}"))
        .expect("the queue is running");
    out
}

async fn member<'a>(app: &'a TestApp, name: &str) -> Session<'a> {
    Session {
        app,
        cookie: app.sign_up(name, Role::User).await,
    }
}

#[tokio::test]
async fn every_write_that_frees_or_takes_a_card_makes_the_queue_run_a_pass() {
    ensure_unix_account(ACCOUNT);
    let app = app().await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let owner = member(&app, ACCOUNT).await;
    let gpus = cards(&app).await;
    let card = |i: usize| gpus[i].info.uuid.clone();

    // Create, extend, release.
    let booking = emits_and_queue_looks(&app, Change::BookingCreated, || async {
        owner.book(&[card(0)], 600).await
    })
    .await;
    let path = format!("/api/v1/bookings/{}", booking.id);
    emits_and_queue_looks(&app, Change::BookingExtended, || async {
        let end = booking.end + chrono::Duration::seconds(60);
        let (status, body) = owner
            .call(Method::PATCH, &path, Some(json!({ "end": end })))
            .await;
        assert_eq!(status, 200, "{body}");
    })
    .await;
    emits_and_queue_looks(&app, Change::BookingReleased, || async {
        let (status, body) = owner.call(Method::DELETE, &path, None).await;
        assert_eq!(status, 200, "{body}");
    })
    .await;

    // Cancel a booking that has not started.
    emits_and_queue_looks(&app, Change::BookingCancelled, || async {
        let start = chrono::Utc::now() + chrono::Duration::hours(2);
        let (status, body) = owner
            .call(
                Method::POST,
                "/api/v1/bookings",
                Some(json!({"gpus": [card(1)], "start": start,
                            "end": start + chrono::Duration::hours(1)})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let later: Booking = serde_json::from_str(&body).unwrap();
        let (status, body) = owner
            .call(
                Method::DELETE,
                &format!("/api/v1/bookings/{}", later.id),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<Booking>(&body).unwrap().state,
            BookingState::Cancelled
        );
    })
    .await;

    // Maintenance, made and ended.
    let block: serde_json::Value =
        emits_and_queue_looks(&app, Change::MaintenanceChanged, || async {
            let start = chrono::Utc::now() + chrono::Duration::hours(3);
            let (status, body) = admin
                .call(
                    Method::POST,
                    "/api/v1/maintenance",
                    Some(json!({"gpus": [card(1)], "start": start,
                            "end": start + chrono::Duration::hours(1), "reason": "fan"})),
                )
                .await;
            assert_eq!(status, 201, "{body}");
            serde_json::from_str(&body).unwrap()
        })
        .await;
    emits_and_queue_looks(&app, Change::MaintenanceChanged, || async {
        let (status, body) = admin
            .call(
                Method::DELETE,
                &format!("/api/v1/maintenance/{}", block["id"]),
                None,
            )
            .await;
        assert_eq!(status, 204, "{body}");
    })
    .await;

    // A booked job's end.
    let booking = owner.book(&[card(0)], 600).await;
    emits_and_queue_looks(&app, Change::JobEnded, || async {
        let job = owner.submit(booking.id, &["true"]).await;
        owner.finished(job.id, 10).await;
    })
    .await;

    // A queue job's end releases its booking.
    emits_and_queue_looks(&app, Change::QueueJobReleased, || async {
        let (status, body) = owner
            .call(
                Method::POST,
                "/api/v1/queue",
                Some(json!({"gpus": 1, "time_limit_s": 60, "argv": ["true"]})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let job: QueuedJob = serde_json::from_str(&body).unwrap();
        owner.finished(job.id, 10).await;
    })
    .await;
}

#[tokio::test]
async fn an_idle_release_starts_a_waiting_job_without_waiting_for_a_timed_pass() {
    ensure_unix_account(ACCOUNT);
    let app = app().await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let owner = member(&app, ACCOUNT).await;
    let gpus = cards(&app).await;
    let (status, body) = admin
        .call(
            Method::PUT,
            "/api/v1/policy",
            Some(
                serde_json::to_value(Policy {
                    idle_window_s: 1,
                    idle_release: true,
                    idle_release_grace_s: 1,
                    ..Policy::default()
                })
                .unwrap(),
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Every card booked by someone who leaves them idle; a queue job waits for one.
    let uuids: Vec<String> = gpus.iter().map(|g| g.info.uuid.clone()).collect();
    let idle = admin.book(&uuids, 3_600).await;
    let (status, body) = owner
        .call(
            Method::POST,
            "/api/v1/queue",
            Some(json!({"gpus": 1, "time_limit_s": 60, "argv": ["sleep", "30"]})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let job: QueuedJob = serde_json::from_str(&body).unwrap();
    assert_eq!(job.state, QueueState::Pending);
    let mut listener = app.hooks.events.subscribe();
    // The enforcer releases the idle booking after its window and grace...
    heard(&mut listener, Change::IdleReleased).await;
    // ...and the job starts at once, not at the next timed pass an hour away.
    wait_until(SOON, "the waiting job starts", || async {
        let (_, body) = owner
            .call(Method::GET, &format!("/api/v1/jobs/{}", job.id), None)
            .await;
        let job: lanes_types::job::Job = serde_json::from_str(&body).ok()?;
        (job.booking_id.is_some() && job.booking_id != Some(idle.id)).then_some(())
    })
    .await;
}
