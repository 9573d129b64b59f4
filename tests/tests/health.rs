//! Card health end to end, with faults injected into a simulated fleet: an Xid 79 on a booked
//! card drains it, its holder is mailed a move that works once (and is refused, changing
//! nothing, when the offered card was booked meanwhile), the queue places nothing on it, and an
//! admin's clearing is audited; an application's Xid blames the process, not the card; growing
//! correctable ECC errors degrade a card without draining it; a reset that reads clean puts a
//! card back by itself; members may neither inject faults nor clear cards.

use crate::notify::{link, mailed, parse};
use chrono::Utc;
use lanes_tests::{booking_of, cards, queue_job, refused, wait_until, Session, TestApp};
use lanes_types::booking::GpuRef;
use lanes_types::health::{
    CardHealth, ClearHealth, Finding, HealthCause, HealthChangesQuery, HealthLevel, InjectFault,
    MoveCard,
};
use std::time::Duration;

/// A server of `n` simulated cards without the random background jobs.
async fn quiet(n: u32) -> TestApp {
    TestApp::spawn_configured(n, |c| c.sim.background = false).await
}

fn gpu(uuid: &str) -> GpuRef {
    GpuRef {
        node: "testnode".into(),
        uuid: uuid.into(),
    }
}

/// An admin, `boss`.
async fn admin(app: &TestApp) -> Session<'_> {
    Session {
        app,
        cookie: app
            .sign_up("boss", lanes_server::accounts::Role::Admin)
            .await,
    }
}

/// The card's health once the keeper judged it `level`.
async fn health_is(who: &Session<'_>, uuid: &str, level: HealthLevel) -> CardHealth {
    wait_until(
        Duration::from_secs(20),
        &format!("{uuid} is {}", level.as_str()),
        || async {
            let all = who.client().health_of_cards().await.unwrap();
            all.into_iter()
                .find(|c| c.gpu.uuid == uuid && c.condition.level == level)
        },
    )
    .await
}

/// The counters were read once, so growth has a baseline.
async fn counters_read(who: &Session<'_>, uuid: &str) {
    wait_until(Duration::from_secs(20), "the counters are read", || async {
        let all = who.client().health_of_cards().await.unwrap();
        all.into_iter()
            .find(|c| c.gpu.uuid == uuid && c.counters.is_some())
    })
    .await;
    // And judged: a pass after the reading.
    who.app.hooks.health.run().await;
    who.app.hooks.health.run().await;
}

#[tokio::test]
async fn an_xid_79_on_a_booked_card_drains_it_and_its_holder_moves_off_it_once() {
    let app = quiet(4).await;
    let (_mail, sink, admin, ada) = mailed(&app).await;
    let uuids: Vec<String> = cards(&app)
        .await
        .iter()
        .map(|g| g.info.uuid.clone())
        .collect();
    let (bad, offered) = (uuids[0].clone(), uuids[1].clone());
    let start = Utc::now() + chrono::Duration::seconds(30);
    let end = start + chrono::Duration::hours(2);
    let booking = ada
        .client()
        .book(&booking_of(std::slice::from_ref(&bad), start, end))
        .await
        .unwrap();

    // Members may not inject faults or clear cards.
    let fault = InjectFault::Xid {
        gpu: bad.clone(),
        xid: 79,
        pid: None,
    };
    assert_eq!(refused(ada.client().inject_fault(&fault).await), 403);
    admin.client().inject_fault(&fault).await.unwrap();
    let card = health_is(&admin, &bad, HealthLevel::Failing).await;
    assert_eq!(card.condition.findings, vec![Finding::Xid { xid: 79 }]);
    assert!(card.condition.words().contains("fallen off the bus"));
    let drain = card.drain.expect("a failing card is drained");
    // Seen in the fleet every page and `lanes status` read, and as a maintenance block.
    let fleet = ada.client().gpus().await.unwrap();
    let shown = fleet.iter().find(|g| g.info.uuid == bad).unwrap();
    assert_eq!(shown.condition.level, HealthLevel::Failing);
    let blocks = ada.client().maintenance().await.unwrap();
    assert!(blocks
        .iter()
        .any(|b| b.id == drain && b.gpus == vec![gpu(&bad)]));
    // Nobody is newly placed on it.
    let later = end + chrono::Duration::hours(1);
    let again = admin
        .client()
        .book(&booking_of(
            std::slice::from_ref(&bad),
            later,
            later + chrono::Duration::hours(1),
        ))
        .await;
    assert_eq!(refused(again), 409);

    // The holder hears of it, with a move to a healthy free card of the node.
    let raw = sink.wait_for(1, Duration::from_secs(30)).await;
    let mail = parse(&raw[0]);
    assert_eq!(
        mail.subject,
        format!(
            "[Lanes] Booking #{}: GPU 0 · testnode is failing",
            booking.id
        )
    );
    assert!(mail.text.contains("Xid 79"), "{}", mail.text);
    assert!(
        mail.text.contains("GPU 1 · testnode is healthy"),
        "{}",
        mail.text
    );
    let url = link(&mail, "Move to the healthy card");
    let anonymous = reqwest::Client::new();
    let page = anonymous
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!(
            "Move booking #{} from GPU 0 · testnode (failing) to GPU 1 · testnode",
            booking.id
        )),
        "{page}"
    );
    // A forged link does nothing.
    let forged = format!("{}{}", &url[..url.len() - 64], "ab".repeat(32));
    assert_eq!(anonymous.post(&forged).send().await.unwrap().status(), 404);

    // Someone books the offered card meanwhile: the move is refused and nothing changes.
    let taken = admin
        .client()
        .book(&booking_of(std::slice::from_ref(&offered), start, end))
        .await
        .unwrap();
    let conflict = anonymous.post(&url).send().await.unwrap();
    assert_eq!(conflict.status(), 409, "{}", conflict.text().await.unwrap());
    assert_eq!(
        ada.client().booking(booking.id).await.unwrap().gpus,
        vec![gpu(&bad)]
    );
    // Once it is free again, the same link moves the booking, once.
    admin.client().withdraw_booking(taken.id).await.unwrap();
    let moved = anonymous.post(&url).send().await.unwrap();
    assert_eq!(moved.status(), 200);
    assert!(moved.text().await.unwrap().contains(&format!(
        "Booking #{} moved to GPU 1 · testnode",
        booking.id
    )));
    assert_eq!(
        ada.client().booking(booking.id).await.unwrap().gpus,
        vec![gpu(&offered)]
    );
    assert_eq!(anonymous.post(&url).send().await.unwrap().status(), 410);
    // By hand, moving into a card someone else holds is a conflict too.
    let other = admin
        .client()
        .book(&booking_of(&[uuids[2].clone()], start, end))
        .await
        .unwrap();
    let by_hand = ada
        .client()
        .move_booking_card(
            booking.id,
            &MoveCard {
                from: gpu(&offered),
                to: gpu(&uuids[2]),
            },
        )
        .await;
    assert_eq!(refused(by_hand), 409);
    assert_eq!(
        ada.client().booking(booking.id).await.unwrap().gpus,
        vec![gpu(&offered)]
    );
    admin.client().withdraw_booking(other.id).await.unwrap();

    // The queue does not use the drained card, though it is the lowest free one.
    let job = ada
        .client()
        .enqueue(&queue_job(1, 600, &["sleep", "30"]))
        .await
        .unwrap();
    app.hooks.queue.run().await;
    let started = ada
        .client()
        .queue()
        .await
        .unwrap()
        .jobs
        .into_iter()
        .find(|j| j.id == job.id)
        .unwrap();
    assert!(!started.cards.is_empty(), "{started:?}");
    assert!(!started.cards.contains(&gpu(&bad)), "{started:?}");

    // Clearing: admins only, audited, the drain ended, on the card's timeline.
    let clear = ClearHealth {
        gpu: gpu(&bad),
        note: "reseated the card".into(),
    };
    assert_eq!(refused(ada.client().clear_card_health(&clear).await), 403);
    admin.client().clear_card_health(&clear).await.unwrap();
    health_is(&admin, &bad, HealthLevel::Healthy).await;
    assert!(!ada
        .client()
        .maintenance()
        .await
        .unwrap()
        .iter()
        .any(|b| b.id == drain));
    let audit = admin.client().audit(&Default::default()).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "health.clear"
        && a.actor.as_deref() == Some("boss")
        && a.detail.contains("reseated the card")));
    assert!(audit.iter().any(|a| a.action == "health.drain"));
    assert!(audit
        .iter()
        .any(|a| a.action == "booking.move" && a.actor.as_deref() == Some(crate::notify::MEMBER)));
    let timeline = ada
        .client()
        .health_changes(&HealthChangesQuery {
            node: Some("testnode".into()),
            uuid: Some(bad.clone()),
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(
        timeline
            .iter()
            .map(|c| (c.level, c.cause))
            .collect::<Vec<_>>(),
        vec![
            (HealthLevel::Healthy, HealthCause::Cleared),
            (HealthLevel::Failing, HealthCause::Seen)
        ]
    );
    assert_eq!(timeline[0].by.as_deref(), Some("boss"));
    // The keeper starts from the cleared state: the card stays healthy.
    app.hooks.health.run().await;
    app.hooks.health.run().await;
    health_is(&admin, &bad, HealthLevel::Healthy).await;
    app.stop().await;
}

#[tokio::test]
async fn an_application_xid_blames_the_process_and_leaves_the_card_healthy() {
    let app = quiet(2).await;
    let admin = admin(&app).await;
    let card = cards(&app).await[0].info.uuid.clone();
    let injected = admin
        .client()
        .inject_process(&lanes_types::query::InjectProcess::new(&card, "mallory"))
        .await
        .unwrap();
    app.hooks.health.run().await;
    admin
        .client()
        .inject_fault(&InjectFault::Xid {
            gpu: card.clone(),
            xid: 13,
            pid: Some(injected.pid),
        })
        .await
        .unwrap();
    let blamed = wait_until(Duration::from_secs(20), "the Xid is recorded", || async {
        let changes = admin
            .client()
            .health_changes(&Default::default())
            .await
            .unwrap();
        changes
            .into_iter()
            .find(|c| c.cause == HealthCause::Process)
    })
    .await;
    assert_eq!(blamed.findings, vec![Finding::Xid { xid: 13 }]);
    let process = blamed.process.unwrap();
    assert!(
        process.contains(&injected.pid.to_string()) && process.contains("mallory"),
        "{process}"
    );
    let now = admin.client().health_of_cards().await.unwrap();
    let shown = now.iter().find(|c| c.gpu.uuid == card).unwrap();
    assert_eq!(shown.condition.level, HealthLevel::Healthy);
    assert_eq!(shown.drain, None);
    // Counted for /metrics with the next reading of the counters.
    wait_until(Duration::from_secs(20), "the Xid is counted", || async {
        let all = admin.client().health_of_cards().await.unwrap();
        all.into_iter().find(|c| {
            c.gpu.uuid == card
                && c.counters
                    .as_ref()
                    .is_some_and(|k| k.xids.get(&13) == Some(&1))
        })
    })
    .await;
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("lanes_gpu_xid_errors_total{")
                && l.contains("xid=\"13\"")
                && l.ends_with(" 1.0")),
        "{metrics}"
    );
    assert!(metrics.contains("lanes_gpu_health_state{"), "{metrics}");
    app.stop().await;
}

#[tokio::test]
async fn growing_correctable_ecc_errors_degrade_a_card_without_draining_it() {
    let app = quiet(2).await;
    let admin = admin(&app).await;
    let card = cards(&app).await[1].info.uuid.clone();
    counters_read(&admin, &card).await;
    admin
        .client()
        .inject_fault(&InjectFault::Ecc {
            gpu: card.clone(),
            corrected: 7,
            uncorrected: 0,
        })
        .await
        .unwrap();
    let degraded = health_is(&admin, &card, HealthLevel::Degraded).await;
    assert_eq!(
        degraded.condition.findings,
        vec![Finding::CorrectableEccGrowth { added: 7 }]
    );
    assert_eq!(degraded.drain, None);
    // Still bookable.
    let start = Utc::now() + chrono::Duration::minutes(5);
    admin
        .client()
        .book(&booking_of(
            std::slice::from_ref(&card),
            start,
            start + chrono::Duration::hours(1),
        ))
        .await
        .unwrap();
    // Uncorrectable ones fail it.
    admin
        .client()
        .inject_fault(&InjectFault::Ecc {
            gpu: card.clone(),
            corrected: 0,
            uncorrected: 1,
        })
        .await
        .unwrap();
    let failing = health_is(&admin, &card, HealthLevel::Failing).await;
    assert!(failing
        .condition
        .findings
        .contains(&Finding::UncorrectableEcc { count: 1 }));
    app.stop().await;
}

#[tokio::test]
async fn a_reset_that_reads_clean_puts_a_failing_card_back_in_service_by_itself() {
    let app = quiet(2).await;
    let admin = admin(&app).await;
    let card = cards(&app).await[0].info.uuid.clone();
    counters_read(&admin, &card).await;
    let inject = |fault: InjectFault| {
        let client = admin.client();
        async move { client.inject_fault(&fault).await.unwrap() }
    };
    inject(InjectFault::RemapPending { gpu: card.clone() }).await;
    let failing = health_is(&admin, &card, HealthLevel::Failing).await;
    assert_eq!(failing.condition.findings, vec![Finding::RemapPending]);
    let drain = failing.drain.expect("drained");
    inject(InjectFault::Lost { gpu: card.clone() }).await;
    wait_until(Duration::from_secs(20), "the card is lost", || async {
        let all = admin.client().health_of_cards().await.unwrap();
        all.into_iter()
            .find(|c| c.gpu.uuid == card && c.condition.findings.contains(&Finding::Lost))
    })
    .await;
    inject(InjectFault::Reset { gpu: card.clone() }).await;
    health_is(&admin, &card, HealthLevel::Healthy).await;
    let changes = admin
        .client()
        .health_changes(&Default::default())
        .await
        .unwrap();
    assert_eq!(changes[0].cause, HealthCause::Reset);
    assert!(!admin
        .client()
        .maintenance()
        .await
        .unwrap()
        .iter()
        .any(|b| b.id == drain));
    let audit = admin.client().audit(&Default::default()).await.unwrap();
    assert!(audit
        .iter()
        .any(|a| a.action == "health.clear" && a.actor.is_none()));
    app.stop().await;
}
