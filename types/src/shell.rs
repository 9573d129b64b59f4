//! `lanes shell`: a member's login shell on this node, inside one of their bookings. The
//! command asks the node's Lanes over a local Unix socket, which knows the caller by the
//! kernel's account of the connecting process (`SO_PEERCRED`), not by anything it says.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where the node's Lanes listens when it runs as root (the Debian package's service).
pub const DEFAULT_SOCKET: &str = "/run/lanes/shell.sock";

/// What `lanes shell` asks, as one line of JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellRequest {
    /// This booking of the caller's (default: their one active booking on this node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking: Option<i64>,
}

/// The node's answer, as one line of JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ShellAnswer {
    /// The calling process is in the booking's cgroup now: it sets `environment` and becomes
    /// the shell.
    Joined(ShellJoined),
    /// Nothing was changed; `message` says why, in the words the member reads.
    Refused { message: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellJoined {
    /// The session's record (a job of the booking: `lanes jobs`, the Jobs page).
    pub job: i64,
    pub booking: i64,
    pub booking_end: chrono::DateTime<chrono::Utc>,
    /// The booked cards, as "GPU 0 (GPU-…)".
    pub cards: Vec<String>,
    /// The device wall it joined, in words.
    pub device_wall: String,
    /// The variables the shell must carry: the mask, the job's facts, the notice file.
    pub environment: BTreeMap<String, String>,
}
