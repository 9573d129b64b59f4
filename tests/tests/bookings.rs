//! Bookings against the real server: the rules, conflicts, quotas, cancel / release / extend,
//! maintenance, and races of many clients for the same cards.

use chrono::{DateTime, Duration, DurationRound, Utc};
use lanes_server::accounts::Role;
use lanes_tests::TestApp;
use lanes_types::booking::{Booking, BookingState, ConflictBody};
use lanes_types::GpuState;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A whole hour some days from now, so slots never start in the past during a test.
fn slot_base(days: i64) -> DateTime<Utc> {
    (Utc::now() + Duration::days(days))
        .duration_trunc(Duration::hours(1))
        .unwrap()
}

fn hours(base: DateTime<Utc>, from: i64, to: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    (base + Duration::hours(from), base + Duration::hours(to))
}

struct Client<'a> {
    app: &'a TestApp,
    cookie: String,
}

impl Client<'_> {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let response = self.app.call_as(&self.cookie, method, path, body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn book(&self, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, "/api/v1/bookings", Some(body))
            .await
    }
}

async fn user<'a>(app: &'a TestApp, name: &str, role: Role) -> Client<'a> {
    Client {
        app,
        cookie: app.sign_up(name, role).await,
    }
}

async fn uuids(app: &TestApp) -> Vec<String> {
    let gpus: Vec<GpuState> = app.get("/api/v1/gpus").await.json().await.unwrap();
    gpus.into_iter().map(|g| g.info.uuid).collect()
}

fn booking(body: Value) -> Booking {
    serde_json::from_value(body).expect("a booking")
}

#[tokio::test]
async fn cards_are_booked_once_per_moment_and_back_to_back_is_fine() {
    let app = TestApp::spawn(2).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let bob = user(&app, "bob", Role::User).await;
    let base = slot_base(1);

    let (s, e) = hours(base, 0, 4);
    let (status, body) = ada
        .book(json!({"gpus": [gpus[0]], "start": s, "end": e, "note": "training"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let first = booking(body);
    assert_eq!(first.state, BookingState::Upcoming);
    assert_eq!(first.gpus[0].uuid, gpus[0]);
    assert_eq!(first.gpus[0].node, "testnode");
    assert_eq!((first.start, first.end), (s, e));
    assert_eq!(first.username, "ada");

    let (s2, e2) = hours(base, 3, 5);
    let (status, body) = bob
        .book(json!({"gpus": [gpus[1], gpus[0]], "start": s2, "end": e2}))
        .await;
    assert_eq!(status, 409, "{body}");
    let conflict: ConflictBody = serde_json::from_value(body).unwrap();
    assert_eq!(conflict.error, "conflict");
    assert_eq!(conflict.bookings, vec![first.id]);
    assert_eq!(conflict.gpus.len(), 1);
    assert_eq!(conflict.gpus[0].uuid, gpus[0]);

    let (s3, e3) = hours(base, 4, 6);
    let (status, _) = bob
        .book(json!({"gpus": [gpus[0]], "start": s3, "end": e3}))
        .await;
    assert_eq!(status, 201, "back to back");

    // Nothing half-written: the refused two-card request left card 1 free.
    let (status, _) = bob
        .book(json!({"gpus": [gpus[1]], "start": s2, "end": e2}))
        .await;
    assert_eq!(status, 201);
    app.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_by_rule_and_store_nothing() {
    let app = TestApp::spawn(1).await;
    let gpus = uuids(&app).await;
    let ada = user(&app, "ada", Role::User).await;
    let base = slot_base(1);
    let past = Utc::now() - Duration::hours(3);
    for (body, status, rule) in [
        (
            json!({"gpus": [gpus[0]], "start": past, "end": base}),
            422,
            "start_not_in_past",
        ),
        (
            json!({"gpus": [gpus[0]], "start": base, "end": base}),
            422,
            "end_after_start",
        ),
        (
            json!({"gpus": ["GPU-nope"], "start": base, "end": base + Duration::hours(1)}),
            422,
            "unknown_gpu",
        ),
        (
            json!({"gpus": [gpus[0]], "count": 1, "start": base, "end": base + Duration::hours(1)}),
            422,
            "gpus_or_count",
        ),
        (
            json!({"count": 0, "start": base, "end": base + Duration::hours(1)}),
            422,
            "count",
        ),
        (
            json!({"gpus": [gpus[0], gpus[0]], "start": base, "end": base + Duration::hours(1)}),
            422,
            "gpus",
        ),
        (
            json!({"gpus": [gpus[0]], "start": base, "end": base + Duration::hours(1), "note": "x".repeat(1001)}),
            422,
            "note_length",
        ),
    ] {
        let (got, answer) = ada.book(body.clone()).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert_eq!(answer["rule"], rule, "{answer}");
        assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    for body in [
        json!({"gpus": [gpus[0]], "start": "tomorrow", "end": base}),
        json!({"gpus": [gpus[0]], "start": base, "end": base, "colour": "red"}),
    ] {
        let (got, answer) = ada.book(body.clone()).await;
        assert_eq!(got, 400, "{body}");
        assert_eq!(answer["error"], "bad_request");
    }
    let (_, list) = ada
        .send(reqwest::Method::GET, "/api/v1/bookings", None)
        .await;
    assert_eq!(list, json!([]));
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
    let (s, e) = hours(base, 0, 2);
    let first = booking(
        ada.book(json!({"gpus": [gpus[0]], "start": s, "end": e}))
            .await
            .1,
    );
    let (status, _) = bob
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/bookings/{}", first.id),
            None,
        )
        .await;
    assert_eq!(status, 403, "only the owner or an admin");
    let (status, body) = ada
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/bookings/{}", first.id),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(booking(body).state, BookingState::Cancelled);
    let (status, _) = bob
        .book(json!({"gpus": [gpus[0]], "start": s, "end": e}))
        .await;
    assert_eq!(status, 201);

    // Release an active booking early: the rest of its slot frees at once.
    let now = Utc::now();
    let running = booking(
        ada.book(json!({"gpus": [gpus[1]], "start": now, "end": now + Duration::hours(2)}))
            .await
            .1,
    );
    assert_eq!(running.state, BookingState::Active);
    let (status, body) = ada
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/bookings/{}", running.id),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let released = booking(body);
    assert_eq!(released.state, BookingState::Released);
    assert!(released.end <= Utc::now() && released.end >= now);
    let (status, body) = bob
        .book(json!({"gpus": [gpus[1]], "start": Utc::now(), "end": now + Duration::hours(2)}))
        .await;
    assert_eq!(status, 201, "{body}");

    // Extend: into a free stretch yes, into another booking no, by others no.
    let (s, e) = hours(base, 10, 12);
    let mine = booking(
        ada.book(json!({"gpus": [gpus[1]], "start": s, "end": e}))
            .await
            .1,
    );
    let (s2, e2) = hours(base, 14, 16);
    let theirs = booking(
        bob.book(json!({"gpus": [gpus[1]], "start": s2, "end": e2}))
            .await
            .1,
    );
    let path = format!("/api/v1/bookings/{}", mine.id);
    let (status, body) = ada
        .send(
            reqwest::Method::PATCH,
            &path,
            Some(json!({"end": base + Duration::hours(14)})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(booking(body).end, base + Duration::hours(14));
    let (status, body) = ada
        .send(
            reqwest::Method::PATCH,
            &path,
            Some(json!({"end": base + Duration::hours(15)})),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["bookings"], json!([theirs.id]));
    let (status, body) = ada
        .send(
            reqwest::Method::PATCH,
            &path,
            Some(json!({"end": base + Duration::hours(13)})),
        )
        .await;
    assert_eq!(
        (status.as_u16(), body["rule"].as_str()),
        (422, Some("extend_later"))
    );
    let (status, _) = bob
        .send(
            reqwest::Method::PATCH,
            &path,
            Some(json!({"end": base + Duration::hours(14)})),
        )
        .await;
    assert_eq!(status, 403);
    app.stop().await;
}

#[tokio::test]
async fn quotas_refuse_with_the_rule_and_admins_may_go_beyond_with_an_audit_line() {
    let app = TestApp::spawn(4).await;
    let gpus = uuids(&app).await;
    let admin = user(&app, "root", Role::Admin).await;
    let ada = user(&app, "ada", Role::User).await;
    let (status, body) = admin
        .send(
            reqwest::Method::PUT,
            "/api/v1/quotas",
            Some(json!({"default": {"max_gpus": 2, "gpu_hours_per_week": 40}, "users": {"ada": {"max_gpus": 3}}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["users"]["ada"]["max_gpus"], 3);

    let base = slot_base(1);
    let (s, e) = hours(base, 0, 4);
    let (status, body) = ada.book(json!({"count": 4, "start": s, "end": e})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "quota_exceeded");
    assert_eq!(body["rule"], "max_gpus");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("would hold 4 GPUs") && message.contains("your limit is 3"),
        "{message}"
    );

    let (status, _) = ada.book(json!({"count": 3, "start": s, "end": e})).await;
    assert_eq!(status, 201);
    // 12 GPU-hours used; 30 more would pass 40 in the week.
    let (s2, e2) = hours(base, 24, 34);
    let (status, body) = ada.book(json!({"count": 3, "start": s2, "end": e2})).await;
    assert_eq!(
        (status.as_u16(), body["rule"].as_str()),
        (422, Some("gpu_hours_per_week")),
        "{body}"
    );

    // An admin books beyond ada's quota for her: allowed, and the audit log says so.
    let (status, body) = admin
        .book(json!({"count": 3, "start": s2, "end": e2, "user": "ada"}))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(booking(body).username, "ada");
    let (_, audit) = admin
        .send(reqwest::Method::GET, "/api/v1/audit", None)
        .await;
    let line = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "booking.create" && a["actor"] == "root")
        .expect("an audit line");
    let detail = line["detail"].as_str().unwrap();
    assert!(
        detail.contains("for ada") && detail.contains("beyond quota"),
        "{detail}"
    );
    // Users may not book for others.
    let (status, _) = ada
        .book(json!({"gpus": [gpus[3]], "start": base + Duration::hours(50), "end": base + Duration::hours(51), "user": "root"}))
        .await;
    assert_eq!(status, 403);

    // The quota page's view of use.
    let (_, uses) = admin
        .send(reqwest::Method::GET, "/api/v1/quotas/use", None)
        .await;
    let ada_use = uses
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "ada")
        .unwrap();
    assert_eq!(ada_use["limits"]["max_gpus"], 3);
    assert_eq!(ada_use["upcoming"], 2);
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
    let (status, block) = admin
        .send(
            reqwest::Method::POST,
            "/api/v1/maintenance",
            Some(json!({"gpus": [gpus[0]], "start": s, "end": e, "reason": "fan swap"})),
        )
        .await;
    assert_eq!(status, 201, "{block}");
    let (status, body) = ada.book(json!({"gpus": [gpus[0]], "start": base + Duration::hours(7), "end": base + Duration::hours(9)})).await;
    assert_eq!(status, 409);
    assert_eq!(body["maintenance"], json!([block["id"]]));
    // "Any" requests avoid the card.
    let (status, body) = ada.book(json!({"count": 1, "start": s, "end": e})).await;
    assert_eq!(status, 201);
    assert_eq!(booking(body).gpus[0].uuid, gpus[1]);
    let (status, _) = ada.book(json!({"count": 1, "start": s, "end": e})).await;
    assert_eq!(status, 409, "no card left");
    // Maintenance over a booked card is refused until the booking is gone.
    let (status, body) = admin
        .send(
            reqwest::Method::POST,
            "/api/v1/maintenance",
            Some(json!({"gpus": [gpus[1]], "start": s, "end": e})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = admin
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/maintenance/{}", block["id"]),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = ada
        .book(json!({"gpus": [gpus[0]], "start": s, "end": e}))
        .await;
    assert_eq!(status, 201);
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
        let (s, e) = hours(base, round, round + 1);
        let body = json!({"gpus": [gpus[3]], "start": s, "end": e});
        let statuses =
            futures::future::join_all((0..CLIENTS).map(|_| ada.book(body.clone()))).await;
        let won = statuses.iter().filter(|(s, _)| *s == 201).count();
        let lost = statuses.iter().filter(|(s, _)| *s == 409).count();
        let codes: Vec<u16> = statuses.iter().map(|(s, _)| s.as_u16()).collect();
        assert_eq!((won, lost), (1, CLIENTS - 1), "round {round}: {codes:?}");
    }
    let (_, list) = ada
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/bookings?gpu={}", gpus[3]),
            None,
        )
        .await;
    assert_eq!(list.as_array().unwrap().len(), ROUNDS as usize);
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
        let (s, e) = hours(base, round, round + 1);
        // Six of eight cards taken; three clients' worth of two-card requests cannot all fit.
        let (status, _) = ada
            .book(json!({"gpus": gpus[..6], "start": s, "end": e}))
            .await;
        assert_eq!(status, 201);
        let count = if round % 2 == 0 { 1 } else { 2 };
        let body = json!({"count": count, "start": s, "end": e});
        let answers = futures::future::join_all((0..CLIENTS).map(|_| ada.book(body.clone()))).await;
        let granted: Vec<Booking> = answers
            .iter()
            .filter(|(s, _)| *s == 201)
            .map(|(_, b)| booking(b.clone()))
            .collect();
        assert_eq!(granted.len(), 2 / count, "round {round}");
        assert!(answers.iter().all(|(s, _)| *s == 201 || *s == 409));
        let mut cards: Vec<_> = granted.iter().flat_map(|b| b.gpus.clone()).collect();
        cards.sort();
        cards.dedup();
        assert_eq!(cards.len(), 2, "the two free cards, each once");
        assert!(cards.iter().all(|c| gpus[6..].contains(&c.uuid)));
    }
    app.stop().await;
}
