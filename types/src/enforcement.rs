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

/// Body format of the outgoing webhook.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"event", "at", "text", ...details}`.
    #[default]
    Json,
    /// `{"text"}`, as Slack's (and Mattermost's) incoming webhooks take it.
    Slack,
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
            health: Default::default(),
        }
    }
}

/// Longest window or grace period a policy may set: one week.
pub const MAX_POLICY_SECONDS: u64 = 7 * 24 * 3600;

impl Policy {
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
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 2000 {
                return Some("webhook_url must be an http:// or https:// URL".into());
            }
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
