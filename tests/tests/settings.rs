//! Portal settings against the real server: an admin opens the dashboard to anonymous
//! viewers, who then see the cards but never whose processes run on them.

use futures::StreamExt;
use lanes_server::accounts::Role;
use lanes_tests::TestApp;
use lanes_types::account::PortalSettings;
use lanes_types::{GpuState, TelemetryMessage};
use serde_json::json;

async fn put_settings(app: &TestApp, cookie: &str, body: serde_json::Value) -> reqwest::Response {
    app.call_as(cookie, reqwest::Method::PUT, "/api/v1/settings", Some(body))
        .await
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
    let admin = app.sign_up("admin", Role::Admin).await;
    assert_eq!(app.get_anonymous("/api/v1/gpus").await.status(), 401);

    let resp = put_settings(&app, &admin, json!({"anonymous_dashboard": true})).await;
    assert_eq!(resp.status(), 200);
    let saved: PortalSettings = resp.json().await.unwrap();
    assert!(saved.anonymous_dashboard);

    // Wait until the simulated cards run processes, so that there is something to hide.
    let mut logged_in = Vec::new();
    for _ in 0..100 {
        logged_in = app
            .get("/api/v1/gpus")
            .await
            .json::<Vec<GpuState>>()
            .await
            .unwrap();
        if owners_shown(&logged_in) > 0 {
            break;
        }
        tokio::time::sleep(lanes_tests::TEST_POLL).await;
    }
    assert!(owners_shown(&logged_in) > 0, "logged-in users see owners");

    let anonymous = app.get_anonymous("/api/v1/gpus").await;
    assert_eq!(anonymous.status(), 200);
    let gpus: Vec<GpuState> = anonymous.json().await.unwrap();
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

    let (mut ws, _) = tokio_tungstenite::connect_async(app.ws_url("/api/v1/telemetry/ws"))
        .await
        .expect("anonymous viewers may follow the live channel");
    for _ in 0..3 {
        let frame = ws.next().await.unwrap().unwrap();
        let message: TelemetryMessage = serde_json::from_str(frame.to_text().unwrap()).unwrap();
        let hidden = match message {
            TelemetryMessage::Snapshot(snapshot) => owners_shown(&snapshot.gpus) == 0,
            TelemetryMessage::Tick { gpus, .. } => gpus
                .iter()
                .flat_map(|g| &g.processes)
                .all(|p| p.user.is_none() && p.command.is_none()),
        };
        assert!(
            hidden,
            "the live channel hides owners from anonymous viewers"
        );
    }

    // Everything else still needs a login.
    for path in [
        "/api/v1/me",
        "/api/v1/users",
        "/api/v1/settings",
        "/api/v1/tokens",
    ] {
        assert_eq!(app.get_anonymous(path).await.status(), 401, "{path}");
    }

    // Closing it again takes effect at once, and both changes are in the audit log.
    let resp = put_settings(&app, &admin, json!({"anonymous_dashboard": false})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(app.get_anonymous("/api/v1/gpus").await.status(), 401);
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let changes = store
        .recent_audit(20)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.action == "settings.update")
        .count();
    assert_eq!(changes, 2);
    assert!(!store.portal_settings().await.unwrap().anonymous_dashboard);
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
    let now: PortalSettings = app
        .call_as(&admin, reqwest::Method::GET, "/api/v1/settings", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(now, PortalSettings::default());
    app.stop().await;
}
