//! The runner: starts each queued job when its booking becomes active, watches it, and stops
//! it (SIGTERM to its whole process group, then SIGKILL after a grace period) when the booking
//! ends, is released, or the job is cancelled. One task; it wakes on a timer and when a job is
//! submitted or cancelled.

use super::launch::{self, Launch};
use super::mask::{job_environment, DeviceMask, JobFacts};
use crate::store::{JobEnd, JobToRun, Store};
use crate::telemetry::hub::Hub;
use chrono::{DateTime, Utc};
use lanes_app::model::booking::{Booking, BookingState};
use lanes_app::model::job::JobState;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the runner looks even when nothing woke it (slot ends, grace periods, exits).
const TICK: Duration = Duration::from_millis(200);

#[derive(Clone, Debug)]
pub struct RunnerSettings {
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Jobs' logs go to `<jobs_dir>/<id>/{stdout,stderr}`.
    pub jobs_dir: PathBuf,
    pub node: String,
}

pub struct Runner {
    store: Store,
    hub: Arc<Hub>,
    settings: RunnerSettings,
    wake: Notify,
}

/// A job this runner started and still watches.
struct Watched {
    child: Child,
    /// When SIGTERM went to the group, and why.
    stopping: Option<(DateTime<Utc>, &'static str)>,
}

impl Runner {
    /// Starts the runner task; it ends when `shutdown` fires. Jobs keep running then.
    pub fn start(
        store: Store,
        hub: Arc<Hub>,
        settings: RunnerSettings,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let runner = Arc::new(Self {
            store,
            hub,
            settings,
            wake: Notify::new(),
        });
        let task = runner.clone();
        tokio::spawn(async move {
            let mut watched: HashMap<i64, Watched> = HashMap::new();
            loop {
                if let Err(e) = task.tick(&mut watched, Utc::now()).await {
                    tracing::error!(error = %e, "the job runner could not check its jobs");
                }
                tokio::select! {
                    _ = task.wake.notified() => {}
                    _ = tokio::time::sleep(TICK) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        });
        runner
    }

    /// Look now: a job was submitted or cancelled.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The files a job's output goes to.
    pub fn log_paths(&self, job_id: i64) -> (PathBuf, PathBuf) {
        let dir = self.settings.jobs_dir.join(job_id.to_string());
        (dir.join("stdout"), dir.join("stderr"))
    }

    async fn tick(
        &self,
        watched: &mut HashMap<i64, Watched>,
        now: DateTime<Utc>,
    ) -> Result<(), crate::store::StoreError> {
        // Why each running job must stop, if it must: read once per tick with the job itself.
        let mut stop_reasons: HashMap<i64, &'static str> = HashMap::new();
        for job in self.store.live_jobs().await? {
            let booking = self.store.booking(job.job.booking_id, now).await?;
            if job.job.state == JobState::Running {
                if let Some(reason) = stop_reason(booking.as_ref(), job.cancel_requested) {
                    stop_reasons.insert(job.job.id, reason);
                }
            }
            match (job.job.state, booking) {
                (JobState::Queued, Some(b)) if b.state == BookingState::Active => {
                    match self.launch(&job, &b) {
                        Ok(child) => {
                            self.store.job_started(job.job.id, child.id(), now).await?;
                            watched.insert(
                                job.job.id,
                                Watched {
                                    child,
                                    stopping: None,
                                },
                            );
                        }
                        Err(message) => {
                            let end = ended(JobState::Failed, None, None, message);
                            self.store.job_ended(job.job.id, &end, now).await?;
                        }
                    }
                }
                (JobState::Queued, Some(b)) if b.state == BookingState::Upcoming => {}
                (JobState::Queued, _) => {
                    let message = "its booking ended before it could start".to_string();
                    let end = ended(JobState::Cancelled, None, None, message);
                    self.store.job_ended(job.job.id, &end, now).await?;
                }
                (JobState::Running, _) if !watched.contains_key(&job.job.id) => {
                    // Started by an earlier run of the server: re-adopting such jobs is not
                    // built yet, so say so instead of pretending to enforce.
                    let message =
                        "lost: the server restarted while it ran (re-adoption is not built yet)"
                            .to_string();
                    let end = ended(JobState::Failed, None, None, message);
                    self.store.job_ended(job.job.id, &end, now).await?;
                }
                _ => {}
            }
        }
        let ids: Vec<i64> = watched.keys().copied().collect();
        for id in ids {
            self.watch(id, watched, stop_reasons.get(&id).copied(), now)
                .await?;
        }
        Ok(())
    }

    /// Records a job that ended, or stops one that must stop (`stop`, with the reason).
    async fn watch(
        &self,
        id: i64,
        watched: &mut HashMap<i64, Watched>,
        stop: Option<&'static str>,
        now: DateTime<Utc>,
    ) -> Result<(), crate::store::StoreError> {
        let Some(job) = watched.get_mut(&id) else {
            return Ok(());
        };
        if let Ok(Some(status)) = job.child.try_wait() {
            let reason = job.stopping.map(|(_, why)| why.to_string());
            let end = match (status.code(), status.signal()) {
                (Some(code), _) => ended(
                    JobState::Exited,
                    Some(code.into()),
                    None,
                    reason.unwrap_or_default(),
                ),
                (None, signal) => ended(
                    JobState::Killed,
                    None,
                    signal.map(i64::from),
                    reason.unwrap_or_else(|| "killed by a signal".into()),
                ),
            };
            self.store.job_ended(id, &end, now).await?;
            watched.remove(&id);
            return Ok(());
        }
        let pgid = Pid::from_raw(job.child.id() as i32);
        match job.stopping {
            None => {
                if let Some(reason) = stop {
                    tracing::info!(job = id, reason, "stopping a job");
                    let _ = killpg(pgid, Signal::SIGTERM);
                    job.stopping = Some((now, reason));
                }
            }
            Some((since, _)) => {
                let grace = chrono::Duration::from_std(self.settings.grace).unwrap_or_default();
                if now - since >= grace {
                    let _ = killpg(pgid, Signal::SIGKILL);
                }
            }
        }
        Ok(())
    }

    /// Starts a job under its booking's mask, as its user.
    fn launch(&self, job: &JobToRun, booking: &Booking) -> Result<Child, String> {
        let who = launch::identity(&job.job.username, job.unix_user.as_deref())
            .map_err(|e| e.to_string())?;
        let inventory: Vec<_> = self.hub.gpus().into_iter().map(|g| g.info).collect();
        let mask = DeviceMask::for_cards(&booking.gpus, &self.settings.node, &inventory)
            .map_err(|e| e.to_string())?;
        let facts = JobFacts {
            job_id: job.job.id,
            booking_end: booking.end,
            user: who.name(),
            home: who.home(),
        };
        let env = job_environment(&mask, &facts, &job.env).map_err(|e| e.to_string())?;
        let (stdout, stderr) = self.log_paths(job.job.id);
        if let Some(dir) = stdout.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot make the log directory: {e}"))?;
        }
        let cwd = job
            .job
            .cwd
            .clone()
            .unwrap_or_else(|| who.home().to_string());
        let cwd = if Path::new(&cwd).is_dir() {
            cwd
        } else {
            "/".into()
        };
        launch::spawn(&Launch {
            argv: &job.job.argv,
            cwd: Path::new(&cwd),
            env: &env,
            identity: &who,
            stdout: &stdout,
            stderr: &stderr,
        })
        .map_err(|e| e.to_string())
    }
}

/// Why a running job must stop now: its booking is no longer active, or it was cancelled.
fn stop_reason(booking: Option<&Booking>, cancel_requested: bool) -> Option<&'static str> {
    if booking.is_none_or(|b| b.state != BookingState::Active) {
        Some("stopped at the end of its booking")
    } else if cancel_requested {
        Some("cancelled")
    } else {
        None
    }
}

fn ended(state: JobState, exit_code: Option<i64>, signal: Option<i64>, message: String) -> JobEnd {
    JobEnd {
        state,
        exit_code,
        signal,
        message,
    }
}
