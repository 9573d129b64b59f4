//! Notice before a stop. The runner plans each running job's stop from its booking's end, its
//! time limit, or its lent cards taken back; a lead time before it (the admin's, or what the
//! job asked for within their bound; a reclaim's at once, inside the lending grace) it writes
//! the job's notice file and sends the notice signal to those of the job's processes that
//! catch it; SIGTERM follows at the stop, SIGKILL after the grace.
//!
//! The file lives in a directory of its own per run (`<notice dir>/<log dir name>/notice.json`),
//! made by the server, which the job may enter but not write: written beside and renamed, so a
//! job reads a whole notice or none, and no job can point the server's write elsewhere.

use chrono::{DateTime, Duration, Utc};
use lanes_types::job::StopReason;
use lanes_types::notice::{notice_moment, reclaim_window, JobNotice, NoticeRequest, NoticeSignal};
use lanes_types::queue::QueueSettings;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The name of the notice file in its run's directory.
pub const FILE_NAME: &str = "notice.json";

/// What decides notices: the admin's queue settings and the runner's grace.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    pub signal: NoticeSignal,
    pub lead: Duration,
    pub max: Duration,
    pub lending_grace: Duration,
    pub job_grace: Duration,
    pub max_requeues: u32,
}

impl Rules {
    pub fn new(settings: &QueueSettings, job_grace: std::time::Duration) -> Self {
        Self {
            signal: settings.notice_signal,
            lead: Duration::seconds(settings.notice_lead_s),
            max: Duration::seconds(settings.notice_max_s),
            lending_grace: Duration::seconds(settings.lending_grace_s.max(1)),
            job_grace: Duration::from_std(job_grace).unwrap_or_default(),
            max_requeues: settings.max_requeues,
        }
    }

    /// How long before a planned stop for `reason` a job that asked `request` is told. A
    /// loan's end is told as a reclaim is, the lending grace before: a loan lasts as long as
    /// its holder leaves it, and a borrower told at its start that its loan ends within the
    /// lead would only leave and come back.
    fn lead_for(&self, reason: StopReason, request: &NoticeRequest) -> Duration {
        match (reason, request.lead_s) {
            (StopReason::Preempted, _) => self.lending_grace,
            (_, Some(asked)) => Duration::seconds(asked).min(self.max),
            (_, None) => self.lead,
        }
    }

    /// Between SIGTERM and SIGKILL for a stop for `why`.
    pub fn grace_for(&self, why: StopReason) -> Duration {
        match why {
            StopReason::Preempted => reclaim_window(self.lending_grace, self.job_grace),
            _ => self.job_grace,
        }
    }
}

/// What the runner does about a running job's notice this look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing (no stop is planned, it was told already, or it is cancelled: its owner knows).
    Nothing,
    /// Tell it now.
    Give(JobNotice),
    /// Its stop moved (its booking was extended or shortened): the notice it had is void; it
    /// is told again when the new stop's lead begins.
    Withdraw,
    /// Look again then: its notice is due.
    At(DateTime<Utc>),
}

/// The facts of one running job that its notice depends on.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    pub job_id: i64,
    pub request: &'a NoticeRequest,
    /// A preemptible queue job: a reclaim sends it back to the queue.
    pub preemptible_queue_job: bool,
    pub requeues: u32,
    /// The notice it has in this run.
    pub given: Option<&'a JobNotice>,
    /// Why it must stop now, if it must.
    pub must: Option<StopReason>,
    /// When and why it will stop if nothing changes.
    pub planned: Option<(DateTime<Utc>, StopReason)>,
}

pub fn step(facts: &Facts<'_>, rules: &Rules, now: DateTime<Utc>) -> Step {
    let notice =
        |reason: StopReason, stop_at: DateTime<Utc>, kill_at: DateTime<Utc>, told| JobNotice {
            job_id: facts.job_id,
            reason,
            given_at: now,
            stop_at,
            kill_at,
            signal: if told {
                facts.request.signal.unwrap_or(rules.signal)
            } else {
                NoticeSignal::None
            },
            requeue: reason == StopReason::Preempted
                && facts.preemptible_queue_job
                && facts.requeues < rules.max_requeues,
            restart_count: facts.requeues,
        };
    match facts.must {
        // Its owner or an admin asked: it stops at once.
        Some(StopReason::Cancelled) => Step::Nothing,
        // The stop it was told of has come (SIGTERM waits for its `stop_at`), unless it was
        // told of a later one: a borrower told of its loan's end whose holder came back first.
        Some(reason)
            if facts.given.is_some_and(|told| {
                told.reason == reason && told.stop_at <= latest_stop(reason, rules, now)
            }) =>
        {
            Step::Nothing
        }
        // A holder took their cards back: the notice at once, SIGTERM near the grace's end.
        Some(StopReason::Preempted) => {
            let kill_at = now + rules.lending_grace;
            let stop_at = kill_at - rules.grace_for(StopReason::Preempted);
            Step::Give(notice(StopReason::Preempted, stop_at, kill_at, true))
        }
        // A stop nobody could foresee (the booking released, or the notice missed while the
        // server was down): told at the stop itself, so its SIGTERM handler knows why.
        Some(reason) => Step::Give(notice(reason, now, now + rules.grace_for(reason), false)),
        None => match (facts.planned, facts.given) {
            (None, None) => Step::Nothing,
            // Its stop was called off (the booking became open-ended).
            (None, Some(_)) => Step::Withdraw,
            (Some((at, reason)), Some(told))
                if told.reason == reason && (at - told.stop_at).num_seconds().abs() < 1 =>
            {
                Step::Nothing
            }
            // Its stop moved: told again when the new one's lead begins.
            (Some(_), Some(_)) => Step::Withdraw,
            (Some((at, reason)), None) => {
                let moment = notice_moment(at, rules.lead_for(reason, facts.request), now);
                if moment <= now {
                    let kill_at = at + rules.grace_for(reason);
                    Step::Give(notice(reason, at, kill_at, at > now))
                } else {
                    Step::At(moment)
                }
            }
        },
    }
}

/// The latest moment SIGTERM may come for a stop that is due now for `reason`: a reclaim's
/// leaves the job grace of the lending grace, others are due at once.
fn latest_stop(reason: StopReason, rules: &Rules, now: DateTime<Utc>) -> DateTime<Utc> {
    match reason {
        StopReason::Preempted => now + rules.lending_grace - rules.grace_for(StopReason::Preempted),
        _ => now,
    }
}

/// Whether SIGTERM waits: the job was told its stop for `must` comes at a later moment.
pub fn held_until(
    given: Option<&JobNotice>,
    must: Option<StopReason>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let told = given?;
    (must? == told.reason && must != Some(StopReason::Cancelled) && told.stop_at > now)
        .then_some(told.stop_at)
}

/// The directory of a run's notice file, for the job whose log directory is `run`.
pub fn run_dir(notice_dir: &Path, run: &str) -> PathBuf {
    notice_dir.join(run)
}

/// The path a run's `LANES_NOTICE_FILE` names.
pub fn file_of(notice_dir: &Path, run: &str) -> PathBuf {
    run_dir(notice_dir, run).join(FILE_NAME)
}

/// Makes the notice directory (0711: jobs pass through to their own run's directory, nobody
/// lists it) and a run's directory in it (0711 too, the server's: only the file in it is the
/// job's to read).
pub fn prepare(notice_dir: &Path, run: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(notice_dir)?;
    std::fs::set_permissions(notice_dir, std::fs::Permissions::from_mode(0o711))?;
    let dir = run_dir(notice_dir, run);
    std::fs::DirBuilder::new().mode(0o711).create(&dir)?;
    // The service's umask (0027) would leave it closed to the job's user.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
    Ok(dir)
}

/// Writes `notice` as the run's notice file, readable by `owner` (uid, gid) alone: beside it
/// first, then renamed over it, so the job never reads half of it.
pub fn write(
    notice_dir: &Path,
    run: &str,
    notice: &JobNotice,
    owner: Option<(u32, u32)>,
) -> std::io::Result<PathBuf> {
    let dir = run_dir(notice_dir, run);
    let path = dir.join(FILE_NAME);
    let partial = dir.join(format!(".{FILE_NAME}.{}", super::random_hex(4)?));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&partial)?;
    let mut text = serde_json::to_string_pretty(notice).map_err(std::io::Error::other)?;
    text.push('\n');
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| match owner {
            Some((uid, gid)) => std::os::unix::fs::fchown(&file, Some(uid), Some(gid)),
            None => Ok(()),
        })
        .and_then(|()| std::fs::rename(&partial, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map(|()| path)
}

/// Removes a run's notice (its stop was called off).
pub fn withdraw(notice_dir: &Path, run: &str) {
    let _ = std::fs::remove_file(file_of(notice_dir, run));
}

/// Removes a run's notice directory (the run is over).
pub fn remove(notice_dir: &Path, run: &str) {
    let dir = run_dir(notice_dir, run);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            // A directory in it is a notebook's socket directory, the member's: removed whole
            // (a link they put in it is removed, never followed).
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let _ = if is_dir {
                std::fs::remove_dir_all(entry.path())
            } else {
                std::fs::remove_file(entry.path())
            };
        }
    }
    let _ = std::fs::remove_dir(&dir);
}

/// Whether process `pid` catches signal `number` (its `SigCgt` mask in /proc): a process that
/// has no handler would be ended by most signals, so it is not sent one.
pub fn catches(pid: u32, number: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .is_some_and(|status| caught_in(&status, number))
}

/// Whether the `SigCgt` line of a /proc status says signal `number` is caught.
fn caught_in(status: &str, number: i32) -> bool {
    let Some(mask) = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return false;
    };
    (1..=64).contains(&number) && mask & (1u64 << (number - 1)) != 0
}

/// The processes of the session `leader` leads (a job without a cgroup: it leads its own
/// session, and so does everything it started unless it left).
pub fn session_members(leader: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| crate::telemetry::procinfo::stat(*pid).is_some_and(|s| s.session == leader))
        .collect()
}

/// Sends `signal` to those of `pids` that catch it; how many.
pub fn signal_catchers(pids: &[u32], signal: NoticeSignal) -> usize {
    let Some(number) = signal.number() else {
        return 0;
    };
    let Ok(sig) = nix::sys::signal::Signal::try_from(number) else {
        return 0;
    };
    pids.iter()
        .filter(|pid| catches(**pid, number))
        .filter(|pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(**pid as i32), sig).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn rules() -> Rules {
        Rules {
            signal: NoticeSignal::Usr1,
            lead: Duration::seconds(600),
            max: Duration::seconds(3600),
            lending_grace: Duration::seconds(60),
            job_grace: Duration::seconds(30),
            max_requeues: 2,
        }
    }

    fn facts<'a>(request: &'a NoticeRequest) -> Facts<'a> {
        Facts {
            job_id: 7,
            request,
            preemptible_queue_job: true,
            requeues: 0,
            given: None,
            must: None,
            planned: None,
        }
    }

    #[test]
    fn a_slot_end_is_told_its_lead_before_and_no_sooner() {
        let asked = NoticeRequest::default();
        let f = Facts {
            planned: Some((at(1000), StopReason::BookingEnded)),
            ..facts(&asked)
        };
        assert_eq!(step(&f, &rules(), at(0)), Step::At(at(400)));
        let Step::Give(notice) = step(&f, &rules(), at(400)) else {
            panic!("told at the lead")
        };
        assert_eq!(
            (
                notice.stop_at,
                notice.kill_at,
                notice.signal,
                notice.requeue
            ),
            (at(1000), at(1030), NoticeSignal::Usr1, false)
        );
        // Told once: then nothing until the stop.
        let told = Facts {
            given: Some(&notice),
            ..f
        };
        assert_eq!(step(&told, &rules(), at(500)), Step::Nothing);
        // Its booking was extended: the notice is withdrawn, and given again later.
        let extended = Facts {
            planned: Some((at(4000), StopReason::BookingEnded)),
            ..told
        };
        assert_eq!(step(&extended, &rules(), at(500)), Step::Withdraw);
    }

    #[test]
    fn a_job_asks_for_more_notice_within_the_admins_bound() {
        let asked = NoticeRequest {
            lead_s: Some(1800),
            signal: Some(NoticeSignal::Usr2),
        };
        let f = Facts {
            planned: Some((at(4000), StopReason::TimeLimit)),
            ..facts(&asked)
        };
        assert_eq!(step(&f, &rules(), at(0)), Step::At(at(2200)));
        let greedy = NoticeRequest {
            lead_s: Some(86_400),
            signal: None,
        };
        let f = Facts {
            request: &greedy,
            ..f
        };
        // Bounded by the admin's hour.
        assert_eq!(step(&f, &rules(), at(0)), Step::At(at(400)));
        // A job that starts inside its lead is told at once.
        assert!(matches!(step(&f, &rules(), at(3900)), Step::Give(_)));
    }

    #[test]
    fn sigterm_waits_for_the_stop_a_notice_promised_unless_another_reason_came() {
        let notice = JobNotice {
            job_id: 7,
            reason: StopReason::BookingEnded,
            given_at: at(0),
            stop_at: at(600),
            kill_at: at(630),
            signal: NoticeSignal::Usr1,
            requeue: false,
            restart_count: 0,
        };
        let told = Some(&notice);
        assert_eq!(
            held_until(told, Some(StopReason::BookingEnded), at(10)),
            Some(at(600))
        );
        assert_eq!(
            held_until(told, Some(StopReason::BookingEnded), at(600)),
            None
        );
        assert_eq!(held_until(told, Some(StopReason::Cancelled), at(10)), None);
        assert_eq!(
            held_until(None, Some(StopReason::BookingEnded), at(10)),
            None
        );
        // A reclaim before the slot's end: a notice of its own, not the slot's.
        let asked = NoticeRequest::default();
        let f = Facts {
            must: Some(StopReason::Preempted),
            given: told,
            ..facts(&asked)
        };
        assert!(
            matches!(step(&f, &rules(), at(10)), Step::Give(n) if n.reason == StopReason::Preempted)
        );
        // A borrower told of its loan's end in ten minutes whose holder comes back now: told
        // again, of the reclaim's nearer stop.
        let loan_end = JobNotice {
            reason: StopReason::Preempted,
            stop_at: at(600),
            kill_at: at(630),
            ..notice.clone()
        };
        let reclaimed = Facts {
            must: Some(StopReason::Preempted),
            given: Some(&loan_end),
            ..facts(&asked)
        };
        let Step::Give(nearer) = step(&reclaimed, &rules(), at(10)) else {
            panic!("told again")
        };
        assert_eq!((nearer.stop_at, nearer.kill_at), (at(40), at(70)));
        let told = Facts {
            given: Some(&nearer),
            ..reclaimed
        };
        assert_eq!(step(&told, &rules(), at(12)), Step::Nothing);
    }

    #[test]
    fn a_reclaim_is_told_at_once_and_sigterm_waits_inside_the_lending_grace() {
        let asked = NoticeRequest::default();
        let f = Facts {
            must: Some(StopReason::Preempted),
            ..facts(&asked)
        };
        let Step::Give(notice) = step(&f, &rules(), at(0)) else {
            panic!("told at once")
        };
        assert_eq!((notice.stop_at, notice.kill_at), (at(30), at(60)));
        assert!(notice.requeue);
        // At the admin's bound on restarts, it is told it will not be queued again.
        let worn = Facts { requeues: 2, ..f };
        let Step::Give(last) = step(&worn, &rules(), at(0)) else {
            panic!("told")
        };
        assert!(!last.requeue);
        assert_eq!(last.restart_count, 2);
    }

    #[test]
    fn a_cancel_gets_no_notice_and_an_unforeseen_stop_is_told_at_the_stop() {
        let asked = NoticeRequest::default();
        let cancelled = Facts {
            must: Some(StopReason::Cancelled),
            ..facts(&asked)
        };
        assert_eq!(step(&cancelled, &rules(), at(0)), Step::Nothing);
        let released = Facts {
            must: Some(StopReason::BookingEnded),
            ..facts(&asked)
        };
        let Step::Give(notice) = step(&released, &rules(), at(5)) else {
            panic!("told")
        };
        assert_eq!((notice.stop_at, notice.signal), (at(5), NoticeSignal::None));
    }

    #[test]
    fn only_a_process_that_catches_the_signal_is_sent_it() {
        let status = "Name:\tpython3\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000180000202\n";
        // 0x202: signals 2 (SIGINT) and 10 (SIGUSR1).
        assert!(caught_in(status, 10));
        assert!(caught_in(status, 2));
        assert!(!caught_in(status, 12));
        assert!(!caught_in("Name:\tsleep\n", 10));
    }

    #[test]
    fn a_notice_file_is_whole_and_its_runs_alone() {
        let dir = tempfile::tempdir().unwrap();
        let notices = dir.path().join("notices");
        prepare(&notices, "7-abc").unwrap();
        let notice = JobNotice {
            job_id: 7,
            reason: StopReason::BookingEnded,
            given_at: at(0),
            stop_at: at(600),
            kill_at: at(630),
            signal: NoticeSignal::Usr1,
            requeue: false,
            restart_count: 0,
        };
        let path = write(&notices, "7-abc", &notice, None).unwrap();
        assert_eq!(path, file_of(&notices, "7-abc"));
        let read: JobNotice =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read, notice);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&notices), mode(&path)), (0o711, 0o600));
        // Nothing else is left in the run's directory, and it goes with the run.
        assert_eq!(
            std::fs::read_dir(run_dir(&notices, "7-abc"))
                .unwrap()
                .count(),
            1
        );
        remove(&notices, "7-abc");
        assert!(!run_dir(&notices, "7-abc").exists());
    }
}
