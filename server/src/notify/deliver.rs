//! Delivery from the outbox: each process claims due messages one at a time (a lease in the
//! row, so two nodes never send one message at once and a crashed sender's messages are taken
//! up again), renders them for their reader, sends them by SMTP or webhook, and records the
//! outcome: sent, retried later with a doubling backoff, failed after the last attempt, or
//! suppressed (over the member's hourly limit, or nowhere to send). Addresses and webhook URLs
//! are read at delivery, so a changed choice takes effect for messages still waiting; they are
//! secrets, never logged.

use super::event::Event;
use super::render::{self, Reader};
use super::{chat, lab_body, links, NotifyContext};
use crate::store::Claimed;
use chrono::{DateTime, Utc};
use lanes_types::enforcement::WebhookFormat;
use lanes_types::notify::{Channel, ChannelAnswer, OutboxStatus, SmtpSecurity, SmtpSettings};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Deliveries in flight at once, per process.
const CONCURRENT: usize = 8;
/// The longest the deliverer sleeps when no message waits: a message whose event was lost
/// (another node died between its commit and its NOTIFY) is taken up within this. Queued
/// messages wake it at once (an event), a retry or an expired lease at the moment it is due.
const LONGEST_SLEEP: Duration = Duration::from_secs(60);
/// How soon the outbox is read again after the database did not answer.
const DB_RETRY: Duration = Duration::from_secs(1);

/// The HTTP clients of deliveries: `any` for the lab's channel (an admin's URL) and members'
/// webhooks where the lab allows private ones, `public` for members' webhooks otherwise.
#[derive(Clone)]
pub struct Clients {
    any: reqwest::Client,
    public: reqwest::Client,
}

/// Why one attempt did not deliver.
#[derive(Debug)]
pub enum Undelivered {
    /// Worth another attempt later.
    Retry(String),
    /// Nothing to send it to, or not allowed: it is suppressed at once.
    Drop(String),
    /// The service refused it for what was sent or where (a wrong signature or key): it
    /// failed, and another attempt would fail the same way.
    Refused(String),
}

impl Clients {
    /// Clients whose requests give up after `timeout` and never follow a redirect.
    pub fn new(timeout: Duration) -> Self {
        let builder = || {
            reqwest::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
        };
        Clients {
            any: builder().build().unwrap_or_default(),
            public: builder()
                .dns_resolver(Arc::new(PublicOnly))
                .build()
                .unwrap_or_default(),
        }
    }

    /// The client for a member's webhook: any address where the lab allows private ones, else
    /// public ones only (a literal private address refused at once, in words).
    pub async fn for_member(
        &self,
        url: &str,
        allow_private: bool,
    ) -> Result<&reqwest::Client, Undelivered> {
        if allow_private {
            return Ok(&self.any);
        }
        // The literal addresses the resolver never sees, and a clear refusal at once.
        refuse_private(url).await?;
        Ok(&self.public)
    }

    /// The client for the lab's channel (an admin's URL).
    pub fn for_lab(&self) -> &reqwest::Client {
        &self.any
    }
}

/// Where a webhook message goes, as its owner saved it.
pub struct Hook<'a> {
    pub url: &'a str,
    pub format: WebhookFormat,
    pub secret: Option<&'a str>,
}

/// Most of a service's answer read.
const ANSWER_BYTES: usize = 16 * 1024;

/// Sends one webhook message: `json` as it is for the JSON format, `chat` as its service takes
/// it for the others. What the service answered, and the attempt's outcome.
pub async fn send_hook(
    client: &reqwest::Client,
    hook: &Hook<'_>,
    chat: &chat::Chat,
    json: &serde_json::Value,
    now: DateTime<Utc>,
    txn: &str,
) -> (ChannelAnswer, Result<(), Undelivered>) {
    let out =
        chat::request(hook.format, hook.url, hook.secret, chat, now, txn).unwrap_or_else(|| {
            chat::Outgoing {
                method: reqwest::Method::POST,
                url: hook.url.to_string(),
                bearer: None,
                body: json.clone(),
            }
        });
    let mut request = client.request(out.method, &out.url).json(&out.body);
    if let Some(token) = &out.bearer {
        request = request.bearer_auth(token);
    }
    let mut response = match request.send().await {
        Ok(response) => response,
        // The URL is a secret (Slack's, WeCom's and DingTalk's carry a key): the error without it.
        Err(e) => {
            let why = format!("{}", e.without_url());
            let answer = ChannelAnswer {
                delivered: false,
                status: None,
                answer: String::new(),
                problem: Some(why.clone()),
            };
            return (answer, Err(Undelivered::Retry(why)));
        }
    };
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= ANSWER_BYTES {
            bytes.truncate(ANSWER_BYTES);
            break;
        }
    }
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let verdict = chat::verdict(hook.format, status, &body);
    let outcome = match verdict {
        chat::Verdict::Delivered => Ok(()),
        chat::Verdict::Later(why) => Err(Undelivered::Retry(why)),
        chat::Verdict::Refused(why) => Err(Undelivered::Refused(why)),
    };
    let answer = ChannelAnswer {
        delivered: outcome.is_ok(),
        status: Some(status),
        answer: chat::clip(&body, 2000),
        problem: outcome.as_ref().err().map(|e| match e {
            Undelivered::Retry(why) | Undelivered::Drop(why) | Undelivered::Refused(why) => {
                why.clone()
            }
        }),
    };
    (answer, outcome)
}

pub fn start(
    context: NotifyContext,
    wake: Arc<tokio::sync::Notify>,
    passes: crate::runtime::tasks::Passes,
    shutdown: CancellationToken,
) {
    crate::runtime::tasks::supervise("deliverer", shutdown.clone(), move || {
        run(
            context.clone(),
            wake.clone(),
            passes.clone(),
            shutdown.clone(),
        )
    });
}

/// Claims and sends messages until nothing more may go now, then waits for a wake, an event, a
/// requested pass or the next message due. A pass is a round of claims from a wake to "nothing
/// claimable": a request is served by the first round that started after it.
async fn run(
    context: NotifyContext,
    wake: Arc<tokio::sync::Notify>,
    passes: crate::runtime::tasks::Passes,
    shutdown: CancellationToken,
) {
    {
        let slots = Arc::new(Semaphore::new(CONCURRENT));
        let client = Clients::new(context.retry.timeout);
        let in_flight = InFlight::default();
        // Messages queued by this process (not relayed: each node delivers what it queued).
        let mut events = context.store.events().subscribe();
        let mut asked = passes.asked();
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                break;
            };
            let mut claim_failed = false;
            let now = context.clock.now();
            let lease = chrono::Duration::from_std(context.retry.timeout * 4)
                .unwrap_or(chrono::Duration::minutes(1));
            match context
                .store
                .outbox()
                .claim(now, lease, &in_flight.busy())
                .await
            {
                Ok(Some(message)) => {
                    let context = context.clone();
                    let client = client.clone();
                    let place = in_flight.take(message.user_id.unwrap_or(0));
                    let wake = wake.clone();
                    tokio::spawn(async move {
                        deliver(&context, &client, message).await;
                        drop(place);
                        drop(slot);
                        // A destination that held its share may have more waiting.
                        wake.notify_one();
                    });
                    continue;
                }
                Ok(None) => {
                    drop(slot);
                    passes.served(asked);
                }
                Err(e) => {
                    drop(slot);
                    tracing::warn!(error = %e, "could not read the outbox");
                    claim_failed = true;
                }
            }
            // Nothing to claim now: until the next message is due. After a failed claim, a
            // while whatever is due (a message that fails every claim must not spin the loop).
            let due = match claim_failed {
                true => Err(()),
                false => (context.store.outbox().next_due(&in_flight.busy()).await).map_err(drop),
            };
            let sleep = match due {
                Ok(Some(due)) => (due - context.clock.now())
                    .to_std()
                    .unwrap_or_default()
                    .min(LONGEST_SLEEP),
                Ok(None) => LONGEST_SLEEP,
                Err(()) => DB_RETRY,
            };
            tokio::select! {
                _ = wake.notified() => {}
                _ = events.changed(crate::runtime::events::Event::concerns_deliverer) => {}
                _ = passes.requested() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = shutdown.cancelled() => break,
            }
            asked = passes.asked();
        }
    }
}

/// Deliveries one destination (a member, or the lab channel) may have in flight at once: an
/// endpoint that never answers holds this many of the deliverer's slots, never all of them.
const PER_DESTINATION: usize = 2;

/// Deliveries in flight per destination (member id; 0 for the lab channel).
#[derive(Clone, Default)]
struct InFlight(Arc<std::sync::Mutex<std::collections::HashMap<i64, usize>>>);

/// One delivery's place among its destination's; dropping it frees the place.
struct Place {
    in_flight: InFlight,
    destination: i64,
}

impl InFlight {
    fn counts(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<i64, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Destinations that hold their whole share now.
    fn busy(&self) -> Vec<i64> {
        let mut busy: Vec<i64> = (self.counts().iter())
            .filter(|(_, n)| **n >= PER_DESTINATION)
            .map(|(d, _)| *d)
            .collect();
        busy.sort_unstable();
        busy
    }

    fn take(&self, destination: i64) -> Place {
        *self.counts().entry(destination).or_default() += 1;
        Place {
            in_flight: self.clone(),
            destination,
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.in_flight.counts();
        if let Some(n) = counts.get_mut(&self.destination) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.destination);
            }
        }
    }
}

/// One attempt at one message, and its outcome recorded.
async fn deliver(context: &NotifyContext, client: &Clients, message: Claimed) {
    let now = context.clock.now();
    let outcome = attempt(context, client, &message, now).await;
    let retry = context.retry;
    let (status, retry_at, error) = match &outcome {
        Ok(()) => (OutboxStatus::Sent, None, None),
        Err(Undelivered::Drop(why)) => (OutboxStatus::Suppressed, None, Some(why.as_str())),
        Err(Undelivered::Refused(why)) => (OutboxStatus::Failed, None, Some(why.as_str())),
        Err(Undelivered::Retry(why)) if message.attempt < retry.attempts => {
            let wait = chrono::Duration::from_std(retry.backoff(message.attempt))
                .unwrap_or(chrono::Duration::hours(1));
            (OutboxStatus::Pending, Some(now + wait), Some(why.as_str()))
        }
        Err(Undelivered::Retry(why)) => (OutboxStatus::Failed, None, Some(why.as_str())),
    };
    match (&outcome, status) {
        (Ok(()), _) => tracing::info!(
            id = message.id, channel = message.channel.as_str(), event = %message.event,
            "notification sent"
        ),
        (Err(_), OutboxStatus::Failed) => tracing::error!(
            id = message.id, channel = message.channel.as_str(), event = %message.event,
            attempt = message.attempt, error = ?error, "notification failed; giving up"
        ),
        (Err(_), _) => tracing::warn!(
            id = message.id, channel = message.channel.as_str(), event = %message.event,
            attempt = message.attempt, error = ?error, "notification not delivered"
        ),
    }
    if let Err(e) = context
        .store
        .outbox()
        .finish(message.id, status, retry_at, error, context.clock.now())
        .await
    {
        // Its lease runs out and it is tried again: sent twice at worst, never lost.
        tracing::error!(id = message.id, error = %e, "could not record a delivery");
    }
}

async fn attempt(
    context: &NotifyContext,
    clients: &Clients,
    message: &Claimed,
    now: DateTime<Utc>,
) -> Result<(), Undelivered> {
    let store_error = |e: crate::store::StoreError| Undelivered::Retry(e.to_string());
    let settings = context
        .store
        .notifications()
        .settings()
        .await
        .map_err(store_error)?;
    let portal = settings
        .portal_url
        .clone()
        .unwrap_or_else(|| context.own_url.clone());
    let portal = portal.trim_end_matches('/').to_string();
    let txn = format!("lanes-{}", message.id);
    if message.channel == Channel::Lab {
        let (url, format, secret) = {
            let policy = context.policy.read().unwrap_or_else(|p| p.into_inner());
            let p = &*policy;
            (
                p.webhook_url.clone(),
                p.webhook_format,
                p.webhook_secret.clone(),
            )
        };
        let Some(url) = url else {
            return Err(Undelivered::Drop(
                "the policy names no lab webhook any more".into(),
            ));
        };
        let body = lab_body(
            &message.event,
            message.created_at,
            &message.text,
            &message.details,
        );
        let chat = lab_chat(&settings.lab_name, &message.text, &portal);
        let hook = Hook {
            url: &url,
            format,
            secret: secret.as_deref(),
        };
        return send_hook(clients.for_lab(), &hook, &chat, &body, now, &txn)
            .await
            .1;
    }
    let Some(user_id) = message.user_id else {
        return Err(Undelivered::Drop(
            "a personal message without a member".into(),
        ));
    };
    let Some(user) = context
        .store
        .accounts()
        .get(user_id)
        .await
        .map_err(store_error)?
    else {
        return Err(Undelivered::Drop("the member is gone".into()));
    };
    if !user.enabled {
        return Err(Undelivered::Drop("the member's account is disabled".into()));
    }
    // A message may name its own address: a test to an address, or a member's new address to
    // confirm. It goes there (and was limited when it was asked for).
    let named = match message.event.as_str() {
        super::event::CONFIRM_EMAIL => "address",
        _ => "test_address",
    };
    let test_to = message.details[named].as_str().map(str::to_string);
    // Attempts, not deliveries: each retry to a failing endpoint is a request too.
    let attempted = context
        .store
        .outbox()
        .attempts_since(user_id, now - chrono::Duration::hours(1))
        .await
        .map_err(store_error)?;
    let over = || {
        Undelivered::Drop(format!(
            "over the limit of {} messages an hour for {}",
            settings.per_user_per_hour, user.username
        ))
    };
    // Test messages are limited when they are made, not here.
    let limit = test_to.is_none().then_some(settings.per_user_per_hour);
    if limit.is_some_and(|limit| attempted >= limit) {
        return Err(over());
    }
    // Counted as it goes out; refused if another delivery took the hour's last request since.
    let claim = || async {
        let since = now - chrono::Duration::hours(1);
        match context
            .store
            .outbox()
            .claim_attempt(user_id, limit, since, now)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(over()),
            Err(e) => Err(store_error(e)),
        }
    };
    let prefs = context
        .store
        .notifications()
        .prefs(user_id)
        .await
        .map_err(store_error)?;
    let tz = zone(prefs.time_zone.as_deref(), &settings.time_zone);
    let cards = context
        .store
        .inventory()
        .card_index()
        .await
        .map_err(store_error)?;
    let offered = links::mint(&context.store, message, user_id, &portal, &settings, now)
        .await
        .map_err(store_error)?;
    let locale = context
        .store
        .accounts()
        .language_of(user_id)
        .await
        .map_err(store_error)?
        .and_then(|l| lanes_app::i18n::parse(&l))
        .unwrap_or_default();
    let reader = Reader {
        lab: &settings.lab_name,
        name: &user.display_name,
        tz,
        cards: &cards,
        portal: &portal,
        locale,
    };
    let rendered = render::render(
        &Event::read(&message.event, &message.details),
        message.created_at,
        &reader,
        &offered,
    );
    match message.channel {
        Channel::Email => {
            let Some(smtp) = &settings.smtp else {
                return Err(Undelivered::Drop("no mail server is set up".into()));
            };
            let Some(to) = test_to.or(user.email.clone()) else {
                return Err(Undelivered::Drop(format!(
                    "{} has no email address",
                    user.username
                )));
            };
            claim().await?;
            send_mail(smtp, &to, message.id, &rendered, context.retry.timeout).await
        }
        Channel::Webhook => {
            let Some(url) = prefs.webhook_url.clone() else {
                return Err(Undelivered::Drop(format!(
                    "{} has no webhook any more",
                    user.username
                )));
            };
            let client = clients
                .for_member(&url, settings.allow_private_webhooks)
                .await?;
            let body = serde_json::json!({
                "event": message.event,
                "at": message.created_at,
                "subject": rendered.subject,
                "text": rendered.text,
                "links": offered.iter().map(|(a, url)| (a.as_str().to_string(), serde_json::json!(url))).collect::<serde_json::Map<_, _>>(),
                "details": message.details,
            });
            let chat = personal_chat(&rendered, &offered, &reader);
            let hook = Hook {
                url: &url,
                format: prefs.webhook_format,
                secret: prefs.webhook_secret.as_deref(),
            };
            claim().await?;
            send_hook(client, &hook, &chat, &body, now, &txn).await.1
        }
        Channel::Lab => unreachable!("handled above"),
    }
}

/// A personal message as a chat shows it: its subject, its lines, its one-click answers and
/// the portal as buttons. The subject and lines carry what members control (job names, notes);
/// each format keeps them literal. The links are ours.
pub fn personal_chat(
    rendered: &render::Message,
    links: &[(lanes_types::notify::LinkAction, String)],
    reader: &Reader<'_>,
) -> chat::Chat {
    let mut buttons: Vec<(String, String)> = (links.iter())
        .map(|(action, url)| (render::action_label(*action, reader), url.clone()))
        .collect();
    buttons.push((render::open_label(reader), reader.portal.to_string()));
    chat::Chat {
        title: rendered.subject.clone(),
        lines: rendered.lines.clone(),
        links: buttons,
    }
}

/// A lab channel's message as a chat shows it: its one line under the lab's name, and the
/// portal as a button.
pub fn lab_chat(lab: &str, text: &str, portal: &str) -> chat::Chat {
    chat::Chat {
        title: format!("{lab}: {text}"),
        lines: Vec::new(),
        links: vec![(format!("Open {lab}"), portal.to_string())],
    }
}

/// The member's zone, else the lab's, else UTC.
pub fn zone(mine: Option<&str>, lab: &str) -> chrono_tz::Tz {
    mine.and_then(|z| z.parse().ok())
        .or_else(|| lab.parse().ok())
        .unwrap_or(chrono_tz::UTC)
}

/// Refuses a member's webhook whose host is this machine or a private network: from the server
/// it would reach services members cannot (admins may allow it in the settings).
/// Why a member's webhook URL cannot be saved where the lab allows no private webhooks: the
/// reason its test and its delivery would give. A host that does not resolve now is no reason
/// (it may later); one that resolves to this machine or a private network is.
pub async fn member_url_refused(url: &str, allow_private: bool) -> Option<String> {
    if allow_private {
        return None;
    }
    match refuse_private(url).await {
        Err(Undelivered::Drop(why) | Undelivered::Refused(why)) => Some(why),
        Err(Undelivered::Retry(_)) | Ok(()) => None,
    }
}

async fn refuse_private(url: &str) -> Result<(), Undelivered> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|_| Undelivered::Drop("the webhook URL is not a URL".into()))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| Undelivered::Drop("the webhook URL has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let addrs = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| Undelivered::Retry(format!("cannot resolve the webhook's host: {e}")))?;
    for addr in addrs {
        if is_private(addr.ip()) {
            return Err(Undelivered::Drop(PRIVATE_HOST.into()));
        }
    }
    Ok(())
}

/// Whether `ip` is anything but a globally reachable unicast address: this machine, a private
/// or shared network, or a special-purpose block of IANA's IPv4 and IPv6 Special-Purpose
/// Address Registries (documentation, benchmarking, multicast, reserved, and the IPv6 forms
/// that carry an IPv4 address: mapped, compatible, NAT64, 6to4, Teredo).
pub fn is_private(ip: std::net::IpAddr) -> bool {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    fn v4_special(v4: Ipv4Addr) -> bool {
        let [a, b, c, _] = v4.octets();
        a == 0                                        // 0.0.0.0/8 "this network"
            || a == 10                                // 10.0.0.0/8 private
            || a == 100 && (b & 0xc0) == 64           // 100.64.0.0/10 shared (CGN)
            || a == 127                               // 127.0.0.0/8 loopback
            || a == 169 && b == 254                   // 169.254.0.0/16 link-local
            || a == 172 && (b & 0xf0) == 16           // 172.16.0.0/12 private
            || a == 192 && b == 0 && c == 0           // 192.0.0.0/24 IETF assignments
            || a == 192 && b == 0 && c == 2           // 192.0.2.0/24 TEST-NET-1
            || a == 192 && b == 88 && c == 99         // 192.88.99.0/24 6to4 relay
            || a == 192 && b == 168                   // 192.168.0.0/16 private
            || a == 198 && (b & 0xfe) == 18           // 198.18.0.0/15 benchmarking
            || a == 198 && b == 51 && c == 100        // 198.51.100.0/24 TEST-NET-2
            || a == 203 && b == 0 && c == 113         // 203.0.113.0/24 TEST-NET-3
            || a >= 224 // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, broadcast
    }
    fn v6_special(v6: Ipv6Addr) -> bool {
        let s = v6.segments();
        (s[0..6] == [0; 6])                               // ::/96: unspecified, loopback, IPv4-compatible
            || (s[0..5] == [0; 5] && s[5] == 0xffff)       // ::ffff:0:0/96 IPv4-mapped
            || (s[0..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0) // ::ffff:0:0:0/96 translated
            || (s[0] == 0x64 && s[1] == 0xff9b)            // 64:ff9b::/96 and 64:ff9b:1::/48 NAT64
            || (s[0] == 0x100 && s[1..4] == [0, 0, 0])     // 100::/64 discard
            || (s[0] == 0x2001 && s[1] < 0x200)            // 2001::/23 IETF (Teredo, ORCHID…)
            || (s[0] == 0x2001 && s[1] == 0xdb8)           // 2001:db8::/32 documentation
            || s[0] == 0x2002                              // 2002::/16 6to4
            || (s[0] & 0xfff0) == 0x3ff0                   // 3fff::/20 documentation
            || s[0] == 0x5f00                              // 5f00::/16 SRv6 SIDs
            || (s[0] & 0xfe00) == 0xfc00                   // fc00::/7 unique local
            || (s[0] & 0xffc0) == 0xfe80                   // fe80::/10 link-local
            || (s[0] & 0xffc0) == 0xfec0                   // fec0::/10 site-local
            || (s[0] & 0xff00) == 0xff00 // ff00::/8 multicast
    }
    match ip {
        IpAddr::V4(v4) => v4_special(v4),
        IpAddr::V6(v6) => v6_special(v6),
    }
}

/// A resolver for members' webhooks that answers only public addresses, and refuses a name
/// with any other: reqwest connects to what it answers, so the address checked is the address
/// used (a name that answers a public address to a first lookup and 127.0.0.1 to the
/// connection's own cannot reach this machine), on every attempt.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() || addrs.iter().any(|a| is_private(a.ip())) {
                return Err(PRIVATE_HOST.into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

const PRIVATE_HOST: &str =
    "the webhook's host is on this machine or a private network, which the lab does not allow";

/// Sends one message through the lab's mail server. Its Message-ID is the outbox row's, so a
/// message sent again after a crash between the server's "250" and our record of it is one
/// message to mail programs.
async fn send_mail(
    smtp: &SmtpSettings,
    to: &str,
    outbox_id: i64,
    rendered: &render::Message,
    timeout: Duration,
) -> Result<(), Undelivered> {
    use lettre::message::{Mailbox, MultiPart};
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let from: Mailbox = smtp
        .from
        .parse()
        .map_err(|e| Undelivered::Drop(format!("the sender address is not valid: {e}")))?;
    let to: Mailbox = to
        .parse()
        .map_err(|e| Undelivered::Drop(format!("the member's address is not valid: {e}")))?;
    let domain = from.email.domain().to_string();
    let email = Message::builder()
        .from(from)
        .to(to)
        .subject(&rendered.subject)
        .message_id(Some(format!("<lanes-{outbox_id}@{domain}>")))
        .multipart(MultiPart::alternative_plain_html(
            rendered.text.clone(),
            rendered.html.clone(),
        ))
        .map_err(|e| Undelivered::Drop(format!("cannot build the message: {e}")))?;
    let builder = match smtp.security {
        SmtpSecurity::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host),
        SmtpSecurity::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
            .map_err(|e| Undelivered::Retry(format!("cannot set up STARTTLS: {e}")))?,
        SmtpSecurity::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)
            .map_err(|e| Undelivered::Retry(format!("cannot set up TLS: {e}")))?,
    };
    let mut builder = builder.port(smtp.port).timeout(Some(timeout));
    if !smtp.username.is_empty() {
        builder = builder.credentials(Credentials::new(
            smtp.username.clone(),
            smtp.password.clone().unwrap_or_default(),
        ));
    }
    let transport = builder.build();
    match transport.send(email).await {
        Ok(_) => Ok(()),
        // A permanent refusal (5xx: no such mailbox, not allowed) is not worth retrying.
        Err(e) if e.is_permanent() => Err(Undelivered::Drop(format!(
            "the mail server refused it: {e}"
        ))),
        Err(e) => Err(Undelivered::Retry(format!("the mail server: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_loopback_addresses_are_refused_and_public_ones_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.9",
            "172.16.5.5",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            // Ranges the first list missed (IANA's special-purpose registries).
            "0.1.2.3",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "192.88.99.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "::10.0.0.1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
            "3fff::1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "2001:4860:4860::8888",
            "100.128.0.1",
            "1.1.1.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "172.32.0.1",
        ] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    /// The address a member's webhook connects to is the address checked: a name that answers
    /// loopback at connect time (DNS rebinding) is refused by the connection's own resolver,
    /// and nothing reaches the listener.
    #[tokio::test]
    async fn a_members_webhook_never_connects_to_a_private_address_whatever_the_name_answers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(PublicOnly))
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let sent = client
            .post(format!("http://localhost:{port}/hook"))
            .body("{}")
            .send()
            .await;
        assert!(sent.is_err(), "{sent:?}");
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "the listener was reached");
    }

    #[test]
    fn a_members_zone_wins_then_the_labs_then_utc() {
        assert_eq!(
            zone(Some("Asia/Shanghai"), "UTC"),
            chrono_tz::Asia::Shanghai
        );
        assert_eq!(zone(None, "Europe/Berlin"), chrono_tz::Europe::Berlin);
        assert_eq!(zone(Some("Mars/Olympus"), "nowhere"), chrono_tz::UTC);
    }
}
