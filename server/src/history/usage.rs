//! Who used how much of a card, and the energy it drew (pure): each reading's energy from the
//! card's counter (resets handled), and the reading's load and energy split between the
//! processes on the card by their SM share. The history writer sums the results per minute;
//! reports read the sums back.

use lanes_types::{GpuProcess, GpuSample, ProcessLane};
use std::collections::HashMap;

/// A reading stands for the time since the last one, up to this long: after a longer gap (the
/// poller stopped, the host slept) the time between is a gap, neither use nor idleness.
pub const MAX_READING_S: f64 = 10.0;

/// Energy drawn between two readings of a card's counter, in millijoules. The counter counts
/// from the driver's load, so a value below the last one means the driver was reloaded: what
/// it counts since then is all that is known. The first reading has nothing before it.
pub fn energy_delta_mj(previous: Option<u64>, current: u64) -> u64 {
    match previous {
        Some(prev) if current >= prev => current - prev,
        Some(_) => current,
        None => 0,
    }
}

/// One card's readings as they arrive; what each one adds.
#[derive(Clone, Debug, Default)]
pub struct CardMeter {
    last_at_ms: Option<i64>,
    last_counter_mj: Option<u64>,
}

/// What one reading adds to a card's minute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadingUse {
    /// Unix seconds of the minute it falls in.
    pub minute: i64,
    /// Seconds the reading stands for.
    pub seconds: f64,
    /// Energy drawn in that time, millijoules.
    pub energy_mj: u64,
    /// The card's load and energy, split between its processes.
    pub processes: Vec<(ProcessKey, ProcessUse)>,
}

/// Whose use: the Unix account the driver's process runs as, and the Lanes job it is part of
/// (0: none).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    pub unix_user: String,
    pub job_id: i64,
}

/// A share of a card over some seconds. Percent-seconds: 50 % for 2 s is 100.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessUse {
    pub seconds: f64,
    /// The card's utilization times this process's share of the SM load.
    pub used_pct_s: f64,
    /// The process's own SM and memory-bandwidth readings.
    pub sm_pct_s: f64,
    pub mem_pct_s: f64,
    pub energy_mj: f64,
}

impl ProcessUse {
    pub fn add(&mut self, other: &ProcessUse) {
        self.seconds += other.seconds;
        self.used_pct_s += other.used_pct_s;
        self.sm_pct_s += other.sm_pct_s;
        self.mem_pct_s += other.mem_pct_s;
        self.energy_mj += other.energy_mj;
    }
}

impl CardMeter {
    /// What `sample`, with the processes the driver listed with it, adds. Energy comes from
    /// the counter, or from power times time on a card without one.
    pub fn read(&mut self, sample: &GpuSample, processes: &[GpuProcess]) -> ReadingUse {
        let since_last_s = self
            .last_at_ms
            .map_or(0.0, |last| (sample.at_ms - last).max(0) as f64 / 1000.0);
        // After a gap the reading stands for nothing: what happened in between is unknown.
        let gap = since_last_s > MAX_READING_S;
        let seconds = if gap { 0.0 } else { since_last_s };
        self.last_at_ms = Some(sample.at_ms.max(self.last_at_ms.unwrap_or(i64::MIN)));
        let energy_mj = match sample.energy_mj {
            Some(counter) => {
                let delta = energy_delta_mj(self.last_counter_mj, counter);
                self.last_counter_mj = Some(counter);
                if gap {
                    0
                } else {
                    delta
                }
            }
            None => sample
                .power_watts
                .map_or(0, |w| (w * seconds * 1000.0).round() as u64),
        };
        ReadingUse {
            minute: sample.at_ms.div_euclid(60_000) * 60,
            seconds,
            energy_mj,
            processes: split(
                f64::from(sample.utilization_gpu_pct),
                energy_mj as f64,
                seconds,
                processes,
            ),
        }
    }
}

/// The card's load and energy over `seconds`, split between `processes` by their SM share.
/// Where the driver gives no per-process samples nothing is split (card-level figures are
/// all there is). Processes that hold the card while nothing runs share its energy equally.
pub fn split(
    card_util_pct: f64,
    energy_mj: f64,
    seconds: f64,
    processes: &[GpuProcess],
) -> Vec<(ProcessKey, ProcessUse)> {
    // The simulator's scenery is nobody's use.
    let measured: Vec<(&GpuProcess, f64, f64)> = processes
        .iter()
        .filter(|p| !p.simulated)
        .filter_map(|p| Some((p, f64::from(p.sm_pct?), f64::from(p.mem_pct.unwrap_or(0)))))
        .collect();
    if measured.is_empty() || seconds <= 0.0 {
        return Vec::new();
    }
    let total_sm: f64 = measured.iter().map(|(_, sm, _)| sm).sum();
    let mut out: HashMap<ProcessKey, ProcessUse> = HashMap::new();
    for (process, sm, mem) in &measured {
        let share = if total_sm > 0.0 {
            sm / total_sm
        } else {
            1.0 / measured.len() as f64
        };
        let key = ProcessKey {
            unix_user: process.user.clone().unwrap_or_else(|| "?".into()),
            job_id: match process.lane {
                Some(ProcessLane::Job { id }) => id,
                _ => 0,
            },
        };
        out.entry(key).or_default().add(&ProcessUse {
            seconds,
            used_pct_s: if total_sm > 0.0 {
                card_util_pct * share * seconds
            } else {
                0.0
            },
            sm_pct_s: sm * seconds,
            mem_pct_s: mem * seconds,
            energy_mj: energy_mj * share,
        });
    }
    let mut out: Vec<_> = out.into_iter().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: i64, util: u32, energy_mj: Option<u64>, power: Option<f64>) -> GpuSample {
        GpuSample {
            at_ms: at_s * 1000,
            utilization_gpu_pct: util,
            utilization_memory_pct: 0,
            memory_used_bytes: 0,
            temperature_c: None,
            power_watts: power,
            power_limit_watts: None,
            sm_clock_mhz: None,
            energy_mj,
        }
    }

    fn process(pid: u32, user: &str, sm: Option<u32>, job: Option<i64>) -> GpuProcess {
        GpuProcess {
            pid,
            used_memory_bytes: None,
            user: Some(user.into()),
            command: None,
            lane: job.map(|id| ProcessLane::Job { id }),
            sm_pct: sm,
            mem_pct: sm.map(|s| s / 2),
            simulated: false,
            container: None,
        }
    }

    #[test]
    fn energy_is_the_counters_delta_and_a_reset_counts_from_zero() {
        assert_eq!(energy_delta_mj(None, 5_000), 0);
        assert_eq!(energy_delta_mj(Some(5_000), 7_500), 2_500);
        assert_eq!(energy_delta_mj(Some(7_500), 7_500), 0);
        // The driver reloaded: 1.2 J counted since.
        assert_eq!(energy_delta_mj(Some(9_000_000), 1_200), 1_200);

        // A card at 300 W read each second: 300 J a reading; the counter resets after the
        // third reading and counts 300 J again by the fourth.
        let mut meter = CardMeter::default();
        let counters = [1_000_000, 1_300_000, 1_600_000, 300_000, 600_000];
        let joules: Vec<u64> = counters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                meter
                    .read(&sample(60 + i as i64, 50, Some(*c), None), &[])
                    .energy_mj
            })
            .collect();
        assert_eq!(joules, [0, 300_000, 300_000, 300_000, 300_000]);
        // 1.2 kJ in all: 1.2 kJ / 3.6 MJ per kWh.
        let kwh = joules.iter().sum::<u64>() as f64 / 3.6e9;
        assert!((kwh - 1.2e3 / 3.6e6).abs() < 1e-12);
    }

    #[test]
    fn without_a_counter_energy_is_power_times_time_and_a_long_gap_is_no_one_s() {
        let mut meter = CardMeter::default();
        assert_eq!(
            meter.read(&sample(0, 0, None, Some(250.0)), &[]).energy_mj,
            0
        );
        let second = meter.read(&sample(2, 0, None, Some(250.0)), &[]);
        assert_eq!((second.seconds, second.energy_mj), (2.0, 500_000));
        // An hour of silence, counter or not, is nobody's: the reading after it adds nothing.
        let late = meter.read(&sample(3_602, 0, None, Some(250.0)), &[]);
        assert_eq!((late.seconds, late.energy_mj), (0.0, 0));
        let mut counted = CardMeter::default();
        counted.read(&sample(0, 0, Some(0), None), &[]);
        assert_eq!(
            counted
                .read(&sample(3_600, 0, Some(900_000_000), None), &[])
                .energy_mj,
            0
        );
        assert_eq!(
            counted
                .read(&sample(3_601, 0, Some(900_300_000), None), &[])
                .energy_mj,
            300_000
        );
        assert_eq!(late.minute, 3_600);
    }

    #[test]
    fn load_and_energy_split_by_sm_share_and_jobs_and_users_are_kept_apart() {
        let processes = [
            process(1, "ada", Some(30), Some(7)),
            process(2, "bo", Some(60), None),
            process(3, "ada", Some(10), None),
        ];
        // The card read 90 % for 2 s and drew 1 kJ.
        let split = split(90.0, 1_000_000.0, 2.0, &processes);
        let get = |user: &str, job: i64| {
            split
                .iter()
                .find(|(k, _)| k.unix_user == user && k.job_id == job)
                .unwrap()
                .1
        };
        let (ada_job, bo, ada) = (get("ada", 7), get("bo", 0), get("ada", 0));
        assert!((ada_job.used_pct_s - 54.0).abs() < 1e-9); // 90 % × 0.3 × 2 s
        assert!((bo.used_pct_s - 108.0).abs() < 1e-9);
        assert!((ada.used_pct_s - 18.0).abs() < 1e-9);
        assert!((bo.energy_mj - 600_000.0).abs() < 1e-6);
        assert_eq!((bo.sm_pct_s, bo.mem_pct_s, bo.seconds), (120.0, 60.0, 2.0));
        let total: f64 = split.iter().map(|(_, u)| u.used_pct_s).sum();
        assert!((total - 180.0).abs() < 1e-9);

        // Idle holders share the idle draw; a driver without per-process samples splits nothing.
        let idle = [
            process(1, "ada", Some(0), None),
            process(2, "bo", Some(0), None),
        ];
        let halves = super::split(0.0, 100.0, 1.0, &idle);
        assert!(halves
            .iter()
            .all(|(_, u)| u.energy_mj == 50.0 && u.used_pct_s == 0.0));
        assert!(super::split(80.0, 100.0, 1.0, &[process(1, "ada", None, None)]).is_empty());
    }
}
