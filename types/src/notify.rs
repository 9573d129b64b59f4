//! Personal notifications: the events a member may be told of, the channels that tell them,
//! what admins set for the lab (SMTP, defaults, which events are required) and what each
//! member chooses, the outbox admins watch, and the one-click answers in a message.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Something a member may be told of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A booking of theirs starts within the lead time.
    BookingStartsSoon,
    /// A booking of theirs ends within the lead time.
    BookingEndsSoon,
    /// A booking of theirs was found idle (and, where the policy releases, when it will be).
    BookingIdle,
    /// A booking of theirs was released by the idle policy.
    BookingReleased,
    /// A process of theirs uses a card they have not booked (and, where the watchdog ends
    /// such processes, when).
    UnbookedUse,
    JobStarted,
    JobFinished,
    JobFailed,
    JobTimedOut,
    /// The booking a job of theirs runs in ends soon, and the job with it.
    JobBookingEnding,
    /// The cards a preemptible job of theirs borrowed were taken back by their holder.
    LoanReclaimed,
    /// Their booked GPU-hours this week reached the admins' warning share of their quota.
    QuotaNear,
    /// Booked vs used GPU-hours of the week before.
    WeeklyDigest,
    /// A card of a booking of theirs is failing (with a move to a healthy card when one is free).
    CardFailing,
    /// To a group's admins on the first of the month: the group's statement of the month before.
    MonthlyStatement,
}

impl EventKind {
    pub const ALL: [EventKind; 15] = [
        EventKind::BookingStartsSoon,
        EventKind::BookingEndsSoon,
        EventKind::BookingIdle,
        EventKind::BookingReleased,
        EventKind::UnbookedUse,
        EventKind::JobStarted,
        EventKind::JobFinished,
        EventKind::JobFailed,
        EventKind::JobTimedOut,
        EventKind::JobBookingEnding,
        EventKind::LoanReclaimed,
        EventKind::QuotaNear,
        EventKind::WeeklyDigest,
        EventKind::CardFailing,
        EventKind::MonthlyStatement,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::BookingStartsSoon => "booking_starts_soon",
            EventKind::BookingEndsSoon => "booking_ends_soon",
            EventKind::BookingIdle => "booking_idle",
            EventKind::BookingReleased => "booking_released",
            EventKind::UnbookedUse => "unbooked_use",
            EventKind::JobStarted => "job_started",
            EventKind::JobFinished => "job_finished",
            EventKind::JobFailed => "job_failed",
            EventKind::JobTimedOut => "job_timed_out",
            EventKind::JobBookingEnding => "job_booking_ending",
            EventKind::LoanReclaimed => "loan_reclaimed",
            EventKind::QuotaNear => "quota_near",
            EventKind::WeeklyDigest => "weekly_digest",
            EventKind::CardFailing => "card_failing",
            EventKind::MonthlyStatement => "monthly_statement",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// For people: the account page's rows.
    pub fn label(self) -> &'static str {
        match self {
            EventKind::BookingStartsSoon => "A booking starts soon",
            EventKind::BookingEndsSoon => "A booking ends soon",
            EventKind::BookingIdle => "A booking sits idle",
            EventKind::BookingReleased => "A booking was released for idling",
            EventKind::UnbookedUse => "A process of yours runs on a card you have not booked",
            EventKind::JobStarted => "A queue job started",
            EventKind::JobFinished => "A job finished",
            EventKind::JobFailed => "A job failed",
            EventKind::JobTimedOut => "A job reached its time limit",
            EventKind::JobBookingEnding => "A running job's booking ends soon",
            EventKind::LoanReclaimed => "Borrowed cards were taken back",
            EventKind::QuotaNear => "Your weekly quota is nearly used",
            EventKind::WeeklyDigest => "Weekly digest: booked vs used",
            EventKind::CardFailing => "A card you booked is failing",
            EventKind::MonthlyStatement => "Your groups' monthly statement (admins)",
        }
    }

    /// Whether this event goes to everyone by email unless an admin says otherwise.
    fn default_email(self) -> bool {
        !matches!(self, EventKind::JobStarted | EventKind::WeeklyDigest)
    }
}

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Email,
    /// The member's own webhook.
    Webhook,
    /// The lab channel: the admins' webhook of the enforcement policy.
    Lab,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Webhook => "webhook",
            Channel::Lab => "lab",
        }
    }

    pub fn parse(s: &str) -> Option<Channel> {
        [Channel::Email, Channel::Webhook, Channel::Lab]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// Which personal channels carry one event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Channels {
    pub email: bool,
    pub webhook: bool,
}

/// The admins' rule for one event: the channels members get unless they choose, and whether
/// they may turn it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRule {
    #[serde(flatten)]
    pub channels: Channels,
    /// Members may not turn this event off: they always get it on the default channels.
    #[serde(default)]
    pub required: bool,
}

/// How the SMTP connection is protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// Plain SMTP, upgraded with STARTTLS (refused if the server cannot): port 587.
    #[default]
    Starttls,
    /// TLS from the first byte: port 465.
    Tls,
    /// No encryption at all: only for a relay on this host or a trusted network.
    None,
}

/// The mail server Lanes sends through.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub security: SmtpSecurity,
    /// Log in with these (`AUTH PLAIN`/`LOGIN`); none when empty.
    #[serde(default)]
    pub username: String,
    /// Write-only: a read answers it as `None` and `password_set` says whether one is kept; a
    /// save without it keeps the one stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default)]
    pub password_set: bool,
    /// The sender, `Name <address>` or an address.
    pub from: String,
}

/// What admins set for notifications (`GET|PUT /api/v1/notifications/settings`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifySettings {
    /// Named in every subject and signature.
    pub lab_name: String,
    /// Where the portal is reached from members' mail (`https://gpu.lab.example`), for links;
    /// none: this node's own address.
    pub portal_url: Option<String>,
    /// The lab's time zone (IANA name): members who chose none read times in it.
    pub time_zone: String,
    pub smtp: Option<SmtpSettings>,
    /// Minutes before a booking starts that its holder is reminded (1 to 1440).
    pub starts_soon_min: u32,
    /// Minutes before a booking ends that its holder is told (1 to 1440).
    pub ends_soon_min: u32,
    /// Percent of the weekly GPU-hour quota at which its holder is warned (1 to 100).
    pub quota_near_pct: u32,
    /// Most messages one member gets in an hour; more are suppressed (and shown to admins).
    pub per_user_per_hour: u32,
    /// Hours a one-click link in a message works (1 to 168).
    pub link_hours: u32,
    /// Members' webhooks may point at loopback and private addresses (off: a member's URL
    /// could otherwise make the server reach services only it can see).
    pub allow_private_webhooks: bool,
    /// Per event: what members get unless they choose, and whether they may turn it off.
    pub events: BTreeMap<EventKind, EventRule>,
}

impl Default for NotifySettings {
    fn default() -> Self {
        Self {
            lab_name: "Lanes".into(),
            portal_url: None,
            time_zone: "UTC".into(),
            smtp: None,
            starts_soon_min: 10,
            ends_soon_min: 15,
            quota_near_pct: 80,
            per_user_per_hour: 20,
            link_hours: 24,
            allow_private_webhooks: false,
            events: BTreeMap::new(),
        }
    }
}

impl NotifySettings {
    /// The rule for `kind`: the admins' if they set one, else the built-in default.
    pub fn rule(&self, kind: EventKind) -> EventRule {
        self.events.get(&kind).copied().unwrap_or(EventRule {
            channels: Channels {
                email: kind.default_email(),
                webhook: true,
            },
            required: false,
        })
    }

    /// The first thing wrong with these settings, in words.
    pub fn problem(&self) -> Option<String> {
        if self.lab_name.trim().is_empty() || self.lab_name.chars().count() > 80 {
            return Some("lab_name must be 1 to 80 characters".into());
        }
        if let Some(url) = &self.portal_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 500 {
                return Some("portal_url must be an http:// or https:// URL".into());
            }
        }
        for (name, value, max) in [
            ("starts_soon_min", self.starts_soon_min, 1440),
            ("ends_soon_min", self.ends_soon_min, 1440),
            ("quota_near_pct", self.quota_near_pct, 100),
            ("per_user_per_hour", self.per_user_per_hour, 10_000),
            ("link_hours", self.link_hours, 168),
        ] {
            if !(1..=max).contains(&value) {
                return Some(format!("{name} must be from 1 to {max}"));
            }
        }
        if let Some(smtp) = &self.smtp {
            if smtp.host.trim().is_empty() || smtp.host.len() > 253 || smtp.host.contains(' ') {
                return Some("smtp.host must be a host name or address".into());
            }
            if smtp.port == 0 {
                return Some("smtp.port must be from 1 to 65535".into());
            }
            if !smtp.from.contains('@') || smtp.from.len() > 320 {
                return Some("smtp.from must be an address (name@host or Name <name@host>)".into());
            }
            if smtp.username.len() > 320 || smtp.password.as_ref().is_some_and(|p| p.len() > 1000) {
                return Some("smtp.username and smtp.password must be shorter".into());
            }
        }
        None
    }
}

/// What a member chose (`GET|PUT /api/v1/me/notifications`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyPrefs {
    /// IANA time zone times are written in (`Europe/Berlin`); none: the lab's.
    pub time_zone: Option<String>,
    /// The member's own webhook; none: no webhook messages. A secret: never logged, and shown
    /// only to its owner.
    pub webhook_url: Option<String>,
    pub webhook_format: crate::enforcement::WebhookFormat,
    /// The webhook's signing secret or access token; write-only, as the lab's
    /// ([`crate::enforcement::Policy::webhook_secret`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    pub webhook_secret_set: bool,
    /// Per event: the channels chosen; an event not named here takes the lab's default.
    pub events: BTreeMap<EventKind, Channels>,
}

impl NotifyPrefs {
    /// The channels `kind` goes to for this member under `settings`.
    pub fn channels(&self, settings: &NotifySettings, kind: EventKind) -> Channels {
        self.under(settings.rule(kind), kind)
    }

    /// The same, with the lab's rules as the account page has them.
    pub fn channels_with(
        &self,
        rules: &BTreeMap<EventKind, EventRule>,
        kind: EventKind,
    ) -> Channels {
        let rule = rules
            .get(&kind)
            .copied()
            .unwrap_or_else(|| NotifySettings::default().rule(kind));
        self.under(rule, kind)
    }

    fn under(&self, rule: EventRule, kind: EventKind) -> Channels {
        if rule.required {
            return rule.channels;
        }
        self.events.get(&kind).copied().unwrap_or(rule.channels)
    }

    /// As it is shown: the secret left out, `webhook_secret_set` saying whether one is kept.
    pub fn redacted(mut self) -> Self {
        self.webhook_secret_set = self.webhook_secret.take().is_some();
        self
    }

    pub fn problem(&self) -> Option<String> {
        if let Some(url) = &self.webhook_url {
            let secret = self.webhook_secret.is_some() || self.webhook_secret_set;
            if let Some(problem) = self.webhook_format.problem(url, secret) {
                return Some(problem);
            }
        }
        if self.webhook_secret.as_ref().is_some_and(|s| s.len() > 500) {
            return Some("webhook_secret must be at most 500 characters".into());
        }
        if self.time_zone.as_ref().is_some_and(|z| z.len() > 64) {
            return Some("time_zone must be an IANA name such as Europe/Berlin".into());
        }
        None
    }
}

/// A member's choices with what they cannot change, for the account page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotifyPrefsView {
    #[serde(flatten)]
    pub prefs: NotifyPrefs,
    /// The address email goes to (the account's); none: no email.
    pub email: Option<String>,
    /// Whether the lab can send email at all (an admin set up SMTP).
    pub email_available: bool,
    /// The lab's rule for every event.
    pub rules: BTreeMap<EventKind, EventRule>,
    pub lab_time_zone: String,
}

/// Where an outbox message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    Pending,
    Sent,
    /// Every attempt failed; `last_error` says why.
    Failed,
    /// Over the member's hourly limit, or no channel could take it; not sent.
    Suppressed,
}

impl OutboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Failed => "failed",
            OutboxStatus::Suppressed => "suppressed",
        }
    }

    pub fn parse(s: &str) -> Option<OutboxStatus> {
        [
            OutboxStatus::Pending,
            OutboxStatus::Sent,
            OutboxStatus::Failed,
            OutboxStatus::Suppressed,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// One message in the outbox, as admins see it (`GET /api/v1/notifications/outbox`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    pub id: i64,
    pub created_at: DateTime<Utc>,
    /// The member it is for; none: the lab channel.
    pub username: Option<String>,
    pub channel: Channel,
    /// The personal event, or the lab channel's event name.
    pub event: String,
    /// One line: what happened.
    pub text: String,
    pub status: OutboxStatus,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Body of `POST /api/v1/notifications/test`: a test message to an address or to a member's
/// channels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestSend {
    /// Send to this address (an admin checking SMTP).
    pub email: Option<String>,
    /// Send to this member's chosen channels; neither: to the caller's.
    pub user: Option<String>,
}

/// What a test send queued.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestSent {
    /// The outbox messages it made (watch them in the outbox).
    pub queued: Vec<i64>,
}

/// Body of a channel test (`POST /api/v1/me/notifications/channel-test`, and the lab's
/// `POST /api/v1/policy/channel-test`): a test message sent now to these values, or to the
/// saved ones where a field is left out (so a form can be tried before it is saved).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelTest {
    pub webhook_url: Option<String>,
    pub webhook_format: Option<crate::enforcement::WebhookFormat>,
    /// None: the saved secret (when the URL is the saved one too).
    pub webhook_secret: Option<String>,
}

/// What the service answered a channel test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelAnswer {
    /// The service took the message (its status and, where it says so in its body, its code).
    pub delivered: bool,
    /// The HTTP status it answered; none when it could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The start of its answer's body, as it sent it.
    pub answer: String,
    /// Why it was not delivered, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What a one-click link in a message does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkAction {
    /// Move the booking's end an hour later.
    ExtendHour,
    /// End the booking now (or cancel it if it has not begun).
    Release,
    /// "Still using it": clears the idle mark and starts a new idle window.
    StillUsing,
    CancelJob,
    /// A member's own new e-mail address, confirmed by opening a link sent to it.
    ConfirmEmail,
    /// Move the booking off a failing card to the healthy one the message names.
    MoveCard,
}

impl LinkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkAction::ExtendHour => "extend_hour",
            LinkAction::Release => "release",
            LinkAction::StillUsing => "still_using",
            LinkAction::CancelJob => "cancel_job",
            LinkAction::ConfirmEmail => "confirm_email",
            LinkAction::MoveCard => "move_card",
        }
    }

    pub fn parse(s: &str) -> Option<LinkAction> {
        [
            LinkAction::ExtendHour,
            LinkAction::Release,
            LinkAction::StillUsing,
            LinkAction::CancelJob,
            LinkAction::ConfirmEmail,
            LinkAction::MoveCard,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }

    /// The button's words.
    pub fn label(self) -> &'static str {
        match self {
            LinkAction::ExtendHour => "Extend by an hour",
            LinkAction::Release => "Release now",
            LinkAction::StillUsing => "Still using it",
            LinkAction::CancelJob => "Cancel the job",
            LinkAction::ConfirmEmail => "Confirm this address",
            LinkAction::MoveCard => "Move to the healthy card",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_required_event_ignores_the_members_choice_and_others_take_it() {
        let mut settings = NotifySettings::default();
        let mut prefs = NotifyPrefs::default();
        prefs
            .events
            .insert(EventKind::BookingIdle, Channels::default());
        assert_eq!(
            prefs.channels(&settings, EventKind::BookingIdle),
            Channels::default()
        );
        settings.events.insert(
            EventKind::BookingIdle,
            EventRule {
                channels: Channels {
                    email: true,
                    webhook: false,
                },
                required: true,
            },
        );
        assert!(prefs.channels(&settings, EventKind::BookingIdle).email);
        // Unnamed events take the built-in default.
        assert!(prefs.channels(&settings, EventKind::JobFailed).email);
        assert!(!prefs.channels(&settings, EventKind::WeeklyDigest).email);
    }

    #[test]
    fn names_round_trip_and_serde_agrees() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        for action in [
            LinkAction::ExtendHour,
            LinkAction::Release,
            LinkAction::StillUsing,
            LinkAction::CancelJob,
        ] {
            assert_eq!(LinkAction::parse(action.as_str()), Some(action));
        }
    }

    #[test]
    fn settings_out_of_range_are_refused_in_words() {
        let mut s = NotifySettings::default();
        assert_eq!(s.problem(), None);
        s.starts_soon_min = 0;
        assert!(s.problem().unwrap().contains("starts_soon_min"));
        s = NotifySettings::default();
        s.smtp = Some(SmtpSettings {
            host: "mail.example".into(),
            port: 587,
            security: SmtpSecurity::Starttls,
            username: String::new(),
            password: None,
            password_set: false,
            from: "nobody".into(),
        });
        assert!(s.problem().unwrap().contains("smtp.from"));
    }
}
