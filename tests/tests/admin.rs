//! Account administration against a real server: who may do it, and what each change does.

use lanes_client::{Client, Credentials};
use lanes_server::accounts::Role;
use lanes_tests::{refusal, refused, TestApp};
use lanes_types::account::{CreateGroup, CreateUser, PasswordChange, UserPatch};
use lanes_types::query::AuditQuery;
use reqwest::Method;
use serde_json::json;

async fn setup() -> (TestApp, Client, Client) {
    let app = TestApp::spawn(1).await;
    app.create_user("root-admin", "admin passphrase", Role::Admin)
        .await;
    app.create_user("ada", "correct horse battery", Role::User)
        .await;
    let admin = app.sign_in("root-admin", "admin passphrase").await;
    let ada = app.sign_in("ada", "correct horse battery").await;
    (app, admin, ada)
}

fn new_user(username: &str, password: &str) -> CreateUser {
    CreateUser {
        username: username.into(),
        display_name: None,
        email: None,
        unix_user: None,
        role: Role::User,
        password: password.into(),
    }
}

/// The id of `username`, as the admin's user list gives it.
async fn user_id(admin: &Client, username: &str) -> i64 {
    admin
        .users()
        .await
        .unwrap()
        .iter()
        .find(|u| u.user.username == username)
        .expect("the user is listed")
        .user
        .id
}

/// Whether `username` can log in with `password`: `Ok` or the refusal's status.
async fn login(app: &TestApp, username: &str, password: &str) -> Result<(), u16> {
    match app.anonymous().login(username, password).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.status().map_or(0, |s| s.as_u16())),
    }
}

#[tokio::test]
async fn an_admin_creates_a_user_who_can_then_log_in() {
    let (app, admin, _) = setup().await;
    let bob = admin
        .create_user(&CreateUser {
            unix_user: Some("bob".into()),
            email: Some("bob@lab.example".into()),
            ..new_user("bob", "bobs passphrase")
        })
        .await
        .expect("the admin creates bob");
    assert_eq!(
        (bob.user.username.as_str(), bob.user.role),
        ("bob", Role::User)
    );
    assert_eq!(login(&app, "bob", "bobs passphrase").await, Ok(()));

    let again = admin.create_user(&new_user("bob", "bobs passphrase")).await;
    assert_eq!(refused(again), 409);
    let weak = admin.create_user(&new_user("eve", "short")).await;
    assert_eq!(refused(weak), 422);
    let root = admin
        .create_user(&CreateUser {
            unix_user: Some("root".into()),
            ..new_user("eve", "long enough pw")
        })
        .await;
    let (status, body) = refusal(root);
    assert_eq!(status, 422);
    assert!(body.message.contains("root"), "{}", body.message);

    let names: Vec<String> = admin
        .users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.user.username)
        .collect();
    assert_eq!(names, ["ada", "bob", "root-admin"]);
    app.stop().await;
}

#[tokio::test]
async fn only_admins_may_manage_accounts() {
    let (app, _, ada) = setup().await;
    let anonymous = app.anonymous();
    for (who, client, status) in [("a user", &ada, 403), ("anonymous", &anonymous, 401)] {
        let eve = new_user("eve", "long enough pw");
        let demote = UserPatch {
            role: Some(Role::User),
            ..Default::default()
        };
        let vision = CreateGroup {
            name: "vision".into(),
            description: String::new(),
        };
        let answers = [
            ("list users", refused(client.users().await)),
            ("create a user", refused(client.create_user(&eve).await)),
            (
                "change a user",
                refused(client.update_user(1, &demote).await),
            ),
            ("list groups", refused(client.groups().await)),
            (
                "create a group",
                refused(client.create_group(&vision).await),
            ),
            (
                "read the audit log",
                refused(client.audit(&AuditQuery::default()).await),
            ),
        ];
        for (what, answer) in answers {
            assert_eq!(answer, status, "{what} as {who}");
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn disabling_a_user_ends_their_sessions_and_bars_login() {
    let (app, admin, ada) = setup().await;
    let ada_id = user_id(&admin, "ada").await;
    let disable = UserPatch {
        enabled: Some(false),
        ..Default::default()
    };
    admin.update_user(ada_id, &disable).await.unwrap();
    assert_eq!(refused(ada.me().await), 401);
    assert_eq!(login(&app, "ada", "correct horse battery").await, Err(401));
    let enable = UserPatch {
        enabled: Some(true),
        password: Some("a brand new passphrase".into()),
        ..Default::default()
    };
    admin.update_user(ada_id, &enable).await.unwrap();
    assert_eq!(login(&app, "ada", "a brand new passphrase").await, Ok(()));
    let actions: Vec<String> = admin
        .audit(&AuditQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert!(
        actions.iter().any(|a| a == "user.update")
            && actions.iter().any(|a| a == "auth.login_failed"),
        "{actions:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_audit_log_pages_and_filters_by_actor_action_and_time() {
    let (app, admin, ada) = setup().await;
    let start = chrono::Utc::now();
    for i in 0..5 {
        let token = lanes_types::account::NewToken {
            name: format!("t{i}"),
        };
        ada.create_token(&token).await.unwrap();
    }
    let query = |f: fn(&mut AuditQuery)| {
        let mut q = AuditQuery::default();
        f(&mut q);
        q
    };
    let mine = admin
        .audit(&query(|q| {
            q.actor = Some("ada".into());
            q.action = Some("token.create".into());
        }))
        .await
        .unwrap();
    assert_eq!(mine.len(), 5, "{mine:?}");
    assert!(mine
        .iter()
        .all(|e| e.actor.as_deref() == Some("ada") && e.action == "token.create"));
    // Two at a time, newest first, each page after the last entry of the one before.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let mut q = AuditQuery {
            limit: Some(2),
            before,
            actor: Some("ada".into()),
            action: Some("token.create".into()),
            ..Default::default()
        };
        q.from = Some(start - chrono::Duration::seconds(1));
        let page = admin.audit(&q).await.unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|e| e.id);
        seen.extend(page.into_iter().map(|e| e.id));
    }
    assert_eq!(seen, mine.iter().map(|e| e.id).collect::<Vec<_>>());
    // A range before any of it finds none of it; members may not read the log.
    let earlier = admin
        .audit(&query(|q| {
            q.actor = Some("ada".into());
            q.to = Some(chrono::Utc::now() - chrono::Duration::days(1));
        }))
        .await
        .unwrap();
    assert!(earlier.is_empty(), "{earlier:?}");
    assert_eq!(refused(ada.audit(&AuditQuery::default()).await), 403);
    app.stop().await;
}

#[tokio::test]
async fn changing_ones_password_ends_every_session_and_needs_the_current_one() {
    let (app, _, ada) = setup().await;
    let other_session = app.sign_in("ada", "correct horse battery").await;
    let change = |current: &str, new: &str| PasswordChange {
        current_password: current.into(),
        new_password: new.into(),
        keep_tokens: false,
    };
    let wrong = ada
        .change_password(&change("not it at all", "a brand new passphrase"))
        .await;
    assert_eq!(refused(wrong), 403);
    let weak = ada
        .change_password(&change("correct horse battery", "short"))
        .await;
    assert_eq!(refused(weak), 422);

    // The cookie is cleared in the answer (the typed client has no cookie jar, so this one
    // look is at the raw response).
    let Credentials::Session(cookie) = ada.credentials() else {
        panic!("ada has a session");
    };
    let ok = app
        .call_as(
            cookie,
            Method::POST,
            "/api/v1/me/password",
            Some(json!({"current_password": "correct horse battery", "new_password": "a brand new passphrase"})),
        )
        .await;
    assert_eq!(ok.status(), 204);
    assert!(
        lanes_tests::session_cookie(&ok).is_some_and(|c| c == "lanes_session="),
        "the cookie is cleared"
    );
    for session in [&ada, &other_session] {
        assert_eq!(refused(session.me().await), 401);
    }
    assert_eq!(login(&app, "ada", "correct horse battery").await, Err(401));
    assert_eq!(login(&app, "ada", "a brand new passphrase").await, Ok(()));
    app.stop().await;
}

#[tokio::test]
async fn the_last_admin_cannot_be_demoted_or_disabled() {
    let (app, admin, _) = setup().await;
    let id = admin.me().await.unwrap().id;
    let demote = UserPatch {
        role: Some(Role::User),
        ..Default::default()
    };
    let disable = UserPatch {
        enabled: Some(false),
        ..Default::default()
    };
    for change in [demote, disable] {
        assert_eq!(refused(admin.update_user(id, &change).await), 409);
    }
    assert_eq!(admin.me().await.unwrap().role, Role::Admin);
    app.stop().await;
}

#[tokio::test]
async fn groups_are_created_and_users_put_in_them_by_name() {
    let (app, admin, _) = setup().await;
    let group = |name: &str, description: &str| CreateGroup {
        name: name.into(),
        description: description.into(),
    };
    admin
        .create_group(&group("vision", "CV team"))
        .await
        .expect("the group is created");
    assert_eq!(refused(admin.create_group(&group("vision", "")).await), 409);
    assert_eq!(
        refused(admin.create_group(&group("Vision Team", "")).await),
        422
    );
    let ada_id = user_id(&admin, "ada").await;
    let into = |groups: &[&str]| UserPatch {
        groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        ..Default::default()
    };
    let unknown = admin.update_user(ada_id, &into(&["vision", "nlp"])).await;
    assert_eq!(refused(unknown), 422);
    let view = admin.update_user(ada_id, &into(&["vision"])).await.unwrap();
    assert_eq!(view.groups, ["vision"]);
    let groups = admin.groups().await.unwrap();
    assert_eq!(groups[0].members, ["ada"]);
    let missing = UserPatch {
        display_name: Some("x".into()),
        ..Default::default()
    };
    assert_eq!(refused(admin.update_user(9999, &missing).await), 404);

    // A field the API does not know is refused, not ignored (only a raw body can say it).
    let Credentials::Session(cookie) = admin.credentials() else {
        panic!("the admin has a session");
    };
    let unknown_field = app
        .call_as(
            cookie,
            Method::PATCH,
            &format!("/api/v1/users/{ada_id}"),
            Some(json!({"is_admin": true})),
        )
        .await;
    assert_eq!(unknown_field.status(), 400);
    app.stop().await;
}
