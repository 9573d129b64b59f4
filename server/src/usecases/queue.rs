//! Viewing the queue: everyone logged in sees who waits, for what and why; the commands and
//! messages of a job only its owner and admins.

use super::UseCaseError;
use crate::queue::{Explained, Queue};
use crate::store::Store;
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::GpuRef;
use lanes_types::job::{Job, QueueRequest};
use lanes_types::queue::{QueueState, QueueView, QueuedJob, WaitReason};

/// Ended jobs listed after the live ones.
const RECENT_ENDED: i64 = 50;

/// The queue as `viewer` sees it: running first, then waiting in the scheduler's order, then
/// the ended, newest first; with the settings and each user's fair-share standing.
pub async fn view(
    store: &Store,
    queue: &Queue,
    viewer: &User,
    now: DateTime<Utc>,
) -> Result<QueueView, UseCaseError> {
    let jobs = store.jobs().queued(RECENT_ENDED).await?;
    let snapshot = queue.snapshot();
    let mut views = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let mut cards = Vec::new();
        let mut borrowed_from = None;
        if let (Some(booking), false) = (job.booking_id, job.state.is_over()) {
            if let Some(b) = store.bookings().get(booking, now).await? {
                cards = b.gpus;
                borrowed_from = b.loan_of;
            }
        }
        let mut v = job_view(job, viewer, snapshot.waits.get(&job.id), &cards);
        v.borrowed_from = borrowed_from;
        if matches!(v.state, QueueState::Pending | QueueState::Requeued) && v.wait.is_none() {
            v.reason = Some(WaitReason::NextPass.to_string());
            v.wait = Some(WaitReason::NextPass);
        }
        views.push(v);
    }
    views.sort_by_key(|v| match v.state {
        QueueState::Running => (0, 0, v.id),
        QueueState::Pending | QueueState::Requeued => (1, v.position.unwrap_or(u32::MAX), v.id),
        _ => (2, 0, -v.id),
    });
    Ok(QueueView {
        settings: queue.settings(),
        jobs: views,
        standings: queue.standings(now).await?,
    })
}

/// A job as the queue shows it to `viewer`.
pub fn job_view(job: &Job, viewer: &User, wait: Option<&Explained>, cards: &[GpuRef]) -> QueuedJob {
    let request = job.queue.unwrap_or(QueueRequest {
        gpus: 0,
        time_limit_s: 0,
        min_memory_bytes: None,
        preemptible: false,
        requeues: 0,
        attained_gpu_s: 0,
    });
    let state = QueueState::of(job);
    let mine = job.user_id == viewer.id || viewer.is_admin();
    QueuedJob {
        id: job.id,
        username: job.username.clone(),
        name: job.name.clone(),
        argv: if mine { job.argv.clone() } else { Vec::new() },
        gpus: request.gpus,
        time_limit_s: request.time_limit_s,
        min_memory_bytes: request.min_memory_bytes,
        state,
        submitted_at: job.created_at,
        started_at: job.started_at,
        ended_at: job.ended_at,
        cards: cards.to_vec(),
        booking_id: job.booking_id,
        reason: wait.map(|w| w.reason.to_string()),
        wait: wait.map(|w| w.reason.clone()),
        estimated_start: wait.and_then(|w| w.estimated_start),
        position: wait.and_then(|w| w.position),
        preemptible: request.preemptible,
        requeues: request.requeues,
        borrowed_from: None,
        priority: wait.map(|w| w.priority),
        exit_code: job.exit_code,
        message: if mine {
            job.message.clone()
        } else {
            String::new()
        },
        note: job.note.clone().filter(|_| mine),
        notice: job.notice.clone().filter(|_| mine),
    }
}
