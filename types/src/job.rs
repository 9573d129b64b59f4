//! Wire types of jobs: commands run inside a booking, under its device mask.

use crate::coded::Coded;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// A queue job waiting for the scheduler to give it cards.
    Pending,
    /// A job that has its cards and waits for its booking's slot to start (for a queue job
    /// started by the scheduler: about to run).
    Queued,
    Running,
    /// Ended by itself (`exit_code` says how).
    Exited,
    /// Ended by a signal: the slot's end, a cancel, or something else (`signal` says which).
    Killed,
    /// Never started: cancelled, or its booking ended or was withdrawn first.
    Cancelled,
    /// Could not be started (`message` says why).
    Failed,
    /// Its process vanished while the server was down: how it ended is unknown.
    Lost,
    /// A queue job stopped at its time limit.
    TimedOut,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Exited => "exited",
            JobState::Killed => "killed",
            JobState::Cancelled => "cancelled",
            JobState::Failed => "failed",
            JobState::Lost => "lost",
            JobState::TimedOut => "timed_out",
        }
    }

    pub fn is_over(self) -> bool {
        !matches!(
            self,
            JobState::Pending | JobState::Queued | JobState::Running
        )
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => JobState::Pending,
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "exited" => JobState::Exited,
            "killed" => JobState::Killed,
            "cancelled" => JobState::Cancelled,
            "failed" => JobState::Failed,
            "lost" => JobState::Lost,
            "timed_out" => JobState::TimedOut,
            other => return Err(format!("unknown job state {other:?}")),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    /// The booking it runs in; a queue job has one only once the scheduler started it.
    pub booking_id: Option<i64>,
    pub user_id: i64,
    pub username: String,
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub state: JobState,
    pub pid: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    /// Why it failed or was stopped, in English words (`note` says it typed).
    pub message: String,
    /// Why it failed or was stopped, typed: pages say it in their language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<JobNote>,
    /// Most GPU memory its processes held at once, summed over its cards, as the watchdog saw it.
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    /// The environment it started with, in words (set when it starts; also the first line of
    /// its stderr log): "the login environment of ada (bash -l)", "a clean environment", ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The same, typed: pages say it in their language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_in: Option<StartedIn>,
    /// The device wall it ran behind, in words: its cgroup, or why there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_wall: Option<String>,
    /// CPU time of all its processes, from its cgroup (once they are all gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Most host memory its processes held at once, from its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_host_memory_bytes: Option<u64>,
    /// Queue jobs: how many cards, for how long at most, with how much free memory each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueRequest>,
    /// Queue jobs: the project it named (its booking, once it starts, carries it); a job in a
    /// booking counts under its booking's project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The container image it runs in, when it asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::container::ContainerSpec>,
    /// What it asked of its notice before a stop (the admin's defaults where absent).
    #[serde(
        default,
        skip_serializing_if = "crate::notice::NoticeRequest::is_empty"
    )]
    pub notice_request: crate::notice::NoticeRequest,
    /// The notice it was given in this run, once given (what its `LANES_NOTICE_FILE` holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<crate::notice::JobNotice>,
    /// An interactive session the portal opens (a notebook), not a command run to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKind>,
}

impl CreateJob {
    /// A session of `kind` in booking `booking_id` (its command is the portal's to build).
    pub fn session(booking_id: i64, kind: SessionKind) -> Self {
        Self {
            booking_id,
            argv: Vec::new(),
            cwd: None,
            env: None,
            environment: None,
            name: None,
            container: None,
            notice: None,
            session: Some(kind),
        }
    }
}

/// What kind of interactive session a job is: the portal serves it at [`Job::session_path`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// The member's own Jupyter (JupyterLab where installed, else Jupyter Server), from their
    /// login environment, on a Unix socket only the portal reaches.
    Jupyter,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Jupyter => "jupyter",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        (text == "jupyter").then_some(SessionKind::Jupyter)
    }
}

impl Job {
    /// Where the portal serves the job's session (`/sessions/ID/`), if it is one.
    pub fn session_path(&self) -> Option<String> {
        self.session.map(|_| session_path(self.id))
    }
}

/// The portal's path of session `job`.
pub fn session_path(job: i64) -> String {
    format!("/sessions/{job}/")
}

/// Why Lanes stopped a job, or why it did not start: typed, so that pages say it in their
/// language and code decides on it without reading words. Stored as a JSON code where words
/// once were ([`Coded`]); an older Lanes' words read back as
/// [`JobNote::Said`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum JobNote {
    /// Cancelled while it waited for its slot or its cards.
    CancelledBeforeStart,
    /// Its booking ended, or was cancelled, before it could start.
    BookingEndedFirst,
    /// Its process vanished while the server was down.
    Vanished,
    /// Lanes stopped it (SIGTERM, then SIGKILL after the grace); `exit_unknown` when it was
    /// re-adopted after a restart and whoever reaped it kept its status.
    Stopped {
        reason: StopReason,
        #[serde(default)]
        exit_unknown: bool,
    },
    /// Re-adopted after a restart; its exit status is unknown.
    ExitUnknown,
    /// A member's shell (`lanes shell`) that they left: its exit status is their terminal's,
    /// and leaving is no failure.
    ShellLeft,
    /// Ended by a signal Lanes did not send.
    KilledBySignal,
    /// Its lent cards were taken back at `at`, or it made way for a job that had received less
    /// GPU time (`made_way`, least attained service); its process ended with `exit_code` or
    /// `signal`, and it waits in the queue again.
    Requeued {
        at: DateTime<Utc>,
        exit_code: Option<i64>,
        signal: Option<i64>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        made_way: bool,
    },
    /// Its lent cards were taken back again, but it had been sent back to the queue the
    /// most times the admin allows: it ended there.
    RequeueLimit { requeues: u32, limit: u32 },
    /// Its program is not on the PATH of the environment it starts in.
    NotOnPath {
        program: String,
        environment: StartedIn,
        path: String,
    },
    /// Its container did not start, or its runtime failed.
    Container {
        failure: crate::container::ContainerFailure,
    },
    /// Words from elsewhere (why a launch failed), or an older Lanes' words.
    Said { text: String },
}

/// The environment a job started with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "base", rename_all = "snake_case")]
pub enum StartedIn {
    /// `user`'s login environment (`shell -l`).
    Login { user: String, shell: String },
    /// A clean environment, because `user`'s shell refuses logins.
    CleanShellRefuses { user: String, shell: String },
    /// A clean environment, as the admin's default or as the job asked.
    Clean { by_admin: bool },
    /// The variables the client gave.
    Given { variables: usize },
    /// `user`'s own login shell (`shell`), moved into the booking by `lanes shell`.
    Shell { user: String, shell: String },
    /// Words of an older Lanes.
    Said { text: String },
}

impl std::fmt::Display for StartedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartedIn::Login { user, shell } => {
                write!(f, "the login environment of {user} ({shell} -l)")
            }
            StartedIn::Shell { user, shell } => {
                write!(
                    f,
                    "an interactive shell of {user} (lanes shell, {shell} -l)"
                )
            }
            StartedIn::CleanShellRefuses { user, shell } => write!(
                f,
                "a clean environment: the shell of {user} ({shell}) refuses logins"
            ),
            StartedIn::Clean { by_admin: true } => {
                f.write_str("a clean environment (the admin's setting)")
            }
            StartedIn::Clean { by_admin: false } => {
                f.write_str("a clean environment (the job asked for it)")
            }
            StartedIn::Given { variables } => {
                write!(f, "the environment the client gave ({variables} variables)")
            }
            StartedIn::Said { text } => f.write_str(text),
        }
    }
}

impl Coded for StartedIn {
    fn words(&self) -> Option<&str> {
        match self {
            StartedIn::Said { text } => Some(text),
            _ => None,
        }
    }

    fn from_words(words: &str) -> Self {
        StartedIn::Said {
            text: words.to_string(),
        }
    }
}

/// Why Lanes stops a running job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Its owner (or an admin) cancelled it.
    Cancelled,
    /// Its booking ended.
    BookingEnded,
    /// A queue job reached its time limit.
    TimeLimit,
    /// A borrower whose lent cards were taken back.
    Preempted,
}

impl StopReason {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Cancelled => "cancelled",
            StopReason::BookingEnded => "booking_ended",
            StopReason::TimeLimit => "time_limit",
            StopReason::Preempted => "preempted",
        }
    }

    /// As read back; an older Lanes stored its English words.
    pub fn parse(stored: &str) -> Option<Self> {
        [
            StopReason::Cancelled,
            StopReason::BookingEnded,
            StopReason::TimeLimit,
            StopReason::Preempted,
        ]
        .into_iter()
        .find(|r| r.as_str() == stored || r.english() == stored)
    }

    /// In English.
    pub fn english(self) -> &'static str {
        match self {
            StopReason::Cancelled => "cancelled",
            StopReason::BookingEnded => "stopped at the end of its booking",
            StopReason::TimeLimit => "stopped at its time limit",
            StopReason::Preempted => "preempted: its lent cards were taken back",
        }
    }
}

impl std::fmt::Display for JobNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobNote::CancelledBeforeStart => f.write_str("cancelled before it started"),
            JobNote::BookingEndedFirst => f.write_str("its booking ended before it could start"),
            JobNote::Vanished => f.write_str("its process vanished while the server was down"),
            JobNote::Stopped {
                reason,
                exit_unknown: false,
            } => f.write_str(reason.english()),
            JobNote::Stopped {
                reason,
                exit_unknown: true,
            } => write!(
                f,
                "{} (exit status unknown: re-adopted after a server restart)",
                reason.english()
            ),
            JobNote::ExitUnknown => {
                f.write_str("exit status unknown: re-adopted after a server restart")
            }
            JobNote::ShellLeft => f.write_str("the shell was left"),
            JobNote::KilledBySignal => f.write_str("killed by a signal"),
            JobNote::Requeued {
                at,
                exit_code,
                signal,
                made_way,
            } => {
                let how = match (exit_code, signal) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(signal)) => format!("signal {signal}"),
                    (None, None) => "stopped".to_string(),
                };
                let why = if *made_way {
                    "preempted: it made way for a job that had received less GPU time"
                } else {
                    StopReason::Preempted.english()
                };
                write!(
                    f,
                    "{why} at {} ({how}); waiting again",
                    at.format("%Y-%m-%d %H:%M:%S UTC")
                )
            }
            JobNote::RequeueLimit { requeues, limit } => write!(
                f,
                "{}; not queued again: it made way {requeues} times, the most the admin allows ({limit})",
                StopReason::Preempted.english()
            ),
            JobNote::NotOnPath {
                program,
                environment,
                path,
            } => write!(
                f,
                "{program}: not found on the PATH of {environment} (PATH={path})"
            ),
            JobNote::Container { failure } => write!(f, "{failure}"),
            JobNote::Said { text } => f.write_str(text),
        }
    }
}

impl Coded for JobNote {
    fn words(&self) -> Option<&str> {
        match self {
            JobNote::Said { text } => Some(text),
            _ => None,
        }
    }

    fn from_words(words: &str) -> Self {
        JobNote::Said {
            text: words.to_string(),
        }
    }
}

impl JobNote {
    /// A job's `message` as stored: `None` when there is nothing to say.
    pub fn of(stored: &str) -> Option<Self> {
        (!stored.is_empty()).then(|| Self::read(stored))
    }

    /// Why Lanes stopped it, if it did.
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self {
            JobNote::Stopped { reason, .. } => Some(*reason),
            JobNote::RequeueLimit { .. } => Some(StopReason::Preempted),
            _ => None,
        }
    }
}

/// How a job stands, in the words people read everywhere (pages, `lanes jobs`, `lanes queue`,
/// messages): the wire state, except that a job that ended by itself is `completed` with
/// status 0 and `failed` otherwise, as the queue has always said; a queue job preempted for
/// a holder is `requeued` while it waits again and `preempted` when it ended that way (the
/// admin's bound on restarts), never a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    Pending,
    Requeued,
    Preempted,
    Queued,
    Running,
    Completed,
    Failed,
    Killed,
    Cancelled,
    Lost,
    TimedOut,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Pending => "pending",
            Standing::Requeued => "requeued",
            Standing::Preempted => "preempted",
            Standing::Queued => "queued",
            Standing::Running => "running",
            Standing::Completed => "completed",
            Standing::Failed => "failed",
            Standing::Killed => "killed",
            Standing::Cancelled => "cancelled",
            Standing::Lost => "lost",
            Standing::TimedOut => "timed out",
        }
    }
}

impl Job {
    /// Whether it is a member's own shell that `lanes shell` put in its booking (it ends when
    /// they leave it; Lanes did not start it and has no exit status of it).
    pub fn is_shell(&self) -> bool {
        matches!(self.started_in, Some(StartedIn::Shell { .. }))
    }

    /// How it stands, as people read it.
    pub fn standing(&self) -> Standing {
        let preempted = self.note.as_ref().and_then(JobNote::stop_reason)
            == Some(StopReason::Preempted)
            && self.queue.is_some();
        match self.state {
            JobState::Pending
                if matches!(self.note, Some(JobNote::Requeued { .. }))
                    && self.queue.is_some_and(|q| q.requeues > 0) =>
            {
                Standing::Requeued
            }
            JobState::Pending => Standing::Pending,
            JobState::Exited | JobState::Killed if preempted => Standing::Preempted,
            JobState::Queued => Standing::Queued,
            JobState::Running => Standing::Running,
            JobState::Exited if self.exit_code == Some(0) => Standing::Completed,
            // Leaving one's shell is how a shell ends.
            JobState::Exited if self.note == Some(JobNote::ShellLeft) => Standing::Completed,
            JobState::Exited | JobState::Failed => Standing::Failed,
            JobState::Killed => Standing::Killed,
            JobState::Cancelled => Standing::Cancelled,
            JobState::Lost => Standing::Lost,
            JobState::TimedOut => Standing::TimedOut,
        }
    }

    /// What to call it: its name, or its command when it has none.
    pub fn title(&self) -> String {
        if self.name.is_empty() {
            self.argv.join(" ")
        } else {
            self.name.clone()
        }
    }
}

/// What a job's environment starts from, before its own `env` variables and the device mask
/// (which nothing overrides). `HOME`, `USER`, `LOGNAME` and `SHELL` always come from its Unix
/// account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentBase {
    /// What the user's login shell on the node sets up (their `~/.profile` and the system's),
    /// as if they had logged in and typed the command: their `PATH`, venv, conda, modules.
    Login,
    /// A minimal environment: `PATH=/usr/local/bin:/usr/bin:/bin` and `LANG=C.UTF-8`.
    Clean,
    /// Exactly these variables in place of the profile's (as Slurm's `--export`): a terminal
    /// client sends its caller's environment this way. Names Lanes sets are refused here too.
    Given(BTreeMap<String, String>),
}

/// What a job's environment starts from when its request does not say: an admin setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultEnvironment {
    #[default]
    Login,
    Clean,
}

impl From<DefaultEnvironment> for EnvironmentBase {
    fn from(d: DefaultEnvironment) -> Self {
        match d {
            DefaultEnvironment::Login => EnvironmentBase::Login,
            DefaultEnvironment::Clean => EnvironmentBase::Clean,
        }
    }
}

/// What a queue job asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRequest {
    pub gpus: u32,
    pub time_limit_s: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_bytes: Option<u64>,
    /// It may run on cards of an idle booking whose holder lends them, and goes back to the
    /// queue when the holder takes them back (SIGTERM first: its cue to checkpoint).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Times it was sent back to the queue that way.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues: u32,
    /// GPU-seconds it received in its runs before the current one (least attained service
    /// orders the queue by it).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub attained_gpu_s: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Body of `POST /api/v1/jobs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    pub booking_id: i64,
    /// The command and its arguments; no shell unless you name one. Empty for a session (the
    /// portal builds its command).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added on top of the environment's base, before the device mask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// What the environment starts from; the admin's default (the login environment unless
    /// they chose a clean one) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentBase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Runs the command in this container image, as the booking's user, on exactly its cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::container::ContainerSpec>,
    /// Notice before its booking's end: how long, and with which signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<crate::notice::NoticeRequest>,
    /// Opens an interactive session instead of running `argv` (a notebook in the portal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKind>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_stored_as_a_code_and_older_words_read_back_as_words() {
        let note = JobNote::NotOnPath {
            program: "python4".into(),
            environment: StartedIn::Login {
                user: "carol".into(),
                shell: "/bin/bash".into(),
            },
            path: "/usr/bin".into(),
        };
        let stored = note.code();
        assert!(stored.starts_with('{'), "{stored}");
        assert_eq!(JobNote::of(&stored), Some(note.clone()));
        assert!(note.to_string().contains("login environment of carol"));
        assert_eq!(
            JobNote::of("stopped at its time limit"),
            Some(JobNote::Said {
                text: "stopped at its time limit".into()
            })
        );
        assert_eq!(JobNote::of(""), None);
        // A stop reason an older Lanes stored in words is read as the reason it was.
        assert_eq!(
            StopReason::parse("preempted: its lent cards were taken back"),
            Some(StopReason::Preempted)
        );
        assert_eq!(StopReason::parse("time_limit"), Some(StopReason::TimeLimit));
    }
}
