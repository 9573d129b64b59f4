//! The caller's language: a member's choice remembered on the account and in the cookie,
//! and the API's messages in that language (or `Accept-Language`) with `code` and `rule`
//! unchanged.

use chrono::{Duration, DurationRound, Utc};
use lanes_server::accounts::Role;
use lanes_tests::{refusal, session_cookie, TestApp};
use lanes_types::account::LanguageChoice;
use lanes_types::booking::{CreateBooking, Quota, Quotas};
use lanes_types::query::AuditQuery;
use serde_json::{json, Value};

fn choice(language: &str) -> LanguageChoice {
    LanguageChoice {
        language: language.into(),
    }
}

/// Any `count` cards for four hours from tomorrow's whole hour.
fn four_hours_of(count: u32) -> CreateBooking {
    let start = (Utc::now() + Duration::days(1))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    CreateBooking {
        project: None,
        gpus: None,
        count: Some(count),
        ..lanes_tests::booking_of(&[], start, start + Duration::hours(4))
    }
}

#[tokio::test]
async fn a_members_language_is_remembered_sets_the_cookie_at_login_and_is_audited() {
    let app = TestApp::spawn(1).await;
    app.create_user("ada", "correct horse battery", Role::Admin)
        .await;
    let cookie = app.login("ada", "correct horse battery").await;
    let resp = app
        .client
        .put(app.url("/api/v1/me/language"))
        .header("cookie", &cookie)
        .json(&json!({"language": "zh"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with("lang=zh") && set.contains("Path=/"),
        "{set}"
    );

    // Another browser: logging in brings the choice along.
    let resp = app
        .client
        .post(app.url("/api/v1/auth/login"))
        .json(&json!({"username": "ada", "password": "correct horse battery"}))
        .send()
        .await
        .unwrap();
    let cookies: Vec<&str> = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(
        cookies.iter().any(|c| c.starts_with("lang=zh")),
        "{cookies:?}"
    );
    let session = session_cookie(&resp).unwrap();

    // The page is drawn in Chinese for that cookie, and says so in <html lang>.
    let page = app
        .client
        .get(app.url("/calendar"))
        .header("cookie", format!("{session}; lang=zh"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"<html lang="zh""#), "{}", &page[..200]);
    assert!(page.contains("日历") && page.contains("退出登录"), "{page}");

    let ada = app.client_with(&session);
    let (status, body) = refusal(ada.set_language(&choice("fr")).await);
    assert_eq!((status, body.code.as_str()), (422, "invalid"), "{body:?}");
    assert!(
        body.message.contains("\"en\" or \"zh\""),
        "{}",
        body.message
    );

    let log = ada
        .audit(&AuditQuery {
            action: Some("user.language".into()),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (log[0].actor.as_deref(), log[0].detail.as_str()),
        (Some("ada"), "zh")
    );
    app.stop().await;
}

#[tokio::test]
async fn api_messages_come_in_the_callers_language_with_the_same_code_and_rule() {
    let app = TestApp::spawn(4).await;
    let admin = app.client_with(&app.sign_up("root", Role::Admin).await);
    let cookie = app.sign_up("ada", Role::User).await;
    admin
        .save_quotas(&Quotas {
            default: Quota {
                max_gpus: Some(2),
                ..Quota::default()
            },
            ..Quotas::default()
        })
        .await
        .unwrap();
    let book = |language: Option<&'static str>, header: Option<&'static str>| {
        let mut request = app
            .client
            .post(app.url("/api/v1/bookings"))
            .json(&four_hours_of(3));
        request = match language {
            Some(lang) => request.header("cookie", format!("{cookie}; lang={lang}")),
            None => request.header("cookie", cookie.clone()),
        };
        if let Some(accept) = header {
            request = request.header("accept-language", accept);
        }
        async move {
            let resp = request.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };

    let (status, english) = book(None, None).await;
    assert_eq!(status, 422);
    assert_eq!(
        (&english["error"], &english["rule"]),
        (&json!("quota_exceeded"), &json!("max_gpus"))
    );
    let text = english["message"].as_str().unwrap();
    assert!(
        text.contains("you would hold 3 GPUs") && text.contains("your limit is 2"),
        "{text}"
    );

    for (cookie_lang, accept) in [(Some("zh"), None), (None, Some("zh-CN,zh;q=0.9,en;q=0.8"))] {
        let (status, chinese) = book(cookie_lang, accept).await;
        assert_eq!(status, 422);
        assert_eq!(
            (&chinese["error"], &chinese["rule"]),
            (&english["error"], &english["rule"])
        );
        let text = chinese["message"].as_str().unwrap();
        assert!(
            text.contains("将同时持有 3 张显卡") && text.contains("你的上限是 2 张"),
            "{text}"
        );
    }
    // The cookie (the choice made in the page) wins over the browser's header.
    let (_, chosen) = book(Some("en"), Some("zh-CN")).await;
    assert_eq!(chosen["message"], english["message"]);

    // The login gate's 401 too.
    let resp = app
        .client
        .get(app.url("/api/v1/me"))
        .header("accept-language", "zh")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        (&body["error"], &body["message"]),
        (&json!("unauthenticated"), &json!("请先登录"))
    );
    app.stop().await;
}
