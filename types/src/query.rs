//! Query strings and small bodies of the API that have no other home: the server parses them,
//! the client writes them. Fields left `None` are left out of the query.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A value for a query string (or a path's next hop, `?next=/calendar`): every byte but
/// unreserved characters and `/` percent-encoded. The login page and the server both write
/// such links.
pub fn escape_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /api/v1/audit`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditQuery {
    /// The newest this many (default 100, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Only entries older than this entry id: the next page after a page ending there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
    /// Only what this username did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Only this action (`booking.create`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Only entries at or after this moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// Only entries before this moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
}

/// `GET /api/v1/bookings`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookingQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
    /// A username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A GPU UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
}

/// `GET /api/v1/slots`: where and when `gpus` cards of one node are free for `duration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotQuery {
    /// How many cards, all on one node.
    pub gpus: u32,
    /// How long: `4h`, `90m`, `1h30m`, or seconds.
    pub duration: String,
    /// The earliest start (default now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// The latest end (default 7 days after `from`, at most the booking horizon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
    /// Only this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Only cards with at least this much memory: bytes, or with a unit (`80GiB`, `40GB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory: Option<String>,
    /// At most this many windows (default 5, at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `GET /api/v1/violations`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViolationQuery {
    /// Only those still on their card.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
    /// A username (admins only; others always see their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// At most this many, newest first (default 200, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// `GET /api/v1/history`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// A card's UUID, or `all` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Default `utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// RFC 3339; default an hour before `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// RFC 3339; default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
    /// At most this many buckets per card (default 1,000, at most 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<i64>,
}

/// `GET /api/v1/telemetry/ws`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryQuery {
    /// `changes`: only which lists changed (no snapshot, no ticks), for pages that show no
    /// cards; needs a login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<TelemetryOnly>,
}

/// What a telemetry channel is limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TelemetryOnly {
    Changes,
}

/// `GET /api/v1/jobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking: Option<i64>,
    /// A username; others than admins only ever see their own jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `GET /api/v1/jobs/{id}/log` and its live tail.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// `stdout` (default) or `stderr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// Only the last this many lines (`GET …/log` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<u64>,
}

/// `GET /api/v1/reports/usage` and `usage.csv`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// RFC 3339; default seven days before `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// RFC 3339; default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
    /// For the CSV: `users` (default), `groups`, `bookings`, `jobs` or `unix_users`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// Query of `GET /api/v1/notifications/outbox`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxQuery {
    /// `pending`, `sent`, `failed` or `suppressed`; every status when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The newest this many (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Body of `POST /api/v1/sim/processes` (simulated fleets only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectProcess {
    /// UUID of a simulated card.
    pub gpu: String,
    /// The Unix account it runs as.
    pub user: String,
    #[serde(default = "default_command")]
    pub command: String,
    #[serde(default = "default_memory")]
    pub memory_bytes: u64,
    #[serde(default = "default_utilization")]
    pub utilization_pct: u32,
}

impl InjectProcess {
    /// A process of `user` on `gpu` with the defaults the API applies.
    pub fn new(gpu: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            gpu: gpu.into(),
            user: user.into(),
            command: default_command(),
            memory_bytes: default_memory(),
            utilization_pct: default_utilization(),
        }
    }
}

fn default_command() -> String {
    "python".into()
}
fn default_memory() -> u64 {
    8 << 30
}
fn default_utilization() -> u32 {
    90
}

/// Answer of `POST /api/v1/sim/processes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Injected {
    pub pid: u32,
}
