//! Notifications: to the lab channel (the admins' webhook) and to each member who is concerned,
//! by email or their own webhook, as they chose for each event (admins set the defaults and which
//! events may not be turned off).
//!
//! Every message goes through the outbox table, so it survives a restart and is sent once:
//! senders hand a [`Notice`] to a bounded in-memory queue and go on (the poller, the watchdog
//! and the runner never wait on the database or a mail server for it); one task writes notices
//! to the outbox, others deliver from it (`deliver`), with retries and backoff, a per-member
//! hourly limit, and failures kept where admins see them. Reminders that depend only on time
//! (a booking starts soon, the weekly digest) are found by `remind`, which asks the outbox by a
//! key, so two nodes or two passes never send one twice. A message's one-click answers are
//! `links`; its words are `render`'s.

pub mod chat;
pub mod deliver;
pub mod event;
pub mod links;
pub mod remind;
pub mod render;

use crate::store::{NewMessage, Store, StoreError};
use chrono::{DateTime, Utc};
use lanes_types::enforcement::Policy;
use lanes_types::notify::{Channel, EventKind, NotifySettings};
use serde_json::{json, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Notices waiting to be written to the outbox; more are dropped (and logged) rather than block
/// a sender.
const QUEUE: usize = 1024;

/// One thing worth telling people about.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The lab channel's name for it (`booking.start`, `booking.end`, `job.end`, `violation`,
    /// `booking.idle`, `booking.release`, `job.requeued`); `None`: personal only.
    pub event: Option<&'static str>,
    pub at: DateTime<Utc>,
    /// One line for people.
    pub text: String,
    /// The facts, for programs and for the personal message's words.
    pub details: Value,
    /// The member it concerns, and as which event.
    pub to: Option<Personal>,
}

/// Who a notice concerns, personally.
#[derive(Clone, Debug, PartialEq)]
pub struct Personal {
    pub user_id: i64,
    pub kind: EventKind,
    /// Asking twice with one key sends once (reminders).
    pub dedupe: Option<String>,
}

impl Notice {
    /// A notice for the lab channel only.
    pub fn lab(event: &'static str, at: DateTime<Utc>, text: String, details: Value) -> Self {
        Self {
            event: Some(event),
            at,
            text,
            details,
            to: None,
        }
    }

    /// Also tells `user_id` personally, as `kind`.
    pub fn to(mut self, user_id: i64, kind: EventKind) -> Self {
        self.to = Some(Personal {
            user_id,
            kind,
            dedupe: None,
        });
        self
    }
}

/// The lab channel's JSON request body: the event, when, its line and its facts.
pub fn lab_body(event: &str, at: DateTime<Utc>, text: &str, details: &Value) -> Value {
    let mut body = json!({ "event": event, "at": at, "text": text });
    if let (Some(body), Value::Object(details)) = (body.as_object_mut(), details) {
        for (k, v) in details {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    body
}

/// How deliveries are retried.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    pub attempts: u32,
    /// Wait before the second attempt; it doubles for each one after (to at most an hour).
    pub first_backoff: Duration,
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 8,
            first_backoff: Duration::from_secs(2),
            timeout: Duration::from_secs(15),
        }
    }
}

impl Retry {
    /// The wait after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doubled = self
            .first_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        doubled.min(Duration::from_secs(3600))
    }
}

/// What the notifier reads its settings from, and where it sends.
#[derive(Clone)]
pub struct NotifyContext {
    pub store: Store,
    pub policy: Arc<RwLock<Policy>>,
    pub retry: Retry,
    /// Links' base when the admins set no portal URL: this node's own address.
    pub own_url: String,
    /// How long minute readings are kept, and seconds between readings (for the digest's report).
    pub keep_minutes: chrono::Duration,
    pub interval_s: f64,
    /// What time it is: reminders fall due and retries come round by it.
    pub clock: crate::runtime::clock::Clock,
}

/// The sending end; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    queue: mpsc::Sender<Notice>,
    wake: Arc<tokio::sync::Notify>,
    /// Full reminder passes on request (a test hook).
    reminders: remind::Passes,
    /// Deliverer passes on request (a test hook): everything claimable now claimed.
    deliveries: crate::runtime::tasks::Passes,
}

impl Notifier {
    /// Starts writing notices to the outbox, delivering from it and finding reminders, until
    /// `shutdown`.
    pub fn start(context: NotifyContext, shutdown: CancellationToken) -> Self {
        let (queue, notices) = mpsc::channel::<Notice>(QUEUE);
        let wake = Arc::new(tokio::sync::Notify::new());
        let notifier = Self {
            queue,
            wake: wake.clone(),
            reminders: remind::Passes::default(),
            deliveries: crate::runtime::tasks::Passes::default(),
        };
        let notices = Arc::new(tokio::sync::Mutex::new(notices));
        let (writer, wake_writer, stop_writer) = (context.clone(), wake.clone(), shutdown.clone());
        crate::runtime::tasks::supervise("notice writer", shutdown.clone(), move || {
            write_notices(
                writer.clone(),
                notices.clone(),
                wake_writer.clone(),
                stop_writer.clone(),
            )
        });
        deliver::start(
            context.clone(),
            wake,
            notifier.deliveries.clone(),
            shutdown.clone(),
        );
        let reminders = remind::start(context, notifier.clone(), shutdown);
        Self {
            reminders,
            ..notifier
        }
    }

    /// Runs a full reminder pass now (every reminder due, digests included) and waits for it.
    pub fn reminders(&self) -> remind::Passes {
        self.reminders.clone()
    }

    /// Runs a deliverer pass now (every message that may go claimed and sent on its way) and
    /// waits for it; a message whose destination has its share in flight stays queued.
    pub fn deliveries(&self) -> crate::runtime::tasks::Passes {
        self.deliveries.clone()
    }

    /// Queues a notice; never waits.
    pub fn send(&self, notice: Notice) {
        if let Err(e) = self.queue.try_send(notice) {
            tracing::warn!(error = %e, "a notification was dropped: the queue is full");
        }
    }

    /// Tells the deliverer that the outbox has something new. A wake while it is busy is kept
    /// for when it next waits, so no message waits for its longest sleep.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

async fn write_notices(
    context: NotifyContext,
    notices: Arc<tokio::sync::Mutex<mpsc::Receiver<Notice>>>,
    wake: Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
) {
    // Held for the task's life; a restarted task takes it up again.
    let mut notices = notices.lock().await;
    loop {
        let notice = tokio::select! {
            notice = notices.recv() => notice,
            _ = shutdown.cancelled() => None,
        };
        let Some(notice) = notice else { break };
        // A database that does not answer for a moment (a PostgreSQL failover) loses nothing
        // that a few tries can keep.
        let mut tries = 0;
        loop {
            match enqueue(&context, &notice).await {
                Ok(_) => break,
                Err(e) if tries < 5 => {
                    tries += 1;
                    tracing::warn!(error = %e, "could not queue a notification; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, event = ?notice.event, "a notification was lost: the outbox could not be written");
                    break;
                }
            }
        }
        wake.notify_one();
    }
}

/// Writes one notice to the outbox: a lab message if the policy names a webhook, and one
/// message per channel the member it concerns chose for its event. The outbox ids.
pub async fn enqueue(context: &NotifyContext, notice: &Notice) -> Result<Vec<i64>, StoreError> {
    let mut messages = Vec::new();
    let lab_hook = {
        let policy = context.policy.read().unwrap_or_else(|p| p.into_inner());
        policy.webhook_url.is_some()
    };
    if let (Some(event), true) = (notice.event, lab_hook) {
        messages.push(NewMessage {
            user_id: None,
            channel: Channel::Lab,
            event: event.to_string(),
            text: notice.text.clone(),
            details: notice.details.clone(),
            dedupe_key: None,
        });
    }
    if let Some(to) = &notice.to {
        let settings = context.store.notifications().settings().await?;
        messages.extend(personal_messages(&context.store, &settings, notice, to).await?);
    }
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    context.store.outbox().enqueue(&messages, notice.at).await
}

/// The messages a member gets for `notice`: one per channel they chose (or must take) that can
/// reach them.
async fn personal_messages(
    store: &Store,
    settings: &NotifySettings,
    notice: &Notice,
    to: &Personal,
) -> Result<Vec<NewMessage>, StoreError> {
    let Some(user) = store.accounts().get(to.user_id).await? else {
        return Ok(Vec::new());
    };
    if !user.enabled {
        return Ok(Vec::new());
    }
    let prefs = store.notifications().prefs(user.id).await?;
    let channels = prefs.channels(settings, to.kind);
    let mut out = Vec::new();
    for (channel, wanted, reachable) in [
        (
            Channel::Email,
            channels.email,
            user.email.is_some() && settings.smtp.is_some(),
        ),
        (
            Channel::Webhook,
            channels.webhook,
            prefs.webhook_url.is_some(),
        ),
    ] {
        if !(wanted && reachable) {
            continue;
        }
        out.push(NewMessage {
            user_id: Some(user.id),
            channel,
            event: to.kind.as_str().to_string(),
            text: notice.text.clone(),
            details: notice.details.clone(),
            dedupe_key: to
                .dedupe
                .as_ref()
                .map(|k| format!("{k}:{}", channel.as_str())),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_carry_the_event_and_its_facts() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let text = "bob runs python on GPU 3 without a booking";
        let details = json!({"pid": 42, "event": "not overwritten"});
        let body = lab_body("violation", at, text, &details);
        assert_eq!(body["event"], "violation");
        assert_eq!(body["pid"], 42);
        assert_eq!(body["text"], text);
        assert_eq!(body["at"], "2023-11-14T22:13:20Z");
    }

    /// A job named to ping the channel and disguise a link shows as the words it is.
    #[test]
    fn member_text_in_slack_format_is_shown_literally_never_as_markup() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let text =
            "job 7 (<!channel> <https://evil.example/login|your session expired> & co) ended";
        let chat = deliver::lab_chat("Lanes", text, "https://lanes.example");
        let slack = chat::request(
            lanes_types::enforcement::WebhookFormat::Slack,
            "https://hooks.slack.example/x",
            None,
            &chat,
            at,
            "1",
        )
        .unwrap()
        .body;
        let sent = slack["text"].as_str().unwrap();
        assert!(!sent.contains('<') && !sent.contains('>'), "{sent}");
        assert_eq!(
            sent,
            "Lanes: job 7 (&lt;!channel&gt; &lt;https://evil.example/login|your session expired&gt; \
             &amp; co) ended"
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let retry = Retry {
            attempts: 30,
            first_backoff: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(retry.backoff(1), Duration::from_secs(2));
        assert_eq!(retry.backoff(2), Duration::from_secs(4));
        assert_eq!(retry.backoff(4), Duration::from_secs(16));
        assert_eq!(retry.backoff(25), Duration::from_secs(3600));
    }
}
