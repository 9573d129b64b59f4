//! The runner: starts each queued job when its booking becomes active, watches it, and stops
//! it (SIGTERM to its whole cgroup, or process group where the device wall is off, then SIGKILL
//! after a grace period) when the booking ends, is released, or the job is cancelled. One task;
//! it wakes when a job or a booking changes (events), when a job's process exits (a pidfd per
//! process), and at the one deadline it computed from what it saw: the next slot start or end,
//! the end of a grace period. While a job is ending it looks again within a bounded backoff
//! (its log keepers, what it left behind); an idle runner does not wake at all.
//!
//! Jobs outlive the server: they lead their own session and write to files. A restarted runner
//! re-adopts each running job whose process is still the one it started (same pid, same start
//! time, same boot) and goes on enforcing; a job whose process vanished meanwhile is marked lost.

use super::container::{self, ContainerHost, ContainerJob};
use super::launch::{self, Identity, Launch};
use super::mask::{fixed_environment, DeviceMask, JobFacts};
use super::notice;
use super::session;
use super::wall::{JobCgroup, Wall};
use crate::audit::AuditAction;
use crate::notify::{Notice, Notifier};
use crate::runtime::events::Event;
use crate::store::{AuditEntry, JobEnd, JobProcess, JobToRun, Store};
use crate::telemetry::hub::Hub;
use crate::telemetry::procinfo;
use crate::telemetry::Processes;
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::coded::Coded;
use lanes_types::container::ContainerFailure;
use lanes_types::job::{EnvironmentBase, JobNote, JobState, StopReason};
use lanes_types::notify::EventKind;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the runner looks though nothing woke it, with other nodes on PostgreSQL (whose
/// events come as NOTIFYs, which a dying process may never send).
const LOST_EVENT_LOOK: Duration = Duration::from_secs(30);
/// How soon the runner looks again after the database did not answer.
const DB_RETRY: Duration = Duration::from_secs(1);
/// How often a job whose process cannot be watched through a pidfd (an old kernel) is looked at.
const UNWATCHED_EVERY: Duration = Duration::from_secs(1);
/// How soon a job whose main process ended is looked at again while its log keepers finish.
const KEEPER_LOOK: Duration = Duration::from_millis(50);
/// How long the runner waits for the database before it goes on without it (a partition):
/// jobs still stop at their booking's end, and what it could not record waits.
const DB_WAIT: Duration = Duration::from_millis(1500);

/// `query`, or `Unavailable` when the database does not answer within [`DB_WAIT`].
async fn within<T>(
    query: impl std::future::Future<Output = Result<T, crate::store::StoreError>>,
) -> Result<T, crate::store::StoreError> {
    tokio::time::timeout(DB_WAIT, query)
        .await
        .unwrap_or_else(|_| {
            Err(crate::store::StoreError::Unavailable(
                "the database did not answer in time".into(),
            ))
        })
}

/// How long a job that exited waits for its log keepers before it is recorded as over anyway
/// (a child it left behind may hold the pipe until the sweep stops it).
const KEEPER_WAIT: Duration = Duration::from_secs(3);

/// How long removing a job's container may take.
const CONTAINER_CLEANUP_LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct RunnerSettings {
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Jobs' logs go to `<jobs_dir>/<id>-<random>/{stdout,stderr}`: a directory per job, made
    /// anew, so a job id that comes back (a recreated database) never meets an old log.
    pub jobs_dir: PathBuf,
    /// Where each run's notice file goes (`LANES_NOTICE_FILE`): `<notice_dir>/<log dir
    /// name>/notice.json`.
    pub notice_dir: PathBuf,
    /// Bytes kept of each of a job's streams.
    pub log_limit: u64,
    /// The `lanes` binary that keeps job logs (`lanes keep-log`).
    pub keeper: PathBuf,
    pub node: String,
    /// The device wall jobs start behind (or why there is none).
    pub wall: Arc<Wall>,
    /// How long a user's login profile may take before their job fails.
    pub profile_timeout: Duration,
    /// What time it is: slot ends and time limits are judged by it.
    pub clock: crate::runtime::clock::Clock,
    /// What this node offers jobs that run in a container.
    pub containers: Arc<ContainerHost>,
}

pub struct Runner {
    store: Store,
    hub: Arc<Hub>,
    processes: Processes,
    notifier: Notifier,
    settings: RunnerSettings,
    /// Counts finished ticks, so a test can wait for the tick an event caused.
    ticks: tokio::sync::watch::Sender<u64>,
    /// Looks on request (a test hook: "the clock moved past a slot's end, look now").
    looks: crate::runtime::tasks::Passes,
    /// Woken when a watched job's process exits.
    exits: Arc<tokio::sync::Notify>,
    boot_id: String,
    /// Jobs that ended while the database did not answer (a partition): their end is
    /// recorded, with the time they ended, as soon as it answers again.
    unrecorded: std::sync::Mutex<HashMap<i64, Unrecorded>>,
}

/// A job that ended while its end could not be recorded: the job, how it ended, and when.
type Unrecorded = (JobToRun, JobEnd, DateTime<Utc>);

/// How the runner knows a job's process.
enum Handle {
    /// Started by this runner: its exit status is ours to collect.
    Child(Child),
    /// Started by an earlier run of the server: followed through /proc; its exit status went
    /// to whoever reaped it.
    Adopted(JobProcess),
}

/// A job this runner watches.
struct Watched {
    handle: Handle,
    /// The keepers of its logs (none for a job re-adopted after a restart).
    keepers: Vec<Child>,
    /// When its main process was seen to end; it is recorded as over once its keepers have
    /// written everything (or [`KEEPER_WAIT`] passed), so its log is whole by then.
    exited_at: Option<DateTime<Utc>>,
    /// When SIGTERM went to the group, and why.
    stopping: Option<(DateTime<Utc>, StopReason)>,
    /// The job as it was when it started (for the notice when it ends).
    record: JobToRun,
    /// When its booking ends, as last read: while the database does not answer, the runner
    /// still stops the job then.
    booking_end: Option<DateTime<Utc>>,
    /// Its cgroup, behind the device wall.
    cgroup: Option<JobCgroup>,
    /// Whether its exit wakes the runner (a pidfd); if not, the runner looks now and then.
    exit_watched: bool,
    /// The notice of its stop it was given in this run.
    notice: Option<lanes_types::notice::JobNotice>,
}

impl Watched {
    fn pid(&self) -> u32 {
        match &self.handle {
            Handle::Child(child) => child.id(),
            Handle::Adopted(p) => p.pid,
        }
    }
}

impl Runner {
    /// Starts the runner task; it ends when `shutdown` fires. Jobs keep running then.
    pub fn start(
        store: Store,
        hub: Arc<Hub>,
        processes: Processes,
        notifier: Notifier,
        settings: RunnerSettings,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let runner = Arc::new(Self {
            store,
            hub,
            processes,
            notifier,
            settings,
            ticks: tokio::sync::watch::Sender::new(0),
            looks: crate::runtime::tasks::Passes::default(),
            exits: Arc::default(),
            boot_id: procinfo::boot_id(),
            unrecorded: Default::default(),
        });
        let task = runner.clone();
        crate::runtime::tasks::supervise("job runner", shutdown.clone(), move || {
            let task = task.clone();
            let shutdown = shutdown.clone();
            async move {
                let mut events = task.store.events().subscribe();
                // A restarted task re-adopts the running jobs from their records.
                let mut watched: HashMap<i64, Watched> = HashMap::new();
                let mut leftovers: HashMap<i64, Leftover> = HashMap::new();
                loop {
                    let asked = task.looks.asked();
                    let now = task.settings.clock.now();
                    let mut next = match task.tick(&mut watched, &mut leftovers, now).await {
                        Ok(next) => next,
                        Err(e) => {
                            tracing::error!(error = %e, "the job runner could not check its jobs");
                            let mut next =
                                task.tick_offline(&mut watched, &mut leftovers, now).await;
                            next.after(now, DB_RETRY);
                            next
                        }
                    };
                    next.merge(task.sweep(&mut leftovers, now).await);
                    if task.store.backend() == crate::store::Backend::Postgres {
                        // Another node's NOTIFY can be lost (it died between its commit and
                        // the NOTIFY): a job submitted there for cards here starts this late
                        // at worst.
                        next.after(now, LOST_EVENT_LOOK);
                    }
                    task.ticks.send_modify(|n| *n += 1);
                    task.looks.served(asked);
                    let sleep = next.sleep(task.settings.clock.now());
                    tokio::select! {
                        _ = events.changed(Event::concerns_runner) => {}
                        _ = task.exits.notified() => {}
                        _ = task.looks.requested() => {}
                        _ = sleep => {}
                        _ = shutdown.cancelled() => break,
                    }
                }
            }
        });
        runner
    }

    /// Ticks finished so far; a test waits for it to move past a value it read before acting.
    pub fn ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// Runs a look that starts after this call and returns when it has finished.
    pub fn looks(&self) -> crate::runtime::tasks::Passes {
        self.looks.clone()
    }

    /// The files of a job's output, given the name of its log directory (as the store keeps
    /// it); `None` for a name that is not one plain directory name.
    pub fn log_paths(&self, dir_name: &str) -> Option<(PathBuf, PathBuf)> {
        let plain = !dir_name.is_empty()
            && dir_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        plain.then(|| launch::log_files(&self.settings.jobs_dir.join(dir_name)))
    }

    /// Signals what is left of jobs whose main process ended (their cgroup, or their process
    /// group where the wall is off): SIGTERM once, then SIGKILL after the grace period until
    /// nothing is left; then records what the cgroup counted and removes it.
    async fn sweep(&self, leftovers: &mut HashMap<i64, Leftover>, now: DateTime<Utc>) -> NextLook {
        let grace = chrono::Duration::from_std(self.settings.grace).unwrap_or_default();
        let mut next = NextLook::default();
        let mut done = Vec::new();
        for (id, left) in leftovers.iter_mut() {
            // Signal 0 asks whether anyone is left.
            let group = left.group.map(|g| Pid::from_raw(g as i32));
            let group_left = group.is_some_and(|g| killpg(g, None).is_ok());
            let cgroup_left = left.cgroup.as_ref().is_some_and(|c| !c.is_empty());
            if !group_left && !cgroup_left {
                done.push(*id);
                continue;
            }
            if now - left.since >= grace {
                signal_job(left.group, left.cgroup.as_ref(), Signal::SIGKILL);
            } else {
                if !left.termed {
                    tracing::info!(job = id, "stopping what a job left running after it ended");
                    signal_job(left.group, left.cgroup.as_ref(), Signal::SIGTERM);
                    left.termed = true;
                }
                next.at(left.since + grace);
            }
            // Nothing tells when the last of a group is gone: look again, sooner while it is fresh.
            next.after(now, leftover_look(now - left.since));
        }
        for id in done {
            let Some(left) = leftovers.remove(&id) else {
                continue;
            };
            if let Some(cleanup) = left.cleanup {
                self.remove_container(id, cleanup, left.cgroup.clone())
                    .await;
            }
            if let Some(cgroup) = left.cgroup {
                self.close_cgroup(id, &cgroup).await;
            }
        }
        next
    }

    /// How a container job ended: when its runtime itself failed (the image is not in the
    /// member's store, no subuid range, ...), the job failed, saying so from its stderr log.
    fn container_end(&self, job: &JobToRun, end: JobEnd) -> JobEnd {
        let (Some(spec), Some(dir)) = (job.container(), job.log_dir.as_deref()) else {
            return end;
        };
        let Some((_, stderr)) = self.log_paths(dir) else {
            return end;
        };
        let tail = read_tail(&stderr, 8192);
        let failure = super::container::failure_of(
            spec.runtime(),
            end.exit_code,
            &tail,
            &spec.image,
            job.unix_user.as_deref().unwrap_or(&job.job.username),
            &self.settings.node,
        );
        match failure {
            Some(failure) => JobEnd {
                state: JobState::Failed,
                note: Some(JobNote::Container { failure }),
                ..end
            },
            None => end,
        }
    }

    /// What removes the rest of `job`'s container, if it runs in one.
    fn cleanup_of(&self, job: &JobToRun) -> Option<Cleanup> {
        let spec = job.container()?;
        let name = format!("lanes-job-{}", job.log_dir.as_deref()?);
        let (argv, as_server) = self.settings.containers.cleanup(spec.runtime(), &name)?;
        let identity = if as_server {
            Identity::server_root()
        } else {
            launch::identity(&job.job.username, job.unix_user.as_deref()).ok()?
        };
        Some(Cleanup { argv, identity })
    }

    /// Removes what is left of a job's container through its runtime, in the job's (empty)
    /// cgroup, which is killed again after: a rootless runtime's helper it started goes too.
    async fn remove_container(&self, job: i64, cleanup: Cleanup, cgroup: Option<JobCgroup>) {
        let done = tokio::task::spawn_blocking(move || {
            let removed = launch::run_to_end(
                &cleanup.identity,
                &cleanup.argv,
                cgroup.as_ref(),
                CONTAINER_CLEANUP_LIMIT,
            );
            if let Some(cgroup) = &cgroup {
                cgroup.kill();
                for _ in 0..100 {
                    if cgroup.is_empty() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            removed
        })
        .await;
        match done {
            Ok(Ok(())) => tracing::debug!(job, "removed what was left of a job's container"),
            Ok(Err(e)) => tracing::warn!(job, error = %e, "could not remove a job's container"),
            Err(e) => tracing::warn!(job, error = %e, "could not remove a job's container"),
        }
    }

    /// Records what an empty job cgroup counted and removes it.
    async fn close_cgroup(&self, job: i64, cgroup: &JobCgroup) {
        let usage = cgroup.usage();
        let cpu_ms = usage.cpu_seconds.map(|s| (s * 1000.0).round() as u64);
        if let Err(e) = self
            .store
            .runs()
            .record_usage(job, cpu_ms, usage.peak_memory_bytes)
            .await
        {
            tracing::warn!(job, error = %e, "could not record a job's CPU time and memory");
        }
        if let Err(e) = cgroup.remove() {
            tracing::warn!(job, cgroup = cgroup.path, error = %e, "could not remove a job's cgroup");
        }
    }

    async fn tick(
        &self,
        watched: &mut HashMap<i64, Watched>,
        leftovers: &mut HashMap<i64, Leftover>,
        now: DateTime<Utc>,
    ) -> Result<NextLook, crate::store::StoreError> {
        self.record_unrecorded().await?;
        let mut next = NextLook::default();
        let unrecorded: Vec<i64> = self.lock_unrecorded().keys().copied().collect();
        // Why each running job must stop, if it must, and when it will if nothing changes:
        // read once per tick with the job itself.
        let mut stop_reasons: HashMap<i64, StopReason> = HashMap::new();
        let mut plans: HashMap<i64, Plan> = HashMap::new();
        for mut job in within(self.store.jobs().live()).await? {
            let id = job.job.id;
            let booking = match job.job.booking_id {
                Some(b) => within(self.store.bookings().get(b, now)).await?,
                None => None,
            };
            // Another node's runner starts, watches and ends the jobs on its cards.
            if booking.as_ref().is_some_and(|b| !self.holds(b)) || unrecorded.contains(&id) {
                continue;
            }
            if let (Some(watched), Some(b)) = (watched.get_mut(&id), &booking) {
                watched.booking_end = Some(b.end);
            }
            // The queue asked it to make way since it started: its end says so.
            if let Some(watched) = watched.get_mut(&id) {
                watched.record.preempt_requested |= job.preempt_requested;
            }
            if job.job.state == JobState::Running {
                let must = stop_reason(booking.as_ref(), &job, now);
                if let Some(reason) = must {
                    stop_reasons.insert(id, reason);
                }
                plans.insert(
                    id,
                    Plan {
                        must,
                        planned: planned_stop(&job, booking.as_ref(), now),
                        request: job.job.notice_request,
                        preemptible: job.job.queue.is_some_and(|q| q.preemptible),
                        requeues: job.job.queue.map_or(0, |q| q.requeues),
                    },
                );
            }
            if let Some(at) = next_change(&job, booking.as_ref(), now) {
                next.at(at);
            }
            // Whether a borrower holds the booking's cards: read only where it decides.
            let lent = match &booking {
                Some(b) if asks_borrowers(&job, b) => {
                    within(self.store.lending().borrowers_present(b.id, now)).await?
                }
                _ => false,
            };
            let step = step(&job, booking.as_ref(), lent, watched.contains_key(&id));
            match (step, booking) {
                (Step::Wait, _) => {}
                (Step::Reclaim, Some(b)) => {
                    let audit = AuditEntry::new(None, AuditAction::LoanReclaim, "")
                        .detail(format!("job {id} was submitted into it"));
                    within(self.store.lending().reclaim_loans(b.id, audit, now)).await?;
                }
                (Step::Launch, Some(b)) => {
                    match self.launch(&mut job, &b).await {
                        Ok((
                            launch::Spawned {
                                child,
                                keepers,
                                environment,
                            },
                            cgroup,
                        )) => {
                            if let Err(e) = self
                                .store
                                .runs()
                                .set_environment(id, &environment.code())
                                .await
                            {
                                tracing::warn!(job = id, error = %e, "could not record a job's environment");
                            }
                            let process = JobProcess {
                                pid: child.id(),
                                start_ticks: procinfo::stat(child.id())
                                    .map_or(0, |s| s.start_ticks),
                                boot_id: self.boot_id.clone(),
                            };
                            let started = self.store.runs().started(id, &process, now).await;
                            if !matches!(started, Ok(true)) {
                                // Cancelled between this tick's read and its start (or its
                                // start could not be recorded): it must not run. Its state
                                // stays as the cancel left it. Every process it started is
                                // reaped, and a queue job's booking given back.
                                let pid = child.id();
                                signal_job(Some(pid), cgroup.as_ref(), Signal::SIGKILL);
                                launch::reap(std::iter::once(child).chain(keepers).collect());
                                leftovers.insert(
                                    id,
                                    Leftover {
                                        group: Some(pid),
                                        since: now,
                                        termed: true,
                                        cgroup,
                                        cleanup: self.cleanup_of(&job),
                                    },
                                );
                                started?;
                                tracing::info!(job = id, "stopped a job cancelled as it started");
                                if job.job.queue.is_some() {
                                    super::release_booking_of(&self.store, b.id, id, now).await;
                                }
                                continue;
                            }
                            // Its record, for its end: running since now.
                            job.job.state = JobState::Running;
                            job.job.started_at = Some(now);
                            self.attach(&job, &b, child.id());
                            let exit_watched =
                                super::exits::notify_on_exit(child.id(), self.exits.clone());
                            // Running now: the next look reads its slot's end and time limit.
                            next.at(now);
                            if job.job.queue.is_some() {
                                self.notifier.send(started_notice(&job, &b, now));
                            }
                            let handle = Handle::Child(child);
                            watched.insert(
                                id,
                                Watched {
                                    handle,
                                    keepers,
                                    exited_at: None,
                                    stopping: None,
                                    record: job,
                                    booking_end: Some(b.end),
                                    cgroup,
                                    exit_watched,
                                    notice: None,
                                },
                            );
                        }
                        Err((note, cgroup)) => {
                            // Whatever its profile left running goes with the cgroup.
                            if let Some(cgroup) = cgroup {
                                cgroup.kill();
                                leftovers.insert(id, Leftover::in_cgroup(cgroup, now));
                            }
                            let end = ended(JobState::Failed, None, None, Some(note));
                            self.finish(&job, &end, now).await?;
                        }
                    }
                }
                (Step::NeverStarted, _) => {
                    let note = Some(JobNote::BookingEndedFirst);
                    let end = ended(JobState::Cancelled, None, None, note);
                    self.finish(&job, &end, now).await?;
                }
                (Step::Adopt, booking) => {
                    // Started by an earlier run of the server.
                    match self.adopt(&job) {
                        Some(handle) => {
                            tracing::info!(job = id, "re-adopted a job that outlived a restart");
                            let cgroup = self.recorded_cgroup(&job);
                            let pid = match &handle {
                                Handle::Child(c) => c.id(),
                                Handle::Adopted(p) => p.pid,
                            };
                            let exit_watched =
                                super::exits::notify_on_exit(pid, self.exits.clone());
                            let adopted = Watched {
                                exit_watched,
                                notice: job.job.notice.clone(),
                                handle,
                                keepers: Vec::new(),
                                exited_at: None,
                                stopping: job.stop_requested,
                                record: job,
                                booking_end: booking.as_ref().map(|b| b.end),
                                cgroup,
                            };
                            if let Some(b) = &booking {
                                self.attach(&adopted.record, b, adopted.pid());
                            }
                            watched.insert(id, adopted);
                        }
                        None => {
                            // What it left in its cgroup goes, and the cgroup with it.
                            let cgroup = self.recorded_cgroup(&job).filter(JobCgroup::exists);
                            if let Some(cgroup) = cgroup {
                                let mut left = Leftover::in_cgroup(cgroup, now);
                                left.cleanup = self.cleanup_of(&job);
                                leftovers.insert(id, left);
                            }
                            // A member's shell that ended before it was first looked at was
                            // left (`exit`), not lost: Lanes never had its status.
                            let end = if job.job.is_shell() {
                                ended(JobState::Exited, None, None, Some(JobNote::ShellLeft))
                            } else {
                                ended(JobState::Lost, None, None, Some(JobNote::Vanished))
                            };
                            self.finish(&job, &end, now).await?;
                        }
                    }
                }
                (Step::Reclaim | Step::Launch, None) => {
                    unreachable!("a step on a booking is only planned with one")
                }
            }
        }
        // Notices, and the graces of stops: the queue's settings, read when a job runs.
        let rules = if plans.is_empty() {
            None
        } else {
            let settings = within(self.store.queue().settings()).await?;
            Some(notice::Rules::new(&settings, self.settings.grace))
        };
        if let Some(rules) = &rules {
            for (id, plan) in &plans {
                let Some(job) = watched.get_mut(id) else {
                    continue;
                };
                next.merge(self.notice(*id, job, plan, rules, now).await?);
                // SIGTERM waits for the stop its notice promised.
                if let Some(until) = notice::held_until(job.notice.as_ref(), plan.must, now) {
                    stop_reasons.remove(id);
                    next.at(until);
                }
            }
        }
        let ids: Vec<i64> = watched.keys().copied().collect();
        for id in ids {
            let stop = stop_reasons.get(&id).copied();
            next.merge(
                self.watch(id, watched, leftovers, stop, rules.as_ref(), now)
                    .await?,
            );
        }
        Ok(next)
    }

    /// Gives, withdraws or plans a running job's notice of its stop.
    async fn notice(
        &self,
        id: i64,
        job: &mut Watched,
        plan: &Plan,
        rules: &notice::Rules,
        now: DateTime<Utc>,
    ) -> Result<NextLook, crate::store::StoreError> {
        let mut next = NextLook::default();
        let facts = notice::Facts {
            job_id: id,
            request: &plan.request,
            preemptible_queue_job: plan.preemptible,
            requeues: plan.requeues,
            given: job.notice.as_ref(),
            must: plan.must,
            planned: plan.planned,
        };
        let run = job.record.log_dir.clone().unwrap_or_default();
        match notice::step(&facts, rules, now) {
            notice::Step::Nothing => {}
            notice::Step::At(when) => next.at(when),
            notice::Step::Withdraw => {
                notice::withdraw(&self.settings.notice_dir, &run);
                within(self.store.runs().withdraw_notice(id)).await?;
                tracing::info!(job = id, "withdrew a job's notice: its stop moved");
                job.notice = None;
                // Told again when the new stop's lead begins.
                next.at(now);
            }
            notice::Step::Give(given) => {
                let owner =
                    launch::identity(&job.record.job.username, job.record.unix_user.as_deref())
                        .ok()
                        .and_then(|who| who.ids_raw());
                if let Err(e) = notice::write(&self.settings.notice_dir, &run, &given, owner) {
                    tracing::warn!(job = id, error = %e, "could not write a job's notice file");
                }
                let signalled = if given.stop_at > now {
                    let pids = match &job.cgroup {
                        Some(cgroup) => cgroup.pids(),
                        None => notice::session_members(job.pid()),
                    };
                    notice::signal_catchers(&pids, given.signal)
                } else {
                    0
                };
                tracing::info!(
                    job = id,
                    reason = given.reason.as_str(),
                    stop_at = %given.stop_at,
                    signal = given.signal.as_str(),
                    signalled,
                    "gave a job notice of its stop"
                );
                within(self.store.runs().noticed(id, &given)).await?;
                if given.stop_at > now {
                    next.at(given.stop_at);
                }
                job.notice = Some(given);
            }
        }
        Ok(next)
    }

    /// The cgroup recorded with a job (started by this run or an earlier one).
    fn recorded_cgroup(&self, job: &JobToRun) -> Option<JobCgroup> {
        job.cgroup
            .as_deref()
            .and_then(|path| self.settings.wall.reopen(path))
    }

    /// The process of a job started by an earlier run, if it is still that process.
    fn adopt(&self, job: &JobToRun) -> Option<Handle> {
        let pid = u32::try_from(job.job.pid?).ok()?;
        let expected = JobProcess {
            pid,
            start_ticks: job.pid_start?,
            boot_id: job.boot_id.clone()?,
        };
        same_process_alive(&expected, &self.boot_id).then_some(Handle::Adopted(expected))
    }

    /// Shows a started job on its cards (the simulated fleet puts its load there).
    fn attach(&self, job: &JobToRun, booking: &Booking, pid: u32) {
        let cards: Vec<String> = booking.gpus.iter().map(|g| g.uuid.clone()).collect();
        let command = job
            .job
            .argv
            .first()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
            .unwrap_or_default();
        self.processes
            .job_started(&cards, pid, &job.job.username, &command);
    }

    /// Records how a job ended and tells whoever listens.
    async fn finish(
        &self,
        job: &JobToRun,
        end: &JobEnd,
        now: DateTime<Utc>,
    ) -> Result<(), crate::store::StoreError> {
        if let Some(run) = job.log_dir.as_deref() {
            // A notebook's directory has a tmpfs of its own (session.rs): taken away first.
            session::uncap(&session::dir(&self.settings.notice_dir, run));
            notice::remove(&self.settings.notice_dir, run);
            // A Docker job's variables were the client's to read at its start, no longer.
            let _ = std::fs::remove_file(container::env_file_of(&self.settings.jobs_dir.join(run)));
        }
        let preempted =
            end.note.as_ref().and_then(JobNote::stop_reason) == Some(StopReason::Preempted);
        let requeues = job.job.queue.map_or(0, |q| q.requeues);
        let limit = if job.job.queue.is_some() && preempted {
            within(self.store.queue().settings()).await?.max_requeues
        } else {
            0
        };
        let mut end = end.clone();
        if job.job.queue.is_some() && preempted && requeues >= limit {
            // The admin's bound on restarts ends the loop: it ends here, preempted.
            end.note = Some(JobNote::RequeueLimit { requeues, limit });
        } else if job.job.queue.is_some() && preempted {
            let why = if job.preempt_requested {
                "it made way for a job that had received less GPU time"
            } else {
                "its lent cards were taken back"
            };
            let audit = AuditEntry::new(None, AuditAction::QueueRequeue, "")
                .detail(format!("{why}; it ended with {}", how_it_ended(&end)));
            let note = JobNote::Requeued {
                at: now,
                exit_code: end.exit_code,
                signal: end.signal,
                made_way: job.preempt_requested,
            };
            // What this run received counts towards its attained service.
            let ran = job
                .job
                .started_at
                .map_or(0, |started| (now - started).num_seconds().max(0));
            let attained = ran * i64::from(job.job.queue.map_or(0, |q| q.gpus));
            if within(
                self.store
                    .lending()
                    .requeue_job(job.job.id, &note, attained, audit, now),
            )
            .await?
            {
                if let Some(booking) = job.job.booking_id {
                    super::release_booking_of(&self.store, booking, job.job.id, now).await;
                }
                self.notifier.send(
                    Notice::lab(
                        "job.requeued",
                        now,
                        format!(
                            "job {} ({}) of {} was stopped ({why}) and waits in the queue again",
                            job.job.id,
                            job.job.title(),
                            job.job.username
                        ),
                        serde_json::json!({
                            "job_id": job.job.id,
                            "name": job.job.title(),
                            "booking_id": job.job.booking_id,
                            "user": job.job.username,
                            "exit_code": end.exit_code,
                            "signal": end.signal,
                            "note": note,
                        }),
                    )
                    .to(job.job.user_id, EventKind::LoanReclaimed),
                );
                return Ok(());
            }
        }
        let end = &queue_end(job, &end);
        within(self.store.runs().ended(job.job.id, end, now)).await?;
        if let (Some(_), Some(booking)) = (job.job.queue, job.job.booking_id) {
            super::release_booking_of(&self.store, booking, job.job.id, now).await;
        }
        let name = job.job.title();
        let how = how_it_ended(end);
        let mut text = format!(
            "job {} ({name}) of {} ended: {how}",
            job.job.id, job.job.username
        );
        if let Some(note) = &end.note {
            text.push_str(&format!("; {note}"));
        }
        let mut notice = Notice::lab(
            "job.end",
            now,
            text,
            serde_json::json!({
                "job_id": job.job.id,
                "name": name,
                "booking_id": job.job.booking_id,
                "queue": job.job.queue.is_some(),
                "user": job.job.username,
                "state": end.state,
                "exit_code": end.exit_code,
                "signal": end.signal,
                "message": end.note.as_ref().map(|n| n.to_string()),
                "note": end.note,
                "how": how,
            }),
        );
        // A member who leaves their own shell was there: nothing to tell them, and nothing
        // for the lab either (a shell's end is no news).
        if end.note == Some(JobNote::ShellLeft) {
            return Ok(());
        }
        if let Some(kind) = personal_end(end) {
            notice = notice.to(job.job.user_id, kind);
        }
        self.notifier.send(notice);
        Ok(())
    }

    /// Records a job that ended, or stops one that must stop (`stop`, with the reason).
    async fn watch(
        &self,
        id: i64,
        watched: &mut HashMap<i64, Watched>,
        leftovers: &mut HashMap<i64, Leftover>,
        stop: Option<StopReason>,
        rules: Option<&notice::Rules>,
        now: DateTime<Utc>,
    ) -> Result<NextLook, crate::store::StoreError> {
        let mut next = NextLook::default();
        let Some(job) = watched.get_mut(&id) else {
            return Ok(next);
        };
        if !job.exit_watched {
            next.after(now, UNWATCHED_EVERY);
        }
        if let Some(end) = exited(job) {
            if job.exited_at.is_none() {
                job.exited_at = Some(now);
                self.processes.job_ended(job.pid());
                // The job is over when its main process is (as in Slurm); whatever it left
                // behind in its group goes too, so nothing outlives the slot.
                leftovers.insert(
                    id,
                    Leftover {
                        group: Some(job.pid()),
                        since: now,
                        termed: false,
                        cgroup: job.cgroup.clone(),
                        cleanup: self.cleanup_of(&job.record),
                    },
                );
            }
            let waited = job.exited_at.is_some_and(|at| {
                now - at >= chrono::Duration::from_std(KEEPER_WAIT).unwrap_or_default()
            });
            job.keepers
                .retain_mut(|k| k.try_wait().ok().flatten().is_none());
            if !job.keepers.is_empty() && !waited {
                // The keepers finish within moments of the job; at most KEEPER_WAIT.
                next.after(now, KEEPER_LOOK);
                return Ok(next);
            }
            if let Some(done) = watched.remove(&id) {
                launch::reap(done.keepers);
                let ended_at = done.exited_at.unwrap_or(now);
                let end = self.container_end(&done.record, end);
                if let Err(e) = self.finish(&done.record, &end, ended_at).await {
                    // Kept until the database answers: a job that ended is never "lost".
                    self.lock_unrecorded()
                        .insert(id, (done.record, end, ended_at));
                    return Err(e);
                }
            }
            return Ok(next);
        }
        let grace = |why: StopReason| self.grace_for(why, rules);
        match stop_step(job.stopping.as_ref(), stop, grace, now) {
            StopStep::Run => {}
            StopStep::Term(reason) => {
                tracing::info!(job = id, reason = reason.as_str(), "stopping a job");
                signal_job(Some(job.pid()), job.cgroup.as_ref(), Signal::SIGTERM);
                job.stopping = Some((now, reason));
                within(self.store.runs().stopping(id, now, reason)).await?;
                next.after(now, grace(reason));
            }
            StopStep::Kill => signal_job(Some(job.pid()), job.cgroup.as_ref(), Signal::SIGKILL),
            StopStep::KillAt(at) => next.at(at),
        }
        Ok(next)
    }

    /// Between SIGTERM and SIGKILL for a job stopped for `why`: a borrower stopped for its
    /// lender has what its lending grace leaves after its notice, others the runner's.
    fn grace_for(&self, why: StopReason, rules: Option<&notice::Rules>) -> Duration {
        rules
            .and_then(|r| r.grace_for(why).to_std().ok())
            .unwrap_or(self.settings.grace)
    }

    /// Whether this node's runner runs jobs of `booking`: its cards are here. (A booking
    /// across nodes takes no jobs; one from before that rule belongs to its first card's node,
    /// whose mask then refuses the others' cards.)
    fn holds(&self, booking: &Booking) -> bool {
        booking
            .gpus
            .first()
            .is_some_and(|g| g.node == self.settings.node)
    }

    fn lock_unrecorded(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Unrecorded>> {
        self.unrecorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the ends that could not be recorded when they happened.
    async fn record_unrecorded(&self) -> Result<(), crate::store::StoreError> {
        let pending: Vec<(i64, Unrecorded)> = self.lock_unrecorded().drain().collect();
        let mut result = Ok(());
        for (id, (record, end, at)) in pending {
            if result.is_ok() {
                match self.finish(&record, &end, at).await {
                    Ok(()) => {
                        tracing::info!(job = id, "recorded the end of a job that ended while the database was unreachable");
                        continue;
                    }
                    Err(e) => result = Err(e),
                }
            }
            self.lock_unrecorded().insert(id, (record, end, at));
        }
        result
    }

    /// A tick without the database (it did not answer): the jobs this runner watches still
    /// stop when their booking ends, as last read, and their ends wait to be recorded.
    async fn tick_offline(
        &self,
        watched: &mut HashMap<i64, Watched>,
        leftovers: &mut HashMap<i64, Leftover>,
        now: DateTime<Utc>,
    ) -> NextLook {
        let mut next = NextLook::default();
        let ids: Vec<i64> = watched.keys().copied().collect();
        for id in ids {
            let end = watched.get(&id).and_then(|w| w.booking_end);
            let over = end.is_some_and(|end| now >= end);
            if let Some(end) = end.filter(|_| !over) {
                next.at(end);
            }
            let stop = over.then(|| {
                slot_ended(
                    watched
                        .get(&id)
                        .is_some_and(|w| w.record.job.queue.is_some()),
                )
            });
            match self.watch(id, watched, leftovers, stop, None, now).await {
                Ok(then) => next.merge(then),
                Err(e) => {
                    tracing::debug!(job = id, error = %e, "a job's change waits for the database")
                }
            }
        }
        next
    }

    /// Starts a job under its booking's mask and behind the device wall, as its user, in the
    /// environment it asked for (or the admin's default), with its logs in a directory made for
    /// it alone. A job that cannot start gets one line saying why, and its cgroup if one was
    /// made (its profile may have left something running in it).
    async fn launch(
        &self,
        job: &mut JobToRun,
        booking: &Booking,
    ) -> Result<(launch::Spawned, Option<JobCgroup>), (JobNote, Option<JobCgroup>)> {
        let said = |e: &dyn std::fmt::Display| JobNote::Said {
            text: e.to_string(),
        };
        let fail = |e: &dyn std::fmt::Display| (said(e), None);
        let who =
            launch::identity(&job.job.username, job.unix_user.as_deref()).map_err(|e| fail(&e))?;
        let inventory: Vec<_> = self.hub.local_gpus().into_iter().map(|g| g.info).collect();
        let mask = DeviceMask::for_cards(&booking.gpus, &self.settings.node, &inventory)
            .map_err(|e| fail(&e))?;
        let restart_count = job.job.queue.map_or(0, |q| q.requeues);
        let (base, base_by_admin) = match &job.env_base {
            Some(base) => (base.clone(), false),
            None => {
                let portal = self.store.settings().portal().await.map_err(|e| fail(&e))?;
                (portal.job_environment.into(), true)
            }
        };
        let dir_name = self
            .new_log_dir(job.job.id)
            .map_err(|e| fail(&format!("cannot make the log directory: {e}")))?;
        self.store
            .runs()
            .set_log_dir(job.job.id, &dir_name)
            .await
            .map_err(|e| fail(&e))?;
        job.log_dir = Some(dir_name.clone());
        let notice_file = notice::file_of(&self.settings.notice_dir, &dir_name);
        let notice_line = match notice::prepare(&self.settings.notice_dir, &dir_name) {
            Ok(_) => format!(
                "notice before a stop: {} (LANES_NOTICE_FILE)",
                notice_file.display()
            ),
            Err(e) => {
                tracing::warn!(job = job.job.id, error = %e, "could not make a job's notice directory");
                format!("notice before a stop: no file ({e}); the signal alone")
            }
        };
        let facts = JobFacts {
            job_id: job.job.id,
            booking_end: booking.end,
            notice_file: notice_file.display().to_string(),
            restart_count,
        };
        let wall = &self.settings.wall;
        let cgroup = wall
            .create(job.job.id, mask.uuids())
            .map_err(|e| fail(&e))?;
        let wall_line = wall.describe_for(cgroup.as_ref());
        let recorded = self
            .store
            .runs()
            .walled(
                job.job.id,
                &wall_line,
                cgroup.as_ref().map(|c| c.path.as_str()),
            )
            .await;
        if let Err(e) = recorded {
            if let Some(c) = &cgroup {
                let _ = c.remove();
            }
            return Err(fail(&e));
        }
        let cards = mask.cards_named(&inventory);
        // No directory asked for: the home, or "/" when it has none (as login does).
        let (mut cwd, mut required) = match &job.job.cwd {
            Some(dir) => (dir.clone(), true),
            None => (who.home().to_string(), false),
        };
        let mut fixed = fixed_environment(&mask, &facts);
        let mut header = vec![
            format!(
                "job {} of {} on node {}, as Unix user {}",
                job.job.id,
                job.job.username,
                self.settings.node,
                who.name()
            ),
            format!("cards: {}", cards.join(", ")),
            format!("device wall: {wall_line}"),
            notice_line,
        ];
        if restart_count > 0 {
            header.push(format!(
                "run {} of this job: it was preempted and queued again {restart_count} time(s) (LANES_RESTART_COUNT)",
                restart_count + 1
            ));
        }
        let mut argv = job.job.argv.clone();
        if let Some(kind) = job.job.session {
            let idle = match self.store.enforcement().policy().await {
                Ok(policy) => Duration::from_secs(policy.idle_window_s),
                Err(e) => return Err((said(&e), cgroup)),
            };
            let prepared = session::prepare(
                kind,
                &self.settings.jobs_dir,
                &self.settings.notice_dir,
                &dir_name,
                job.job.id,
                who.ids_raw(),
                idle,
            )
            .map_err(|e| {
                (
                    said(&format!("cannot prepare the session: {e}")),
                    cgroup.clone(),
                )
            })?;
            argv = prepared.argv;
            fixed.extend(prepared.env);
            header.push(prepared.line);
        }
        let (mut base, mut base_by_admin, mut who) = (base, base_by_admin, who);
        let mut extra = job.env.clone();
        let mut launch_cgroup = cgroup.clone();
        if let Some(spec) = job.container() {
            let env_names = (job.env.keys().cloned())
                .chain(fixed.iter().map(|(name, _)| name.clone()))
                .collect();
            let planned = self.settings.containers.plan(&ContainerJob {
                spec,
                job_id: job.job.id,
                tag: &dir_name,
                username: &job.job.username,
                identity: &who,
                cards: mask.uuids(),
                argv: &job.job.argv,
                cwd: &cwd,
                env_names,
                cgroup: cgroup.as_ref().map(|c| c.path.as_str()),
                run_dir: &self.settings.jobs_dir.join(&dir_name),
                notice_dir: notice::run_dir(&self.settings.notice_dir, &dir_name)
                    .to_str()
                    .map(str::to_string),
            });
            let planned = match planned {
                Ok(planned) => planned,
                Err(failure) => return Err((JobNote::Container { failure }, cgroup)),
            };
            header.push(format!(
                "container: {} with {}{}, {}{}",
                spec.image,
                planned.runtime,
                if planned.as_server {
                    format!(" (its daemon; the container as {})", who.name())
                } else {
                    format!(" as {}", who.name())
                },
                planned.cards,
                planned
                    .name
                    .as_ref()
                    .map(|n| format!(", named {n}"))
                    .unwrap_or_default()
            ));
            let vars: Vec<(String, String)> = (job.env.clone().into_iter())
                .chain(fixed.iter().cloned())
                .collect();
            argv = planned.argv.clone();
            if let Some(file) = &planned.env_file {
                // Docker's: the variables are data in a file the root client reads, and the
                // client's own environment is Lanes' alone.
                let written = container::env_file_text(&vars).and_then(|text| {
                    container::write_env_file(file, &text).map_err(|e| ContainerFailure::Runtime {
                        runtime: planned.runtime,
                        said: format!("cannot write its variables' file: {e}"),
                    })
                });
                if let Err(failure) = written {
                    return Err((JobNote::Container { failure }, cgroup));
                }
                fixed.clear();
                extra.clear();
            } else {
                // A runtime that takes the container's variables by a prefix gets them so.
                fixed.extend(planned.passed(&vars));
            }
            if planned.as_server {
                // Docker's client talks to a root daemon: it runs as the server, from `/`, in
                // a clean environment, with the command line Lanes alone built, in a leaf of
                // the job's cgroup (the container's cgroup is another child of it).
                who = Identity::server_root();
                (base, base_by_admin) = (EnvironmentBase::Clean, false);
                (cwd, required) = ("/".into(), true);
                if let Some(c) = &cgroup {
                    match c.client_leaf() {
                        Ok(leaf) => launch_cgroup = Some(leaf),
                        Err(e) => {
                            return Err((
                                said(&format!("cannot make the Docker client's cgroup: {e}")),
                                cgroup,
                            ))
                        }
                    }
                }
            }
        }
        let plan = Launch {
            argv,
            cwd: PathBuf::from(cwd),
            cwd_required: required,
            base,
            base_by_admin,
            extra,
            fixed,
            header,
            identity: who,
            log_dir: self.settings.jobs_dir.join(&dir_name),
            log_limit: self.settings.log_limit,
            keeper: self.settings.keeper.clone(),
            cgroup: launch_cgroup,
            profile_timeout: self.settings.profile_timeout,
        };
        // The login profile may take seconds: off the async workers.
        let spawned = tokio::task::spawn_blocking(move || launch::spawn(&plan))
            .await
            .map_err(|e| said(&e))
            .and_then(|r| r.map_err(|e| e.note()));
        match spawned {
            Ok(spawned) => Ok((spawned, cgroup)),
            Err(note) => Err((note, cgroup)),
        }
    }

    /// Where session `run` listens, and the token it expects (`None` once the run is gone).
    pub fn session_endpoint(&self, run: &str) -> Option<(PathBuf, String)> {
        let token = session::token(&self.settings.jobs_dir, run).ok()?;
        Some((session::socket(&self.settings.notice_dir, run), token))
    }

    /// Makes `<jobs_dir>/<id>-<random>`, which must not exist yet (never reused, never a link
    /// someone placed), readable by the server only. Returns its name.
    fn new_log_dir(&self, job_id: i64) -> std::io::Result<String> {
        super::new_run_dir(&self.settings.jobs_dir, &job_id.to_string())
    }
}

/// The last `bytes` of a file, as text.
fn read_tail(path: &std::path::Path, bytes: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let size = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(size.saturating_sub(bytes)));
    let mut buffer = Vec::new();
    let _ = file.take(bytes).read_to_end(&mut buffer);
    String::from_utf8_lossy(&buffer).into_owned()
}

/// What is left of a job whose main process ended (or that failed to start), by job id.
struct Leftover {
    /// Its process group (led by its main process), if it had one.
    group: Option<u32>,
    /// When the main process was seen to end (SIGKILL follows after the grace period).
    since: DateTime<Utc>,
    /// Whether SIGTERM went out (once).
    termed: bool,
    /// Its cgroup: what is in it is what is left, wherever it moved its session or group.
    cgroup: Option<JobCgroup>,
    /// What removes the rest of its container once nothing of it runs.
    cleanup: Option<Cleanup>,
}

/// The command that removes what is left of a job's container (its record and storage in the
/// member's store; `--rm` does it when the runtime itself saw the end), and whom it runs as.
#[derive(Clone, Debug)]
struct Cleanup {
    argv: Vec<String>,
    identity: Identity,
}

impl Leftover {
    /// What is left in the cgroup of a job with no main process (it failed to start, or it
    /// vanished while the server was down), from `since`.
    fn in_cgroup(cgroup: JobCgroup, since: DateTime<Utc>) -> Self {
        Self {
            group: None,
            since,
            termed: false,
            cgroup: Some(cgroup),
            cleanup: None,
        }
    }
}

/// Signals everything of a job: its process group (led by its main process, `group`), and its
/// cgroup, which also holds what left the group. SIGKILL kills the cgroup whole
/// (`cgroup.kill`, or frozen and then killed), so nothing forks its way out meanwhile.
fn signal_job(group: Option<u32>, cgroup: Option<&JobCgroup>, signal: Signal) {
    if let Some(g) = group {
        let _ = killpg(Pid::from_raw(g as i32), signal);
    }
    match cgroup {
        Some(c) if signal == Signal::SIGKILL => c.kill(),
        Some(c) => c.signal(signal),
        None => {}
    }
}

/// Whether `process` still runs: same pid, same start time, same boot, and not a zombie.
fn same_process_alive(process: &JobProcess, boot_id: &str) -> bool {
    process.boot_id == boot_id
        && procinfo::stat(process.pid)
            .is_some_and(|s| s.start_ticks == process.start_ticks && s.state != 'Z')
}

/// How a watched job ended, if it has.
fn exited(job: &mut Watched) -> Option<JobEnd> {
    // A borrower that checkpointed and left on its notice, before SIGTERM, made way for its
    // holder as much as one that was stopped: it goes back to the queue.
    let reason = job.stopping.as_ref().map(|(_, why)| *why).or_else(|| {
        job.notice
            .as_ref()
            .filter(|n| n.reason == StopReason::Preempted)
            .map(|n| n.reason)
    });
    let stopped = |exit_unknown| {
        reason.map(|reason| JobNote::Stopped {
            reason,
            exit_unknown,
        })
    };
    match &mut job.handle {
        Handle::Child(child) => {
            let status = child.try_wait().ok().flatten()?;
            Some(match (status.code(), status.signal()) {
                (Some(code), _) => ended(JobState::Exited, Some(code.into()), None, stopped(false)),
                (None, signal) => ended(
                    JobState::Killed,
                    None,
                    signal.map(i64::from),
                    stopped(false).or(Some(JobNote::KilledBySignal)),
                ),
            })
        }
        Handle::Adopted(process) => {
            if same_process_alive(process, &process.boot_id) {
                return None;
            }
            // Whoever reaped it has its exit status; say what we know. A shell is always
            // adopted (the member's own process joined): it was left, not lost.
            let left = if job.record.job.is_shell() {
                JobNote::ShellLeft
            } else {
                JobNote::ExitUnknown
            };
            Some(match stopped(true) {
                Some(note) => ended(JobState::Killed, None, None, Some(note)),
                None => ended(JobState::Exited, None, None, Some(left)),
            })
        }
    }
}

/// "exit code 0", "signal 9": how a job's process ended.
/// The personal event of a job's end: none for a cancel (its owner asked for it); a job
/// preempted past the admin's bound on requeues made way for a holder, it did not fail.
fn personal_end(end: &JobEnd) -> Option<EventKind> {
    if matches!(end.note, Some(JobNote::RequeueLimit { .. })) {
        return Some(EventKind::LoanReclaimed);
    }
    match end.state {
        JobState::Exited if end.exit_code == Some(0) => Some(EventKind::JobFinished),
        JobState::TimedOut => Some(EventKind::JobTimedOut),
        JobState::Cancelled => None,
        _ => Some(EventKind::JobFailed),
    }
}

/// Tells a queue job's owner it started (a personal message only: the lab channel hears of
/// its booking).
fn started_notice(job: &JobToRun, booking: &Booking, now: DateTime<Utc>) -> Notice {
    Notice {
        event: None,
        at: now,
        text: format!(
            "queue job {} ({}) of {} started",
            job.job.id,
            job.job.title(),
            job.job.username
        ),
        details: serde_json::json!({
            "job_id": job.job.id, "name": job.job.title(), "booking_id": booking.id,
            "gpus": booking.gpus, "end": booking.end,
        }),
        to: None,
    }
    .to(job.job.user_id, EventKind::JobStarted)
}

fn how_it_ended(end: &JobEnd) -> String {
    match (end.exit_code, end.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => end.state.as_str().to_string(),
    }
}

/// What the runner does about one live job of its own this look, decided from what it read:
/// the job, its booking, whether a borrower holds the booking's cards (read only where
/// [`asks_borrowers`] says it matters) and whether this process watches its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing now (its slot has not started; or it runs and is watched: [`stop_step`]).
    Wait,
    /// Its slot started but a borrower holds the cards: take them back; the job starts once
    /// the borrower is gone (within the lending grace).
    Reclaim,
    /// Its slot started and the cards are free: start it.
    Launch,
    /// Its booking ended, was cancelled or is gone before it could start.
    NeverStarted,
    /// It runs, but no process of this run of the server watches it: it outlived a restart.
    Adopt,
}

/// Whether [`step`] needs to know if a borrower holds `booking`'s cards for `job`.
fn asks_borrowers(job: &JobToRun, booking: &Booking) -> bool {
    job.job.state == JobState::Queued && booking.state == BookingState::Active && booking.lend
}

fn step(job: &JobToRun, booking: Option<&Booking>, lent: bool, watched: bool) -> Step {
    match (job.job.state, booking.map(|b| b.state)) {
        (JobState::Queued, Some(BookingState::Active)) if lent => Step::Reclaim,
        (JobState::Queued, Some(BookingState::Active)) => Step::Launch,
        (JobState::Queued, Some(BookingState::Upcoming)) => Step::Wait,
        (JobState::Queued, _) => Step::NeverStarted,
        (JobState::Running, _) if !watched => Step::Adopt,
        _ => Step::Wait,
    }
}

/// Where a running job is in being stopped, decided from when it was asked to stop and why
/// (`stopping`), the reason it must stop now if any (`stop`), each reason's grace and the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopStep {
    /// It runs on.
    Run,
    /// Ask it to stop (SIGTERM) for this reason; SIGKILL follows after the grace.
    Term(StopReason),
    /// Its grace is over: SIGKILL.
    Kill,
    /// Asked already; SIGKILL at this moment if it is still there.
    KillAt(DateTime<Utc>),
}

fn stop_step(
    stopping: Option<&(DateTime<Utc>, StopReason)>,
    stop: Option<StopReason>,
    grace: impl Fn(StopReason) -> Duration,
    now: DateTime<Utc>,
) -> StopStep {
    match (stopping, stop) {
        (None, None) => StopStep::Run,
        (None, Some(reason)) => StopStep::Term(reason),
        (Some((since, why)), _) => {
            let grace = chrono::Duration::from_std(grace(*why)).unwrap_or_default();
            if now - *since >= grace {
                StopStep::Kill
            } else {
                StopStep::KillAt(*since + grace)
            }
        }
    }
}

/// Why a running job must stop now: it was cancelled, or its booking (for a queue job: its
/// time limit) is over. A cancel comes first: a queue job cancelled as it started has its
/// booking given back at once, and it was still cancelled, not timed out. A borrower's loan
/// that ended before its time limit was taken back: it is preempted.
fn stop_reason(
    booking: Option<&Booking>,
    job: &JobToRun,
    now: DateTime<Utc>,
) -> Option<StopReason> {
    let queued = job.job.queue.is_some();
    if job.cancel_requested {
        Some(StopReason::Cancelled)
    } else if job.preempt_requested && queued {
        // The queue needs its cards for a job of higher priority (least attained service).
        Some(StopReason::Preempted)
    } else if booking.is_none_or(|b| b.state != BookingState::Active) {
        let limit_reached = job
            .job
            .queue
            .zip(job.job.started_at)
            .is_some_and(|(q, started)| now - started >= chrono::Duration::seconds(q.time_limit_s));
        match booking {
            Some(b) if b.loan_of.is_some() && queued && !limit_reached => {
                Some(StopReason::Preempted)
            }
            _ => Some(slot_ended(queued)),
        }
    } else {
        None
    }
}

/// What one look read about a running job's stop, for its notice.
struct Plan {
    /// Why it must stop now, if it must.
    must: Option<StopReason>,
    /// When and why it stops if nothing changes.
    planned: Option<(DateTime<Utc>, StopReason)>,
    request: lanes_types::notice::NoticeRequest,
    /// A preemptible queue job (a reclaim sends it back to the queue).
    preemptible: bool,
    requeues: u32,
}

/// When and why a running job will be stopped if nothing changes: its time limit, or its
/// slot's end (a borrower's loan ending before its limit is a preemption, as
/// [`stop_reason`] says when it comes).
fn planned_stop(
    job: &JobToRun,
    booking: Option<&Booking>,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, StopReason)> {
    let b = booking.filter(|b| b.state == BookingState::Active)?;
    if job.job.state != JobState::Running {
        return None;
    }
    let queued = job.job.queue.is_some();
    let limit = job
        .job
        .queue
        .zip(job.job.started_at)
        .map(|(q, started)| started + chrono::Duration::seconds(q.time_limit_s));
    let planned = match limit {
        Some(limit) if limit <= b.end => (limit, StopReason::TimeLimit),
        _ if b.loan_of.is_some() && queued => (b.end, StopReason::Preempted),
        _ => (b.end, slot_ended(queued)),
    };
    (planned.0 > now).then_some(planned)
}

/// Why a job whose slot is over stops: a queue job reached its time limit, a booked job the
/// end of its booking.
fn slot_ended(queued: bool) -> StopReason {
    if queued {
        StopReason::TimeLimit
    } else {
        StopReason::BookingEnded
    }
}

/// A queue job stopped at its limit timed out, and one stopped on request was cancelled,
/// whatever signal ended it; other jobs keep the state their exit gave them.
fn queue_end(job: &JobToRun, end: &JobEnd) -> JobEnd {
    let mut end = end.clone();
    if job.job.queue.is_some() && matches!(end.state, JobState::Exited | JobState::Killed) {
        match end.note.as_ref().and_then(JobNote::stop_reason) {
            Some(StopReason::TimeLimit) => end.state = JobState::TimedOut,
            Some(StopReason::Cancelled) => end.state = JobState::Cancelled,
            _ => {}
        }
    }
    end
}

/// The earliest moment the runner must look again though nothing woke it; `None`: only an
/// event or an exit wakes it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct NextLook(Option<DateTime<Utc>>);

impl NextLook {
    fn at(&mut self, when: DateTime<Utc>) {
        self.0 = Some(self.0.map_or(when, |earlier| earlier.min(when)));
    }

    fn after(&mut self, now: DateTime<Utc>, wait: Duration) {
        self.at(now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX));
    }

    fn merge(&mut self, other: NextLook) {
        if let Some(when) = other.0 {
            self.at(when);
        }
    }

    /// Sleeps until the deadline (a moment past it, so the look finds it passed), or for ever.
    fn sleep(
        self,
        now: DateTime<Utc>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self.0 {
            Some(when) => {
                let wait = (when - now).to_std().unwrap_or_default() + Duration::from_millis(1);
                Box::pin(tokio::time::sleep(wait))
            }
            None => Box::pin(std::future::pending()),
        }
    }
}

/// When a live job's state changes by the clock alone: a waiting job's slot starts, a running
/// job's slot (or, for a queue job, its time limit) ends. Everything else that changes a job
/// comes as an event.
fn next_change(
    job: &JobToRun,
    booking: Option<&Booking>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let b = booking?;
    let when = match (job.job.state, b.state) {
        (JobState::Queued, BookingState::Upcoming) => b.start,
        (JobState::Running, BookingState::Active) => {
            let limit = job
                .job
                .queue
                .zip(job.job.started_at)
                .map(|(q, started)| started + chrono::Duration::seconds(q.time_limit_s));
            limit.map_or(b.end, |limit| limit.min(b.end))
        }
        _ => return None,
    };
    (when > now).then_some(when)
}

/// How soon to look again at what a job left running, `age` after its main process ended:
/// often at first (most of it exits on SIGTERM at once), then less, never less than every 2 s.
fn leftover_look(age: chrono::Duration) -> Duration {
    let quarter = (age / 4).to_std().unwrap_or_default();
    quarter.clamp(Duration::from_millis(50), Duration::from_secs(2))
}

fn ended(
    state: JobState,
    exit_code: Option<i64>,
    signal: Option<i64>,
    note: Option<JobNote>,
) -> JobEnd {
    JobEnd {
        state,
        exit_code,
        signal,
        note,
    }
}

#[cfg(test)]
mod tests {
    //! The runner's decisions that depend on the clock alone: why a job stops and when the
    //! runner must look again without being woken.
    use super::*;
    use lanes_types::job::{Job, QueueRequest};

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn job(state: JobState, queue: Option<QueueRequest>, started: Option<i64>) -> JobToRun {
        let job: Job = serde_json::from_value(serde_json::json!({
            "id": 7, "booking_id": 3, "user_id": 1, "username": "ada", "name": "",
            "argv": ["python3", "train.py"], "cwd": null, "state": state, "pid": null,
            "created_at": at(-100), "started_at": started.map(at), "ended_at": null,
            "exit_code": null, "signal": null, "message": "", "queue": queue,
        }))
        .unwrap();
        JobToRun {
            job,
            env: Default::default(),
            env_base: None,
            cgroup: None,
            log_dir: None,
            unix_user: None,
            cancel_requested: false,
            preempt_requested: false,
            pid_start: None,
            boot_id: None,
            stop_requested: None,
        }
    }

    fn booking(state: BookingState, start: i64, end: i64, loan_of: Option<i64>) -> Booking {
        serde_json::from_value(serde_json::json!({
            "id": 3, "user_id": 1, "username": "ada", "display_name": "Ada",
            "gpus": [{"node": "n1", "uuid": "GPU-1"}], "start": at(start), "end": at(end),
            "note": "", "state": state, "created_at": at(-200), "loan_of": loan_of,
        }))
        .unwrap()
    }

    fn queued(limit_s: i64) -> Option<QueueRequest> {
        Some(QueueRequest {
            gpus: 1,
            time_limit_s: limit_s,
            min_memory_bytes: None,
            preemptible: true,
            requeues: 0,
            attained_gpu_s: 0,
        })
    }

    fn lending(mut b: Booking) -> Booking {
        b.lend = true;
        b
    }

    #[test]
    fn a_waiting_job_starts_when_its_slot_does_and_not_before_or_after() {
        let waiting = job(JobState::Queued, None, None);
        let active = booking(BookingState::Active, -10, 600, None);
        assert_eq!(step(&waiting, Some(&active), false, false), Step::Launch);
        let upcoming = booking(BookingState::Upcoming, 60, 600, None);
        assert_eq!(step(&waiting, Some(&upcoming), false, false), Step::Wait);
        // A booking that ended, was cancelled or released first, or is gone: it never runs.
        for state in [
            BookingState::Ended,
            BookingState::Cancelled,
            BookingState::Released,
        ] {
            let over = booking(state, -600, -10, None);
            assert_eq!(
                step(&waiting, Some(&over), false, false),
                Step::NeverStarted
            );
        }
        assert_eq!(step(&waiting, None, false, false), Step::NeverStarted);
    }

    #[test]
    fn a_holders_job_takes_its_lent_cards_back_before_it_starts() {
        let waiting = job(JobState::Queued, None, None);
        let lent = lending(booking(BookingState::Active, -10, 600, None));
        // Only a waiting job on an active booking that lends asks whether a borrower is there.
        assert!(asks_borrowers(&waiting, &lent));
        assert!(!asks_borrowers(
            &waiting,
            &booking(BookingState::Active, -10, 600, None)
        ));
        assert!(!asks_borrowers(
            &job(JobState::Running, None, Some(-5)),
            &lent
        ));
        assert_eq!(step(&waiting, Some(&lent), true, false), Step::Reclaim);
        // The borrower gone, it starts.
        assert_eq!(step(&waiting, Some(&lent), false, false), Step::Launch);
    }

    #[test]
    fn a_running_job_nobody_watches_is_adopted_and_a_watched_one_left_to_its_stop() {
        let running = job(JobState::Running, None, Some(-60));
        let active = booking(BookingState::Active, -100, 600, None);
        assert_eq!(step(&running, Some(&active), false, false), Step::Adopt);
        assert_eq!(step(&running, Some(&active), false, true), Step::Wait);
        // Even after its slot ended: adopted first, then stopped like any other.
        let ended = booking(BookingState::Ended, -600, -10, None);
        assert_eq!(step(&running, Some(&ended), false, false), Step::Adopt);
        // Jobs that are over are not the runner's business any more.
        for state in [JobState::Exited, JobState::Cancelled, JobState::Failed] {
            assert_eq!(
                step(&job(state, None, Some(-60)), Some(&active), false, false),
                Step::Wait
            );
        }
    }

    #[test]
    fn a_job_told_to_stop_gets_sigterm_then_sigkill_after_its_reasons_grace() {
        let grace = |why: StopReason| {
            if why == StopReason::Preempted {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(10)
            }
        };
        assert_eq!(stop_step(None, None, grace, at(0)), StopStep::Run);
        assert_eq!(
            stop_step(None, Some(StopReason::Cancelled), grace, at(0)),
            StopStep::Term(StopReason::Cancelled)
        );
        // Asked at 0 for the slot's end: killed at 10 if still there, and not before.
        let asked = (at(0), slot_ended(false));
        assert_eq!(
            stop_step(Some(&asked), Some(slot_ended(false)), grace, at(4)),
            StopStep::KillAt(at(10))
        );
        assert_eq!(stop_step(Some(&asked), None, grace, at(10)), StopStep::Kill);
        // A borrower stopped for its lender has the lending grace.
        let preempted = (at(0), StopReason::Preempted);
        assert_eq!(
            stop_step(Some(&preempted), Some(StopReason::Preempted), grace, at(1)),
            StopStep::KillAt(at(3))
        );
        assert_eq!(
            stop_step(Some(&preempted), None, grace, at(3)),
            StopStep::Kill
        );
    }

    #[test]
    fn a_waiting_job_is_looked_at_again_when_its_slot_starts() {
        let waiting = job(JobState::Queued, None, None);
        let upcoming = booking(BookingState::Upcoming, 60, 600, None);
        assert_eq!(next_change(&waiting, Some(&upcoming), at(0)), Some(at(60)));
        // Once active it starts at once (no deadline of its own), and without a booking it
        // is cancelled at once.
        let active = booking(BookingState::Active, 0, 600, None);
        assert_eq!(next_change(&waiting, Some(&active), at(1)), None);
        assert_eq!(next_change(&waiting, None, at(1)), None);
    }

    #[test]
    fn a_running_job_is_looked_at_again_at_its_slots_end_or_its_time_limit() {
        let active = booking(BookingState::Active, 0, 600, None);
        let booked = job(JobState::Running, None, Some(10));
        assert_eq!(next_change(&booked, Some(&active), at(20)), Some(at(600)));
        let limited = job(JobState::Running, queued(120), Some(10));
        assert_eq!(next_change(&limited, Some(&active), at(20)), Some(at(130)));
        // A deadline already passed is no deadline: the look that saw it stops the job.
        assert_eq!(next_change(&booked, Some(&active), at(600)), None);
        let ended = booking(BookingState::Ended, 0, 600, None);
        assert_eq!(next_change(&booked, Some(&ended), at(700)), None);
    }

    #[test]
    fn a_job_stops_when_cancelled_first_then_at_its_slots_end() {
        let mut running = job(JobState::Running, None, Some(0));
        let active = booking(BookingState::Active, 0, 600, None);
        assert_eq!(stop_reason(Some(&active), &running, at(10)), None);
        let ended = booking(BookingState::Ended, 0, 600, None);
        assert_eq!(
            stop_reason(Some(&ended), &running, at(600)),
            Some(StopReason::BookingEnded)
        );
        assert_eq!(
            stop_reason(None, &running, at(10)),
            Some(StopReason::BookingEnded)
        );
        running.cancel_requested = true;
        assert_eq!(
            stop_reason(Some(&ended), &running, at(600)),
            Some(StopReason::Cancelled)
        );
        assert_eq!(
            stop_reason(Some(&active), &running, at(10)),
            Some(StopReason::Cancelled)
        );
    }

    #[test]
    fn a_borrower_is_preempted_when_its_loan_ends_before_its_time_limit() {
        let borrower = job(JobState::Running, queued(3600), Some(0));
        let loan_over = booking(BookingState::Released, 0, 100, Some(9));
        assert_eq!(
            stop_reason(Some(&loan_over), &borrower, at(100)),
            Some(StopReason::Preempted)
        );
        // At its time limit it timed out, whoever's cards it had.
        assert_eq!(
            stop_reason(Some(&loan_over), &borrower, at(3600)),
            Some(StopReason::TimeLimit)
        );
        let own = booking(BookingState::Ended, 0, 3600, None);
        assert_eq!(
            stop_reason(Some(&own), &borrower, at(3600)),
            Some(StopReason::TimeLimit)
        );
    }

    fn stopped(reason: StopReason) -> Option<JobNote> {
        Some(JobNote::Stopped {
            reason,
            exit_unknown: false,
        })
    }

    #[test]
    fn a_queue_job_stopped_at_its_limit_timed_out_and_one_cancelled_was_cancelled() {
        let queue_job = job(JobState::Running, queued(60), Some(0));
        let killed = ended(
            JobState::Killed,
            None,
            Some(15),
            stopped(StopReason::TimeLimit),
        );
        assert_eq!(queue_end(&queue_job, &killed).state, JobState::TimedOut);
        let cancelled = ended(
            JobState::Exited,
            Some(143),
            None,
            stopped(StopReason::Cancelled),
        );
        assert_eq!(queue_end(&queue_job, &cancelled).state, JobState::Cancelled);
        // A booked job keeps what its exit said.
        let booked = job(JobState::Running, None, Some(0));
        assert_eq!(queue_end(&booked, &killed).state, JobState::Killed);
    }

    #[test]
    fn the_next_look_is_the_earliest_deadline_and_none_without_one() {
        let mut next = NextLook::default();
        assert_eq!(next, NextLook(None));
        next.at(at(50));
        next.merge(NextLook(Some(at(20))));
        next.merge(NextLook(None));
        next.at(at(90));
        assert_eq!(next, NextLook(Some(at(20))));
        next.after(at(0), Duration::from_secs(5));
        assert_eq!(next, NextLook(Some(at(5))));
    }

    #[test]
    fn what_a_job_left_running_is_looked_at_often_at_first_then_less() {
        let ms = chrono::Duration::milliseconds;
        assert_eq!(leftover_look(ms(0)), Duration::from_millis(50));
        assert_eq!(leftover_look(ms(1000)), Duration::from_millis(250));
        assert_eq!(leftover_look(ms(60_000)), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_with_nothing_to_look_at_sleeps_until_woken() {
        let never = NextLook::default().sleep(at(0));
        // An hour of (paused, auto-advanced) time passes and the sleep has not ended.
        let waited = tokio::time::timeout(Duration::from_secs(3600), never).await;
        assert!(waited.is_err());
        let soon = NextLook(Some(at(10))).sleep(at(0));
        assert!(tokio::time::timeout(Duration::from_secs(11), soon)
            .await
            .is_ok());
    }
}
