//! Idle booked cards lent to the queue, against the real server on a simulated node
//! (background jobs off): a preemptible job borrows an idle lending booking's card; a
//! non-preemptible job never borrows and a booking that does not lend is never lent; when the
//! holder starts work (their process appears, or they submit a job into the booking) the
//! borrower gets SIGTERM, SIGKILL after the lending grace, and waits in the queue again, charged
//! for what it used; the holder's job starts within the grace plus 5 s.

use lanes_server::accounts::Role;
use lanes_tests::{booking_of, cards, ensure_unix_account, refused, wait_until, Session, TestApp};
use lanes_types::account::UserPatch;
use lanes_types::booking::Booking;
use lanes_types::enforcement::Policy;
use lanes_types::job::JobState;
use lanes_types::query::InjectProcess;
use lanes_types::queue::{QueueSettings, QueueState, QueuedJob, SubmitJob};
use std::time::{Duration, Instant};

const BORROWER: &str = "lanes-test-job";
const HOLDER: &str = "lanes-test-holder";
/// The lending grace these tests set, in seconds.
const GRACE_S: i64 = 3;

struct World<'a> {
    admin: Session<'a>,
    holder: Session<'a>,
    borrower: Session<'a>,
    cards: Vec<String>,
}

/// Two cards; bookings idle after a second at under 5 %; a three-second lending grace.
async fn world(app: &TestApp) -> World<'_> {
    ensure_unix_account(BORROWER);
    ensure_unix_account(HOLDER);
    let admin = Session {
        app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let holder = Session {
        app,
        cookie: app.sign_up(HOLDER, Role::User).await,
    };
    let borrower = Session {
        app,
        cookie: app.sign_up(BORROWER, Role::User).await,
    };
    // The watchdog knows the holder's processes by their account.
    let me = holder.client().me().await.unwrap();
    admin
        .client()
        .update_user(
            me.id,
            &UserPatch {
                unix_user: Some(HOLDER.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    admin
        .client()
        .save_policy(&Policy {
            idle_threshold_pct: 5,
            idle_window_s: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    admin
        .client()
        .save_queue_settings(&QueueSettings {
            lending_grace_s: GRACE_S,
            ..Default::default()
        })
        .await
        .unwrap();
    let cards = cards(app).await.into_iter().map(|g| g.info.uuid).collect();
    World {
        admin,
        holder,
        borrower,
        cards,
    }
}

impl World<'_> {
    /// The holder books `card` for ten minutes, lending or not, and waits until it is idle.
    async fn idle_booking(&self, card: &str, lend: bool) -> Booking {
        let start = chrono::Utc::now();
        let mut request = booking_of(
            &[card.to_string()],
            start,
            start + chrono::Duration::minutes(10),
        );
        request.lend = Some(lend);
        let booking = self.holder.client().book(&request).await.expect("booked");
        assert_eq!(booking.lend, lend);
        let client = self.holder.client();
        wait_until(
            Duration::from_secs(10),
            "the booking to be idle",
            || async {
                let b = client.booking(booking.id).await.ok()?;
                b.idle_since.is_some().then_some(b)
            },
        )
        .await
    }

    async fn submit(&self, preemptible: bool, argv: &[&str]) -> QueuedJob {
        self.borrower
            .client()
            .enqueue(&SubmitJob {
                project: None,
                preemptible,
                ..lanes_tests::queue_job(1, 600, argv)
            })
            .await
            .expect("queued")
    }

    async fn queued(&self, id: i64) -> QueuedJob {
        let view = self.borrower.client().queue().await.unwrap();
        view.jobs.into_iter().find(|j| j.id == id).unwrap()
    }

    async fn until(
        &self,
        id: i64,
        seconds: u64,
        what: &str,
        done: impl Fn(&QueuedJob) -> bool,
    ) -> QueuedJob {
        wait_until(Duration::from_secs(seconds), what, || async {
            let job = self.queued(id).await;
            done(&job).then_some(job)
        })
        .await
    }
}

/// Says it started, and on SIGTERM says so and goes on (so only SIGKILL ends it).
const STUBBORN: &[&str] = &[
    "/bin/sh",
    "-c",
    "trap 'echo TERM received' TERM; echo started; while true; do sleep 0.1; done",
];

#[tokio::test]
async fn a_preemptible_job_borrows_an_idle_lending_booking_and_is_requeued_when_its_holder_works() {
    let app = TestApp::spawn_configured(2, |config| config.sim.background = false).await;
    let w = world(&app).await;
    let lending = w.idle_booking(&w.cards[0], true).await;
    let keeping = w.idle_booking(&w.cards[1], false).await;
    // Both cards are booked: a job that does not allow preemption waits, and so does a second
    // preemptible one (the booking that does not lend is never lent).
    let steady = w.submit(false, &["/bin/sleep", "600"]).await;
    let borrower = w.submit(true, STUBBORN).await;
    let running = w
        .until(borrower.id, 15, "the preemptible job to borrow", |j| {
            j.state == QueueState::Running
        })
        .await;
    assert_eq!(running.borrowed_from, Some(lending.id));
    assert_eq!(running.cards.len(), 1);
    assert_eq!(running.cards[0].uuid, w.cards[0]);
    let second = w.submit(true, &["/bin/sleep", "600"]).await;
    let host = w.holder.client().booking(lending.id).await.unwrap();
    assert_eq!(host.lent_to, Some(borrower.id));
    // Its output says it runs; the log is the borrower's, on the lent card only.
    let job = w.borrower.client().job(borrower.id).await.unwrap();
    let log = wait_until(Duration::from_secs(10), "the borrower's output", || async {
        let text = w
            .borrower
            .client()
            .job_log(job.id, &Default::default(), None)
            .await
            .ok()?
            .text;
        text.contains("started").then_some(text)
    })
    .await;
    assert!(log.contains("started"));
    // A pass after all this (the keeping booking has been idle since before the submissions):
    // the others still wait, and the keeping booking lends nothing.
    app.hooks.queue.run().await;
    for id in [steady.id, second.id] {
        assert_eq!(w.queued(id).await.state, QueueState::Pending, "job {id}");
    }
    assert_eq!(
        w.holder.client().booking(keeping.id).await.unwrap().lent_to,
        None
    );

    // The holder starts work on the card: their process appears there.
    w.admin
        .client()
        .inject_process(&InjectProcess {
            utilization_pct: 70,
            ..InjectProcess::new(&w.cards[0], HOLDER)
        })
        .await
        .unwrap();
    let asked = Instant::now();
    let back = w
        .until(
            borrower.id,
            20,
            "the borrower to be back in the queue",
            |j| j.state == QueueState::Requeued && j.requeues == 1,
        )
        .await;
    let took = asked.elapsed();
    // It ignored SIGTERM (it said so), so SIGKILL came after the grace.
    assert!(
        took >= Duration::from_secs(GRACE_S as u64 - 1),
        "requeued after {took:?}, before the grace was over"
    );
    assert!(back.message.contains("preempted"), "{}", back.message);
    assert!(back.preemptible && back.borrowed_from.is_none() && back.cards.is_empty());
    let log = w
        .borrower
        .client()
        .job_log(borrower.id, &Default::default(), None)
        .await
        .unwrap()
        .text;
    assert!(log.contains("TERM received"), "{log}");
    // The loan is over; the holder's booking stands, lends to nobody, and is not lent again
    // while the holder works.
    let host = w.holder.client().booking(lending.id).await.unwrap();
    assert_eq!(host.lent_to, None);
    assert_eq!(host.state, lanes_types::booking::BookingState::Active);
    app.hooks.queue.run().await;
    assert_eq!(w.queued(borrower.id).await.state, QueueState::Requeued);
    // What it used is charged to the borrower's fair share, who booked nothing.
    let view = w.borrower.client().queue().await.unwrap();
    let standing = view
        .standings
        .iter()
        .find(|s| s.username == BORROWER)
        .unwrap();
    assert!(standing.gpu_hours > 0.0, "{standing:?}");
    // Only the holder or an admin takes cards back.
    assert_eq!(
        refused(w.borrower.client().reclaim_booking(lending.id).await),
        403
    );
    w.holder.client().reclaim_booking(lending.id).await.unwrap();
    app.stop().await;
}

#[tokio::test]
async fn the_holders_job_takes_the_cards_back_and_starts_within_the_grace_plus_five_seconds() {
    // One card, booked: the borrower can only run on it lent.
    let app = TestApp::spawn_configured(1, |config| config.sim.background = false).await;
    let w = world(&app).await;
    let lending = w.idle_booking(&w.cards[0], true).await;
    let borrower = w.submit(true, STUBBORN).await;
    let running = w
        .until(borrower.id, 15, "the preemptible job to borrow", |j| {
            j.state == QueueState::Running
        })
        .await;
    assert_eq!(running.borrowed_from, Some(lending.id));
    // It got going (and set its SIGTERM trap) before the holder comes back.
    wait_until(Duration::from_secs(10), "the borrower's output", || async {
        let text = w
            .borrower
            .client()
            .job_log(borrower.id, &Default::default(), None)
            .await
            .ok()?
            .text;
        text.contains("started").then_some(())
    })
    .await;
    // The holder submits a job into the booking.
    let submitted = Instant::now();
    let mine = w
        .holder
        .submit(lending.id, &["/bin/sh", "-c", "echo mine"])
        .await;
    let started = wait_until(
        Duration::from_secs(20),
        "the holder's job to start",
        || async {
            let job = w.holder.client().job(mine.id).await.ok()?;
            job.started_at.is_some().then_some(job)
        },
    )
    .await;
    let waited = submitted.elapsed();
    // The borrower held the card until SIGKILL, so the holder's job waited for the grace, but
    // no longer than that and five seconds.
    assert!(
        waited <= Duration::from_secs(GRACE_S as u64 + 5),
        "the holder's job started {waited:?} after it was submitted"
    );
    assert!(
        waited >= Duration::from_secs(GRACE_S as u64 - 1),
        "the holder's job started {waited:?} after it was submitted: before the borrower was gone"
    );
    let back = w.queued(borrower.id).await;
    assert_eq!((back.state, back.requeues), (QueueState::Requeued, 1));
    let done = w.holder.finished(started.id, 10).await;
    assert_eq!(done.state, JobState::Exited);
    assert_eq!(w.holder.log(done.id).await, "mine\n");
    app.stop().await;
}

/// A training loop as docs/preemption.md shows it, without PyTorch: it resumes from its
/// checkpoint, counts steps, and on the notice signal saves and leaves (before SIGTERM); run
/// again after a requeue, it finishes 40 steps past where it resumed.
const TRAIN: &str = r#"import json, os, signal, sys, time
path = "state.json"
state = json.load(open(path)) if os.path.exists(path) else {"step": 0, "runs": []}
restart = int(os.environ["LANES_RESTART_COUNT"])
state["runs"].append(restart)
told = []
signal.signal(signal.SIGUSR1, lambda signum, frame: told.append(signum))
print(f"resumed at step {state['step']} restart {restart}", flush=True)
start = state["step"]
while True:
    state["step"] += 1
    time.sleep(0.05)
    if told:
        notice = json.load(open(os.environ["LANES_NOTICE_FILE"]))
        state["notice"] = [notice["reason"], notice["requeue"], notice["restart_count"]]
        with open(path + ".part", "w") as f:
            json.dump(state, f)
        os.replace(path + ".part", path)
        print(f"checkpointed at step {state['step']} for {notice['reason']}", flush=True)
        sys.exit(0)
    if restart > 0 and state["step"] >= start + 40:
        with open(path, "w") as f:
            json.dump(state, f)
        print(f"done at step {state['step']}", flush=True)
        sys.exit(0)
"#;

#[tokio::test]
async fn a_borrower_checkpoints_on_its_notice_is_requeued_and_resumes_from_its_checkpoint() {
    let app = TestApp::spawn_configured(1, |config| config.sim.background = false).await;
    let w = world(&app).await;
    let uid = ensure_unix_account(BORROWER);
    // Its working directory, its own (the account has no home).
    let work = tempfile::Builder::new()
        .prefix("lanes-train-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(work.path().join("train.py"), TRAIN).unwrap();
    for path in [work.path().to_path_buf(), work.path().join("train.py")] {
        std::os::unix::fs::chown(&path, Some(uid), None).unwrap();
    }
    let lending = w.idle_booking(&w.cards[0], true).await;
    let job = w
        .borrower
        .client()
        .enqueue(&SubmitJob {
            project: None,
            preemptible: true,
            cwd: Some(work.path().to_str().unwrap().into()),
            ..lanes_tests::queue_job(1, 600, &["/usr/bin/python3", "train.py"])
        })
        .await
        .unwrap();
    w.until(job.id, 15, "the job to borrow", |j| {
        j.state == QueueState::Running
    })
    .await;
    let log = |want: &'static str| {
        let borrower = &w.borrower;
        let id = job.id;
        async move {
            wait_until(Duration::from_secs(20), want, || async {
                let text = borrower.log(id).await;
                text.contains(want).then_some(text)
            })
            .await
        }
    };
    log("resumed at step 0 restart 0").await;
    // Let it train a little, then the holder comes back for the card.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reclaimed = Instant::now();
    w.holder
        .submit(lending.id, &["/bin/sh", "-c", "echo mine"])
        .await;
    let text = log("checkpointed at step").await;
    assert!(text.contains("for preempted"), "{text}");
    // It left on the notice, before SIGTERM (its lending grace less the job grace): exit 0.
    let back = w
        .until(job.id, 20, "the job back in the queue", |j| {
            j.state == QueueState::Requeued && j.requeues == 1
        })
        .await;
    assert!(
        reclaimed.elapsed() < Duration::from_secs(GRACE_S as u64),
        "requeued {:?} after the reclaim",
        reclaimed.elapsed()
    );
    assert!(
        matches!(
            back.note,
            Some(lanes_types::job::JobNote::Requeued {
                exit_code: Some(0),
                ..
            })
        ),
        "{:?}",
        back.note
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.path().join("state.json")).unwrap())
            .unwrap();
    assert_eq!(saved["notice"], serde_json::json!(["preempted", true, 0]));
    let checkpoint = saved["step"].as_u64().unwrap();
    assert!(checkpoint > 0, "{saved}");
    // Idle again, the booking lends the card again: the job resumes from its checkpoint,
    // told it is its second run, in the same directory, and finishes.
    let done = wait_until(Duration::from_secs(30), "the job to finish", || async {
        let j = w.queued(job.id).await;
        (j.state == QueueState::Completed).then_some(j)
    })
    .await;
    assert_eq!(done.requeues, 1);
    let text = w.borrower.log(job.id).await;
    assert!(
        text.contains(&format!("resumed at step {checkpoint} restart 1")),
        "{text}"
    );
    let finished: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.path().join("state.json")).unwrap())
            .unwrap();
    assert_eq!(finished["runs"], serde_json::json!([0, 1]));
    assert_eq!(finished["step"].as_u64(), Some(checkpoint + 40));
    app.stop().await;
}

#[tokio::test]
async fn a_borrower_preempted_past_the_admins_bound_ends_preempted_not_failed() {
    let app = TestApp::spawn_configured(1, |config| config.sim.background = false).await;
    let w = world(&app).await;
    w.admin
        .client()
        .save_queue_settings(&QueueSettings {
            lending_grace_s: GRACE_S,
            max_requeues: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    let lending = w.idle_booking(&w.cards[0], true).await;
    let borrower = w.submit(true, STUBBORN).await;
    w.until(borrower.id, 15, "the job to borrow", |j| {
        j.state == QueueState::Running
    })
    .await;
    w.holder.client().reclaim_booking(lending.id).await.unwrap();
    let ended = w
        .until(borrower.id, 20, "the job to end", |j| {
            j.state == QueueState::Preempted
        })
        .await;
    assert_eq!(ended.requeues, 0);
    assert!(
        matches!(
            ended.note,
            Some(lanes_types::job::JobNote::RequeueLimit {
                requeues: 0,
                limit: 0
            })
        ),
        "{:?}",
        ended.note
    );
    assert!(
        ended.message.contains("the most the admin allows (0)"),
        "{}",
        ended.message
    );
    app.stop().await;
}

#[tokio::test]
async fn a_wide_job_borrows_two_idle_bookings_and_either_holders_reclaim_takes_back_only_theirs() {
    // Two cards, each booked on its own, both lending: a two-card preemptible job fits on
    // neither alone, so it borrows both.
    let app = TestApp::spawn_configured(2, |config| config.sim.background = false).await;
    let w = world(&app).await;
    let first = w.idle_booking(&w.cards[0], true).await;
    let second = w.idle_booking(&w.cards[1], true).await;
    let job = w
        .borrower
        .client()
        .enqueue(&SubmitJob {
            project: None,
            preemptible: true,
            ..lanes_tests::queue_job(2, 600, &["/bin/sleep", "600"])
        })
        .await
        .unwrap();
    for (round, reclaimer, other) in [(1, &first, &second), (2, &second, &first)] {
        let running = w
            .until(job.id, 20, "the wide job to borrow both bookings", |j| {
                j.state == QueueState::Running
            })
            .await;
        let mut lenders = running.lenders.clone();
        lenders.sort_unstable();
        assert_eq!(lenders, [first.id, second.id], "round {round}");
        assert!(running.borrowed_from.is_some_and(|b| lenders.contains(&b)));
        assert_eq!(running.cards.len(), 2);
        for host in [first.id, second.id] {
            let b = w.holder.client().booking(host).await.unwrap();
            assert_eq!(b.lent_to, Some(job.id), "round {round}: booking {host}");
        }
        let loan = w
            .borrower
            .client()
            .job(job.id)
            .await
            .unwrap()
            .booking_id
            .unwrap();
        let loan = w.borrower.client().booking(loan).await.unwrap();
        assert_eq!(loan.lenders.len(), 2, "{loan:?}");
        let holder = w.holder.client();
        let other_in_use = holder.booking(other.id).await.unwrap().in_use_at;
        let reclaimer_in_use = holder.booking(reclaimer.id).await.unwrap().in_use_at;
        // One holder takes their card back: the job leaves both (it runs on both) and waits.
        w.holder
            .client()
            .reclaim_booking(reclaimer.id)
            .await
            .unwrap();
        let back = w
            .until(job.id, 20, "the wide job back in the queue", |j| {
                j.state == QueueState::Requeued && j.requeues == round
            })
            .await;
        assert!(back.lenders.is_empty() && back.cards.is_empty());
        // Only the reclaiming holder's booking is marked in use; the other's card is free to
        // lend again once it sits idle (its own watch, as after any loan).
        let b = w.holder.client().booking(other.id).await.unwrap();
        assert_eq!(b.in_use_at, other_in_use, "round {round}: {b:?}");
        assert_eq!(b.lent_to, None);
        let b = w.holder.client().booking(reclaimer.id).await.unwrap();
        assert!(b.in_use_at > reclaimer_in_use, "round {round}: {b:?}");
    }
    app.stop().await;
}
