//! The poller: one thread that reads every card at a fixed interval and publishes each tick to
//! the hub. Reading happens off the async runtime because NVML calls block.

use super::hub::Hub;
use super::GpuSource;
use lanes_types::health::XidEvent;
use lanes_types::{GpuProcess, GpuUpdate, Health};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct PollSettings {
    pub interval: Duration,
    /// Process lists cost more than counters (NVML plus /proc), so they may be read less often.
    pub process_interval: Duration,
}

/// Reads a source tick by tick, keeping the last process lists between refreshes.
pub struct Sampler {
    source: Box<dyn GpuSource>,
    processes: Vec<Vec<GpuProcess>>,
    /// Read error counters with the process lists, and hand on Xid events (on by default).
    health: bool,
    /// Xid events seen per card since the sampler started, by Xid (the counters' `xids`).
    xids: Vec<std::collections::BTreeMap<u32, u64>>,
}

impl Sampler {
    pub fn new(source: Box<dyn GpuSource>) -> Self {
        let cards = source.inventory().len();
        Self {
            source,
            processes: vec![Vec::new(); cards],
            health: true,
            xids: vec![Default::default(); cards],
        }
    }

    /// A sampler that reads no error counters and takes no events (the benchmark's reference).
    pub fn without_health(mut self) -> Self {
        self.health = false;
        self
    }

    pub fn source(&self) -> &dyn GpuSource {
        self.source.as_ref()
    }

    /// Reads every card once. A card whose reading fails is reported unhealthy, with no sample
    /// and no processes; the others are read as usual. Error counters are read with the process
    /// lists; Xid events the source gathered since the last poll come with every tick.
    pub fn poll(&mut self, at_ms: i64, refresh_processes: bool) -> Vec<GpuUpdate> {
        let cards = self.source.inventory().len();
        let mut xids: Vec<Vec<XidEvent>> = vec![Vec::new(); cards];
        if self.health {
            for (pos, xid) in self.source.take_xids() {
                if let Some(list) = xids.get_mut(pos) {
                    *self.xids[pos].entry(xid.xid).or_default() += 1;
                    list.push(xid);
                }
            }
        }
        (0..cards)
            .map(|pos| {
                let counters = self.source.read_counters(pos, at_ms);
                let processes = match (&counters, refresh_processes) {
                    (Ok(_), true) => self.source.read_processes(pos).map(|p| {
                        self.processes[pos] = p;
                    }),
                    _ => Ok(()),
                };
                let health_counters = match (&counters, refresh_processes && self.health) {
                    (Ok(_), true) => match self.source.read_health(pos) {
                        Ok(mut read) => {
                            read.xids = self.xids[pos].clone();
                            Some(read)
                        }
                        Err(e) => {
                            tracing::debug!(card = pos, error = %e, "error counters unreadable");
                            None
                        }
                    },
                    _ => None,
                };
                let info = &self.source.inventory()[pos];
                let (health, sample, processes) = match (counters, processes) {
                    (Ok(sample), Ok(())) => (Health::Ok, Some(sample), self.processes[pos].clone()),
                    (Err(e), _) | (Ok(_), Err(e)) => {
                        self.processes[pos].clear();
                        (Health::Unhealthy { reason: e.0 }, None, Vec::new())
                    }
                };
                GpuUpdate {
                    node: info.node.clone(),
                    uuid: info.uuid.clone(),
                    health,
                    sample,
                    processes,
                    idle_booking: None,
                    condition: Default::default(),
                    counters: health_counters,
                    xids: std::mem::take(&mut xids[pos]),
                }
            })
            .collect()
    }
}

/// A running poller; stopping it ends the thread after its current tick.
pub struct Poller {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// Takes the first reading before returning, so the hub is never empty once serving starts.
    /// Readings carry `clock`'s time.
    pub fn start(
        mut sampler: Sampler,
        hub: Arc<Hub>,
        settings: PollSettings,
        clock: crate::runtime::clock::Clock,
    ) -> Self {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let tick = move |sampler: &mut Sampler, refresh: bool| {
            let started = Instant::now();
            let at_ms = clock.now_ms();
            let updates = sampler.poll(at_ms, refresh);
            hub.publish(at_ms, updates, started.elapsed());
        };
        tick(&mut sampler, true);
        let thread = std::thread::Builder::new()
            .name("lanes-poller".into())
            .spawn(move || {
                let mut next = Instant::now() + settings.interval;
                let mut last_processes = Instant::now();
                loop {
                    let wait = next.saturating_duration_since(Instant::now());
                    match stop_rx.recv_timeout(wait) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let refresh = last_processes.elapsed() + settings.interval / 2
                        >= settings.process_interval;
                    if refresh {
                        last_processes = Instant::now();
                    }
                    tick(&mut sampler, refresh);
                    next += settings.interval;
                    // After a stall (suspend, overloaded host) skip the missed ticks rather
                    // than firing them in a burst.
                    let now = Instant::now();
                    if next < now {
                        next = now + settings.interval;
                    }
                }
            })
            .expect("the OS could not start the poller thread");
        Self {
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::Metrics;
    use crate::telemetry::sim::SimulatedFleet;
    use crate::telemetry::SourceError;
    use lanes_types::{GpuInfo, GpuSample, SourceKind};

    /// A simulated fleet whose card at `failing` errors from the given tick on.
    struct FailingCard {
        inner: SimulatedFleet,
        failing: usize,
        fail_from_ms: i64,
        process_reads: usize,
    }

    impl GpuSource for FailingCard {
        fn kind(&self) -> SourceKind {
            SourceKind::Nvml
        }
        fn inventory(&self) -> &[GpuInfo] {
            self.inner.inventory()
        }
        fn read_counters(&mut self, pos: usize, at_ms: i64) -> Result<GpuSample, SourceError> {
            if pos == self.failing && at_ms >= self.fail_from_ms {
                return Err(SourceError("GPU has fallen off the bus".into()));
            }
            self.inner.read_counters(pos, at_ms)
        }
        fn read_processes(&mut self, pos: usize) -> Result<Vec<GpuProcess>, SourceError> {
            self.process_reads += 1;
            self.inner.read_processes(pos)
        }
    }

    fn failing(fail_from_ms: i64) -> Sampler {
        Sampler::new(Box::new(FailingCard {
            inner: SimulatedFleet::new("n", 3, 1),
            failing: 1,
            fail_from_ms,
            process_reads: 0,
        }))
    }

    #[test]
    fn an_error_on_one_card_marks_it_unhealthy_and_the_others_keep_updating() {
        let mut sampler = failing(2_000);
        let before = sampler.poll(1_000, true);
        assert!(before
            .iter()
            .all(|u| u.health.is_ok() && u.sample.is_some()));
        let after = sampler.poll(2_000, true);
        assert_eq!(
            after[1].health,
            Health::Unhealthy {
                reason: "GPU has fallen off the bus".into()
            }
        );
        assert!(after[1].sample.is_none() && after[1].processes.is_empty());
        for i in [0, 2] {
            assert!(after[i].health.is_ok());
            assert_eq!(after[i].sample.as_ref().unwrap().at_ms, 2_000);
        }
    }

    #[test]
    fn process_lists_are_kept_between_refreshes() {
        let mut sampler = failing(i64::MAX);
        let first = sampler.poll(1_000, true);
        let second = sampler.poll(2_000, false);
        for (a, b) in first.iter().zip(&second) {
            assert_eq!(a.processes, b.processes);
        }
    }

    #[test]
    fn the_hub_hands_every_subscriber_each_tick_and_keeps_the_state() {
        let mut sampler = failing(i64::MAX);
        let metrics = Arc::new(Metrics::new());
        let hub = Hub::new(
            "n",
            SourceKind::Simulated,
            Duration::from_secs(1),
            sampler.source().inventory(),
            metrics,
        );
        let mut a = hub.subscribe(crate::telemetry::hub::Viewer::LoggedIn);
        let mut b = hub.subscribe(crate::telemetry::hub::Viewer::LoggedIn);
        hub.publish(1_000, sampler.poll(1_000, true), Duration::from_millis(1));
        for rx in [&mut a, &mut b] {
            let text = rx.try_recv().unwrap();
            assert!(text.as_str().starts_with(r#"{"type":"tick","at_ms":1000"#));
        }
        let snapshot = hub.snapshot();
        assert!(snapshot.gpus.iter().all(|g| g.sample.is_some()));
        assert_eq!(snapshot.history.len(), 3);
    }

    #[test]
    fn a_subscriber_that_never_reads_does_not_hold_back_the_others() {
        let mut sampler = failing(i64::MAX);
        let hub = Hub::new(
            "n",
            SourceKind::Simulated,
            Duration::from_secs(1),
            sampler.source().inventory(),
            Arc::new(Metrics::new()),
        );
        let mut stuck = hub.subscribe(crate::telemetry::hub::Viewer::LoggedIn);
        let mut reader = hub.subscribe(crate::telemetry::hub::Viewer::LoggedIn);
        for t in 0..(crate::telemetry::hub::TICK_BUFFER as i64 * 3) {
            hub.publish(t * 1000, sampler.poll(t * 1000, false), Duration::ZERO);
            assert!(
                reader.try_recv().is_ok(),
                "tick {t} did not reach the reader"
            );
        }
        assert!(matches!(
            stuck.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_))
        ));
    }

    #[test]
    fn the_poller_thread_ticks_at_its_interval_and_stops_promptly() {
        let sampler = Sampler::new(Box::new(SimulatedFleet::new("n", 2, 1)));
        let hub = Arc::new(Hub::new(
            "n",
            SourceKind::Simulated,
            Duration::from_millis(20),
            sampler.source().inventory(),
            Arc::new(Metrics::new()),
        ));
        let mut rx = hub.subscribe(crate::telemetry::hub::Viewer::LoggedIn);
        let clock = crate::runtime::clock::Clock::adjustable();
        clock.advance(chrono::Duration::days(1));
        let poller = Poller::start(
            sampler,
            hub.clone(),
            PollSettings {
                interval: Duration::from_millis(20),
                process_interval: Duration::from_millis(100),
            },
            clock,
        );
        // The first reading is taken before start returns, at the clock's time.
        let first = hub.snapshot();
        assert!(first.gpus.iter().all(|g| g.sample.is_some()));
        let at_ms = first.history[0].points[0].at_ms;
        let ahead = at_ms - chrono::Utc::now().timestamp_millis();
        assert!(
            ahead > 23 * 3_600_000,
            "a reading {ahead} ms ahead of the system clock"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            for _ in 0..3 {
                tokio::time::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .expect("a tick within 5 s")
                    .unwrap();
            }
        });
        let stopped = Instant::now();
        poller.stop();
        assert!(stopped.elapsed() < Duration::from_secs(1));
    }
}
