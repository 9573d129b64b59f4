//! SQL of jobs.

use super::sql::Stamp;
use super::{insert_audit, AuditEntry, StoreError};
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::coded::Coded;
use lanes_types::container::ContainerSpec;
use lanes_types::job::{
    EnvironmentBase, Job, JobNote, JobState, QueueRequest, SessionKind, StartedIn, StopReason,
};
use std::collections::BTreeMap;

repository!(
    /// Jobs as people asked for them: created, queued, listed, cancelled.
    Jobs, jobs
);

/// A job as the runner needs it: the record and what it takes to start it.
#[derive(Clone, Debug)]
pub struct JobToRun {
    pub job: Job,
    pub env: BTreeMap<String, String>,
    /// What its environment starts from; the admin's default when the request did not say.
    pub env_base: Option<EnvironmentBase>,
    /// Its cgroup, once made (behind the device wall).
    pub cgroup: Option<String>,
    pub unix_user: Option<String>,
    /// A cancel was asked for while it ran.
    pub cancel_requested: bool,
    /// The queue asked to preempt it for a waiting job (it goes back to the queue).
    pub preempt_requested: bool,
    /// Start time of its process (clock ticks since boot) and that boot's id: with the pid they
    /// name the process for good, so a restarted server can re-adopt it.
    pub pid_start: Option<u64>,
    pub boot_id: Option<String>,
    /// When SIGTERM went to its group, and why.
    pub stop_requested: Option<(DateTime<Utc>, StopReason)>,
    /// Its log directory's name, once made: unique to this run of the job (its container is
    /// named after it).
    pub log_dir: Option<String>,
}

impl JobToRun {
    /// The container it runs in, if it asked for one.
    pub fn container(&self) -> Option<&ContainerSpec> {
        self.job.container.as_ref()
    }
}

/// A job to record: what runs, for whom, and where it waits.
#[derive(Clone, Debug)]
pub struct NewJob<'a> {
    pub user_id: i64,
    pub name: &'a str,
    pub argv: &'a [String],
    pub cwd: Option<&'a str>,
    pub env: &'a BTreeMap<String, String>,
    pub env_base: Option<&'a EnvironmentBase>,
    pub container: Option<&'a ContainerSpec>,
    pub notice: Option<&'a lanes_types::notice::NoticeRequest>,
    pub session: Option<SessionKind>,
    /// A queue job's project.
    pub project: Option<&'a str>,
    pub place: JobPlace,
}

/// A member's shell joining their booking: what [`Jobs::open_shell`] records.
#[derive(Clone, Copy, Debug)]
pub struct NewShell<'a> {
    pub booking_id: i64,
    pub user_id: i64,
    /// The login shell it becomes.
    pub shell: &'a str,
    pub cwd: &'a str,
    pub process: &'a JobProcess,
    /// [`StartedIn::Shell`], coded.
    pub environment: &'a str,
    pub device_wall: &'a str,
    pub cgroup: Option<&'a str>,
    pub log_dir: &'a str,
}

/// Where a new job waits: for its booking to start, or in the queue for cards.
#[derive(Clone, Copy, Debug)]
pub enum JobPlace {
    Booking(i64),
    Queue(QueueRequest),
}

/// What identifies a started job's process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobProcess {
    pub pid: u32,
    pub start_ticks: u64,
    pub boot_id: String,
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    pub state: JobState,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub note: Option<JobNote>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    booking_id: Option<i64>,
    user_id: i64,
    username: String,
    name: String,
    argv: String,
    cwd: Option<String>,
    env: String,
    state: String,
    pid: Option<i64>,
    created_at: Stamp,
    started_at: Option<Stamp>,
    ended_at: Option<Stamp>,
    exit_code: Option<i64>,
    signal: Option<i64>,
    message: String,
    unix_user: Option<String>,
    cancel_requested: i64,
    pid_start: Option<i64>,
    boot_id: Option<String>,
    stop_requested_ms: Option<i64>,
    stop_reason: Option<String>,
    peak_memory_bytes: Option<i64>,
    gpus: Option<i64>,
    time_limit_s: Option<i64>,
    min_memory_bytes: Option<i64>,
    preemptible: i64,
    requeues: i64,
    env_base: Option<String>,
    environment: Option<String>,
    device_wall: Option<String>,
    cgroup: Option<String>,
    cpu_time_ms: Option<i64>,
    peak_host_memory_bytes: Option<i64>,
    container: Option<String>,
    log_dir: Option<String>,
    notice_request: Option<String>,
    notice: Option<String>,
    attained_gpu_s: i64,
    preempt_requested_ms: Option<i64>,
    session: Option<String>,
    project: Option<String>,
}

impl Row {
    fn into_run(self) -> Result<JobToRun, StoreError> {
        let bad = |e: String| super::unreadable(e);
        let note = JobNote::of(&self.message);
        let started_in = self.environment.as_deref().map(StartedIn::read);
        Ok(JobToRun {
            env: serde_json::from_str(&self.env).map_err(|e| bad(e.to_string()))?,
            env_base: self
                .env_base
                .map(|b| serde_json::from_str(&b))
                .transpose()
                .map_err(|e| bad(e.to_string()))?,
            cgroup: self.cgroup,
            log_dir: self.log_dir,
            unix_user: self.unix_user,
            cancel_requested: self.cancel_requested != 0,
            preempt_requested: self.preempt_requested_ms.is_some(),
            pid_start: self.pid_start.map(|t| t as u64),
            boot_id: self.boot_id,
            stop_requested: self
                .stop_requested_ms
                .and_then(DateTime::from_timestamp_millis)
                .map(|at| {
                    let why = self.stop_reason.as_deref().and_then(StopReason::parse);
                    // Asked to stop by a Lanes whose reason this one cannot read: its grace
                    // is the runner's, as for a booking's end.
                    (at, why.unwrap_or(StopReason::BookingEnded))
                }),
            job: Job {
                id: self.id,
                booking_id: self.booking_id,
                user_id: self.user_id,
                username: self.username,
                name: self.name,
                argv: serde_json::from_str(&self.argv).map_err(|e| bad(e.to_string()))?,
                cwd: self.cwd,
                state: self.state.parse().map_err(bad)?,
                pid: self.pid,
                created_at: self.created_at.0,
                started_at: self.started_at.map(|s| s.0),
                ended_at: self.ended_at.map(|s| s.0),
                exit_code: self.exit_code,
                signal: self.signal,
                message: note.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                note,
                peak_memory_bytes: self.peak_memory_bytes.map(|b| b as u64),
                environment: started_in.as_ref().map(|e| e.to_string()),
                started_in,
                device_wall: self.device_wall,
                cpu_time_ms: self.cpu_time_ms.map(|t| t as u64),
                peak_host_memory_bytes: self.peak_host_memory_bytes.map(|b| b as u64),
                container: self
                    .container
                    .map(|c| serde_json::from_str(&c))
                    .transpose()
                    .map_err(|e| bad(e.to_string()))?,
                notice_request: self
                    .notice_request
                    .map(|n| serde_json::from_str(&n))
                    .transpose()
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default(),
                // A notice this Lanes cannot read is no notice: it is given again.
                notice: self.notice.and_then(|n| serde_json::from_str(&n).ok()),
                session: self.session.as_deref().and_then(SessionKind::parse),
                project: self.project,
                queue: match (self.gpus, self.time_limit_s) {
                    (Some(gpus), Some(time_limit_s)) => Some(QueueRequest {
                        gpus: gpus as u32,
                        time_limit_s,
                        min_memory_bytes: self.min_memory_bytes.map(|b| b as u64),
                        preemptible: self.preemptible != 0,
                        requeues: self.requeues.max(0) as u32,
                        attained_gpu_s: self.attained_gpu_s.max(0) as u64,
                    }),
                    _ => None,
                },
            },
        })
    }
}

fn jobs_of(rows: Vec<Row>) -> Result<Vec<Job>, StoreError> {
    rows.into_iter()
        .map(|r| r.into_run().map(|r| r.job))
        .collect()
}

const SELECT: &str = "SELECT j.id, j.booking_id, j.user_id, u.username, j.name, j.argv, j.cwd,
        j.env, j.state, j.pid, j.created_at, j.started_at, j.ended_at, j.exit_code, j.signal,
        j.message, u.unix_user, j.cancel_requested, j.pid_start, j.boot_id, j.stop_requested_ms,
        j.stop_reason, j.peak_memory_bytes, j.gpus, j.time_limit_s, j.min_memory_bytes,
        j.preemptible, j.requeues, j.env_base, j.environment, j.device_wall, j.cgroup, j.cpu_time_ms, j.peak_host_memory_bytes, j.container, j.log_dir,
        j.notice_request, j.notice, j.attained_gpu_s, j.preempt_requested_ms, j.session, j.project
    FROM jobs j JOIN users u ON u.id = j.user_id";

impl Jobs<'_> {
    /// Records a job: one for a booking waits for the runner, a queue job for the scheduler.
    pub async fn create(
        &self,
        new: &NewJob<'_>,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Job, StoreError> {
        let (booking_id, state, queue) = match &new.place {
            JobPlace::Booking(id) => (Some(*id), JobState::Queued, None),
            JobPlace::Queue(request) => (None, JobState::Pending, Some(request)),
        };
        let mut tx = self.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO jobs (booking_id, user_id, name, argv, cwd, env, state, gpus,
                               time_limit_s, min_memory_bytes, created_at, env_base, preemptible,
                               container, notice_request, session, project)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
             RETURNING id",
        )
        .bind(booking_id)
        .bind(new.user_id)
        .bind(new.name)
        .bind(serde_json::to_string(new.argv).unwrap_or_default())
        .bind(new.cwd)
        .bind(serde_json::to_string(new.env).unwrap_or_default())
        .bind(state.as_str())
        .bind(queue.map(|q| i64::from(q.gpus)))
        .bind(queue.map(|q| q.time_limit_s))
        .bind(queue.and_then(|q| q.min_memory_bytes).map(|b| b as i64))
        .bind(Stamp(now))
        .bind(
            new.env_base
                .map(|b| serde_json::to_string(b).unwrap_or_default()),
        )
        .bind(super::sql::flag(queue.is_some_and(|q| q.preemptible)))
        .bind(
            new.container
                .map(|c| serde_json::to_string(c).unwrap_or_default()),
        )
        .bind(
            new.notice
                .filter(|n| !n.is_empty())
                .map(|n| serde_json::to_string(n).unwrap_or_default()),
        )
        .bind(new.session.map(SessionKind::as_str))
        .bind(new.project)
        .fetch_one(&mut *tx)
        .await?;
        let audit = AuditEntry {
            target: format!("job {id}"),
            ..audit
        };
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        // Read back before telling the runner and the queue: the answer is the job as it was
        // submitted, not as they may have moved it a moment later.
        let job = self
            .get(id)
            .await?
            .ok_or(StoreError::Invalid("the job vanished".into()))?;
        self.emit(match queue {
            Some(_) => Event::QueueChanged(Change::QueueSubmitted),
            None => Event::JobsChanged(Change::JobSubmitted),
        });
        Ok(job)
    }

    /// Records a member's shell that joined their booking (`lanes shell`) as a job already
    /// running: its process, cgroup and log directory are there before the record is, so the
    /// runner first sees it running and adopts it as it adopts a job that outlived a restart.
    pub async fn open_shell(
        &self,
        shell: &NewShell<'_>,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        let mut tx = self.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO jobs (booking_id, user_id, name, argv, cwd, env, state, created_at,
                               started_at, pid, pid_start, boot_id, env_base, environment,
                               device_wall, cgroup, log_dir, preemptible)
             VALUES ($1, $2, 'shell', $3, $4, '{}', 'running', $5, $5, $6, $7, $8, $9, $10,
                     $11, $12, $13, $14)
             RETURNING id",
        )
        .bind(shell.booking_id)
        .bind(shell.user_id)
        .bind(serde_json::to_string(&[shell.shell]).unwrap_or_default())
        .bind(shell.cwd)
        .bind(Stamp(now))
        .bind(i64::from(shell.process.pid))
        .bind(shell.process.start_ticks as i64)
        .bind(&shell.process.boot_id)
        .bind(serde_json::to_string(&EnvironmentBase::Login).unwrap_or_default())
        .bind(shell.environment)
        .bind(shell.device_wall)
        .bind(shell.cgroup)
        .bind(shell.log_dir)
        .bind(super::sql::flag(false))
        .fetch_one(&mut *tx)
        .await?;
        let audit = AuditEntry {
            target: format!("job {id}"),
            ..audit
        };
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.emit(Event::JobsChanged(Change::JobSubmitted));
        self.emit(Event::WatchChanged(Change::JobRunning));
        Ok(id)
    }

    /// Queue jobs that wait for cards, oldest first.
    pub async fn waiting_for_cards(&self) -> Result<Vec<Job>, StoreError> {
        let rows: Vec<Row> =
            sqlx::query_as(&format!("{SELECT} WHERE j.state = 'pending' ORDER BY j.id"))
                .fetch_all(&self.pool)
                .await?;
        jobs_of(rows)
    }

    /// Queue jobs that wait or run, and the `ended` latest that are over.
    pub async fn queued(&self, ended: i64) -> Result<Vec<Job>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{SELECT} WHERE j.gpus IS NOT NULL AND j.state IN ('pending', 'queued', 'running')
             UNION ALL
             SELECT * FROM ({SELECT} WHERE j.gpus IS NOT NULL
                 AND j.state NOT IN ('pending', 'queued', 'running')
                 ORDER BY j.id DESC LIMIT $1) AS ended"
        ))
        .bind(ended)
        .fetch_all(&self.pool)
        .await?;
        jobs_of(rows)
    }

    /// How long the last `limit` queue jobs that ran and ended ran, with their time limits, in
    /// seconds: what start-time forecasts draw run times from.
    pub async fn run_times(&self, limit: i64) -> Result<Vec<(i64, i64)>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{SELECT} WHERE j.gpus IS NOT NULL AND j.started_at IS NOT NULL
                 AND j.ended_at IS NOT NULL
             ORDER BY j.id DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(jobs_of(rows)?
            .into_iter()
            .filter_map(|j| {
                let ran = (j.ended_at? - j.started_at?).num_seconds();
                Some((ran, j.queue?.time_limit_s))
            })
            .collect())
    }

    /// Gives a pending queue job the booking the scheduler made for it; `false` if the job is
    /// no longer pending (cancelled meanwhile).
    pub async fn start_queued(&self, id: i64, booking_id: i64) -> Result<bool, StoreError> {
        let started = sqlx::query(
            "UPDATE jobs SET booking_id = $2, state = 'queued' WHERE id = $1 AND state = 'pending'",
        )
        .bind(id)
        .bind(booking_id)
        .execute(&self.pool)
        .await?
        .rows_affected()
            > 0;
        if started {
            self.emit(Event::JobsChanged(Change::JobStarted));
        }
        Ok(started)
    }

    pub async fn get(&self, id: i64) -> Result<Option<Job>, StoreError> {
        let row: Option<Row> = sqlx::query_as(&format!("{SELECT} WHERE j.id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(Row::into_run).transpose()?.map(|r| r.job))
    }

    /// Jobs, newest first, of a booking and/or a user.
    pub async fn list(
        &self,
        booking_id: Option<i64>,
        user_id: Option<i64>,
    ) -> Result<Vec<Job>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{SELECT} WHERE ($1 IS NULL OR j.booking_id = $1) AND ($2 IS NULL OR j.user_id = $2)
             ORDER BY j.id DESC LIMIT 500"
        ))
        .bind(booking_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        jobs_of(rows)
    }

    /// Jobs the runner has to look at: queued or running, with what it takes to start them.
    pub async fn live(&self) -> Result<Vec<JobToRun>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{SELECT} WHERE j.state IN ('queued', 'running') ORDER BY j.id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Row::into_run).collect()
    }

    /// The queue job whose cards a booking holds, if it is one's.
    pub async fn queued_of_booking(&self, booking_id: i64) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM jobs WHERE booking_id = $1 AND gpus IS NOT NULL ORDER BY id LIMIT 1",
        )
        .bind(booking_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Asks for a job to be cancelled: a queued one is cancelled at once, a running one is
    /// stopped by the runner. `false` when the job is already over.
    pub async fn request_cancel(
        &self,
        id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let changed = sqlx::query(
            "UPDATE jobs SET
                cancel_requested = 1,
                state = CASE WHEN state IN ('pending', 'queued') THEN 'cancelled' ELSE state END,
                ended_at = CASE WHEN state IN ('pending', 'queued') THEN $2 ELSE ended_at END,
                message = CASE WHEN state IN ('pending', 'queued') THEN $3
                               ELSE message END
             WHERE id = $1 AND state IN ('pending', 'queued', 'running')",
        )
        .bind(id)
        .bind(Stamp(now))
        .bind(JobNote::CancelledBeforeStart.code())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if changed {
            insert_audit(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        if changed {
            // A waiting queue job leaves the queue; a running one is the runner's to stop.
            self.emit(Event::QueueChanged(Change::JobCancelled));
            self.emit(Event::JobsChanged(Change::JobCancelled));
        }
        Ok(changed)
    }

    /// Asks the runner to preempt a running preemptible queue job for a waiting one of higher
    /// priority: it gets notice, is stopped and goes back to the queue. `false` when it is not
    /// running, not preemptible, or already asked.
    pub async fn request_preempt(
        &self,
        id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let changed = sqlx::query(
            "UPDATE jobs SET preempt_requested_ms = $2
             WHERE id = $1 AND state = 'running' AND preemptible = 1
               AND preempt_requested_ms IS NULL AND cancel_requested = 0",
        )
        .bind(id)
        .bind(now.timestamp_millis())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if changed {
            insert_audit(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        if changed {
            self.emit(Event::JobsChanged(Change::JobPreempted));
        }
        Ok(changed)
    }
}
