//! The authorization matrix: every route the router serves × {anonymous, a user, another user,
//! an admin} → the status each must get, against the real server. The routes come from the
//! router itself, so a new route without a row here fails this test.

use lanes_server::accounts::Role;
use lanes_tests::TestApp;
use lanes_types::account::CreatedToken;
use reqwest::{Method, StatusCode};
use std::collections::BTreeSet;

/// How a row's request is sent.
#[derive(Clone, Copy, PartialEq)]
enum Body {
    None,
    /// `{}`: enough to reach authorization, never enough to change anything.
    EmptyJson,
}

struct Row {
    method: Method,
    /// The route as registered, `{param}` placeholders included.
    route: &'static str,
    body: Body,
    /// Expected status for anonymous, user, another user, admin.
    expect: [u16; 4],
    /// The request ends the session it carries: send it with a fresh one.
    ends_session: bool,
}

const ANY_METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

fn row(method: Method, route: &'static str, body: Body, expect: [u16; 4]) -> Row {
    Row {
        method,
        route,
        body,
        expect,
        ends_session: false,
    }
}

/// What everyone may and may not do. Pages send people without a session to the login page
/// (303); the API answers them 401.
fn matrix() -> Vec<Row> {
    use Body::*;
    let get = Method::GET;
    let post = Method::POST;
    vec![
        // Public.
        row(get.clone(), "/healthz", None, [200, 200, 200, 200]),
        row(get.clone(), "/metrics", None, [200, 200, 200, 200]),
        row(get.clone(), "/login", None, [200, 200, 200, 200]),
        row(
            post.clone(),
            "/api/v1/auth/login",
            EmptyJson,
            [400, 400, 400, 400],
        ),
        // The HTML form answers an unreadable form by going back to the form.
        row(post.clone(), "/auth/login", EmptyJson, [303, 303, 303, 303]),
        // Directory sign-ins (this portal has no directory: each says so, to anyone).
        row(
            get.clone(),
            "/api/v1/auth/methods",
            None,
            [200, 200, 200, 200],
        ),
        row(get.clone(), "/auth/oidc/start", None, [303, 303, 303, 303]),
        row(
            get.clone(),
            "/auth/oidc/callback",
            None,
            [303, 303, 303, 303],
        ),
        row(
            post.clone(),
            "/api/v1/auth/device",
            None,
            [404, 404, 404, 404],
        ),
        row(
            post.clone(),
            "/api/v1/auth/device/token",
            EmptyJson,
            [400, 400, 400, 400],
        ),
        row(
            post.clone(),
            "/api/v1/auth/terminal-code",
            EmptyJson,
            [400, 400, 400, 400],
        ),
        row(
            post.clone(),
            "/api/v1/me/terminal-code",
            None,
            [401, 200, 200, 200],
        ),
        row(
            post.clone(),
            "/api/v1/directory/sync",
            None,
            [401, 403, 403, 404],
        ),
        // Any logged-in user.
        row(get.clone(), "/", None, [303, 200, 200, 200]),
        row(get.clone(), "/account", None, [303, 200, 200, 200]),
        row(get.clone(), "/calendar", None, [303, 200, 200, 200]),
        row(get.clone(), "/jobs", None, [303, 200, 200, 200]),
        row(get.clone(), "/history", None, [303, 200, 200, 200]),
        row(get.clone(), "/usage", None, [303, 200, 200, 200]),
        row(get.clone(), "/queue", None, [303, 200, 200, 200]),
        row(post.clone(), "/api/fn/fleet", None, [401, 200, 200, 200]),
        row(get.clone(), "/api/v1/gpus", None, [401, 200, 200, 200]),
        row(get.clone(), "/api/v1/nodes", None, [401, 200, 200, 200]),
        row(
            get.clone(),
            "/api/v1/openapi.json",
            None,
            [401, 200, 200, 200],
        ),
        // Without websocket headers the upgrade is refused, after authorization.
        row(
            get.clone(),
            "/api/v1/telemetry/ws",
            None,
            [401, 400, 400, 400],
        ),
        row(get.clone(), "/api/v1/me/quota", None, [401, 200, 200, 200]),
        row(get.clone(), "/api/v1/me", None, [401, 200, 200, 200]),
        // One-click links: public, the secret is the authority; this one names no link.
        row(get.clone(), "/act/{secret}", None, [404, 404, 404, 404]),
        row(post.clone(), "/act/{secret}", None, [404, 404, 404, 404]),
        // A member's own notification choices; `{}` is the defaults.
        row(
            get.clone(),
            "/api/v1/me/notifications",
            None,
            [401, 200, 200, 200],
        ),
        row(
            Method::PUT,
            "/api/v1/me/notifications",
            EmptyJson,
            [401, 200, 200, 200],
        ),
        // Nobody here has an address or a webhook: nothing to send a test to.
        row(
            post.clone(),
            "/api/v1/me/notifications/test",
            None,
            [401, 422, 422, 422],
        ),
        // Nor a saved webhook to try.
        row(
            post.clone(),
            "/api/v1/me/notifications/channel-test",
            EmptyJson,
            [401, 422, 422, 422],
        ),
        row(
            post.clone(),
            "/api/v1/me/password",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        // `{}` asks for no address: nobody here has one to remove.
        row(
            Method::PUT,
            "/api/v1/me/email",
            EmptyJson,
            [401, 200, 200, 200],
        ),
        row(
            Method::PUT,
            "/api/v1/me/language",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(get.clone(), "/api/v1/tokens", None, [401, 200, 200, 200]),
        row(
            post.clone(),
            "/api/v1/tokens",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        // The token belongs to "user": only its owner may revoke it; to others it does not exist.
        row(
            Method::DELETE,
            "/api/v1/tokens/{id}",
            None,
            [401, 204, 404, 404],
        ),
        row(get.clone(), "/api/v1/{*rest}", None, [401, 404, 404, 404]),
        row(
            post.clone(),
            "/api/v1/{*rest}",
            EmptyJson,
            [401, 404, 404, 404],
        ),
        Row {
            ends_session: true,
            ..row(
                post.clone(),
                "/api/v1/auth/logout",
                None,
                [401, 204, 204, 204],
            )
        },
        Row {
            ends_session: true,
            ..row(post.clone(), "/auth/logout", None, [303, 303, 303, 303])
        },
        // Job {id} belongs to "user" and waits for tomorrow's booking: only its owner or an
        // admin sees it; the owner's DELETE cancels it, so the admin's finds it over. (Before the
        // booking rows, whose DELETE would end the booking and with it the job.)
        row(
            post.clone(),
            "/api/v1/jobs",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(get.clone(), "/api/v1/jobs", None, [401, 200, 200, 200]),
        row(get.clone(), "/api/v1/jobs/{id}", None, [401, 200, 403, 200]),
        row(
            get.clone(),
            "/api/v1/jobs/{id}/log",
            None,
            [401, 200, 403, 200],
        ),
        // Without websocket headers the owner's (and an admin's) upgrade is refused; others
        // are refused before that.
        row(
            get.clone(),
            "/api/v1/jobs/{id}/log/ws",
            None,
            [401, 400, 403, 400],
        ),
        row(
            Method::DELETE,
            "/api/v1/jobs/{id}",
            None,
            [401, 200, 403, 422],
        ),
        // A notebook through the portal, any method: {id} is the user's job, a command, not a
        // session: its owner learns so (404); anyone else may not look (403), admins included
        // (a notebook runs its owner's code as them). Pages send the anonymous to log in.
    ]
    .into_iter()
    .chain(
        ["/sessions/{id}/", "/sessions/{id}/{*rest}"]
            .into_iter()
            .flat_map(|route| {
                ANY_METHODS.into_iter().map(move |method| {
                    let body = if method == Method::GET {
                        None
                    } else {
                        EmptyJson
                    };
                    row(method, route, body, [303, 404, 403, 403])
                })
            }),
    )
    .chain(vec![
        // The queue: everyone logged in sees it and submits ({} lacks gpus: 400); {id} is the
        // user's booked job, not a queue job, so its owner and admins learn it is no queue job
        // and others may not see it; settings and shares are read by all, set by admins.
        row(get.clone(), "/api/v1/queue", None, [401, 200, 200, 200]),
        row(
            post.clone(),
            "/api/v1/queue",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(
            post.clone(),
            "/api/v1/queue/forecast",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(
            Method::DELETE,
            "/api/v1/queue/{id}",
            None,
            [401, 404, 403, 404],
        ),
        row(
            get.clone(),
            "/api/v1/queue/settings",
            None,
            [401, 200, 200, 200],
        ),
        row(
            Method::PUT,
            "/api/v1/queue/settings",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        row(get.clone(), "/api/v1/shares", None, [401, 200, 200, 200]),
        row(
            Method::PUT,
            "/api/v1/shares",
            EmptyJson,
            [401, 403, 403, 200],
        ),
        // Enforcement: the policy is the admins'; everyone sees their own violations (admins
        // all); only admins inject simulated processes ({} lacks the card: 400).
        row(get.clone(), "/api/v1/policy", None, [401, 403, 403, 200]),
        row(
            Method::PUT,
            "/api/v1/policy",
            EmptyJson,
            [401, 403, 403, 200],
        ),
        // The lab's channel is tried by admins only (none saved here: 422).
        row(
            post.clone(),
            "/api/v1/policy/channel-test",
            EmptyJson,
            [401, 403, 403, 422],
        ),
        row(
            get.clone(),
            "/api/v1/violations",
            None,
            [401, 200, 200, 200],
        ),
        // History and reports: any logged-in user (reports show members only their own).
        row(get.clone(), "/api/v1/history", None, [401, 200, 200, 200]),
        row(
            get.clone(),
            "/api/v1/reports/usage",
            None,
            [401, 200, 200, 200],
        ),
        row(
            get.clone(),
            "/api/v1/reports/usage.csv",
            None,
            [401, 200, 200, 200],
        ),
        // Statements are the admins'; each member reads their own month.
        row(
            get.clone(),
            "/api/v1/statements",
            None,
            [401, 403, 403, 200],
        ),
        row(
            get.clone(),
            "/api/v1/statements.csv",
            None,
            [401, 403, 403, 200],
        ),
        row(get.clone(), "/api/v1/me/usage", None, [401, 200, 200, 200]),
        row(get.clone(), "/api/v1/projects", None, [401, 200, 200, 200]),
        row(
            get.clone(),
            "/api/v1/bookings/energy",
            None,
            [401, 200, 200, 200],
        ),
        row(
            post.clone(),
            "/api/v1/sim/processes",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        row(
            post.clone(),
            "/api/v1/sim/faults",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        // Card health: anyone signed in sees it; only admins clear a card.
        row(get.clone(), "/api/v1/health", None, [401, 200, 200, 200]),
        row(
            get.clone(),
            "/api/v1/health/changes",
            None,
            [401, 200, 200, 200],
        ),
        row(
            post.clone(),
            "/api/v1/health/clear",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        // An empty move is malformed for anyone signed in (ownership is checked on a real one).
        row(
            post.clone(),
            "/api/v1/bookings/{id}/move",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(
            post.clone(),
            "/api/v1/bookings",
            EmptyJson,
            [401, 400, 400, 400],
        ),
        row(get.clone(), "/api/v1/bookings", None, [401, 200, 200, 200]),
        // Without `gpus` and `duration` the search is malformed, for anyone logged in.
        row(get.clone(), "/api/v1/slots", None, [401, 400, 400, 400]),
        // Booking {id} belongs to "user": anyone may see it, only its owner or an admin change
        // it (an empty PATCH is malformed; the DELETE cancels it, so the admin then finds it
        // cancelled).
        row(
            get.clone(),
            "/api/v1/bookings/{id}",
            None,
            [401, 200, 200, 200],
        ),
        row(
            Method::PATCH,
            "/api/v1/bookings/{id}",
            EmptyJson,
            [401, 400, 403, 400],
        ),
        // Taking back what it lends: its owner or an admin (nothing is lent: nothing changes).
        row(
            post.clone(),
            "/api/v1/bookings/{id}/reclaim",
            None,
            [401, 200, 403, 200],
        ),
        row(
            Method::DELETE,
            "/api/v1/bookings/{id}",
            None,
            [401, 200, 403, 422],
        ),
        row(
            get.clone(),
            "/api/v1/maintenance",
            None,
            [401, 200, 200, 200],
        ),
        // Admins only.
        row(get.clone(), "/api/v1/quotas", None, [401, 403, 403, 200]),
        row(
            Method::PUT,
            "/api/v1/quotas",
            EmptyJson,
            [401, 403, 403, 200],
        ),
        row(
            get.clone(),
            "/api/v1/quotas/use",
            None,
            [401, 403, 403, 200],
        ),
        row(
            post.clone(),
            "/api/v1/maintenance",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        row(
            Method::DELETE,
            "/api/v1/maintenance/{id}",
            None,
            [401, 403, 403, 404],
        ),
        row(get.clone(), "/admin", None, [303, 403, 403, 200]),
        row(get.clone(), "/admin/{section}", None, [303, 403, 403, 200]),
        row(get.clone(), "/api/v1/users", None, [401, 403, 403, 200]),
        row(
            post.clone(),
            "/api/v1/users",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        row(
            Method::PATCH,
            "/api/v1/users/{id}",
            EmptyJson,
            [401, 403, 403, 200],
        ),
        row(get.clone(), "/api/v1/groups", None, [401, 403, 403, 200]),
        row(
            post.clone(),
            "/api/v1/groups",
            EmptyJson,
            [401, 403, 403, 400],
        ),
        row(get.clone(), "/api/v1/audit", None, [401, 403, 403, 200]),
        row(
            get.clone(),
            "/api/v1/notifications/settings",
            None,
            [401, 403, 403, 200],
        ),
        row(
            Method::PUT,
            "/api/v1/notifications/settings",
            EmptyJson,
            [401, 403, 403, 200],
        ),
        row(
            get.clone(),
            "/api/v1/notifications/outbox",
            None,
            [401, 403, 403, 200],
        ),
        row(
            post.clone(),
            "/api/v1/notifications/test",
            EmptyJson,
            [401, 403, 403, 422],
        ),
        row(get.clone(), "/api/v1/settings", None, [401, 403, 403, 200]),
        row(
            Method::PUT,
            "/api/v1/settings",
            EmptyJson,
            [401, 403, 403, 400],
        ),
    ])
    .collect()
}

struct World {
    app: TestApp,
    client: reqwest::Client,
    /// Bearer token of an admin, for probing which methods a route has.
    probe_token: String,
    user_id: i64,
    user_token_id: i64,
    user_booking_id: i64,
    user_job_id: i64,
}

impl World {
    fn concrete(&self, route: &str) -> String {
        let id = if route.starts_with("/api/v1/tokens/") {
            self.user_token_id
        } else if route.starts_with("/api/v1/bookings/") {
            self.user_booking_id
        } else if route.starts_with("/api/v1/jobs/")
            || route.starts_with("/api/v1/queue/")
            || route.starts_with("/sessions/")
        {
            self.user_job_id
        } else if route.starts_with("/api/v1/maintenance/") {
            999
        } else {
            self.user_id
        };
        route
            .replace("{id}", &id.to_string())
            .replace("{*rest}", "no-such-endpoint")
            .replace("{section}", "audit")
            // No link has this secret.
            .replace("{secret}", &"0".repeat(64))
    }

    async fn send(&self, method: Method, route: &str, body: Body, auth: Auth<'_>) -> StatusCode {
        let mut request = self
            .client
            .request(method, self.app.url(&self.concrete(route)));
        request = match auth {
            Auth::None => request,
            Auth::Cookie(cookie) => request.header("cookie", cookie),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        if body == Body::EmptyJson {
            request = request.json(&serde_json::json!({}));
        }
        request.send().await.expect("the server answers").status()
    }
}

#[derive(Clone, Copy)]
enum Auth<'a> {
    None,
    Cookie(&'a str),
    Bearer(&'a str),
}

async fn world() -> World {
    let app = TestApp::spawn(1).await;
    let user = app.create_user("user", "user passphrase", Role::User).await;
    app.create_user("other", "other passphrase", Role::User)
        .await;
    app.create_user("admin", "admin passphrase", Role::Admin)
        .await;
    // Jobs are refused at submission unless their Unix account exists on this host.
    lanes_tests::ensure_unix_account("lanes-test-job");
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let patch = lanes_types::account::UserPatch {
        unix_user: Some("lanes-test-job".into()),
        ..Default::default()
    };
    let audit = lanes_server::store::AuditEntry::new(
        None,
        lanes_server::audit::AuditAction::UserUpdate,
        "user",
    );
    store
        .accounts()
        .update(user.id, &patch, None, &audit, chrono::Utc::now())
        .await
        .unwrap();
    store.close().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let token = |cookie: String| {
        let (client, url) = (client.clone(), app.url("/api/v1/tokens"));
        async move {
            client
                .post(url)
                .header("cookie", cookie)
                .json(&serde_json::json!({ "name": "matrix" }))
                .send()
                .await
                .unwrap()
                .json::<CreatedToken>()
                .await
                .unwrap()
        }
    };
    let probe = token(app.login("admin", "admin passphrase").await).await;
    let user_cookie = app.login("user", "user passphrase").await;
    let user_token = token(user_cookie.clone()).await;
    let gpus: Vec<lanes_types::GpuState> = app.get("/api/v1/gpus").await.json().await.unwrap();
    let start = chrono::Utc::now() + chrono::Duration::days(1);
    let booking: lanes_types::booking::Booking = client
        .post(app.url("/api/v1/bookings"))
        .header("cookie", &user_cookie)
        .json(&serde_json::json!({
            "gpus": [gpus[0].info.uuid],
            "start": start,
            "end": start + chrono::Duration::hours(1),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job: lanes_types::job::Job = client
        .post(app.url("/api/v1/jobs"))
        .header("cookie", &user_cookie)
        .json(&serde_json::json!({"booking_id": booking.id, "argv": ["true"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    World {
        client,
        probe_token: probe.secret,
        user_id: user.id,
        user_token_id: user_token.token.id,
        user_booking_id: booking.id,
        user_job_id: job.id,
        app,
    }
}

#[tokio::test]
async fn every_route_of_the_router_has_a_row_and_answers_each_caller_as_its_row_says() {
    let world = world().await;
    let rows = matrix();

    // Which (method, route) pairs the router really serves: every path it knows, probed with
    // every method by an admin; 405 means the path has no such method.
    let mut served = BTreeSet::new();
    for route in lanes_server::http::route_paths() {
        for method in ANY_METHODS {
            let body = if method == Method::GET {
                Body::None
            } else {
                Body::EmptyJson
            };
            let ends_session = route.ends_with("/logout");
            let auth = Auth::Bearer(&world.probe_token);
            let status = if ends_session {
                // Logging out with a token ends nothing; still, probe with a throwaway session.
                let cookie = world.app.login("admin", "admin passphrase").await;
                world
                    .send(method.clone(), &route, body, Auth::Cookie(&cookie))
                    .await
            } else if method == Method::DELETE
                && (route == "/api/v1/tokens/{id}"
                    || route == "/api/v1/bookings/{id}"
                    || route == "/api/v1/jobs/{id}")
            {
                // Probing must not revoke the user's token or cancel the booking, and both
                // have a DELETE (the rows below exercise them).
                StatusCode::NO_CONTENT
            } else {
                world.send(method.clone(), &route, body, auth).await
            };
            if status != StatusCode::METHOD_NOT_ALLOWED {
                served.insert((method.to_string(), route.clone()));
            }
        }
    }
    let listed: BTreeSet<_> = rows
        .iter()
        .map(|r| (r.method.to_string(), r.route.to_string()))
        .collect();
    let missing: Vec<_> = served.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "routes without a matrix row: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "matrix rows for routes that do not exist: {stale:?}"
    );

    let mut failures = Vec::new();
    for row in &rows {
        let who = ["anonymous", "user", "other", "admin"];
        let credentials = [
            None,
            Some(("user", "user passphrase")),
            Some(("other", "other passphrase")),
            Some(("admin", "admin passphrase")),
        ];
        for (i, creds) in credentials.iter().enumerate() {
            let cookie = match creds {
                Some((name, password)) => Some(world.app.login(name, password).await),
                None => None,
            };
            let auth = cookie.as_deref().map_or(Auth::None, Auth::Cookie);
            let status = world
                .send(row.method.clone(), row.route, row.body, auth)
                .await;
            if status.as_u16() != row.expect[i] {
                failures.push(format!(
                    "{} {} as {}: {} (expected {})",
                    row.method, row.route, who[i], status, row.expect[i]
                ));
            }
            if row.ends_session {
                if let Some(cookie) = &cookie {
                    let me = world
                        .send(Method::GET, "/api/v1/me", Body::None, Auth::Cookie(cookie))
                        .await;
                    assert_eq!(me, 401, "{} {} ends the session", row.method, row.route);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    world.app.stop().await;
}
