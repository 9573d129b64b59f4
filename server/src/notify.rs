//! Notifications: an outgoing webhook (JSON, or a Slack-compatible `{"text"}` body) for booking
//! start and end, job end, violations, idle bookings and releases. Senders hand a notice to a
//! bounded queue and go on: delivery (with retries and backoff) happens on its own tasks, so a
//! slow or dead endpoint never holds up the poller, the watchdog or the runner.

use chrono::{DateTime, Utc};
use lanes_types::enforcement::{Policy, WebhookFormat};
use serde_json::{json, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// Notices waiting for delivery; more are dropped (and logged) rather than block a sender.
const QUEUE: usize = 1024;
/// Deliveries in flight at once.
const CONCURRENT: usize = 8;

/// One thing worth telling people about.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// `booking.start`, `booking.end`, `job.end`, `violation`, `booking.idle`, `booking.release`.
    pub event: &'static str,
    pub at: DateTime<Utc>,
    /// One line for people.
    pub text: String,
    /// The facts, for programs.
    pub details: Value,
}

impl Notice {
    /// The request body in `format`.
    pub fn body(&self, format: WebhookFormat) -> Value {
        match format {
            WebhookFormat::Slack => json!({ "text": format!("Lanes: {}", self.text) }),
            WebhookFormat::Json => {
                let mut body = json!({
                    "event": self.event,
                    "at": self.at,
                    "text": self.text,
                });
                if let (Some(body), Value::Object(details)) = (body.as_object_mut(), &self.details)
                {
                    for (k, v) in details {
                        body.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                body
            }
        }
    }
}

/// How deliveries are retried.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    pub attempts: u32,
    /// Wait before the second attempt; it doubles for each one after.
    pub first_backoff: Duration,
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 5,
            first_backoff: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The sending end; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    queue: mpsc::Sender<Notice>,
}

impl Notifier {
    /// Starts delivery to the webhook the current policy names (read at each delivery, so a
    /// changed URL takes effect at once).
    pub fn start(policy: Arc<RwLock<Policy>>, retry: Retry) -> Self {
        let (queue, mut notices) = mpsc::channel::<Notice>(QUEUE);
        let client = reqwest::Client::builder()
            .timeout(retry.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let slots = Arc::new(Semaphore::new(CONCURRENT));
        tokio::spawn(async move {
            while let Some(notice) = notices.recv().await {
                let (url, format) = {
                    let policy = policy.read().unwrap_or_else(|p| p.into_inner());
                    (policy.webhook_url.clone(), policy.webhook_format)
                };
                let Some(url) = url else { continue };
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    break;
                };
                let client = client.clone();
                tokio::spawn(async move {
                    deliver(&client, &url, &notice.body(format), notice.event, retry).await;
                    drop(slot);
                });
            }
        });
        Self { queue }
    }

    /// Queues a notice; never waits.
    pub fn send(&self, notice: Notice) {
        if let Err(e) = self.queue.try_send(notice) {
            tracing::warn!(error = %e, "a notification was dropped: the queue is full");
        }
    }
}

/// POSTs `body` until the endpoint answers 2xx or the attempts run out. The URL is a secret
/// (Slack's carry a token), so only the event and the failure are logged.
async fn deliver(client: &reqwest::Client, url: &str, body: &Value, event: &str, retry: Retry) {
    let mut backoff = retry.first_backoff;
    for attempt in 1..=retry.attempts {
        let outcome = client.post(url).json(body).send().await;
        let failure = match outcome {
            Ok(response) if response.status().is_success() => return,
            Ok(response) => format!("the endpoint answered {}", response.status()),
            Err(e) => format!("{}", e.without_url()),
        };
        if attempt == retry.attempts {
            tracing::error!(event, attempt, %failure, "webhook delivery failed; giving up");
            return;
        }
        tracing::warn!(event, attempt, %failure, retry_in = ?backoff, "webhook delivery failed");
        tokio::time::sleep(backoff).await;
        backoff *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice() -> Notice {
        Notice {
            event: "violation",
            at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            text: "bob runs python on GPU 3 without a booking".into(),
            details: json!({"pid": 42, "event": "not overwritten"}),
        }
    }

    #[test]
    fn json_bodies_carry_the_event_and_its_facts_and_slack_bodies_only_text() {
        let body = notice().body(WebhookFormat::Json);
        assert_eq!(body["event"], "violation");
        assert_eq!(body["pid"], 42);
        assert_eq!(body["text"], "bob runs python on GPU 3 without a booking");
        assert_eq!(body["at"], "2023-11-14T22:13:20Z");
        let slack = notice().body(WebhookFormat::Slack);
        assert_eq!(
            slack,
            json!({"text": "Lanes: bob runs python on GPU 3 without a booking"})
        );
    }
}
