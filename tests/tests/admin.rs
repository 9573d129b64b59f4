//! Account administration against a real server: who may do it, and what each change does.

use lanes_server::accounts::Role;
use lanes_tests::{session_cookie, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

async fn setup() -> (TestApp, String, String) {
    let app = TestApp::spawn(1).await;
    app.create_user("root-admin", "admin passphrase", Role::Admin)
        .await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let admin = app.login("root-admin", "admin passphrase").await;
    let ada = app.login("ada", "correct horse battery").await;
    (app, admin, ada)
}

/// The id of `username`, as the admin's user list gives it.
async fn user_id(app: &TestApp, admin: &str, username: &str) -> i64 {
    let users: Value = app
        .call_as(admin, Method::GET, "/api/v1/users", None)
        .await
        .json()
        .await
        .unwrap();
    users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == username)
        .expect("the user is listed")["id"]
        .as_i64()
        .unwrap()
}

async fn login_status(app: &TestApp, username: &str, password: &str) -> u16 {
    app.client
        .post(app.url("/api/v1/auth/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_admin_creates_a_user_who_can_then_log_in() {
    let (app, admin, _) = setup().await;
    let body = json!({"username": "bob", "password": "bobs passphrase", "unix_user": "bob", "email": "bob@lab.example"});
    let resp = app
        .call_as(&admin, Method::POST, "/api/v1/users", Some(body))
        .await;
    assert_eq!(resp.status(), 201);
    let bob: Value = resp.json().await.unwrap();
    assert_eq!(
        (bob["username"].as_str(), bob["role"].as_str()),
        (Some("bob"), Some("user"))
    );
    assert_eq!(login_status(&app, "bob", "bobs passphrase").await, 200);

    let again = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/users",
            Some(json!({"username": "bob", "password": "bobs passphrase"})),
        )
        .await;
    assert_eq!(again.status(), 409);
    let weak = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/users",
            Some(json!({"username": "eve", "password": "short"})),
        )
        .await;
    assert_eq!(weak.status(), 422);
    let root = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/users",
            Some(json!({"username": "eve", "password": "long enough pw", "unix_user": "root"})),
        )
        .await;
    assert_eq!(root.status(), 422);
    let body: Value = root.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("root"));

    let users: Value = app
        .call_as(&admin, Method::GET, "/api/v1/users", None)
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ada", "bob", "root-admin"]);
    app.stop().await;
}

#[tokio::test]
async fn only_admins_may_manage_accounts() {
    let (app, _, ada) = setup().await;
    for (method, path, body) in [
        (Method::GET, "/api/v1/users", None),
        (
            Method::POST,
            "/api/v1/users",
            Some(json!({"username": "eve", "password": "long enough pw"})),
        ),
        (
            Method::PATCH,
            "/api/v1/users/1",
            Some(json!({"role": "user"})),
        ),
        (Method::GET, "/api/v1/groups", None),
        (
            Method::POST,
            "/api/v1/groups",
            Some(json!({"name": "vision"})),
        ),
        (Method::GET, "/api/v1/audit", None),
    ] {
        let as_user = app.call_as(&ada, method.clone(), path, body.clone()).await;
        assert_eq!(as_user.status(), 403, "{method} {path} as a user");
        let anonymous = app.call_as("", method.clone(), path, body).await;
        assert_eq!(anonymous.status(), 401, "{method} {path} anonymously");
    }
    app.stop().await;
}

#[tokio::test]
async fn disabling_a_user_ends_their_sessions_and_bars_login() {
    let (app, admin, ada) = setup().await;
    let ada_id = user_id(&app, &admin, "ada").await;
    let resp = app
        .call_as(
            &admin,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        app.call_as(&ada, Method::GET, "/api/v1/me", None)
            .await
            .status(),
        401
    );
    assert_eq!(
        login_status(&app, "ada", "correct horse battery").await,
        401
    );
    let resp = app
        .call_as(
            &admin,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"enabled": true, "password": "a brand new passphrase"})),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        login_status(&app, "ada", "a brand new passphrase").await,
        200
    );
    let audit: Value = app
        .call_as(&admin, Method::GET, "/api/v1/audit", None)
        .await
        .json()
        .await
        .unwrap();
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"user.update") && actions.contains(&"auth.login_failed"),
        "{actions:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn changing_ones_password_ends_every_session_and_needs_the_current_one() {
    let (app, _, ada) = setup().await;
    let other_session = app.login("ada", "correct horse battery").await;
    let wrong = app.call_as(&ada, Method::POST, "/api/v1/me/password", Some(
            json!({"current_password": "not it at all", "new_password": "a brand new passphrase"}),
        ))
    .await;
    assert_eq!(wrong.status(), 403);
    let weak = app
        .call_as(
            &ada,
            Method::POST,
            "/api/v1/me/password",
            Some(json!({"current_password": "correct horse battery", "new_password": "short"})),
        )
        .await;
    assert_eq!(weak.status(), 422);
    let ok = app.call_as(&ada, Method::POST, "/api/v1/me/password", Some(json!({"current_password": "correct horse battery", "new_password": "a brand new passphrase"}))).await;
    assert_eq!(ok.status(), 204);
    assert!(
        session_cookie(&ok).is_some_and(|c| c == "lanes_session="),
        "the cookie is cleared"
    );
    for cookie in [&ada, &other_session] {
        assert_eq!(
            app.call_as(cookie, Method::GET, "/api/v1/me", None)
                .await
                .status(),
            401
        );
    }
    assert_eq!(
        login_status(&app, "ada", "correct horse battery").await,
        401
    );
    assert_eq!(
        login_status(&app, "ada", "a brand new passphrase").await,
        200
    );
    app.stop().await;
}

#[tokio::test]
async fn the_last_admin_cannot_be_demoted_or_disabled() {
    let (app, admin, _) = setup().await;
    let me: Value = app
        .call_as(&admin, Method::GET, "/api/v1/me", None)
        .await
        .json()
        .await
        .unwrap();
    let id = me["id"].as_i64().unwrap();
    for change in [json!({"role": "user"}), json!({"enabled": false})] {
        let resp = app
            .call_as(
                &admin,
                Method::PATCH,
                &format!("/api/v1/users/{id}"),
                Some(change),
            )
            .await;
        assert_eq!(resp.status(), 409);
    }
    let me_again: Value = app
        .call_as(&admin, Method::GET, "/api/v1/me", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(me_again["role"], "admin");
    app.stop().await;
}

#[tokio::test]
async fn groups_are_created_and_users_put_in_them_by_name() {
    let (app, admin, _) = setup().await;
    let created = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/groups",
            Some(json!({"name": "vision", "description": "CV team"})),
        )
        .await;
    assert_eq!(created.status(), 201);
    let dup = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/groups",
            Some(json!({"name": "vision"})),
        )
        .await;
    assert_eq!(dup.status(), 409);
    let bad = app
        .call_as(
            &admin,
            Method::POST,
            "/api/v1/groups",
            Some(json!({"name": "Vision Team"})),
        )
        .await;
    assert_eq!(bad.status(), 422);
    let ada_id = user_id(&app, &admin, "ada").await;
    let unknown = app
        .call_as(
            &admin,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"groups": ["vision", "nlp"]})),
        )
        .await;
    assert_eq!(unknown.status(), 422);
    let ok = app
        .call_as(
            &admin,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"groups": ["vision"]})),
        )
        .await;
    assert_eq!(ok.status(), 200);
    let view: Value = ok.json().await.unwrap();
    assert_eq!(view["groups"], json!(["vision"]));
    let groups: Value = app
        .call_as(&admin, Method::GET, "/api/v1/groups", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(groups[0]["members"], json!(["ada"]));
    let unknown_field = app
        .call_as(
            &admin,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"is_admin": true})),
        )
        .await;
    assert_eq!(unknown_field.status(), 400);
    let missing = app
        .call_as(
            &admin,
            Method::PATCH,
            "/api/v1/users/9999",
            Some(json!({"display_name": "x"})),
        )
        .await;
    assert_eq!(missing.status(), 404);
    app.stop().await;
}
