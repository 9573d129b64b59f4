//! Bookings against the real server: the rules, conflicts, quotas, cancel / release / extend,
//! maintenance, and races of many clients for the same cards.

use chrono::{DateTime, Duration, DurationRound, Utc};
use lanes_client::Client;
use lanes_server::accounts::Role;
use lanes_tests::{refusal, refused, TestApp};
use lanes_types::booking::{
    Booking, BookingState, CreateBooking, CreateMaintenance, ExtendBooking, Quota, Quotas,
};
use lanes_types::query::{AuditQuery, BookingQuery};
use serde_json::json;

type Slot = (DateTime<Utc>, DateTime<Utc>);

/// A whole hour some days from now, so slots never start in the past during a test.
fn slot_base(days: i64) -> DateTime<Utc> {
    (Utc::now() + Duration::days(days))
        .duration_trunc(Duration::hours(1))
        .unwrap()
}

fn hours(base: DateTime<Utc>, from: i64, to: i64) -> Slot {
    (base + Duration::hours(from), base + Duration::hours(to))
}

/// Named cards for a slot.
fn on(gpus: &[&String], (start, end): Slot) -> CreateBooking {
    let gpus: Vec<String> = gpus.iter().map(|g| g.to_string()).collect();
    lanes_tests::booking_of(&gpus, start, end)
}

/// Any `count` cards for a slot.
fn any(count: u32, (start, end): Slot) -> CreateBooking {
    CreateBooking {
        project: None,
        gpus: None,
        count: Some(count),
        ..lanes_tests::booking_of(&[], start, end)
    }
}

fn until(end: DateTime<Utc>) -> ExtendBooking {
    ExtendBooking { end }
}

async fn user(app: &TestApp, name: &str, role: Role) -> Client {
    app.client_with(&app.sign_up(name, role).await)
}

async fn uuids(app: &TestApp) -> Vec<String> {
    lanes_tests::cards(app)
        .await
        .into_iter()
        .map(|g| g.info.uuid)
        .collect()
}

#[tokio::test]
async fn cards_are_booked_once_per_moment_and_back_to_back_is_fine() {
    let app = TestApp::spawn(2).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let bob = user(&app, "bob", Role::User).await;
    let base = slot_base(1);

    let (s, e) = hours(base, 0, 4);
    let training = CreateBooking {
        project: None,
        note: "training".into(),
        ..on(&[&gpus[0]], (s, e))
    };
    let first = ada.book(&training).await.expect("the card is free");
    assert_eq!(first.state, BookingState::Upcoming);
    assert_eq!(first.gpus[0].uuid, gpus[0]);
    assert_eq!(first.gpus[0].node, "testnode");
    assert_eq!((first.start, first.end), (s, e));
    assert_eq!(first.username, "ada");

    let overlap = hours(base, 3, 5);
    let (status, conflict) = refusal(bob.book(&on(&[&gpus[1], &gpus[0]], overlap)).await);
    assert_eq!(status, 409, "{conflict:?}");
    assert_eq!(conflict.code, "conflict");
    assert_eq!(conflict.bookings, vec![first.id]);
    assert_eq!(conflict.gpus.len(), 1);
    assert_eq!(conflict.gpus[0].uuid, gpus[0]);

    bob.book(&on(&[&gpus[0]], hours(base, 4, 6)))
        .await
        .expect("back to back");

    // Nothing half-written: the refused two-card request left card 1 free.
    bob.book(&on(&[&gpus[1]], overlap))
        .await
        .expect("card 1 is still free");
    app.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_by_rule_and_store_nothing() {
    let app = TestApp::spawn(1).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let base = slot_base(1);
    let past = Utc::now() - Duration::hours(3);
    let hour = (base, base + Duration::hours(1));
    let nope = "GPU-nope".to_string();
    let both = CreateBooking {
        project: None,
        count: Some(1),
        ..on(&[&gpus[0]], hour)
    };
    let long_note = CreateBooking {
        project: None,
        note: "x".repeat(1001),
        ..on(&[&gpus[0]], hour)
    };
    for (request, rule) in [
        (on(&[&gpus[0]], (past, base)), "start_not_in_past"),
        (on(&[&gpus[0]], (base, base)), "end_after_start"),
        (on(&[&nope], hour), "unknown_gpu"),
        (both, "gpus_or_count"),
        (any(0, hour), "count"),
        (on(&[&gpus[0], &gpus[0]], hour), "gpus"),
        (long_note, "note_length"),
    ] {
        let (status, body) = refusal(ada.book(&request).await);
        assert_eq!(status, 422, "{request:?}: {body:?}");
        assert_eq!(body.rule.map(|r| r.as_str()), Some(rule), "{body:?}");
        assert!(!body.message.is_empty());
    }
    // What no typed request can say is malformed (raw bodies).
    let lanes_client::Credentials::Session(cookie) = ada.credentials() else {
        panic!("ada has a session");
    };
    for body in [
        json!({"gpus": [gpus[0]], "start": "tomorrow", "end": base}),
        json!({"gpus": [gpus[0]], "start": base, "end": base, "colour": "red"}),
    ] {
        let answer = app
            .call_as(
                cookie,
                reqwest::Method::POST,
                "/api/v1/bookings",
                Some(body.clone()),
            )
            .await;
        assert_eq!(answer.status(), 400, "{body}");
        let error: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(error["error"], "bad_request");
    }
    let list = ada.bookings(&BookingQuery::default()).await.unwrap();
    assert!(list.is_empty(), "{list:?}");
    app.stop().await;
}

#[tokio::test]
async fn cancel_release_and_extend_free_and_take_the_right_time() {
    let app = TestApp::spawn(2).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let bob = user(&app, "bob", Role::User).await;
    let base = slot_base(1);

    // Cancel an upcoming booking: its slot is free again.
    let slot = hours(base, 0, 2);
    let first = ada.book(&on(&[&gpus[0]], slot)).await.unwrap();
    assert_eq!(
        refused(bob.withdraw_booking(first.id).await),
        403,
        "only the owner or an admin"
    );
    let cancelled = ada.withdraw_booking(first.id).await.unwrap();
    assert_eq!(cancelled.state, BookingState::Cancelled);
    bob.book(&on(&[&gpus[0]], slot))
        .await
        .expect("the slot is free again");

    // Release an active booking early: the rest of its slot frees at once.
    let now = Utc::now();
    let running = ada
        .book(&on(&[&gpus[1]], (now, now + Duration::hours(2))))
        .await
        .unwrap();
    assert_eq!(running.state, BookingState::Active);
    let released = ada.withdraw_booking(running.id).await.unwrap();
    assert_eq!(released.state, BookingState::Released);
    assert!(released.end <= Utc::now() && released.end >= now);
    bob.book(&on(&[&gpus[1]], (Utc::now(), now + Duration::hours(2))))
        .await
        .expect("the rest of the slot is free");

    // Extend: into a free stretch yes, into another booking no, by others no.
    let mine = ada
        .book(&on(&[&gpus[1]], hours(base, 10, 12)))
        .await
        .unwrap();
    let theirs = bob
        .book(&on(&[&gpus[1]], hours(base, 14, 16)))
        .await
        .unwrap();
    let longer = ada
        .extend_booking(mine.id, &until(base + Duration::hours(14)))
        .await
        .unwrap();
    assert_eq!(longer.end, base + Duration::hours(14));
    let (status, body) = refusal(
        ada.extend_booking(mine.id, &until(base + Duration::hours(15)))
            .await,
    );
    assert_eq!(status, 409);
    assert_eq!(body.bookings, [theirs.id]);
    let (status, body) = refusal(
        ada.extend_booking(mine.id, &until(base + Duration::hours(13)))
            .await,
    );
    assert_eq!(
        (status, body.rule.map(|r| r.as_str())),
        (422, Some("extend_later"))
    );
    let by_bob = bob
        .extend_booking(mine.id, &until(base + Duration::hours(14)))
        .await;
    assert_eq!(refused(by_bob), 403);
    app.stop().await;
}

#[tokio::test]
async fn quotas_refuse_with_the_rule_and_admins_may_go_beyond_with_an_audit_line() {
    let app = TestApp::spawn(4).await;
    let gpus = uuids(&app).await;
    let admin = user(&app, "root", Role::Admin).await;
    let ada = user(&app, "ada", Role::User).await;
    let quotas = Quotas {
        default: Quota {
            max_gpus: Some(2),
            gpu_hours_per_week: Some(40.0),
            ..Quota::default()
        },
        users: [(
            "ada".to_string(),
            Quota {
                max_gpus: Some(3),
                ..Quota::default()
            },
        )]
        .into(),
        ..Quotas::default()
    };
    let saved = admin.save_quotas(&quotas).await.unwrap();
    assert_eq!(saved.users["ada"].max_gpus, Some(3));

    let base = slot_base(1);
    let slot = hours(base, 0, 4);
    let (status, body) = refusal(ada.book(&any(4, slot)).await);
    assert_eq!(status, 422, "{body:?}");
    assert_eq!(body.code, "quota_exceeded");
    assert_eq!(body.rule.map(|r| r.as_str()), Some("max_gpus"));
    assert!(
        body.message.contains("would hold 4 GPUs") && body.message.contains("your limit is 3"),
        "{}",
        body.message
    );

    ada.book(&any(3, slot)).await.expect("within ada's limit");
    // 12 GPU-hours used; 30 more would pass 40 in the week.
    let later = hours(base, 24, 34);
    let (status, body) = refusal(ada.book(&any(3, later)).await);
    assert_eq!(
        (status, body.rule.map(|r| r.as_str())),
        (422, Some("gpu_hours_per_week")),
        "{body:?}"
    );

    // An admin books beyond ada's quota for her: allowed, and the audit log says so.
    let for_ada = CreateBooking {
        project: None,
        user: Some("ada".into()),
        lend: None,
        ..any(3, later)
    };
    let booked = admin.book(&for_ada).await.expect("admins may go beyond");
    assert_eq!(booked.username, "ada");
    let audit = admin.audit(&AuditQuery::default()).await.unwrap();
    let line = audit
        .iter()
        .find(|a| a.action == "booking.create" && a.actor.as_deref() == Some("root"))
        .expect("an audit line");
    assert!(
        line.detail.contains("for ada") && line.detail.contains("beyond quota"),
        "{}",
        line.detail
    );
    // Users may not book for others.
    let for_root = CreateBooking {
        project: None,
        user: Some("root".into()),
        lend: None,
        ..on(&[&gpus[3]], hours(base, 50, 51))
    };
    assert_eq!(refused(ada.book(&for_root).await), 403);

    // The quota page's view of use.
    let uses = admin.quota_use().await.unwrap();
    let ada_use = uses.iter().find(|u| u.name == "ada").unwrap();
    assert_eq!(ada_use.limits.max_gpus, Some(3));
    assert_eq!(ada_use.upcoming, 2);
    // 12 of her own and 30 booked for her, both in the coming week.
    assert!((ada_use.gpu_hours_week - 42.0).abs() < 1e-6, "{ada_use:?}");
    // A booking past the week is upcoming, and not in the week's GPU-hours.
    let far = CreateBooking {
        project: None,
        user: Some("ada".into()),
        lend: None,
        ..any(1, hours(base, 10 * 24, 10 * 24 + 5))
    };
    admin.book(&far).await.expect("admins may book ahead");
    let uses = admin.quota_use().await.unwrap();
    let ada_use = uses.iter().find(|u| u.name == "ada").unwrap();
    assert_eq!(ada_use.upcoming, 3);
    assert!((ada_use.gpu_hours_week - 42.0).abs() < 1e-6, "{ada_use:?}");
    app.stop().await;
}

#[tokio::test]
async fn maintenance_takes_cards_out_of_service_for_its_window() {
    let app = TestApp::spawn(2).await;
    let gpus = uuids(&app).await;
    let admin = user(&app, "root", Role::Admin).await;
    let ada = user(&app, "ada", Role::User).await;
    let base = slot_base(1);
    let (s, e) = hours(base, 0, 8);
    let block = admin
        .add_maintenance(&CreateMaintenance {
            gpus: vec![gpus[0].clone()],
            start: s,
            end: e,
            reason: "fan swap".into(),
        })
        .await
        .expect("the block is added");
    let (status, body) = refusal(ada.book(&on(&[&gpus[0]], hours(base, 7, 9))).await);
    assert_eq!(status, 409);
    assert_eq!(body.maintenance, [block.id]);
    // "Any" requests avoid the card.
    let one = ada.book(&any(1, (s, e))).await.unwrap();
    assert_eq!(one.gpus[0].uuid, gpus[1]);
    assert_eq!(
        refused(ada.book(&any(1, (s, e))).await),
        409,
        "no card left"
    );
    // Maintenance over a booked card is refused until the booking is gone.
    let over_booked = CreateMaintenance {
        gpus: vec![gpus[1].clone()],
        start: s,
        end: e,
        reason: String::new(),
    };
    assert_eq!(refused(admin.add_maintenance(&over_booked).await), 409);
    admin.end_maintenance(block.id).await.unwrap();
    ada.book(&on(&[&gpus[0]], (s, e)))
        .await
        .expect("the card is back in service");
    app.stop().await;
}

/// Many clients at once for the same card and slot: exactly one wins, in every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_racing_for_one_card_get_exactly_one_booking_per_round() {
    const CLIENTS: usize = 64;
    const ROUNDS: i64 = 100;
    let app = TestApp::spawn(8).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let base = slot_base(2);
    for round in 0..ROUNDS {
        let request = on(&[&gpus[3]], hours(base, round, round + 1));
        let answers = futures::future::join_all((0..CLIENTS).map(|_| ada.book(&request))).await;
        let codes: Vec<u16> = answers
            .iter()
            .map(|a| match a {
                Ok(_) => 201,
                Err(e) => e.status().map_or(0, |s| s.as_u16()),
            })
            .collect();
        let won = codes.iter().filter(|c| **c == 201).count();
        let lost = codes.iter().filter(|c| **c == 409).count();
        assert_eq!((won, lost), (1, CLIENTS - 1), "round {round}: {codes:?}");
    }
    let list = ada
        .bookings(&BookingQuery {
            gpu: Some(gpus[3].clone()),
            ..BookingQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(list.len(), ROUNDS as usize);
    app.stop().await;
}

/// "Any N" on a nearly full node never hands out more cards than are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_any_n_requests_never_hand_out_more_cards_than_exist() {
    const CLIENTS: usize = 64;
    let app = TestApp::spawn(8).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let base = slot_base(2);
    for round in 0..20 {
        let slot = hours(base, round, round + 1);
        // Six of eight cards taken; three clients' worth of two-card requests cannot all fit.
        let six: Vec<&String> = gpus[..6].iter().collect();
        ada.book(&on(&six, slot)).await.unwrap();
        let count = if round % 2 == 0 { 1 } else { 2 };
        let request = any(count, slot);
        let answers = futures::future::join_all((0..CLIENTS).map(|_| ada.book(&request))).await;
        assert!(
            answers.iter().all(|a| match a {
                Ok(_) => true,
                Err(e) => e.status().is_some_and(|s| s.as_u16() == 409),
            }),
            "round {round}: only grants and conflicts"
        );
        let granted: Vec<&Booking> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
        assert_eq!(granted.len(), 2 / count as usize, "round {round}");
        let mut cards: Vec<_> = granted.iter().flat_map(|b| b.gpus.clone()).collect();
        cards.sort();
        cards.dedup();
        assert_eq!(cards.len(), 2, "the two free cards, each once");
        assert!(cards.iter().all(|c| gpus[6..].contains(&c.uuid)));
    }
    app.stop().await;
}

#[tokio::test]
async fn the_earliest_slot_waits_for_the_cards_and_keeps_to_the_callers_quota() {
    use lanes_types::query::SlotQuery;
    let app = TestApp::spawn(2).await;
    let admin = user(&app, "root", Role::Admin).await;
    let ada = user(&app, "ada", Role::User).await;
    let search = |gpus: u32, duration: &str| SlotQuery {
        gpus,
        duration: duration.into(),
        ..Default::default()
    };
    // Free now: the first window starts now, on the one node, with both cards.
    let now = ada.slots(&search(2, "1h")).await.unwrap();
    assert!(now[0].start <= Utc::now() && now[0].start > Utc::now() - Duration::seconds(30));
    assert_eq!((now[0].gpus.len(), now[0].free_cards), (2, 2));
    // Both cards held for 90 minutes: the first two-card window starts when they free up.
    let base = slot_base(1);
    let held = ada.book(&any(2, hours(base, 0, 2))).await.unwrap();
    let later = SlotQuery {
        from: Some(base),
        ..search(2, "1h")
    };
    let found = ada.slots(&later).await.unwrap();
    assert_eq!(found[0].start, held.end);
    // The search's answer books as it says.
    let window = &found[0];
    let gpus: Vec<String> = window.gpus.iter().map(|g| g.uuid.clone()).collect();
    let booked = ada
        .book(&lanes_tests::booking_of(&gpus, window.start, window.end))
        .await
        .unwrap();
    assert_eq!(booked.start, window.start);

    // At most one GPU at a time: no window of two fits Ada, though the admin (not held to
    // quotas, as when booking) still finds some.
    let quotas = Quotas {
        default: Quota {
            max_gpus: Some(1),
            ..Quota::default()
        },
        ..Quotas::default()
    };
    admin.save_quotas(&quotas).await.unwrap();
    let far = SlotQuery {
        from: Some(base + Duration::days(1)),
        ..search(2, "1h")
    };
    assert!(ada.slots(&far).await.unwrap().is_empty());
    assert!(!admin.slots(&far).await.unwrap().is_empty());
    assert_eq!(
        ada.slots(&SlotQuery {
            gpus: 1,
            ..far.clone()
        })
        .await
        .unwrap()
        .len(),
        1
    );
    // Only cards that fit: another node, or more memory than any card has.
    let elsewhere = SlotQuery {
        node: Some("elsewhere".into()),
        ..search(1, "1h")
    };
    assert!(ada.slots(&elsewhere).await.unwrap().is_empty());
    let big = SlotQuery {
        min_memory: Some("100TiB".into()),
        ..search(1, "1h")
    };
    assert!(ada.slots(&big).await.unwrap().is_empty());

    // Bad questions: a malformed duration is 400, a search against a rule 422 with the rule.
    assert_eq!(refused(ada.slots(&search(1, "soon")).await), 400);
    let (status, body) = refusal(ada.slots(&search(0, "1h")).await);
    assert_eq!(
        (status, body.rule.map(|r| r.as_str())),
        (422, Some("count"))
    );
    let backwards = SlotQuery {
        from: Some(base),
        to: Some(base + Duration::minutes(30)),
        ..search(1, "1h")
    };
    let (status, body) = refusal(ada.slots(&backwards).await);
    assert_eq!(
        (status, body.rule.map(|r| r.as_str())),
        (422, Some("time_range"))
    );
    app.stop().await;
}
