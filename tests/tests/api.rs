//! The HTTP API of a real server: health, GPU list, metrics, errors.

use lanes_tests::TestApp;
use lanes_types::{GpuState, SourceKind};

async fn viewer(app: &TestApp) -> lanes_client::Client {
    app.client_with(&app.viewer_cookie().await)
}

#[tokio::test]
async fn healthz_reports_the_version_and_a_simulated_source() {
    let app = TestApp::spawn(4).await;
    let health = app.anonymous().health().await.unwrap();
    assert_eq!(health.status, "ok");
    assert_eq!(health.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(health.gpu_source, SourceKind::Simulated);
    assert_eq!((health.gpus, health.gpus_unhealthy), (4, 0));
    app.stop().await;
}

#[tokio::test]
async fn the_gpu_list_has_every_card_with_a_sample_and_health() {
    let app = TestApp::spawn(4).await;
    let gpus = viewer(&app).await.gpus().await.unwrap();
    assert_eq!(gpus.len(), 4);
    for (i, gpu) in gpus.iter().enumerate() {
        assert_eq!(gpu.info.index as usize, i);
        assert_eq!(gpu.info.node, "testnode");
        assert!(gpu.info.uuid.starts_with("GPU-"));
        assert!(gpu.health.is_ok());
        let sample = gpu
            .sample
            .as_ref()
            .expect("a first sample is taken before serving");
        assert!(sample.memory_used_bytes <= gpu.info.memory_total_bytes);
    }
    app.stop().await;
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_with_one_series_per_card() {
    let app = TestApp::spawn(4).await;
    let resp = app.get("/metrics").await;
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let body = resp.text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text");
    for name in [
        "lanes_gpu_up",
        "lanes_gpu_utilization_ratio",
        "lanes_gpu_memory_used_bytes",
        "lanes_gpu_memory_total_bytes",
        "lanes_gpu_temperature_celsius",
        "lanes_gpu_power_watts",
        "lanes_gpu_sm_clock_hertz",
    ] {
        let series: Vec<_> = scrape.samples.iter().filter(|s| s.metric == name).collect();
        assert_eq!(series.len(), 4, "{name}");
        for s in series {
            for label in ["node", "gpu", "uuid", "name"] {
                assert!(s.labels.get(label).is_some(), "{name} lacks {label}");
            }
        }
    }
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "lanes_poll_duration_seconds_count"));
    let util = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "lanes_gpu_utilization_ratio");
    for s in util {
        let prometheus_parse::Value::Gauge(v) = s.value else {
            panic!("utilization is not a gauge")
        };
        assert!((0.0..=1.0).contains(&v), "{v}");
    }
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_api_path_is_a_json_404() {
    let app = TestApp::spawn(1).await;
    let resp = app.get("/api/v1/no-such-thing").await;
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "not_found");
    assert!(body["message"].as_str().is_some());
    app.stop().await;
}

#[tokio::test]
async fn the_dashboard_is_server_rendered_with_every_card_and_current_values() {
    let app = TestApp::spawn(4).await;
    let resp = app.get("/").await;
    assert_eq!(resp.status(), 200);
    let html = resp.text().await.unwrap();
    assert_eq!(html.matches(r#"class="gpu-card"#).count(), 4, "{html}");
    assert!(html.contains("Simulated GPU fleet"));
    assert!(html.contains("4 GPUs"));
    // Values are present before any script runs.
    assert!(html.contains(" °C"));
    // The bundle under its versioned folder: the embedded assets' version (`make test`
    // embeds them), or "none" for a build without them.
    let pkg = lanes_server::http::site::Site::load(None)
        .unwrap()
        .pkg_dir();
    assert!(html.contains(&format!("/{pkg}/lanes.js")), "{html}");
    assert!(html.contains(&format!("/{pkg}/lanes.css")), "{html}");
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_page_is_a_404() {
    let app = TestApp::spawn(1).await;
    assert_eq!(app.get("/no/such/page").await.status(), 404);
    app.stop().await;
}

#[tokio::test]
async fn the_cards_seen_are_recorded_in_the_database() {
    let app = TestApp::spawn(3).await;
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let known = store.inventory().known_gpus().await.unwrap();
    assert_eq!(known.len(), 3);
    assert!(known.iter().all(|g| g.node == "testnode"));
    store.close().await;
    app.stop().await;
}

#[tokio::test]
async fn a_failing_card_is_unhealthy_in_api_metrics_and_page_while_the_others_update() {
    let app = TestApp::spawn_with(3, Some(1)).await;
    let health = app.anonymous().health().await.unwrap();
    assert_eq!((health.gpus, health.gpus_unhealthy), (3, 1));

    let viewer = viewer(&app).await;
    let first = viewer.gpus().await.unwrap();
    assert!(matches!(
        &first[1].health,
        lanes_types::Health::Unhealthy { reason } if reason.contains("fallen off the bus")
    ));
    assert!(first[1].sample.is_none());
    let at = |gpus: &[GpuState], i: usize| gpus[i].sample.as_ref().unwrap().at_ms;
    lanes_tests::wait_until(
        std::time::Duration::from_secs(5),
        "the healthy cards keep updating",
        || async {
            let later = viewer.gpus().await.unwrap();
            [0, 2]
                .iter()
                .all(|&i| at(&later, i) > at(&first, i))
                .then_some(())
        },
    )
    .await;

    let metrics = app.get("/metrics").await.text().await.unwrap();
    let up: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("lanes_gpu_up{"))
        .collect();
    assert_eq!(
        up.iter().filter(|l| l.ends_with(" 0.0")).count(),
        1,
        "{up:?}"
    );
    assert!(up
        .iter()
        .any(|l| l.contains(r#"gpu="1""#) && l.ends_with(" 0.0")));

    let html = app.get("/").await.text().await.unwrap();
    assert!(html.contains("simulated fault: GPU has fallen off the bus"));
    assert!(html.contains("1 unhealthy"));
    app.stop().await;
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn without_a_login_the_api_answers_401_and_pages_send_you_to_log_in() {
    let app = TestApp::spawn(1).await;
    for path in [
        "/api/v1/gpus",
        "/api/v1/me",
        "/api/v1/tokens",
        "/api/v1/no-such-thing",
    ] {
        let resp = app.get_anonymous(path).await;
        assert_eq!(resp.status(), 401, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "unauthenticated");
    }
    let server_fn = app
        .client
        .post(app.url("/api/fn/fleet"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        server_fn.status(),
        401,
        "the dashboard's server function is gated too"
    );

    let page = no_redirects()
        .get(app.url("/?range=1h"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 303);
    // No account exists yet: the first visitor is told how the first admin is made.
    assert_eq!(
        page.headers()["location"],
        "/login?notice=setup&next=/%3Frange%3D1h"
    );
    let first = app
        .get_anonymous("/login?notice=setup&next=/")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        first.contains("lanes user add --username NAME --admin --unix-user ACCOUNT"),
        "{first}"
    );
    let refused = no_redirects()
        .post(app.url("/auth/login"))
        .header("origin", format!("http://{}", app.addr))
        .form(&[("username", "admin"), ("password", "admin passphrase")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.headers()["location"],
        "/login?error=setup&next=/&user=admin"
    );
    app.create_user(
        "ada",
        "correct horse battery",
        lanes_server::accounts::Role::Admin,
    )
    .await;
    let page = no_redirects()
        .get(app.url("/?range=1h"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.headers()["location"], "/login?next=/%3Frange%3D1h");
    for path in ["/healthz", "/metrics", "/login"] {
        assert_eq!(
            app.get_anonymous(path).await.status(),
            200,
            "{path} is public"
        );
    }
    let login = app.get_anonymous("/login").await.text().await.unwrap();
    assert!(login.contains(r#"action="/auth/login""#));
    assert!(!login.contains("gpu-card"));
    app.stop().await;
}

#[tokio::test]
async fn the_login_form_signs_in_and_returns_to_the_page_asked_for_only_on_this_site() {
    let app = TestApp::spawn(1).await;
    app.create_user(
        "ada",
        "correct horse battery",
        lanes_server::accounts::Role::User,
    )
    .await;
    let post = |fields: Vec<(&'static str, &'static str)>| {
        no_redirects()
            .post(app.url("/auth/login"))
            .header("origin", format!("http://{}", app.addr))
            .form(&fields)
            .send()
    };
    let wrong = post(vec![
        ("username", "ada"),
        ("password", "nope nope nope"),
        ("next", "/"),
    ])
    .await
    .unwrap();
    assert_eq!(wrong.status(), 303);
    assert_eq!(
        wrong.headers()["location"],
        "/login?error=invalid&next=/&user=ada"
    );
    assert!(lanes_tests::session_cookie(&wrong).is_none());

    let ok = post(vec![
        ("username", "ada"),
        ("password", "correct horse battery"),
        ("next", "/?range=1h"),
    ])
    .await
    .unwrap();
    assert_eq!(ok.status(), 303);
    assert_eq!(ok.headers()["location"], "/?range=1h");
    let cookie = lanes_tests::session_cookie(&ok).unwrap();
    let page = app
        .client
        .get(app.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("gpu-card"));

    let garbled = no_redirects()
        .post(app.url("/auth/login"))
        .header("origin", format!("http://{}", app.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("password=only")
        .send()
        .await
        .unwrap();
    assert_eq!(garbled.status(), 303);
    assert_eq!(garbled.headers()["location"], "/login?error=bad");
    let form = app
        .get_anonymous("/login?error=invalid&next=/&user=ada")
        .await
        .text()
        .await
        .unwrap();
    assert!(form.contains("Wrong username or password."));
    assert!(form.contains(r#"value="ada""#), "the username is kept");

    let elsewhere = post(vec![
        ("username", "ada"),
        ("password", "correct horse battery"),
        ("next", "//evil.example/"),
    ])
    .await
    .unwrap();
    assert_eq!(elsewhere.headers()["location"], "/");
    app.stop().await;
}
