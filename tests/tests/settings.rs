//! Portal settings against the real server: an admin opens the dashboard to anonymous
//! viewers, who then see the cards but never whose processes run on them.

use lanes_server::accounts::Role;
use lanes_tests::{refused, TestApp};
use lanes_types::account::PortalSettings;
use lanes_types::{GpuState, TelemetryMessage};
use serde_json::json;

async fn put_settings(app: &TestApp, cookie: &str, body: serde_json::Value) -> reqwest::Response {
    app.call_as(cookie, reqwest::Method::PUT, "/api/v1/settings", Some(body))
        .await
}

fn dashboard_open(open: bool) -> PortalSettings {
    PortalSettings {
        anonymous_dashboard: open,
        ..Default::default()
    }
}

fn owners_shown(gpus: &[GpuState]) -> usize {
    gpus.iter()
        .flat_map(|g| &g.processes)
        .filter(|p| p.user.is_some() || p.command.is_some())
        .count()
}

#[tokio::test]
async fn an_open_dashboard_shows_anonymous_viewers_the_cards_without_process_owners() {
    let app = TestApp::spawn(4).await;
    let admin = app.client_with(&app.sign_up("admin", Role::Admin).await);
    let anonymous = app.anonymous();
    assert_eq!(refused(anonymous.gpus().await), 401);

    let saved = admin.save_settings(&dashboard_open(true)).await.unwrap();
    assert!(saved.anonymous_dashboard);
    let viewer = app.client_with(&app.viewer_cookie().await);

    // Wait until the simulated cards run processes, so that there is something to hide.
    let logged_in = lanes_tests::wait_until(
        std::time::Duration::from_secs(10),
        "logged-in users see the owners of processes",
        || async {
            let gpus = viewer.gpus().await.unwrap();
            (owners_shown(&gpus) > 0).then_some(gpus)
        },
    )
    .await;

    let gpus = anonymous
        .gpus()
        .await
        .expect("anonymous viewers see the cards");
    assert_eq!(gpus.len(), 4);
    assert!(gpus.iter().any(|g| !g.processes.is_empty()));
    assert_eq!(owners_shown(&gpus), 0);

    let page = app.get_anonymous("/").await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("4 GPUs"), "the dashboard renders the cards");
    let owners: Vec<String> = logged_in
        .iter()
        .flat_map(|g| &g.processes)
        .filter_map(|p| p.user.as_ref().map(|u| format!(">{u}<")))
        .collect();
    let logged_in_html = app.get("/").await.text().await.unwrap();
    assert!(
        owners.iter().any(|o| logged_in_html.contains(o.as_str())),
        "logged-in users see owners on the page"
    );
    for owner in &owners {
        assert!(!html.contains(owner.as_str()), "{owner} leaked");
    }

    let mut live = anonymous
        .telemetry()
        .await
        .expect("anonymous viewers may follow the live channel");
    for _ in 0..3 {
        let message = live.next().await.unwrap().unwrap();
        let hidden = match message {
            TelemetryMessage::Snapshot(snapshot) => owners_shown(&snapshot.gpus) == 0,
            TelemetryMessage::Tick { gpus, .. } => gpus
                .iter()
                .flat_map(|g| &g.processes)
                .all(|p| p.user.is_none() && p.command.is_none()),
            // Which lists changed is for logged-in viewers only.
            TelemetryMessage::Changed { .. } => false,
        };
        assert!(
            hidden,
            "the live channel hides owners from anonymous viewers"
        );
    }

    // Everything else still needs a login.
    assert_eq!(refused(anonymous.me().await), 401, "me");
    assert_eq!(refused(anonymous.users().await), 401, "users");
    assert_eq!(refused(anonymous.settings().await), 401, "settings");
    assert_eq!(refused(anonymous.tokens().await), 401, "tokens");

    // Closing it again takes effect at once, and both changes are in the audit log.
    admin.save_settings(&dashboard_open(false)).await.unwrap();
    assert_eq!(refused(anonymous.gpus().await), 401);
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let changes = store
        .audit_log()
        .recent(20)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.action == "settings.update")
        .count();
    assert_eq!(changes, 2);
    assert!(!store.settings().portal().await.unwrap().anonymous_dashboard);
    store.close().await;
    app.stop().await;
}

#[tokio::test]
async fn settings_reject_unknown_or_malformed_fields_and_keep_what_was_set() {
    let app = TestApp::spawn(1).await;
    let admin = app.sign_up("admin", Role::Admin).await;
    for body in [
        json!({"anonymous_dashboard": true, "open_bar": true}),
        json!({"anonymous_dashboard": "yes"}),
        json!({}),
    ] {
        let resp = put_settings(&app, &admin, body.clone()).await;
        assert_eq!(resp.status(), 400, "{body}");
        let error: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(error["error"], "bad_request");
    }
    let now = app.client_with(&admin).settings().await.unwrap();
    assert_eq!(now, PortalSettings::default());
    app.stop().await;
}
