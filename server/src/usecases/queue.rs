//! Viewing the queue: everyone logged in sees who waits, for what and why; the commands and
//! messages of a job only its owner and admins.

use super::UseCaseError;
use crate::queue::{Explained, Queue};
use crate::store::Store;
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::GpuRef;
use lanes_types::job::{Job, QueueRequest};
use lanes_types::queue::{
    ForecastRequest, QueueForecast, QueueState, QueueView, QueuedJob, WaitReason,
};

/// When a job like `request` would likely start if `user` queued it now (checked as a
/// submission is), beside the earliest slot they could book for the same cards and time.
pub async fn forecast(
    store: &Store,
    queue: &Queue,
    user: &User,
    request: ForecastRequest,
    cards: &[lanes_types::GpuState],
    horizon_days: u32,
    now: DateTime<Utc>,
) -> Result<QueueForecast, UseCaseError> {
    let limit = super::jobs::queue_limit(
        &queue.settings(),
        request.gpus,
        request.time_limit_s,
        request.min_memory_bytes,
        cards,
    )?;
    super::jobs::within_own_limit(store, user, request.gpus).await?;
    let min_memory = request.min_memory_bytes.unwrap_or(0);
    let f = queue
        .forecast(user.id, request.gpus, limit, min_memory, now)
        .await?;
    // The earliest slot, if the caller could book one (the search's refusals, a quota too
    // small for instance, leave it out).
    let slot = super::bookings::find_slots(
        store,
        user,
        lanes_types::query::SlotQuery {
            gpus: request.gpus,
            duration: format!("{limit}s"),
            from: None,
            to: Some(now + chrono::Duration::days(i64::from(horizon_days))),
            node: None,
            min_memory: request.min_memory_bytes.map(|b| b.to_string()),
            limit: Some(1),
        },
        horizon_days,
        now,
    )
    .await;
    let earliest_booking = match slot {
        Ok(slots) => slots.into_iter().next(),
        Err(UseCaseError::Store(crate::store::StoreError::Refused(_))) => None,
        Err(UseCaseError::Store(e)) => return Err(UseCaseError::Store(e)),
        Err(_) => None,
    };
    Ok(QueueForecast {
        policy: f.policy,
        p50: f.p50,
        p90: f.p90,
        by_time_limits: f.by_time_limits,
        samples: f.samples,
        history: f.history,
        horizon_days: (crate::queue::FORECAST_HORIZON_S / 86_400) as u32,
        earliest_booking,
    })
}

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
        let (mut borrowed_from, mut lenders) = (None, Vec::new());
        if let (Some(booking), false) = (job.booking_id, job.state.is_over()) {
            if let Some(b) = store.bookings().get(booking, now).await? {
                cards = b.gpus;
                borrowed_from = b.loan_of;
                lenders = b.lenders;
            }
        }
        let mut v = job_view(job, viewer, snapshot.waits.get(&job.id), &cards);
        v.borrowed_from = borrowed_from;
        v.lenders = lenders;
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
        lenders: Vec::new(),
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
