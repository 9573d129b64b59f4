//! The OpenAPI description against the real server: every documented operation exists, and
//! answers anonymous callers, ordinary users and admins as its security and tag say. This is
//! the authorization matrix over the documented surface. And the typed client has a method for
//! every documented operation, which reaches that operation's route.

use lanes_client::Client;
use lanes_server::accounts::Role;
use lanes_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

struct Operation {
    method: Method,
    /// The path as documented (`/api/v1/bookings/{id}`).
    template: String,
    /// The path with its parameters filled in.
    path: String,
    public: bool,
    admin_only: bool,
}

fn operations(doc: &Value) -> Vec<Operation> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            // A path item also holds fields that are not operations.
            if method == "parameters" || method == "summary" || method == "description" {
                continue;
            }
            ops.push(Operation {
                method: method.to_uppercase().parse().expect("an HTTP method"),
                template: path.clone(),
                path: path.replace("{id}", "1"),
                public: op["security"].as_array().is_some_and(|s| s.is_empty()),
                admin_only: op["tags"][0] == "admin",
            });
        }
    }
    ops
}

async fn status(app: &TestApp, op: &Operation, cookie: Option<&str>) -> u16 {
    let mut req = app.client.request(op.method.clone(), app.url(&op.path));
    if let Some(cookie) = cookie {
        req = req.header("cookie", cookie);
    }
    if op.method != Method::GET && op.method != Method::DELETE {
        req = req.json(&serde_json::json!({}));
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn every_documented_operation_exists_and_is_authorized_as_documented() {
    let app = TestApp::spawn(1).await;
    app.create_user("admin", "admin passphrase", Role::Admin)
        .await;
    let admin = app.login("admin", "admin passphrase").await;
    let user = app.viewer_cookie().await;

    let resp = app.get("/api/v1/openapi.json").await;
    assert_eq!(resp.status(), 200);
    let doc: Value = resp.json().await.expect("the document is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let ops = operations(&doc);
    assert!(ops.len() >= 18, "{} operations", ops.len());

    for op in &ops {
        let what = format!("{} {}", op.method, op.path);
        if op.path == "/api/v1/auth/logout" || op.path == "/api/v1/me/password" {
            // These end sessions; their effects are tested in auth.rs and admin.rs.
            continue;
        }
        let anonymous = status(&app, op, None).await;
        let as_user = status(&app, op, Some(&user)).await;
        let as_admin = status(&app, op, Some(&admin)).await;
        for (who, code) in [
            ("anonymous", anonymous),
            ("user", as_user),
            ("admin", as_admin),
        ] {
            // The directory's routes say 404 where the portal has no directory (as here).
            let unconfigured = [
                "/api/v1/auth/device",
                "/api/v1/auth/device/token",
                "/api/v1/directory/sync",
            ];
            assert!(
                code != 404 || op.path.contains("/1") || unconfigured.contains(&op.path.as_str()),
                "{what} as {who}: 404, not routed"
            );
            assert_ne!(code, 405, "{what} as {who}: method not routed");
            assert!(code < 500, "{what} as {who}: {code}");
        }
        if op.public {
            assert_ne!(anonymous, 401, "{what} is documented as public");
        } else {
            assert_eq!(anonymous, 401, "{what} must need a login");
        }
        if op.admin_only {
            assert_eq!(as_user, 403, "{what} is for admins only");
            assert_ne!(as_admin, 403, "{what} as admin");
        } else if !op.public {
            assert!(
                as_user != 401 && as_user != 403,
                "{what} as user: {as_user}"
            );
        }
    }
    app.stop().await;
}

/// Calls the client method for a documented operation (`None`: the client has none). Ids are
/// 1 and bodies minimal: what counts is that the call reaches the route the document names.
async fn call_client(
    client: &Client,
    method: &str,
    path: &str,
) -> Option<lanes_client::Result<()>> {
    fn body<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("a body of the documented shape")
    }
    let now = chrono::Utc::now() + chrono::Duration::hours(1);
    let later = now + chrono::Duration::hours(1);
    let slot = json!({"gpus": ["GPU-x"], "start": now, "end": later});
    let argv = json!(["true"]);
    let gpu_ref = || lanes_types::booking::GpuRef {
        node: "n".into(),
        uuid: "GPU-x".into(),
    };
    Some(match (method, path) {
        ("GET", "/healthz") => client.health().await.map(drop),
        ("GET", "/metrics") => client.metrics(None).await.map(drop),
        ("GET", "/api/v1/openapi.json") => client.openapi().await.map(drop),
        ("GET", "/api/v1/gpus") => client.gpus().await.map(drop),
        ("GET", "/api/v1/nodes") => client.nodes().await.map(drop),
        ("GET", "/api/v1/telemetry/ws") => client.telemetry().await.map(drop),
        ("POST", "/api/v1/auth/login") => client.login("nobody", "wrong").await.map(drop),
        ("POST", "/api/v1/auth/logout") => client.logout().await,
        ("GET", "/api/v1/me") => client.me().await.map(drop),
        ("POST", "/api/v1/me/password") => {
            client
                .change_password(&body(json!({"current_password": "a", "new_password": "b"})))
                .await
        }
        ("PUT", "/api/v1/me/language") => {
            client.set_language(&body(json!({"language": "zh"}))).await
        }
        ("PUT", "/api/v1/me/email") => client
            .change_email(&body(json!({"email": "a@lab.example"})))
            .await
            .map(drop),
        ("GET", "/api/v1/tokens") => client.tokens().await.map(drop),
        ("POST", "/api/v1/tokens") => client
            .create_token(&body(json!({"name": "t"})))
            .await
            .map(drop),
        ("DELETE", "/api/v1/tokens/{id}") => client.revoke_token(1).await,
        ("GET", "/api/v1/users") => client.users().await.map(drop),
        ("POST", "/api/v1/users") => client
            .create_user(&body(
                json!({"username": "u", "password": "a long passphrase"}),
            ))
            .await
            .map(drop),
        ("PATCH", "/api/v1/users/{id}") => client.update_user(1, &body(json!({}))).await.map(drop),
        ("GET", "/api/v1/groups") => client.groups().await.map(drop),
        ("POST", "/api/v1/groups") => client
            .create_group(&body(json!({"name": "g"})))
            .await
            .map(drop),
        ("GET", "/api/v1/audit") => client.audit(&Default::default()).await.map(drop),
        ("GET", "/api/v1/settings") => client.settings().await.map(drop),
        ("PUT", "/api/v1/settings") => client
            .save_settings(&lanes_types::account::PortalSettings::default())
            .await
            .map(drop),
        ("POST", "/api/v1/bookings") => client.book(&body(slot.clone())).await.map(drop),
        ("GET", "/api/v1/bookings") => client.bookings(&Default::default()).await.map(drop),
        ("GET", "/api/v1/bookings/{id}") => client.booking(1).await.map(drop),
        ("PATCH", "/api/v1/bookings/{id}") => client
            .extend_booking(1, &body(json!({"end": later})))
            .await
            .map(drop),
        ("DELETE", "/api/v1/bookings/{id}") => client.withdraw_booking(1).await.map(drop),
        ("POST", "/api/v1/bookings/{id}/reclaim") => client.reclaim_booking(1).await.map(drop),
        ("GET", "/api/v1/slots") => client
            .slots(&body(json!({"gpus": 1, "duration": "1h"})))
            .await
            .map(drop),
        ("GET", "/api/v1/me/quota") => client.my_quota().await.map(drop),
        ("GET", "/api/v1/quotas") => client.quotas().await.map(drop),
        ("PUT", "/api/v1/quotas") => client.save_quotas(&Default::default()).await.map(drop),
        ("GET", "/api/v1/quotas/use") => client.quota_use().await.map(drop),
        ("GET", "/api/v1/maintenance") => client.maintenance().await.map(drop),
        ("POST", "/api/v1/maintenance") => {
            client.add_maintenance(&body(slot.clone())).await.map(drop)
        }
        ("DELETE", "/api/v1/maintenance/{id}") => client.end_maintenance(1).await,
        ("POST", "/api/v1/jobs") => client
            .submit_job(&body(json!({"booking_id": 1, "argv": argv})))
            .await
            .map(drop),
        ("GET", "/api/v1/jobs") => client.jobs(&Default::default()).await.map(drop),
        ("GET", "/api/v1/jobs/{id}") => client.job(1).await.map(drop),
        ("DELETE", "/api/v1/jobs/{id}") => client.cancel_job(1).await.map(drop),
        ("GET", "/api/v1/jobs/{id}/log") => {
            client.job_log(1, &Default::default(), None).await.map(drop)
        }
        ("GET", "/api/v1/jobs/{id}/log/ws") => {
            client.follow_log(1, &Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/policy") => client.policy().await.map(drop),
        ("PUT", "/api/v1/policy") => client.save_policy(&Default::default()).await.map(drop),
        ("GET", "/api/v1/violations") => client.violations(&Default::default()).await.map(drop),
        ("POST", "/api/v1/sim/processes") => client
            .inject_process(&lanes_types::query::InjectProcess::new("GPU-x", "nobody"))
            .await
            .map(drop),
        ("POST", "/api/v1/sim/faults") => {
            client
                .inject_fault(&lanes_types::health::InjectFault::Lost {
                    gpu: "GPU-x".into(),
                })
                .await
        }
        ("GET", "/api/v1/health") => client.health_of_cards().await.map(drop),
        ("GET", "/api/v1/health/changes") => {
            client.health_changes(&Default::default()).await.map(drop)
        }
        ("POST", "/api/v1/health/clear") => {
            client
                .clear_card_health(&lanes_types::health::ClearHealth {
                    gpu: gpu_ref(),
                    note: String::new(),
                })
                .await
        }
        ("POST", "/api/v1/bookings/{id}/move") => client
            .move_booking_card(
                1,
                &lanes_types::health::MoveCard {
                    from: gpu_ref(),
                    to: gpu_ref(),
                },
            )
            .await
            .map(drop),
        ("GET", "/api/v1/history") => client.history(&Default::default()).await.map(drop),
        ("GET", "/api/v1/reports/usage") => {
            client.usage_report(&Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/bookings/energy") => client.booking_energy().await.map(drop),
        ("GET", "/api/v1/me/notifications") => client.my_notifications().await.map(drop),
        ("PUT", "/api/v1/me/notifications") => client
            .save_my_notifications(&Default::default())
            .await
            .map(drop),
        ("POST", "/api/v1/me/notifications/test") => client.test_my_notifications().await.map(drop),
        ("POST", "/api/v1/me/notifications/channel-test") => {
            client.test_my_channel(&Default::default()).await.map(drop)
        }
        ("POST", "/api/v1/policy/channel-test") => {
            client.test_lab_channel(&Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/notifications/settings") => client.notify_settings().await.map(drop),
        ("PUT", "/api/v1/notifications/settings") => client
            .save_notify_settings(&Default::default())
            .await
            .map(drop),
        ("GET", "/api/v1/notifications/outbox") => client.outbox(None).await.map(drop),
        ("POST", "/api/v1/notifications/test") => {
            client.notify_test(&Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/reports/usage.csv") => {
            client.usage_csv(&Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/statements") => client.statement(&Default::default()).await.map(drop),
        ("GET", "/api/v1/statements.csv") => {
            client.statement_csv(&Default::default()).await.map(drop)
        }
        ("GET", "/api/v1/me/usage") => client.my_usage(&Default::default()).await.map(drop),
        ("GET", "/api/v1/projects") => client.projects().await.map(drop),
        ("POST", "/api/v1/queue") => client
            .enqueue(&body(json!({"gpus": 1, "time_limit_s": 60, "argv": argv})))
            .await
            .map(drop),
        ("GET", "/api/v1/queue") => client.queue().await.map(drop),
        ("POST", "/api/v1/queue/forecast") => client
            .forecast_start(&body(json!({"gpus": 1, "time_limit_s": 60})))
            .await
            .map(drop),
        ("DELETE", "/api/v1/queue/{id}") => client.dequeue(1).await.map(drop),
        ("GET", "/api/v1/queue/settings") => client.queue_settings().await.map(drop),
        ("PUT", "/api/v1/queue/settings") => client
            .save_queue_settings(&Default::default())
            .await
            .map(drop),
        ("GET", "/api/v1/shares") => client.shares().await.map(drop),
        ("PUT", "/api/v1/shares") => client.save_shares(&Default::default()).await.map(drop),
        ("GET", "/api/v1/auth/methods") => client.auth_methods().await.map(drop),
        ("POST", "/api/v1/auth/device") => client.start_device_sign_in().await.map(drop),
        ("POST", "/api/v1/auth/device/token") => client
            .poll_device_sign_in(&lanes_types::account::DevicePoll {
                handle: "unknown".into(),
                token_name: "cli".into(),
            })
            .await
            .map(drop),
        ("POST", "/api/v1/auth/terminal-code") => client
            .sign_in_with_terminal_code(&lanes_types::account::RedeemTerminalCode {
                code: "ABCDE-FGHJK".into(),
                token_name: "cli".into(),
            })
            .await
            .map(drop),
        ("POST", "/api/v1/me/terminal-code") => client.new_terminal_code().await.map(drop),
        ("POST", "/api/v1/directory/sync") => client.sync_directory().await.map(drop),
        _ => return None,
    })
}

#[tokio::test]
async fn every_documented_operation_has_a_client_method_that_reaches_its_route() {
    let app = TestApp::spawn(1).await;
    let doc: Value = app.get("/api/v1/openapi.json").await.json().await.unwrap();
    let client = app.anonymous();
    let mut missing = Vec::new();
    for op in operations(&doc) {
        let (method, path) = (op.method.as_str(), op.template.as_str());
        let Some(outcome) = call_client(&client, method, path).await else {
            missing.push(format!("{method} {path}"));
            continue;
        };
        // Anonymous: public operations answer, the others refuse with 401. A wrong path or
        // method in the client would meet 404 or 405 instead.
        if let Err(e) = outcome {
            let status = e.status().map(|s| s.as_u16());
            // Where the portal has no directory (as here), its routes say so with 404.
            let unconfigured =
                path.starts_with("/api/v1/auth/device") && e.code() == Some("not_found");
            assert!(
                matches!(status, Some(400..=499))
                    && (unconfigured || !matches!(status, Some(404 | 405))),
                "{method} {path} through the client: {e:?}"
            );
            if status != Some(401) {
                assert!(e.code().is_some(), "{method} {path}: an error body: {e:?}");
            }
        }
    }
    assert!(
        missing.is_empty(),
        "operations without a client method: {missing:?}"
    );
    app.stop().await;
}

/// The description and the declarations agree: every documented operation is declared once in
/// `lanes_types::api` (which the server routes by and the client and pages call through), and
/// every declared one is documented.
#[test]
fn the_documented_operations_are_exactly_the_declared_ones() {
    let doc: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    let mut documented: Vec<String> = operations(&doc)
        .iter()
        .map(|op| format!("{} {}", op.method, op.template))
        .collect();
    let mut declared: Vec<String> = lanes_types::api::ALL
        .iter()
        .map(|op| format!("{} {}", op.method.as_str(), op.path))
        .collect();
    documented.sort();
    declared.sort();
    assert_eq!(documented, declared);
}
