//! Enforcement against the real server on a simulated node (background jobs off, so the cards
//! hold only what the test puts there): the watchdog reports an injected unbooked process and,
//! under `terminate`, ends it after the grace period; a Lanes job's process and a booking
//! holder's own process are never reported; webhooks arrive, retried after a failure; idle
//! bookings are marked and, when the policy says so, released.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_unix_account, refusal, refused, wait_until, Session, TestApp};
use lanes_types::booking::BookingState;
use lanes_types::enforcement::{Policy, Violation, ViolationAction, WatchdogMode};
use lanes_types::job::Job;
use lanes_types::query::{InjectProcess, ViolationQuery};
use lanes_types::{GpuState, ProcessLane};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";

async fn app() -> TestApp {
    TestApp::spawn_configured(3, |config| config.sim.background = false).await
}

async fn admin(app: &TestApp) -> Session<'_> {
    Session {
        app,
        cookie: app.sign_up("boss", Role::Admin).await,
    }
}

async fn set_policy(admin: &Session<'_>, policy: &Policy) {
    admin
        .client()
        .save_policy(policy)
        .await
        .expect("the admin sets the policy");
}

async fn inject(admin: &Session<'_>, gpu: &str, user: &str) -> u32 {
    let process = InjectProcess {
        command: "python".into(),
        ..InjectProcess::new(gpu, user)
    };
    admin
        .client()
        .inject_process(&process)
        .await
        .expect("the process is injected")
        .pid
}

async fn violations(who: &Session<'_>) -> Vec<Violation> {
    who.client()
        .violations(&ViolationQuery::default())
        .await
        .expect("violations are listed")
}

/// [`wait_until`] for up to `seconds`.
async fn eventually<T, F, Fut>(seconds: u64, what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_until(Duration::from_secs(seconds), what, probe).await
}

/// The lane the dashboard shows for `pid` on the card at `pos`, once the watchdog has judged it.
async fn lane(app: &TestApp, pos: usize, pid: u32) -> Option<ProcessLane> {
    let gpus: Vec<GpuState> = cards(app).await;
    gpus[pos]
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.lane)
}

#[tokio::test]
async fn an_unbooked_process_is_reported_and_terminated_while_jobs_and_holders_are_left_alone() {
    ensure_unix_account(ACCOUNT);
    let app = app().await;
    let boss = admin(&app).await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let (card0, card1) = (gpus[0].info.uuid.clone(), gpus[1].info.uuid.clone());

    // A Lanes job on card 1, and the booking holder's own process beside it.
    let booking = owner.book(std::slice::from_ref(&card1), 600).await;
    let job = owner.submit(booking.id, &["sleep", "30"]).await;
    let running: Job = eventually(10, "the job starts", || async {
        let j = owner.job(job.id).await;
        j.pid.is_some().then_some(j)
    })
    .await;
    let job_pid = running.pid.unwrap() as u32;
    let holders_own = inject(&boss, &card1, ACCOUNT).await;
    // Someone else on card 0, which nobody booked.
    let intruder = inject(&boss, &card0, "mallory").await;

    assert_eq!(
        eventually(10, "the job's process is judged", || lane(&app, 1, job_pid)).await,
        ProcessLane::Job { id: job.id }
    );
    assert_eq!(
        eventually(10, "the holder's process is judged", || lane(
            &app,
            1,
            holders_own
        ))
        .await,
        ProcessLane::Booked
    );
    assert_eq!(
        eventually(10, "the intruder is judged", || lane(&app, 0, intruder)).await,
        ProcessLane::Unbooked
    );
    let found = violations(&boss).await;
    assert_eq!(found.len(), 1, "only the intruder: {found:?}");
    let v = &found[0];
    assert_eq!(
        (v.pid, v.gpu_uuid.as_str(), v.unix_user.as_deref()),
        (intruder, card0.as_str(), Some("mallory"))
    );
    assert_eq!(
        (v.action, v.ended, v.command.as_deref()),
        (ViolationAction::Observed, None, Some("python"))
    );
    // A member sees only their own violations: none.
    let mine = violations(&owner).await;
    assert!(mine.is_empty(), "{mine:?}");

    // Under `terminate` with a 1 s grace: SIGTERM once the grace has passed, and it is gone.
    let terminate = Policy {
        watchdog: WatchdogMode::Terminate,
        violation_grace_s: 1,
        ..Policy::default()
    };
    set_policy(&boss, &terminate).await;
    let ended = eventually(10, "the intruder is ended", || async {
        let v = violations(&boss)
            .await
            .into_iter()
            .find(|v| v.pid == intruder)?;
        v.ended.is_some().then_some(v)
    })
    .await;
    assert_eq!(ended.action, ViolationAction::Terminated);
    let lived = (ended.ended.unwrap() - ended.first_seen).num_milliseconds();
    assert!(
        (1_000..3_000).contains(&lived),
        "ended {lived} ms after it was first seen, grace 1 s"
    );
    assert!(cards(&app).await[0].processes.is_empty());
    // The job and the holder's process were never touched, and never reported.
    let all = violations(&boss).await;
    assert!(
        all.iter().all(|v| v.pid == intruder),
        "only the intruder: {all:?}"
    );
    assert_eq!(owner.job(job.id).await.state.as_str(), "running");
    assert!(cards(&app).await[1]
        .processes
        .iter()
        .any(|p| p.pid == holders_own));
    let peak = owner.job(job.id).await.peak_memory_bytes;
    assert!(
        peak.is_some_and(|b| b > 0),
        "peak memory recorded: {peak:?}"
    );
    app.stop().await;
}

/// A webhook receiver that answers 500 to its first `failures` requests, then 200.
#[derive(Clone, Default)]
struct Receiver {
    bodies: Arc<Mutex<Vec<Value>>>,
    failures: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start(failures: usize) -> (Self, String) {
        let receiver = Receiver::default();
        *receiver.failures.lock().unwrap() = failures;
        async fn hook(State(r): State<Receiver>, Json(body): Json<Value>) -> StatusCode {
            r.bodies.lock().unwrap().push(body);
            let mut failures = r.failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::OK
            }
        }
        let router = Router::new()
            .route("/hook", post(hook))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (receiver, url)
    }

    fn events(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn notifications_reach_the_webhook_and_a_failed_delivery_is_retried() {
    let app = app().await;
    let boss = admin(&app).await;
    let (receiver, url) = Receiver::start(1).await;
    set_policy(
        &boss,
        &Policy {
            watchdog: WatchdogMode::Warn,
            webhook_url: Some(url),
            ..Policy::default()
        },
    )
    .await;
    let gpus = cards(&app).await;
    let pid = inject(&boss, &gpus[2].info.uuid, "mallory").await;
    let deliveries = eventually(10, "the violation is delivered twice", || async {
        let got: Vec<Value> = receiver
            .events()
            .into_iter()
            .filter(|e| e["event"] == "violation")
            .collect();
        (got.len() >= 2).then_some(got)
    })
    .await;
    // The first attempt got a 500; the retry carries the same notice.
    assert_eq!(deliveries[0], deliveries[1]);
    assert_eq!(deliveries[1]["pid"], pid);
    assert_eq!(deliveries[1]["user"], "mallory");
    let text = deliveries[1]["text"].as_str().unwrap();
    assert!(
        text.contains("mallory runs python") && text.contains("without a booking"),
        "{text}"
    );
    let warned = violations(&boss).await;
    assert_eq!(warned[0].action, ViolationAction::Warned);
    app.stop().await;
}

#[tokio::test]
async fn an_idle_booking_is_marked_then_released_when_the_policy_says_so() {
    let app = app().await;
    let boss = admin(&app).await;
    let (receiver, url) = Receiver::start(0).await;
    set_policy(
        &boss,
        &Policy {
            idle_window_s: 1,
            idle_release: true,
            idle_release_grace_s: 1,
            webhook_url: Some(url),
            ..Policy::default()
        },
    )
    .await;
    let gpus = cards(&app).await;
    let booking = boss.book(&[gpus[0].info.uuid.clone()], 600).await;
    let fetch = || async { boss.client().booking(booking.id).await.unwrap() };
    let idle = eventually(10, "the booking is found idle", || async {
        let b = fetch().await;
        b.idle_since.is_some().then_some(b)
    })
    .await;
    // Not before the window has passed.
    assert!(idle.idle_since.unwrap() - booking.start >= chrono::Duration::seconds(1));
    let idle_card = eventually(5, "the dashboard shows it", || async {
        cards(&app).await[0].idle_booking
    })
    .await;
    assert_eq!(idle_card, booking.id);
    let released = eventually(10, "the idle booking is released", || async {
        let b = fetch().await;
        (b.state == BookingState::Released).then_some(b)
    })
    .await;
    assert!(released.end - idle.idle_since.unwrap() >= chrono::Duration::seconds(1));
    let events = eventually(5, "idle and release are notified", || async {
        let names: Vec<String> = receiver
            .events()
            .iter()
            .map(|e| e["event"].as_str().unwrap_or_default().to_string())
            .collect();
        names
            .contains(&"booking.release".to_string())
            .then_some(names)
    })
    .await;
    assert!(events.contains(&"booking.idle".to_string()), "{events:?}");
    assert!(events.contains(&"booking.start".to_string()), "{events:?}");
    app.stop().await;
}

#[tokio::test]
async fn a_busy_booking_is_not_idle() {
    ensure_unix_account(ACCOUNT);
    let app = app().await;
    let boss = admin(&app).await;
    set_policy(
        &boss,
        &Policy {
            idle_window_s: 1,
            ..Policy::default()
        },
    )
    .await;
    let owner = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = owner.book(&[gpus[1].info.uuid.clone()], 600).await;
    let job = owner.submit(booking.id, &["sleep", "30"]).await;
    let running = wait_until(Duration::from_secs(10), "the job runs", || async {
        owner
            .job(job.id)
            .await
            .pid
            .map(|_| tokio::time::Instant::now())
    })
    .await;
    // The window is the policy's (real) second: once a whole one has passed with the job on
    // the card, the enforcer judges the next reading, and that verdict is the one read here.
    tokio::time::sleep_until(running + Duration::from_millis(1_200)).await;
    app.hooks.enforcer.run().await;
    let b = owner.client().booking(booking.id).await.unwrap();
    assert_eq!(b.idle_since, None, "a job keeps its card busy");
    app.stop().await;
}

#[tokio::test]
async fn policies_are_admin_only_and_checked() {
    let app = app().await;
    let boss = admin(&app).await;
    let admin = boss.client();
    let too_high = Policy {
        idle_threshold_pct: 101,
        ..Policy::default()
    };
    let (status, body) = refusal(admin.save_policy(&too_high).await);
    assert_eq!(status, 422, "{body:?}");
    assert!(body.message.contains("idle_threshold_pct"), "{body:?}");
    // A mode the API does not know is malformed (only a raw body can say it).
    let (status, _) = boss
        .call(
            Method::PUT,
            "/api/v1/policy",
            Some(json!({"watchdog": "nuke"})),
        )
        .await;
    assert_eq!(status, 400);
    let local_file = Policy {
        webhook_url: Some("file:///etc/passwd".into()),
        ..Policy::default()
    };
    assert_eq!(refused(admin.save_policy(&local_file).await), 422);
    let member = app.client_with(&app.sign_up("member", Role::User).await);
    assert_eq!(refused(member.policy().await), 403);
    let process = InjectProcess::new("x", "y");
    assert_eq!(refused(member.inject_process(&process).await), 403);
    // Nothing half-written: the policy is still the default.
    assert_eq!(admin.policy().await.unwrap(), Policy::default());
    app.stop().await;
}

/// The simulator's background jobs (on by default, for demos) belong to made-up owners that no
/// Unix account can be (a colon in the name), are marked simulated, and are never judged: a
/// real member named like a person, as the old made-up owners were (alice, bob, …), gets no
/// violation and the admin's first dashboard has no unbooked card.
#[tokio::test]
async fn simulated_background_jobs_are_nobodys_and_never_violations() {
    let app = TestApp::spawn(8).await;
    let boss = admin(&app).await;
    let judged: Vec<GpuState> = eventually(10, "background jobs are judged", || async {
        app.hooks.enforcer.run().await;
        let gpus = cards(&app).await;
        let procs = gpus.iter().flat_map(|g| &g.processes);
        (procs.clone().count() > 0 && procs.clone().all(|p| p.lane.is_some())).then_some(gpus)
    })
    .await;
    for p in judged.iter().flat_map(|g| &g.processes) {
        let owner = p.user.as_deref().unwrap_or_default();
        assert!(
            p.simulated && owner.starts_with("sim:"),
            "a made-up owner, marked: {p:?}"
        );
        assert_eq!(p.lane, Some(ProcessLane::Simulated), "{p:?}");
    }
    app.hooks.enforcer.run().await;
    let found = violations(&boss).await;
    assert!(found.is_empty(), "no violation for scenery: {found:?}");
}
