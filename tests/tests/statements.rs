//! Monthly statements against the real server, on whichever backend the suite runs on
//! (SQLite, and PostgreSQL in `make test`): bookings across the change to summer time in
//! Europe/Berlin (2027-03-28, 02:00 → 03:00) and across the month's boundary are counted in
//! the hours they really hold, split between months at the zone's midnight, per project
//! (named, or the group's default, or none), group and member, priced at the admins' rates;
//! the same bookings stated in UTC fall differently, as they should. Members see their own
//! month, and others' only as far as the admins' setting allows; bad input is refused in
//! words; on the first of the month each group's admins are sent the group's statement.

use chrono::{DateTime, Utc};
use lanes_server::accounts::Role;
use lanes_tests::{booking_of, cards, wait_until, Session, TestApp};
use lanes_types::account::{CreateGroup, PortalSettings, UserPatch};
use lanes_types::notify::{NotifyPrefs, NotifySettings};
use lanes_types::statement::{Project, StatementQuery, UsageVisibility, NO_PROJECT};
use std::time::Duration;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn month(m: &str, zone: Option<&str>) -> StatementQuery {
    StatementQuery {
        month: Some(m.into()),
        time_zone: zone.map(str::to_string),
        table: None,
    }
}

/// Booked GPU-hours of the row named `name`.
fn booked(rows: &[lanes_types::statement::StatementRow], name: &str) -> f64 {
    rows.iter()
        .find(|r| r.name == name)
        .map_or(0.0, |r| r.gpu_hours_booked)
}

#[tokio::test]
async fn a_months_statement_counts_real_hours_in_the_labs_zone_per_project_group_and_member() {
    let app = TestApp::spawn(4).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let client = admin.client();
    let ada = Session {
        app: &app,
        cookie: app.sign_up("ada", Role::User).await,
    };
    let bo = Session {
        app: &app,
        cookie: app.sign_up("bo", Role::User).await,
    };
    for (group, member) in [("cv", &ada), ("nlp", &bo)] {
        client
            .create_group(&CreateGroup {
                name: group.into(),
                description: String::new(),
            })
            .await
            .unwrap();
        let me = member.client().me().await.unwrap();
        client
            .update_user(
                me.id,
                &UserPatch {
                    groups: Some(vec![group.into()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let mut portal = client.settings().await.unwrap();
    portal.projects = vec![
        Project {
            name: "vision".into(),
            description: "Vision grant".into(),
        },
        Project {
            name: "nlp-grant".into(),
            description: String::new(),
        },
    ];
    portal.group_projects = [("cv".to_string(), "vision".to_string())].into();
    portal.gpu_hour_price = Some(2.0);
    client.save_settings(&portal).await.unwrap();
    // A default naming a project that does not exist is refused, and nothing is stored.
    let mut wrong = portal.clone();
    wrong.group_projects.insert("nlp".into(), "ghost".into());
    let refusal = format!("{:?}", client.save_settings(&wrong).await.unwrap_err());
    assert!(
        refusal.contains("\\\"ghost\\\" is not one of the projects"),
        "{refusal}"
    );
    assert_eq!(client.settings().await.unwrap(), portal);
    client
        .save_notify_settings(&NotifySettings {
            time_zone: "Europe/Berlin".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    // What a member's booking form offers: every project, and their group's default.
    let offered = ada.client().projects().await.unwrap();
    assert_eq!(offered.projects, portal.projects);
    assert_eq!(offered.default.as_deref(), Some("vision"));
    assert_eq!(bo.client().projects().await.unwrap().default, None);
    let gpus = cards(&app).await;
    let uuid = |i: usize| gpus[i].info.uuid.clone();
    // A: ada, two cards, 01:00 CET → 04:00 CEST on the night the clocks go forward: three
    // hours on the wall, two in fact. No project named: her group's default.
    let a = ada
        .client()
        .book(&booking_of(
            &[uuid(0), uuid(1)],
            at("2027-03-28T00:00:00Z"),
            at("2027-03-28T02:00:00Z"),
        ))
        .await
        .unwrap();
    assert_eq!(a.project.as_deref(), Some("vision"));
    // B: ada, one card, for nlp-grant, 22:00 on 31 March to 03:00 on 1 April (CEST).
    let mut request = booking_of(
        &[uuid(2)],
        at("2027-03-31T20:00:00Z"),
        at("2027-04-01T01:00:00Z"),
    );
    request.project = Some("nlp-grant".into());
    let b = ada.client().book(&request).await.unwrap();
    assert_eq!(b.project.as_deref(), Some("nlp-grant"));
    // C: bo, one card, 23:30 on 28 February to 01:30 on 1 March (CET); his group has no
    // default project.
    let c = bo
        .client()
        .book(&booking_of(
            &[uuid(3)],
            at("2027-02-28T22:30:00Z"),
            at("2027-03-01T00:30:00Z"),
        ))
        .await
        .unwrap();
    assert_eq!(c.project, None);
    // A project that does not exist is refused in words, and nothing is booked.
    let mut request = booking_of(
        &[uuid(3)],
        at("2027-05-01T00:00:00Z"),
        at("2027-05-01T01:00:00Z"),
    );
    request.project = Some("ghost".into());
    let (status, body) = ada
        .call(
            reqwest::Method::POST,
            "/api/v1/bookings",
            Some(serde_json::to_value(&request).unwrap()),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("\\\"ghost\\\" is not a project; the projects are vision, nlp-grant"),
        "{body}"
    );
    // A, B and C (everyone's, as the calendar shows them): the refused one is not there.
    assert_eq!(
        ada.client()
            .bookings(&Default::default())
            .await
            .unwrap()
            .len(),
        3
    );

    // March in Berlin: from 2027-02-28T23:00Z to 2027-03-31T22:00Z (743 hours).
    let march = client.statement(&month("2027-03", None)).await.unwrap();
    assert_eq!(march.time_zone, "Europe/Berlin");
    assert_eq!(
        (march.from, march.to),
        (at("2027-02-28T23:00:00Z"), at("2027-03-31T22:00:00Z"))
    );
    // A: 2 cards × 2 h; B: 1 × 2 h of March (22:00–24:00); C: 1 × 1.5 h (00:00–01:30 CET).
    assert_eq!(booked(&march.users, "ada"), 6.0);
    assert_eq!(booked(&march.users, "bo"), 1.5);
    assert_eq!(booked(&march.projects, "vision"), 4.0);
    assert_eq!(booked(&march.projects, "nlp-grant"), 2.0);
    assert_eq!(booked(&march.projects, NO_PROJECT), 1.5);
    assert_eq!(booked(&march.groups, "cv"), 6.0);
    assert_eq!(booked(&march.groups, "nlp"), 1.5);
    assert_eq!(march.total.gpu_hours_booked, 7.5);
    // At 2.0 a GPU-hour (no energy drawn by bookings still to come, no energy price).
    assert_eq!(march.total.cost, Some(15.0));
    assert_eq!(march.rates.gpu_hour_price, Some(2.0));
    // April holds B's other three hours.
    let april = client.statement(&month("2027-04", None)).await.unwrap();
    assert_eq!(booked(&april.projects, "nlp-grant"), 3.0);
    assert_eq!(april.total.gpu_hours_booked, 3.0);
    // February holds C's first half hour (23:30–24:00 CET).
    let february = client.statement(&month("2027-02", None)).await.unwrap();
    assert_eq!(booked(&february.users, "bo"), 0.5);
    // In UTC the month's edges move: B has four hours of March, C half an hour.
    let utc = client
        .statement(&month("2027-03", Some("UTC")))
        .await
        .unwrap();
    assert_eq!(booked(&utc.users, "ada"), 8.0);
    assert_eq!(booked(&utc.users, "bo"), 0.5);
    assert_eq!(booked(&utc.projects, "nlp-grant"), 4.0);

    // The CSV of each table, with the same figures.
    let csv = client
        .statement_csv(&StatementQuery {
            table: Some("projects".into()),
            ..month("2027-03", None)
        })
        .await
        .unwrap();
    assert!(csv.starts_with("month,project,gpu_hours_booked,"), "{csv}");
    assert!(csv.contains("2027-03,vision,4.000,"), "{csv}");
    assert!(csv.contains("2027-03,(no project),1.500,"), "{csv}");

    // Bad input, in words; members may not read the lab's statement.
    for (query, words) in [
        ("month=2027-13", "is not a month"),
        ("month=2027-03&time_zone=Mars/Olympus", "is not a time zone"),
        ("month=2027-03&table=bookings", "unknown table"),
    ] {
        let path = if words == "unknown table" {
            format!("/api/v1/statements.csv?{query}")
        } else {
            format!("/api/v1/statements?{query}")
        };
        let (status, body) = admin.call(reqwest::Method::GET, &path, None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(words), "{path}: {body}");
    }
    assert_eq!(
        lanes_tests::refused(ada.client().statement(&month("2027-03", None)).await),
        403
    );

    // A member's month: their own only, unless the admins show more.
    let mine = ada
        .client()
        .my_usage(&month("2027-03", None))
        .await
        .unwrap();
    assert_eq!(mine.visibility, UsageVisibility::Own);
    assert_eq!(mine.me.gpu_hours_booked, 6.0);
    assert_eq!(mine.me.cost, Some(12.0));
    assert_eq!(mine.my_groups, ["cv"]);
    assert!(mine.groups.is_empty() && mine.users.is_empty());
    portal.usage_visibility = UsageVisibility::Group;
    client.save_settings(&portal).await.unwrap();
    let mine = ada
        .client()
        .my_usage(&month("2027-03", None))
        .await
        .unwrap();
    assert_eq!(booked(&mine.groups, "cv"), 6.0);
    assert_eq!(mine.groups.len(), 1, "only her own group");
    assert!(mine.users.is_empty(), "bo is in another group");
    portal.usage_visibility = UsageVisibility::Lab;
    client.save_settings(&portal).await.unwrap();
    let mine = ada
        .client()
        .my_usage(&month("2027-03", None))
        .await
        .unwrap();
    assert_eq!(mine.groups.len(), 2);
    assert_eq!(booked(&mine.users, "bo"), 1.5);
    app.stop().await;
}

/// On the first of the month, from 08:00 in the lab's zone, each group's admins get the
/// group's statement of the month before, once, by their channels.
#[tokio::test]
async fn each_groups_admins_get_last_months_statement_on_the_first() {
    let app = TestApp::spawn(2).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let client = admin.client();
    let ada = Session {
        app: &app,
        cookie: app.sign_up("ada", Role::User).await,
    };
    client
        .create_group(&CreateGroup {
            name: "cv".into(),
            description: String::new(),
        })
        .await
        .unwrap();
    let me = ada.client().me().await.unwrap();
    client
        .update_user(
            me.id,
            &UserPatch {
                groups: Some(vec!["cv".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    client
        .save_settings(&PortalSettings {
            gpu_hour_price: Some(3.0),
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .save_notify_settings(&NotifySettings {
            time_zone: "Europe/Berlin".into(),
            allow_private_webhooks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    // The admin reads it in a chat: a Slack-format webhook of their own.
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let keep = got.clone();
    let hook = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await });
    client
        .save_my_notifications(&NotifyPrefs {
            webhook_url: Some(url),
            webhook_format: lanes_types::enforcement::WebhookFormat::Slack,
            ..Default::default()
        })
        .await
        .unwrap();
    // Ada books two cards for three hours from now; then the clock moves to the first of next
    // month, 09:00 in Berlin.
    let gpus = cards(&app).await;
    let now = app.hooks.clock.now();
    let start = now + chrono::Duration::minutes(1);
    ada.client()
        .book(&booking_of(
            &[gpus[0].info.uuid.clone(), gpus[1].info.uuid.clone()],
            start,
            start + chrono::Duration::hours(3),
        ))
        .await
        .unwrap();
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let this_month = lanes_types::statement::month_of(start, &berlin);
    let (y, m) = lanes_types::statement::parse_month(&this_month).unwrap();
    let (_, next) = lanes_types::statement::month_bounds(y, m, &berlin);
    // What the month's statement says of cv (6 GPU-hours, unless the booking crosses into the
    // next month, as it may when this runs late on a month's last day).
    let stated = client
        .statement(&month(&this_month, None))
        .await
        .unwrap()
        .groups
        .into_iter()
        .find(|g| g.name == "cv")
        .unwrap();
    assert!(stated.gpu_hours_booked > 0.0);
    let nine = next + chrono::Duration::hours(9);
    app.hooks.clock.advance(nine - app.hooks.clock.now());
    app.hooks.reminders.run().await;
    app.hooks.deliverer.run().await;
    let body = wait_until(
        Duration::from_secs(20),
        "the statement reaches the admin",
        || async {
            got.lock()
                .unwrap()
                .iter()
                .find(|b| {
                    b["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("Statement of cv"))
                })
                .cloned()
        },
    )
    .await;
    let text = body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("Statement of cv for {this_month}")),
        "{text}"
    );
    let figure = format!("{:.1} GPU-hours booked", stated.gpu_hours_booked);
    assert!(text.contains(&figure), "{figure} in {text}");
    let cost = format!(
        "Cost at the lab's rates: {:.2}",
        stated.gpu_hours_booked * 3.0
    );
    assert!(text.contains(&cost), "{cost} in {text}");
    assert!(text.contains("/admin/statements"), "{text}");
    // Once: another pass sends nothing more. (The session of a month ago has expired.)
    app.hooks.reminders.run().await;
    app.hooks.deliverer.run().await;
    let admin = Session {
        app: &app,
        cookie: app.login("boss", "boss passphrase").await,
    };
    let outbox = admin.client().outbox(None).await.unwrap();
    assert_eq!(
        outbox
            .iter()
            .filter(|m| m.event == "monthly_statement")
            .count(),
        1
    );
    app.stop().await;
}

/// A queue job names its project (or takes its owner's group's default); the booking it starts
/// in carries it, so the statement counts its hours there. A project that is none is refused.
#[tokio::test]
async fn a_queue_job_carries_its_project_into_the_booking_it_starts_in() {
    const ACCOUNT: &str = "lanes-test-job";
    lanes_tests::ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn(2).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let member = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let mut portal = admin.client().settings().await.unwrap();
    portal.projects = vec![Project {
        name: "vision".into(),
        description: String::new(),
    }];
    admin.client().save_settings(&portal).await.unwrap();
    let job = |project: Option<&str>| lanes_types::queue::SubmitJob {
        project: project.map(str::to_string),
        gpus: 1,
        time_limit_s: Some(60),
        argv: vec!["/bin/sleep".into(), "30".into()],
        cwd: None,
        env: None,
        environment: None,
        min_memory_bytes: None,
        name: None,
        preemptible: false,
        container: None,
        notice: None,
    };
    let (status, body) = member
        .call(
            reqwest::Method::POST,
            "/api/v1/queue",
            Some(serde_json::to_value(job(Some("ghost"))).unwrap()),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("is not a project; the projects are vision"),
        "{body}"
    );
    let queued = member.client().enqueue(&job(Some("vision"))).await.unwrap();
    assert_eq!(
        member
            .client()
            .job(queued.id)
            .await
            .unwrap()
            .project
            .as_deref(),
        Some("vision")
    );
    // It starts on a free card, in a booking of its own that carries the project.
    let booking = wait_until(Duration::from_secs(20), "the queue job starts", || async {
        let job = member.client().job(queued.id).await.ok()?;
        member.client().booking(job.booking_id?).await.ok()
    })
    .await;
    assert_eq!(booking.project.as_deref(), Some("vision"));
    member.client().cancel_job(queued.id).await.unwrap();
    app.stop().await;
}
