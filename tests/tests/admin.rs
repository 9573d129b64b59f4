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
    // This host runs the jobs: bob's Unix account is checked on it (another test may have
    // made one), and an account no host has is accepted, and said until it exists.
    let here = nix::unistd::User::from_name("bob").is_ok_and(|u| u.is_some());
    assert_eq!(bob.unix_account_found, Some(here));
    let nowhere = admin
        .create_user(&CreateUser {
            unix_user: Some("lanes-no-such-account".into()),
            ..new_user("nell", "nells passphrase")
        })
        .await
        .expect("the admin creates nell");
    assert_eq!(nowhere.unix_account_found, Some(false));
    let nobody = admin
        .create_user(&CreateUser {
            unix_user: Some("nobody".into()),
            ..new_user("nora", "noras passphrase")
        })
        .await
        .expect("the admin creates nora");
    assert_eq!(nobody.unix_account_found, Some(true));

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
    assert_eq!(names, ["ada", "bob", "nell", "nora", "root-admin"]);
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

/// The admin sections, in the side navigation's order.
const SECTIONS: [&str; 7] = [
    "users",
    "groups",
    "quotas",
    "policy",
    "notifications",
    "violations",
    "audit",
];

/// A page as the server sends it to a browser with `cookie`; a page that never ends fails
/// the test in 20 s rather than hang it.
async fn page(app: &TestApp, path: &str, cookie: &str) -> (u16, String) {
    let resp = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        app.client
            .get(app.url(path))
            .header("cookie", cookie)
            .send(),
    )
    .await
    .unwrap_or_else(|_| panic!("{path} did not answer in 20 s"))
    .unwrap();
    let status = resp.status().as_u16();
    let html = tokio::time::timeout(std::time::Duration::from_secs(20), resp.text())
        .await
        .unwrap_or_else(|_| panic!("{path} did not end in 20 s"))
        .unwrap();
    (status, html)
}

/// Every admin section as the server sends it: `data-zone="…"` and then the page's `<main>`.
async fn admin_pages(app: &TestApp, cookie: &str) -> Vec<(&'static str, String)> {
    let mut pages = Vec::new();
    for section in SECTIONS {
        let (status, html) = page(app, &format!("/admin/{section}"), cookie).await;
        assert_eq!(status, 200, "/admin/{section}");
        let main = between(&html, "<main", "</main>");
        assert!(main.is_some(), "/admin/{section} has no <main>:\n{html}");
        let zone = between(&html, "data-zone=\"", "\"").unwrap_or_default();
        pages.push((section, format!("data-zone=\"{zone}\" {}", main.unwrap())));
    }
    pages
}

/// The text between the first `start` and the next `end`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(start)?;
    Some(rest.split_once(end)?.0)
}

/// The data a page carried to the browser (`<script id="page-data">`).
fn page_data(html: &str) -> serde_json::Value {
    let script = between(html, r#"id="page-data">"#, "</script>")
        .unwrap_or_else(|| panic!("the page carries no data:\n{html}"));
    serde_json::from_str(script).unwrap_or_else(|e| panic!("{e}: {script}"))
}

/// The accounts of [`setup`], a group "vision", and the admin's browser session.
async fn admin_with_a_group() -> (TestApp, Client, String) {
    let (app, admin, _) = setup().await;
    admin
        .create_group(&CreateGroup {
            name: "vision".into(),
            description: "the vision group".into(),
        })
        .await
        .unwrap();
    let session = app.login("root-admin", "admin passphrase").await;
    (app, admin, session)
}

#[tokio::test]
async fn admin_sections_arrive_with_their_data_and_their_times_in_the_viewers_zone() {
    let (app, admin, session) = admin_with_a_group().await;

    // Without a zone (a first visit): times in UTC, and the page says so.
    for (section, html) in admin_pages(&app, &session).await {
        assert!(html.contains(r#"data-zone="UTC""#), "/admin/{section}");
        assert!(
            !html.contains("Loading") && !html.contains("Could not load"),
            "/admin/{section} came without its data:\n{html}"
        );
        assert!(html.contains(r#"aria-current="page""#), "/admin/{section}");
    }
    let pages = admin_pages(&app, &format!("{session}; tz=Asia/Shanghai")).await;
    let section = |name: &str| &pages.iter().find(|(s, _)| *s == name).unwrap().1;
    assert!(
        section("users").contains(r#"data-username="ada""#),
        "{}",
        section("users")
    );
    assert!(section("groups").contains("the vision group"));
    assert!(section("policy").contains(r#"name="booking_horizon_days""#));
    assert!(section("quotas").contains(r#"class="list quota-editor""#));

    // The audit log's newest entries, in the zone of the `tz` cookie (Shanghai is UTC+8 all
    // year), the way the browser would draw them.
    let newest = admin
        .audit(&AuditQuery {
            limit: Some(5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!newest.is_empty());
    let audit = section("audit");
    assert!(audit.contains(r#"data-zone="Asia/Shanghai""#));
    let shanghai = chrono::FixedOffset::east_opt(8 * 3600).unwrap();
    let utc = chrono::FixedOffset::east_opt(0).unwrap();
    let utc_pages = admin_pages(&app, &session).await;
    let in_utc = &utc_pages.iter().find(|(s, _)| *s == "audit").unwrap().1;
    for entry in &newest {
        let when = |zone: chrono::FixedOffset| {
            entry
                .at
                .with_timezone(&zone)
                .format("%a %-d %b %H:%M")
                .to_string()
        };
        assert_eq!(
            row_of(audit, entry.id).map(|r| r.contains(&when(shanghai))),
            Some(true),
            "entry {} at {}:\n{audit}",
            entry.id,
            when(shanghai)
        );
        assert_eq!(
            row_of(in_utc, entry.id).map(|r| r.contains(&when(utc))),
            Some(true),
            "entry {} at {}:\n{in_utc}",
            entry.id,
            when(utc)
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn an_odd_zone_cookie_is_drawn_in_utc_and_never_reaches_the_page() {
    let (app, _, _) = setup().await;
    let session = app.login("root-admin", "admin passphrase").await;
    let long = format!("Asia/{}", "x".repeat(4096));
    for odd in [
        "Mars/Olympus",
        "Asia/Shanghai\"><script>",
        "Asia/Shanghai</script><script>alert(1)</script>",
        long.as_str(),
    ] {
        for path in ["/admin/audit", "/queue", "/login"] {
            let (_, html) = page(&app, path, &format!("{session}; tz={odd}")).await;
            assert!(
                html.contains(r#"data-zone="UTC""#),
                "{path}, tz={odd:.40}:\n{html:.400}"
            );
            assert!(!html.contains(odd), "{path} shows tz={odd:.40}");
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn a_page_carries_the_same_answers_the_api_gives_and_markup_in_them_stays_text() {
    let (app, admin, _) = setup().await;
    let odd = "</script><script>alert(1)</script><!--";
    admin
        .create_user(&CreateUser {
            display_name: Some(odd.into()),
            ..new_user("mallory", "mallorys passphrase")
        })
        .await
        .unwrap();
    let session = app.login("root-admin", "admin passphrase").await;
    let (_, html) = page(&app, "/admin/users", &session).await;
    assert!(!html.contains(odd), "the name's markup is in the page raw");
    let carried = page_data(&html);
    let users = serde_json::to_value(admin.users().await.unwrap()).unwrap();
    assert_eq!(carried["answers"]["/api/v1/users"], users);
    assert_eq!(carried["viewer"]["username"], "root-admin");
    let main = between(&html, "<main", "</main>").unwrap();
    assert!(
        main.contains("&lt;/script&gt;&lt;script&gt;alert(1)"),
        "{main}"
    );

    // Other pages carry the viewer and nothing else; anonymous pages carry no one.
    let (_, queue) = page(&app, "/queue", &session).await;
    let carried = page_data(&queue);
    assert_eq!(carried["answers"], json!({}));
    assert_eq!(carried["viewer"]["username"], "root-admin");
    // The login page carries only how people sign in here.
    let (_, login) = page(&app, "/login", "").await;
    assert_eq!(
        page_data(&login),
        json!({ "viewer": null, "answers": { "/api/v1/auth/methods": { "password": true, "ldap": false } } })
    );
    app.stop().await;
}

#[tokio::test]
async fn a_member_gets_no_admin_page_and_no_admin_data() {
    let (app, _, _) = setup().await;
    let member = app.login("ada", "correct horse battery").await;
    for section in SECTIONS {
        let (status, html) = page(&app, &format!("/admin/{section}"), &member).await;
        assert_eq!(status, 403, "/admin/{section}");
        assert!(!html.contains("page-data") && !html.contains("root-admin"));
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_pages_render_whole_under_concurrent_load() {
    let (app, _, session) = admin_with_a_group().await;
    // Sixteen browsers at once, each opening every section three times, on a runtime with
    // more workers than the machine has cores: a render that waits on another task would
    // wedge here (the earlier design hung under this load).
    let app = std::sync::Arc::new(app);
    let browsers = (0..16).map(|b| {
        let (app, session) = (app.clone(), session.clone());
        tokio::spawn(async move {
            for round in 0..3 {
                for i in 0..SECTIONS.len() {
                    let section = SECTIONS[(i + b + round) % SECTIONS.len()];
                    let (status, html) = page(&app, &format!("/admin/{section}"), &session).await;
                    assert_eq!(status, 200, "/admin/{section}");
                    let main = between(&html, "<main", "</main>").unwrap_or_default();
                    assert!(
                        !main.contains("Loading") && main.contains(r#"class="panel""#),
                        "/admin/{section} came without its data:\n{main}"
                    );
                }
            }
        })
    });
    for browser in futures::future::join_all(browsers).await {
        browser.expect("a browser's pages");
    }
    // The server still answers after the load.
    assert_eq!(app.get("/api/v1/me").await.status(), 200);
    std::sync::Arc::into_inner(app)
        .expect("the browsers are done")
        .stop()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_render_whole_while_the_process_lists_its_routes() {
    // Listing the app's routes suppresses resource loading in the whole process while it runs
    // (leptos' own flag); servers started beside this one, as in this suite, list them. A page
    // whose render waited on a resource first polled meanwhile never ended (the dashboard's
    // fleet, the top bar's viewer): its body stopped after the shell.
    let (app, _, session) = admin_with_a_group().await;
    let listing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let lister = std::thread::spawn({
        let listing = listing.clone();
        let runtime = tokio::runtime::Handle::current();
        move || {
            let _runtime = runtime.enter();
            let mut lists = 0u32;
            while listing.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(lanes_server::http::route_paths().contains(&"/admin".to_string()));
                lists += 1;
            }
            lists
        }
    });
    for round in 0..5 {
        for path in ["/", "/admin/groups", "/account", "/jobs", "/queue"] {
            let (status, html) = page(&app, path, &session).await;
            assert_eq!(status, 200, "{path} in round {round}");
            assert!(html.contains("</html>"), "{path} ended early:\n{html}");
            assert!(
                html.contains(r#"data-testid="whoami""#),
                "{path} without its viewer"
            );
        }
    }
    listing.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(lister.join().expect("the route lister") > 0);
    app.stop().await;
}

/// The audit log's row for entry `id` in a page's HTML.
fn row_of(html: &str, id: i64) -> Option<&str> {
    let start = html.find(&format!(r#"data-audit="{id}""#))?;
    let rest = &html[start..];
    Some(&rest[..rest.find("</tr>")?])
}
