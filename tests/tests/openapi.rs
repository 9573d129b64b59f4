//! The OpenAPI description against the real server: every documented operation exists, and
//! answers anonymous callers, ordinary users and admins as its security and tag say. This is
//! the authorization matrix over the documented surface.

use lanes_server::accounts::Role;
use lanes_tests::TestApp;
use reqwest::Method;
use serde_json::Value;

struct Operation {
    method: Method,
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
            assert!(
                code != 404 || op.path.contains("/1"),
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
