//! SQL of what the runner records of a job as it runs: start, wall, usage, end.

use super::jobs::*;
use super::sql::Stamp;
use super::StoreError;
use crate::runtime::events::{Change, Event};
use chrono::{DateTime, Utc};
use lanes_types::coded::Coded;

repository!(
    /// What the runner records of a job as it runs: start, wall, usage, end.
    Runs, runs
);

impl Runs<'_> {
    /// Records that a queued job's process started; `false` when the job was cancelled since
    /// it was read (then it did not start, as far as anyone can see).
    pub async fn started(
        &self,
        id: i64,
        process: &JobProcess,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        // Only a job still waiting starts: one cancelled since the runner read it is not
        // recorded as running (the runner stops what it spawned).
        let started = sqlx::query(
            "UPDATE jobs SET state = 'running', pid = $2, pid_start = $3, boot_id = $4,
                started_at = $5
             WHERE id = $1 AND state = 'queued'",
        )
        .bind(id)
        .bind(i64::from(process.pid))
        .bind(process.start_ticks as i64)
        .bind(&process.boot_id)
        .bind(Stamp(now))
        .execute(&self.pool)
        .await?;
        let started = started.rows_affected() > 0;
        if started {
            // The watchdog knows a job's processes by its pid.
            self.emit(Event::WatchChanged(Change::JobRunning));
        }
        Ok(started)
    }

    /// Names the directory made for a job's logs (under the jobs dir), before it starts.
    pub async fn set_log_dir(&self, id: i64, dir: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET log_dir = $2 WHERE id = $1")
            .bind(id)
            .bind(dir)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records the device wall a job is about to start behind, and its cgroup (before its
    /// process exists, so that a server that dies meanwhile can still find what is left).
    pub async fn walled(
        &self,
        id: i64,
        device_wall: &str,
        cgroup: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET device_wall = $2, cgroup = $3 WHERE id = $1")
            .bind(id)
            .bind(device_wall)
            .bind(cgroup)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records the environment a job started with, in words.
    pub async fn set_environment(&self, id: i64, environment: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET environment = $2 WHERE id = $1")
            .bind(id)
            .bind(environment)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records what a job's cgroup counted, once all its processes are gone.
    pub async fn record_usage(
        &self,
        id: i64,
        cpu_time_ms: Option<u64>,
        peak_host_memory_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET cpu_time_ms = $2, peak_host_memory_bytes = $3 WHERE id = $1")
            .bind(id)
            .bind(cpu_time_ms.map(|t| t as i64))
            .bind(peak_host_memory_bytes.map(|b| b as i64))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The directory of a job's logs, under the jobs dir; `None` before it started.
    pub async fn log_dir(&self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar::<_, Option<String>>("SELECT log_dir FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .flatten(),
        )
    }

    /// Records that SIGTERM went to a job's group, so that a restarted server keeps counting
    /// the grace period from then.
    pub async fn stopping(
        &self,
        id: i64,
        at: DateTime<Utc>,
        reason: lanes_types::job::StopReason,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET stop_requested_ms = $2, stop_reason = $3 WHERE id = $1")
            .bind(id)
            .bind(at.timestamp_millis())
            .bind(reason.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records the notice a running job was given (its file written, its signal sent), so
    /// that a restarted server neither tells it twice nor forgets the stop it promised.
    pub async fn noticed(
        &self,
        id: i64,
        notice: &lanes_types::notice::JobNotice,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET notice = $2 WHERE id = $1 AND state = 'running'")
            .bind(id)
            .bind(serde_json::to_string(notice).unwrap_or_default())
            .execute(&self.pool)
            .await?;
        self.emit(Event::JobsChanged(Change::JobNoticed));
        Ok(())
    }

    /// Forgets a running job's notice: its stop moved (it is told again for the new one).
    pub async fn withdraw_notice(&self, id: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET notice = NULL WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        self.emit(Event::JobsChanged(Change::JobNoticed));
        Ok(())
    }

    /// Raises a job's recorded peak GPU memory to `bytes` if that is more.
    pub async fn peak_memory(&self, id: i64, bytes: u64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET peak_memory_bytes = $2
             WHERE id = $1 AND (peak_memory_bytes IS NULL OR peak_memory_bytes < $2)",
        )
        .bind(id)
        .bind(bytes as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn ended(&self, id: i64, end: &JobEnd, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = $2, exit_code = $3, signal = $4, message = $5, ended_at = $6
             WHERE id = $1",
        )
        .bind(id)
        .bind(end.state.as_str())
        .bind(end.exit_code)
        .bind(end.signal)
        .bind(end.note.as_ref().map(Coded::code).unwrap_or_default())
        .bind(Stamp(now))
        .execute(&self.pool)
        .await?;
        self.emit(Event::CardsChanged(Change::JobEnded));
        Ok(())
    }
}
