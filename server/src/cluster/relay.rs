//! The bus between nodes: this process's events and ticks go out as NOTIFY messages, and the
//! other processes' come in and are emitted here as if local. Ticks go out only while someone
//! watches: a process with websocket viewers says so on `lanes_watch` when the first arrives
//! and every [`WANT_EVERY`] while any stay, and a node sends its ticks until [`WANT_FOR`] after
//! the last such word. A pool nobody looks at sends no ticks (the portal's first page and the
//! API read each node's last tick from its heartbeat row). A message is small and may be
//! lost (a dropped connection, a process that dies between its commit and its NOTIFY): nothing
//! depends on one arriving. Listeners read the state itself from the database, and after a
//! reconnect every listener is told to look again.

use super::{EVENTS_CHANNEL, TICKS_CHANNEL, WATCH_CHANNEL};
use crate::runtime::events::{Change, Event, Events};
use crate::store::{Notice, Store, MAX_PAYLOAD};
use crate::telemetry::hub::{Hub, Tick};
use lanes_types::GpuUpdate;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// How often a process with viewers says so.
const WANT_EVERY: Duration = Duration::from_secs(10);
/// How long after the last "someone watches" a node keeps sending its ticks.
const WANT_FOR_MS: i64 = 30_000;

/// An event on the wire, with the process it came from (a process hears its own NOTIFYs).
#[derive(Serialize, Deserialize)]
struct EventMessage {
    from: String,
    event: Event,
}

/// A node's tick on the wire (one NOTIFY holds at most [`MAX_PAYLOAD`] bytes, so a large
/// tick goes as several, a card or more each).
#[derive(Serialize, Deserialize)]
pub struct TickMessage {
    pub at_ms: i64,
    pub gpus: Vec<GpuUpdate>,
}

/// Starts relaying (PostgreSQL only: on SQLite there is no one to relay to).
pub async fn start(
    store: Store,
    hub: Arc<Hub>,
    instance: String,
    clock: crate::runtime::clock::Clock,
    shutdown: CancellationToken,
) -> Result<(), crate::store::StoreError> {
    let Some(bus) = store
        .listen(&[EVENTS_CHANNEL, TICKS_CHANNEL, WATCH_CHANNEL])
        .await?
    else {
        return Ok(());
    };
    // Until when (ms) another process's viewers want this node's ticks.
    let wanted_until = Arc::new(AtomicI64::new(0));
    let (want_store, want_hub, want_from, stop) = (
        store.clone(),
        hub.clone(),
        instance.clone(),
        shutdown.clone(),
    );
    crate::runtime::tasks::supervise("watch relay", shutdown.clone(), move || {
        send_wants(
            want_store.clone(),
            want_hub.clone(),
            want_from.clone(),
            stop.clone(),
        )
    });
    // A restarted task takes up the same receiving ends again.
    if let Some(outgoing) = store.events().relay() {
        let outgoing = Arc::new(tokio::sync::Mutex::new(outgoing));
        let (store, instance, stop) = (store.clone(), instance.clone(), shutdown.clone());
        crate::runtime::tasks::supervise("event relay", shutdown.clone(), move || {
            send_events(
                store.clone(),
                outgoing.clone(),
                instance.clone(),
                stop.clone(),
            )
        });
    }
    let (ticks_store, ticks_hub, stop) = (store.clone(), hub.clone(), shutdown.clone());
    let wanted = wanted_until.clone();
    crate::runtime::tasks::supervise("tick relay", shutdown.clone(), move || {
        send_ticks(
            ticks_store.clone(),
            ticks_hub.subscribe_raw(),
            wanted.clone(),
            stop.clone(),
        )
    });
    let bus = Arc::new(tokio::sync::Mutex::new(bus));
    let stop = shutdown.clone();
    crate::runtime::tasks::supervise("relay receiver", shutdown, move || {
        receive(
            bus.clone(),
            store.clone(),
            hub.clone(),
            instance.clone(),
            wanted_until.clone(),
            clock.clone(),
            stop.clone(),
        )
    });
    Ok(())
}

async fn send_events(
    store: Store,
    outgoing: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Event>>>,
    from: String,
    shutdown: CancellationToken,
) {
    let mut outgoing = outgoing.lock().await;
    loop {
        let first = tokio::select! {
            event = outgoing.recv() => event,
            _ = shutdown.cancelled() => None,
        };
        let Some(first) = first else { break };
        // A burst of writes goes out as one message per kind of event.
        let mut burst = vec![first];
        while let Ok(event) = outgoing.try_recv() {
            if !burst.contains(&event) {
                burst.push(event);
            }
        }
        for event in burst {
            let message = EventMessage {
                from: from.clone(),
                event,
            };
            let Ok(payload) = serde_json::to_string(&message) else {
                continue;
            };
            if let Err(e) = store.notify(EVENTS_CHANNEL, &payload).await {
                tracing::debug!(error = %e, "could not relay an event to the other nodes");
            }
        }
    }
}

/// Says "someone watches" while this process has viewers: when the first arrives, then every
/// [`WANT_EVERY`] while any stay.
async fn send_wants(store: Store, hub: Arc<Hub>, from: String, shutdown: CancellationToken) {
    loop {
        if hub.viewers() == 0 {
            tokio::select! {
                _ = hub.viewer_joined() => {}
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        if let Err(e) = store.notify(WATCH_CHANNEL, &from).await {
            tracing::debug!(error = %e, "could not ask the other nodes for their ticks");
        }
        tokio::select! {
            _ = tokio::time::sleep(WANT_EVERY) => {}
            _ = shutdown.cancelled() => break,
        }
    }
}

async fn send_ticks(
    store: Store,
    mut ticks: tokio::sync::broadcast::Receiver<Arc<Tick>>,
    wanted_until: Arc<AtomicI64>,
    shutdown: CancellationToken,
) {
    loop {
        let tick = tokio::select! {
            tick = ticks.recv() => tick,
            _ = shutdown.cancelled() => break,
        };
        let tick = match tick {
            Ok(tick) => tick,
            // The database was slow: the ticks missed are stale anyway.
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => break,
        };
        // Nobody on another process watches: the tick stays here.
        if tick.gpus.is_empty() || tick.at_ms > wanted_until.load(Ordering::Relaxed) {
            continue;
        }
        for payload in tick_payloads(tick.at_ms, &tick.gpus) {
            if let Err(e) = store.notify(TICKS_CHANNEL, &payload).await {
                tracing::debug!(error = %e, "could not relay a tick to the other nodes");
                break;
            }
        }
    }
}

/// A tick as NOTIFY payloads of at most [`MAX_PAYLOAD`] bytes: as few as possible, whole cards
/// each. A card too large alone (hundreds of processes) goes with as many processes as fit.
pub fn tick_payloads(at_ms: i64, gpus: &[GpuUpdate]) -> Vec<String> {
    let encode = |gpus: Vec<GpuUpdate>| {
        serde_json::to_string(&TickMessage { at_ms, gpus }).unwrap_or_default()
    };
    let whole = encode(gpus.to_vec());
    if whole.len() <= MAX_PAYLOAD {
        return vec![whole];
    }
    let mut payloads = Vec::new();
    let mut batch: Vec<GpuUpdate> = Vec::new();
    for gpu in gpus {
        let mut with = batch.clone();
        with.push(gpu.clone());
        if encode(with.clone()).len() <= MAX_PAYLOAD {
            batch = with;
            continue;
        }
        if !batch.is_empty() {
            payloads.push(encode(std::mem::take(&mut batch)));
        }
        let mut alone = gpu.clone();
        while encode(vec![alone.clone()]).len() > MAX_PAYLOAD && !alone.processes.is_empty() {
            alone.processes.pop();
        }
        batch.push(alone);
    }
    if !batch.is_empty() {
        payloads.push(encode(batch));
    }
    payloads
}

async fn receive(
    bus: Arc<tokio::sync::Mutex<crate::store::Bus>>,
    store: Store,
    hub: Arc<Hub>,
    instance: String,
    wanted_until: Arc<AtomicI64>,
    clock: crate::runtime::clock::Clock,
    shutdown: CancellationToken,
) {
    let mut bus = bus.lock().await;
    let events = store.events().clone();
    loop {
        let notice = tokio::select! {
            notice = bus.recv() => notice,
            _ = shutdown.cancelled() => break,
        };
        match notice {
            Ok(Some(notice)) if notice.channel == WATCH_CHANNEL => {
                // Another process's viewers (this one's see its ticks directly).
                if notice.payload != instance {
                    let until = clock.now_ms() + WANT_FOR_MS;
                    wanted_until.fetch_max(until, Ordering::Relaxed);
                }
            }
            Ok(Some(notice)) => handle(&notice, &events, &hub, &instance),
            Ok(None) => {
                tracing::info!("the link to the other nodes is back; looking again at everything");
                events.emit_here(Event::CardsChanged(Change::PoolChanged));
                events.emit_here(Event::JobsChanged(Change::PoolChanged));
            }
            Err(e) => {
                tracing::warn!(error = %e, "the link to the other nodes failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn handle(notice: &Notice, events: &Events, hub: &Hub, instance: &str) {
    match notice.channel.as_str() {
        EVENTS_CHANNEL => match serde_json::from_str::<EventMessage>(&notice.payload) {
            Ok(message) if message.from != instance => events.emit_here(message.event),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "unreadable event from another node"),
        },
        TICKS_CHANNEL => match serde_json::from_str::<TickMessage>(&notice.payload) {
            Ok(tick) => hub.publish_remote(tick.at_ms, tick.gpus),
            Err(e) => tracing::debug!(error = %e, "unreadable tick from another node"),
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::{GpuProcess, Health};

    fn card(i: usize, processes: usize) -> GpuUpdate {
        GpuUpdate {
            node: "n".into(),
            uuid: format!("GPU-{i}"),
            health: Health::Ok,
            sample: None,
            processes: (0..processes)
                .map(|p| GpuProcess {
                    pid: p as u32,
                    user: Some("someone".into()),
                    command: Some("python train.py --a-long-argument-list".repeat(3)),
                    used_memory_bytes: Some(1 << 30),
                    lane: None,
                    sm_pct: None,
                    mem_pct: None,
                    simulated: false,
                    container: None,
                })
                .collect(),
            idle_booking: None,
            condition: Default::default(),
            counters: None,
            xids: Vec::new(),
        }
    }

    #[test]
    fn a_tick_fits_in_notify_payloads_and_loses_no_card() {
        let small: Vec<GpuUpdate> = (0..8).map(|i| card(i, 1)).collect();
        assert_eq!(tick_payloads(1, &small).len(), 1);
        let large: Vec<GpuUpdate> = (0..8).map(|i| card(i, 30)).collect();
        let payloads = tick_payloads(1, &large);
        assert!(payloads.len() > 1);
        let mut seen = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= MAX_PAYLOAD, "{} bytes", payload.len());
            let tick: TickMessage = serde_json::from_str(payload).unwrap();
            seen.extend(tick.gpus.into_iter().map(|g| (g.uuid, g.processes.len())));
        }
        let expected: Vec<(String, usize)> = (0..8).map(|i| (format!("GPU-{i}"), 30)).collect();
        assert_eq!(seen, expected);
        // One card with more processes than fit goes with as many as fit.
        let huge = tick_payloads(1, &[card(0, 1000)]);
        assert_eq!(huge.len(), 1);
        assert!(huge[0].len() <= MAX_PAYLOAD);
    }
}
