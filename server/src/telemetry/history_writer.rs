//! The history writer: takes each tick from the hub, buffers the readings (and the energy and
//! per-process use each adds to its card's minute), and every few seconds (or when asked to
//! flush) writes them, rolls up the minutes and hours that became whole, and now and then
//! prunes what retention no longer keeps. Writes run on their own task, so a slow disk
//! never delays a tick; if the writer falls too far behind, ticks are dropped and show as a gap.

use crate::history::usage::CardMeter;
use crate::history::{HistorySettings, Reading, Retention};
use crate::store::{MinuteUse, Store, StoreError};
use crate::telemetry::hub::Hub;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Pruning runs at most this often.
const PRUNE_EVERY_S: i64 = 600;

/// Starts the writer; the returned task ends after a last flush once `shutdown` fires. A flush
/// asked of `flushes` writes what is buffered at once and is served once it is written.
pub fn start(
    store: Store,
    hub: Arc<Hub>,
    settings: HistorySettings,
    flushes: crate::runtime::tasks::Passes,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let first_ticks = std::sync::Mutex::new(Some(hub.subscribe_raw()));
    crate::runtime::tasks::supervise("history writer", shutdown.clone(), move || {
        // The first run takes the subscription made before start returned (no reading is
        // missed); a restarted one subscribes afresh.
        let ticks = first_ticks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| hub.subscribe_raw());
        run(
            store.clone(),
            ticks,
            settings,
            flushes.clone(),
            shutdown.clone(),
        )
    })
}

/// What the writer holds between flushes.
#[derive(Default)]
struct Pending {
    ids: HashMap<(String, String), i64>,
    buffer: Vec<(i64, Reading)>,
    /// Energy and per-process use, by card id and minute, and each card's meter.
    usage: HashMap<(i64, i64), MinuteUse>,
    meters: HashMap<i64, CardMeter>,
    last_prune: Option<i64>,
    /// Rollups: the minute of the newest reading at the last one, and the oldest reading
    /// written since (a rollup only has work once a minute is whole, or a late reading came).
    rolled_minute: Option<i64>,
    touched_from: Option<i64>,
}

/// One write's worth: readings, minutes of use, where a rollup starts and whether to prune.
struct Batch {
    readings: Vec<(i64, Reading)>,
    minutes: HashMap<(i64, i64), MinuteUse>,
    roll: Option<i64>,
    prune: Option<Retention>,
}

impl Batch {
    async fn write(self, store: &Store) {
        if let Err(e) = write(store, &self.readings, &self.minutes, self.roll, self.prune).await {
            tracing::error!(error = %e, readings = self.readings.len(), "history: writing failed; those readings are a gap");
        }
    }
}

impl Pending {
    async fn take_tick(&mut self, store: &Store, tick: &crate::telemetry::hub::Tick) {
        for gpu in &tick.gpus {
            let Some(sample) = &gpu.sample else { continue };
            let key = (gpu.node.clone(), gpu.uuid.clone());
            if !self.ids.contains_key(&key) {
                match store.history().gpu_ids().await {
                    Ok(found) => self.ids = found,
                    Err(e) => tracing::warn!(error = %e, "history: cannot read the card list"),
                }
            }
            if let Some(id) = self.ids.get(&key) {
                self.buffer.push((*id, Reading::of(sample)));
                let used = self
                    .meters
                    .entry(*id)
                    .or_default()
                    .read(sample, &gpu.processes);
                let minute = self.usage.entry((*id, used.minute)).or_default();
                minute.energy_mj += used.energy_mj;
                for (who, part) in &used.processes {
                    minute.processes.entry(who.clone()).or_default().add(part);
                }
            }
        }
    }

    /// What to write now (`None`: nothing was read since the last flush).
    fn batch(&mut self, retention: Retention) -> Option<Batch> {
        if self.buffer.is_empty() {
            return None;
        }
        let readings = std::mem::take(&mut self.buffer);
        let minutes = std::mem::take(&mut self.usage);
        let now = readings.iter().map(|(_, r)| r.t).max().unwrap_or_default();
        let oldest = readings.iter().map(|(_, r)| r.t).min().unwrap_or(now);
        let from = self.touched_from.map_or(oldest, |t| t.min(oldest));
        let roll = rollup_due(self.rolled_minute, from, now);
        if roll {
            self.rolled_minute = Some(now.div_euclid(60));
            self.touched_from = None;
        } else {
            self.touched_from = Some(from);
        }
        let prune = self
            .last_prune
            .is_none_or(|last| now - last >= PRUNE_EVERY_S);
        if prune {
            self.last_prune = Some(now);
        }
        Some(Batch {
            readings,
            minutes,
            roll: roll.then_some(from),
            prune: prune.then_some(retention),
        })
    }

    /// The last write at shutdown: whatever is left, rolled up, not pruned.
    fn last(self) -> Batch {
        let oldest = self.buffer.iter().map(|(_, r)| r.t).min();
        Batch {
            roll: self.touched_from.into_iter().chain(oldest).min(),
            readings: self.buffer,
            minutes: self.usage,
            prune: None,
        }
    }
}

async fn run(
    store: Store,
    mut ticks: tokio::sync::broadcast::Receiver<Arc<crate::telemetry::hub::Tick>>,
    settings: HistorySettings,
    flushes: crate::runtime::tasks::Passes,
    shutdown: CancellationToken,
) {
    let mut pending = Pending::default();
    let mut in_flight: Option<JoinHandle<()>> = None;
    let mut timer = tokio::time::interval(settings.flush_every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            tick = ticks.recv() => match tick {
                Ok(tick) => pending.take_tick(&store, &tick).await,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "history: the writer fell behind; those ticks are a gap");
                }
                Err(RecvError::Closed) => break,
            },
            _ = timer.tick() => {
                if in_flight.as_ref().is_some_and(|f| !f.is_finished()) {
                    continue;
                }
                if let Some(batch) = pending.batch(settings.retention) {
                    let store = store.clone();
                    in_flight = Some(tokio::spawn(async move { batch.write(&store).await }));
                }
            }
            _ = flushes.requested() => {
                // Every tick sent before the request, written before it is served.
                let asked = flushes.asked();
                while let Ok(tick) = ticks.try_recv() {
                    pending.take_tick(&store, &tick).await;
                }
                if let Some(flight) = in_flight.take() {
                    let _ = flight.await;
                }
                if let Some(batch) = pending.batch(settings.retention) {
                    batch.write(&store).await;
                }
                flushes.served(asked);
            }
            _ = shutdown.cancelled() => break,
        }
    }
    if let Some(flight) = in_flight {
        let _ = flight.await;
    }
    pending.last().write(&store).await;
}

/// Whether a flush whose newest reading is at `newest` (and whose unrolled readings start at
/// `touched_from`) rolls up: once per minute the newest reading moved into, or at once for a
/// reading that came late into a minute already rolled up. Between, a rollup would find no
/// whole minute to add (a fifth of an idle node's transactions went to that).
fn rollup_due(rolled_minute: Option<i64>, touched_from: i64, newest: i64) -> bool {
    match rolled_minute {
        None => true,
        Some(minute) => newest.div_euclid(60) != minute || touched_from < minute * 60,
    }
}

/// Writes a batch, rolls up (from `roll`, the oldest reading not rolled up yet) what became
/// whole, and prunes if asked.
async fn write(
    store: &Store,
    batch: &[(i64, Reading)],
    minutes: &HashMap<(i64, i64), MinuteUse>,
    roll: Option<i64>,
    prune: Option<Retention>,
) -> Result<(), StoreError> {
    let Some(newest) = batch.iter().map(|(_, r)| r.t).max() else {
        return store.usage().add(minutes).await;
    };
    store.history().write_readings(batch, minutes).await?;
    // Everything before the newest second is final (a faster poll may still replace it).
    if let Some(oldest) = roll {
        store.history().roll_up(oldest, newest).await?;
    }
    if let Some(retention) = prune {
        let before = |keep: Duration| newest - keep.as_secs() as i64;
        store
            .history()
            .prune(
                before(retention.raw),
                before(retention.minute),
                retention.hour.map(before),
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rollup_due;

    #[test]
    fn a_rollup_runs_once_a_minute_and_for_late_readings() {
        // The first flush rolls up (whatever an earlier run left).
        assert!(rollup_due(None, 600, 605));
        // Rolled in minute 10: flushes within it have no whole minute to add...
        assert!(!rollup_due(Some(10), 605, 610));
        assert!(!rollup_due(Some(10), 600, 659));
        // ...the first flush in minute 11 has one...
        assert!(rollup_due(Some(10), 605, 660));
        // ...and a reading that came late into minute 9 is rolled up at once.
        assert!(rollup_due(Some(10), 599, 615));
    }
}
