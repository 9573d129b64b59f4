//! Job use cases: run a command on a booking's cards, or queue it for any free cards. Both check
//! the command the same way, and refuse now, not when the job's turn comes, what could never run
//! (an owner this host cannot run jobs as, a relative working directory, bad variables).

use super::Said;
use super::UseCaseError;
use crate::audit::AuditAction;
use crate::jobs::launch;
use crate::jobs::mask::check_extra_env;
use crate::queue::Queue;
use crate::store::{AuditEntry, JobPlace, NewJob, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::container::ContainerSpec;
use lanes_types::job::{CreateJob, EnvironmentBase, Job, QueueRequest, SessionKind};
use lanes_types::queue::{QueueSettings, SubmitJob};
use lanes_types::GpuState;
use std::collections::BTreeMap;

/// Most arguments, and longest argument, of a command.
const MAX_ARGS: usize = 1024;
const MAX_ARG_BYTES: usize = 64 * 1024;

/// What every job is, booked or queued, once checked.
struct Command {
    argv: Vec<String>,
    name: String,
    env: BTreeMap<String, String>,
    environment: Option<EnvironmentBase>,
    cwd: Option<String>,
    container: Option<ContainerSpec>,
    notice: Option<lanes_types::notice::NoticeRequest>,
    session: Option<SessionKind>,
}

/// Most variables, and most bytes of them all, a job's environment may be given.
const MAX_VARS: usize = 4096;
const MAX_ENV_BYTES: usize = 1 << 20;

impl Command {
    /// Checks what every job needs: a command, a short name, allowed extra variables, an
    /// absolute working directory if any, and an owner this host can run jobs as.
    fn check(
        owner: &User,
        argv: Vec<String>,
        name: Option<String>,
        env: Option<BTreeMap<String, String>>,
        environment: Option<EnvironmentBase>,
        cwd: Option<String>,
        container: Option<ContainerSpec>,
    ) -> Result<Self, UseCaseError> {
        let invalid = |e: &dyn std::fmt::Display| UseCaseError::Unprocessable(e.to_string().into());
        if let Some(spec) = &container {
            // What no host can run is refused now; what this node offers is known at start.
            spec.check().map_err(|e| invalid(&e))?;
        }
        if let Some(dir) = &cwd {
            launch::check_dir(dir).map_err(|e| invalid(&e))?;
        }
        launch::identity(&owner.username, owner.unix_user.as_deref()).map_err(|e| invalid(&e))?;
        if argv.is_empty() || argv[0].is_empty() {
            return Err(invalid(&"argv needs at least the command"));
        }
        if argv.len() > MAX_ARGS
            || argv
                .iter()
                .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
        {
            return Err(invalid(&format!(
                "argv may have at most {MAX_ARGS} arguments of at most {MAX_ARG_BYTES} bytes, without NUL"
            )));
        }
        let name = name.unwrap_or_default();
        if name.chars().count() > crate::accounts::MAX_TEXT {
            return Err(invalid(&"the name is too long"));
        }
        let env = env.unwrap_or_default();
        let given = match &environment {
            Some(EnvironmentBase::Given(vars)) => Some(vars),
            _ => None,
        };
        for vars in std::iter::once(&env).chain(given) {
            check_extra_env(vars).map_err(|e| invalid(&e))?;
            let bytes: usize = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
            if vars.len() > MAX_VARS
                || bytes > MAX_ENV_BYTES
                || vars.values().any(|v| v.contains('\0'))
            {
                return Err(invalid(&format!(
                    "an environment may have at most {MAX_VARS} variables and {MAX_ENV_BYTES} \
                     bytes, without NUL"
                )));
            }
        }
        Ok(Self {
            argv,
            name,
            env,
            environment,
            cwd,
            container,
            notice: None,
            session: None,
        })
    }

    /// What the job asks of its notice, within the admin's bound.
    fn with_notice(
        mut self,
        notice: Option<lanes_types::notice::NoticeRequest>,
        max_s: i64,
    ) -> Result<Self, UseCaseError> {
        if let Some(asked) = &notice {
            asked
                .check(max_s)
                .map_err(|e| UseCaseError::Unprocessable(e.into()))?;
        }
        self.notice = notice;
        Ok(self)
    }

    async fn create(
        &self,
        store: &Store,
        owner: &User,
        (place, project): (JobPlace, Option<&str>),
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Job, UseCaseError> {
        let new = NewJob {
            project,
            user_id: owner.id,
            name: &self.name,
            argv: &self.argv,
            cwd: self.cwd.as_deref(),
            env: &self.env,
            env_base: self.environment.as_ref(),
            container: self.container.as_ref(),
            notice: self.notice.as_ref(),
            session: self.session,
            place,
        };
        Ok(store.jobs().create(&new, audit, now).await?)
    }
}

/// Runs a command on the cards of one of `user`'s upcoming or active bookings. Jobs run as the
/// booking's owner, so only they may submit to it.
pub async fn submit_to_booking(
    store: &Store,
    user: &User,
    request: CreateJob,
    now: DateTime<Utc>,
) -> Result<Job, UseCaseError> {
    let booking = super::bookings::find(store, request.booking_id, now).await?;
    if booking.user_id != user.id {
        return Err(UseCaseError::Forbidden(Said::OnlyHolderSubmits));
    }
    let notice_max_s = match &request.notice {
        Some(_) => store.queue().settings().await?.notice_max_s,
        None => 0,
    };
    let (argv, name) = match request.session {
        None => (request.argv, request.name),
        Some(kind) => session_command(kind, &request)?,
    };
    let mut command = Command::check(
        user,
        argv,
        name,
        request.env,
        request.environment,
        request.cwd,
        request.container,
    )?
    .with_notice(request.notice, notice_max_s)?;
    command.session = request.session;
    if !booking.state.holds_cards() {
        return Err(UseCaseError::Unprocessable(Said::BookingOver));
    }
    if let Some(host) = booking.loan_of {
        tracing::debug!(
            booking = booking.id,
            host,
            "a job refused: the booking is a loan"
        );
        return Err(UseCaseError::Unprocessable(Said::BookingIsLoan));
    }
    // A job runs under one node's runner, on that node's cards.
    let mut nodes: Vec<&str> = booking.gpus.iter().map(|g| g.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.len() > 1 {
        return Err(UseCaseError::Unprocessable(
            format!(
                "the booking holds cards on {} nodes ({}); a job runs on one node, so book its \
             cards on one",
                nodes.len(),
                nodes.join(", ")
            )
            .into(),
        ));
    }
    let audit = AuditEntry::new(Some(user.id), AuditAction::JobSubmit, "").detail(format!(
        "booking {}: {}",
        booking.id,
        command.argv.join(" ")
    ));
    let job = command
        .create(
            store,
            user,
            (JobPlace::Booking(booking.id), None),
            audit,
            now,
        )
        .await?;
    // Its holder starts work: what the booking lends comes back (the job starts once the
    // borrowers are gone).
    if booking.lend {
        let audit = AuditEntry::new(Some(user.id), AuditAction::LoanReclaim, "")
            .detail(format!("job {} was submitted into it", job.id));
        store
            .lending()
            .reclaim_loans(booking.id, audit, now)
            .await?;
    }
    Ok(job)
}

/// What a session runs as, in words, and its name: its command line is the runner's to build
/// (where it listens, its base path and token are known only when it starts).
fn session_command(
    kind: SessionKind,
    request: &CreateJob,
) -> Result<(Vec<String>, Option<String>), UseCaseError> {
    if !request.argv.is_empty() {
        return Err(UseCaseError::Unprocessable(
            "a session's command is the portal's to build: leave argv empty".into(),
        ));
    }
    if request.container.is_some() {
        return Err(UseCaseError::Unprocessable(
            "a session runs in the member's login environment, not in a container".into(),
        ));
    }
    let (argv, name) = match kind {
        SessionKind::Jupyter => (vec!["jupyter".to_string()], "JupyterLab"),
    };
    Ok((
        argv,
        Some(request.name.clone().unwrap_or_else(|| name.into())),
    ))
}

/// The time limit of a queue job of `gpus` cards (each with `min_memory` bytes) asking for
/// `time_limit_s`, if the queue's `settings` and the pool (`cards`) allow it.
pub fn queue_limit(
    settings: &QueueSettings,
    gpus: u32,
    time_limit_s: Option<i64>,
    min_memory: Option<u64>,
    cards: &[GpuState],
) -> Result<i64, UseCaseError> {
    let limit = time_limit_s
        .or(settings.default_time_limit_s)
        .ok_or_else(|| UseCaseError::Unprocessable("time_limit_s is required".into()))?;
    if limit <= 0 || limit > settings.max_time_limit_s {
        return Err(UseCaseError::Unprocessable(Said::TimeLimit {
            max_s: settings.max_time_limit_s,
        }));
    }
    let min_memory = min_memory.unwrap_or(0);
    let eligible = cards
        .iter()
        .filter(|g| g.info.memory_total_bytes >= min_memory)
        .count();
    if gpus == 0 || gpus as usize > eligible {
        return Err(UseCaseError::Unprocessable(Said::QueueGpus {
            eligible,
            with_memory: min_memory > 0,
        }));
    }
    // A job runs on one node: wider than every node, it would wait forever.
    let mut by_node: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for g in cards
        .iter()
        .filter(|g| g.info.memory_total_bytes >= min_memory)
    {
        *by_node.entry(g.info.node.as_str()).or_default() += 1;
    }
    let largest = by_node.values().copied().max().unwrap_or(0);
    if gpus as usize > largest {
        return Err(UseCaseError::Unprocessable(Said::QueueNode {
            largest,
            with_memory: min_memory > 0,
        }));
    }
    Ok(limit)
}

/// Refuses a queue job wider than its member's limit of cards at once (their own, else the
/// default): the queue would keep it waiting forever.
pub(super) async fn within_own_limit(
    store: &Store,
    user: &User,
    gpus: u32,
) -> Result<(), UseCaseError> {
    let quotas = store.quotas().list().await?;
    let groups = store.accounts().groups_of(user.id).await?;
    let limits = crate::bookings::quota::personal_limits(&quotas, &user.username, &groups);
    match limits.max_gpus {
        Some(max) if gpus > max => Err(UseCaseError::Unprocessable(Said::QueueQuota { gpus, max })),
        _ => Ok(()),
    }
}

/// Queues a command for `gpus` cards of the pool (`cards`, as the hub sees them) for up to its
/// time limit, within the queue's `settings`.
pub async fn submit_to_queue(
    store: &Store,
    user: &User,
    request: SubmitJob,
    (settings, portal): (&QueueSettings, &lanes_types::account::PortalSettings),
    cards: &[GpuState],
    now: DateTime<Utc>,
) -> Result<Job, UseCaseError> {
    let project = match request.project.as_deref().filter(|p| !p.is_empty()) {
        Some(name) => Some(super::bookings::known_project(portal, name)?),
        None => None,
    };
    let command = Command::check(
        user,
        request.argv,
        request.name,
        request.env,
        request.environment,
        request.cwd,
        request.container,
    )?
    .with_notice(request.notice, settings.notice_max_s)?;
    let limit = queue_limit(
        settings,
        request.gpus,
        request.time_limit_s,
        request.min_memory_bytes,
        cards,
    )?;
    within_own_limit(store, user, request.gpus).await?;
    let queued = QueueRequest {
        gpus: request.gpus,
        time_limit_s: limit,
        min_memory_bytes: request.min_memory_bytes,
        preemptible: request.preemptible,
        requeues: 0,
        attained_gpu_s: 0,
    };
    let audit = AuditEntry::new(Some(user.id), AuditAction::QueueSubmit, "").detail(format!(
        "{} for up to {}{}: {}",
        lanes_types::units::cards(request.gpus),
        lanes_types::units::format_duration(chrono::Duration::seconds(limit)),
        if request.preemptible {
            ", preemptible"
        } else {
            ""
        },
        command.argv.join(" ")
    ));
    command
        .create(
            store,
            user,
            (JobPlace::Queue(queued), project.as_deref()),
            audit,
            now,
        )
        .await
}

/// The job, if `user` may see or change it: its owner or an admin.
pub async fn visible(store: &Store, user: &User, id: i64) -> Result<Job, UseCaseError> {
    let job = store
        .jobs()
        .get(id)
        .await?
        .ok_or(UseCaseError::NotFound(Said::NoSuchJob))?;
    if job.user_id != user.id && !user.is_admin() {
        return Err(UseCaseError::Forbidden(Said::NotYourJob));
    }
    Ok(job)
}

/// Which jobs a cancel may reach: any job, or only queue jobs (`DELETE /queue/{id}`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CancelScope {
    AnyJob,
    QueueJob,
}

/// Cancels a job for its owner or an admin: a waiting one at once, a running one through the
/// runner. Answers the job as it is after the request.
pub async fn cancel(
    store: &Store,
    queue: &Queue,
    user: &User,
    id: i64,
    scope: CancelScope,
) -> Result<Job, UseCaseError> {
    let job = visible(store, user, id).await?;
    let action = match scope {
        CancelScope::QueueJob if job.queue.is_none() => {
            return Err(UseCaseError::NotFound(Said::NoSuchQueueJob))
        }
        CancelScope::QueueJob => AuditAction::QueueCancel,
        CancelScope::AnyJob => AuditAction::JobCancel,
    };
    let audit = AuditEntry::new(Some(user.id), action, format!("job {id}"));
    if !queue.cancel(&job, &audit).await? {
        return Err(UseCaseError::Unprocessable(Said::JobOver));
    }
    visible(store, user, id).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::{GpuInfo, Health};

    fn card(node: &str, index: u32, memory: u64) -> GpuState {
        GpuState {
            info: GpuInfo {
                node: node.into(),
                uuid: format!("GPU-{node}-{index}"),
                index,
                name: "Simulated H100".into(),
                pci_bus_id: String::new(),
                memory_total_bytes: memory,
            },
            health: Health::Ok,
            sample: None,
            processes: Vec::new(),
            idle_booking: None,
            unmanaged: false,
            condition: Default::default(),
            counters: None,
        }
    }

    #[test]
    fn a_queue_job_wider_than_every_node_is_refused_naming_the_largest() {
        let settings = QueueSettings::default();
        // Eight cards in all, but no node has more than four (two of them large).
        let mut cards: Vec<GpuState> = (0..4).map(|i| card("a", i, 80 << 30)).collect();
        cards.extend((0..4).map(|i| card("b", i, if i < 2 { 80 << 30 } else { 40 << 30 })));
        assert!(queue_limit(&settings, 4, Some(60), None, &cards).is_ok());
        let refused = queue_limit(&settings, 6, Some(60), None, &cards).unwrap_err();
        assert!(
            matches!(
                &refused,
                UseCaseError::Unprocessable(Said::QueueNode {
                    largest: 4,
                    with_memory: false
                })
            ),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("the largest node has 4"),
            "{refused}"
        );
        // With a memory floor, only the cards that have it count, node by node.
        let refused = queue_limit(&settings, 5, Some(60), Some(80 << 30), &cards).unwrap_err();
        assert!(
            matches!(
                refused,
                UseCaseError::Unprocessable(Said::QueueNode {
                    largest: 4,
                    with_memory: true
                })
            ),
            "{refused:?}"
        );
        assert!(queue_limit(&settings, 4, Some(60), Some(80 << 30), &cards).is_ok());
    }
}
