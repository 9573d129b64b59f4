//! Chat channels against local stand-ins of each service: one test per service and language.
//! Each sink checks the request as the service documents it (method, path, field names and
//! types, the signature with its algorithm and timestamp window, the access token) and answers
//! as the service does, success or its documented refusal. A member saves their channel, sends
//! a test from the form and reads the service's answer; then a job of theirs with a hostile
//! name fails, and the message that reaches the service carries the name literally in that
//! format's own way, in the member's language, with the portal's button. A wrong secret is
//! answered as the service answers it, and the message fails at once instead of being retried.

use base64::Engine;
use hmac::{KeyInit, Mac};
use lanes_server::accounts::Role;
use lanes_tests::{cards, wait_until, Session, TestApp};
use lanes_types::enforcement::WebhookFormat;
use lanes_types::notify::{ChannelTest, NotifyPrefs, NotifySettings, OutboxStatus};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "SEC-lab-signing-secret";
const TOKEN: &str = "syt_bot_access_token";
/// A job name that would ping, disguise a link, embed an image or mention everyone in any
/// chat that read it as markup.
const HOSTILE: &str = "<!channel> *bold* [login](http://evil.example) ![i](http://evil.example/i.png) <at user_id=\"all\"></at> <@everyone> @room <b>x</b> `c`";

/// One request as the sink saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    authorization: Option<String>,
    body: Value,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn hmac_b64(key: &[u8], message: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

/// What the service answers this request: its status and body. The checks each service makes
/// before it takes a message, as its documentation gives them.
fn answer(format: WebhookFormat, seen: &Seen) -> (u16, String) {
    let b = &seen.body;
    let ok = |status: u16, body: Value| (status, body.to_string());
    match format {
        WebhookFormat::Feishu => {
            // https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot: the signature
            // is base64(HMAC-SHA256 keyed by "timestamp\nsecret" over nothing); the timestamp in
            // seconds, within an hour of the server's time.
            assert_eq!(seen.method, "POST");
            // A bot with signing on refuses a message without a signature the same way.
            let ts = b["timestamp"].as_str().unwrap_or_default();
            let ts_n: i64 = ts.parse().unwrap_or(0);
            let signed = b["sign"].as_str().unwrap_or_default();
            if (now_s() - ts_n).abs() > 3600
                || signed != hmac_b64(format!("{ts}\n{SECRET}").as_bytes(), b"")
            {
                return ok(
                    200,
                    json!({"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time", "data": {}}),
                );
            }
            assert_eq!(b["msg_type"], "interactive");
            let card = &b["card"];
            assert_eq!(card["header"]["title"]["tag"], "plain_text");
            assert!(card["header"]["title"]["content"].is_string());
            for element in card["elements"].as_array().unwrap() {
                match element["tag"].as_str().unwrap() {
                    "div" => assert_eq!(element["text"]["tag"], "plain_text"),
                    "action" => {
                        for button in element["actions"].as_array().unwrap() {
                            assert_eq!(button["tag"], "button");
                            assert_eq!(button["text"]["tag"], "plain_text");
                            assert!(button["url"].as_str().unwrap().starts_with("http"));
                        }
                    }
                    other => panic!("unexpected element {other}"),
                }
            }
            ok(200, json!({"code": 0, "msg": "success", "data": {}}))
        }
        WebhookFormat::Dingtalk => {
            // https://open.dingtalk.com/document/robots/customize-robot-security-settings:
            // timestamp in ms within an hour; sign = urlencode(base64(HMAC-SHA256 keyed by the
            // secret over "timestamp\nsecret")).
            assert_eq!(seen.method, "POST");
            let q = |k: &str| {
                seen.query
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(q("access_token").as_deref(), Some("ding-token"));
            let ts = q("timestamp").unwrap_or_default();
            let ts_n: i64 = ts.parse().unwrap_or(0);
            let sign = q("sign").unwrap_or_default();
            if (now_s() * 1000 - ts_n).abs() > 3_600_000
                || sign != hmac_b64(SECRET.as_bytes(), format!("{ts}\n{SECRET}").as_bytes())
            {
                return ok(
                    200,
                    json!({"errcode": 310000, "errmsg": "sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"}),
                );
            }
            let kind = b["msgtype"].as_str().unwrap();
            let card = &b[kind];
            assert!(card["title"].is_string() && card["text"].is_string(), "{b}");
            if kind == "actionCard" {
                for button in card["btns"].as_array().unwrap() {
                    assert!(button["title"].is_string());
                    assert!(button["actionURL"].as_str().unwrap().starts_with("http"));
                }
            } else {
                assert_eq!(kind, "markdown");
            }
            assert_eq!(b["at"]["isAtAll"], false);
            ok(200, json!({"errcode": 0, "errmsg": "ok"}))
        }
        WebhookFormat::Wecom => {
            // https://developer.work.weixin.qq.com/document/path/91770: a key in the URL;
            // markdown content of at most 4096 bytes.
            assert_eq!(seen.method, "POST");
            assert_eq!(seen.path, "/cgi-bin/webhook/send");
            let key = seen
                .query
                .iter()
                .find(|(n, _)| n == "key")
                .map(|(_, v)| v.as_str());
            if key != Some("wecom-key") {
                return ok(
                    200,
                    json!({"errcode": 93000, "errmsg": "invalid webhook url"}),
                );
            }
            assert_eq!(b["msgtype"], "markdown");
            let content = b["markdown"]["content"].as_str().unwrap();
            assert!(content.len() <= 4096);
            ok(200, json!({"errcode": 0, "errmsg": "ok"}))
        }
        WebhookFormat::Slack => {
            // https://api.slack.com/messaging/webhooks: `text` (the fallback) and blocks.
            assert_eq!(seen.method, "POST");
            assert!(b["text"].is_string());
            for block in b["blocks"].as_array().unwrap() {
                match block["type"].as_str().unwrap() {
                    "section" => assert_eq!(block["text"]["type"], "mrkdwn"),
                    "actions" => {
                        for e in block["elements"].as_array().unwrap() {
                            assert_eq!(e["type"], "button");
                            assert_eq!(e["text"]["type"], "plain_text");
                        }
                    }
                    other => panic!("unexpected block {other}"),
                }
            }
            (200, "ok".into())
        }
        WebhookFormat::Teams => {
            // Teams workflows ("When a Teams webhook request is received"): a message with an
            // Adaptive Card attachment; 202 Accepted.
            assert_eq!(seen.method, "POST");
            assert_eq!(b["type"], "message");
            let attachment = &b["attachments"][0];
            assert_eq!(
                attachment["contentType"],
                "application/vnd.microsoft.card.adaptive"
            );
            let card = &attachment["content"];
            assert_eq!(card["type"], "AdaptiveCard");
            assert_eq!(
                card["$schema"],
                "http://adaptivecards.io/schemas/adaptive-card.json"
            );
            assert!(card["version"].is_string());
            for action in card["actions"].as_array().unwrap() {
                assert_eq!(action["type"], "Action.OpenUrl");
            }
            (202, String::new())
        }
        WebhookFormat::Matrix => {
            // https://spec.matrix.org/v1.11/client-server-api/#put_matrixclientv3roomsroomidsendeventtypetxnid
            assert_eq!(seen.method, "PUT");
            let prefix = "/_matrix/client/v3/rooms/!lab:matrix.example/send/m.room.message/";
            assert!(seen.path.starts_with(prefix), "{}", seen.path);
            assert!(seen.path.len() > prefix.len(), "a transaction id");
            if seen.authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
                return ok(
                    401,
                    json!({"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid access token passed."}),
                );
            }
            assert_eq!(b["msgtype"], "m.text");
            assert!(b["body"].is_string());
            assert_eq!(b["format"], "org.matrix.custom.html");
            assert!(b["formatted_body"].is_string());
            ok(200, json!({"event_id": "$ev1:matrix.example"}))
        }
        WebhookFormat::Ntfy => {
            // https://docs.ntfy.sh/publish/#publish-as-json: JSON at the root, topic inside.
            assert_eq!(seen.method, "POST");
            assert_eq!(seen.path, "/");
            if seen.authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
                return ok(
                    403,
                    json!({"code": 40301, "http": 403, "error": "forbidden"}),
                );
            }
            assert_eq!(b["topic"], "lab-gpus");
            assert!(b["title"].is_string() && b["message"].is_string());
            let actions = b["actions"].as_array().unwrap();
            assert!(actions.len() <= 3);
            for a in actions {
                assert_eq!(a["action"], "view");
            }
            ok(
                200,
                json!({"id": "sPs71M8A2T", "time": now_s(), "event": "message", "topic": "lab-gpus"}),
            )
        }
        WebhookFormat::Json => unreachable!(),
    }
}

/// A stand-in for `format`'s service on loopback; the URL a member would paste, and what it saw.
async fn sink(format: WebhookFormat) -> (String, Log) {
    let log: Log = Arc::default();
    let keep = log.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let keep = keep.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().map(url_pairs).unwrap_or_default(),
                authorization: (parts.headers.get("authorization"))
                    .map(|v| v.to_str().unwrap().to_string()),
                body: serde_json::from_slice(&bytes).expect("a JSON body"),
            };
            assert_eq!(
                parts
                    .headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap()),
                Some("application/json")
            );
            let (status, text) = answer(format, &seen);
            keep.lock().unwrap().push(seen);
            (axum::http::StatusCode::from_u16(status).unwrap(), text)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = match format {
        WebhookFormat::Feishu => format!("http://{addr}/open-apis/bot/v2/hook/feishu-hook"),
        WebhookFormat::Dingtalk => format!("http://{addr}/robot/send?access_token=ding-token"),
        WebhookFormat::Wecom => format!("http://{addr}/cgi-bin/webhook/send?key=wecom-key"),
        WebhookFormat::Slack => format!("http://{addr}/services/T000/B000/XXXX"),
        WebhookFormat::Teams => format!("http://{addr}/workflows/abc/triggers/manual/paths/invoke"),
        WebhookFormat::Matrix => {
            format!("http://{addr}/_matrix/client/v3/rooms/!lab:matrix.example/send/m.room.message")
        }
        WebhookFormat::Ntfy => format!("http://{addr}/lab-gpus"),
        WebhookFormat::Json => unreachable!(),
    };
    (url, log)
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

fn secret_of(format: WebhookFormat) -> Option<String> {
    match format {
        WebhookFormat::Feishu | WebhookFormat::Dingtalk => Some(SECRET.into()),
        WebhookFormat::Matrix | WebhookFormat::Ntfy => Some(TOKEN.into()),
        _ => None,
    }
}

/// The words of a message as the service shows them, whatever its layout.
fn words(format: WebhookFormat, body: &Value) -> String {
    match format {
        WebhookFormat::Feishu => body["card"].to_string(),
        WebhookFormat::Dingtalk => body.to_string(),
        WebhookFormat::Wecom => body["markdown"]["content"].as_str().unwrap().to_string(),
        WebhookFormat::Slack => body["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .to_string(),
        WebhookFormat::Teams => body["attachments"][0]["content"].to_string(),
        WebhookFormat::Matrix => body["formatted_body"].as_str().unwrap().to_string(),
        WebhookFormat::Ntfy => format!("{} {}", body["title"], body["message"]),
        WebhookFormat::Json => unreachable!(),
    }
}

/// The hostile name as it reached the service: literal, in the format's own way.
fn hostile_is_literal(format: WebhookFormat, body: &Value) {
    let text = words(format, body);
    match format {
        // Plain-text fields: the name as it is, and never in a field read as markup.
        WebhookFormat::Feishu => {
            let title = body["card"]["header"]["title"]["content"].as_str().unwrap();
            assert!(title.contains(HOSTILE), "the name as it is: {title}");
            assert!(!text.contains("lark_md"), "{text}");
        }
        WebhookFormat::Teams => {
            let title = &body["attachments"][0]["content"]["body"][0];
            assert_eq!(title["type"], "RichTextBlock");
            assert!(
                title["inlines"][0]["text"]
                    .as_str()
                    .unwrap()
                    .contains(HOSTILE),
                "{title}"
            );
            assert!(!text.contains("\"TextBlock\""), "{text}");
        }
        WebhookFormat::Ntfy => {
            assert!(body.get("markdown").is_none());
            assert!(text.contains("<!channel>"), "the name as it is: {text}");
        }
        WebhookFormat::Slack => {
            assert!(
                !text.contains("<!channel>") && text.contains("&lt;!channel&gt;"),
                "{text}"
            );
            assert!(!text.contains("<@everyone>"), "{text}");
        }
        WebhookFormat::Dingtalk | WebhookFormat::Wecom => {
            let markdown = match format {
                WebhookFormat::Dingtalk => body["actionCard"]["text"]
                    .as_str()
                    .or(body["markdown"]["text"].as_str())
                    .unwrap()
                    .to_string(),
                _ => text.clone(),
            };
            for raw in [
                "[login](http",
                "![i](",
                "<at user_id",
                "<@everyone>",
                "<b>",
                "`c`",
                "*bold*",
            ] {
                assert!(!markdown.contains(raw), "{raw} in {markdown}");
            }
            assert!(markdown.contains("\\[login\\]"), "{markdown}");
        }
        WebhookFormat::Matrix => {
            assert!(
                !text.contains("<b>x</b>") && text.contains("&lt;b&gt;x&lt;/b&gt;"),
                "{text}"
            );
            assert_eq!(body["m.mentions"], json!({}), "mentions nobody");
        }
        WebhookFormat::Json => unreachable!(),
    }
}

fn locale(language: &str) -> Value {
    let text = match language {
        "zh" => include_str!("../../app/locales/zh.json"),
        _ => include_str!("../../app/locales/en.json"),
    };
    serde_json::from_str(text).unwrap()
}

async fn member<'a>(app: &'a TestApp, language: &str) -> Session<'a> {
    lanes_tests::ensure_unix_account(crate::notify::MEMBER);
    let session = Session {
        app,
        cookie: app.sign_up(crate::notify::MEMBER, Role::User).await,
    };
    session
        .client()
        .set_language(&lanes_types::account::LanguageChoice {
            language: language.into(),
        })
        .await
        .unwrap();
    session
}

async fn a_member_reads_good_messages_in(format: WebhookFormat, language: &str) {
    let app = TestApp::spawn(1).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let lab = if language == "zh" {
        "视觉实验室"
    } else {
        "Vision Lab"
    };
    admin
        .client()
        .save_notify_settings(&NotifySettings {
            lab_name: lab.into(),
            allow_private_webhooks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let ada = member(&app, language).await;
    let (url, seen) = sink(format).await;
    let words_of = locale(language);
    let said = |key: &str| words_of["mail"][key].as_str().unwrap().to_string();

    // A wrong secret first, where the service checks one: the service's refusal is shown.
    if let Some(secret) = secret_of(format) {
        ada.client()
            .save_my_notifications(&NotifyPrefs {
                webhook_url: Some(url.clone()),
                webhook_format: format,
                webhook_secret: Some(format!("{secret}-wrong")),
                ..Default::default()
            })
            .await
            .unwrap();
        let refused = ada
            .client()
            .test_my_channel(&ChannelTest::default())
            .await
            .unwrap();
        assert!(!refused.delivered, "{refused:?}");
        let problem = refused.problem.clone().unwrap();
        assert!(
            ["19021", "310000", "M_UNKNOWN_TOKEN", "40301"]
                .iter()
                .any(|c| problem.contains(c)),
            "the service's own words: {problem}"
        );
    }
    // Saved with the right secret; the secret is never read back.
    ada.client()
        .save_my_notifications(&NotifyPrefs {
            webhook_url: Some(url.clone()),
            webhook_format: format,
            webhook_secret: secret_of(format),
            ..Default::default()
        })
        .await
        .unwrap();
    let view = ada.client().my_notifications().await.unwrap();
    assert_eq!(view.prefs.webhook_secret, None);
    assert_eq!(view.prefs.webhook_secret_set, secret_of(format).is_some());
    let (_, raw) = ada
        .call(reqwest::Method::GET, "/api/v1/me/notifications", None)
        .await;
    assert!(!raw.contains(SECRET) && !raw.contains(TOKEN), "{raw}");

    // "Send a test": the service's answer, as it gave it.
    let before = seen.lock().unwrap().len();
    let answer = ada
        .client()
        .test_my_channel(&ChannelTest::default())
        .await
        .unwrap();
    assert!(answer.delivered, "{answer:?}");
    let expected_status = if format == WebhookFormat::Teams {
        202
    } else {
        200
    };
    assert_eq!(answer.status, Some(expected_status));
    match format {
        WebhookFormat::Feishu => assert!(answer.answer.contains("\"code\":0"), "{}", answer.answer),
        WebhookFormat::Dingtalk | WebhookFormat::Wecom => {
            assert!(answer.answer.contains("\"errcode\":0"))
        }
        WebhookFormat::Slack => assert_eq!(answer.answer, "ok"),
        WebhookFormat::Matrix => assert!(answer.answer.contains("event_id")),
        WebhookFormat::Ntfy => assert!(answer.answer.contains("sPs71M8A2T")),
        _ => {}
    }
    let test = seen.lock().unwrap()[before].clone();
    let text = words(format, &test.body);
    assert!(text.contains(&said("test_subject")), "{text}");
    assert!(text.contains(lab), "{text}");

    // A job with a hostile name fails: the message carries it literally, in the member's
    // language, with the portal's button.
    let card = cards(&app).await[0].info.uuid.clone();
    let booking = ada.book(&[card], 600).await;
    let mut request = Session::job_request(booking.id, &["/nonexistent-program"]);
    request.name = Some(HOSTILE.into());
    let job = ada.client().submit_job(&request).await.unwrap();
    let message = wait_until(
        Duration::from_secs(30),
        "the failure reaches the service",
        || async {
            let log = seen.lock().unwrap();
            log.iter()
                .skip(before + 1)
                .find(|s| words(format, &s.body).contains(&format!("#{}", job.id)))
                .cloned()
        },
    )
    .await;
    hostile_is_literal(format, &message.body);
    let text = words(format, &message.body);
    let failed = said("verb_failed");
    assert!(text.contains(&failed), "{failed} in {text}");
    let open = said("open_link").replace("{{ lab }}", lab);
    assert!(
        message.body.to_string().contains(&open),
        "{open} in {}",
        message.body
    );
    // Recorded as sent once the service's answer is read (just after the sink saw it).
    wait_until(
        Duration::from_secs(10),
        "the outbox records it sent",
        || async {
            let outbox = admin.client().outbox(None).await.ok()?;
            outbox
                .iter()
                .any(|m| m.event == "job_failed" && m.status == OutboxStatus::Sent)
                .then_some(())
        },
    )
    .await;

    // A secret the service refuses: the message fails at once, with the service's words.
    if let Some(secret) = secret_of(format) {
        ada.client()
            .save_my_notifications(&NotifyPrefs {
                webhook_url: Some(url.clone()),
                webhook_format: format,
                webhook_secret: Some(format!("{secret}-revoked")),
                ..Default::default()
            })
            .await
            .unwrap();
        ada.submit(booking.id, &["/nonexistent-program"]).await;
        let failed = wait_until(
            Duration::from_secs(30),
            "the refused message fails",
            || async {
                let outbox = admin.client().outbox(None).await.unwrap();
                outbox
                    .into_iter()
                    .find(|m| m.event == "job_failed" && m.status == OutboxStatus::Failed)
            },
        )
        .await;
        assert_eq!(failed.attempts, 1, "not retried: {failed:?}");
        assert!(failed.last_error.unwrap().contains("the service answered"));
    }
    app.stop().await;
}

macro_rules! chat_tests {
    ($($name:ident: $format:ident, $language:literal;)*) => {$(
        #[tokio::test]
        async fn $name() {
            a_member_reads_good_messages_in(WebhookFormat::$format, $language).await;
        }
    )*};
}

chat_tests! {
    feishu_in_english: Feishu, "en";
    feishu_in_chinese: Feishu, "zh";
    dingtalk_in_english: Dingtalk, "en";
    dingtalk_in_chinese: Dingtalk, "zh";
    wecom_in_english: Wecom, "en";
    wecom_in_chinese: Wecom, "zh";
    slack_in_english: Slack, "en";
    slack_in_chinese: Slack, "zh";
    teams_in_english: Teams, "en";
    teams_in_chinese: Teams, "zh";
    matrix_in_english: Matrix, "en";
    matrix_in_chinese: Matrix, "zh";
    ntfy_in_english: Ntfy, "en";
    ntfy_in_chinese: Ntfy, "zh";
}

/// The lab's channel: an admin tries the form's values before saving them and reads the
/// service's answer; a member may not; the saved secret is never read back, and is not handed
/// to a different URL.
#[tokio::test]
async fn the_lab_channel_is_tested_before_it_is_saved_and_keeps_its_secret() {
    let app = TestApp::spawn(1).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let ada = member(&app, "en").await;
    let (url, seen) = sink(WebhookFormat::Feishu).await;
    let test = ChannelTest {
        webhook_url: Some(url.clone()),
        webhook_format: Some(WebhookFormat::Feishu),
        webhook_secret: Some(SECRET.into()),
    };
    let answer = admin.client().test_lab_channel(&test).await.unwrap();
    assert!(answer.delivered, "{answer:?}");
    assert!(
        seen.lock().unwrap()[0].body["card"]["header"]["title"]["content"]
            .as_str()
            .unwrap()
            .contains("a test of the lab channel")
    );
    assert_eq!(
        lanes_tests::refused(ada.client().test_lab_channel(&test).await),
        403
    );
    // Saved; read back without the secret.
    let mut policy = admin.client().policy().await.unwrap();
    policy.webhook_url = Some(url.clone());
    policy.webhook_format = WebhookFormat::Feishu;
    policy.webhook_secret = Some(SECRET.into());
    let saved = admin.client().save_policy(&policy).await.unwrap();
    assert_eq!(
        (saved.webhook_secret, saved.webhook_secret_set),
        (None, true)
    );
    let (_, raw) = admin
        .call(reqwest::Method::GET, "/api/v1/policy", None)
        .await;
    assert!(!raw.contains(SECRET), "{raw}");
    // A save without the secret keeps it: the saved channel still signs.
    let mut again = admin.client().policy().await.unwrap();
    again.idle_threshold_pct = 7;
    admin.client().save_policy(&again).await.unwrap();
    let answer = admin
        .client()
        .test_lab_channel(&ChannelTest::default())
        .await
        .unwrap();
    assert!(answer.delivered, "{answer:?}");
    // A new URL is not handed the old URL's secret.
    let (other, other_seen) = sink(WebhookFormat::Feishu).await;
    let answer = admin
        .client()
        .test_lab_channel(&ChannelTest {
            webhook_url: Some(other),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!answer.delivered, "{answer:?}");
    assert!(other_seen.lock().unwrap()[0].body.get("sign").is_none());
    // Matrix without a token is refused in words before anything is sent.
    let (status, body) = admin
        .call(
            reqwest::Method::POST,
            "/api/v1/policy/channel-test",
            Some(json!({"webhook_url": "http://127.0.0.1:9/x", "webhook_format": "matrix"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("send endpoint"), "{body}");
    app.stop().await;
}
