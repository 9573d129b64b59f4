//! Replays a workload through the scheduler with a virtual clock. The queue policies call the
//! same [`schedule`] the server calls; `static` models booking fixed blocks in a calendar, the
//! practice the queue replaces. Deterministic: the same workload gives the same outcome.

use super::fairshare::{self, Account, AgeWeight, ShareTable, Usage};
use super::scheduler::{schedule, Card, Owner, Pass, Policy, Time, Waiting};
use super::trace::Workload;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What is replayed: a queue policy, or fixed blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Queue(Policy),
    /// Each job books, first come first served, the earliest run of whole blocks (aligned to
    /// the block grid, from the next block boundary after it arrives) on enough cards for its
    /// time limit, starts when the block starts and holds the cards to the block's end.
    Static {
        block: Time,
    },
}

impl Model {
    pub fn name(&self) -> String {
        match self {
            Model::Queue(p) => p.as_str().into(),
            Model::Static { .. } => "static".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub half_life: Time,
    pub age: AgeWeight,
    /// Shares by group (the trace's groups each act as one user).
    pub shares: ShareTable,
    /// Levels and aging of least attained service (`las`).
    pub las: super::las::LasSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            half_life: 7 * 86_400,
            age: AgeWeight::default(),
            shares: ShareTable::default(),
            las: Default::default(),
        }
    }
}

/// The figures of one replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    pub policy: String,
    pub load: f64,
    pub jobs: usize,
    /// Busy GPU-seconds over cards × makespan.
    pub utilization: f64,
    pub mean_delay_s: f64,
    pub median_delay_s: f64,
    pub p95_delay_s: f64,
    /// Mean of end − submit.
    pub mean_completion_s: f64,
    pub makespan_s: Time,
    /// Jain's index over groups' GPU share (see [`jain`]); 1 with a single group.
    pub jain: f64,
    /// Card-seconds held by blocks but not used (static only).
    pub held_idle_fraction: f64,
    /// Times a running job was preempted (las only: it resumes from its checkpoint).
    pub preemptions: u64,
}

/// A replay: when each job started, and the figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// When each job first started.
    pub starts: Vec<Time>,
    /// Each job's runs `[start, end)`: one, unless it was preempted.
    pub runs: Vec<Vec<(Time, Time)>>,
    pub metrics: Metrics,
    /// Busy cards over time: `(time, busy)` at each change.
    pub busy: Vec<(Time, u32)>,
}

/// Replays `w` on `gpus` cards.
pub fn run(w: &Workload, gpus: u32, model: Model, settings: &Settings) -> Outcome {
    let (runs, held, preemptions) = match model {
        Model::Queue(Policy::Las) => {
            let replay = super::las::replay(w, gpus, &settings.las, settings);
            (replay.runs, 0.0, replay.preemptions)
        }
        Model::Queue(policy) => {
            let (starts, held) = replay_queue(w, gpus, policy, settings);
            (whole_runs(w, &starts), held, 0)
        }
        Model::Static { block } => {
            let (starts, held) = replay_static(w, gpus, block);
            (whole_runs(w, &starts), held, 0)
        }
    };
    let busy = busy_runs(&runs, w);
    let mut metrics = metrics(w, gpus, &model.name(), &runs, held, settings);
    metrics.preemptions = preemptions;
    Outcome {
        starts: runs
            .iter()
            .map(|r| r.first().map_or(Time::MIN, |run| run.0))
            .collect(),
        runs,
        metrics,
        busy,
    }
}

/// Each job run once, from its start for its run time.
fn whole_runs(w: &Workload, starts: &[Time]) -> Vec<Vec<(Time, Time)>> {
    w.jobs
        .iter()
        .zip(starts)
        .map(|(j, &s)| vec![(s, s + j.duration)])
        .collect()
}

fn replay_queue(w: &Workload, gpus: u32, policy: Policy, settings: &Settings) -> (Vec<Time>, f64) {
    replay_queue_observed(w, gpus, policy, settings, &mut |_| {})
}

/// The queue at one moment of a replay, before its pass: what a forecast made then sees.
pub(crate) struct Moment<'a> {
    pub now: Time,
    /// Jobs (indices into the workload) that arrived now, and that ended since the last moment.
    pub arrived: &'a [usize],
    pub ended: &'a [usize],
    /// Waiting jobs (ids are workload indices), with this moment's priorities.
    pub waiting: &'a [Waiting],
    /// Running jobs: index, start, cards.
    pub running: &'a [(usize, Time, Vec<usize>)],
}

/// [`replay_queue`], showing `observe` every moment before its pass.
pub(crate) fn replay_queue_observed(
    w: &Workload,
    gpus: u32,
    policy: Policy,
    settings: &Settings,
    observe: &mut dyn FnMut(&Moment),
) -> (Vec<Time>, f64) {
    let n = w.jobs.len();
    let mut arrived: Vec<usize> = Vec::new();
    let mut ended: Vec<usize> = Vec::new();
    let mut running_now: Vec<(usize, Time, Vec<usize>)> = Vec::new();
    let mut cards: Vec<Card> = (0..gpus).map(|_| Card::idle(Time::MIN, 1)).collect();
    let owners = vec![Owner::default(); w.groups.len()];
    let mut starts: Vec<Time> = vec![Time::MIN; n];
    let mut pending: Vec<usize> = Vec::new();
    let mut running: BinaryHeap<Reverse<(Time, usize)>> = BinaryHeap::new();
    let mut on_cards: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut busy_by_group = vec![0u32; w.groups.len()];
    let mut usage = vec![Usage::default(); w.groups.len()];
    let mut next = 0;
    let mut waiting: Vec<Waiting> = Vec::new();
    loop {
        let arrival = w.jobs.get(next).map(|j| j.submit);
        let done = running.peek().map(|Reverse((t, _))| *t);
        let now = match (arrival, done) {
            (None, None) => break,
            (Some(a), Some(d)) => a.min(d),
            (Some(t), None) | (None, Some(t)) => t,
        };
        if policy.uses_priority() {
            for (g, u) in usage.iter_mut().enumerate() {
                u.advance(now, busy_by_group[g], settings.half_life);
            }
        }
        while let Some(&Reverse((t, j))) = running.peek() {
            if t > now {
                break;
            }
            running.pop();
            for &c in &on_cards[j] {
                cards[c].free_from = now;
            }
            busy_by_group[w.jobs[j].group] -= w.jobs[j].gpus;
            running_now.retain(|r| r.0 != j);
            ended.push(j);
        }
        while next < n && w.jobs[next].submit <= now {
            pending.push(next);
            arrived.push(next);
            next += 1;
        }
        let factors: Vec<f64> = if policy.uses_priority() {
            group_factors(w, &usage, settings)
        } else {
            Vec::new()
        };
        waiting.clear();
        waiting.extend(pending.iter().map(|&j| {
            let job = &w.jobs[j];
            Waiting {
                id: j as i64,
                owner: job.group,
                gpus: job.gpus,
                time_limit: job.limit,
                min_memory: 0,
                submitted: job.submit,
                priority: factors.get(job.group).map_or(0.0, |&f| {
                    fairshare::priority(f, now - job.submit, settings.age)
                }),
            }
        }));
        observe(&Moment {
            now,
            arrived: &arrived,
            ended: &ended,
            waiting: &waiting,
            running: &running_now,
        });
        arrived.clear();
        ended.clear();
        let plan = schedule(&Pass {
            now,
            policy,
            cards: &cards,
            waiting: &waiting,
            owners: &owners,
            explain: false,
        });
        if plan.starts.is_empty() {
            continue;
        }
        for start in plan.starts {
            let j = start.job as usize;
            let job = &w.jobs[j];
            for &c in &start.cards {
                cards[c].free_from = now + job.limit;
            }
            running_now.push((j, now, start.cards.clone()));
            starts[j] = now;
            running.push(Reverse((now + job.duration, j)));
            busy_by_group[job.group] += job.gpus;
            on_cards[j] = start.cards;
        }
        pending.retain(|&j| starts[j] == Time::MIN);
    }
    (starts, 0.0)
}

/// Each trace group's fair-share factor from its decayed usage (the groups act as one user
/// each): what the priority-ordered replays weigh waiting jobs by.
pub(crate) fn group_factors(w: &Workload, usage: &[Usage], settings: &Settings) -> Vec<f64> {
    let accounts: Vec<Account> = w
        .groups
        .iter()
        .zip(usage)
        .map(|(g, u)| Account {
            user: g.clone(),
            group: g.clone(),
            usage: u.value,
        })
        .collect();
    fairshare::standings(&accounts, &settings.shares)
        .into_iter()
        .map(|s| s.factor)
        .collect()
}

/// The static model: see [`Model::Static`]. Returns starts and the fraction of held
/// card-seconds no job used. Each card keeps its free stretches ("holes", the last one
/// open-ended); a booking can only start where some card's hole starts, or at the first block
/// boundary after the job arrives.
fn replay_static(w: &Workload, gpus: u32, block: Time) -> (Vec<Time>, f64) {
    let block = block.max(1);
    let mut holes: Vec<Vec<(Time, Time)>> = vec![vec![(Time::MIN, Time::MAX)]; gpus as usize];
    let fits = |holes: &[(Time, Time)], from: Time, to: Time| -> Option<usize> {
        let i = holes.partition_point(|&(start, _)| start <= from);
        (i > 0 && holes[i - 1].1 >= to).then(|| i - 1)
    };
    let mut starts = Vec::with_capacity(w.jobs.len());
    let (mut held, mut used) = (0f64, 0f64);
    for job in &w.jobs {
        let length = (job.limit + block - 1) / block * block;
        let first = (job.submit + block - 1).div_euclid(block) * block;
        // Arrivals only move forward: stretches that end before this one's first chance are
        // of no use to anyone any more.
        for card in &mut holes {
            let gone = card.partition_point(|&(_, end)| end <= first);
            card.drain(..gone);
        }
        let mut candidates: Vec<Time> = holes
            .iter()
            .flatten()
            .filter(|&&(start, end)| end - start.max(first) >= length)
            .map(|&(start, _)| start.max(first))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let placed = candidates.into_iter().find_map(|t| {
            let chosen: Vec<(usize, usize)> = holes
                .iter()
                .enumerate()
                .filter_map(|(c, card)| fits(card, t, t + length).map(|h| (c, h)))
                .take(job.gpus as usize)
                .collect();
            (chosen.len() == job.gpus as usize).then_some((t, chosen))
        });
        let (t, chosen) = placed.expect("a job no larger than the pool fits in the open tail");
        for (c, h) in chosen {
            let (a, b) = holes[c][h];
            let mut split = Vec::with_capacity(2);
            if a < t {
                split.push((a, t));
            }
            if t + length < b {
                split.push((t + length, b));
            }
            holes[c].splice(h..=h, split);
        }
        starts.push(t);
        held += (length * Time::from(job.gpus)) as f64;
        used += (job.duration * Time::from(job.gpus)) as f64;
    }
    let idle = if held > 0.0 { 1.0 - used / held } else { 0.0 };
    (starts, idle)
}

/// `(time, busy cards)` at every change.
#[cfg(test)]
fn busy_steps(w: &Workload, starts: &[Time]) -> Vec<(Time, u32)> {
    busy_runs(&whole_runs(w, starts), w)
}

/// `(time, busy cards)` at every change, from each job's runs.
fn busy_runs(runs: &[Vec<(Time, Time)>], w: &Workload) -> Vec<(Time, u32)> {
    let mut changes: Vec<(Time, i64)> = Vec::with_capacity(2 * runs.len());
    for (job, job_runs) in w.jobs.iter().zip(runs) {
        for &(start, end) in job_runs {
            changes.push((start, i64::from(job.gpus)));
            changes.push((end, -i64::from(job.gpus)));
        }
    }
    changes.sort_unstable();
    let mut steps: Vec<(Time, u32)> = Vec::new();
    let mut busy = 0i64;
    for (t, d) in changes {
        busy += d;
        match steps.last_mut() {
            Some(last) if last.0 == t => last.1 = busy as u32,
            _ => steps.push((t, busy as u32)),
        }
    }
    steps
}

fn metrics(
    w: &Workload,
    gpus: u32,
    policy: &str,
    runs: &[Vec<(Time, Time)>],
    held_idle_fraction: f64,
    settings: &Settings,
) -> Metrics {
    let n = w.jobs.len().max(1) as f64;
    let end = |r: &Vec<(Time, Time)>| r.last().map_or(0, |run| run.1);
    // Queue delay: the time a job was not running between its arrival and its end (its start
    // minus its arrival, unless it was preempted).
    let mut delays: Vec<Time> = w
        .jobs
        .iter()
        .zip(runs)
        .map(|(j, r)| {
            let ran: Time = r.iter().map(|(a, b)| b - a).sum();
            end(r) - j.submit - ran
        })
        .collect();
    delays.sort_unstable();
    let first = w.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last = runs.iter().map(end).max().unwrap_or(0);
    let makespan = (last - first).max(1);
    let work: f64 = w
        .jobs
        .iter()
        .map(|j| j.gpus as f64 * j.duration as f64)
        .sum();
    let rank = |q: f64| {
        if delays.is_empty() {
            return 0.0;
        }
        let i = ((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len()) - 1;
        delays[i] as f64
    };
    Metrics {
        policy: policy.into(),
        load: w.load,
        jobs: w.jobs.len(),
        utilization: work / (f64::from(gpus) * makespan as f64),
        mean_delay_s: delays.iter().sum::<Time>() as f64 / n,
        median_delay_s: rank(0.5),
        p95_delay_s: rank(0.95),
        mean_completion_s: w
            .jobs
            .iter()
            .zip(runs)
            .map(|(j, r)| (end(r) - j.submit) as f64)
            .sum::<f64>()
            / n,
        makespan_s: makespan,
        jain: jain_runs(w, gpus, runs, &settings.shares),
        held_idle_fraction,
        preemptions: 0,
    }
}

/// Jain's index over groups' GPU share, averaged over the time the pool was contended (more
/// demand than cards). At each moment each group with work is entitled to a max-min fair part
/// of the pool by its shares (never more than it asks for); `x` is what it holds over what it is
/// entitled to, and the index is `(Σx)² / (k·Σx²)`: 1 when every group gets its part.
pub fn jain(w: &Workload, gpus: u32, starts: &[Time], shares: &ShareTable) -> f64 {
    jain_runs(w, gpus, &whole_runs(w, starts), shares)
}

/// [`jain`], from each job's runs (a preempted job holds no cards between its runs, and still
/// asks for them).
pub fn jain_runs(w: &Workload, gpus: u32, runs: &[Vec<(Time, Time)>], shares: &ShareTable) -> f64 {
    let k = w.groups.len();
    if k < 2 {
        return 1.0;
    }
    // (time, group, Δdemand, Δheld)
    let mut events: Vec<(Time, usize, i64, i64)> = Vec::with_capacity(3 * runs.len());
    for (job, job_runs) in w.jobs.iter().zip(runs) {
        let g = i64::from(job.gpus);
        let end = job_runs.last().map_or(job.submit, |r| r.1);
        events.push((job.submit, job.group, g, 0));
        events.push((end, job.group, -g, 0));
        for &(start, stop) in job_runs {
            events.push((start, job.group, 0, g));
            events.push((stop, job.group, 0, -g));
        }
    }
    events.sort_unstable();
    let weights: Vec<f64> = w
        .groups
        .iter()
        .map(|g| shares.groups.get(g).copied().unwrap_or(1.0))
        .collect();
    let (mut demand, mut held) = (vec![0i64; k], vec![0i64; k]);
    let (mut weighted, mut span) = (0f64, 0f64);
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            let (_, g, d, h) = events[i];
            demand[g] += d;
            held[g] += h;
            i += 1;
        }
        let Some(&(next, ..)) = events.get(i) else {
            break;
        };
        let total: i64 = demand.iter().sum();
        let active: Vec<usize> = (0..k).filter(|&g| demand[g] > 0).collect();
        if total <= i64::from(gpus) || active.len() < 2 || next <= t {
            continue;
        }
        let entitled = water_fill(f64::from(gpus), &active, &demand, &weights);
        let x: Vec<f64> = active
            .iter()
            .zip(&entitled)
            .map(|(&g, &e)| held[g] as f64 / e.max(1e-9))
            .collect();
        let (sum, squares): (f64, f64) = (x.iter().sum(), x.iter().map(|v| v * v).sum());
        if squares > 0.0 {
            let dt = (next - t) as f64;
            weighted += sum * sum / (x.len() as f64 * squares) * dt;
            span += dt;
        }
    }
    if span > 0.0 {
        weighted / span
    } else {
        1.0
    }
}

/// Max-min fair split of `capacity` among `active` groups by weight, capped at each one's demand.
fn water_fill(capacity: f64, active: &[usize], demand: &[i64], weights: &[f64]) -> Vec<f64> {
    let mut give = vec![0f64; active.len()];
    let mut open: Vec<usize> = (0..active.len()).collect();
    let mut left = capacity;
    while !open.is_empty() && left > 1e-9 {
        let weight: f64 = open.iter().map(|&i| weights[active[i]]).sum();
        let mut capped = Vec::new();
        for &i in &open {
            let fair = left * weights[active[i]] / weight;
            if give[i] + fair >= demand[active[i]] as f64 {
                capped.push(i);
            }
        }
        if capped.is_empty() {
            for &i in &open {
                give[i] += left * weights[active[i]] / weight;
            }
            break;
        }
        for &i in &capped {
            left -= demand[active[i]] as f64 - give[i];
            give[i] = demand[active[i]] as f64;
        }
        open.retain(|i| !capped.contains(i));
    }
    give
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{workload, Estimate, SimJob, TraceJob};

    fn trace(jobs: &[(Time, u32, Time, &str)]) -> Vec<TraceJob> {
        jobs.iter()
            .enumerate()
            .map(|(i, &(submit, gpus, duration, group))| TraceJob {
                id: i.to_string(),
                submit,
                gpus,
                duration,
                group: group.into(),
            })
            .collect()
    }

    /// Checks that busy cards never exceed the pool, and that every job ran its whole run
    /// time after it arrived (a preempted one in several runs, plus a restart cost each).
    fn never_oversubscribed(w: &Workload, gpus: u32, out: &Outcome, restart_cost: Time) {
        for (_, busy) in busy_runs(&out.runs, w) {
            assert!(busy <= gpus, "{busy} cards busy of {gpus}");
        }
        assert_eq!(busy_runs(&out.runs, w), out.busy);
        for (job, runs) in w.jobs.iter().zip(&out.runs) {
            assert!(runs.first().is_some_and(|r| r.0 >= job.submit));
            assert!(runs.windows(2).all(|p| p[0].1 <= p[1].0));
            let ran: Time = runs.iter().map(|(a, b)| b - a).sum();
            let restarts = runs.len() as Time - 1;
            assert_eq!(ran, job.duration + restarts * restart_cost, "{runs:?}");
        }
        let _ = busy_steps(w, &out.starts);
    }

    fn random_workload(seed: u64, jobs: usize, gpus: u32) -> Workload {
        use rand_chacha::rand_core::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let list: Vec<TraceJob> = (0..jobs)
            .map(|i| TraceJob {
                id: i.to_string(),
                submit: (i as Time) * 37 + (rng.next_u32() % 50) as Time,
                gpus: 1 + rng.next_u32() % gpus,
                duration: 10 + (rng.next_u32() % 3_000) as Time,
                group: ["a", "b", "c"][(rng.next_u32() % 3) as usize].into(),
            })
            .collect();
        workload(list, gpus, Some(1.1), Estimate::Noisy, seed)
    }

    #[test]
    fn no_policy_ever_uses_more_cards_than_exist() {
        for seed in 0..5 {
            let w = random_workload(seed, 300, 8);
            for model in [
                Model::Queue(Policy::Fifo),
                Model::Queue(Policy::Backfill),
                Model::Queue(Policy::Fairshare),
                Model::Queue(Policy::Las),
                Model::Static { block: 600 },
            ] {
                let settings = Settings::default();
                let out = run(&w, 8, model, &settings);
                let cost = if model == Model::Queue(Policy::Las) {
                    settings.las.restart_cost
                } else {
                    0
                };
                never_oversubscribed(&w, 8, &out, cost);
                assert!(out.starts.iter().all(|&s| s != Time::MIN));
            }
        }
    }

    #[test]
    fn a_replay_is_deterministic_for_a_seed() {
        for policy in Policy::ALL {
            let a = run(
                &random_workload(3, 200, 8),
                8,
                Model::Queue(policy),
                &Settings::default(),
            );
            let b = run(
                &random_workload(3, 200, 8),
                8,
                Model::Queue(policy),
                &Settings::default(),
            );
            assert_eq!(a, b);
        }
        let a = run(
            &random_workload(3, 200, 8),
            8,
            Model::Queue(Policy::Backfill),
            &Settings::default(),
        );
        let c = run(
            &random_workload(4, 200, 8),
            8,
            Model::Queue(Policy::Backfill),
            &Settings::default(),
        );
        assert_ne!(a.starts, c.starts);
    }

    #[test]
    fn fifo_starts_jobs_in_arrival_order_when_nothing_can_backfill() {
        // Every job needs the whole pool: nothing can pass anything.
        let list: Vec<(Time, u32, Time, &str)> = (0..50)
            .map(|i| (i * 10, 4, 100 + (i % 7) * 30, "a"))
            .collect();
        let w = workload(trace(&list), 4, None, Estimate::Exact, 0);
        let out = run(&w, 4, Model::Queue(Policy::Fifo), &Settings::default());
        assert!(out.starts.windows(2).all(|p| p[0] < p[1]));
        let backfill = run(&w, 4, Model::Queue(Policy::Backfill), &Settings::default());
        assert_eq!(out.starts, backfill.starts);
    }

    #[test]
    fn backfill_fills_the_gap_fifo_leaves() {
        // A big job waits for the pool; small ones behind it fit beside the running one.
        let list = [
            (0, 2, 100, "a"),
            (1, 4, 100, "a"),
            (2, 1, 50, "a"),
            (3, 1, 50, "a"),
        ];
        let w = workload(trace(&list), 4, None, Estimate::Exact, 0);
        let fifo = run(&w, 4, Model::Queue(Policy::Fifo), &Settings::default());
        let backfill = run(&w, 4, Model::Queue(Policy::Backfill), &Settings::default());
        assert_eq!(fifo.starts, vec![0, 100, 200, 200]);
        assert_eq!(backfill.starts, vec![0, 100, 2, 3]);
        assert!(backfill.metrics.mean_delay_s < fifo.metrics.mean_delay_s);
    }

    #[test]
    fn static_blocks_round_up_and_wait_for_the_grid() {
        let list = [(10, 1, 100, "a"), (20, 1, 100, "a")];
        let w = workload(trace(&list), 1, None, Estimate::Exact, 0);
        let out = run(&w, 1, Model::Static { block: 3_600 }, &Settings::default());
        assert_eq!(out.starts, vec![3_600, 7_200]);
        assert!((out.metrics.held_idle_fraction - (1.0 - 200.0 / 7_200.0)).abs() < 1e-9);
    }

    #[test]
    fn fairshare_converges_to_the_set_shares_on_a_saturated_two_group_workload() {
        // Both groups always have far more one-card, one-hour jobs waiting than 8 cards run.
        let hour = 3_600;
        let mut jobs = Vec::new();
        for i in 0..(30 * 24) {
            for group in 0..2 {
                for _ in 0..8 {
                    jobs.push(SimJob {
                        submit: i * hour,
                        gpus: 1,
                        duration: hour,
                        limit: hour,
                        group,
                    });
                }
            }
        }
        let w = Workload {
            jobs,
            groups: vec!["a".into(), "b".into()],
            skipped: 0,
            trace_load: 2.0,
            load: 2.0,
        };
        let settings = Settings {
            half_life: 86_400,
            shares: ShareTable {
                groups: [("a".into(), 3.0), ("b".into(), 1.0)].into(),
                users: Default::default(),
            },
            ..Settings::default()
        };
        let out = run(&w, 8, Model::Queue(Policy::Fairshare), &settings);
        // Card-seconds each group ran in days 10 to 30.
        let (from, to) = (10 * 86_400, 30 * 86_400);
        let mut got = [0f64; 2];
        for (job, &s) in w.jobs.iter().zip(&out.starts) {
            let (a, b) = (s.max(from), (s + job.duration).min(to));
            if b > a {
                got[job.group] += (b - a) as f64;
            }
        }
        let share_a = got[0] / (got[0] + got[1]);
        assert!((share_a - 0.75).abs() < 0.03, "group a got {share_a:.3}");
        // Without fair share, arrival order splits the pool evenly.
        let fifo = run(&w, 8, Model::Queue(Policy::Fifo), &settings);
        let mut even = [0f64; 2];
        for (job, &s) in w.jobs.iter().zip(&fifo.starts) {
            let (a, b) = (s.max(from), (s + job.duration).min(to));
            if b > a {
                even[job.group] += (b - a) as f64;
            }
        }
        assert!((even[0] / (even[0] + even[1]) - 0.5).abs() < 0.03);
    }

    #[test]
    fn water_filling_caps_small_demands_and_splits_the_rest_by_weight() {
        let give = water_fill(10.0, &[0, 1, 2], &[2, 20, 20], &[1.0, 1.0, 3.0]);
        assert_eq!(give[0], 2.0);
        assert!((give[1] - 2.0).abs() < 1e-9 && (give[2] - 6.0).abs() < 1e-9);
    }

    #[test]
    fn jain_is_one_when_groups_get_their_part_and_lower_when_not() {
        // Two groups, two cards, each always wanting both.
        let fair = workload(
            trace(&[
                (0, 1, 100, "a"),
                (0, 1, 100, "b"),
                (0, 1, 100, "a"),
                (0, 1, 100, "b"),
            ]),
            2,
            None,
            Estimate::Exact,
            0,
        );
        // Sorted by arrival then group: a, a, b, b.
        assert!((jain(&fair, 2, &[0, 100, 0, 100], &ShareTable::default()) - 1.0).abs() < 1e-9);
        // Group a takes both cards first: x = (2, 0) → ½ while b waits.
        let j = jain(&fair, 2, &[0, 0, 100, 100], &ShareTable::default());
        assert!((j - 0.5).abs() < 1e-9, "{j}");
    }
}

/// How often start-time forecasts ([`crate::forecast`]) made in a replay came true.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Accuracy {
    pub policy: String,
    /// Jobs forecast (every `every`-th one submitted from the held-out start on).
    pub jobs: usize,
    /// Share of them that started by their p50, and by their p90 (ideally 0.5 and 0.9).
    pub by_p50: f64,
    pub by_p90: f64,
    /// Median of |start − p50|, and the same jobs' mean wait, for scale.
    pub median_error_s: f64,
    pub mean_wait_s: f64,
}

/// Replays `w` under `policy` and, for every `every`-th job submitted at `from` or later (the
/// held-out part; the replay before it gives the history), forecasts its start as Lanes
/// would the moment it is submitted, from the run times of the last 1,000 jobs that ended
/// before then, and compares with when it really started in the replay.
pub fn accuracy(
    w: &Workload,
    gpus: u32,
    policy: Policy,
    settings: &Settings,
    from: Time,
    every: usize,
    samples: u32,
) -> Accuracy {
    use super::forecast::{forecast, Running, Runtimes, State};
    const HISTORY: usize = 1_000;
    let every = every.max(1);
    let mut history: std::collections::VecDeque<(Time, Time)> = Default::default();
    let mut made: Vec<(usize, crate::forecast::Forecast)> = Vec::new();
    let cards: Vec<Card> = (0..gpus).map(|_| Card::idle(Time::MIN, 1)).collect();
    let owners = vec![Owner::default(); w.groups.len()];
    let (starts, _) = replay_queue_observed(w, gpus, policy, settings, &mut |m| {
        for &j in m.ended {
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back((w.jobs[j].duration, w.jobs[j].limit));
        }
        for &j in m.arrived {
            if w.jobs[j].submit < from || j % every != 0 {
                continue;
            }
            let Some(candidate) = m.waiting.iter().find(|x| x.id == j as i64) else {
                continue;
            };
            let others: Vec<Waiting> = m
                .waiting
                .iter()
                .filter(|x| x.id != j as i64)
                .cloned()
                .collect();
            let running: Vec<Running> = m
                .running
                .iter()
                .map(|(r, start, on)| Running {
                    cards: on.clone(),
                    started: *start,
                    limit_end: start + w.jobs[*r].limit,
                })
                .collect();
            let state = State {
                now: m.now,
                policy,
                cards: &cards,
                running: &running,
                waiting: &others,
                owners: &owners,
            };
            let runtimes = Runtimes::new(history.iter().copied());
            let f = forecast(
                &state,
                candidate,
                &runtimes,
                samples,
                j as u64,
                365 * 86_400,
            );
            made.push((j, f));
        }
    });
    let mut errors: Vec<f64> = Vec::new();
    let (mut by_p50, mut by_p90, mut waits) = (0usize, 0usize, 0f64);
    for (j, f) in &made {
        let start = starts[*j];
        by_p50 += usize::from(f.p50.is_none_or(|p| start <= p));
        by_p90 += usize::from(f.p90.is_none_or(|p| start <= p));
        errors.push(f.p50.map_or(f64::INFINITY, |p| (start - p).abs() as f64));
        waits += (start - w.jobs[*j].submit) as f64;
    }
    errors.sort_by(f64::total_cmp);
    let n = made.len().max(1) as f64;
    Accuracy {
        policy: policy.as_str().into(),
        jobs: made.len(),
        by_p50: by_p50 as f64 / n,
        by_p90: by_p90 as f64 / n,
        median_error_s: errors.get(errors.len() / 2).copied().unwrap_or(0.0),
        mean_wait_s: waits / n,
    }
}
