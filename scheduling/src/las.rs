//! Least attained service: the queue policy that needs no run-time estimate. Each job's
//! *attained service* is the GPU-seconds it has received so far; jobs that have received the
//! least go first, so short jobs finish while long ones make way. As in Tiresias (Gu et al.,
//! NSDI '19) it is *discretized*: a few levels split by attained-service thresholds, FIFO
//! within a level (here: fair-share order among those waiting, so groups keep their shares), and
//! a job moves down a level when it crosses a threshold. A running job is preempted (it keeps
//! its progress: it checkpointed on its notice) only by a waiting job of a higher level, never
//! by one of its own, so jobs do not thrash. Aging bounds the wait: a job that has waited
//! `starve_factor` times as long as it has run goes back to the top level.
//!
//! [`rank`] orders jobs for the server's queue (which preempts only preemptible jobs);
//! [`replay`] replays a trace with every job preemptible, for `lanes simulate`.

use super::fairshare::Usage;
use super::scheduler::Time;
use super::simulate::Settings;
use super::trace::Workload;

/// How attained service is split into levels, and the aging bound.
#[derive(Clone, Debug, PartialEq)]
pub struct LasSettings {
    /// GPU-seconds at which a job moves down a level, ascending: `n` thresholds, `n + 1`
    /// levels.
    pub thresholds: Vec<f64>,
    /// A job that has waited this many times as long as it has run (since it last ran or was
    /// promoted) goes back to the top level.
    pub starve_factor: f64,
    /// Seconds a preempted job loses when it starts again (loading its checkpoint).
    pub restart_cost: Time,
    /// Seconds a job runs at least once started before it may be preempted (so that the
    /// restart cost is paid for a stretch of work, not for a moment: wide jobs cross a
    /// threshold in minutes).
    pub min_run: Time,
}

impl Default for LasSettings {
    fn default() -> Self {
        Self {
            thresholds: vec![3_600.0, 36_000.0],
            starve_factor: 4.0,
            restart_cost: 60,
            min_run: 1_800,
        }
    }
}

impl LasSettings {
    /// The level of a job that attained `service` GPU-seconds (0: the top).
    pub fn level(&self, service: f64) -> usize {
        self.thresholds
            .iter()
            .take_while(|&&t| service >= t)
            .count()
    }
}

/// The priority the server's queue orders waiting jobs by under LAS: the level first (higher
/// priority for less service), then fair share and age within it (`fair` is the fair-share
/// priority, at most a few units).
pub fn rank(settings: &LasSettings, service: f64, fair: f64) -> f64 {
    let levels = settings.thresholds.len() + 1;
    (levels - settings.level(service)) as f64 * 1_000.0 + fair
}

/// One job's state in a replay.
#[derive(Clone, Debug, Default)]
struct State {
    /// GPU-seconds received, and how much of it counted before its last promotion.
    attained: f64,
    promoted_at: f64,
    /// Seconds it has run in all (the aging bound grows with it).
    ran: f64,
    /// Seconds of work left (its run time, plus a restart cost per resumption).
    left: f64,
    running_since: Option<Time>,
    /// Order of its current run's start (running jobs of a level keep their order).
    started: u64,
    waiting_since: Time,
    preempted: bool,
    done: bool,
}

/// A replay: each job's runs `[start, end)` (one per stretch between preemptions), and how
/// often jobs were preempted.
pub struct Replay {
    pub runs: Vec<Vec<(Time, Time)>>,
    pub preemptions: u64,
}

/// Replays `w` on `gpus` cards under LAS, every job preemptible.
pub fn replay(w: &Workload, gpus: u32, las: &LasSettings, settings: &Settings) -> Replay {
    let n = w.jobs.len();
    let mut state: Vec<State> = w
        .jobs
        .iter()
        .map(|j| State {
            left: j.duration as f64,
            waiting_since: j.submit,
            ..State::default()
        })
        .collect();
    let mut runs: Vec<Vec<(Time, Time)>> = vec![Vec::new(); n];
    let mut usage = vec![Usage::default(); w.groups.len()];
    let mut busy_by_group = vec![0u32; w.groups.len()];
    let mut live: Vec<usize> = Vec::new(); // arrived, not done
    let (mut next, mut now, mut starts, mut preemptions) = (0usize, Time::MIN, 0u64, 0u64);
    loop {
        // The next moment anything changes: an arrival, a completion, a running job crossing
        // a threshold, a waiting job reaching the aging bound.
        let mut at = w.jobs.get(next).map_or(Time::MAX, |j| j.submit);
        for &j in &live {
            let s = &state[j];
            let g = f64::from(w.jobs[j].gpus);
            match s.running_since {
                Some(since) => {
                    at = at.min(now + s.left.ceil() as Time);
                    if since + las.min_run > now {
                        at = at.min(since + las.min_run);
                    }
                    let level = las.level(s.attained - s.promoted_at);
                    if let Some(&t) = las.thresholds.get(level) {
                        let until = ((t - (s.attained - s.promoted_at)) / g).ceil().max(1.0);
                        at = at.min(now + until as Time);
                    }
                }
                None if las.level(s.attained - s.promoted_at) > 0 => {
                    let bound = (las.starve_factor * s.ran).ceil() as Time;
                    at = at.min((s.waiting_since + bound).max(now + 1));
                }
                None => {}
            }
        }
        if at == Time::MAX {
            break;
        }
        // Time passes for what runs.
        if now != Time::MIN {
            let dt = (at - now) as f64;
            for &j in &live {
                if state[j].running_since.is_some() {
                    let s = &mut state[j];
                    s.left -= dt;
                    s.ran += dt;
                    s.attained += dt * f64::from(w.jobs[j].gpus);
                }
            }
            for (g, u) in usage.iter_mut().enumerate() {
                u.advance(at, busy_by_group[g], settings.half_life);
            }
        } else {
            for u in usage.iter_mut() {
                u.at = at;
            }
        }
        now = at;
        // Completions.
        live.retain(|&j| {
            let s = &mut state[j];
            if s.running_since.is_some() && s.left <= 1e-6 {
                let start = s.running_since.take().unwrap_or(now);
                runs[j].push((start, now));
                busy_by_group[w.jobs[j].group] -= w.jobs[j].gpus;
                s.done = true;
                return false;
            }
            true
        });
        while next < n && w.jobs[next].submit <= now {
            live.push(next);
            next += 1;
        }
        // The aging bound: back to the top.
        for &j in &live {
            let s = &mut state[j];
            if s.running_since.is_none()
                && las.level(s.attained - s.promoted_at) > 0
                && (now - s.waiting_since) as f64 >= las.starve_factor * s.ran
            {
                s.promoted_at = s.attained;
                s.waiting_since = now;
            }
        }
        // Order: level, then running before waiting (in their start order), then waiting by
        // fair share and arrival.
        let factors = super::simulate::group_factors(w, &usage, settings);
        let mut order: Vec<(usize, u8, f64, Time, usize)> = live
            .iter()
            .map(|&j| {
                let s = &state[j];
                let level = las.level(s.attained - s.promoted_at);
                match s.running_since {
                    // Within its first stretch it is not preempted.
                    Some(since) if now - since < las.min_run => (0, 0, s.started as f64, 0, j),
                    Some(_) => (level, 0, s.started as f64, 0, j),
                    None => (level, 1, -factors[w.jobs[j].group], w.jobs[j].submit, j),
                }
            })
            .collect();
        order.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then(a.2.total_cmp(&b.2))
                .then((a.3, a.4).cmp(&(b.3, b.4)))
        });
        // Greedy: each job in order that fits gets its cards; a running job that no longer
        // fits is preempted (it keeps its progress and pays the restart cost later).
        let mut free = gpus;
        let mut keep = vec![false; n];
        for &(.., j) in &order {
            if w.jobs[j].gpus <= free {
                free -= w.jobs[j].gpus;
                keep[j] = true;
            }
        }
        for &(.., j) in &order {
            let s = &mut state[j];
            let job = &w.jobs[j];
            match (s.running_since, keep[j]) {
                (Some(start), false) => {
                    runs[j].push((start, now));
                    s.running_since = None;
                    s.waiting_since = now;
                    s.preempted = true;
                    busy_by_group[job.group] -= job.gpus;
                    preemptions += 1;
                }
                (None, true) => {
                    if s.preempted {
                        s.left += las.restart_cost as f64;
                    }
                    s.running_since = Some(now);
                    starts += 1;
                    s.started = starts;
                    busy_by_group[job.group] += job.gpus;
                }
                _ => {}
            }
        }
    }
    debug_assert!(state.iter().all(|s| s.done));
    Replay { runs, preemptions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{SimJob, Workload};

    fn workload(jobs: &[(Time, u32, Time, usize)], groups: usize) -> Workload {
        Workload {
            jobs: jobs
                .iter()
                .map(|&(submit, gpus, duration, group)| SimJob {
                    submit,
                    gpus,
                    duration,
                    limit: duration,
                    group,
                })
                .collect(),
            groups: (0..groups).map(|g| format!("g{g}")).collect(),
            skipped: 0,
            trace_load: 1.0,
            load: 1.0,
        }
    }

    fn las(thresholds: &[f64]) -> LasSettings {
        LasSettings {
            thresholds: thresholds.to_vec(),
            starve_factor: 4.0,
            restart_cost: 0,
            min_run: 0,
        }
    }

    #[test]
    fn a_short_job_passes_a_long_one_that_has_run_past_a_threshold() {
        // A day-long job holds the only card; a 10-minute job arrives after 2 hours.
        let w = workload(&[(0, 1, 86_400, 0), (7_200, 1, 600, 0)], 1);
        let out = replay(&w, 1, &las(&[3_600.0]), &Settings::default());
        // The long job ran an hour at the top level, then moved down: the short one preempts
        // it on arrival and finishes, and the long one resumes.
        assert_eq!(out.runs[1], vec![(7_200, 7_800)]);
        assert_eq!(out.runs[0], vec![(0, 7_200), (7_800, 87_000)]);
        assert_eq!(out.preemptions, 1);
    }

    #[test]
    fn a_job_runs_its_first_stretch_before_it_can_be_preempted() {
        let w = workload(&[(0, 4, 86_400, 0), (100, 1, 600, 0)], 1);
        // Four cards: the wide job crosses 3,600 GPU-seconds in 900 s, but may not be
        // preempted before it ran its 1,800 s.
        let settings = LasSettings {
            min_run: 1_800,
            ..las(&[3_600.0])
        };
        let out = replay(&w, 4, &settings, &Settings::default());
        assert_eq!(out.runs[0][0], (0, 1_800));
        assert_eq!(out.runs[1], vec![(1_800, 2_400)]);
    }

    #[test]
    fn jobs_of_one_level_do_not_preempt_each_other() {
        // Both under the threshold the whole time: FIFO, no preemption.
        let w = workload(&[(0, 1, 1_000, 0), (10, 1, 100, 0)], 1);
        let out = replay(&w, 1, &las(&[3_600.0]), &Settings::default());
        assert_eq!(out.runs[0], vec![(0, 1_000)]);
        assert_eq!(out.runs[1], vec![(1_000, 1_100)]);
        assert_eq!(out.preemptions, 0);
    }

    #[test]
    fn a_long_job_does_not_starve_behind_a_stream_of_short_ones() {
        // One card; a long job, then a 30-minute job every 30 minutes for a week: the card is
        // never free of short work.
        let mut jobs = vec![(0, 1, 20_000, 0)];
        jobs.extend((1..336).map(|i| (i * 1_800, 1, 1_800, 0)));
        let w = workload(&jobs, 1);
        let out = replay(&w, 1, &las(&[3_600.0]), &Settings::default());
        let end = out.runs[0].last().unwrap().1;
        // Without the aging bound it would finish after every short job (a week); with it,
        // it runs again each time it has waited four times what it has run in all.
        assert!(end < 1_800 * 200, "the long job ended at {end}");
        assert!(out.runs[0].len() > 1);
        // Every job ran exactly its run time, in total.
        for (job, runs) in w.jobs.iter().zip(&out.runs) {
            let ran: Time = runs.iter().map(|(a, b)| b - a).sum();
            assert_eq!(ran, job.duration);
        }
    }

    #[test]
    fn fair_share_orders_the_waiting_of_a_level_between_groups() {
        // Group 0 ran the card for a day; then both groups queue one-hour jobs at once.
        let mut jobs = vec![(0, 1, 86_400, 0)];
        for i in 0..4 {
            jobs.push((86_400, 1, 600, i % 2));
        }
        let w = workload(&jobs, 2);
        let out = replay(&w, 1, &las(&[1e12]), &Settings::default());
        // Group 1 (no use) goes first: jobs 2 and 4 before 1 and 3.
        let start = |j: usize| out.runs[j][0].0;
        assert!(start(2) < start(1) && start(4) < start(1), "{:?}", out.runs);
    }

    #[test]
    fn the_server_ranks_by_level_first_then_fair_share() {
        let s = las(&[3_600.0, 36_000.0]);
        assert_eq!((s.level(0.0), s.level(3_600.0), s.level(1e9)), (0, 1, 2));
        assert!(rank(&s, 10.0, 0.1) > rank(&s, 4_000.0, 5.0));
        assert!(rank(&s, 10.0, 0.9) > rank(&s, 10.0, 0.1));
    }
}
