//! Logging in and out against a real server: sessions, lockout, CSRF, bad input.

use lanes_client::{ClientError, Credentials};
use lanes_server::accounts::Role;
use lanes_tests::{refusal, refused, session_cookie, TestApp};
use lanes_types::account::NewToken;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn post_login(app: &TestApp, body: Value) -> reqwest::Response {
    app.client
        .post(app.url("/api/v1/auth/login"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn laptop(name: &str) -> NewToken {
    NewToken { name: name.into() }
}

async fn me(app: &TestApp, cookie: &str) -> reqwest::Response {
    app.client
        .get(app.url("/api/v1/me"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_user_logs_in_is_known_by_the_session_and_logs_out() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::Admin)
        .await;
    let resp = post_login(
        &app,
        json!({"username": "ada", "password": "correct horse battery"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let set_cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(
        !set_cookie.contains("Secure"),
        "not Secure unless configured: {set_cookie}"
    );
    let cookie = session_cookie(&resp).unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["username"], "ada");
    assert!(body.get("password_hash").is_none());

    let who: Value = me(&app, &cookie).await.json().await.unwrap();
    assert_eq!(
        (who["username"].as_str(), who["role"].as_str()),
        (Some("ada"), Some("admin"))
    );

    let out = app
        .client
        .post(app.url("/api/v1/auth/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    let after = me(&app, &cookie).await;
    assert_eq!(after.status(), 401);
    let body: Value = after.json().await.unwrap();
    assert_eq!(body["error"], "unauthenticated");
    app.stop().await;
}

#[tokio::test]
async fn a_wrong_password_and_an_unknown_user_get_the_same_answer() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let anonymous = app.anonymous();
    let (wrong_status, wrong) = refusal(anonymous.login("ada", "wrong horse battery").await);
    let (unknown_status, unknown) = refusal(anonymous.login("bob", "wrong horse battery").await);
    assert_eq!((wrong_status, unknown_status), (401, 401));
    assert_eq!(wrong, unknown);
    assert_eq!(wrong.code, "invalid_credentials");
    app.stop().await;
}

#[tokio::test]
async fn a_login_for_an_unknown_user_costs_as_much_as_for_a_known_one() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let median = |durations: &mut Vec<Duration>| {
        durations.sort();
        durations[durations.len() / 2]
    };
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    let anonymous = app.anonymous();
    // The known user logs in successfully (not a failure); the unknown ones fail, and stay
    // under the per-address lockout of five.
    for round in 0..4 {
        let started = Instant::now();
        let ok = anonymous.login("ada", "correct horse battery").await;
        known.push(started.elapsed());
        assert!(ok.is_ok(), "{:?}", ok.err());
        let started = Instant::now();
        let failed = anonymous
            .login(&format!("nobody{round}"), "correct horse battery")
            .await;
        unknown.push(started.elapsed());
        assert_eq!(refused(failed), 401);
    }
    let (k, u) = (median(&mut known), median(&mut unknown));
    let ratio = u.as_secs_f64() / k.as_secs_f64();
    // Both verify one argon2id hash; without the dummy check the unknown user would be ~100×
    // faster. The band is wide because both suites share two cores in CI (a 2.2 was seen
    // there with the check in place): it still fails at any ratio a skipped hash gives.
    assert!((0.25..4.0).contains(&ratio), "known {k:?}, unknown {u:?}");
    app.stop().await;
}

#[tokio::test]
async fn five_failures_lock_the_account_with_retry_after_even_for_the_right_password() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let anonymous = app.anonymous();
    for _ in 0..5 {
        assert_eq!(
            refused(anonymous.login("ada", "wrong horse battery").await),
            401
        );
    }
    match anonymous.login("ada", "correct horse battery").await {
        Err(ClientError::Api {
            status,
            body,
            retry_after,
        }) => {
            assert_eq!(status.as_u16(), 429);
            assert_eq!(body.code, "too_many_requests");
            let retry = retry_after.expect("a Retry-After");
            assert!((800..=900).contains(&retry), "{retry}");
        }
        other => panic!("expected the lockout, got {other:?}"),
    }
    // Another account behind the same address (an SSH tunnel: everyone is 127.0.0.1) still
    // logs in: the lock is on the account from that address, not on the address.
    app.create_user("bob", "another passphrase", Role::User)
        .await;
    anonymous
        .login("bob", "another passphrase")
        .await
        .expect("bob logs in");
    app.stop().await;
}

#[tokio::test]
async fn a_cross_site_write_is_refused_even_with_a_valid_session() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let cookie = app.login("ada", "correct horse battery").await;
    let forged = app
        .client
        .post(app.url("/api/v1/auth/logout"))
        .header("cookie", &cookie)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let body: Value = forged.json().await.unwrap();
    assert_eq!(body["error"], "forbidden");
    // The session survived the forged logout.
    assert_eq!(me(&app, &cookie).await.status(), 200);
    let same_origin = app
        .client
        .post(app.url("/api/v1/auth/logout"))
        .header("cookie", &cookie)
        .header("origin", format!("http://{}", app.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(same_origin.status(), 204);
    app.stop().await;
}

#[tokio::test]
async fn malformed_login_requests_get_a_json_400_and_store_nothing() {
    let app = TestApp::spawn(1).await;
    let long = "x".repeat(2000);
    let cases = [
        ("{not json", "application/json"),
        (r#"{"username":"ada"}"#, "application/json"),
        (
            r#"{"username":"ada","password":"long enough pw","admin":true}"#,
            "application/json",
        ),
        (
            r#"{"username":"ada","password":"long enough pw"}"#,
            "text/plain",
        ),
    ];
    for (body, content_type) in cases {
        let resp = app
            .client
            .post(app.url("/api/v1/auth/login"))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_client_error(), "{body}: {}", resp.status());
        let json: Value = resp.json().await.expect("a JSON error body");
        assert!(
            json["error"].is_string() && json["message"].is_string(),
            "{json}"
        );
    }
    let resp = post_login(&app, json!({"username": "ada", "password": long})).await;
    assert_eq!(resp.status(), 400);
    let non_utf8 = app
        .client
        .post(app.url("/api/v1/auth/login"))
        .header("content-type", "application/json")
        .body(vec![b'{', 0xff, 0xfe, b'}'])
        .send()
        .await
        .unwrap();
    assert_eq!(non_utf8.status(), 400);
    // Malformed requests are not failed logins: nothing was counted against anyone.
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    assert!(store.audit_log().recent(10).await.unwrap().is_empty());
    store.close().await;
    app.stop().await;
}

#[tokio::test]
async fn a_token_is_shown_once_acts_as_its_owner_and_stops_when_revoked() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let ada = app.sign_in("ada", "correct horse battery").await;
    let created = ada.create_token(&laptop("laptop")).await.unwrap();
    let secret = created.secret.clone();
    assert!(
        secret.starts_with("lanes_") && secret.len() > 60,
        "{secret}"
    );
    let by_token = app.anonymous().as_(Credentials::Token(secret.clone()));
    let listed = by_token.tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "laptop");
    assert!(
        !format!("{listed:?}").contains(&secret),
        "the list never shows the secret"
    );
    assert_eq!(by_token.me().await.unwrap().username, "ada");
    by_token.revoke_token(created.token.id).await.unwrap();
    assert_eq!(refused(by_token.me().await), 401);
    app.stop().await;
}

#[tokio::test]
async fn a_user_cannot_revoke_another_users_token_and_bad_tokens_are_refused() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    app.create_user("bob", "another passphrase", Role::User)
        .await;
    let ada = app.login("ada", "correct horse battery").await;
    let bob = app.sign_in("bob", "another passphrase").await;
    let token = app
        .client_with(&ada)
        .create_token(&laptop("ci"))
        .await
        .unwrap();
    assert_eq!(refused(bob.revoke_token(token.token.id).await), 404);
    assert_eq!(app.me_with_token(&token.secret).await.status(), 200);

    for bad in ["lanes_0000", "", "Basic abc"] {
        assert_eq!(app.me_with_token(bad).await.status(), 401, "{bad:?}");
    }
    // A bad token is not rescued by a good cookie.
    let mixed = app
        .client
        .get(app.url("/api/v1/me"))
        .bearer_auth("lanes_0000")
        .header("cookie", &ada)
        .send()
        .await
        .unwrap();
    assert_eq!(mixed.status(), 401);
    let not_a_number = app
        .client
        .delete(app.url("/api/v1/tokens/abc"))
        .header("cookie", &ada)
        .send()
        .await
        .unwrap();
    assert_eq!(not_a_number.status(), 400);
    let body: Value = not_a_number.json().await.unwrap();
    assert_eq!(body["error"], "bad_request");
    app.stop().await;
}

async fn login_from(app: &TestApp, forwarded_for: &str, username: &str) -> reqwest::Response {
    app.client
        .post(app.url("/api/v1/auth/login"))
        .header("x-forwarded-for", forwarded_for)
        .json(&json!({"username": username, "password": "wrong horse battery"}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_lockout_counts_the_forwarded_client_not_the_proxy() {
    let app = TestApp::spawn_configured(1, |config| {
        config.auth.trusted_proxies = vec!["127.0.0.1".parse().unwrap()].into();
    })
    .await;
    // Five failures for one account from one client behind the proxy: locked there...
    for _ in 0..5 {
        let resp = login_from(&app, "203.0.113.9", "user9").await;
        assert_eq!(resp.status(), 401);
    }
    assert_eq!(login_from(&app, "203.0.113.9", "user9").await.status(), 429);
    // ...and a forged left-hand entry does not get it out, since only the proxy's hop counts.
    let forged = login_from(&app, "198.51.100.1, 203.0.113.9", "user9").await;
    assert_eq!(forged.status(), 429);
    // The same account from another client behind the same proxy is not.
    assert_eq!(
        login_from(&app, "203.0.113.10", "user9").await.status(),
        401
    );
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let audit = store.audit_log().recent(1).await.unwrap();
    assert_eq!(audit[0].remote_addr.as_deref(), Some("203.0.113.10"));
    store.close().await;
    app.stop().await;
}

#[tokio::test]
async fn without_a_trusted_proxy_a_forwarded_for_header_cannot_dodge_the_lockout() {
    let app = TestApp::spawn(1).await;
    for i in 0..5 {
        let resp = login_from(&app, &format!("203.0.113.{i}"), "user9").await;
        assert_eq!(resp.status(), 401);
    }
    assert_eq!(
        login_from(&app, "203.0.113.99", "user9").await.status(),
        429
    );
    app.stop().await;
}
