//! Chat services' own message formats: a message (a title, its lines, its link buttons) laid
//! out as each service renders best — Slack blocks, a Feishu/Lark interactive card, a DingTalk
//! action card, WeCom markdown, a Teams Adaptive Card, Matrix HTML, an ntfy notification with
//! actions — signed the way the service checks (Feishu, DingTalk), and the service's answer
//! read the way it means it (Feishu, DingTalk and WeCom answer HTTP 200 with an error code in
//! the body).
//!
//! Whatever a member controls (a job's name, a note) reaches the title and lines; each format
//! keeps it literal in its own way: a plain-text field where the service has one (Feishu's
//! `plain_text`, Teams' `TextRun`, ntfy's message), its markup's escaping where it has none
//! (Slack's `&<>`, markdown's backslashes, Matrix's HTML), and no mentions ever (Matrix's
//! `m.mentions` empty, DingTalk's `at` nobody). Links are ours.

use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{KeyInit, Mac};
use lanes_types::enforcement::WebhookFormat;
use serde_json::{json, Value};

/// A message for a chat: what it is about, its lines, and its buttons `(label, url)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chat {
    pub title: String,
    pub lines: Vec<String>,
    pub links: Vec<(String, String)>,
}

/// One request to a service.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    pub method: reqwest::Method,
    pub url: String,
    /// Besides `Content-Type: application/json`.
    pub bearer: Option<String>,
    pub body: Value,
}

/// How a service took a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Refused for now (its rate limit, its own trouble): worth another attempt.
    Later(String),
    /// Refused for what was sent or where (a wrong signature, a wrong key, a keyword missing):
    /// another attempt would be refused the same way.
    Refused(String),
}

/// The request that posts `chat` to a chat service `format` at `url`, signed with `secret`
/// where the service signs. `txn` names this message for services that de-duplicate (Matrix's
/// transaction id): the same message sent again carries the same one. `None` for
/// [`WebhookFormat::Json`], which is not a chat format.
pub fn request(
    format: WebhookFormat,
    url: &str,
    secret: Option<&str>,
    chat: &Chat,
    now: DateTime<Utc>,
    txn: &str,
) -> Option<Outgoing> {
    let post = |url: String, body: Value| Outgoing {
        method: reqwest::Method::POST,
        url,
        bearer: None,
        body,
    };
    Some(match format {
        WebhookFormat::Json => return None,
        WebhookFormat::Slack => post(url.into(), slack(chat)),
        WebhookFormat::Feishu => {
            let mut body = feishu(chat);
            if let Some(secret) = secret {
                let timestamp = now.timestamp().to_string();
                body["timestamp"] = json!(timestamp);
                body["sign"] = json!(feishu_sign(&timestamp, secret));
            }
            post(url.into(), body)
        }
        WebhookFormat::Dingtalk => {
            let mut url = url.to_string();
            if let Some(secret) = secret {
                let timestamp = now.timestamp_millis().to_string();
                if let Ok(mut parsed) = reqwest::Url::parse(&url) {
                    parsed
                        .query_pairs_mut()
                        .append_pair("timestamp", &timestamp)
                        .append_pair("sign", &dingtalk_sign(&timestamp, secret));
                    url = parsed.into();
                }
            }
            post(url, dingtalk(chat))
        }
        WebhookFormat::Wecom => post(url.into(), wecom(chat)),
        WebhookFormat::Teams => post(url.into(), teams(chat)),
        WebhookFormat::Matrix => Outgoing {
            method: reqwest::Method::PUT,
            url: format!("{}/{}", url.trim_end_matches('/'), urlencode(txn)),
            bearer: secret.map(str::to_string),
            body: matrix(chat),
        },
        WebhookFormat::Ntfy => {
            let (base, topic) = ntfy_topic(url);
            Outgoing {
                method: reqwest::Method::POST,
                url: base,
                bearer: secret.map(str::to_string),
                body: ntfy(chat, &topic),
            }
        }
    })
}

/// What a service's answer means: its HTTP status, and for services that answer errors as 200
/// with a code in the body, that code.
pub fn verdict(format: WebhookFormat, status: u16, body: &str) -> Verdict {
    let said = || {
        let body = body.trim();
        match body.is_empty() {
            true => format!("the service answered {status}"),
            false => format!("the service answered {status}: {}", clip(body, 300)),
        }
    };
    if status == 429 || status >= 500 || status == 408 {
        return Verdict::Later(said());
    }
    if !(200..300).contains(&status) {
        return Verdict::Refused(said());
    }
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    // (the field with the code, codes that mean "later")
    let coded: Option<(&[&str], &[i64])> = match format {
        // Feishu: 9499 and 11232 are its rate limits; an old bot answers `StatusCode`.
        WebhookFormat::Feishu => Some((&["code", "StatusCode"], &[9499, 11232])),
        // DingTalk: 130101 is "too many messages a minute", -1 "busy".
        WebhookFormat::Dingtalk => Some((&["errcode"], &[130101, -1])),
        // WeCom: 45009 is its frequency limit, -1 "busy".
        WebhookFormat::Wecom => Some((&["errcode"], &[45009, -1])),
        _ => None,
    };
    let Some((fields, later)) = coded else {
        return Verdict::Delivered;
    };
    let code = fields.iter().find_map(|f| parsed[*f].as_i64());
    match code {
        Some(0) => Verdict::Delivered,
        Some(code) if later.contains(&code) => Verdict::Later(said()),
        Some(_) => Verdict::Refused(said()),
        None => Verdict::Refused(format!("{} (no code in it)", said())),
    }
}

/// At most `n` characters of `s`, marked where cut.
pub fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

fn urlencode(s: &str) -> String {
    reqwest::Url::parse("x:/")
        .map(|mut u| {
            u.path_segments_mut()
                .map(|mut p| {
                    p.push(s);
                })
                .ok();
            u.path().trim_start_matches('/').to_string()
        })
        .unwrap_or_default()
}

/// `base64(HMAC-SHA256(key = timestamp + "\n" + secret, message = ""))`: Feishu's and Lark's
/// custom-bot signature (the key is the string to sign, the message empty), timestamp in
/// seconds.
pub fn feishu_sign(timestamp: &str, secret: &str) -> String {
    let key = format!("{timestamp}\n{secret}");
    let mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes())
        .expect("HMAC takes a key of any length");
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// `base64(HMAC-SHA256(key = secret, message = timestamp + "\n" + secret))`: DingTalk's robot
/// signature, timestamp in milliseconds (the URL's query encodes it).
pub fn dingtalk_sign(timestamp: &str, secret: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(format!("{timestamp}\n{secret}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Slack's control characters shown literally (`<!channel>` pings everyone, `<URL|words>`
/// disguises a link).
pub fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Markdown's punctuation, backslashed: no link, image, emphasis, heading or code of the
/// text's own; and `<` `>` `&` as HTML entities for the services whose markdown takes HTML
/// (WeCom's `<font>`, mentions as `<@id>`).
pub fn markdown_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '#' | '!' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn slack(chat: &Chat) -> Value {
    let mut text = format!("*{}*", slack_escape(&chat.title));
    for line in &chat.lines {
        text.push('\n');
        text.push_str(&slack_escape(line));
    }
    let mut blocks =
        vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(&text, 2900)}})];
    if !chat.links.is_empty() {
        let buttons: Vec<Value> = (chat.links.iter().take(25))
            .map(|(label, url)| {
                json!({"type": "button", "text": {"type": "plain_text", "text": clip(label, 70)}, "url": url})
            })
            .collect();
        blocks.push(json!({"type": "actions", "elements": buttons}));
    }
    // `text` is what notifications and older clients show.
    json!({ "text": slack_escape(&chat.title), "blocks": blocks })
}

fn feishu(chat: &Chat) -> Value {
    let mut elements = vec![];
    if !chat.lines.is_empty() {
        elements.push(json!({
            "tag": "div",
            "text": {"tag": "plain_text", "content": chat.lines.join("\n")},
        }));
    }
    if !chat.links.is_empty() {
        let buttons: Vec<Value> = (chat.links.iter().enumerate())
            .map(|(i, (label, url))| {
                json!({
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": label},
                    "type": if i == 0 { "primary" } else { "default" },
                    "url": url,
                })
            })
            .collect();
        elements.push(json!({"tag": "action", "actions": buttons}));
    }
    json!({
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": true},
            "header": {
                "title": {"tag": "plain_text", "content": chat.title},
                "template": "blue",
            },
            "elements": elements,
        },
    })
}

fn markdown_body(chat: &Chat) -> String {
    let mut text = String::new();
    for line in &chat.lines {
        text.push_str(&markdown_escape(line));
        text.push_str("\n\n");
    }
    text
}

fn dingtalk(chat: &Chat) -> Value {
    let title = clip(&chat.title, 100);
    let text = format!(
        "#### {}\n\n{}",
        markdown_escape(&chat.title),
        markdown_body(chat)
    );
    let at = json!({"atMobiles": [], "atUserIds": [], "isAtAll": false});
    if chat.links.is_empty() {
        return json!({"msgtype": "markdown", "markdown": {"title": title, "text": text}, "at": at});
    }
    let buttons: Vec<Value> = (chat.links.iter())
        .map(|(label, url)| json!({"title": label, "actionURL": url}))
        .collect();
    json!({
        "msgtype": "actionCard",
        "actionCard": {"title": title, "text": text, "btnOrientation": "0", "btns": buttons},
        "at": at,
    })
}

/// WeCom takes at most 4,096 bytes of markdown.
const WECOM_BYTES: usize = 4096;

fn wecom(chat: &Chat) -> Value {
    let links: String = (chat.links.iter())
        .map(|(label, url)| format!("[{}]({url})", markdown_escape(label)))
        .collect::<Vec<_>>()
        .join("  ");
    let head = format!("**{}**\n", markdown_escape(&chat.title));
    let mut body = markdown_body(chat);
    let room = WECOM_BYTES.saturating_sub(head.len() + links.len() + 8);
    if body.len() > room {
        let mut cut = room.saturating_sub(3);
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        // Never leave a lone backslash or a cut entity at the end.
        body.truncate(cut);
        while body.ends_with('\\') || body.rfind('&').is_some_and(|at| !body[at..].contains(';')) {
            let at = body.rfind(['\\', '&']).unwrap_or(0);
            body.truncate(at);
        }
        body.push('…');
        body.push_str("\n\n");
    }
    json!({"msgtype": "markdown", "markdown": {"content": format!("{head}{body}{links}")}})
}

fn teams(chat: &Chat) -> Value {
    // TextRuns of a RichTextBlock are never read as markdown: member text stays literal.
    let run = |text: &str, bold: bool| {
        let mut run = json!({"type": "TextRun", "text": text});
        if bold {
            run["weight"] = json!("bolder");
            run["size"] = json!("medium");
        }
        json!({"type": "RichTextBlock", "inlines": [run]})
    };
    let mut body = vec![run(&chat.title, true)];
    body.extend(chat.lines.iter().map(|line| run(line, false)));
    let actions: Vec<Value> = (chat.links.iter())
        .map(|(label, url)| json!({"type": "Action.OpenUrl", "title": label, "url": url}))
        .collect();
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
                "actions": actions,
            },
        }],
    })
}

fn matrix(chat: &Chat) -> Value {
    use html_escape::{encode_double_quoted_attribute as attr, encode_text as esc};
    let mut plain = chat.title.clone();
    let mut html = format!("<strong>{}</strong>", esc(&chat.title));
    for line in &chat.lines {
        plain.push('\n');
        plain.push_str(line);
        html.push_str(&format!("<br>{}", esc(line)));
    }
    if !chat.links.is_empty() {
        html.push_str("<br>");
        let anchors: Vec<String> = (chat.links.iter())
            .map(|(label, url)| format!("<a href=\"{}\">{}</a>", attr(url), esc(label)))
            .collect();
        html.push_str(&anchors.join(" · "));
        for (label, url) in &chat.links {
            plain.push_str(&format!("\n{label}: {url}"));
        }
    }
    // An empty `m.mentions` says the message mentions nobody: clients do not ping a room or a
    // person for names that appear in its text (`@room`).
    json!({
        "msgtype": "m.text",
        "body": plain,
        "format": "org.matrix.custom.html",
        "formatted_body": html,
        "m.mentions": {},
    })
}

/// `https://ntfy.sh/topic` → (`https://ntfy.sh/`, `topic`): ntfy takes JSON at its root with
/// the topic in the body.
fn ntfy_topic(url: &str) -> (String, String) {
    let bare = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .trim_end_matches('/');
    match bare.rsplit_once('/') {
        Some((base, topic)) => (format!("{base}/"), topic.to_string()),
        None => (url.to_string(), String::new()),
    }
}

fn ntfy(chat: &Chat, topic: &str) -> Value {
    // ntfy shows three actions at most; the message is plain text (markdown off).
    let actions: Vec<Value> = (chat.links.iter().take(3))
        .map(|(label, url)| json!({"action": "view", "label": label, "url": url, "clear": true}))
        .collect();
    let mut body = json!({
        "topic": topic,
        "title": chat.title,
        "message": chat.lines.join("\n"),
        "actions": actions,
    });
    if let Some((_, url)) = chat.links.last() {
        body["click"] = json!(url);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile() -> Chat {
        Chat {
            title: "Job #7 <!channel> *bold* [x](http://evil) @room @all".into(),
            lines: vec![
                "<at user_id=\"all\"></at> <@everyone> ![img](http://evil/i.png) `code` # h".into(),
                "a & b <script>alert(1)</script>".into(),
            ],
            links: vec![(
                "Cancel the job".into(),
                "https://lanes.example/act/abc".into(),
            )],
        }
    }

    fn at() -> DateTime<Utc> {
        "2026-12-06T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn signatures_are_the_services_documented_ones() {
        // Feishu's example: HMAC-SHA256 keyed by "timestamp\nsecret" over nothing.
        let key = "1599360473\ndemo";
        let mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
        let expected =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        assert_eq!(feishu_sign("1599360473", "demo"), expected);
        // DingTalk keys by the secret and signs "timestamp\nsecret".
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"SECxyz").unwrap();
        mac.update(b"1700000000000\nSECxyz");
        let expected =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        assert_eq!(dingtalk_sign("1700000000000", "SECxyz"), expected);
        assert_ne!(feishu_sign("1", "s"), dingtalk_sign("1", "s"));
    }

    #[test]
    fn dingtalk_signs_in_the_url_and_feishu_in_the_body() {
        let chat = hostile();
        let out = request(
            WebhookFormat::Dingtalk,
            "https://oapi.dingtalk.com/robot/send?access_token=T",
            Some("SECx"),
            &chat,
            at(),
            "1",
        )
        .unwrap();
        let url = reqwest::Url::parse(&out.url).unwrap();
        let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(q["access_token"], "T");
        assert_eq!(q["timestamp"], at().timestamp_millis().to_string());
        assert_eq!(q["sign"], dingtalk_sign(&q["timestamp"], "SECx"));
        let out = request(
            WebhookFormat::Feishu,
            "https://x/hook",
            Some("s"),
            &chat,
            at(),
            "1",
        )
        .unwrap();
        assert_eq!(out.body["timestamp"], at().timestamp().to_string());
        assert_eq!(
            out.body["sign"],
            feishu_sign(&at().timestamp().to_string(), "s")
        );
        // Without a secret, no signature fields at all.
        let out = request(
            WebhookFormat::Feishu,
            "https://x/hook",
            None,
            &chat,
            at(),
            "1",
        )
        .unwrap();
        assert!(out.body.get("sign").is_none());
    }

    #[test]
    fn hostile_text_stays_literal_in_every_format() {
        let chat = hostile();
        let body = |f| {
            request(f, "https://h.example/t", Some("tok"), &chat, at(), "9")
                .unwrap()
                .body
        };
        let slack = body(WebhookFormat::Slack).to_string();
        assert!(
            !slack.contains("<!channel>") && slack.contains("&lt;!channel&gt;"),
            "{slack}"
        );
        assert!(!slack.contains("<script>"));
        // Feishu and Teams: member text only in plain-text fields.
        let feishu = body(WebhookFormat::Feishu);
        assert_eq!(feishu["card"]["header"]["title"]["tag"], "plain_text");
        assert_eq!(feishu["card"]["elements"][0]["text"]["tag"], "plain_text");
        assert!(!feishu.to_string().contains("lark_md"));
        let teams = body(WebhookFormat::Teams);
        let card = &teams["attachments"][0]["content"];
        assert!(card["body"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] == "RichTextBlock"));
        for markdown in [
            body(WebhookFormat::Dingtalk)["actionCard"]["text"].clone(),
            body(WebhookFormat::Wecom)["markdown"]["content"].clone(),
        ] {
            let text = markdown.as_str().unwrap();
            for raw in [
                "[x](http",
                "![img]",
                "<@everyone>",
                "<at user_id",
                "<script>",
                "`code`",
                "*bold*",
            ] {
                assert!(!text.contains(raw), "{raw} in {text}");
            }
            assert!(text.contains("\\[x\\]\\(http://evil\\)"), "{text}");
        }
        let dingtalk = body(WebhookFormat::Dingtalk);
        assert_eq!(dingtalk["at"]["isAtAll"], false);
        let matrix = body(WebhookFormat::Matrix);
        assert_eq!(matrix["m.mentions"], json!({}));
        let html = matrix["formatted_body"].as_str().unwrap();
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(html.contains("<a href=\"https://lanes.example/act/abc\">Cancel the job</a>"));
        let ntfy = body(WebhookFormat::Ntfy);
        assert_eq!(ntfy["topic"], "t");
        assert!(ntfy.get("markdown").is_none());
    }

    #[test]
    fn matrix_puts_with_its_transaction_and_ntfy_posts_to_its_root() {
        let chat = hostile();
        let m = request(
            WebhookFormat::Matrix,
            "https://m.example/_matrix/client/v3/rooms/!r:m.example/send/m.room.message",
            Some("syt_tok"),
            &chat,
            at(),
            "lanes-12",
        )
        .unwrap();
        assert_eq!(m.method, reqwest::Method::PUT);
        assert!(
            m.url.ends_with("/send/m.room.message/lanes-12"),
            "{}",
            m.url
        );
        assert_eq!(m.bearer.as_deref(), Some("syt_tok"));
        let n = request(
            WebhookFormat::Ntfy,
            "https://ntfy.example/base/lab-gpus",
            None,
            &chat,
            at(),
            "x",
        )
        .unwrap();
        assert_eq!(n.url, "https://ntfy.example/base/");
        assert_eq!(n.body["topic"], "lab-gpus");
        assert_eq!(n.bearer, None);
        assert!(request(WebhookFormat::Json, "https://x", None, &chat, at(), "x").is_none());
    }

    #[test]
    fn answers_are_read_as_each_service_means_them() {
        use Verdict::*;
        assert_eq!(
            verdict(
                WebhookFormat::Feishu,
                200,
                r#"{"code":0,"msg":"success","data":{}}"#
            ),
            Delivered
        );
        assert_eq!(
            verdict(
                WebhookFormat::Feishu,
                200,
                r#"{"StatusCode":0,"StatusMessage":"success"}"#
            ),
            Delivered
        );
        assert!(
            matches!(verdict(WebhookFormat::Feishu, 200, r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}"#), Refused(m) if m.contains("19021"))
        );
        assert!(matches!(
            verdict(
                WebhookFormat::Feishu,
                200,
                r#"{"code":9499,"msg":"too many request"}"#
            ),
            Later(_)
        ));
        assert_eq!(
            verdict(
                WebhookFormat::Dingtalk,
                200,
                r#"{"errcode":0,"errmsg":"ok"}"#
            ),
            Delivered
        );
        assert!(matches!(
            verdict(
                WebhookFormat::Dingtalk,
                200,
                r#"{"errcode":310000,"errmsg":"sign not match"}"#
            ),
            Refused(_)
        ));
        assert!(matches!(
            verdict(
                WebhookFormat::Dingtalk,
                200,
                r#"{"errcode":130101,"errmsg":"send too fast"}"#
            ),
            Later(_)
        ));
        assert!(matches!(
            verdict(
                WebhookFormat::Wecom,
                200,
                r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#
            ),
            Refused(_)
        ));
        assert!(matches!(
            verdict(WebhookFormat::Wecom, 200, "<html>"),
            Refused(_)
        ));
        assert_eq!(verdict(WebhookFormat::Teams, 202, ""), Delivered);
        assert_eq!(verdict(WebhookFormat::Slack, 200, "ok"), Delivered);
        assert!(
            matches!(verdict(WebhookFormat::Slack, 404, "no_service"), Refused(m) if m.contains("no_service"))
        );
        assert!(matches!(
            verdict(WebhookFormat::Matrix, 429, "{}"),
            Later(_)
        ));
        assert!(matches!(verdict(WebhookFormat::Ntfy, 503, ""), Later(_)));
    }

    #[test]
    fn wecom_markdown_stays_within_its_limit_without_a_broken_escape() {
        let chat = Chat {
            title: "t".into(),
            lines: vec!["<&>\\*".repeat(2000)],
            links: vec![("Open".into(), "https://x".into())],
        };
        let body = wecom(&chat);
        let content = body["markdown"]["content"].as_str().unwrap();
        assert!(content.len() <= WECOM_BYTES, "{}", content.len());
        assert!(content.ends_with("[Open](https://x)"));
        let cut = content.split('…').next().unwrap();
        assert!(
            !cut.ends_with('\\') && !cut.ends_with("&l") && !cut.ends_with('&'),
            "{}",
            &cut[cut.len() - 10..]
        );
    }
}
