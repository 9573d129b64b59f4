//! When would a job start if it were queued now? The current queue, the running jobs and the
//! bookings are replayed through the same [`schedule`] the queue runs, with the policy in
//! force, many times: each time every job (running or waiting) runs for a time drawn from what
//! past jobs really ran as a share of their time limit (a running one for at least what it has
//! run already). The new job's start over those replays gives a likely start (p50) and a late
//! one (p90).
//!
//! What it cannot know: jobs submitted later that go ahead (fair share, least attained
//! service), bookings made later, holders that give cards back early, preemptions. How often
//! it is right despite them is measured on the shipped traces ([`accuracy`] in the simulator).

use super::scheduler::{schedule, Card, Owner, Pass, Policy, Time, Waiting};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A queue job running now.
#[derive(Clone, Debug, PartialEq)]
pub struct Running {
    /// Indices into [`State::cards`].
    pub cards: Vec<usize>,
    pub started: Time,
    /// When its time limit stops it: the scheduler plans with that.
    pub limit_end: Time,
}

/// What the queue sees now.
#[derive(Clone, Debug)]
pub struct State<'a> {
    pub now: Time,
    pub policy: Policy,
    /// The cards with their bookings and maintenance as blocks, but not the running queue
    /// jobs' holds (see `running`).
    pub cards: &'a [Card],
    pub running: &'a [Running],
    /// The waiting jobs with their priorities as the last pass computed them.
    pub waiting: &'a [Waiting],
    pub owners: &'a [Owner],
}

/// How long jobs run as a share of their time limit: past jobs' run times over their limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Runtimes {
    /// Ascending, each in (0, 1].
    ratios: Vec<f64>,
}

impl Runtimes {
    /// From past jobs' (run time, time limit) in seconds; nonsense pairs are left out. With
    /// none, every job is taken to run to its limit (the scheduler's own estimate).
    pub fn new(runs: impl IntoIterator<Item = (Time, Time)>) -> Self {
        let mut ratios: Vec<f64> = runs
            .into_iter()
            .filter(|&(ran, limit)| ran > 0 && limit > 0)
            .map(|(ran, limit)| (ran as f64 / limit as f64).min(1.0))
            .collect();
        ratios.sort_by(f64::total_cmp);
        Self { ratios }
    }

    pub fn len(&self) -> usize {
        self.ratios.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ratios.is_empty()
    }

    /// A run time for a job of `limit` that has run `elapsed` already: a past job's share of
    /// its limit among those that ran longer than `elapsed` would be, else the limit.
    fn draw(&self, rng: &mut ChaCha8Rng, limit: Time, elapsed: Time) -> Time {
        let limit = limit.max(1);
        let floor = elapsed as f64 / limit as f64;
        let first = self.ratios.partition_point(|&r| r <= floor);
        let longer = &self.ratios[first..];
        if longer.is_empty() {
            return limit;
        }
        let r = longer[(rng.next_u64() % longer.len() as u64) as usize];
        ((r * limit as f64).ceil() as Time).clamp(elapsed + 1, limit)
    }
}

/// A likely start and a late one; `None` where it would not start within the horizon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Forecast {
    pub p50: Option<Time>,
    pub p90: Option<Time>,
    pub samples: u32,
}

/// Replays in one forecast: enough for a stable p90 at a few milliseconds on a lab's queue.
pub const SAMPLES: u32 = 64;

/// The start of `candidate` (not among `state.waiting`) if queued at `state.now`, over
/// `samples` replays of at most `horizon` seconds each.
pub fn forecast(
    state: &State,
    candidate: &Waiting,
    runtimes: &Runtimes,
    samples: u32,
    seed: u64,
    horizon: Time,
) -> Forecast {
    let samples = samples.max(1);
    let mut starts: Vec<Option<Time>> = (0..samples)
        .map(|i| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ u64::from(i).wrapping_mul(0x9E37_79B9));
            replay_once(state, candidate, runtimes, &mut rng, state.now + horizon)
        })
        .collect();
    // Not starting within the horizon sorts last.
    starts.sort_by_key(|s| s.unwrap_or(Time::MAX));
    let at = |q: f64| starts[((samples as f64 * q).ceil() as usize).clamp(1, starts.len()) - 1];
    Forecast {
        p50: at(0.5),
        p90: at(0.9),
        samples,
    }
}

/// One replay: when `candidate` starts, or `None` past `until`.
fn replay_once(
    state: &State,
    candidate: &Waiting,
    runtimes: &Runtimes,
    rng: &mut ChaCha8Rng,
    until: Time,
) -> Option<Time> {
    let now = state.now;
    // Each running job's hold and when it really ends: (cards, start, limit end, end).
    let mut active: Vec<(Vec<usize>, Time, Time, Time)> = state
        .running
        .iter()
        .map(|r| {
            let ran = runtimes.draw(rng, r.limit_end - r.started, now - r.started);
            (r.cards.clone(), r.started, r.limit_end, r.started + ran)
        })
        .collect();
    let mut waiting: Vec<Waiting> = state.waiting.to_vec();
    waiting.push(candidate.clone());
    let run_time: Vec<(i64, Time)> = waiting
        .iter()
        .map(|w| (w.id, runtimes.draw(rng, w.time_limit, 0)))
        .collect();
    let mut owners: Vec<Owner> = state.owners.to_vec();
    // Bookings and maintenance start and end at fixed times: the queue looks again then.
    let mut edges: Vec<Time> = state
        .cards
        .iter()
        .flat_map(|c| c.blocks.iter().flat_map(|&(s, e)| [s, e]))
        .chain(state.cards.iter().map(|c| c.free_from))
        .filter(|&t| t > now)
        .collect();
    edges.sort_unstable();
    edges.dedup();
    let mut t = now;
    // Every pass starts a job or moves to a later event: bounded by jobs plus events.
    for _ in 0..(waiting.len() + active.len() + edges.len() + 2) * 2 {
        active.retain(|a| a.3 > t);
        let mut cards = state.cards.to_vec();
        for (on, start, limit_end, _) in &active {
            for &c in on {
                cards[c].blocks.push((*start, *limit_end));
            }
        }
        let plan = schedule(&Pass {
            now: t,
            policy: state.policy,
            cards: &cards,
            waiting: &waiting,
            owners: &owners,
            explain: false,
        });
        for start in &plan.starts {
            if start.job == candidate.id {
                return Some(t);
            }
            let Some(i) = waiting.iter().position(|w| w.id == start.job) else {
                continue;
            };
            let job = waiting.swap_remove(i);
            let ran = run_time
                .iter()
                .find(|(id, _)| *id == job.id)
                .map_or(job.time_limit, |r| r.1);
            owners[job.owner].holds.push((t, t + ran, job.gpus));
            active.push((start.cards.clone(), t, t + job.time_limit, t + ran));
        }
        if !plan.starts.is_empty() {
            continue;
        }
        let next_end = active.iter().map(|a| a.3).filter(|&e| e > t).min();
        let next_edge = edges.iter().copied().find(|&e| e > t);
        t = match (next_end, next_edge) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        if t > until {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64, gpus: u32, limit: Time, submitted: Time) -> Waiting {
        Waiting {
            id,
            owner: 0,
            gpus,
            time_limit: limit,
            min_memory: 0,
            submitted,
            priority: 0.0,
        }
    }

    fn cards(n: usize) -> Vec<Card> {
        (0..n).map(|_| Card::idle(0, 1)).collect()
    }

    #[test]
    fn with_no_history_it_is_the_schedulers_own_estimate_from_time_limits() {
        let cards = cards(2);
        let running = [Running {
            cards: vec![0, 1],
            started: 0,
            limit_end: 3_600,
        }];
        let waiting = [job(1, 2, 1_800, 10)];
        let state = State {
            now: 100,
            policy: Policy::Fifo,
            cards: &cards,
            running: &running,
            waiting: &waiting,
            owners: &[Owner::default()],
        };
        let f = forecast(
            &state,
            &job(2, 1, 600, 100),
            &Runtimes::default(),
            16,
            1,
            86_400,
        );
        // After the running job (to 3600) and the one ahead (to 5400).
        assert_eq!((f.p50, f.p90), (Some(5_400), Some(5_400)));
        // An empty queue on a free card: now.
        let free = State {
            running: &[],
            waiting: &[],
            ..state.clone()
        };
        let f = forecast(
            &free,
            &job(2, 1, 600, 100),
            &Runtimes::default(),
            4,
            1,
            86_400,
        );
        assert_eq!(f.p50, Some(100));
    }

    #[test]
    fn jobs_that_end_early_bring_the_likely_start_forward_and_p90_is_later_than_p50() {
        let cards = cards(1);
        let running = [Running {
            cards: vec![0],
            started: 0,
            limit_end: 10_000,
        }];
        let state = State {
            now: 1_000,
            policy: Policy::Backfill,
            cards: &cards,
            running: &running,
            waiting: &[],
            owners: &[Owner::default()],
        };
        // Seven in ten past jobs ran a fifth of their limit, the rest all of it.
        let runtimes =
            Runtimes::new((0..100).map(|i| (if i % 10 < 7 { 200 } else { 1_000 }, 1_000)));
        let f = forecast(&state, &job(9, 1, 600, 1_000), &runtimes, 200, 7, 86_400);
        // It has run a tenth of its limit: likely it ends at a fifth, late at its limit.
        assert_eq!((f.p50, f.p90), (Some(2_000), Some(10_000)), "{f:?}");
        // Past the share every past job ran, a running job runs to its limit.
        let later = State {
            now: 5_000,
            ..state.clone()
        };
        let f = forecast(&later, &job(9, 1, 600, 5_000), &runtimes, 50, 7, 86_400);
        assert_eq!((f.p50, f.p90), (Some(10_000), Some(10_000)));
    }

    #[test]
    fn bookings_keep_the_job_out_and_the_horizon_bounds_the_answer() {
        let mut cards = cards(1);
        // Booked from 1000 to 90000: a 2-hour job fits only after.
        cards[0].blocks.push((1_000, 90_000));
        let state = State {
            now: 0,
            policy: Policy::Fifo,
            cards: &cards,
            running: &[],
            waiting: &[],
            owners: &[Owner::default()],
        };
        let f = forecast(
            &state,
            &job(1, 1, 7_200, 0),
            &Runtimes::default(),
            4,
            1,
            86_400 * 2,
        );
        assert_eq!(f.p50, Some(90_000));
        let f = forecast(
            &state,
            &job(1, 1, 7_200, 0),
            &Runtimes::default(),
            4,
            1,
            3_600,
        );
        assert_eq!(f.p50, None);
        // A short one fits before the booking.
        let f = forecast(
            &state,
            &job(1, 1, 900, 0),
            &Runtimes::default(),
            4,
            1,
            3_600,
        );
        assert_eq!(f.p50, Some(0));
    }

    #[test]
    fn the_policy_in_force_orders_the_replay() {
        let cards = cards(1);
        let running = [Running {
            cards: vec![0],
            started: 0,
            limit_end: 1_000,
        }];
        // One job ahead by arrival, but of low priority.
        let mut ahead = job(1, 1, 5_000, 0);
        ahead.priority = 0.1;
        let mut mine = job(2, 1, 500, 10);
        mine.priority = 0.9;
        let state = State {
            now: 10,
            policy: Policy::Fifo,
            cards: &cards,
            running: &running,
            waiting: std::slice::from_ref(&ahead),
            owners: &[Owner::default()],
        };
        let fifo = forecast(&state, &mine, &Runtimes::default(), 4, 1, 86_400);
        assert_eq!(fifo.p50, Some(6_000));
        let fair = State {
            policy: Policy::Fairshare,
            ..state.clone()
        };
        assert_eq!(
            forecast(&fair, &mine, &Runtimes::default(), 4, 1, 86_400).p50,
            Some(1_000)
        );
    }
}
