//! The hub between the poller and its consumers: it keeps the fleet's current state and last
//! five minutes for newcomers, and fans each tick out to every subscriber without ever waiting
//! for one of them.

use crate::metrics::Metrics;
use axum::extract::ws::Utf8Bytes;
use lanes_types::{
    FleetSnapshot, GpuInfo, GpuState, GpuUpdate, Health, ProcessLane, SourceKind, TelemetryMessage,
};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// Ticks a subscriber may fall behind before it is told it lagged (and the websocket drops it).
pub const TICK_BUFFER: usize = 16;

pub struct Hub {
    state: RwLock<FleetSnapshot>,
    /// Each tick serialized once, shared by every logged-in subscriber.
    ticks: broadcast::Sender<Utf8Bytes>,
    /// The same ticks without process owners and commands, for anonymous viewers (serialized
    /// only while someone listens).
    anonymous_ticks: broadcast::Sender<Utf8Bytes>,
    /// Each tick as data, for the watchdog.
    raw_ticks: broadcast::Sender<Arc<Tick>>,
    /// The watchdog's latest judgement of each card, applied to the ticks that follow.
    notes: RwLock<HashMap<String, CardNotes>>,
    metrics: Arc<Metrics>,
}

/// One poll of every card.
#[derive(Clone, Debug)]
pub struct Tick {
    pub at_ms: i64,
    pub gpus: Vec<GpuUpdate>,
}

/// What the watchdog found on one card (by UUID).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CardNotes {
    pub lanes: HashMap<u32, ProcessLane>,
    pub idle_booking: Option<i64>,
}

impl Hub {
    pub fn new(
        source: SourceKind,
        interval: Duration,
        inventory: &[GpuInfo],
        metrics: Arc<Metrics>,
    ) -> Self {
        let gpus = inventory
            .iter()
            .map(|info| GpuState {
                info: info.clone(),
                health: Health::Ok,
                sample: None,
                processes: Vec::new(),
                idle_booking: None,
            })
            .collect();
        let state = FleetSnapshot {
            source,
            interval_ms: interval.as_millis() as u64,
            gpus,
            history: Vec::new(),
        };
        Self {
            state: RwLock::new(state),
            ticks: broadcast::channel(TICK_BUFFER).0,
            anonymous_ticks: broadcast::channel(TICK_BUFFER).0,
            raw_ticks: broadcast::channel(TICK_BUFFER).0,
            notes: RwLock::default(),
            metrics,
        }
    }

    /// Records one poll and sends it to every subscriber. Never blocks on a consumer.
    pub fn publish(&self, at_ms: i64, mut updates: Vec<GpuUpdate>, poll_duration: Duration) {
        self.metrics.record_tick(&updates, poll_duration);
        self.annotate(&mut updates);
        if self.raw_ticks.receiver_count() > 0 {
            let _ = self.raw_ticks.send(Arc::new(Tick {
                at_ms,
                gpus: updates.clone(),
            }));
        }
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .apply_updates(updates.clone());
        let message = TelemetryMessage::Tick {
            at_ms,
            gpus: updates,
        };
        // Send errors only mean nobody is listening right now.
        if self.anonymous_ticks.receiver_count() > 0 {
            let _ = self
                .anonymous_ticks
                .send(frame(&message.clone().anonymized()));
        }
        let _ = self.ticks.send(frame(&message));
    }

    /// Ticks from now on, as data (for the watchdog).
    pub fn subscribe_raw(&self) -> broadcast::Receiver<Arc<Tick>> {
        self.raw_ticks.subscribe()
    }

    /// Replaces the watchdog's notes; they mark the processes and cards of the ticks that follow.
    pub fn set_notes(&self, notes: HashMap<String, CardNotes>) {
        *self.notes.write().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    fn annotate(&self, updates: &mut [GpuUpdate]) {
        let notes = self.notes.read().unwrap_or_else(|p| p.into_inner());
        for update in updates {
            let Some(card) = notes.get(&update.uuid) else {
                continue;
            };
            update.idle_booking = card.idle_booking;
            for process in &mut update.processes {
                process.lane = card.lanes.get(&process.pid).copied();
            }
        }
    }

    /// Ticks from now on, as `viewer` may see them. Subscribe before taking the snapshot, so
    /// that no tick falls between.
    pub fn subscribe(&self, viewer: Viewer) -> broadcast::Receiver<Utf8Bytes> {
        match viewer {
            Viewer::LoggedIn => self.ticks.subscribe(),
            Viewer::Anonymous => self.anonymous_ticks.subscribe(),
        }
    }

    pub fn snapshot(&self) -> FleetSnapshot {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The snapshot as the first websocket message for `viewer`.
    pub fn snapshot_frame(&self, viewer: Viewer) -> Utf8Bytes {
        let message = TelemetryMessage::Snapshot(self.snapshot());
        match viewer {
            Viewer::LoggedIn => frame(&message),
            Viewer::Anonymous => frame(&message.anonymized()),
        }
    }

    pub fn gpus(&self) -> Vec<GpuState> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .gpus
            .clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Who watches: logged-in users see process owners and commands, anonymous viewers do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Viewer {
    LoggedIn,
    Anonymous,
}

fn frame(message: &TelemetryMessage) -> Utf8Bytes {
    Utf8Bytes::from(serde_json::to_string(message).unwrap_or_default())
}

impl lanes_app::ssr::FleetView for Hub {
    fn snapshot(&self) -> FleetSnapshot {
        Hub::snapshot(self)
    }
}
