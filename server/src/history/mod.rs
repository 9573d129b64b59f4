//! Utilization history: every card's readings kept compactly, rolled up into minute and hour
//! buckets as time passes, and read back at the resolution a range needs. This module holds the
//! rules (which resolution answers a query, how readings are stored); `writer` moves readings
//! from the hub to the store off the poller's path; the SQL lives in `store::history`.

pub mod block;
pub mod usage;

use lanes_types::GpuSample;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One reading as stored: integers only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Unix seconds.
    pub t: i64,
    pub util: i64,
    pub mem_mib: i64,
    pub temp_c: Option<i64>,
    /// Tenths of a watt.
    pub power_dw: Option<i64>,
    pub clock_mhz: Option<i64>,
}

impl Reading {
    pub fn of(sample: &GpuSample) -> Self {
        Self {
            t: sample.at_ms.div_euclid(1000),
            util: i64::from(sample.utilization_gpu_pct),
            mem_mib: (sample.memory_used_bytes >> 20) as i64,
            temp_c: sample.temperature_c.map(i64::from),
            power_dw: sample.power_watts.map(|w| (w * 10.0).round() as i64),
            clock_mhz: sample.sm_clock_mhz.map(i64::from),
        }
    }
}

/// What a history query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Utilization,
    Memory,
    Temperature,
    Power,
    SmClock,
}

impl Metric {
    /// Column of the raw table, and prefix of the rollup columns.
    pub fn column(self) -> (&'static str, &'static str) {
        match self {
            Metric::Utilization => ("util", "util"),
            Metric::Memory => ("mem_mib", "mem"),
            Metric::Temperature => ("temp_c", "temp"),
            Metric::Power => ("power_dw", "power"),
            Metric::SmClock => ("clock_mhz", "clock"),
        }
    }

    /// Stored units to the units the API speaks (percent, bytes, °C, watts, MHz).
    pub fn scale(self) -> f64 {
        match self {
            Metric::Memory => 1_048_576.0,
            Metric::Power => 0.1,
            _ => 1.0,
        }
    }

    /// Its column in a compressed block of raw readings.
    pub fn block_column(self) -> block::Column {
        match self {
            Metric::Utilization => block::Column::Util,
            Metric::Memory => block::Column::Mem,
            Metric::Temperature => block::Column::Temp,
            Metric::Power => block::Column::Power,
            Metric::SmClock => block::Column::Clock,
        }
    }

    /// Whether every reading has it (the others keep their own count in rollups).
    pub fn always_present(self) -> bool {
        matches!(self, Metric::Utilization | Metric::Memory)
    }
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "utilization" => Metric::Utilization,
            "memory" => Metric::Memory,
            "temperature" => Metric::Temperature,
            "power" => Metric::Power,
            "sm_clock" => Metric::SmClock,
            other => {
                return Err(format!(
                    "unknown metric {other:?}: expected utilization, memory, temperature, power or sm_clock"
                ))
            }
        })
    }
}

/// Where readings of a resolution live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resolution {
    #[serde(rename = "raw")]
    Raw,
    #[serde(rename = "1m")]
    Minute,
    #[serde(rename = "10m")]
    TenMinutes,
    #[serde(rename = "1h")]
    Hour,
}

impl Resolution {
    pub fn seconds(self) -> i64 {
        match self {
            Resolution::Raw => 1,
            Resolution::Minute => 60,
            Resolution::TenMinutes => 600,
            Resolution::Hour => 3600,
        }
    }

    pub fn table(self) -> &'static str {
        match self {
            Resolution::Raw => "samples_raw",
            Resolution::Minute => "samples_1m",
            Resolution::TenMinutes => "samples_10m",
            Resolution::Hour => "samples_1h",
        }
    }
}

/// How long each resolution is kept. `None`: forever. Ten-minute buckets are kept as long as
/// hours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub raw: Duration,
    pub minute: Duration,
    pub hour: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            raw: Duration::from_secs(48 * 3600),
            minute: Duration::from_secs(90 * 24 * 3600),
            hour: None,
        }
    }
}

impl Retention {
    /// The finest resolution that still holds data as old as `from` (Unix seconds) at `now`.
    fn finest_holding(&self, from: i64, now: i64) -> Resolution {
        let age = (now - from).max(0) as u64;
        if age <= self.raw.as_secs() {
            Resolution::Raw
        } else if age <= self.minute.as_secs() {
            Resolution::Minute
        } else {
            Resolution::TenMinutes
        }
    }
}

/// How a query is answered: from which table, in output buckets of how many seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub resolution: Resolution,
    pub bucket_s: i64,
}

/// Most points a query may ask for.
pub const MAX_POINTS: i64 = 10_000;

/// The coarsest resolution that still gives at least `points` buckets over `[from, to)` (but
/// never one finer than retention still holds there), and output buckets wide enough that
/// there are at most `points` of them.
pub fn plan(from: i64, to: i64, points: i64, retention: &Retention, now: i64) -> Plan {
    let range = (to - from).max(1);
    let points = points.clamp(1, MAX_POINTS);
    let wanted = [
        Resolution::Hour,
        Resolution::TenMinutes,
        Resolution::Minute,
        Resolution::Raw,
    ]
    .into_iter()
    .find(|r| range / r.seconds() >= points)
    .unwrap_or(Resolution::Raw);
    let resolution = wanted.max(retention.finest_holding(from, now));
    let step = resolution.seconds();
    // ceil(range / points), rounded up to whole buckets of the resolution.
    let width = (range + points - 1) / points;
    let bucket_s = ((width + step - 1) / step).max(1) * step;
    Plan {
        resolution,
        bucket_s,
    }
}

#[derive(Clone, Copy, Debug)]
pub struct HistorySettings {
    pub retention: Retention,
    /// How often buffered readings are written.
    pub flush_every: Duration,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            retention: Retention::default(),
            flush_every: Duration::from_secs(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const HOUR: i64 = 3600;
    const DAY: i64 = 86_400;

    fn plan_for(range: i64, points: i64) -> Plan {
        plan(NOW - range, NOW, points, &Retention::default(), NOW)
    }

    #[test]
    fn the_coarsest_resolution_with_enough_buckets_answers() {
        // 1 h at 1,000 points: minutes give only 60 buckets, so raw seconds, 4 s apiece.
        assert_eq!(
            plan_for(HOUR, 1000),
            Plan {
                resolution: Resolution::Raw,
                bucket_s: 4
            }
        );
        // 24 h: 1,440 minutes ≥ 1,000, but raw is kept 48 h; minutes are coarser and enough.
        assert_eq!(
            plan_for(DAY, 1000),
            Plan {
                resolution: Resolution::Minute,
                bucket_s: 120
            }
        );
        // 7 d: 1,008 ten-minute buckets; hours give only 168.
        assert_eq!(
            plan_for(7 * DAY, 1000),
            Plan {
                resolution: Resolution::TenMinutes,
                bucket_s: 1200
            }
        );
        // 30 d at 1,000 points: 4,320 ten-minute buckets; 720 hours are too few.
        assert_eq!(plan_for(30 * DAY, 1000).resolution, Resolution::TenMinutes);
        // 30 d at 500 points: 720 hours are enough.
        assert_eq!(
            plan_for(30 * DAY, 500),
            Plan {
                resolution: Resolution::Hour,
                bucket_s: 2 * HOUR
            }
        );
    }

    #[test]
    fn never_more_buckets_than_points_and_never_a_resolution_retention_dropped() {
        for range in [60, HOUR, DAY, 7 * DAY, 30 * DAY, 400 * DAY] {
            for points in [1, 7, 100, 1000, 5000] {
                let p = plan_for(range, points);
                assert!(
                    (range + p.bucket_s - 1) / p.bucket_s <= points,
                    "{range} {points} {p:?}"
                );
                assert_eq!(p.bucket_s % p.resolution.seconds(), 0);
            }
        }
        // 3 days ago at 10,000 points would want raw seconds, which are gone after 48 h.
        let p = plan(
            NOW - 3 * DAY,
            NOW - 3 * DAY + HOUR,
            10_000,
            &Retention::default(),
            NOW,
        );
        assert_eq!(p.resolution, Resolution::Minute);
        // A year ago: minutes are gone; ten-minute buckets are the finest left.
        let p = plan(
            NOW - 365 * DAY,
            NOW - 364 * DAY,
            1000,
            &Retention::default(),
            NOW,
        );
        assert_eq!(p.resolution, Resolution::TenMinutes);
    }

    #[test]
    fn readings_are_stored_as_integers_in_their_units() {
        let sample = GpuSample {
            at_ms: 1_700_000_000_999,
            utilization_gpu_pct: 87,
            utilization_memory_pct: 40,
            memory_used_bytes: 3 * 1_048_576 + 5,
            temperature_c: Some(61),
            power_watts: Some(512.34),
            power_limit_watts: Some(700.0),
            sm_clock_mhz: None,
            energy_mj: None,
        };
        assert_eq!(
            Reading::of(&sample),
            Reading {
                t: 1_700_000_000,
                util: 87,
                mem_mib: 3,
                temp_c: Some(61),
                power_dw: Some(5123),
                clock_mhz: None
            }
        );
    }
}
