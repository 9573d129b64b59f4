//! Wire types of the job queue: jobs that wait for free cards, the queue's settings and the
//! fair shares admins give groups and users.

use super::booking::GpuRef;
use super::job::Job;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A queued job's state, in the queue's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    Pending,
    /// Preempted for a holder and waiting again (not a failure).
    Requeued,
    Running,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    /// Preempted once more than the admin allows requeues: it ended there (not a failure).
    Preempted,
}

impl QueueState {
    /// The queue's coarser word for a job's standing: a job handed to the runner is running,
    /// and every unsuccessful end that is not a cancel or a time limit is a failure.
    pub fn of(job: &Job) -> Self {
        use super::job::Standing as S;
        match job.standing() {
            S::Pending => QueueState::Pending,
            S::Requeued => QueueState::Requeued,
            S::Preempted => QueueState::Preempted,
            S::Queued | S::Running => QueueState::Running,
            S::Completed => QueueState::Completed,
            S::Cancelled => QueueState::Cancelled,
            S::TimedOut => QueueState::TimedOut,
            S::Failed | S::Killed | S::Lost => QueueState::Failed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueueState::Pending => "pending",
            QueueState::Requeued => "requeued",
            QueueState::Preempted => "preempted",
            QueueState::Running => "running",
            QueueState::Completed => "completed",
            QueueState::Failed => "failed",
            QueueState::Cancelled => "cancelled",
            QueueState::TimedOut => "timed out",
        }
    }
}

/// Why a job does not start now: the scheduler's words, which `GET /api/v1/queue` gives as
/// `wait` (structured, for pages to write in their language) and `reason` (in English).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// Not enough cards free for its whole time limit.
    Cards { needs: u32, free: u32 },
    /// Starting it would take its owner past their concurrent-GPU quota at some moment of its
    /// time limit (`in_use`: the most they hold at once then without it).
    OverLimit { limit: u32, in_use: u32 },
    /// Cards are free, but a job ahead of it goes first (fifo, or a reservation it would delay).
    BehindHigherPriority,
    /// The pool does not have that many cards with that much memory.
    NeverFits { needs: u32, eligible: u32 },
    /// Not considered yet: submitted since the last scheduling pass (the queue says so; the
    /// scheduler never does).
    NextPass,
    /// Its owner's account was disabled since it was queued (the queue says so).
    OwnerDisabled,
    /// Cards are free for it, and the queue's leader, on another node, starts it at its next
    /// pass (the queue says so).
    LeaderStarts,
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::Cards { needs, free } => write!(
                f,
                "needs {needs} card{}, {free} free for its time limit",
                plural(*needs)
            ),
            WaitReason::OverLimit { limit, in_use } => write!(
                f,
                "over your concurrent-GPU limit ({in_use} of {limit} held during its time limit)"
            ),
            WaitReason::BehindHigherPriority => write!(f, "behind higher-priority work"),
            WaitReason::NeverFits { needs, eligible } => write!(
                f,
                "can never start: needs {needs} card{}, the pool has {eligible} with enough memory",
                plural(*needs)
            ),
            WaitReason::NextPass => write!(f, "waiting for the next scheduling pass"),
            WaitReason::OwnerDisabled => write!(f, "its owner's account is disabled"),
            WaitReason::LeaderStarts => write!(
                f,
                "cards are free: the queue's leader starts it at its next pass"
            ),
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A job in the queue as `GET /api/v1/queue` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuedJob {
    pub id: i64,
    pub username: String,
    pub name: String,
    /// The command; only its owner and admins see it (empty for others).
    pub argv: Vec<String>,
    pub gpus: u32,
    pub time_limit_s: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_bytes: Option<u64>,
    pub state: QueueState,
    pub submitted_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// The cards it runs on (empty while pending).
    #[serde(default)]
    pub cards: Vec<GpuRef>,
    /// The booking that holds its cards while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking_id: Option<i64>,
    /// Why it waits, in English words (pending jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it waits, as the scheduler put it (pending jobs): what `reason` says, for pages and
    /// scripts to write in their own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitReason>,
    /// When it may start if everything ahead runs to its limit and nothing new arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<DateTime<Utc>>,
    /// Its place in the order the scheduler considers (1 = next), pending jobs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// It may run on lent cards (and then goes back to the queue when they are taken back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Times it was sent back to the queue when lent cards were taken back.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues: u32,
    /// The booking whose lent cards it runs on now (the first, if several lend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed_from: Option<i64>,
    /// Every booking whose lent cards it runs on now (several, on one node, when it is wider
    /// than one booking).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lenders: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    pub message: String,
    /// The same, typed (see [`crate::job::JobNote`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<crate::job::JobNote>,
    /// The notice of its stop it was given in this run (its owner and admins see it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<crate::notice::JobNotice>,
}

/// A user's fair-share standing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Standing {
    pub username: String,
    /// The group their fair share is counted in (their first group by name, or "").
    pub group: String,
    /// Their normalized share of the pool (0–1).
    pub share: f64,
    /// Their part of all decayed usage (0–1).
    pub usage: f64,
    /// Decayed GPU-hours.
    pub gpu_hours: f64,
    /// 1: no use; ½: use at the share; towards 0: beyond it.
    pub factor: f64,
}

/// `GET /api/v1/queue`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    pub settings: QueueSettings,
    /// Pending and running jobs, in the order the scheduler considers them; then the latest
    /// ended ones.
    pub jobs: Vec<QueuedJob>,
    pub standings: Vec<Standing>,
}

/// Body of `POST /api/v1/queue/forecast`: a job as it would be queued (what its start
/// depends on).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForecastRequest {
    pub gpus: u32,
    /// Seconds; absent: the queue's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_bytes: Option<u64>,
}

/// When a job would likely start if queued now: the current queue, running jobs and bookings
/// replayed with the policy in force, each job running for a time drawn from past jobs' run
/// times (as shares of their limits); beside it, the earliest slot the caller could book.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueForecast {
    pub policy: Policy,
    /// Half of the replays started it by then; absent when it would not start within
    /// `horizon_days`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<DateTime<Utc>>,
    /// Nine replays in ten started it by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<DateTime<Utc>>,
    /// If every job ran to its time limit (the queue's own estimate: late, but sure unless
    /// something new goes ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_time_limits: Option<DateTime<Utc>>,
    pub samples: u32,
    /// Past jobs whose run times the replays drew from (none: each job runs to its limit).
    pub history: u32,
    pub horizon_days: u32,
    /// The earliest slot the caller could book for the same cards and time, if any within
    /// the booking horizon (and their quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_booking: Option<super::booking::FreeSlot>,
}

/// Body of `POST /api/v1/queue`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitJob {
    /// The project it is for (one the admins defined); absent: the submitter's group's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub gpus: u32,
    /// Required unless the admin set a default; never above the admin's maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<i64>,
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// What the environment starts from (see `CreateJob`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::job::EnvironmentBase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// May run on idle booked cards their holder lends, and be stopped (SIGTERM, then SIGKILL
    /// after the queue's lending grace) and queued again when the holder takes them back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Runs the command in this container image (see `CreateJob`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::container::ContainerSpec>,
    /// Notice before its time limit, or before a holder takes lent cards back (see
    /// `CreateJob`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<crate::notice::NoticeRequest>,
}

/// How the queue orders and places waiting jobs. The live queue and the trace replays use this
/// one type (see `lanes-scheduling`'s scheduler for what each does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Jobs start in order; the first that cannot start holds up everything behind it.
    Fifo,
    /// EASY backfill: later jobs start where they do not delay the first waiting one.
    Backfill,
    /// As backfill, in fair-share priority order instead of arrival.
    Fairshare,
    /// Least attained service: jobs that have had the least GPU-time go first (discretized
    /// levels, fair share within a level, an aging bound); a waiting job of a higher level
    /// preempts running preemptible jobs of lower ones (docs/scheduling.md).
    Las,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::Fifo,
        Policy::Backfill,
        Policy::Fairshare,
        Policy::Las,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Backfill => "backfill",
            Policy::Fairshare => "fairshare",
            Policy::Las => "las",
        }
    }

    /// Whether jobs are ordered by the caller's priority rather than by arrival.
    pub fn uses_priority(self) -> bool {
        matches!(self, Policy::Fairshare | Policy::Las)
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown policy {s:?}: use fifo, backfill, fairshare or las"))
    }
}

/// `GET|PUT /api/v1/queue/settings` (admins change them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSettings {
    pub policy: Policy,
    /// Used when a submission gives none; `None`: a limit is required.
    #[serde(default)]
    pub default_time_limit_s: Option<i64>,
    pub max_time_limit_s: i64,
    /// Usage halves in this time.
    pub half_life_s: i64,
    /// Priority added by waiting `age_full_after_s` (fair share weighs 1).
    pub age_weight: f64,
    pub age_full_after_s: i64,
    /// How long a preemptible job on lent cards has, after SIGTERM, to checkpoint and exit
    /// before SIGKILL when their holder takes them back (1 s to 1 h).
    #[serde(default = "default_lending_grace_s")]
    pub lending_grace_s: i64,
    /// The signal of a job's notice before a stop, where its request names none.
    #[serde(default)]
    pub notice_signal: crate::notice::NoticeSignal,
    /// How long before a slot's end or a time limit a job is told (0 to a day); a job may ask
    /// for more, up to `notice_max_s`. A reclaim's notice comes at once, within the lending
    /// grace.
    #[serde(default = "default_notice_lead_s")]
    pub notice_lead_s: i64,
    /// The most notice a job may ask for (0 to a day).
    #[serde(default = "default_notice_max_s")]
    pub notice_max_s: i64,
    /// How often a preempted job goes back to the queue; preempted once more, it ends (0 to
    /// 1000).
    #[serde(default = "default_max_requeues")]
    pub max_requeues: u32,
}

/// Notice before a slot's end or time limit when the admin set none: ten minutes.
pub fn default_notice_lead_s() -> i64 {
    600
}

/// The most notice a job may ask for when the admin set no bound: an hour.
pub fn default_notice_max_s() -> i64 {
    3600
}

/// Requeues allowed when the admin set no bound.
pub fn default_max_requeues() -> u32 {
    20
}

/// The longest notice an admin may set: a day.
pub const MAX_NOTICE_S: i64 = 86_400;

/// The lending grace when an admin set none: a minute.
pub fn default_lending_grace_s() -> i64 {
    60
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            policy: Policy::Fairshare,
            default_time_limit_s: Some(3_600),
            max_time_limit_s: 7 * 86_400,
            half_life_s: 7 * 86_400,
            age_weight: 0.1,
            age_full_after_s: 7 * 86_400,
            lending_grace_s: default_lending_grace_s(),
            notice_signal: Default::default(),
            notice_lead_s: default_notice_lead_s(),
            notice_max_s: default_notice_max_s(),
            max_requeues: default_max_requeues(),
        }
    }
}

/// Longest time limit an admin may allow: a year (a queue job holds its cards that long).
pub const MAX_TIME_LIMIT_S: i64 = 366 * 86_400;
/// Longest fair-share half-life and ageing period: ten years.
pub const MAX_PERIOD_S: i64 = 3_653 * 86_400;
/// Largest raw fair share (shares are relative; bounded so that their sum stays finite).
pub const MAX_SHARE: f64 = 1e6;
/// Largest weight of waiting time against fair share.
pub const MAX_AGE_WEIGHT: f64 = 1_000.0;

impl QueueSettings {
    /// Every value within a sane range, so that no date or priority arithmetic overflows.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_TIME_LIMIT_S).contains(&self.max_time_limit_s) {
            return Err(format!(
                "max_time_limit_s must be from 1 to {MAX_TIME_LIMIT_S} (366 days)"
            ));
        }
        if self.half_life_s > MAX_PERIOD_S || self.age_full_after_s > MAX_PERIOD_S {
            return Err(format!(
                "half_life_s and age_full_after_s must be at most {MAX_PERIOD_S} (ten years)"
            ));
        }
        if self.age_weight > MAX_AGE_WEIGHT {
            return Err(format!("age_weight must be at most {MAX_AGE_WEIGHT}"));
        }
        if let Some(d) = self.default_time_limit_s {
            if d <= 0 || d > self.max_time_limit_s {
                return Err("default_time_limit_s must be above 0 and at most the maximum".into());
            }
        }
        if self.half_life_s < 60 {
            return Err("half_life_s must be at least 60".into());
        }
        if !(self.age_weight.is_finite() && self.age_weight >= 0.0) {
            return Err("age_weight must be 0 or more".into());
        }
        if self.age_full_after_s <= 0 {
            return Err("age_full_after_s must be above 0".into());
        }
        if !(1..=3600).contains(&self.lending_grace_s) {
            return Err("lending_grace_s must be from 1 to 3600".into());
        }
        if !(0..=MAX_NOTICE_S).contains(&self.notice_lead_s)
            || !(0..=MAX_NOTICE_S).contains(&self.notice_max_s)
        {
            return Err(format!(
                "notice_lead_s and notice_max_s must be from 0 to {MAX_NOTICE_S} (a day)"
            ));
        }
        if self.notice_lead_s > self.notice_max_s {
            return Err("notice_lead_s must be at most notice_max_s".into());
        }
        if self.max_requeues > 1000 {
            return Err("max_requeues must be from 0 to 1000".into());
        }
        Ok(())
    }
}

/// `GET|PUT /api/v1/shares`: raw fair shares; a group or user not named has 1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shares {
    #[serde(default)]
    pub groups: BTreeMap<String, f64>,
    #[serde(default)]
    pub users: BTreeMap<String, f64>,
}

impl Shares {
    pub fn check(&self) -> Result<(), String> {
        for (scope, map) in [("group", &self.groups), ("user", &self.users)] {
            if let Some((name, v)) = map
                .iter()
                .find(|(_, v)| !(v.is_finite() && (0.0..=MAX_SHARE).contains(*v)))
            {
                return Err(format!(
                    "the share of {scope} {name:?} must be from 0 to {MAX_SHARE}, not {v}"
                ));
            }
        }
        Ok(())
    }
}

/// The note of the booking that holds a queue job's cards.
pub fn booking_note(job_id: i64, name: &str) -> String {
    format!("queue job {job_id}: {name}")
}

/// The job's name in a note [`booking_note`] wrote (pages say the rest in their language);
/// `None` for a note a person wrote.
pub fn queue_job_name(note: &str, job_id: i64) -> Option<&str> {
    let name = note.strip_prefix(&format!("queue job {job_id}: "))?;
    // A loan's note says whose cards it borrows after the name.
    Some(match name.rfind(" (on cards booking #") {
        Some(at) if name.ends_with(" lends)") => &name[..at],
        _ => name,
    })
}

#[cfg(test)]
mod note_tests {
    use super::*;

    #[test]
    fn a_queue_bookings_note_gives_back_its_jobs_name() {
        assert_eq!(queue_job_name(&booking_note(7, "训练"), 7), Some("训练"));
        let loan = format!("{} (on cards booking #3 lends)", booking_note(7, "train"));
        assert_eq!(queue_job_name(&loan, 7), Some("train"));
        assert_eq!(queue_job_name("my own words", 7), None);
        assert_eq!(queue_job_name(&booking_note(8, "x"), 7), None);
    }
}
