//! Enforcement beside the runner: on each tick the watchdog matches every process on the cards
//! to a job, a booking or an exemption (`watchdog`), records and acts on unbooked use, keeps
//! jobs' peak GPU memory, finds idle bookings (`idle`) and tells the notifier when bookings
//! start and end. Decisions are plain functions; this module does the I/O around them.

pub mod idle;
pub mod watchdog;

use crate::audit::AuditAction;
use crate::notify::{Notice, Notifier};
use crate::store::{AuditEntry, BookingFilter, NewViolation, Store, StoreError};
use crate::telemetry::hub::{CardNotes, Hub, Tick};
use crate::telemetry::sim::FAKE_PID_BASE;
use crate::telemetry::{procinfo, Processes};
use chrono::{DateTime, Utc};
use idle::{UtilHistory, Watch};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::enforcement::{Policy, ViolationAction, WatchdogMode};
use lanes_types::job::JobState;
use lanes_types::notify::EventKind;
use lanes_types::{GpuProcess, ProcessLane};
use nix::sys::signal::Signal;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use watchdog::{Facts, Key, RunningJob, Tracker};

/// Passes are at most this frequent, however fast the poller ticks.
const MIN_PASS: Duration = Duration::from_millis(250);
/// How long an ended job's processes keep their lane: the driver lists a killed process for a
/// moment after it is gone (and the process lists are refreshed only every few seconds), which
/// must not read as its owner using a card without a booking.
const JOB_LINGER_MS: i64 = 15_000;
/// How long what the enforcer read from the database is trusted when no event said it changed
/// and no booking starts or ends: the bound on what a write that says nothing (an operator's
/// `lanes user` on another process's SQLite file) can go unseen for.
const KNOWN_FOR: chrono::Duration = chrono::Duration::seconds(60);
/// How often an open violation's "last seen" is written while it goes on (its end is written
/// when it ends, to the pass).
const TOUCH_EVERY_MS: i64 = 30_000;

/// What the enforcer watches and acts through; [`Enforcer::start`] runs it.
pub struct Enforcer {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub processes: Processes,
    pub notifier: Notifier,
    pub policy: Arc<RwLock<Policy>>,
    /// The node whose cards it guards.
    pub node: String,
    /// The UUIDs of the cards it guards: a process on a card Lanes does not manage is nobody's
    /// violation (`--gpus nvml:0,2`).
    pub managed: std::collections::BTreeSet<String>,
    /// The device wall: which job a process belongs to, by its cgroup.
    pub wall: Arc<crate::jobs::wall::Wall>,
    /// Passes on request: the next reading is judged at once, whatever [`MIN_PASS`] says.
    pub passes: crate::runtime::tasks::Passes,
}

/// What one pass leaves for the next.
#[derive(Default)]
struct Memory {
    tracker: Tracker,
    util: UtilHistory,
    /// Active bookings of this node at the last pass; `None` before the first.
    active: Option<HashMap<i64, Booking>>,
    /// Highest GPU memory recorded per running job.
    peaks: HashMap<i64, u64>,
    /// Jobs seen running, by session leader pid, until when they keep their lane.
    recent_jobs: HashMap<u32, (RunningJob, i64)>,
    last_pass_ms: i64,
    /// What was read from the database, until an event or its deadline says to read it again.
    known: Option<Known>,
    /// When open violations' "last seen" was last written.
    touched_ms: i64,
}

/// This node's active bookings, running jobs and accounts as last read: every pass judges by
/// them, and they are read again only after an event, at the next booking start or end, or
/// [`KNOWN_FOR`] after they were read. An idle node asks its database nothing per pass.
#[derive(Clone)]
struct Known {
    active: HashMap<i64, Booking>,
    accounts: HashMap<String, i64>,
    jobs: HashMap<u32, RunningJob>,
    until: DateTime<Utc>,
}

impl Known {
    fn fresh(known: Option<&Known>, now: DateTime<Utc>) -> bool {
        known.is_some_and(|k| now < k.until)
    }
}

impl Enforcer {
    /// Runs the enforcer, supervised, until `shutdown`.
    pub fn start(self, shutdown: CancellationToken) {
        let enforcer = Arc::new(self);
        crate::runtime::tasks::supervise("enforcer", shutdown.clone(), move || {
            let enforcer = enforcer.clone();
            let shutdown = shutdown.clone();
            async move { enforcer.run(shutdown).await }
        });
    }

    async fn run(&self, shutdown: CancellationToken) {
        let mut ticks = self.hub.subscribe_raw();
        let mut events = self.store.events().subscribe();
        let mut memory = Memory::default();
        match self.resume(&mut memory).await {
            Ok(()) => {}
            Err(e) => tracing::error!(error = %e, "the watchdog could not load open violations"),
        }
        loop {
            let tick = tokio::select! {
                tick = ticks.recv() => tick,
                _ = events.changed(crate::runtime::events::Event::concerns_enforcer) => {
                    memory.known = None;
                    continue;
                }
                _ = shutdown.cancelled() => break,
            };
            let tick = match tick {
                Ok(tick) if tick.gpus.iter().all(|g| self.managed.contains(&g.uuid)) => tick,
                Ok(tick) => Arc::new(crate::telemetry::hub::Tick {
                    at_ms: tick.at_ms,
                    gpus: (tick.gpus.iter())
                        .filter(|g| self.managed.contains(&g.uuid))
                        .cloned()
                        .collect(),
                }),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            };
            for gpu in &tick.gpus {
                if let Some(sample) = &gpu.sample {
                    memory
                        .util
                        .record(&gpu.uuid, sample.at_ms, sample.utilization_gpu_pct);
                }
            }
            if tick.at_ms - memory.last_pass_ms < MIN_PASS.as_millis() as i64
                && !self.passes.wanted()
            {
                continue;
            }
            memory.last_pass_ms = tick.at_ms;
            let asked = self.passes.asked();
            if let Err(e) = self.pass(&tick, &mut memory).await {
                tracing::error!(error = %e, "the watchdog pass failed");
            }
            self.passes.served(asked);
        }
    }

    /// Picks up violations left open by an earlier run, so grace periods go on from where they were.
    async fn resume(&self, memory: &mut Memory) -> Result<(), StoreError> {
        for v in self
            .store
            .enforcement()
            .violations(Some(&self.node), None, true, 10_000)
            .await?
        {
            memory.tracker.opened(
                (v.gpu_uuid.clone(), v.pid),
                v.id,
                v.action,
                v.first_seen.timestamp_millis(),
            );
        }
        Ok(())
    }

    async fn pass(&self, tick: &Tick, memory: &mut Memory) -> Result<(), StoreError> {
        let now = DateTime::from_timestamp_millis(tick.at_ms).unwrap_or_else(Utc::now);
        let policy = self
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !Known::fresh(memory.known.as_ref(), now) {
            memory.known = Some(self.known(now).await?);
        }
        let known = memory.known.clone().expect("read just now");
        let active = known.active.clone();
        let mut facts = Facts {
            exempt_users: policy.exempt_users.iter().cloned().collect(),
            exempt_commands: policy.exempt_commands.iter().cloned().collect(),
            accounts: known.accounts,
            jobs: known.jobs,
            ..Default::default()
        };
        // A loan's borrower runs there as a job; the card's holder is its host's.
        for booking in active.values().filter(|b| b.loan_of.is_none()) {
            for gpu in booking.gpus.iter().filter(|g| g.node == self.node) {
                facts.holders.insert(gpu.uuid.clone(), booking.user_id);
            }
        }
        linger(&mut facts, &mut memory.recent_jobs, tick.at_ms);

        // Judge every process; keep jobs' memory; collect the unbooked.
        let mut notes: HashMap<String, CardNotes> = HashMap::new();
        let mut job_memory: HashMap<i64, u64> = HashMap::new();
        let mut unbooked: HashMap<Key, &GpuProcess> = HashMap::new();
        // Lending bookings whose holder's own process is on one of their cards.
        let mut holders_back: HashSet<i64> = HashSet::new();
        for gpu in tick.gpus.iter().filter(|g| g.node == self.node) {
            let card = notes.entry(gpu.uuid.clone()).or_default();
            for process in &gpu.processes {
                let real = process.pid < FAKE_PID_BASE;
                let session = real
                    .then(|| procinfo::stat(process.pid).map(|s| s.session))
                    .flatten();
                let exe = real.then(|| procinfo::exe(process.pid)).flatten();
                let cgroup = real.then(|| self.wall.cgroup_of(process.pid)).flatten();
                let lane = facts.classify(
                    &gpu.uuid,
                    process,
                    session,
                    cgroup.as_deref(),
                    exe.as_deref(),
                );
                card.lanes.insert(process.pid, lane);
                match lane {
                    ProcessLane::Job { id } => {
                        *job_memory.entry(id).or_default() +=
                            process.used_memory_bytes.unwrap_or(0);
                    }
                    ProcessLane::Unbooked => {
                        unbooked.insert((gpu.uuid.clone(), process.pid), process);
                    }
                    ProcessLane::Booked => {
                        let lending = active.values().find(|b| {
                            b.lent_to.is_some() && b.gpus.iter().any(|g| g.uuid == gpu.uuid)
                        });
                        if let Some(host) = lending {
                            holders_back.insert(host.id);
                        }
                    }
                    ProcessLane::Exempt | ProcessLane::Simulated => {}
                }
            }
        }
        for (id, bytes) in job_memory {
            let peak = memory.peaks.entry(id).or_default();
            if bytes > *peak {
                *peak = bytes;
                self.store.runs().peak_memory(id, bytes).await?;
            }
        }
        memory
            .peaks
            .retain(|id, _| facts.jobs.values().any(|j| j.id == *id));

        for host in holders_back {
            let audit = AuditEntry::new(None, AuditAction::LoanReclaim, "")
                .detail("its holder's process appeared on a lent card");
            let ended = self.store.lending().reclaim_loans(host, audit, now).await?;
            if ended > 0 {
                tracing::info!(
                    booking = host,
                    "took back lent cards: their holder started work"
                );
            }
        }
        self.violations(&unbooked, &facts, &policy, memory, now)
            .await?;
        self.bookings_changed(&active, memory, now);
        self.idle(&active, &policy, memory, &mut notes, now).await?;
        self.hub.set_notes(notes);
        Ok(())
    }

    /// Reads this node's active bookings (and those starting soon, for when to read again),
    /// running jobs and accounts.
    async fn known(&self, now: DateTime<Utc>) -> Result<Known, StoreError> {
        let filter = BookingFilter {
            from: Some(now),
            to: Some(now + KNOWN_FOR),
            ..Default::default()
        };
        let mine: Vec<Booking> = (self.store.bookings().list(&filter, now).await?.into_iter())
            .filter(|b| b.gpus.iter().any(|g| g.node == self.node))
            .collect();
        let until = next_boundary(&mine, now).unwrap_or(now + KNOWN_FOR);
        let active: HashMap<i64, Booking> = (mine.into_iter())
            .filter(|b| b.state == BookingState::Active)
            .map(|b| (b.id, b))
            .collect();
        let mut accounts = HashMap::new();
        for user in self.store.accounts().list().await? {
            if let Some(account) = user.unix_user {
                accounts.insert(account, user.id);
            }
        }
        let mut jobs = HashMap::new();
        for job in self.store.jobs().live().await? {
            let (Some(pid), Some(booking_id), JobState::Running) =
                (job.job.pid, job.job.booking_id, job.job.state)
            else {
                continue;
            };
            // A job stopping after its slot keeps its lane until it is gone.
            let booking = match active.get(&booking_id) {
                Some(b) => Some(b.clone()),
                None => self.store.bookings().get(booking_id, now).await?,
            };
            let cards = booking
                .map(|b| b.gpus.into_iter().map(|g| g.uuid).collect())
                .unwrap_or_default();
            jobs.insert(
                pid as u32,
                RunningJob {
                    id: job.job.id,
                    cards,
                    cgroup: job.cgroup.clone(),
                },
            );
        }
        Ok(Known {
            active,
            accounts,
            jobs,
            until,
        })
    }

    async fn violations(
        &self,
        unbooked: &HashMap<Key, &GpuProcess>,
        facts: &Facts,
        policy: &Policy,
        memory: &mut Memory,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let now_ms = now.timestamp_millis();
        let keys: HashSet<Key> = unbooked.keys().cloned().collect();
        let plan = memory.tracker.plan(&keys, policy, now_ms);
        for key in plan.new {
            let process = unbooked[&key];
            let record = NewViolation {
                node: self.node.clone(),
                gpu_uuid: key.0.clone(),
                pid: key.1,
                unix_user: process.user.clone(),
                user_id: process
                    .user
                    .as_ref()
                    .and_then(|u| facts.accounts.get(u).copied()),
                command: process.command.clone(),
                memory_bytes: process.used_memory_bytes,
                seen_ms: now_ms,
                container: process.container.clone(),
            };
            let id = self.store.enforcement().insert_violation(&record).await?;
            let action = if policy.watchdog == WatchdogMode::Observe {
                ViolationAction::Observed
            } else {
                self.store
                    .enforcement()
                    .set_violation_action(id, ViolationAction::Warned)
                    .await?;
                let mut notice = self.violation_notice(&record, policy, now);
                if let Some(owner) = record.user_id {
                    notice = notice.to(owner, EventKind::UnbookedUse);
                }
                self.notifier.send(notice);
                ViolationAction::Warned
            };
            tracing::warn!(
                gpu = %key.0, pid = key.1, user = ?process.user, command = ?process.command,
                "a process runs on a card its owner has not booked"
            );
            memory.tracker.opened(key, id, action, now_ms);
        }
        if now_ms - memory.touched_ms >= TOUCH_EVERY_MS && !plan.seen.is_empty() {
            self.store
                .enforcement()
                .touch_violations(&plan.seen, now_ms)
                .await?;
            memory.touched_ms = now_ms;
        }
        for (_, id) in plan.ended {
            self.store.enforcement().end_violation(id, now_ms).await?;
        }
        for ((card, pid), id, action) in plan.signals {
            let signal = match action {
                ViolationAction::Killed => Signal::SIGKILL,
                _ => Signal::SIGTERM,
            };
            match self.processes.signal(pid, signal) {
                Ok(()) => tracing::warn!(%card, pid, ?signal, "ended an unbooked process"),
                Err(e) => {
                    tracing::warn!(%card, pid, ?signal, error = %e, "could not signal an unbooked process")
                }
            }
            self.store
                .enforcement()
                .set_violation_action(id, action)
                .await?;
        }
        Ok(())
    }

    fn violation_notice(&self, v: &NewViolation, policy: &Policy, now: DateTime<Utc>) -> Notice {
        let what = v.command.as_deref().unwrap_or("a process");
        // A container's process is its owner's, or nobody's: never its runtime's root.
        let who = match (&v.container, v.unix_user.as_deref()) {
            (Some(c), Some(owner)) => format!("{owner}'s {}", c.describe()),
            (Some(c), None) => format!("{}, owner unknown,", c.describe()),
            (None, Some(user)) => user.to_string(),
            (None, None) => "an unknown user".to_string(),
        };
        let index = self
            .hub
            .gpus()
            .iter()
            .find(|g| g.info.uuid == v.gpu_uuid)
            .map(|g| g.info.index.to_string())
            .unwrap_or_else(|| "?".into());
        let consequence = match policy.watchdog {
            WatchdogMode::Terminate => format!(
                "; it will be ended in {} s unless the card is booked",
                policy.violation_grace_s
            ),
            _ => String::new(),
        };
        let terminate_at = (policy.watchdog == WatchdogMode::Terminate)
            .then(|| now + chrono::Duration::seconds(policy.violation_grace_s as i64));
        Notice::lab(
            "violation",
            now,
            format!(
                "{who} runs {what} (pid {}) on GPU {index} of {} without a booking{consequence}",
                v.pid, v.node
            ),
            serde_json::json!({
                "node": v.node, "gpu_uuid": v.gpu_uuid, "pid": v.pid, "user": v.unix_user,
                "command": v.command, "memory_bytes": v.memory_bytes, "policy": policy.watchdog,
                "container": v.container,
                "terminate_at": terminate_at,
            }),
        )
    }

    /// Notices for bookings that became active or ended since the last pass.
    fn bookings_changed(
        &self,
        active: &HashMap<i64, Booking>,
        memory: &mut Memory,
        now: DateTime<Utc>,
    ) {
        if let Some(before) = &memory.active {
            for (id, booking) in active.iter().filter(|(id, _)| !before.contains_key(id)) {
                self.notifier.send(booking_notice(
                    "booking.start",
                    "started",
                    *id,
                    booking,
                    now,
                ));
            }
            for (id, booking) in before.iter().filter(|(id, _)| !active.contains_key(id)) {
                self.notifier
                    .send(booking_notice("booking.end", "ended", *id, booking, now));
            }
        }
        memory.active = Some(active.clone());
    }

    async fn idle(
        &self,
        active: &HashMap<i64, Booking>,
        policy: &Policy,
        memory: &mut Memory,
        notes: &mut HashMap<String, CardNotes>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let now_ms = now.timestamp_millis();
        let window_ms = policy.idle_window_s as i64 * 1000;
        memory
            .util
            .trim(now_ms - window_ms.max(idle::WAKE_WINDOW_MS) - 5_000);
        for (id, booking) in active {
            let cards: Vec<String> = booking
                .gpus
                .iter()
                .filter(|g| g.node == self.node)
                .map(|g| g.uuid.clone())
                .collect();
            let watch = Watch {
                cards: &cards,
                // "Still using it" starts a new window, as a new booking would.
                start_ms: booking
                    .in_use_at
                    .map_or(booking.start, |t| t.max(booking.start))
                    .timestamp_millis(),
                idle: booking.idle_since.is_some(),
            };
            let judged = idle::judge(
                &watch,
                &memory.util,
                policy.idle_threshold_pct,
                window_ms,
                now_ms,
            );
            let idle_since = match (booking.idle_since, judged) {
                (None, Some(true)) => {
                    self.store
                        .enforcement()
                        .set_booking_idle(*id, Some(now_ms))
                        .await?;
                    memory.known = None;
                    let text = format!(
                        "under {}% GPU utilization for {} min",
                        policy.idle_threshold_pct,
                        policy.idle_window_s / 60
                    );
                    let mut notice = booking_notice("booking.idle", &text, *id, booking, now)
                        .to(booking.user_id, EventKind::BookingIdle);
                    notice.details["threshold_pct"] = policy.idle_threshold_pct.into();
                    notice.details["window_s"] = policy.idle_window_s.into();
                    if policy.idle_release {
                        let release =
                            now + chrono::Duration::seconds(policy.idle_release_grace_s as i64);
                        notice.details["release_at"] = serde_json::json!(release);
                    }
                    self.notifier.send(notice);
                    Some(now)
                }
                (Some(_), Some(false)) => {
                    self.store.enforcement().set_booking_idle(*id, None).await?;
                    memory.known = None;
                    None
                }
                (since, _) => since,
            };
            let Some(since) = idle_since else { continue };
            for card in &cards {
                notes.entry(card.clone()).or_default().idle_booking = Some(*id);
            }
            let grace = chrono::Duration::seconds(policy.idle_release_grace_s as i64);
            if policy.idle_release && now - since >= grace {
                let audit = AuditEntry::new(
                    None,
                    AuditAction::BookingReleaseIdle,
                    format!("booking {id}"),
                )
                .detail("released by the idle policy");
                match self.store.bookings().withdraw(*id, audit, now).await {
                    Ok(_) => {
                        let text = "released: it sat idle past the grace period";
                        self.notifier.send(
                            booking_notice("booking.release", text, *id, booking, now)
                                .to(booking.user_id, EventKind::BookingReleased),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(booking = id, error = %e, "could not release an idle booking")
                    }
                }
            }
        }
        Ok(())
    }
}

/// The first start or end of `bookings` after `now`: the active ones change then.
fn next_boundary(bookings: &[Booking], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (bookings.iter())
        .flat_map(|b| [b.start, b.end])
        .filter(|t| *t > now)
        .min()
}

/// Remembers the running jobs, and gives jobs that ended in the last [`JOB_LINGER_MS`] back their
/// lane.
fn linger(facts: &mut Facts, recent: &mut HashMap<u32, (RunningJob, i64)>, now_ms: i64) {
    for (pid, job) in &facts.jobs {
        recent.insert(*pid, (job.clone(), now_ms + JOB_LINGER_MS));
    }
    recent.retain(|_, (_, until)| *until > now_ms);
    for (pid, (job, _)) in recent.iter() {
        facts.jobs.entry(*pid).or_insert_with(|| job.clone());
    }
}

fn booking_notice(
    event: &'static str,
    what: &str,
    id: i64,
    booking: &Booking,
    now: DateTime<Utc>,
) -> Notice {
    let cards: Vec<&str> = booking.gpus.iter().map(|g| g.uuid.as_str()).collect();
    Notice::lab(
        event,
        now,
        format!(
            "booking {id} of {} ({} GPU{}) {what}",
            booking.username,
            cards.len(),
            if cards.len() == 1 { "" } else { "s" }
        ),
        serde_json::json!({
            "booking_id": id, "user": booking.username, "gpus": booking.gpus,
            "start": booking.start, "end": booking.end,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_jobs_processes_keep_their_lane_for_a_while() {
        let job = RunningJob {
            id: 7,
            cards: vec!["GPU-A".into()],
            cgroup: None,
        };
        let mut recent = HashMap::new();
        let mut running = Facts::default();
        running.jobs.insert(100, job.clone());
        linger(&mut running, &mut recent, 0);
        let mut after = Facts::default();
        linger(&mut after, &mut recent, JOB_LINGER_MS - 1);
        assert_eq!(after.jobs.get(&100), Some(&job));
        let mut later = Facts::default();
        linger(&mut later, &mut recent, JOB_LINGER_MS);
        assert!(later.jobs.is_empty() && recent.is_empty());
    }

    #[test]
    fn what_the_enforcer_read_holds_until_the_next_booking_start_or_end() {
        let at = |s: i64| DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let booking = |start, end| -> Booking {
            serde_json::from_value(serde_json::json!({
                "id": 1, "user_id": 1, "username": "ada", "display_name": "Ada",
                "gpus": [], "start": at(start), "end": at(end), "note": "",
                "state": "active", "created_at": at(-1000),
            }))
            .unwrap()
        };
        let now = at(0);
        // Active until 100, another from 40: the set changes at 40.
        let both = [booking(-50, 100), booking(40, 400)];
        assert_eq!(next_boundary(&both, now), Some(at(40)));
        // A boundary exactly now has passed (it was read at it).
        assert_eq!(next_boundary(&[booking(0, 30)], now), Some(at(30)));
        assert_eq!(next_boundary(&[], now), None);
        let known = Known {
            active: HashMap::new(),
            accounts: HashMap::new(),
            jobs: HashMap::new(),
            until: at(40),
        };
        assert!(Known::fresh(Some(&known), at(39)));
        assert!(!Known::fresh(Some(&known), at(40)));
        assert!(!Known::fresh(None, now), "nothing read yet");
    }
}
