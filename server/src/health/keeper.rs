//! The health keeper: one task per node, woken by each tick of this node's cards (and by a
//! card an admin cleared anywhere in the pool). It judges every managed card, shows the verdict
//! on the ticks that follow, records each change, and acts on it as the admins' policy says.

use super::judge::{judge, CardMemory, Reading};
use crate::audit::AuditAction;
use crate::notify::{Notice, Notifier};
use crate::runtime::events::{Change, Event};
use crate::store::{AuditEntry, BookingFilter, NewHealthChange, Store, StoreError};
use crate::telemetry::hub::{Hub, Tick};
use chrono::{DateTime, Utc};
use lanes_types::booking::{BookingState, GpuRef};
use lanes_types::enforcement::Policy;
use lanes_types::health::{CardHealth, Condition, HealthCause, HealthLevel};
use lanes_types::notify::EventKind;
use lanes_types::{card_name, GpuProcess, GpuUpdate, Health};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

pub struct HealthKeeper {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub notifier: Notifier,
    pub policy: Arc<RwLock<Policy>>,
    pub node: String,
    pub managed: BTreeSet<String>,
    /// Judges the next tick on request (a test hook).
    pub passes: crate::runtime::tasks::Passes,
    pub clock: crate::runtime::clock::Clock,
}

/// Whether an event may have cleared a card (here or on another node).
fn cleared(event: Event) -> bool {
    matches!(event.change(), Change::HealthCleared | Change::PoolChanged)
}

impl HealthKeeper {
    /// Runs the keeper, supervised, until `shutdown`.
    pub fn start(self, shutdown: CancellationToken) {
        let keeper = Arc::new(self);
        crate::runtime::tasks::supervise("health keeper", shutdown.clone(), move || {
            let keeper = keeper.clone();
            let shutdown = shutdown.clone();
            async move { keeper.run(shutdown).await }
        });
    }

    async fn run(&self, shutdown: CancellationToken) {
        let mut ticks = self.hub.subscribe_raw();
        let mut events = self.store.events().subscribe();
        let mut cards = HashMap::new();
        self.reload(&mut cards).await;
        loop {
            let tick = tokio::select! {
                tick = ticks.recv() => tick,
                _ = events.changed(cleared) => {
                    self.reload(&mut cards).await;
                    continue;
                }
                _ = shutdown.cancelled() => break,
            };
            let tick = match tick {
                Ok(tick) => tick,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            };
            let asked = self.passes.asked();
            if let Err(e) = self.pass(&tick, &mut cards).await {
                tracing::error!(error = %e, "the health keeper's pass failed");
            }
            self.passes.served(asked);
        }
    }

    /// Reads what the database holds of this node's cards: their levels and held findings
    /// (kept across restarts), and the counters growth is measured against.
    async fn reload(&self, cards: &mut HashMap<String, CardMemory>) {
        let kept = match self.store.card_health().of_node(&self.node).await {
            Ok(kept) => kept,
            Err(e) => {
                tracing::error!(error = %e, "the health keeper could not read the cards' health");
                return;
            }
        };
        for CardHealth {
            gpu,
            condition,
            since,
            counters,
            ..
        } in kept
        {
            let memory = cards.entry(gpu.uuid).or_default();
            if condition.level == HealthLevel::Healthy && memory.level != HealthLevel::Healthy {
                // Cleared (by an admin, here or elsewhere): held findings go; the counters as
                // they are now become the baseline.
                memory.clear(since.map_or(0, |t| t.timestamp_millis()));
            } else if memory.last.is_none() {
                memory.level = condition.level;
                memory.since_ms = since.map_or(0, |t| t.timestamp_millis());
                memory.held = (condition.findings.iter())
                    .filter(|f| f.level() == HealthLevel::Failing)
                    .cloned()
                    .collect();
                memory.last = counters;
            }
        }
        self.show(cards);
    }

    fn show(&self, cards: &HashMap<String, CardMemory>) {
        let now = self.clock.now_ms();
        self.hub.set_conditions(
            cards
                .iter()
                .map(|(uuid, m)| (uuid.clone(), m.condition(now.max(m.since_ms))))
                .collect(),
        );
    }

    async fn pass(
        &self,
        tick: &Tick,
        cards: &mut HashMap<String, CardMemory>,
    ) -> Result<(), StoreError> {
        let now = DateTime::from_timestamp_millis(tick.at_ms).unwrap_or_else(Utc::now);
        // The Xids of this tick and of any tick skipped when the keeper fell behind; those a
        // failed pass did not record go back to the hub for the next one.
        let mut xids = self.hub.take_xids();
        let judged = self.judge_cards(tick, cards, &mut xids, now).await;
        if judged.is_err() {
            self.hub.give_back_xids(xids);
        }
        judged
    }

    async fn judge_cards(
        &self,
        tick: &Tick,
        cards: &mut HashMap<String, CardMemory>,
        xids: &mut HashMap<String, Vec<lanes_types::health::XidEvent>>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut conditions = HashMap::new();
        for gpu in tick
            .gpus
            .iter()
            .filter(|g| g.node == self.node && self.managed.contains(&g.uuid))
        {
            let memory = cards.entry(gpu.uuid.clone()).or_default();
            let gpu_xids = xids.remove(&gpu.uuid).unwrap_or_default();
            let reading = Reading {
                at_ms: tick.at_ms,
                read: match &gpu.health {
                    Health::Ok => Ok(()),
                    Health::Unhealthy { reason } => {
                        Err((reason.as_str(), reason == crate::telemetry::LOST))
                    }
                },
                counters: gpu.counters.as_ref(),
                xids: &gpu_xids,
            };
            let judged = judge(memory, reading);
            conditions.insert(gpu.uuid.clone(), judged.condition.clone());
            let card = GpuRef {
                node: gpu.node.clone(),
                uuid: gpu.uuid.clone(),
            };
            for (i, xid) in judged.blamed.iter().enumerate() {
                let blamed = self.blame(&card, gpu, memory.level, xid.xid, xid.pid, now);
                if let Err(e) = blamed.await {
                    xids.insert(gpu.uuid.clone(), judged.blamed[i..].to_vec());
                    return Err(e);
                }
            }
            if let Some(from) = judged.changed_from {
                let counters = memory.last.clone();
                self.changed(&card, from, &judged.condition, judged.reset, counters, now)
                    .await?;
            }
        }
        self.hub.set_conditions(conditions);
        Ok(())
    }

    /// An application's Xid: the timeline and the lab channel name the process.
    async fn blame(
        &self,
        card: &GpuRef,
        gpu: &GpuUpdate,
        level: HealthLevel,
        xid: u32,
        pid: Option<u32>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let process = pid.map_or_else(
            || "a process (the driver did not say which)".to_string(),
            |pid| describe_process(pid, &gpu.processes),
        );
        self.store
            .card_health()
            .blame_process(card, level, xid, &process, now)
            .await?;
        let name = self.card_name(card);
        self.notifier.send(Notice::lab(
            "card.process_xid",
            now,
            format!(
                "{name}: Xid {xid} ({}) raised for {process}; the card is not at fault",
                lanes_types::health::xid_meaning(xid)
            ),
            serde_json::json!({"gpu": card, "xid": xid, "process": process}),
        ));
        Ok(())
    }

    async fn changed(
        &self,
        card: &GpuRef,
        from: HealthLevel,
        condition: &Condition,
        reset: bool,
        counters: Option<lanes_types::health::HealthCounters>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let policy = self
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .health
            .clone();
        let name = self.card_name(card);
        let words = condition.words();
        tracing::warn!(card = %name, from = from.as_str(), to = condition.level.as_str(), reason = %words, "card health changed");
        if reset {
            // A reset read the counters clean: back in service, said and audited.
            let audit =
                AuditEntry::new(None, AuditAction::HealthClear, format!("GPU {}", card.uuid))
                    .detail(format!("{name}: a reset showed the counters clean"));
            let drain = self
                .store
                .card_health()
                .clear(card, HealthCause::Reset, counters.as_ref(), audit, now)
                .await?;
            self.notifier.send(Notice::lab(
                "card.cleared",
                now,
                format!(
                    "{name} is back in service: a reset showed its error counters clean{}",
                    drain.map_or(String::new(), |id| format!(" (drain {id} ended)"))
                ),
                serde_json::json!({"gpu": card, "level": condition.level}),
            ));
            return Ok(());
        }
        let failing = condition.level == HealthLevel::Failing;
        let drain = self
            .store
            .card_health()
            .record(
                &NewHealthChange {
                    gpu: card.clone(),
                    condition: condition.clone(),
                    counters,
                    cause: HealthCause::Seen,
                    drain: failing && policy.drain_failing,
                },
                now,
            )
            .await?;
        match condition.level {
            HealthLevel::Failing => {
                let stopped = if policy.stop_jobs_on_failing {
                    self.stop_jobs(card, now).await?
                } else {
                    0
                };
                self.notifier.send(Notice::lab(
                    "card.failing",
                    now,
                    format!(
                        "{name} is failing: {words}{}{}",
                        if drain.is_some() {
                            "; drained (nothing new is placed on it until an admin clears it)"
                        } else {
                            ""
                        },
                        if stopped > 0 {
                            format!("; {stopped} job(s) on it stopped")
                        } else {
                            String::new()
                        }
                    ),
                    serde_json::json!({"gpu": card, "level": "failing", "reason": words, "drain": drain}),
                ));
                self.offer_moves(card, &words, now).await?;
            }
            HealthLevel::Degraded if from == HealthLevel::Healthy && policy.warn_degraded => {
                self.notifier.send(Notice::lab(
                    "card.degraded",
                    now,
                    format!("{name} is degraded: {words}"),
                    serde_json::json!({"gpu": card, "level": "degraded", "reason": words}),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Tells every member with a booking on the failing card (now or later), each with a
    /// one-click move to a healthy card of the node that is free for what is left of it.
    async fn offer_moves(
        &self,
        card: &GpuRef,
        words: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let bookings = self.bookings_on(card, now, None).await?;
        let index = self.index(card);
        for booking in bookings.iter().filter(|b| {
            matches!(b.state, BookingState::Upcoming | BookingState::Active) && b.loan_of.is_none()
        }) {
            let start = booking.start.max(now);
            let target = if booking.queue_job.is_some() {
                None // a queue job's booking is the job's: the queue moves the job
            } else {
                self.store
                    .card_health()
                    .free_card(&card.node, &card.uuid, (start, booking.end))
                    .await?
            };
            let target_index = target.as_ref().map(|t| self.index(t));
            self.notifier.send(
                Notice::lab(
                    "card.failing.booking",
                    now,
                    format!(
                        "booking {} of {} holds {}, which is failing",
                        booking.id,
                        booking.username,
                        self.card_name(card)
                    ),
                    serde_json::json!({
                        "booking_id": booking.id,
                        "gpu": card,
                        "index": index,
                        "reason": words,
                        "start": booking.start,
                        "end": booking.end,
                        "move": target.as_ref().map(|to| serde_json::json!({
                            "from": card, "to": to, "index": target_index,
                        })),
                    }),
                )
                .to(booking.user_id, EventKind::CardFailing),
            );
        }
        Ok(())
    }

    /// Asks the runner to stop every job that runs on the card; how many.
    async fn stop_jobs(&self, card: &GpuRef, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let live = self.store.jobs().live().await?;
        let on_card: BTreeSet<i64> = (self.bookings_on(card, now, Some(now)).await?)
            .iter()
            .map(|b| b.id)
            .collect();
        let mut stopped = 0;
        for job in live
            .iter()
            .filter(|j| j.job.booking_id.is_some_and(|b| on_card.contains(&b)))
        {
            let audit =
                AuditEntry::new(None, AuditAction::JobCancel, format!("job {}", job.job.id))
                    .detail(format!("its card {} is failing", card.uuid));
            if self
                .store
                .jobs()
                .request_cancel(job.job.id, &audit, now)
                .await?
            {
                stopped += 1;
            }
        }
        Ok(stopped)
    }

    /// The bookings that hold `card` after `from` (and, with `at`, at that moment).
    async fn bookings_on(
        &self,
        card: &GpuRef,
        from: DateTime<Utc>,
        at: Option<DateTime<Utc>>,
    ) -> Result<Vec<lanes_types::booking::Booking>, StoreError> {
        let mut bookings = self
            .store
            .bookings()
            .list(
                &BookingFilter {
                    from: Some(from),
                    to: at.map(|t| t + chrono::Duration::milliseconds(1)),
                    gpu_uuid: Some(card.uuid.clone()),
                    ..Default::default()
                },
                from,
            )
            .await?;
        bookings.retain(|b| b.gpus.contains(card));
        Ok(bookings)
    }

    fn index(&self, card: &GpuRef) -> u32 {
        self.hub
            .local_gpus()
            .iter()
            .find(|g| g.info.uuid == card.uuid)
            .map_or(0, |g| g.info.index)
    }

    fn card_name(&self, card: &GpuRef) -> String {
        card_name(self.index(card), &card.node)
    }
}

/// "1234 (alice: python train.py)" from what the card lists, or the bare pid.
fn describe_process(pid: u32, processes: &[GpuProcess]) -> String {
    match processes.iter().find(|p| p.pid == pid) {
        Some(p) => format!(
            "process {pid} ({}: {})",
            p.user.as_deref().unwrap_or("unknown user"),
            p.command.as_deref().unwrap_or("?")
        ),
        None => format!("process {pid}"),
    }
}
