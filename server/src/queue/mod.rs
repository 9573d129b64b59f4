//! The job queue: one task that runs a scheduling pass whenever the store says cards or the
//! queue changed (see [`crate::runtime::events`]: a job ended, a booking changed, a job was submitted or
//! cancelled) and at the next moment a booking ends. A job it starts gets a booking on its cards from now to its time
//! limit; the runner then starts it like any booked job and stops it at the limit, and its
//! booking is released when it ends.

pub mod inputs;

use crate::audit::AuditAction;
use crate::bookings::quota::personal_limits;
use crate::bookings::{CardChoice, NewBooking};
use crate::runtime::events::Event;
use crate::store::{AuditEntry, Store, StoreError};
use crate::telemetry::hub::Hub;
use chrono::{DateTime, Utc};
use inputs::{Member, PoolCard};
use lanes_scheduling::scheduler::{self, Pass, Plan, Time};
use lanes_types::booking::GpuRef;
use lanes_types::job::Job;
use lanes_types::queue::{booking_note, QueueSettings, Shares, Standing, MAX_TIME_LIMIT_S};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Longest sleep between passes when no event comes and no booking starts or ends (waiting
/// ages priorities).
pub const IDLE: Duration = Duration::from_secs(5);
/// The sleep of a pass that found nothing waiting: no deadline, only events wake the queue
/// (tokio's sleep takes a duration past its clock's range as "never").
const UNTIL_AN_EVENT: Duration = Duration::MAX;
/// How fresh the reasons and estimates shown for waiting jobs are kept.
const EXPLAIN_EVERY: Duration = Duration::from_secs(1);
/// How far back fair share looks, in half-lives (2^-10: what is older no longer counts).
const HALF_LIVES_KEPT: i64 = 10;

/// Why a waiting job waits, as the last pass saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Explained {
    /// 1 = considered next; `None` for jobs the scheduler does not consider.
    pub position: Option<u32>,
    pub reason: scheduler::WaitReason,
    pub estimated_start: Option<DateTime<Utc>>,
    pub priority: f64,
}

/// Why each waiting job waits, as the last explained pass saw it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub waits: HashMap<i64, Explained>,
}

pub struct Queue {
    store: Store,
    hub: Arc<Hub>,
    /// Counts finished passes, so a test can wait for the pass an event caused.
    passes: watch::Sender<u64>,
    /// Passes on request (a test's "run the queue now").
    requests: crate::runtime::tasks::Passes,
    settings: RwLock<QueueSettings>,
    shares: RwLock<Shares>,
    snapshot: RwLock<Snapshot>,
    clock: crate::runtime::clock::Clock,
    /// One forecast at a time: its replays take a core while they run, and any member may ask.
    forecasting: tokio::sync::Semaphore,
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = value;
}

impl Queue {
    /// Starts the queue task. It runs a pass when the store announces a change that concerns
    /// it and, while jobs wait, just after the next start or end of a booking and at least
    /// every `idle` (waiting ages priorities). With nothing waiting it sleeps until an event.
    ///
    /// With several nodes, every instance runs passes (each shows why jobs wait), but only the
    /// one that `leader` says leads starts jobs, so one pass at a time decides for the pool.
    pub async fn start(
        store: Store,
        hub: Arc<Hub>,
        idle: Duration,
        leader: watch::Receiver<bool>,
        clock: crate::runtime::clock::Clock,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, StoreError> {
        let queue = Arc::new(Self {
            settings: RwLock::new(store.queue().settings().await?),
            shares: RwLock::new(store.queue().shares().await?),
            store,
            hub,
            passes: watch::Sender::new(0),
            requests: crate::runtime::tasks::Passes::default(),
            snapshot: RwLock::default(),
            clock,
            forecasting: tokio::sync::Semaphore::new(1),
        });
        let task = queue.clone();
        crate::runtime::tasks::supervise("queue", shutdown.clone(), move || {
            let task = task.clone();
            let shutdown = shutdown.clone();
            let mut leader = leader.clone();
            async move {
                // Subscribed before the first pass: a change during it is not missed.
                let mut events = task.store.events().subscribe();
                let mut reload = false;
                let mut explained_at: Option<Instant> = None;
                loop {
                    if reload {
                        // Another node's portal may have changed them (its write's event was
                        // relayed here), or events were missed.
                        match task.reload_settings().await {
                            Ok(()) => reload = false,
                            Err(e) => {
                                tracing::warn!(error = %e, "the queue could not re-read its settings")
                            }
                        }
                    }
                    let leading = *leader.borrow_and_update();
                    let asked = task.requests.asked();
                    let result = task
                        .pass(task.clock.now(), idle, &mut explained_at, leading)
                        .await;
                    task.passes.send_modify(|n| *n += 1);
                    task.requests.served(asked);
                    let sleep = match result {
                        Ok(Some(next)) => next,
                        Ok(None) => continue, // something started: look again at once
                        Err(e) => {
                            tracing::error!(error = %e, "the queue could not run a scheduling pass");
                            idle
                        }
                    };
                    tokio::select! {
                        woken = events.changed(Event::concerns_queue) => {
                            explained_at = None;
                            reload |= woken.may_include(Event::changes_queue_settings);
                        }
                        // A new leader reads what the last one may have changed.
                        _ = crate::runtime::tasks::changed(&mut leader) => reload = true,
                        _ = task.requests.requested() => explained_at = None,
                        _ = tokio::time::sleep(sleep) => {}
                        _ = shutdown.cancelled() => break,
                    }
                }
            }
        });
        Ok(queue)
    }

    /// Passes finished so far; a test waits for it to move past a value it read before acting.
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.passes.subscribe()
    }

    /// Runs a pass that starts after this call and returns when it has finished.
    pub fn requests(&self) -> crate::runtime::tasks::Passes {
        self.requests.clone()
    }

    pub fn settings(&self) -> QueueSettings {
        read(&self.settings)
    }

    pub fn shares(&self) -> Shares {
        read(&self.shares)
    }

    pub fn snapshot(&self) -> Snapshot {
        read(&self.snapshot)
    }

    pub async fn save_settings(
        &self,
        settings: QueueSettings,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.store
            .queue()
            .save_settings(&settings, audit, self.clock.now())
            .await?;
        write(&self.settings, settings);
        Ok(())
    }

    pub async fn save_shares(&self, shares: Shares, audit: &AuditEntry) -> Result<(), StoreError> {
        self.store
            .queue()
            .save_shares(&shares, audit, self.clock.now())
            .await?;
        write(&self.shares, shares);
        Ok(())
    }

    /// Cancels a queue job: a waiting one at once (and the booking of one started a moment
    /// ago), a running one through the runner. `false` when it is already over.
    pub async fn cancel(&self, job: &Job, audit: &AuditEntry) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let cancelled = self.store.jobs().request_cancel(job.id, audit, now).await?;
        if cancelled {
            // Read again: the queue may have given the job its booking since `job` was read.
            if let Some(current) = self.store.jobs().get(job.id).await? {
                if let (Some(_), Some(booking), lanes_types::job::JobState::Cancelled) =
                    (current.queue, current.booking_id, current.state)
                {
                    crate::jobs::release_booking_of(&self.store, booking, job.id, now).await;
                }
            }
        }
        Ok(cancelled)
    }

    /// Reads the settings and shares again from the store.
    async fn reload_settings(&self) -> Result<(), StoreError> {
        write(&self.settings, self.store.queue().settings().await?);
        write(&self.shares, self.store.queue().shares().await?);
        Ok(())
    }

    /// One pass; it starts jobs only when `leading`. `Ok(None)`: jobs started, look again at
    /// once; `Ok(Some(d))`: sleep up to `d`.
    async fn pass(
        &self,
        now: DateTime<Utc>,
        idle: Duration,
        explained_at: &mut Option<Instant>,
        leading: bool,
    ) -> Result<Option<Duration>, StoreError> {
        let settings = self.settings();
        let pending = self.store.jobs().waiting_for_cards().await?;
        if pending.is_empty() {
            // Nothing waits, so nothing ages and no freed card matters: only an event (a
            // submission, here or relayed from another node) gives the next pass work. Every
            // booking made wakes this pass; it reads no bookings then.
            write(&self.snapshot, Snapshot::default());
            return Ok(Some(UNTIL_AN_EVENT));
        }
        let holds = self.store.queue().card_blocks(now).await?;
        let now_s = now.timestamp();
        // Between events, what the scheduler sees changes only when a booking or maintenance
        // block starts or ends: look again just after the next such moment.
        let now_ms = now.timestamp_millis();
        let next_edge = holds
            .iter()
            .flat_map(|h| [h.start_ms, h.end_ms])
            .filter(|&edge| edge > now_ms)
            .min()
            .map(|edge| Duration::from_millis((edge - now_ms) as u64 + 5));
        let sleep = next_edge.map_or(idle, |d| d.min(idle));
        let members = self.members().await?;
        let standings = self.standings_of(&members, &settings, now).await?;
        let pool = self.pool();
        let cards = inputs::cards(&pool, &holds, now_s);
        let owners = inputs::owners(&members, &holds);
        let waiting = inputs::waiting(&pending, &members, &standings, &settings, now_s);
        let policy = settings.policy;
        let explain = explained_at.is_none_or(|at| at.elapsed() >= EXPLAIN_EVERY);
        let plan = scheduler::schedule(&Pass {
            now: now_s,
            policy,
            cards: &cards,
            waiting: &waiting,
            owners: &owners,
            explain,
        });
        let mut started = false;
        for start in plan.starts.iter().filter(|_| leading) {
            let Some(job) = pending.iter().find(|j| j.id == start.job) else {
                continue;
            };
            let gpus: Vec<GpuRef> = start.cards.iter().map(|&c| pool[c].gpu.clone()).collect();
            started |= self.dispatch(job, gpus, now).await?;
        }
        if leading && !started {
            started |= self.lend_idle_cards(&pending, &plan, &pool, now).await?;
        }
        if leading && !started && policy == lanes_types::queue::Policy::Las {
            self.preempt_for_first(&pending, &plan, &waiting, &pool, &holds, now)
                .await?;
        }
        if started {
            return Ok(None);
        }
        if explain {
            *explained_at = Some(Instant::now());
            let mut waits = explain_waits(&plan, &waiting);
            // Jobs of accounts disabled since they queued them wait for their owner.
            let unseen: Vec<i64> = pending
                .iter()
                .map(|j| j.id)
                .filter(|id| !waits.contains_key(id))
                .collect();
            for id in unseen {
                // A job this pass would start waits for the leader's pass on another node.
                let reason = if plan.starts.iter().any(|s| s.job == id) {
                    scheduler::WaitReason::LeaderStarts
                } else {
                    scheduler::WaitReason::OwnerDisabled
                };
                waits.insert(
                    id,
                    Explained {
                        position: None,
                        reason,
                        estimated_start: None,
                        priority: 0.0,
                    },
                );
            }
            write(&self.snapshot, Snapshot { waits });
            Ok(Some(sleep))
        } else {
            // This pass left the reasons shown as they were: refresh them soon.
            Ok(Some(sleep.min(EXPLAIN_EVERY)))
        }
    }

    /// Books `gpus` for a job from now to its time limit and hands it to the runner. `false`
    /// when the cards were taken meanwhile (the next pass tries again) or the job is gone.
    async fn dispatch(
        &self,
        job: &Job,
        gpus: Vec<GpuRef>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let Some(request) = job.queue else {
            return Ok(false);
        };
        let Some(owner) = self
            .store
            .accounts()
            .get(job.user_id)
            .await?
            .filter(|u| u.enabled)
        else {
            return Ok(false);
        };
        let name = job.title();
        // Limits are bounded at submission; a record from before that bound (or edited by
        // hand) must not overflow the clock: it runs to the longest limit allowed.
        let limit = request.time_limit_s.clamp(1, MAX_TIME_LIMIT_S);
        let Some(limit_end) =
            chrono::Duration::try_seconds(limit).and_then(|d| now.checked_add_signed(d))
        else {
            return Ok(false);
        };
        // The project it named, else its owner's group's default, as a booking of theirs
        // would carry.
        let project = match job.project.clone() {
            Some(named) => Some(named),
            None => {
                let portal = self.store.settings().portal().await?;
                (self.store.accounts())
                    .group_project(&portal.group_projects, owner.id)
                    .await?
            }
        };
        let new = NewBooking {
            owner,
            cards: CardChoice::Named(gpus.iter().map(|g| g.uuid.clone()).collect()),
            start: now,
            end: limit_end,
            note: booking_note(job.id, &truncate(&name, 200)),
            enforce_quota: false,
            lend: false,
            project,
        };
        let audit = AuditEntry::new(None, AuditAction::QueueStart, format!("job {}", job.id))
            .detail(format!(
                "{} for up to {}",
                lanes_types::units::cards(gpus.len() as u64),
                lanes_types::units::format_duration(chrono::Duration::seconds(
                    request.time_limit_s
                ))
            ));
        let booking = match self.store.bookings().create(&new, audit, now).await {
            Ok(booking) => booking,
            Err(e) if !matches!(e, StoreError::Refused(_)) => return Err(e),
            Err(e) => {
                tracing::debug!(job = job.id, error = %e, "cards were taken before a queue job started");
                return Ok(false);
            }
        };
        if self.store.jobs().start_queued(job.id, booking.id).await? {
            tracing::info!(job = job.id, booking = booking.id, "started a queue job");
            Ok(true)
        } else {
            crate::jobs::release_booking_of(&self.store, booking.id, job.id, now).await;
            Ok(false)
        }
    }

    /// Least attained service: when the first waiting job cannot start, running preemptible
    /// queue jobs of a lower level (more GPU-time received) make way for it, the most served
    /// first, as few as free enough cards of one node. Each gets notice, stops and waits in the
    /// queue again; nobody is preempted when even all of them would not let it start.
    async fn preempt_for_first(
        &self,
        pending: &[Job],
        plan: &Plan,
        waiting: &[scheduler::Waiting],
        pool: &[PoolCard],
        holds: &[crate::store::CardBlock],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let las = lanes_scheduling::las::LasSettings::default();
        let Some((first, _, _)) = &plan.reservation else {
            return Ok(());
        };
        let (Some(job), Some(want)) = (
            pending.iter().find(|j| j.id == *first),
            waiting.iter().find(|w| w.id == *first),
        ) else {
            return Ok(());
        };
        let level = las.level(job.queue.map_or(0, |q| q.attained_gpu_s) as f64);
        let mut victims = Vec::new();
        for run in self.store.jobs().live().await? {
            let j = &run.job;
            let (Some(q), Some(booking), Some(started)) = (j.queue, j.booking_id, j.started_at)
            else {
                continue;
            };
            if j.state != lanes_types::job::JobState::Running
                || !q.preemptible
                || run.cancel_requested
            {
                continue;
            }
            let ran = (now - started).num_seconds().max(0);
            let served = q.attained_gpu_s as f64 + ran as f64 * f64::from(q.gpus);
            // A job runs its first stretch before it may be preempted (its restart is paid
            // for a stretch of work), and only a lower level makes way.
            if ran < las.min_run || las.level(served) <= level {
                continue;
            }
            if let Some(booking) = self.store.bookings().get(booking, now).await? {
                // Those already asked count first (their cards are on their way).
                victims.push((!run.preempt_requested, -served, j.id, booking));
            }
        }
        victims.sort_by(|a, b| {
            (a.0, a.1)
                .partial_cmp(&(b.0, b.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let now_s = now.timestamp();
        let mut freed: Vec<&lanes_types::booking::Booking> = Vec::new();
        for (i, (_, _, _, booking)) in victims.iter().enumerate() {
            freed.push(booking);
            let rest: Vec<crate::store::CardBlock> = holds
                .iter()
                .filter(|h| !freed.iter().any(|b| holds_card(h, b)))
                .cloned()
                .collect();
            let cards = inputs::cards(pool, &rest, now_s);
            if scheduler::earliest(&cards, want, now_s).is_some_and(|(at, _)| at <= now_s) {
                for (ask, _, id, _) in &victims[..=i] {
                    if !ask {
                        continue;
                    }
                    let audit =
                        AuditEntry::new(None, AuditAction::QueuePreempt, format!("job {id}"))
                            .detail(format!(
                                "least attained service: it makes way for job {}",
                                job.id
                            ));
                    if self.store.jobs().request_preempt(*id, &audit, now).await? {
                        tracing::info!(
                            job = id,
                            for_job = job.id,
                            "preempting a queue job for one of less attained service"
                        );
                    }
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// Starts preemptible jobs the pass could not place on cards that idle bookings lend, in
    /// the order the scheduler ranked them, each on one node: on cards of one booking where one
    /// is wide enough, else of several (see [`loan_parts`]). `true` when one started.
    async fn lend_idle_cards(
        &self,
        pending: &[Job],
        plan: &Plan,
        pool: &[PoolCard],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let waiting: Vec<&Job> = plan
            .waits
            .iter()
            .filter_map(|w| pending.iter().find(|j| j.id == w.job))
            .filter(|j| j.queue.is_some_and(|q| q.preemptible))
            .collect();
        if waiting.is_empty() {
            return Ok(false);
        }
        let mut lenders = self.store.lending().lendable(now).await?;
        let mut started = false;
        for job in waiting {
            let Some(request) = job.queue else { continue };
            let min_memory = request.min_memory_bytes.unwrap_or(0);
            let usable = |g: &GpuRef| {
                pool.iter()
                    .any(|c| &c.gpu == g && c.memory_total >= min_memory)
            };
            let Some(parts) = loan_parts(&lenders, request.gpus as usize, usable) else {
                continue;
            };
            lenders.retain(|b| !parts.iter().any(|(host, _)| *host == b.id));
            let Some(owner) = self
                .store
                .accounts()
                .get(job.user_id)
                .await?
                .filter(|u| u.enabled)
            else {
                continue;
            };
            let limit = request.time_limit_s.clamp(1, MAX_TIME_LIMIT_S);
            let end = now + chrono::Duration::seconds(limit);
            let hosts: Vec<String> = parts.iter().map(|(h, _)| format!("#{h}")).collect();
            let note = format!(
                "{} (on cards {} {} lend{})",
                booking_note(job.id, &truncate(&job.title(), 200)),
                if hosts.len() == 1 {
                    "booking"
                } else {
                    "bookings"
                },
                hosts.join(", "),
                if hosts.len() == 1 { "s" } else { "" },
            );
            let audit = AuditEntry::new(None, AuditAction::QueueLend, "").detail(format!(
                "{} lent to job {} of {} until {}",
                lanes_types::units::cards(request.gpus as u64),
                job.id,
                owner.username,
                end.to_rfc3339()
            ));
            let loan = match self
                .store
                .lending()
                .create_loan(
                    &crate::store::NewLoan {
                        parts: &parts,
                        borrower: &owner,
                        end,
                        note: &note,
                    },
                    audit,
                    now,
                )
                .await
            {
                Ok(loan) => loan,
                Err(StoreError::Refused(e)) => {
                    tracing::debug!(job = job.id, hosts = ?hosts, error = %e, "could not lend idle booked cards");
                    continue;
                }
                Err(e) => return Err(e),
            };
            if self.store.jobs().start_queued(job.id, loan.id).await? {
                tracing::info!(
                    job = job.id,
                    hosts = ?hosts,
                    loan = loan.id,
                    "started a preemptible job on lent cards"
                );
                started = true;
            } else {
                crate::jobs::release_booking_of(&self.store, loan.id, job.id, now).await;
            }
        }
        Ok(started)
    }

    /// When a job of `gpus` cards for `limit` seconds (each with `min_memory` bytes) that user
    /// `owner` queued now would likely start: the queue, running jobs and bookings replayed
    /// with the policy in force (see [`lanes_scheduling::forecast`]). The replays run off the
    /// async workers.
    pub async fn forecast(
        &self,
        owner: i64,
        gpus: u32,
        limit: i64,
        min_memory: u64,
        now: DateTime<Utc>,
    ) -> Result<StartForecast, StoreError> {
        use lanes_scheduling::forecast::{self, Runtimes, State};
        let settings = self.settings();
        let pending = self.store.jobs().waiting_for_cards().await?;
        let holds = self.store.queue().card_blocks(now).await?;
        let members = self.members().await?;
        let standings = self.standings_of(&members, &settings, now).await?;
        let runtimes = Runtimes::new(self.store.jobs().run_times(FORECAST_HISTORY).await?);
        let pool = self.pool();
        let now_s = now.timestamp();
        let mut owners = inputs::owners(&members, &holds);
        let waiting = inputs::waiting(&pending, &members, &standings, &settings, now_s);
        let running = inputs::running(&pool, &holds);
        // Running queue jobs are the replays' to end; bookings and maintenance stay.
        let fixed: Vec<crate::store::CardBlock> = holds
            .into_iter()
            .filter(|h| h.queue_job.is_none())
            .collect();
        let cards = inputs::cards(&pool, &fixed, now_s);
        let index = members.iter().position(|m| m.id == owner);
        let candidate = scheduler::Waiting {
            // No job has this id.
            id: i64::MIN,
            owner: index.unwrap_or_else(|| {
                owners.push(Default::default());
                owners.len() - 1
            }),
            gpus,
            time_limit: limit,
            min_memory,
            submitted: now_s,
            priority: inputs::priority(&settings, index.and_then(|i| standings.get(i)), 0, 0),
        };
        let policy = settings.policy;
        let history = runtimes.len() as u32;
        let _turn = self
            .forecasting
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("the server is stopping".into()))?;
        let replayed = tokio::task::spawn_blocking(move || {
            let state = State {
                now: now_s,
                policy,
                cards: &cards,
                running: &running,
                waiting: &waiting,
                owners: &owners,
            };
            let seed = now_s as u64;
            let likely = forecast::forecast(
                &state,
                &candidate,
                &runtimes,
                forecast::SAMPLES,
                seed,
                FORECAST_HORIZON_S,
            );
            let by_limits = forecast::forecast(
                &state,
                &candidate,
                &Runtimes::default(),
                1,
                seed,
                FORECAST_HORIZON_S,
            );
            (likely, by_limits.p50)
        })
        .await;
        let replayed = match replayed {
            Ok(replayed) => replayed,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => return Err(StoreError::Unavailable("the server is stopping".into())),
        };
        let at = |t: Option<Time>| t.and_then(|t| DateTime::from_timestamp(t, 0));
        Ok(StartForecast {
            policy,
            p50: at(replayed.0.p50),
            p90: at(replayed.0.p90),
            by_time_limits: at(replayed.1),
            samples: replayed.0.samples,
            history,
        })
    }

    /// Every member's fair-share standing now.
    pub async fn standings(&self, now: DateTime<Utc>) -> Result<Vec<Standing>, StoreError> {
        let members = self.members().await?;
        self.standings_of(&members, &self.settings(), now).await
    }

    async fn standings_of(
        &self,
        members: &[Member],
        settings: &QueueSettings,
        now: DateTime<Utc>,
    ) -> Result<Vec<Standing>, StoreError> {
        let half_life = settings.half_life_s;
        let since = chrono::Duration::try_seconds(half_life.saturating_mul(HALF_LIVES_KEPT))
            .and_then(|kept| now.checked_sub_signed(kept))
            .unwrap_or_default();
        let holds = self.store.queue().usage_spans(since).await?;
        Ok(inputs::standings(
            members,
            &holds,
            &self.shares(),
            half_life,
            now.timestamp(),
        ))
    }

    /// The pool's healthy managed cards on nodes that answer, by node then index.
    fn pool(&self) -> Vec<PoolCard> {
        let fleet = self.hub.snapshot_without_history();
        let mut gpus = fleet.gpus.clone();
        gpus.retain(|g| g.health.is_ok() && !g.unmanaged && fleet.node_is_up(&g.info.node));
        gpus.sort_by(|a, b| (&a.info.node, a.info.index).cmp(&(&b.info.node, b.info.index)));
        gpus.into_iter()
            .map(|g| {
                let total = g.info.memory_total_bytes;
                let used = g.sample.as_ref().map_or(0, |s| s.memory_used_bytes);
                PoolCard {
                    gpu: GpuRef {
                        node: g.info.node,
                        uuid: g.info.uuid,
                    },
                    memory_total: total,
                    memory_free: total.saturating_sub(used),
                }
            })
            .collect()
    }

    /// Enabled users with their fair-share group and concurrent-GPU limit.
    async fn members(&self) -> Result<Vec<Member>, StoreError> {
        let users = self.store.accounts().list().await?;
        let memberships = self.store.accounts().memberships().await?;
        let quotas = self.store.quotas().list().await?;
        Ok(users
            .into_iter()
            .filter(|u| u.enabled)
            .map(|u| {
                let mut groups: Vec<String> = memberships
                    .iter()
                    .filter(|(id, _)| *id == u.id)
                    .map(|(_, g)| g.clone())
                    .collect();
                groups.sort();
                let max_gpus = personal_limits(&quotas, &u.username, &groups).max_gpus;
                Member {
                    id: u.id,
                    group: groups.first().cloned().unwrap_or_default(),
                    username: u.username,
                    max_gpus,
                }
            })
            .collect())
    }
}

fn explain_waits(plan: &Plan, waiting: &[scheduler::Waiting]) -> HashMap<i64, Explained> {
    let priority: HashMap<i64, f64> = waiting.iter().map(|w| (w.id, w.priority)).collect();
    plan.waits
        .iter()
        .enumerate()
        .map(|(i, wait)| {
            let estimated_start = wait
                .estimated_start
                .and_then(|t: Time| DateTime::from_timestamp(t, 0));
            (
                wait.job,
                Explained {
                    position: Some(i as u32 + 1),
                    reason: wait.reason.clone(),
                    estimated_start,
                    priority: priority.get(&wait.job).copied().unwrap_or(0.0),
                },
            )
        })
        .collect()
}

fn truncate(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// Whether `hold` is `booking`'s hold of one of its cards.
fn holds_card(hold: &crate::store::CardBlock, booking: &lanes_types::booking::Booking) -> bool {
    hold.start_ms == booking.start.timestamp_millis()
        && hold.end_ms == booking.end.timestamp_millis()
        && booking
            .gpus
            .iter()
            .any(|g| g.uuid == hold.uuid && g.node == hold.node)
}

/// Past jobs' run times a forecast draws from.
const FORECAST_HISTORY: i64 = 1_000;
/// How far ahead a forecast looks.
pub const FORECAST_HORIZON_S: Time = 30 * 86_400;

/// What [`Queue::forecast`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct StartForecast {
    pub policy: lanes_types::queue::Policy,
    pub p50: Option<DateTime<Utc>>,
    pub p90: Option<DateTime<Utc>>,
    pub by_time_limits: Option<DateTime<Utc>>,
    pub samples: u32,
    pub history: u32,
}

/// A host booking and the cards it lends to one loan.
type LoanPart = (i64, Vec<GpuRef>);

/// Where a preemptible job of `width` cards borrows, from idle lending bookings' `usable`
/// cards, all on one node (a job runs under one node's runner): the narrowest booking that
/// alone has enough, which leaves wider ones to wider jobs; else several bookings of one node,
/// widest first, on the node that needs the fewest (each holder can take the cards back, and
/// any one's return ends the loan). `None` when no node has enough.
fn loan_parts(
    lenders: &[lanes_types::booking::Booking],
    width: usize,
    usable: impl Fn(&GpuRef) -> bool,
) -> Option<Vec<LoanPart>> {
    if width == 0 {
        return None;
    }
    // Each node's lenders, in the lenders' order, with their usable cards there.
    let mut by_node: std::collections::BTreeMap<&str, Vec<LoanPart>> = Default::default();
    for b in lenders {
        let mut on: std::collections::BTreeMap<&str, Vec<GpuRef>> = Default::default();
        for g in b.gpus.iter().filter(|g| usable(g)) {
            on.entry(g.node.as_str()).or_default().push(g.clone());
        }
        for (node, cards) in on {
            by_node.entry(node).or_default().push((b.id, cards));
        }
    }
    let alone = by_node
        .values()
        .flatten()
        .filter(|(_, cards)| cards.len() >= width)
        .min_by_key(|(_, cards)| cards.len());
    if let Some((host, cards)) = alone {
        return Some(vec![(*host, cards[..width].to_vec())]);
    }
    let mut best: Option<Vec<LoanPart>> = None;
    for mut hosts in by_node.into_values() {
        hosts.sort_by_key(|(_, cards)| std::cmp::Reverse(cards.len()));
        let mut left = width;
        let mut parts = Vec::new();
        for (host, cards) in hosts {
            let take = left.min(cards.len());
            parts.push((host, cards[..take].to_vec()));
            left -= take;
            if left == 0 {
                break;
            }
        }
        if left == 0 && best.as_ref().is_none_or(|b| parts.len() < b.len()) {
            best = Some(parts);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::booking::Booking;

    fn lender(id: i64, cards: &[(&str, &str)]) -> Booking {
        Booking {
            id,
            gpus: cards
                .iter()
                .map(|(node, uuid)| GpuRef {
                    node: node.to_string(),
                    uuid: uuid.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn hosts(parts: &Option<Vec<LoanPart>>) -> Vec<(i64, usize)> {
        parts
            .iter()
            .flatten()
            .map(|(h, cards)| (*h, cards.len()))
            .collect()
    }

    #[test]
    fn a_loan_takes_the_narrowest_booking_that_is_enough_else_several_of_one_node() {
        let lenders = [
            lender(1, &[("a", "a0"), ("a", "a1"), ("a", "a2"), ("a", "a3")]),
            lender(2, &[("a", "a4"), ("a", "a5")]),
            lender(3, &[("b", "b0"), ("b", "b1"), ("b", "b2")]),
            lender(4, &[("b", "b3"), ("b", "b4"), ("b", "b5")]),
            lender(5, &[("a", "a6")]),
        ];
        let all = |_: &GpuRef| true;
        assert_eq!(hosts(&loan_parts(&lenders, 2, all)), [(2, 2)]);
        assert_eq!(hosts(&loan_parts(&lenders, 3, all)), [(3, 3)]);
        assert_eq!(hosts(&loan_parts(&lenders, 4, all)), [(1, 4)]);
        // Five cards: node b's two bookings, or node a's 4 + 2: both two bookings, widest first.
        assert_eq!(hosts(&loan_parts(&lenders, 5, all)), [(1, 4), (2, 1)]);
        assert_eq!(hosts(&loan_parts(&lenders, 6, all)), [(1, 4), (2, 2)]);
        assert_eq!(
            hosts(&loan_parts(&lenders, 7, all)),
            [(1, 4), (2, 2), (5, 1)]
        );
        // Never across nodes.
        assert_eq!(loan_parts(&lenders, 8, all), None);
        assert_eq!(loan_parts(&lenders, 0, all), None);
        // Only usable cards count (memory, health): without a0..a2, node a has four cards in
        // three bookings, node b six in two: b needs fewer holders.
        let some = |g: &GpuRef| !["a0", "a1", "a2"].contains(&g.uuid.as_str());
        assert_eq!(hosts(&loan_parts(&lenders, 4, some)), [(3, 3), (4, 1)]);
        let only_a = |g: &GpuRef| g.node == "a" && some(g);
        assert_eq!(
            hosts(&loan_parts(&lenders, 4, only_a)),
            [(2, 2), (1, 1), (5, 1)]
        );
        // A booking over two nodes lends on each separately.
        let split = [lender(9, &[("a", "a0"), ("b", "b0"), ("a", "a1")])];
        let parts = loan_parts(&split, 2, all).unwrap();
        assert!(parts[0].1.iter().all(|g| g.node == "a"));
    }
}
