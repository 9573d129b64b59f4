//! Wire types of enforcement: the admin policy (`GET|PUT /api/v1/policy`) and unbooked GPU use
//! (`GET /api/v1/violations`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What the watchdog does about a process on a card its owner has not booked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchdogMode {
    /// Record it and show it; nothing else.
    #[default]
    Observe,
    /// Also notify (the webhook names the user).
    Warn,
    /// Also end it after the grace period: SIGTERM, then SIGKILL a grace period later.
    Terminate,
}

impl WatchdogMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchdogMode::Observe => "observe",
            WatchdogMode::Warn => "warn",
            WatchdogMode::Terminate => "terminate",
        }
    }
}

/// Body format of the outgoing webhook: a plain JSON POST, or a chat service's own message
/// format (its cards or markdown, its signature where it signs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"event", "at", "text", ...details}`.
    #[default]
    Json,
    /// Slack's incoming webhooks (and Mattermost's): text with blocks and link buttons.
    Slack,
    /// A Feishu or Lark group's custom bot: an interactive card, signed when the bot has a
    /// signing secret.
    Feishu,
    /// A DingTalk group's custom robot: an action card, signed (HMAC-SHA256 of the timestamp)
    /// when the robot has a signing secret.
    Dingtalk,
    /// A WeCom (企业微信) group robot: markdown.
    Wecom,
    /// A Microsoft Teams channel's workflow webhook: an Adaptive Card.
    Teams,
    /// A Matrix room: the URL is the room's `…/send/m.room.message` endpoint on the homeserver,
    /// the secret the bot account's access token.
    Matrix,
    /// An ntfy topic (`https://ntfy.sh/lab-gpus`); the secret an access token where the topic
    /// is protected.
    Ntfy,
}

impl WebhookFormat {
    pub const ALL: [WebhookFormat; 8] = [
        WebhookFormat::Json,
        WebhookFormat::Slack,
        WebhookFormat::Feishu,
        WebhookFormat::Dingtalk,
        WebhookFormat::Wecom,
        WebhookFormat::Teams,
        WebhookFormat::Matrix,
        WebhookFormat::Ntfy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
            WebhookFormat::Feishu => "feishu",
            WebhookFormat::Dingtalk => "dingtalk",
            WebhookFormat::Wecom => "wecom",
            WebhookFormat::Teams => "teams",
            WebhookFormat::Matrix => "matrix",
            WebhookFormat::Ntfy => "ntfy",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookFormat> {
        WebhookFormat::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// The service's name, as its users know it.
    pub fn service(self) -> &'static str {
        match self {
            WebhookFormat::Json => "JSON",
            WebhookFormat::Slack => "Slack / Mattermost",
            WebhookFormat::Feishu => "Feishu / Lark (飞书)",
            WebhookFormat::Dingtalk => "DingTalk (钉钉)",
            WebhookFormat::Wecom => "WeCom (企业微信)",
            WebhookFormat::Teams => "Microsoft Teams",
            WebhookFormat::Matrix => "Matrix",
            WebhookFormat::Ntfy => "ntfy",
        }
    }

    /// What the secret is for this service; `None` where it takes none.
    pub fn secret_use(self) -> Option<&'static str> {
        match self {
            WebhookFormat::Feishu | WebhookFormat::Dingtalk => Some("signing secret"),
            WebhookFormat::Matrix | WebhookFormat::Ntfy => Some("access token"),
            _ => None,
        }
    }

    /// The first thing wrong with `url` (and `secret`, when one is kept or given) for this
    /// format, in words.
    pub fn problem(self, url: &str, secret: bool) -> Option<String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 2000 {
            return Some("webhook_url must be an http:// or https:// URL".into());
        }
        let path = url
            .splitn(4, '/')
            .nth(3)
            .map(|p| p.split(['?', '#']).next().unwrap_or(""))
            .unwrap_or("");
        match self {
            WebhookFormat::Matrix if !(path.contains("_matrix/client/") && path.contains("/rooms/") && path.ends_with("/send/m.room.message")) => Some(
                "a Matrix webhook_url is the room's send endpoint: https://HOMESERVER/_matrix/client/v3/rooms/ROOM_ID/send/m.room.message".into(),
            ),
            WebhookFormat::Matrix if !secret => Some(
                "Matrix needs the bot account's access token as the webhook secret".into(),
            ),
            WebhookFormat::Ntfy if path.trim_end_matches('/').rsplit('/').next().unwrap_or("").is_empty() => Some(
                "an ntfy webhook_url names the topic: https://ntfy.sh/YOUR_TOPIC".into(),
            ),
            _ => None,
        }
    }
}

/// A secret kept with a webhook: written, never read back. A save without one keeps the one
/// stored while the URL stays the same (a new URL must not be handed the old URL's token); an
/// empty one removes it.
pub fn keep_secret(
    given: Option<String>,
    stored: Option<String>,
    same_url: bool,
) -> Option<String> {
    match given {
        None => stored.filter(|_| same_url),
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s),
    }
}

/// Enforcement policy, set by admins at run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    pub watchdog: WatchdogMode,
    /// Seconds an unbooked process may run before `terminate` sends SIGTERM; SIGKILL follows
    /// after as many seconds again.
    pub violation_grace_s: u64,
    /// Unix accounts whose processes are never violations (e.g. a monitoring agent).
    pub exempt_users: Vec<String>,
    /// Executables, by absolute path, whose processes are never violations (e.g.
    /// `/usr/bin/nvidia-persistenced`). Matched on the path the kernel gives for the process's
    /// executable, not on its command name, which anyone can choose by renaming a copy.
    pub exempt_commands: Vec<String>,
    /// A booking whose cards average under this GPU utilization (percent) over the window is idle.
    pub idle_threshold_pct: u32,
    pub idle_window_s: u64,
    /// Release idle bookings (default off), this many seconds after they were found idle.
    pub idle_release: bool,
    pub idle_release_grace_s: u64,
    /// Where notifications go (JSON POST); none when unset. Treated as a secret: never logged.
    pub webhook_url: Option<String>,
    pub webhook_format: WebhookFormat,
    /// The webhook's signing secret or access token (see [`WebhookFormat::secret_use`]).
    /// Write-only: a read answers it as `None` and `webhook_secret_set` says whether one is
    /// kept; a save without it keeps the one stored, an empty one removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    pub webhook_secret_set: bool,
    /// What happens to failing and degraded cards.
    pub health: crate::health::HealthPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            watchdog: WatchdogMode::Observe,
            violation_grace_s: 60,
            exempt_users: Vec::new(),
            exempt_commands: Vec::new(),
            idle_threshold_pct: 5,
            idle_window_s: 30 * 60,
            idle_release: false,
            idle_release_grace_s: 15 * 60,
            webhook_url: None,
            webhook_format: WebhookFormat::Json,
            webhook_secret: None,
            webhook_secret_set: false,
            health: Default::default(),
        }
    }
}

/// Longest window or grace period a policy may set: one week.
pub const MAX_POLICY_SECONDS: u64 = 7 * 24 * 3600;

impl Policy {
    /// As it is shown: the webhook's secret left out, `webhook_secret_set` saying whether
    /// one is kept.
    pub fn redacted(mut self) -> Self {
        self.webhook_secret_set = self.webhook_secret.take().is_some();
        self
    }

    /// The first thing wrong with this policy, in words.
    pub fn problem(&self) -> Option<String> {
        if self.idle_threshold_pct > 100 {
            return Some("idle_threshold_pct is a percentage: 0 to 100".into());
        }
        for (name, value, min) in [
            ("violation_grace_s", self.violation_grace_s, 0),
            ("idle_window_s", self.idle_window_s, 1),
            ("idle_release_grace_s", self.idle_release_grace_s, 0),
        ] {
            if !(min..=MAX_POLICY_SECONDS).contains(&value) {
                return Some(format!(
                    "{name} must be from {min} to {MAX_POLICY_SECONDS} seconds"
                ));
            }
        }
        if let Some(url) = &self.webhook_url {
            let secret = self.webhook_secret.is_some() || self.webhook_secret_set;
            if let Some(problem) = self.webhook_format.problem(url, secret) {
                return Some(problem);
            }
        }
        if self.webhook_secret.as_ref().is_some_and(|s| s.len() > 500) {
            return Some("webhook_secret must be at most 500 characters".into());
        }
        let blank = |v: &Vec<String>| v.iter().any(|s| s.trim().is_empty() || s.len() > 64);
        if blank(&self.exempt_users) {
            return Some("exempt users are names of 1 to 64 characters".into());
        }
        if let Some(bad) = self
            .exempt_commands
            .iter()
            .find(|p| !p.starts_with('/') || p.len() > 4096 || p.contains('\0'))
        {
            return Some(format!(
                "exempt commands are absolute paths of executables (e.g. /usr/bin/nvidia-persistenced), not {bad:?}: a command name can be chosen by renaming a copy"
            ));
        }
        None
    }
}

/// What the watchdog has done about a violation so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationAction {
    Observed,
    Warned,
    /// SIGTERM was sent.
    Terminated,
    /// SIGKILL was sent.
    Killed,
}

impl ViolationAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationAction::Observed => "observed",
            ViolationAction::Warned => "warned",
            ViolationAction::Terminated => "terminated",
            ViolationAction::Killed => "killed",
        }
    }
}

impl std::str::FromStr for ViolationAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "observed" => ViolationAction::Observed,
            "warned" => ViolationAction::Warned,
            "terminated" => ViolationAction::Terminated,
            "killed" => ViolationAction::Killed,
            other => return Err(format!("unknown violation action {other:?}")),
        })
    }
}

/// A process on a card its owner had not booked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub id: i64,
    pub node: String,
    pub gpu_uuid: String,
    pub pid: u32,
    /// The process owner's Unix account, when /proc shows it.
    pub unix_user: Option<String>,
    /// The Lanes user of that account, if there is one.
    pub username: Option<String>,
    pub command: Option<String>,
    pub memory_bytes: Option<u64>,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// When it left the card; `None` while it is still there.
    pub ended: Option<DateTime<Utc>>,
    pub action: ViolationAction,
    /// The container it ran in: then `unix_user` is the person behind it, or `None` when
    /// nobody could be tied to it (never the runtime's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::container::ContainerRef>,
}
