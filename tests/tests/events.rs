//! Every write that frees or takes a card says so on the event bus, and the queue runs a pass
//! for it at once: no path has to remember to wake anything. The queue's timed pass is set to
//! an hour here, so a pass seen within seconds was caused by the event.

use chrono::Utc;
use lanes_server::accounts::Role;
use lanes_server::runtime::events::{Change, Event, Listener};
use lanes_tests::{cards, ensure_unix_account, wait_until, Session, TestApp};
use lanes_types::booking::{BookingState, CreateBooking, CreateMaintenance, ExtendBooking};
use lanes_types::enforcement::Policy;
use lanes_types::queue::{QueueState, SubmitJob};
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
    let admin = app.client_with(&app.sign_up("boss", Role::Admin).await);
    let owner = member(&app, ACCOUNT).await;
    let member = owner.client();
    let gpus = cards(&app).await;
    let card = |i: usize| gpus[i].info.uuid.clone();
    let slot = |from_h: i64, card: String| {
        let start = Utc::now() + chrono::Duration::hours(from_h);
        (vec![card], start, start + chrono::Duration::hours(1))
    };

    // Create, extend, release.
    let booking = emits_and_queue_looks(&app, Change::BookingCreated, || async {
        owner.book(&[card(0)], 600).await
    })
    .await;
    emits_and_queue_looks(&app, Change::BookingExtended, || async {
        let end = booking.end + chrono::Duration::seconds(60);
        member
            .extend_booking(booking.id, &ExtendBooking { end })
            .await
            .unwrap();
    })
    .await;
    emits_and_queue_looks(&app, Change::BookingReleased, || async {
        let released = member.withdraw_booking(booking.id).await.unwrap();
        assert_eq!(released.state, BookingState::Released);
    })
    .await;

    // Cancel a booking that has not started.
    let (gpus1, start, end) = slot(2, card(1));
    let later = member
        .book(&CreateBooking {
            project: None,
            gpus: Some(gpus1),
            count: None,
            start,
            end,
            note: String::new(),
            user: None,
            lend: None,
        })
        .await
        .unwrap();
    emits_and_queue_looks(&app, Change::BookingCancelled, || async {
        let cancelled = member.withdraw_booking(later.id).await.unwrap();
        assert_eq!(cancelled.state, BookingState::Cancelled);
    })
    .await;

    // Maintenance, made and ended.
    let (gpus1, start, end) = slot(3, card(1));
    let block = emits_and_queue_looks(&app, Change::MaintenanceChanged, || async {
        admin
            .add_maintenance(&CreateMaintenance {
                gpus: gpus1,
                start,
                end,
                reason: "fan".into(),
            })
            .await
            .unwrap()
    })
    .await;
    emits_and_queue_looks(&app, Change::MaintenanceChanged, || async {
        admin.end_maintenance(block.id).await.unwrap();
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
        let job = member.enqueue(&submit(&["true"])).await.unwrap();
        owner.finished(job.id, 10).await;
    })
    .await;
}

fn submit(argv: &[&str]) -> SubmitJob {
    lanes_tests::queue_job(1, 60, argv)
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
    admin
        .client()
        .save_policy(&Policy {
            idle_window_s: 1,
            idle_release: true,
            idle_release_grace_s: 1,
            ..Policy::default()
        })
        .await
        .unwrap();
    // Every card booked by someone who leaves them idle; a queue job waits for one.
    let uuids: Vec<String> = gpus.iter().map(|g| g.info.uuid.clone()).collect();
    let idle = admin.book(&uuids, 3_600).await;
    let job = owner
        .client()
        .enqueue(&submit(&["sleep", "30"]))
        .await
        .unwrap();
    assert_eq!(job.state, QueueState::Pending);
    let mut listener = app.hooks.events.subscribe();
    // The enforcer releases the idle booking after its window and grace...
    heard(&mut listener, Change::IdleReleased).await;
    // ...and the job starts at once, not at the next timed pass an hour away.
    wait_until(SOON, "the waiting job starts", || async {
        let job = owner.job(job.id).await;
        (job.booking_id.is_some() && job.booking_id != Some(idle.id)).then_some(())
    })
    .await;
}
