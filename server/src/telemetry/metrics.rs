//! Prometheus metrics for `/metrics`: per-card gauges set by the poller on every tick, how long
//! each poll took, and the pool's state (bookings, queue, violations, nodes, cards per user)
//! read from the database at each scrape. The pool series are the same on every node of one
//! database; alert rules and dashboards take their `max` across instances
//! (deploy/prometheus/alerts.yml). Label sets are bounded: cards, nodes, users, two queue states.

use lanes_types::GpuUpdate;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::RwLock;
use std::time::Duration;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Labels of every per-card series. `gpu` is the index on its node, for people; `uuid` is the
/// identity.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    pub node: String,
    pub gpu: String,
    pub uuid: String,
    pub name: String,
}

type FloatGauge = Family<GpuLabels, Gauge<f64, AtomicU64>>;

/// A card's labels and one more, naming which of its counters a series is.
macro_rules! card_labels {
    ($name:ident, $($field:ident),+) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct $name {
            #[prometheus(flatten)]
            card: GpuLabels,
            $($field: String,)+
        }
    };
}
card_labels!(XidLabels, xid);
card_labels!(EccLabels, error, counter);
card_labels!(RowLabels, kind);
card_labels!(HealthStateLabels, state);
card_labels!(ReasonLabels, reason);

/// The health series of every card: what `/metrics` shows of the error counters and verdicts.
#[derive(Default)]
struct HealthSeries {
    state: Family<HealthStateLabels, Gauge>,
    xids: Family<XidLabels, ReadCounter>,
    ecc: Family<EccLabels, Gauge>,
    rows: Family<RowLabels, Gauge>,
    retired: Family<RowLabels, Gauge>,
    pcie_replays: Family<GpuLabels, ReadCounter>,
    throttle: Family<ReasonLabels, Gauge>,
}

impl HealthSeries {
    fn register(registry: &mut Registry) -> Self {
        let series = Self::default();
        registry.register(
            "lanes_gpu_health_state",
            "1 for the card's health verdict (healthy, degraded or failing), 0 for the others",
            series.state.clone(),
        );
        registry.register(
            "lanes_gpu_xid_errors",
            "Xid errors the driver reported for the card since Lanes started watching it",
            series.xids.clone(),
        );
        registry.register(
            "lanes_gpu_ecc_errors",
            "ECC errors: corrected or uncorrected, since the driver loaded (volatile) or over the card's life (aggregate)",
            series.ecc.clone(),
        );
        registry.register(
            "lanes_gpu_remapped_rows",
            "Memory rows remapped (correctable, uncorrectable) and remaps pending a reset or failed (1 or 0)",
            series.rows.clone(),
        );
        registry.register(
            "lanes_gpu_retired_pages",
            "Memory pages retired (single_bit, double_bit) and whether more wait for a reset (pending: 1 or 0)",
            series.retired.clone(),
        );
        registry.register(
            "lanes_gpu_pcie_replays",
            "PCIe replays of the card's link (the driver's counter)",
            series.pcie_replays.clone(),
        );
        registry.register(
            "lanes_gpu_clocks_throttled",
            "1 for each reason the card's clocks are held down now",
            series.throttle.clone(),
        );
        series
    }

    fn record(&self, card: &GpuLabels, update: &GpuUpdate) {
        for level in lanes_types::health::HealthLevel::ALL {
            let labels = HealthStateLabels {
                card: card.clone(),
                state: level.as_str().into(),
            };
            self.state
                .get_or_create(&labels)
                .set(i64::from(update.condition.level == level));
        }
        let Some(c) = &update.counters else {
            return;
        };
        for (xid, n) in &c.xids {
            self.xids
                .get_or_create(&XidLabels {
                    card: card.clone(),
                    xid: xid.to_string(),
                })
                .set(*n as f64);
        }
        for (error, counter, value) in [
            ("corrected", "volatile", c.ecc_corrected_volatile),
            ("uncorrected", "volatile", c.ecc_uncorrected_volatile),
            ("corrected", "aggregate", c.ecc_corrected_aggregate),
            ("uncorrected", "aggregate", c.ecc_uncorrected_aggregate),
        ] {
            if let Some(v) = value {
                self.ecc
                    .get_or_create(&EccLabels {
                        card: card.clone(),
                        error: error.into(),
                        counter: counter.into(),
                    })
                    .set(v as i64);
            }
        }
        let flag = |b: Option<bool>| b.map(u32::from);
        for (family, kind, value) in [
            (&self.rows, "correctable", c.remapped_correctable),
            (&self.rows, "uncorrectable", c.remapped_uncorrectable),
            (&self.rows, "pending", flag(c.remap_pending)),
            (&self.rows, "failure", flag(c.remap_failed)),
            (&self.retired, "single_bit", c.retired_single_bit),
            (&self.retired, "double_bit", c.retired_double_bit),
            (&self.retired, "pending", flag(c.retirement_pending)),
        ] {
            if let Some(v) = value {
                family
                    .get_or_create(&RowLabels {
                        card: card.clone(),
                        kind: kind.into(),
                    })
                    .set(i64::from(v));
            }
        }
        if let Some(n) = c.pcie_replays {
            self.pcie_replays.get_or_create(card).set(n as f64);
        }
        // Reasons seen before and not now read 0, so a rule sees the throttling end.
        for reason in lanes_types::health::TROUBLE_THROTTLE
            .iter()
            .map(|r| r.to_string())
            .chain(c.throttle.iter().cloned())
        {
            let on = c.throttle.contains(&reason);
            self.throttle
                .get_or_create(&ReasonLabels {
                    card: card.clone(),
                    reason,
                })
                .set(i64::from(on));
        }
    }
}

/// A counter set to a value read elsewhere: the driver's energy counter, which counts from the
/// driver's load (Prometheus takes a lower value as a reset, as after a restart).
#[derive(Debug, Default)]
struct ReadCounter(AtomicU64);

impl ReadCounter {
    fn set(&self, value: f64) {
        self.0
            .store(value.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }
}

impl prometheus_client::metrics::TypedMetric for ReadCounter {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Counter;
}

impl prometheus_client::encoding::EncodeMetric for ReadCounter {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        let value = f64::from_bits(self.0.load(std::sync::atomic::Ordering::Relaxed));
        encoder.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        <Self as prometheus_client::metrics::TypedMetric>::TYPE
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UserLabel {
    user: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    task: String,
}

/// The pool-level gauges.
struct Pool {
    database_up: Gauge,
    bookings_active: Gauge,
    bookings_upcoming: Gauge,
    bookings_idle: Gauge,
    queue_jobs: Family<StateLabel, Gauge>,
    queue_oldest_wait: Gauge<f64, AtomicU64>,
    violations_open: Gauge,
    node_up: Family<NodeLabel, Gauge>,
    user_gpus_held: Family<UserLabel, Gauge>,
}

pub struct Metrics {
    registry: Registry,
    /// Label sets by (node, uuid), registered once when the card is first seen.
    labels: RwLock<HashMap<(String, String), GpuLabels>>,
    up: FloatGauge,
    utilization: FloatGauge,
    memory_used: FloatGauge,
    memory_total: FloatGauge,
    temperature: FloatGauge,
    power: FloatGauge,
    power_limit: FloatGauge,
    sm_clock: FloatGauge,
    energy: Family<GpuLabels, ReadCounter>,
    poll_duration: Histogram,
    /// Mirrors [`crate::runtime::tasks::panics`] at each scrape.
    task_panics: prometheus_client::metrics::counter::Counter,
    /// Mirrors [`crate::runtime::tasks::restarts`] at each scrape.
    task_restarts: Family<TaskLabel, prometheus_client::metrics::counter::Counter>,
    pool: Pool,
    health: HealthSeries,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut gauge = |name: &str, help: &str| {
            let family = FloatGauge::default();
            registry.register(name, help, family.clone());
            family
        };
        let up = gauge(
            "lanes_gpu_up",
            "1 if the last poll of the GPU succeeded, else 0",
        );
        let utilization = gauge(
            "lanes_gpu_utilization_ratio",
            "Share of the last sample period in which a kernel ran (0 to 1)",
        );
        let memory_used = gauge("lanes_gpu_memory_used_bytes", "GPU memory in use");
        let memory_total = gauge("lanes_gpu_memory_total_bytes", "GPU memory installed");
        let temperature = gauge("lanes_gpu_temperature_celsius", "GPU core temperature");
        let power = gauge("lanes_gpu_power_watts", "Power draw");
        let power_limit = gauge("lanes_gpu_power_limit_watts", "Enforced power limit");
        let sm_clock = gauge("lanes_gpu_sm_clock_hertz", "SM clock");
        let energy = Family::<GpuLabels, ReadCounter>::default();
        registry.register(
            "lanes_gpu_energy_joules",
            "Energy the GPU used since its driver was loaded (the driver's counter)",
            energy.clone(),
        );
        let poll_duration = Histogram::new(exponential_buckets(0.000_1, 2.0, 16));
        registry.register(
            "lanes_poll_duration_seconds",
            "Time to read every GPU once",
            poll_duration.clone(),
        );
        let task_panics = prometheus_client::metrics::counter::Counter::default();
        registry.register(
            "lanes_task_panics",
            "Background tasks (queue, runner, enforcer, history) that panicked and were started again",
            task_panics.clone(),
        );
        let task_restarts =
            Family::<TaskLabel, prometheus_client::metrics::counter::Counter>::default();
        registry.register(
            "lanes_task_restarts",
            "Restarts of each background task after it panicked (every supervised task is listed)",
            task_restarts.clone(),
        );
        let pool = Pool::register(&mut registry);
        let health = HealthSeries::register(&mut registry);
        Self {
            pool,
            health,
            task_panics,
            task_restarts,
            registry,
            labels: RwLock::default(),
            up,
            utilization,
            memory_used,
            memory_total,
            temperature,
            power,
            power_limit,
            sm_clock,
            energy,
            poll_duration,
        }
    }

    /// Declares a card, so its series carry its index and name.
    pub fn register_gpu(&self, info: &lanes_types::GpuInfo) {
        let labels = GpuLabels {
            node: info.node.clone(),
            gpu: info.index.to_string(),
            uuid: info.uuid.clone(),
            name: info.name.clone(),
        };
        self.memory_total
            .get_or_create(&labels)
            .set(info.memory_total_bytes as f64);
        self.labels
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((info.node.clone(), info.uuid.clone()), labels);
    }

    /// Sets every card's gauges from one tick. An unhealthy card reports `up 0` and its
    /// readings are withdrawn rather than left at stale values.
    pub fn record_tick(&self, updates: &[GpuUpdate], poll_duration: Duration) {
        self.poll_duration.observe(poll_duration.as_secs_f64());
        let labels = self.labels.read().unwrap_or_else(|p| p.into_inner());
        for update in updates {
            let Some(l) = labels.get(&(update.node.clone(), update.uuid.clone())) else {
                continue;
            };
            let readings: [(&FloatGauge, Option<f64>); 6] = match &update.sample {
                Some(s) => [
                    (
                        &self.utilization,
                        Some(s.utilization_gpu_pct as f64 / 100.0),
                    ),
                    (&self.memory_used, Some(s.memory_used_bytes as f64)),
                    (&self.temperature, s.temperature_c.map(f64::from)),
                    (&self.power, s.power_watts),
                    (&self.power_limit, s.power_limit_watts),
                    (&self.sm_clock, s.sm_clock_mhz.map(|mhz| mhz as f64 * 1e6)),
                ],
                None => [
                    (&self.utilization, None),
                    (&self.memory_used, None),
                    (&self.temperature, None),
                    (&self.power, None),
                    (&self.power_limit, None),
                    (&self.sm_clock, None),
                ],
            };
            self.health.record(l, update);
            let up = update.health.is_ok() && update.sample.is_some();
            self.up.get_or_create(l).set(if up { 1.0 } else { 0.0 });
            // Kept while a card is unhealthy: a counter that vanishes and comes back reads as
            // a reset.
            if let Some(mj) = update.sample.as_ref().and_then(|s| s.energy_mj) {
                self.energy.get_or_create(l).set(mj as f64 / 1000.0);
            }
            for (family, value) in readings {
                match value {
                    Some(v) => {
                        family.get_or_create(l).set(v);
                    }
                    None => {
                        family.remove(l);
                    }
                }
            }
        }
    }

    /// Sets the pool gauges from one read of the database (`None`: it did not answer, so
    /// `lanes_database_up` is 0 and the rest keep their last values) and the nodes this
    /// instance sees.
    pub fn record_pool(
        &self,
        gauges: Option<&crate::store::PoolGauges>,
        nodes: &[lanes_types::NodeState],
        now: chrono::DateTime<chrono::Utc>,
    ) {
        let p = &self.pool;
        for node in nodes {
            let up = node.status == lanes_types::NodeStatus::Up;
            p.node_up
                .get_or_create(&NodeLabel {
                    node: node.name.clone(),
                })
                .set(i64::from(up));
        }
        let Some(g) = gauges else {
            p.database_up.set(0);
            return;
        };
        p.database_up.set(1);
        p.bookings_active.set(g.bookings_active);
        p.bookings_upcoming.set(g.bookings_upcoming);
        p.bookings_idle.set(g.bookings_idle);
        for (state, n) in [("waiting", g.queue_waiting), ("running", g.queue_running)] {
            p.queue_jobs
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n);
        }
        let wait = g.oldest_waiting_since.map_or(0.0, |since| {
            (now - since).num_milliseconds().max(0) as f64 / 1000.0
        });
        p.queue_oldest_wait.set(wait);
        p.violations_open.set(g.violations_open);
        // Users who let go of their cards leave the series rather than stay at a stale count.
        p.user_gpus_held.clear();
        for (user, n) in &g.gpus_held {
            p.user_gpus_held
                .get_or_create(&UserLabel { user: user.clone() })
                .set(*n);
        }
    }

    /// The exposition in Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        let seen = crate::runtime::tasks::panics();
        self.task_panics
            .inc_by(seen.saturating_sub(self.task_panics.get()));
        for (task, restarts) in crate::runtime::tasks::restarts() {
            let counter = self
                .task_restarts
                .get_or_create(&TaskLabel { task: task.into() });
            counter.inc_by(restarts.saturating_sub(counter.get()));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

impl Pool {
    fn register(registry: &mut Registry) -> Self {
        fn gauge<M: prometheus_client::registry::Metric + Clone + Default>(
            registry: &mut Registry,
            name: &str,
            help: &str,
        ) -> M {
            let metric = M::default();
            registry.register(name, help, metric.clone());
            metric
        }
        Self {
            database_up: gauge(
                registry,
                "lanes_database_up",
                "1 if the last scrape read the pool's state from the database, else 0",
            ),
            bookings_active: gauge(
                registry,
                "lanes_bookings_active",
                "Bookings whose slot is now",
            ),
            bookings_upcoming: gauge(
                registry,
                "lanes_bookings_upcoming",
                "Bookings whose slot starts later",
            ),
            bookings_idle: gauge(
                registry,
                "lanes_bookings_idle",
                "Active bookings whose cards the watchdog found idle",
            ),
            queue_jobs: gauge(
                registry,
                "lanes_queue_jobs",
                "Queue jobs waiting for cards or running",
            ),
            queue_oldest_wait: gauge(
                registry,
                "lanes_queue_oldest_wait_seconds",
                "How long the queue job that has waited longest has waited (0: none waits)",
            ),
            violations_open: gauge(
                registry,
                "lanes_violations_open",
                "Processes using cards they did not book, now",
            ),
            node_up: gauge(
                registry,
                "lanes_node_up",
                "1 if the node heartbeats, 0 if it is unreachable, as this instance sees it",
            ),
            user_gpus_held: gauge(
                registry,
                "lanes_user_gpus_held",
                "Cards each user's active bookings hold",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::{GpuInfo, GpuSample, Health};

    fn info() -> GpuInfo {
        GpuInfo {
            node: "box1".into(),
            uuid: "GPU-1".into(),
            index: 3,
            name: "NVIDIA H200".into(),
            pci_bus_id: "00000000:1A:00.0".into(),
            memory_total_bytes: 1000,
        }
    }

    fn update(sample: Option<GpuSample>, health: Health) -> GpuUpdate {
        GpuUpdate {
            node: "box1".into(),
            uuid: "GPU-1".into(),
            health,
            sample,
            processes: vec![],
            idle_booking: None,
            condition: Default::default(),
            counters: None,
            xids: Vec::new(),
        }
    }

    fn sample() -> GpuSample {
        GpuSample {
            at_ms: 1,
            utilization_gpu_pct: 75,
            utilization_memory_pct: 10,
            memory_used_bytes: 400,
            temperature_c: Some(61),
            power_watts: Some(350.5),
            power_limit_watts: Some(700.0),
            sm_clock_mhz: Some(1980),
            energy_mj: Some(123_456_789),
        }
    }

    #[test]
    fn readings_are_exported_in_base_units_with_card_labels() {
        let m = Metrics::new();
        m.register_gpu(&info());
        m.record_tick(
            &[update(Some(sample()), Health::Ok)],
            Duration::from_millis(2),
        );
        let text = m.render();
        let labels = r#"{node="box1",gpu="3",uuid="GPU-1",name="NVIDIA H200"}"#;
        for line in [
            format!("lanes_gpu_up{labels} 1.0"),
            format!("lanes_gpu_utilization_ratio{labels} 0.75"),
            format!("lanes_gpu_memory_used_bytes{labels} 400.0"),
            format!("lanes_gpu_memory_total_bytes{labels} 1000.0"),
            format!("lanes_gpu_temperature_celsius{labels} 61.0"),
            format!("lanes_gpu_power_watts{labels} 350.5"),
            format!("lanes_gpu_sm_clock_hertz{labels} 1980000000.0"),
            format!("lanes_gpu_energy_joules_total{labels} 123456.789"),
            "# TYPE lanes_gpu_energy_joules_total counter".to_string(),
            "lanes_poll_duration_seconds_count 1".to_string(),
        ] {
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn an_unhealthy_card_is_down_and_its_stale_readings_are_withdrawn() {
        let m = Metrics::new();
        m.register_gpu(&info());
        m.record_tick(&[update(Some(sample()), Health::Ok)], Duration::ZERO);
        m.record_tick(
            &[update(
                None,
                Health::Unhealthy {
                    reason: "lost".into(),
                },
            )],
            Duration::ZERO,
        );
        let text = m.render();
        assert!(
            text.contains(
                r#"lanes_gpu_up{node="box1",gpu="3",uuid="GPU-1",name="NVIDIA H200"} 0.0"#
            ),
            "{text}"
        );
        assert!(!text.contains("lanes_gpu_utilization_ratio{"), "{text}");
        assert!(!text.contains("lanes_gpu_temperature_celsius{"), "{text}");
        assert!(text.contains("lanes_gpu_memory_total_bytes{"), "{text}");
    }

    #[test]
    fn pool_gauges_are_exported_and_a_user_without_cards_leaves() {
        let m = Metrics::new();
        let now = chrono::Utc::now();
        let node = |name: &str, status| lanes_types::NodeState {
            name: name.into(),
            address: String::new(),
            version: String::new(),
            driver: String::new(),
            gpu_source: lanes_types::SourceKind::Simulated,
            status,
            last_seen: now,
            cards: 2,
        };
        let gauges = crate::store::PoolGauges {
            bookings_active: 2,
            bookings_upcoming: 3,
            bookings_idle: 1,
            queue_waiting: 4,
            queue_running: 1,
            oldest_waiting_since: Some(now - chrono::Duration::seconds(90)),
            violations_open: 1,
            gpus_held: vec![("ada".into(), 2), ("bob".into(), 1)],
        };
        let nodes = [
            node("a", lanes_types::NodeStatus::Up),
            node("b", lanes_types::NodeStatus::Unreachable),
        ];
        m.record_pool(Some(&gauges), &nodes, now);
        let text = m.render();
        for line in [
            "lanes_database_up 1",
            "lanes_bookings_active 2",
            "lanes_bookings_upcoming 3",
            "lanes_bookings_idle 1",
            "lanes_queue_jobs{state=\"waiting\"} 4",
            "lanes_queue_jobs{state=\"running\"} 1",
            "lanes_queue_oldest_wait_seconds 90.0",
            "lanes_violations_open 1",
            "lanes_node_up{node=\"a\"} 1",
            "lanes_node_up{node=\"b\"} 0",
            "lanes_user_gpus_held{user=\"ada\"} 2",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        let later = crate::store::PoolGauges {
            gpus_held: vec![("bob".into(), 1)],
            ..gauges
        };
        m.record_pool(Some(&later), &nodes, now);
        let text = m.render();
        assert!(!text.contains("user=\"ada\""), "{text}");
        m.record_pool(None, &nodes, now);
        assert!(m.render().contains("lanes_database_up 0"));
    }
}
