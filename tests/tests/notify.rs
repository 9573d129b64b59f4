//! Personal notifications against the real server and a real SMTP server (aiosmtpd, started
//! by each test, asking for a login): a reminder comes at its time in the member's zone with
//! links that work once; a reused, expired or altered link is refused; a member's choices route
//! events, required ones cannot be turned off, a private webhook is refused unless allowed, and
//! the hourly limit suppresses the rest; a restart between enqueue and send delivers exactly
//! once.

use chrono::Utc;
use lanes_server::accounts::Role;
use lanes_tests::{booking_of, cards, wait_until, KillOnDrop, Session, TestApp};
use lanes_types::account::UserPatch;
use lanes_types::enforcement::Policy;
use lanes_types::notify::{
    Channels, EventKind, EventRule, NotifyPrefs, NotifySettings, OutboxStatus, SmtpSecurity,
    SmtpSettings, TestSend,
};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The member: a Unix account of this name runs her jobs.
pub(crate) const MEMBER: &str = "lanes-test-job";
const SMTP_USER: &str = "lanes-mailer";
const SMTP_PASSWORD: &str = "mail passphrase";

/// The Python with aiosmtpd that `make tools-test` installs.
fn python() -> PathBuf {
    if let Ok(python) = std::env::var("LANES_TEST_PYTHON") {
        return python.into();
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let python = PathBuf::from(home).join(".cache/lanes-tools/aiosmtpd-1.4.6/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make tools-test` (it installs aiosmtpd for these tests)",
        python.display()
    );
    python
}

/// A real SMTP server on `port` (0: any), writing what it receives to `dir`.
pub(crate) struct Sink {
    _child: KillOnDrop,
    port: u16,
    dir: PathBuf,
}

impl Sink {
    fn start(dir: &Path, port: u16) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("notify/smtp_sink.py");
        let mut child = std::process::Command::new(python())
            .arg(script)
            .arg(dir)
            .args([SMTP_USER, SMTP_PASSWORD, &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the SMTP server starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("the SMTP server said {line:?}"))
            .parse()
            .unwrap();
        Self {
            _child: KillOnDrop(child),
            port,
            dir: dir.to_path_buf(),
        }
    }

    /// The messages received so far, in order.
    pub(crate) fn messages(&self) -> Vec<String> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        names.retain(|p| p.extension().is_some_and(|e| e == "eml"));
        names.sort();
        names
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    }

    pub(crate) async fn wait_for(&self, n: usize, limit: Duration) -> Vec<String> {
        wait_until(limit, &format!("{n} messages arrive"), || async {
            let m = self.messages();
            (m.len() >= n).then_some(m)
        })
        .await
    }
}

/// A received message: its subject, plain-text body and one header.
pub(crate) struct Mail {
    pub(crate) subject: String,
    pub(crate) text: String,
    pub(crate) html: String,
    pub(crate) to: String,
    pub(crate) message_id: String,
}

pub(crate) fn parse(raw: &str) -> Mail {
    let message = mail_parser::MessageParser::default()
        .parse(raw.as_bytes())
        .expect("a message");
    Mail {
        subject: message.subject().unwrap_or_default().to_string(),
        text: message.body_text(0).unwrap_or_default().to_string(),
        html: message.body_html(0).unwrap_or_default().to_string(),
        to: raw
            .lines()
            .find_map(|l| l.strip_prefix("X-Envelope-To: "))
            .unwrap_or_default()
            .to_string(),
        message_id: message.message_id().unwrap_or_default().to_string(),
    }
}

/// The URL after `label: ` in a message's text.
pub(crate) fn link(mail: &Mail, label: &str) -> String {
    mail.text
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no {label:?} link in {}", mail.text))
        .trim()
        .to_string()
}

fn smtp(port: u16) -> SmtpSettings {
    SmtpSettings {
        host: "127.0.0.1".into(),
        port,
        security: SmtpSecurity::None,
        username: SMTP_USER.into(),
        password: Some(SMTP_PASSWORD.into()),
        password_set: false,
        from: "Vision Lab GPUs <gpus@lab.example>".into(),
    }
}

/// An admin, and a member `ada` with an email address.
async fn people(app: &TestApp) -> (Session<'_>, Session<'_>) {
    lanes_tests::ensure_unix_account(MEMBER);
    let admin = Session {
        app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let ada = Session {
        app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let me = ada.client().me().await.unwrap();
    admin
        .client()
        .update_user(
            me.id,
            &UserPatch {
                email: Some("ada@lab.example".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    (admin, ada)
}

/// A mail server, an admin and ada, and the lab's default settings sending through it.
pub(crate) async fn mailed(app: &TestApp) -> (tempfile::TempDir, Sink, Session<'_>, Session<'_>) {
    let mail = tempfile::tempdir().unwrap();
    let sink = Sink::start(mail.path(), 0);
    let (admin, ada) = people(app).await;
    admin
        .client()
        .save_notify_settings(&NotifySettings {
            smtp: Some(smtp(sink.port)),
            ..Default::default()
        })
        .await
        .unwrap();
    (mail, sink, admin, ada)
}

#[tokio::test]
async fn a_reminder_comes_at_its_time_and_its_link_works_once() {
    let app = TestApp::spawn(2).await;
    let mail = tempfile::tempdir().unwrap();
    let sink = Sink::start(mail.path(), 0);
    let (admin, ada) = people(&app).await;
    let saved = admin
        .client()
        .save_notify_settings(&NotifySettings {
            lab_name: "Vision Lab".into(),
            smtp: Some(smtp(sink.port)),
            starts_soon_min: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    // The password is kept and never read back.
    let smtp_back = saved.smtp.unwrap();
    assert_eq!(smtp_back.password, None);
    assert!(smtp_back.password_set);
    ada.client()
        .save_my_notifications(&NotifyPrefs {
            time_zone: Some("Asia/Shanghai".into()),
            ..Default::default()
        })
        .await
        .unwrap();

    let card = cards(&app).await[0].info.uuid.clone();
    let start = Utc::now() + chrono::Duration::seconds(66);
    let booking = ada
        .client()
        .book(&booking_of(
            &[card],
            start,
            start + chrono::Duration::hours(2),
        ))
        .await
        .unwrap();
    // Not before a minute ahead of its start: a whole pass of the reminder task made before
    // then sends nothing...
    app.hooks.reminders.run().await;
    let judged = Utc::now();
    assert!(
        judged < start - chrono::Duration::seconds(60),
        "the pass came too late to judge"
    );
    let outbox = admin.client().outbox(None).await.unwrap();
    assert!(outbox.is_empty(), "a reminder came too early: {outbox:?}");
    // ...and then at once.
    let raw = sink.wait_for(1, Duration::from_secs(40)).await;
    let received = Utc::now();
    assert!(received < start, "the reminder came after the start");
    assert!(
        received > start - chrono::Duration::seconds(60) - chrono::Duration::seconds(1),
        "the reminder came before its lead time"
    );
    let message = parse(&raw[0]);
    assert_eq!(message.to, "ada@lab.example");
    let local = start.with_timezone(&chrono_tz_offset()).format("%H:%M");
    assert_eq!(
        message.subject,
        format!("[Vision Lab] Booking #{} starts at {local} CST", booking.id)
    );
    assert!(
        message.text.contains("GPU 0 · testnode"),
        "{}",
        message.text
    );
    assert!(message.text.contains("(UTC+08:00)"), "{}", message.text);
    assert!(message.html.contains("Release now"));
    assert!(message.message_id.starts_with("lanes-"));

    let url = link(&message, "Release now");
    assert!(
        url.starts_with(&format!("http://{}/act/", app.addr)),
        "{url}"
    );
    let anonymous = reqwest::Client::new();
    // Opening the link only asks.
    let page = anonymous.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let body = page.text().await.unwrap();
    assert!(
        body.contains(&format!("Cancel booking #{}", booking.id)),
        "{body}"
    );
    assert_eq!(
        ada.client().booking(booking.id).await.unwrap().state,
        lanes_types::booking::BookingState::Upcoming
    );
    // An altered secret does nothing.
    let mut altered = url.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == '0' { '1' } else { '0' });
    let refused = anonymous.post(&altered).send().await.unwrap();
    assert_eq!(refused.status(), 404);
    // The button does it, without a login; a second time is refused.
    let done = anonymous.post(&url).send().await.unwrap();
    assert_eq!(done.status(), 200);
    assert!(done.text().await.unwrap().contains("was cancelled"));
    assert_eq!(
        ada.client().booking(booking.id).await.unwrap().state,
        lanes_types::booking::BookingState::Cancelled
    );
    let again = anonymous.post(&url).send().await.unwrap();
    assert_eq!(again.status(), 410);
    assert!(again.text().await.unwrap().contains("already used"));
    assert_eq!(anonymous.get(&url).send().await.unwrap().status(), 410);
    // Done as ada, and audited as her.
    let audit = admin.client().audit(&Default::default()).await.unwrap();
    assert!(audit
        .iter()
        .any(|a| a.action == "booking.cancel" && a.actor.as_deref() == Some(MEMBER)));

    // An expired link is refused too (made straight in the store: links live for hours).
    let store = lanes_server::store::Store::open(&app.database_url())
        .await
        .unwrap();
    let now = Utc::now();
    let ids = store
        .outbox()
        .enqueue(
            &[lanes_server::store::NewMessage {
                user_id: Some(ada.client().me().await.unwrap().id),
                channel: lanes_types::notify::Channel::Webhook,
                event: "test".into(),
                text: "old".into(),
                details: serde_json::json!({}),
                dedupe_key: None,
            }],
            now,
        )
        .await
        .unwrap();
    let (secret, hash) = lanes_server::accounts::session::new_secret().unwrap();
    store
        .links()
        .replace(
            ids[0],
            &[lanes_server::store::NewLink {
                token_hash: hash,
                user_id: ada.client().me().await.unwrap().id,
                action: lanes_types::notify::LinkAction::Release,
                booking_id: Some(booking.id),
                job_id: None,
                email: None,
                detail: None,
                expires_at: now - chrono::Duration::seconds(1),
            }],
            now - chrono::Duration::hours(2),
        )
        .await
        .unwrap();
    let expired = anonymous
        .post(app.url(&format!("/act/{secret}")))
        .send()
        .await
        .unwrap();
    assert_eq!(expired.status(), 410);
    assert!(expired.text().await.unwrap().contains("expired"));
    app.stop().await;
}

/// China Standard Time, the zone the member chose.
fn chrono_tz_offset() -> chrono::FixedOffset {
    chrono::FixedOffset::east_opt(8 * 3600).unwrap()
}

/// A tiny HTTP endpoint that keeps the JSON bodies POSTed to it.
async fn receiver() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::routing::post;
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), got)
}

#[tokio::test]
async fn choices_route_messages_and_the_lab_sets_what_may_not_be_turned_off() {
    let app = TestApp::spawn(1).await;
    let mail = tempfile::tempdir().unwrap();
    let sink = Sink::start(mail.path(), 0);
    let (admin, ada) = people(&app).await;
    let (hook, got) = receiver().await;
    let mut settings = NotifySettings {
        smtp: Some(smtp(sink.port)),
        per_user_per_hour: 3,
        ..Default::default()
    };
    settings.events.insert(
        EventKind::UnbookedUse,
        EventRule {
            channels: Channels {
                email: true,
                webhook: false,
            },
            required: true,
        },
    );
    admin
        .client()
        .save_notify_settings(&settings)
        .await
        .unwrap();
    let mut prefs = NotifyPrefs {
        webhook_url: Some(hook.clone()),
        ..Default::default()
    };
    prefs.events.insert(
        EventKind::JobFailed,
        Channels {
            email: false,
            webhook: true,
        },
    );
    // Issue 69, item 13: a private webhook the lab does not allow is refused when saved, with
    // the reason its test gives, not saved to be suppressed later; nothing is stored.
    let refusal = ada
        .client()
        .save_my_notifications(&prefs)
        .await
        .unwrap_err();
    assert_eq!(refusal.status().map(|s| s.as_u16()), Some(422), "{refusal}");
    assert!(refusal.to_string().contains("private network"), "{refusal}");
    let view = ada.client().my_notifications().await.unwrap();
    assert_eq!(view.prefs.webhook_url, None);
    // Allowed by the lab, it is saved.
    settings.allow_private_webhooks = true;
    admin
        .client()
        .save_notify_settings(&settings)
        .await
        .unwrap();
    ada.client().save_my_notifications(&prefs).await.unwrap();
    // A required event cannot be turned off.
    let mut off = prefs.clone();
    off.events
        .insert(EventKind::UnbookedUse, Channels::default());
    let refusal = ada.client().save_my_notifications(&off).await.unwrap_err();
    assert!(
        format!("{refusal:?}").contains("cannot be turned off"),
        "{refusal:?}"
    );
    let view = ada.client().my_notifications().await.unwrap();
    assert!(view.rules[&EventKind::UnbookedUse].required);
    assert!(view.email_available);
    // Bad choices are refused in words, and nothing is stored.
    for bad in [
        serde_json::json!({"time_zone": "Mars/Olympus"}),
        serde_json::json!({"webhook_url": "ftp://x"}),
        serde_json::json!({"events": {"no_such_event": {"email": true}}}),
    ] {
        let (status, body) = ada
            .call(
                reqwest::Method::PUT,
                "/api/v1/me/notifications",
                Some(bad.clone()),
            )
            .await;
        assert!(status == 400 || status == 422, "{bad}: {status} {body}");
    }
    assert_eq!(ada.client().my_notifications().await.unwrap().prefs, prefs);

    // The lab stops allowing private webhooks: a job that fails goes to ada's webhook only
    // (her choice), which is private now, so suppressed.
    settings.allow_private_webhooks = false;
    admin
        .client()
        .save_notify_settings(&settings)
        .await
        .unwrap();
    let card = cards(&app).await[0].info.uuid.clone();
    let booking = ada.book(&[card], 600).await;
    let job = ada.submit(booking.id, &["/nonexistent-program"]).await;
    wait_until(
        Duration::from_secs(20),
        "the webhook message is suppressed",
        || async {
            let outbox = admin.client().outbox(None).await.unwrap();
            outbox
                .iter()
                .any(|m| {
                    m.event == "job_failed"
                        && m.status == OutboxStatus::Suppressed
                        && m.last_error
                            .as_deref()
                            .is_some_and(|e| e.contains("private network"))
                })
                .then_some(())
        },
    )
    .await;
    assert!(got.lock().unwrap().is_empty());
    // Allowed: the next one reaches it, with its facts and subject.
    settings.allow_private_webhooks = true;
    admin
        .client()
        .save_notify_settings(&settings)
        .await
        .unwrap();
    let second = ada.submit(booking.id, &["/nonexistent-program"]).await;
    let body = wait_until(
        Duration::from_secs(20),
        "the webhook gets the failure",
        || async { got.lock().unwrap().first().cloned() },
    )
    .await;
    assert_eq!(body["event"], "job_failed");
    assert_eq!(body["details"]["job_id"], second.id);
    assert!(body["subject"]
        .as_str()
        .unwrap()
        .contains(&format!("Job #{} ", second.id)));
    assert!(job.id != second.id);
    // Email was turned off for failures: none came.
    assert!(sink.messages().is_empty());

    // The hourly limit: three sent, the rest suppressed and shown to admins.
    for _ in 0..5 {
        ada.client().test_my_notifications().await.unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        "the tests are sent or suppressed",
        || async {
            let outbox = admin.client().outbox(None).await.unwrap();
            let tests: Vec<_> = outbox.iter().filter(|m| m.event == "test").collect();
            (tests.len() == 10 && tests.iter().all(|m| m.status != OutboxStatus::Pending))
                .then_some(())
        },
    )
    .await;
    let outbox = admin.client().outbox(Some("suppressed")).await.unwrap();
    assert!(outbox.iter().any(|m| m
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("limit of 3"))));
    let sent = admin.client().outbox(Some("sent")).await.unwrap();
    assert_eq!(
        sent.iter()
            .filter(|m| m.username.as_deref() == Some(MEMBER))
            .count(),
        3
    );
    // Members may not send tests to others, nor read the outbox.
    let request = TestSend {
        email: Some("x@y.example".into()),
        user: None,
    };
    assert_eq!(
        lanes_tests::refused(ada.client().notify_test(&request).await),
        403
    );
    assert_eq!(lanes_tests::refused(ada.client().outbox(None).await), 403);
    app.stop().await;
}

#[tokio::test]
async fn an_idle_warning_says_when_and_still_using_it_starts_the_watch_again() {
    let app = TestApp::spawn_configured(1, |c| c.sim.background = false).await;
    let (_mail, sink, admin, ada) = mailed(&app).await;
    admin
        .client()
        .save_policy(&Policy {
            idle_threshold_pct: 5,
            idle_window_s: 1,
            idle_release: true,
            idle_release_grace_s: 900,
            ..Default::default()
        })
        .await
        .unwrap();
    let card = cards(&app).await[0].info.uuid.clone();
    let booking = ada.book(&[card], 3600).await;
    let raw = sink.wait_for(1, Duration::from_secs(30)).await;
    let message = parse(&raw[0]);
    assert!(
        message
            .subject
            .contains(&format!("Booking #{} is idle: released at", booking.id)),
        "{}",
        message.subject
    );
    assert!(
        message.text.contains("(15 min from now)"),
        "{}",
        message.text
    );
    let url = link(&message, "Still using it");
    let done = reqwest::Client::new().post(&url).send().await.unwrap();
    assert_eq!(done.status(), 200);
    let after = ada.client().booking(booking.id).await.unwrap();
    assert!(after.in_use_at.is_some());
    let audit = admin.client().audit(&Default::default()).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "booking.in_use"));
    app.stop().await;
}

#[tokio::test]
async fn a_restart_between_enqueue_and_send_delivers_exactly_once() {
    let data = tempfile::tempdir().unwrap();
    let start = |data: &Path, url: String| {
        let data = data.to_path_buf();
        async move { lanes_tests::ServerProcess::start(&data, &url, &["--gpus", "sim:1"]).await }
    };
    // The account first, as an operator would before serving.
    let db = lanes_tests::TestDb::fresh(data.path()).await;
    let url = db.url.clone();
    lanes_tests::add_user(&url, "boss", "boss passphrase", Role::Admin).await;
    let server = start(data.path(), url.clone()).await;
    let admin = lanes_client::Client::new(&server.base)
        .login("boss", "boss passphrase")
        .await
        .unwrap()
        .0;
    let first_dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(first_dir.path(), 0);
    let port = sink.port;
    admin
        .save_notify_settings(&NotifySettings {
            smtp: Some(smtp(port)),
            ..Default::default()
        })
        .await
        .unwrap();
    let test = TestSend {
        email: Some("ops@lab.example".into()),
        user: None,
    };
    let one = admin.notify_test(&test).await.unwrap().queued;
    sink.wait_for(1, Duration::from_secs(20)).await;
    // The mail server goes away; the next message waits in the outbox...
    drop(sink);
    let two = admin.notify_test(&test).await.unwrap().queued;
    // (A server killed in the middle of an attempt leaves the message to its lease, a minute.)
    wait_until(Duration::from_secs(20), "a first attempt fails", || async {
        let outbox = admin.outbox(Some("pending")).await.unwrap();
        outbox
            .iter()
            .any(|m| m.id == two[0] && m.attempts >= 1 && m.last_error.is_some())
            .then_some(())
    })
    .await;
    // ...the server dies hard, the mail server comes back, the server starts again.
    server.kill_9();
    let second_dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(second_dir.path(), port);
    let server = start(data.path(), url.clone()).await;
    let admin = lanes_client::Client::new(&server.base)
        .login("boss", "boss passphrase")
        .await
        .unwrap()
        .0;
    // The mail server's answer is the one thing waited for.
    wait_until(
        Duration::from_secs(30),
        "a message after the restart",
        || async { (!sink.messages().is_empty()).then_some(()) },
    )
    .await;
    let received = sink.messages();
    assert_eq!(
        received.len(),
        1,
        "after the restart: {:?}",
        admin.outbox(None).await
    );
    // Exactly once: the waiting message came, and the one sent before the restart did not come
    // again.
    // Both are over in the outbox (sent is final: nothing sends them again)...
    let outbox = wait_until(
        Duration::from_secs(10),
        "both messages recorded",
        || async {
            let outbox = admin.outbox(None).await.unwrap();
            ([one[0], two[0]].iter())
                .all(|id| {
                    outbox
                        .iter()
                        .any(|m| m.id == *id && m.status != OutboxStatus::Pending)
                })
                .then_some(outbox)
        },
    )
    .await;
    for id in [one[0], two[0]] {
        let m = outbox.iter().find(|m| m.id == id).unwrap();
        assert_eq!(m.status, OutboxStatus::Sent, "{m:?}");
    }
    // ...and the mail server got the waiting one once.
    let received_again = sink.messages();
    assert_eq!(received_again.len(), 1, "{received:?}");
    assert_eq!(
        parse(&received_again[0]).message_id,
        format!("lanes-{}@lab.example", two[0])
    );
}

#[tokio::test]
async fn a_nearly_used_quota_and_the_weekly_digest_reach_the_member_once() {
    let app = TestApp::spawn(1).await;
    // The same point of the week on every run: a Monday before 08:00 has no digest yet, and a
    // booking across Sunday midnight counts only partly against this week's quota.
    midweek(&app.hooks.clock);
    let (_mail, sink, admin, ada) = mailed(&app).await;
    admin
        .client()
        .save_quotas(&lanes_types::booking::Quotas {
            default: lanes_types::booking::Quota {
                gpu_hours_per_week: Some(2.0),
                ..Default::default()
            },
            ..Default::default()
        })
        .await
        .unwrap();
    // The digest is off by email unless chosen; ada chooses it.
    let mut prefs = NotifyPrefs::default();
    prefs.events.insert(
        EventKind::WeeklyDigest,
        Channels {
            email: true,
            webhook: false,
        },
    );
    ada.client().save_my_notifications(&prefs).await.unwrap();
    // 1.8 of her 2 GPU-hours: past the 80 % warning.
    let card = cards(&app).await[0].info.uuid.clone();
    ada.book(&[card], 108 * 60).await;
    // A member of a week ago gets the digest of the week before this one.
    let week_ago = app.hooks.clock.now() - chrono::Duration::days(10);
    backdate(&app.database_url(), MEMBER, week_ago).await;
    // Every reminder due now, the digest included, without waiting for the quarter hour.
    app.hooks.reminders.run().await;
    let outbox = admin.client().outbox(None).await.unwrap();
    assert_eq!(outbox.len(), 2, "the outbox: {outbox:?}");
    // Delivery is the mail server's answer: the one wait here.
    lanes_tests::wait_until(
        Duration::from_secs(30),
        "both messages delivered",
        || async { (sink.messages().len() >= 2).then_some(()) },
    )
    .await;
    let raw = sink.messages();
    assert_eq!(raw.len(), 2);
    let subjects: Vec<String> = raw.iter().map(|r| parse(r).subject).collect();
    assert!(
        subjects
            .iter()
            .any(|s| s == "[Lanes] 1.8 of your 2.0 GPU-hours this week are booked"),
        "{subjects:?}"
    );
    let digest = raw
        .iter()
        .map(|r| parse(r))
        .find(|m| m.subject.starts_with("[Lanes] Your week from"))
        .unwrap_or_else(|| panic!("no digest in {subjects:?}"));
    assert!(digest.text.contains("GPU-hours"), "{}", digest.text);
    // Once: a later pass finds them in the outbox and queues nothing.
    app.hooks.reminders.run().await;
    let outbox = admin.client().outbox(None).await.unwrap();
    assert_eq!(outbox.len(), 2, "the outbox: {outbox:?}");
    app.stop().await;
}

/// Moves the server's clock forward to just past the next Wednesday, 12:00 UTC (the lab's zone in tests).
fn midweek(clock: &lanes_server::runtime::clock::Clock) {
    use chrono::{Datelike, Timelike};
    let now = clock.now();
    let days = (7 + 2 - i64::from(now.weekday().num_days_from_monday())) % 7;
    let noon = (now.date_naive() + chrono::Duration::days(days))
        .and_hms_opt(12, 0, 0)
        .expect("noon is a time")
        .and_utc();
    let noon = if noon <= now {
        noon + chrono::Duration::days(7)
    } else {
        noon
    };
    // A second past: the clock moves by whole milliseconds.
    clock.advance(noon - now + chrono::Duration::seconds(1));
    debug_assert_eq!(
        (clock.now().weekday(), clock.now().hour()),
        (chrono::Weekday::Wed, 12)
    );
}

/// Makes an account look older than it is (as made at `at`).
async fn backdate(url: &str, username: &str, at: chrono::DateTime<Utc>) {
    let sql = "UPDATE users SET created_at = $1 WHERE username = $2";
    let at = at.to_rfc3339();
    if url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        sqlx::query(sql)
            .bind(&at)
            .bind(username)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::query(sql)
            .bind(&at)
            .bind(username)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

#[tokio::test]
async fn a_member_who_chose_chinese_is_written_to_in_chinese_and_a_link_page_answers_in_the_browsers_language(
) {
    let app = TestApp::spawn(1).await;
    let mail = tempfile::tempdir().unwrap();
    let sink = Sink::start(mail.path(), 0);
    let (admin, ada) = people(&app).await;
    admin
        .client()
        .save_notify_settings(&NotifySettings {
            lab_name: "视觉实验室".into(),
            smtp: Some(smtp(sink.port)),
            ..Default::default()
        })
        .await
        .unwrap();
    ada.client()
        .set_language(&lanes_types::account::LanguageChoice {
            language: "zh".into(),
        })
        .await
        .unwrap();
    ada.client().test_my_notifications().await.unwrap();
    let raw = sink.wait_for(1, Duration::from_secs(20)).await;
    let message = parse(&raw[0]);
    assert_eq!(message.subject, "[视觉实验室] 测试消息");
    assert!(
        message.text.contains("这是来自 视觉实验室 的测试消息"),
        "{}",
        message.text
    );
    assert!(message.html.contains("由 Lanes 发送"), "{}", message.html);

    // Whoever opens a link reads its page in their browser's language.
    for (accept, words) in [("zh-CN", "此链接无效"), ("en", "This link is not valid")] {
        let page = app
            .client
            .get(app.url("/act/not-a-secret"))
            .header("accept-language", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 404);
        let html = page.text().await.unwrap();
        assert!(html.contains(words), "{html}");
    }
    app.stop().await;
}

/// An endpoint that answers `status` after `delay`, counting requests and the most in flight.
async fn counting_endpoint(
    status: u16,
    delay: Duration,
) -> (
    String,
    std::sync::Arc<(
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
    )>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    // (requests, in flight now, most in flight)
    let counts = std::sync::Arc::new((
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    ));
    let seen = counts.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let seen = seen.clone();
            async move {
                seen.0.fetch_add(1, SeqCst);
                let now = seen.1.fetch_add(1, SeqCst) + 1;
                seen.2.fetch_max(now, SeqCst);
                tokio::time::sleep(delay).await;
                seen.1.fetch_sub(1, SeqCst);
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), counts)
}

/// One member cannot flood or stall notifications: the hourly limit counts every request
/// (retries of a failing endpoint included), test sends are limited (429 in words), and an
/// endpoint that never answers holds two of the deliverer's slots, never all of them.
#[tokio::test]
async fn one_member_can_neither_flood_an_endpoint_nor_stall_everyones_messages() {
    use std::sync::atomic::Ordering::SeqCst;
    let app = TestApp::spawn(1).await;
    let (admin, ada) = people(&app).await;
    admin
        .client()
        .save_notify_settings(&NotifySettings {
            per_user_per_hour: 4,
            allow_private_webhooks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    // A failing endpoint: each message is retried (3 attempts in tests), but four requests in
    // the hour is all ada's messages may make.
    let (failing, hits) = counting_endpoint(500, Duration::ZERO).await;
    let prefs = |url: &str| NotifyPrefs {
        webhook_url: Some(url.into()),
        ..Default::default()
    };
    ada.client()
        .save_my_notifications(&prefs(&failing))
        .await
        .unwrap();
    for _ in 0..4 {
        ada.client().test_my_notifications().await.unwrap();
    }
    wait_until(
        Duration::from_secs(30),
        "every test message is over",
        || async {
            let outbox = admin.client().outbox(None).await.unwrap();
            outbox
                .iter()
                .all(|m| m.status != OutboxStatus::Pending)
                .then_some(())
        },
    )
    .await;
    assert_eq!(hits.0.load(SeqCst), 4, "requests to the failing endpoint");

    // Test sends are limited: ten messages in ten minutes, then 429 with a reason.
    let mut accepted = 4;
    let refusal = loop {
        let (status, body) = ada
            .call(reqwest::Method::POST, "/api/v1/me/notifications/test", None)
            .await;
        if status != 200 && status != 201 && status != 202 {
            break (status, body);
        }
        accepted += 1;
        assert!(accepted <= 10, "test sends are not limited");
    };
    assert_eq!(refusal.0, 429, "{refusal:?}");
    let body: serde_json::Value = serde_json::from_str(&refusal.1).unwrap();
    assert_eq!(body["error"], "too_many_requests");
    assert!(
        body["message"].as_str().unwrap().contains("test messages"),
        "{body}"
    );

    // An endpoint that never answers in time holds at most two of the deliverer's slots.
    let (hanging, stalled) = counting_endpoint(200, Duration::from_secs(30)).await;
    let bob = Session {
        app: &app,
        cookie: app.sign_up("lanes-test-bob", Role::User).await,
    };
    bob.client()
        .save_my_notifications(&prefs(&hanging))
        .await
        .unwrap();
    for _ in 0..6 {
        bob.client().test_my_notifications().await.unwrap();
    }
    wait_until(
        Duration::from_secs(10),
        "the hanging endpoint is reached",
        || async { (stalled.0.load(SeqCst) >= 2).then_some(()) },
    )
    .await;
    // A pass of the deliverer claims everything that may go now: bob's other four stay
    // queued, never attempted, while his two hang.
    app.hooks.deliverer.run().await;
    let outbox = admin.client().outbox(None).await.unwrap();
    let attempted: Vec<u32> = (outbox.iter())
        .filter(|m| m.username.as_deref() == Some("lanes-test-bob"))
        .map(|m| m.attempts)
        .collect();
    assert_eq!(attempted.len(), 6, "{outbox:?}");
    assert_eq!(
        attempted.iter().filter(|a| **a > 0).count(),
        2,
        "bob's messages attempted while two hang: {outbox:?}"
    );
    assert_eq!(
        stalled.2.load(SeqCst),
        2,
        "most requests in flight to one endpoint"
    );
    app.stop().await;
}

/// A member adds their own address: nothing goes to it, and it is not theirs, until they open
/// the link sent to it; the link works once; a malformed address is refused with nothing sent;
/// removing the address takes effect at once.
#[tokio::test]
async fn a_member_adds_their_own_address_and_it_is_used_once_confirmed() {
    let app = TestApp::spawn(1).await;
    let (_mail, sink, admin, ada) = mailed(&app).await;
    let client = ada.client();
    let bad = client
        .change_email(&lanes_types::account::EmailChange {
            email: Some("ada@lab.example\r\nBcc: everyone@lab.example".into()),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.status().map(|s| s.as_u16()), Some(422), "{bad:?}");
    let asked = client
        .change_email(&lanes_types::account::EmailChange {
            email: Some("ada.new@lab.example".into()),
        })
        .await
        .unwrap();
    assert_eq!(
        asked.confirm_sent_to.as_deref(),
        Some("ada.new@lab.example")
    );
    // The address in use is still the one the admin gave until the link is opened.
    assert_eq!(asked.email.as_deref(), Some("ada@lab.example"));
    assert_eq!(
        client.me().await.unwrap().email.as_deref(),
        Some("ada@lab.example")
    );
    let raw = sink.wait_for(1, Duration::from_secs(30)).await;
    let mail = parse(&raw[0]);
    assert_eq!(mail.to, "ada.new@lab.example");
    let url = link(&mail, "Confirm this address");
    let anonymous = reqwest::Client::new();
    // Opening it only asks (a mail scanner that follows links confirms nothing).
    let page = anonymous.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("ada.new@lab.example"));
    assert_eq!(
        client.me().await.unwrap().email.as_deref(),
        Some("ada@lab.example")
    );
    let done = anonymous.post(&url).send().await.unwrap();
    assert_eq!(done.status(), 200);
    assert!(done
        .text()
        .await
        .unwrap()
        .contains("Your messages now go to ada.new@lab.example"));
    assert_eq!(
        client.me().await.unwrap().email.as_deref(),
        Some("ada.new@lab.example")
    );
    assert_eq!(anonymous.post(&url).send().await.unwrap().status(), 410);
    // Audited as hers: the request and the confirmation.
    let audit = admin.client().audit(&Default::default()).await.unwrap();
    let hers: Vec<&str> = audit
        .iter()
        .filter(|a| a.action == "user.email" && a.actor.as_deref() == Some(MEMBER))
        .map(|a| a.detail.as_str())
        .collect();
    assert_eq!(hers.len(), 2, "{hers:?}");
    // Removing it needs no link.
    let removed = client
        .change_email(&lanes_types::account::EmailChange { email: None })
        .await
        .unwrap();
    assert_eq!((removed.email, removed.confirm_sent_to), (None, None));
    assert_eq!(client.me().await.unwrap().email, None);
    app.stop().await;
}
