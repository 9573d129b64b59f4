//! The hub between the poller and its consumers: it keeps the fleet's current state and last
//! five minutes for newcomers, and fans each tick out to every subscriber without ever waiting
//! for one of them.

use crate::metrics::Metrics;
use axum::extract::ws::Utf8Bytes;
use lanes_app::model::{
    FleetSnapshot, GpuInfo, GpuState, GpuUpdate, Health, SourceKind, TelemetryMessage,
};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// Ticks a subscriber may fall behind before it is told it lagged (and the websocket drops it).
pub const TICK_BUFFER: usize = 16;

pub struct Hub {
    state: RwLock<FleetSnapshot>,
    /// Each tick serialized once, shared by every subscriber.
    ticks: broadcast::Sender<Utf8Bytes>,
    metrics: Arc<Metrics>,
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
            metrics,
        }
    }

    /// Records one poll and sends it to every subscriber. Never blocks on a consumer.
    pub fn publish(&self, at_ms: i64, updates: Vec<GpuUpdate>, poll_duration: Duration) {
        self.metrics.record_tick(&updates, poll_duration);
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .apply_updates(updates.clone());
        let message = TelemetryMessage::Tick {
            at_ms,
            gpus: updates,
        };
        if let Ok(text) = serde_json::to_string(&message) {
            // An error only means nobody is listening right now.
            let _ = self.ticks.send(Utf8Bytes::from(text));
        }
    }

    /// Ticks from now on. Subscribe before taking the snapshot, so that no tick falls between.
    pub fn subscribe(&self) -> broadcast::Receiver<Utf8Bytes> {
        self.ticks.subscribe()
    }

    pub fn snapshot(&self) -> FleetSnapshot {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The snapshot as the first websocket message.
    pub fn snapshot_frame(&self) -> Utf8Bytes {
        let message = TelemetryMessage::Snapshot(self.snapshot());
        Utf8Bytes::from(serde_json::to_string(&message).unwrap_or_default())
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

impl lanes_app::ssr::FleetView for Hub {
    fn snapshot(&self) -> FleetSnapshot {
        Hub::snapshot(self)
    }
}
