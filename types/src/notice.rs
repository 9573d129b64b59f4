//! Notice before a stop: a job that will be stopped for a reason known in advance (its slot's
//! end, its time limit, its lent cards taken back) is told first, by a signal it chose and a
//! file named in `LANES_NOTICE_FILE`, so it can checkpoint before SIGTERM comes.

use crate::job::StopReason;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The signal that tells a job its notice is out. It goes only to the job's processes that
/// catch it (a handler installed), so a program that knows nothing of it is not ended by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NoticeSignal {
    #[default]
    #[serde(rename = "SIGUSR1")]
    Usr1,
    #[serde(rename = "SIGUSR2")]
    Usr2,
    #[serde(rename = "SIGHUP")]
    Hup,
    #[serde(rename = "SIGINT")]
    Int,
    #[serde(rename = "SIGALRM")]
    Alrm,
    /// No signal: the file alone.
    #[serde(rename = "none")]
    None,
}

impl NoticeSignal {
    pub const ALL: [NoticeSignal; 6] = [
        NoticeSignal::Usr1,
        NoticeSignal::Usr2,
        NoticeSignal::Hup,
        NoticeSignal::Int,
        NoticeSignal::Alrm,
        NoticeSignal::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NoticeSignal::Usr1 => "SIGUSR1",
            NoticeSignal::Usr2 => "SIGUSR2",
            NoticeSignal::Hup => "SIGHUP",
            NoticeSignal::Int => "SIGINT",
            NoticeSignal::Alrm => "SIGALRM",
            NoticeSignal::None => "none",
        }
    }

    /// Its number on Linux; `None` for no signal.
    pub fn number(self) -> Option<i32> {
        match self {
            NoticeSignal::Usr1 => Some(10),
            NoticeSignal::Usr2 => Some(12),
            NoticeSignal::Hup => Some(1),
            NoticeSignal::Int => Some(2),
            NoticeSignal::Alrm => Some(14),
            NoticeSignal::None => None,
        }
    }
}

impl std::str::FromStr for NoticeSignal {
    type Err = String;

    /// `SIGUSR1`, `USR1` or `usr1`; `none`.
    fn from_str(s: &str) -> Result<Self, String> {
        let upper = s.trim().to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        NoticeSignal::ALL
            .into_iter()
            .find(|sig| sig.as_str().to_ascii_uppercase().trim_start_matches("SIG") == name)
            .ok_or_else(|| {
                format!(
                    "unknown notice signal {s:?}: use one of {}",
                    NoticeSignal::ALL.map(NoticeSignal::as_str).join(", ")
                )
            })
    }
}

impl std::fmt::Display for NoticeSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a job asks of its notice (`notice` in a job's request); the admin's defaults where
/// it says nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoticeRequest {
    /// Seconds of notice before its slot's end or time limit: at least the admin's lead, at
    /// most their maximum (`notice_max_s`). A reclaim gives what the lending grace allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_s: Option<i64>,
    /// The signal that comes with the notice (the admin's, SIGUSR1 unless they chose
    /// another, where absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<NoticeSignal>,
}

impl NoticeRequest {
    pub fn is_empty(&self) -> bool {
        self.lead_s.is_none() && self.signal.is_none()
    }

    /// Refuses a lead the admin does not allow.
    pub fn check(&self, max_s: i64) -> Result<(), String> {
        match self.lead_s {
            Some(lead) if !(0..=max_s).contains(&lead) => Err(format!(
                "notice.lead_s must be from 0 to {max_s} (the admin's maximum notice), not {lead}"
            )),
            _ => Ok(()),
        }
    }
}

/// The notice a job was given: what the file named in `LANES_NOTICE_FILE` holds (JSON), and
/// the job's `notice` in the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNotice {
    pub job_id: i64,
    /// Why it will be stopped: `booking_ended`, `time_limit` or `preempted` (its lent cards
    /// were taken back); `cancelled` when it was told at the stop itself.
    pub reason: StopReason,
    /// When it was told.
    pub given_at: DateTime<Utc>,
    /// SIGTERM comes then, to whatever of it still runs.
    pub stop_at: DateTime<Utc>,
    /// SIGKILL comes then.
    pub kill_at: DateTime<Utc>,
    /// The signal that came with it.
    pub signal: NoticeSignal,
    /// It goes back to the queue after the stop (a preemptible job whose loan was taken back,
    /// under the admin's bound on restarts); it starts again with `LANES_RESTART_COUNT` one
    /// higher, in the same working directory.
    pub requeue: bool,
    /// How often it was sent back to the queue before this run (`LANES_RESTART_COUNT`).
    pub restart_count: u32,
}

/// When a job whose stop is planned for `stop_at`, for `reason`, is told: `lead` before, and
/// never before `now` (a job that starts inside its lead is told at once).
pub fn notice_moment(
    stop_at: DateTime<Utc>,
    lead: chrono::Duration,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    (stop_at - lead).max(now)
}

/// How a lending grace is spent when a holder takes their cards back: the notice at once,
/// SIGTERM `window` before its end (the job's grace, at most half of it), SIGKILL at its
/// end. The holder waits no longer than the grace, as before notices.
pub fn reclaim_window(
    lending_grace: chrono::Duration,
    job_grace: chrono::Duration,
) -> chrono::Duration {
    job_grace
        .min(lending_grace / 2)
        .max(chrono::Duration::zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_read_with_or_without_its_prefix_and_refused_when_unknown() {
        for (text, sig) in [
            ("SIGUSR1", NoticeSignal::Usr1),
            ("usr2", NoticeSignal::Usr2),
            (" HUP ", NoticeSignal::Hup),
            ("none", NoticeSignal::None),
        ] {
            assert_eq!(text.parse::<NoticeSignal>(), Ok(sig));
        }
        let refused = "SIGKILL".parse::<NoticeSignal>().unwrap_err();
        assert!(refused.contains("SIGUSR1, SIGUSR2"), "{refused}");
        assert_eq!(
            serde_json::to_string(&NoticeSignal::Usr1).unwrap(),
            "\"SIGUSR1\""
        );
        assert_eq!(NoticeSignal::None.number(), None);
        assert_eq!(NoticeSignal::Usr1.number(), Some(10));
    }

    #[test]
    fn a_lead_is_bounded_by_the_admin_and_a_late_start_is_told_at_once() {
        assert!(NoticeRequest {
            lead_s: Some(1800),
            signal: None
        }
        .check(3600)
        .is_ok());
        let err = NoticeRequest {
            lead_s: Some(7200),
            signal: None,
        }
        .check(3600)
        .unwrap_err();
        assert!(err.contains("from 0 to 3600"), "{err}");
        assert!(NoticeRequest {
            lead_s: Some(-1),
            signal: None
        }
        .check(3600)
        .is_err());
        let t = |s: i64| DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let lead = chrono::Duration::seconds(600);
        assert_eq!(notice_moment(t(1000), lead, t(0)), t(400));
        assert_eq!(notice_moment(t(1000), lead, t(700)), t(700));
    }

    #[test]
    fn a_reclaim_keeps_the_holders_wait_to_the_lending_grace() {
        let s = chrono::Duration::seconds;
        // The default grace of a minute and a job grace of 30 s: SIGTERM at 30 s, SIGKILL at 60.
        assert_eq!(reclaim_window(s(60), s(30)), s(30));
        // A short lending grace: half of it after SIGTERM.
        assert_eq!(
            reclaim_window(s(3), s(30)),
            chrono::Duration::milliseconds(1500)
        );
        assert_eq!(reclaim_window(s(600), s(30)), s(30));
    }
}
