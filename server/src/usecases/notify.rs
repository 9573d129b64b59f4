//! Notifications: the admins' settings, each member's choices, test messages, and using a
//! one-click link from a message.

use super::{require_admin, UseCaseError};
use crate::audit::AuditAction;
use crate::notify::links::{self, Outcome, Refused};
use crate::queue::Queue;
use crate::store::{AuditEntry, Link, NewMessage, Store};
use crate::usecases;
use chrono::{DateTime, Utc};
use lanes_app::i18n::Locale;
use lanes_types::account::{EmailChange, EmailChangeAnswer, User, UserPatch};
use lanes_types::booking::BookingState;
use lanes_types::coded::Coded;
use lanes_types::notify::{
    Channel, EventKind, LinkAction, NotifyPrefs, NotifyPrefsView, NotifySettings, TestSend,
    TestSent,
};

fn known_zone(zone: &str) -> Result<chrono_tz::Tz, UseCaseError> {
    zone.parse().map_err(|_| {
        UseCaseError::Unprocessable(
            format!(
            "{zone:?} is not a time zone; use an IANA name such as Europe/Berlin or Asia/Shanghai"
        )
            .into(),
        )
    })
}

/// The settings as admins read them: the SMTP password is never sent back, only whether one
/// is kept.
pub async fn settings(store: &Store) -> Result<NotifySettings, UseCaseError> {
    let mut settings = store.notifications().settings().await?;
    if let Some(smtp) = &mut settings.smtp {
        smtp.password_set = smtp.password.is_some();
        smtp.password = None;
    }
    Ok(settings)
}

/// Replaces the notification settings. An SMTP password left out keeps the one stored; an
/// empty one removes it.
pub async fn save_settings(
    store: &Store,
    admin: &User,
    mut settings: NotifySettings,
    now: DateTime<Utc>,
) -> Result<NotifySettings, UseCaseError> {
    require_admin(admin)?;
    if let Some(problem) = settings.problem() {
        return Err(UseCaseError::Unprocessable(problem.into()));
    }
    known_zone(&settings.time_zone)?;
    let stored = store.notifications().settings().await?;
    if let Some(smtp) = &mut settings.smtp {
        smtp.password = match smtp.password.take() {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(p),
            None => stored.smtp.as_ref().and_then(|s| s.password.clone()),
        };
        smtp.password_set = false;
    }
    let detail = match &settings.smtp {
        Some(smtp) => format!(
            "lab {:?}; mail through {}:{} ({:?}{})",
            settings.lab_name,
            smtp.host,
            smtp.port,
            smtp.security,
            if smtp.username.is_empty() {
                ""
            } else {
                ", with a login"
            }
        ),
        None => format!("lab {:?}; no mail server", settings.lab_name),
    };
    let audit = AuditEntry::new(Some(admin.id), AuditAction::NotifySettings, "notifications")
        .detail(detail);
    store
        .notifications()
        .save_settings(&settings, &audit, now)
        .await?;
    self::settings(store).await
}

/// What a member chose, with what the lab allows.
pub async fn prefs(store: &Store, user: &User) -> Result<NotifyPrefsView, UseCaseError> {
    let settings = store.notifications().settings().await?;
    Ok(NotifyPrefsView {
        prefs: store.notifications().prefs(user.id).await?.redacted(),
        email: user.email.clone(),
        email_available: settings.smtp.is_some(),
        rules: EventKind::ALL
            .into_iter()
            .map(|k| (k, settings.rule(k)))
            .collect(),
        lab_time_zone: settings.time_zone,
    })
}

/// Replaces a member's choices. Choosing channels for an event the lab requires is refused
/// with the event named, rather than silently ignored.
pub async fn save_prefs(
    store: &Store,
    user: &User,
    mut prefs: NotifyPrefs,
    now: DateTime<Utc>,
) -> Result<NotifyPrefsView, UseCaseError> {
    let stored = store.notifications().prefs(user.id).await?;
    prefs.webhook_secret = lanes_types::enforcement::keep_secret(
        prefs.webhook_secret.take(),
        stored.webhook_secret,
        stored.webhook_url == prefs.webhook_url,
    );
    prefs.webhook_secret_set = false;
    if let Some(problem) = prefs.problem() {
        return Err(UseCaseError::Unprocessable(problem.into()));
    }
    if let Some(zone) = &prefs.time_zone {
        known_zone(zone)?;
    }
    let settings = store.notifications().settings().await?;
    // Saved only where it can be delivered: its test would refuse it for the same reason.
    if let Some(url) = &prefs.webhook_url {
        if let Some(why) =
            crate::notify::deliver::member_url_refused(url, settings.allow_private_webhooks).await
        {
            return Err(UseCaseError::Unprocessable(why.into()));
        }
    }
    for (kind, channels) in &prefs.events {
        let rule = settings.rule(*kind);
        if rule.required
            && (rule.channels.email && !channels.email
                || rule.channels.webhook && !channels.webhook)
        {
            return Err(UseCaseError::Unprocessable(
                format!(
                    "the lab requires \"{}\" ({}): it cannot be turned off",
                    kind.label(),
                    kind.as_str()
                )
                .into(),
            ));
        }
    }
    let audit =
        AuditEntry::new(Some(user.id), AuditAction::NotifyPrefs, &user.username).detail(format!(
            "time zone {}, webhook {} ({}, secret {})",
            prefs.time_zone.as_deref().unwrap_or("the lab's"),
            if prefs.webhook_url.is_some() {
                "set"
            } else {
                "none"
            },
            prefs.webhook_format.as_str(),
            if prefs.webhook_secret.is_some() {
                "set"
            } else {
                "none"
            }
        ));
    store
        .notifications()
        .save_prefs(user.id, &prefs, &audit, now)
        .await?;
    self::prefs(store, user).await
}

/// Confirmation links one member may ask for in an hour: each is a mail to an address they
/// typed, so a script must not make Lanes a mail cannon.
const CONFIRMATIONS_PER_HOUR: u32 = 5;

/// A member's own address. A new one is not used until the member opens the link sent to it
/// (so nobody can point Lanes at an address they do not read); removing one takes effect at
/// once. Needs a mail server: without one there is nothing to confirm with.
pub async fn change_email(
    store: &Store,
    user: &User,
    change: EmailChange,
    now: DateTime<Utc>,
) -> Result<EmailChangeAnswer, UseCaseError> {
    let wanted = change
        .email
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty());
    let Some(address) = wanted else {
        let audit = AuditEntry::new(Some(user.id), AuditAction::UserEmail, &user.username)
            .detail("removed their address");
        let patch = UserPatch {
            email: Some(String::new()),
            ..Default::default()
        };
        store
            .accounts()
            .update(user.id, &patch, None, &audit, now)
            .await?;
        return Ok(EmailChangeAnswer {
            email: None,
            confirm_sent_to: None,
        });
    };
    crate::accounts::check_email(&address)?;
    if user.email.as_deref() == Some(address.as_str()) {
        return Ok(EmailChangeAnswer {
            email: user.email.clone(),
            confirm_sent_to: None,
        });
    }
    if store.notifications().settings().await?.smtp.is_none() {
        return Err(UseCaseError::Unprocessable(super::Said::NoMailServer));
    }
    let asked = store
        .outbox()
        .messages_since(
            user.id,
            crate::notify::event::CONFIRM_EMAIL,
            now - chrono::Duration::hours(1),
        )
        .await?;
    if asked >= CONFIRMATIONS_PER_HOUR {
        return Err(UseCaseError::SlowDown {
            message: format!(
                "{CONFIRMATIONS_PER_HOUR} confirmation links in an hour is the most; use the last one sent"
            ),
            retry_after_secs: 600,
        });
    }
    let message = NewMessage {
        user_id: Some(user.id),
        channel: Channel::Email,
        event: crate::notify::event::CONFIRM_EMAIL.into(),
        text: format!("a link to confirm {address}"),
        details: serde_json::json!({ "address": address }),
        dedupe_key: None,
    };
    store.outbox().enqueue(&[message], now).await?;
    let audit = AuditEntry::new(Some(user.id), AuditAction::UserEmail, &user.username)
        .detail(format!("asked to use {address}: a link was sent to it"));
    store.audit_log().record(&audit, now).await?;
    Ok(EmailChangeAnswer {
        email: user.email.clone(),
        confirm_sent_to: Some(address),
    })
}

/// Test messages one member may be sent in [`TEST_WINDOW_MIN`] minutes.
const TEST_MESSAGES_PER_WINDOW: u32 = 10;
const TEST_WINDOW_MIN: i64 = 10;

/// Queues a test message: to an address (admins checking the mail server), to a member's
/// channels (admins), or to the caller's own.
pub async fn test_send(
    store: &Store,
    actor: &User,
    request: TestSend,
    now: DateTime<Utc>,
) -> Result<TestSent, UseCaseError> {
    if (request.email.is_some() || request.user.is_some()) && !actor.is_admin() {
        return Err(UseCaseError::Forbidden(
            "only admins may send a test to someone else".into(),
        ));
    }
    let settings = store.notifications().settings().await?;
    let target = match &request.user {
        Some(name) => store
            .accounts()
            .by_username(name)
            .await?
            .ok_or_else(|| UseCaseError::NotFound(format!("no user named {name:?}").into()))?,
        None => actor.clone(),
    };
    // Each test is a request to somebody's mail server or endpoint: a burst of them must not
    // become a flood (the hourly limit does not hold back tests to an address).
    let recent = store
        .outbox()
        .messages_since(
            target.id,
            "test",
            now - chrono::Duration::minutes(TEST_WINDOW_MIN),
        )
        .await?;
    if recent >= TEST_MESSAGES_PER_WINDOW {
        return Err(UseCaseError::SlowDown {
            message: format!(
                "{} test messages in the last {TEST_WINDOW_MIN} minutes is the most",
                TEST_MESSAGES_PER_WINDOW
            ),
            retry_after_secs: 60,
        });
    }
    let base = |channel, details: serde_json::Value| NewMessage {
        user_id: Some(target.id),
        channel,
        event: "test".into(),
        text: match details["test_address"].as_str() {
            Some(address) => format!("a test message to {address}"),
            None => format!("a test message for {}", target.username),
        },
        details,
        dedupe_key: None,
    };
    let mut messages = Vec::new();
    if let Some(address) = &request.email {
        if !address.contains('@') || address.len() > 320 {
            return Err(UseCaseError::Unprocessable(
                format!("{address:?} is not an email address").into(),
            ));
        }
        messages.push(base(
            Channel::Email,
            serde_json::json!({ "test_address": address }),
        ));
    } else {
        let prefs = store.notifications().prefs(target.id).await?;
        if target.email.is_some() && settings.smtp.is_some() {
            messages.push(base(Channel::Email, serde_json::json!({})));
        }
        if prefs.webhook_url.is_some() {
            messages.push(base(Channel::Webhook, serde_json::json!({})));
        }
    }
    if settings.smtp.is_none() && messages.iter().any(|m| m.channel == Channel::Email) {
        return Err(UseCaseError::Unprocessable(
            "no mail server is set up: save the SMTP settings first".into(),
        ));
    }
    if messages.is_empty() {
        return Err(UseCaseError::Unprocessable(
            format!(
                "{} has no channel to reach: no email address (or no mail server) and no webhook",
                target.username
            )
            .into(),
        ));
    }
    let queued = store.outbox().enqueue(&messages, now).await?;
    let audit = AuditEntry::new(Some(actor.id), AuditAction::NotifyTest, &target.username).detail(
        match queued.len() {
            1 => "1 test message".to_string(),
            n => format!("{n} test messages"),
        },
    );
    store.audit_log().record(&audit, now).await?;
    Ok(TestSent { queued })
}

/// A webhook as saved: the lab's (the policy's) or a member's.
pub struct SavedHook {
    pub url: Option<String>,
    pub format: lanes_types::enforcement::WebhookFormat,
    pub secret: Option<String>,
}

/// A channel test sends now and waits for the service's answer: at most this long.
const CHANNEL_TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a test message to a webhook now, in its format, and answers what the service said:
/// the lab's channel (`member` none; admins) or a member's own. Fields the request leaves out
/// are the saved ones; the saved secret goes only to the saved URL. A member's test is held to
/// the same rules as their messages (no private addresses unless the lab allows them) and
/// counts as a request against their limits; every test is audited, never with its URL.
pub async fn channel_test(
    store: &Store,
    actor: &User,
    member: Option<&User>,
    saved: SavedHook,
    test: lanes_types::notify::ChannelTest,
    own_url: String,
    now: DateTime<Utc>,
) -> Result<lanes_types::notify::ChannelAnswer, UseCaseError> {
    use crate::notify::deliver;
    if member.is_none() {
        require_admin(actor)?;
    }
    let url = test.webhook_url.clone().or(saved.url.clone());
    let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
        return Err(UseCaseError::Unprocessable(
            "no webhook to test: enter its URL (or save one) first".into(),
        ));
    };
    let format = test.webhook_format.unwrap_or(saved.format);
    let secret = match test.webhook_secret {
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s),
        None => saved
            .secret
            .filter(|_| saved.url.as_deref() == Some(url.as_str())),
    };
    if let Some(problem) = format.problem(&url, secret.is_some()) {
        return Err(UseCaseError::Unprocessable(problem.into()));
    }
    if secret.as_ref().is_some_and(|s| s.len() > 500) {
        return Err(UseCaseError::Unprocessable(
            "webhook_secret must be at most 500 characters".into(),
        ));
    }
    // Each test is a request to somebody's endpoint: counted, and refused past the limit.
    let since = now - chrono::Duration::minutes(TEST_WINDOW_MIN);
    if !store
        .outbox()
        .claim_attempt(actor.id, Some(TEST_MESSAGES_PER_WINDOW), since, now)
        .await?
    {
        return Err(UseCaseError::SlowDown {
            message: format!(
                "{TEST_MESSAGES_PER_WINDOW} tests in the last {TEST_WINDOW_MIN} minutes is the most"
            ),
            retry_after_secs: 60,
        });
    }
    let settings = store.notifications().settings().await?;
    let portal = settings.portal_url.clone().unwrap_or(own_url);
    let portal = portal.trim_end_matches('/').to_string();
    let clients = deliver::Clients::new(CHANNEL_TEST_TIMEOUT);
    let event = crate::notify::event::Event::Test;
    let (chat, json) = match member {
        None => {
            let text = format!("a test of the lab channel, sent by {}", actor.username);
            let body = crate::notify::lab_body("test", now, &text, &serde_json::json!({}));
            (deliver::lab_chat(&settings.lab_name, &text, &portal), body)
        }
        Some(member) => {
            let prefs = store.notifications().prefs(member.id).await?;
            let cards = store.inventory().card_index().await?;
            let locale = (store.accounts().language_of(member.id).await?)
                .and_then(|l| lanes_app::i18n::parse(&l))
                .unwrap_or_default();
            let reader = crate::notify::render::Reader {
                lab: &settings.lab_name,
                name: &member.display_name,
                tz: deliver::zone(prefs.time_zone.as_deref(), &settings.time_zone),
                cards: &cards,
                portal: &portal,
                locale,
            };
            let rendered = crate::notify::render::render(&event, now, &reader, &[]);
            let body = serde_json::json!({
                "event": "test", "at": now, "subject": rendered.subject, "text": rendered.text,
                "links": {}, "details": {},
            });
            (deliver::personal_chat(&rendered, &[], &reader), body)
        }
    };
    let client = match member {
        None => clients.for_lab(),
        Some(_) => match clients
            .for_member(&url, settings.allow_private_webhooks)
            .await
        {
            Ok(client) => client,
            Err(
                deliver::Undelivered::Retry(why)
                | deliver::Undelivered::Drop(why)
                | deliver::Undelivered::Refused(why),
            ) => {
                return Err(UseCaseError::Unprocessable(why.into()));
            }
        },
    };
    let hook = deliver::Hook {
        url: &url,
        format,
        secret: secret.as_deref(),
    };
    let txn = format!("lanes-test-{}", now.timestamp_millis());
    let (answer, _) = deliver::send_hook(client, &hook, &chat, &json, now, &txn).await;
    let whose = member.map_or("the lab channel".to_string(), |m| m.username.clone());
    let audit = AuditEntry::new(Some(actor.id), AuditAction::NotifyTest, &whose).detail(format!(
        "channel test ({}): {}",
        format.as_str(),
        match (answer.delivered, answer.status) {
            (true, Some(status)) => format!("delivered, {status}"),
            (false, Some(status)) => format!("not delivered, {status}"),
            (_, None) => "not reached".to_string(),
        }
    ));
    store.audit_log().record(&audit, now).await?;
    Ok(answer)
}

/// Why using a link did nothing: the link (unknown, used, expired, gone) or its action
/// (refused as the same request from the member would be).
#[derive(Debug)]
pub enum LinkFailure {
    Link(Refused),
    Action(UseCaseError),
}

impl From<Refused> for LinkFailure {
    fn from(e: Refused) -> Self {
        LinkFailure::Link(e)
    }
}

impl From<crate::store::StoreError> for LinkFailure {
    fn from(e: crate::store::StoreError) -> Self {
        LinkFailure::Link(Refused::Store(e))
    }
}

/// Words of the link pages in `$locale`: `say!(locale, link.key, name = value)`.
macro_rules! say {
    ($locale:expr, $($key:tt)*) => {
        lanes_app::i18n::i18n::td_string!($locale, $($key)*).to_string()
    };
}

/// The link `secret` names, if it may still act, and what it would do, in `locale`'s words.
pub async fn look(
    store: &Store,
    secret: &str,
    tz: chrono_tz::Tz,
    locale: Locale,
    now: DateTime<Utc>,
) -> Result<String, Refused> {
    let link = links::check(store, secret, now).await?;
    describe(store, &link, tz, locale, now).await
}

/// The cards a move link exchanges.
fn move_offer(link: &Link) -> Option<crate::notify::event::MoveOffer> {
    serde_json::from_str(link.detail.as_deref()?).ok()
}

/// What a link would do, in words, for its confirmation page.
async fn describe(
    store: &Store,
    link: &Link,
    tz: chrono_tz::Tz,
    locale: Locale,
    now: DateTime<Utc>,
) -> Result<String, Refused> {
    let when = |t| lanes_app::dates::when_in(t, tz, locale);
    if link.action == LinkAction::ConfirmEmail {
        let address = link
            .email
            .clone()
            .ok_or_else(|| Refused::Gone("the link names no address".into()))?;
        return Ok(say!(locale, link.confirm_email, address));
    }
    Ok(match (link.action, link.booking_id, link.job_id) {
        (LinkAction::CancelJob, _, Some(job)) => {
            let job = store
                .jobs()
                .get(job)
                .await?
                .ok_or_else(|| Refused::Gone("the job is gone".into()))?;
            say!(locale, link.cancel_job, id = job.id, title = job.title())
        }
        (action, Some(id), _) => {
            let b = store
                .bookings()
                .get(id, now)
                .await?
                .ok_or_else(|| Refused::Gone("the booking is gone".into()))?;
            match action {
                LinkAction::ExtendHour => say!(
                    locale,
                    link.extend,
                    id,
                    to = when(b.end + chrono::Duration::hours(1)),
                    from = when(b.end)
                ),
                LinkAction::Release if b.state == BookingState::Upcoming => {
                    say!(locale, link.cancel_booking, id, at = when(b.start))
                }
                LinkAction::Release => say!(locale, link.release_booking, id, at = when(b.end)),
                LinkAction::MoveCard => {
                    let offer = move_offer(link)
                        .ok_or_else(|| Refused::Gone("the link names no card".into()))?;
                    let names = store.inventory().card_index().await?;
                    say!(
                        locale,
                        link.move_card,
                        id,
                        from = names.names(std::slice::from_ref(&offer.from)).join(""),
                        to = names.names(std::slice::from_ref(&offer.to)).join("")
                    )
                }
                _ => say!(locale, link.still_using, id),
            }
        }
        _ => return Err(Refused::Gone("the link names nothing".into())),
    })
}

/// Uses the link `secret`: marks it used (only one request can), does its action as its
/// member, and records what was done. A refused action gives the link back, so that it may be
/// used once what refused it changed. What was done.
pub async fn perform(
    store: &Store,
    queue: &Queue,
    horizon_days: u32,
    secret: &str,
    now: DateTime<Utc>,
) -> Result<Outcome, LinkFailure> {
    let link = links::check(store, secret, now).await?;
    let user = store
        .accounts()
        .get(link.user_id)
        .await?
        .filter(|u| u.enabled)
        .ok_or(Refused::Gone("the account is disabled".into()))?;
    if !store.links().mark_used(link.id, now).await? {
        // Another request used it a moment ago.
        let again = store
            .links()
            .get(&crate::accounts::session::hash_secret(secret))
            .await?;
        return Err(LinkFailure::Link(Refused::Used {
            at: again.and_then(|l| l.used_at).unwrap_or(now),
            outcome: None,
        }));
    }
    let done = act(store, queue, horizon_days, &link, &user, now).await;
    match done {
        Ok(outcome) => {
            store
                .links()
                .set_outcome(link.id, Some(&outcome.code()))
                .await?;
            Ok(outcome)
        }
        Err(e) => {
            store.links().set_outcome(link.id, None).await?;
            Err(LinkFailure::Action(e))
        }
    }
}

async fn act(
    store: &Store,
    queue: &Queue,
    horizon_days: u32,
    link: &Link,
    user: &lanes_types::account::User,
    now: DateTime<Utc>,
) -> Result<Outcome, UseCaseError> {
    let gone = || UseCaseError::NotFound("the link names nothing".into());
    match link.action {
        LinkAction::CancelJob => {
            let id = link.job_id.ok_or_else(gone)?;
            let job =
                usecases::jobs::cancel(store, queue, user, id, usecases::jobs::CancelScope::AnyJob)
                    .await?;
            Ok(Outcome::JobCancelled {
                job: job.id,
                title: job.title(),
            })
        }
        LinkAction::ExtendHour => {
            let id = link.booking_id.ok_or_else(gone)?;
            let booking = usecases::bookings::changeable(store, user, id, now).await?;
            let end = booking.end + chrono::Duration::hours(1);
            let booking =
                usecases::bookings::extend(store, user, id, end, horizon_days, now).await?;
            Ok(Outcome::Extended {
                booking: id,
                end: booking.end,
            })
        }
        LinkAction::Release => {
            let id = link.booking_id.ok_or_else(gone)?;
            let booking = usecases::bookings::withdraw(store, user, id, now).await?;
            Ok(match booking.state {
                BookingState::Cancelled => Outcome::Cancelled { booking: id },
                _ => Outcome::Released {
                    booking: id,
                    at: now,
                },
            })
        }
        LinkAction::StillUsing => {
            let id = link.booking_id.ok_or_else(gone)?;
            let booking = usecases::bookings::changeable(store, user, id, now).await?;
            if booking.state != BookingState::Active {
                return Err(UseCaseError::Unprocessable(
                    format!("booking #{id} is not active any more").into(),
                ));
            }
            let audit = AuditEntry::new(
                Some(user.id),
                AuditAction::BookingInUse,
                format!("booking {id}"),
            )
            .detail("answered an idle warning: still using it");
            store.links().confirm_in_use(id, &audit, now).await?;
            Ok(Outcome::InUse { booking: id })
        }
        LinkAction::MoveCard => {
            let id = link.booking_id.ok_or_else(gone)?;
            let offer = move_offer(link).ok_or_else(gone)?;
            usecases::bookings::move_card(
                store,
                user,
                id,
                &lanes_types::health::MoveCard {
                    from: offer.from,
                    to: offer.to.clone(),
                },
                now,
            )
            .await?;
            let names = store.inventory().card_index().await?;
            Ok(Outcome::Moved {
                booking: id,
                to: names.names(std::slice::from_ref(&offer.to)).join(""),
            })
        }
        LinkAction::ConfirmEmail => {
            let address = link.email.clone().ok_or_else(gone)?;
            let audit = AuditEntry::new(Some(user.id), AuditAction::UserEmail, &user.username)
                .detail(format!("confirmed {address} by the link sent to it"));
            let patch = UserPatch {
                email: Some(address.clone()),
                ..Default::default()
            };
            store
                .accounts()
                .update(user.id, &patch, None, &audit, now)
                .await?;
            Ok(Outcome::EmailConfirmed { address })
        }
    }
}
