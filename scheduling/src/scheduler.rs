//! One scheduling pass: which waiting jobs start now, on which cards, and why the others wait.
//! Plain data in, plain data out; the server's queue and the trace simulator both call it.
//!
//! Cards are a *profile*: each is busy until `free_from` (its running queue job's time limit)
//! and blocked during `blocks` (bookings and maintenance). A job of `gpus` cards and a time
//! limit `d` may start at `t` on a card when the card is free from `t` on and no block meets
//! `[t, t + d)`: a queued job never runs into a booking.
//!
//! Policies:
//! - `fifo`: jobs start in order; the first that cannot start holds up everything behind it.
//! - `backfill` (EASY): the first job that cannot start gets a reservation at the earliest time
//!   it can (its cards are blocked from then for its time limit); jobs behind it start now
//!   only where they fit around that reservation, so they never delay it.
//! - `fairshare`: as `backfill`, in the order of priority the caller computed (see
//!   [`super::fairshare`]) instead of arrival.

/// Seconds (since any epoch the caller likes: Unix time in the server, trace time in replays).
pub type Time = i64;

pub use lanes_types::queue::{Policy, WaitReason};

/// A card as the scheduler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Card {
    /// Busy until then (the time limit of the queue job on it); idle cards say `now` or earlier.
    pub free_from: Time,
    /// Bookings and maintenance `[start, end)` that queue jobs must keep clear of, by start.
    pub blocks: Vec<(Time, Time)>,
    pub memory_total: u64,
    /// What is free on it now (others' processes may hold some).
    pub memory_free: u64,
    /// The machine it is in: a job's cards all come from one host (its runner is there).
    pub host: u32,
}

impl Card {
    pub fn idle(now: Time, memory: u64) -> Self {
        Self {
            free_from: now,
            blocks: Vec::new(),
            memory_total: memory,
            memory_free: memory,
            host: 0,
        }
    }

    fn clear(&self, from: Time, to: Time) -> bool {
        self.free_from <= from && !self.blocks.iter().any(|&(s, e)| s < to && from < e)
    }

    /// The start of the first block that ends after `t` (how long the card stays free).
    fn next_block(&self, t: Time) -> Time {
        self.blocks
            .iter()
            .filter(|&&(_, e)| e > t)
            .map(|&(s, _)| s)
            .min()
            .unwrap_or(Time::MAX)
    }
}

/// A job waiting for cards.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    pub id: i64,
    /// Index into [`Pass::owners`].
    pub owner: usize,
    pub gpus: u32,
    /// Seconds; the job is stopped then, so the scheduler plans with it.
    pub time_limit: Time,
    /// Each card needs at least this much free memory.
    pub min_memory: u64,
    pub submitted: Time,
    /// Higher runs first under `fairshare`; ignored otherwise.
    pub priority: f64,
}

/// What an owner (a user) holds, now and ahead, and may hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Owner {
    /// Cards held `[start, end)`: bookings (so running queue jobs too), now and upcoming.
    pub holds: Vec<(Time, Time, u32)>,
    /// Most cards held at once (the booking quota), if limited.
    pub max_gpus: Option<u32>,
}

impl Owner {
    /// Most cards held at once during `[from, to)`.
    pub fn peak(&self, from: Time, to: Time) -> u32 {
        let mut edges: Vec<(Time, i64)> = self
            .holds
            .iter()
            .filter(|&&(start, end, _)| start < to && from < end)
            .flat_map(|&(start, end, n)| [(start.max(from), i64::from(n)), (end, -i64::from(n))])
            .collect();
        // At one instant ends come before starts: slots are half-open.
        edges.sort_unstable();
        let (mut held, mut peak) = (0i64, 0i64);
        for (_, delta) in edges {
            held += delta;
            peak = peak.max(held);
        }
        peak as u32
    }
}

/// Everything one pass looks at.
#[derive(Clone, Debug)]
pub struct Pass<'a> {
    pub now: Time,
    pub policy: Policy,
    pub cards: &'a [Card],
    pub waiting: &'a [Waiting],
    pub owners: &'a [Owner],
    /// Also say why every job that does not start waits, and when it may start. Replays that
    /// only need the decisions turn this off.
    pub explain: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    pub job: i64,
    /// Indices into [`Pass::cards`], ascending.
    pub cards: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Wait {
    pub job: i64,
    pub reason: WaitReason,
    /// When it may start if everything ahead runs to its time limit and nothing new arrives.
    pub estimated_start: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub starts: Vec<Start>,
    /// In the order the jobs are considered (empty unless `explain`).
    pub waits: Vec<Wait>,
    /// The reservation the first blocked job holds (backfill and fairshare).
    pub reservation: Option<(i64, Time, Vec<usize>)>,
}

/// The order a policy considers jobs in: by arrival, or by priority and then arrival.
pub fn order(policy: Policy, waiting: &[Waiting]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..waiting.len()).collect();
    if policy.uses_priority() {
        order.sort_by(|&a, &b| {
            let (a, b) = (&waiting[a], &waiting[b]);
            b.priority
                .total_cmp(&a.priority)
                .then(a.submitted.cmp(&b.submitted))
                .then(a.id.cmp(&b.id))
        });
    } else {
        order.sort_by_key(|&i| (waiting[i].submitted, waiting[i].id));
    }
    order
}

/// One pass: see the module comment.
pub fn schedule(pass: &Pass) -> Plan {
    let now = pass.now;
    let mut cards: Vec<Card> = pass.cards.to_vec();
    let mut owners: Vec<Owner> = pass.owners.to_vec();
    // Cards free now regardless of blocks: a quick upper bound on what can start.
    let mut free_now = cards.iter().filter(|c| c.free_from <= now).count() as u32;
    let mut plan = Plan::default();
    let mut held_up = false; // fifo: a job ahead could not start
    let mut pending_waits: Vec<(usize, WaitReason)> = Vec::new();
    // Shapes (cards, time limit, memory) that did not fit now in this pass: a job at least as
    // wide, as long and as demanding cannot fit either (cards only get busier as jobs start),
    // so a queue of thousands is not tried card by card for each (replays and forecasts).
    let mut unfit: Vec<(u32, Time, u64)> = Vec::new();

    for i in order(pass.policy, pass.waiting) {
        let job = &pass.waiting[i];
        if !pass.explain && (held_up || free_now == 0) {
            break;
        }
        let owner = &owners[job.owner];
        if let Some(limit) = owner.max_gpus {
            let held = owner.peak(now, now + job.time_limit);
            if held + job.gpus > limit {
                pending_waits.push((
                    i,
                    WaitReason::OverLimit {
                        limit,
                        in_use: held,
                    },
                ));
                continue;
            }
        }
        if held_up {
            pending_waits.push((i, WaitReason::BehindHigherPriority));
            continue;
        }
        let shape = (job.gpus, job.time_limit, job.min_memory);
        let fit = if job.gpus > free_now
            || unfit
                .iter()
                .any(|&(g, l, m)| shape.0 >= g && shape.1 >= l && shape.2 >= m)
        {
            None
        } else {
            let fit = fit_now(&cards, job, now);
            if fit.is_none() {
                unfit.push(shape);
            }
            fit
        };
        if let Some(chosen) = fit {
            for &c in &chosen {
                cards[c].free_from = now + job.time_limit;
            }
            free_now -= job.gpus;
            owners[job.owner]
                .holds
                .push((now, now + job.time_limit, job.gpus));
            plan.starts.push(Start {
                job: job.id,
                cards: chosen,
            });
            continue;
        }
        if plan.reservation.is_some() {
            if !pass.explain {
                continue;
            }
            // Cards may be free, but not around the reservation: it waits its turn.
            let reason = if job.gpus <= free_now && eligible(&cards, job) >= job.gpus {
                WaitReason::BehindHigherPriority
            } else {
                cards_reason(&cards, job, now)
            };
            pending_waits.push((i, reason));
            continue;
        }
        // The first job that cannot start (unless it never can: then it holds up nobody).
        let reason = cards_reason(&cards, job, now);
        if matches!(reason, WaitReason::NeverFits { .. }) {
            pending_waits.push((i, reason));
            continue;
        }
        match pass.policy {
            Policy::Fifo => held_up = true,
            Policy::Backfill | Policy::Fairshare | Policy::Las => {
                if let Some((at, chosen)) = earliest(&cards, job, now) {
                    for &c in &chosen {
                        cards[c].blocks.push((at, at + job.time_limit));
                    }
                    plan.reservation = Some((job.id, at, chosen));
                }
            }
        }
        pending_waits.push((i, reason));
    }

    if pass.explain {
        // Forecast: place each waiting job, in order, at the earliest time it fits among what
        // started and what was placed before it.
        let mut forecast = cards;
        if let Some((_, at, chosen)) = &plan.reservation {
            let job = pending_waits
                .iter()
                .map(|&(i, _)| &pass.waiting[i])
                .find(|j| Some(j.id) == plan.reservation.as_ref().map(|r| r.0));
            if let Some(job) = job {
                for &c in chosen {
                    forecast[c]
                        .blocks
                        .retain(|&b| b != (*at, *at + job.time_limit));
                }
            }
        }
        for (i, reason) in pending_waits {
            let job = &pass.waiting[i];
            let estimated_start = match reason {
                WaitReason::NeverFits { .. } => None,
                _ => earliest(&forecast, job, now).map(|(at, chosen)| {
                    for &c in &chosen {
                        forecast[c].free_from = at + job.time_limit;
                    }
                    at
                }),
            };
            plan.waits.push(Wait {
                job: job.id,
                reason,
                estimated_start,
            });
        }
    }
    plan
}

/// How many cards could ever hold the job (enough memory) on the best host.
fn eligible(cards: &[Card], job: &Waiting) -> u32 {
    most_on_one_host(cards, |c| c.memory_total >= job.min_memory)
}

/// The largest number of cards of one host that `keep` accepts.
fn most_on_one_host(cards: &[Card], keep: impl Fn(&Card) -> bool) -> u32 {
    let mut per_host: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for card in cards.iter().filter(|c| keep(c)) {
        *per_host.entry(card.host).or_default() += 1;
    }
    per_host.into_values().max().unwrap_or(0)
}

/// Of the fitting cards (`(next block, index)`), the `n` a job takes: all on one host. Among
/// hosts with enough, the one with the fewest fitting cards (a big free host stays whole for a
/// big job), then the lowest host; on it, the cards with a block soonest after the job, then
/// the lowest index. Ascending indices.
fn choose(cards: &[Card], mut fitting: Vec<(Time, usize)>, n: usize) -> Option<Vec<usize>> {
    let mut per_host: std::collections::BTreeMap<u32, Vec<(Time, usize)>> = Default::default();
    fitting.sort_unstable();
    for (next, i) in fitting {
        per_host.entry(cards[i].host).or_default().push((next, i));
    }
    let best = per_host
        .into_values()
        .filter(|fit| fit.len() >= n)
        .min_by_key(|fit| fit.len())?;
    let mut chosen: Vec<usize> = best[..n].iter().map(|&(_, i)| i).collect();
    chosen.sort_unstable();
    Some(chosen)
}

fn cards_reason(cards: &[Card], job: &Waiting, now: Time) -> WaitReason {
    let eligible = eligible(cards, job);
    if eligible < job.gpus {
        return WaitReason::NeverFits {
            needs: job.gpus,
            eligible,
        };
    }
    let free = most_on_one_host(cards, |c| {
        c.memory_free >= job.min_memory && c.clear(now, now + job.time_limit)
    });
    WaitReason::Cards {
        needs: job.gpus,
        free,
    }
}

/// The cards a job would start on now, if enough are free for its whole time limit. Prefers
/// cards with a booking soonest after it (short jobs fill the gaps before bookings, long gaps
/// stay whole), then the lowest index.
fn fit_now(cards: &[Card], job: &Waiting, now: Time) -> Option<Vec<usize>> {
    let end = now + job.time_limit;
    let fitting: Vec<(Time, usize)> = cards
        .iter()
        .enumerate()
        .filter(|(_, c)| c.memory_free >= job.min_memory && c.clear(now, end))
        .map(|(i, c)| (c.next_block(end), i))
        .collect();
    if fitting.len() < job.gpus as usize {
        return None;
    }
    choose(cards, fitting, job.gpus as usize)
}

/// The earliest time at or after `now` when `job.gpus` cards with enough memory are free for
/// its whole time limit, and which cards. Only card release times and block ends can be such
/// a time; none can be earlier than the `gpus`-th smallest release time.
pub fn earliest(cards: &[Card], job: &Waiting, now: Time) -> Option<(Time, Vec<usize>)> {
    let n = job.gpus as usize;
    let eligible: Vec<usize> = (0..cards.len())
        .filter(|&i| cards[i].memory_total >= job.min_memory)
        .collect();
    if n == 0 || eligible.len() < n {
        return None;
    }
    let mut releases: Vec<Time> = eligible
        .iter()
        .map(|&i| cards[i].free_from.max(now))
        .collect();
    releases.select_nth_unstable(n - 1);
    let floor = releases[n - 1];
    // Most often the floor itself fits: try it before gathering every other candidate.
    if let Some(found) = fit_at(cards, &eligible, job, floor) {
        return Some(found);
    }
    let mut candidates: Vec<Time> = releases.into_iter().filter(|&t| t > floor).collect();
    candidates.extend(
        eligible
            .iter()
            .flat_map(|&i| cards[i].blocks.iter().map(|&(_, e)| e))
            .filter(|&e| e > floor),
    );
    candidates.sort_unstable();
    candidates.dedup();
    candidates
        .into_iter()
        .find_map(|t| fit_at(cards, &eligible, job, t))
}

/// The cards among `eligible` the job would take if it started at `t`, if enough are clear.
fn fit_at(
    cards: &[Card],
    eligible: &[usize],
    job: &Waiting,
    t: Time,
) -> Option<(Time, Vec<usize>)> {
    let n = job.gpus as usize;
    let end = t + job.time_limit;
    if eligible.iter().filter(|&&i| cards[i].clear(t, end)).count() < n {
        return None;
    }
    let fitting: Vec<(Time, usize)> = eligible
        .iter()
        .filter(|&&i| cards[i].clear(t, end))
        .map(|&i| (cards[i].next_block(end), i))
        .collect();
    choose(cards, fitting, n).map(|chosen| (t, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

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
        (0..n).map(|_| Card::idle(0, 80 * GIB)).collect()
    }

    fn run(policy: Policy, cards: &[Card], waiting: &[Waiting]) -> Plan {
        schedule(&Pass {
            now: 0,
            policy,
            cards,
            waiting,
            owners: &[Owner::default()],
            explain: true,
        })
    }

    #[test]
    fn a_job_starts_on_free_cards_and_the_next_waits_with_an_estimate() {
        let plan = run(
            Policy::Fifo,
            &cards(4),
            &[job(1, 3, 100, 0), job(2, 2, 50, 1)],
        );
        assert_eq!(
            plan.starts,
            vec![Start {
                job: 1,
                cards: vec![0, 1, 2]
            }]
        );
        assert_eq!(
            plan.waits,
            vec![Wait {
                job: 2,
                reason: WaitReason::Cards { needs: 2, free: 1 },
                estimated_start: Some(100),
            }]
        );
    }

    #[test]
    fn a_job_never_runs_into_a_booking() {
        let mut pool = cards(2);
        pool[0].blocks.push((60, 120));
        pool[1].blocks.push((30, 90));
        let plan = run(
            Policy::Backfill,
            &pool,
            &[job(1, 2, 60, 0), job(2, 1, 60, 0)],
        );
        // Two cards for 60 s: only after both bookings, at 120.
        assert!(plan.starts.iter().all(|s| s.job != 1));
        assert_eq!(plan.reservation, Some((1, 120, vec![0, 1])));
        // One card for 60 s fits before card 0's booking.
        assert_eq!(
            plan.starts,
            vec![Start {
                job: 2,
                cards: vec![0]
            }]
        );
    }

    #[test]
    fn fifo_holds_back_a_small_job_that_backfill_starts() {
        let pool = cards(4);
        let mut busy = pool.clone();
        busy[0].free_from = 100;
        busy[1].free_from = 100;
        let waiting = [job(1, 4, 100, 0), job(2, 2, 100, 1), job(3, 2, 200, 2)];
        let fifo = run(Policy::Fifo, &busy, &waiting);
        assert!(fifo.starts.is_empty());
        assert_eq!(fifo.waits[1].reason, WaitReason::BehindHigherPriority);
        let backfill = run(Policy::Backfill, &busy, &waiting);
        // Job 1 may start at 100 on all four cards; job 2 ends by then, job 3 would not.
        assert_eq!(backfill.reservation, Some((1, 100, vec![0, 1, 2, 3])));
        assert_eq!(
            backfill.starts,
            vec![Start {
                job: 2,
                cards: vec![2, 3]
            }]
        );
        assert_eq!(backfill.waits[1].job, 3);
        // Job 2 took the free cards: none left for job 3 now.
        assert_eq!(
            backfill.waits[1].reason,
            WaitReason::Cards { needs: 2, free: 0 }
        );
        assert_eq!(backfill.waits[1].estimated_start, Some(200));
    }

    #[test]
    fn the_concurrent_gpu_limit_holds_and_does_not_block_others() {
        let waiting = [
            Waiting {
                owner: 0,
                ..job(1, 2, 10, 0)
            },
            Waiting {
                owner: 1,
                ..job(2, 1, 10, 1)
            },
        ];
        // Owner 0 holds one card now, and will hold two from 5 to 8 (a booking ahead).
        let owners = [
            Owner {
                holds: vec![(-10, 3, 1), (5, 8, 2)],
                max_gpus: Some(2),
            },
            Owner::default(),
        ];
        let plan = schedule(&Pass {
            now: 0,
            policy: Policy::Fifo,
            cards: &cards(4),
            waiting: &waiting,
            owners: &owners,
            explain: true,
        });
        assert_eq!(
            plan.starts,
            vec![Start {
                job: 2,
                cards: vec![0]
            }]
        );
        assert_eq!(
            plan.waits[0].reason,
            WaitReason::OverLimit {
                limit: 2,
                in_use: 2
            }
        );
        assert_eq!(
            plan.waits[0].reason.to_string(),
            "over your concurrent-GPU limit (2 of 2 held during its time limit)"
        );
        // A one-card job that ends before the booking ahead fits beside the card held now.
        let short = [Waiting {
            owner: 0,
            ..job(3, 1, 5, 0)
        }];
        let plan = schedule(&Pass {
            now: 0,
            policy: Policy::Fifo,
            cards: &cards(4),
            waiting: &short,
            owners: &owners,
            explain: true,
        });
        assert_eq!(plan.starts.len(), 1, "{plan:?}");
    }

    #[test]
    fn an_owners_peak_counts_overlapping_holds_only() {
        let owner = Owner {
            holds: vec![(0, 10, 1), (10, 20, 2), (5, 15, 1)],
            max_gpus: None,
        };
        assert_eq!(owner.peak(0, 5), 1);
        assert_eq!(owner.peak(0, 10), 2);
        assert_eq!(owner.peak(0, 30), 3);
        assert_eq!(owner.peak(20, 30), 0);
    }

    #[test]
    fn memory_needs_pick_cards_and_impossible_jobs_say_so() {
        let mut pool = cards(3);
        pool[0].memory_free = 10 * GIB;
        pool[2].memory_total = 40 * GIB;
        pool[2].memory_free = 40 * GIB;
        let big = Waiting {
            min_memory: 60 * GIB,
            ..job(1, 1, 10, 0)
        };
        let huge = Waiting {
            min_memory: 60 * GIB,
            ..job(2, 3, 10, 1)
        };
        let plan = run(Policy::Backfill, &pool, &[big, huge]);
        assert_eq!(
            plan.starts,
            vec![Start {
                job: 1,
                cards: vec![1]
            }]
        );
        assert_eq!(
            plan.waits[0].reason,
            WaitReason::NeverFits {
                needs: 3,
                eligible: 2
            }
        );
        assert_eq!(plan.waits[0].estimated_start, None);
    }

    #[test]
    fn fairshare_orders_by_priority_then_arrival() {
        let waiting = [
            Waiting {
                priority: 0.2,
                ..job(1, 1, 10, 0)
            },
            Waiting {
                priority: 0.9,
                ..job(2, 1, 10, 5)
            },
            Waiting {
                priority: 0.9,
                ..job(3, 1, 10, 3)
            },
        ];
        assert_eq!(order(Policy::Fairshare, &waiting), vec![2, 1, 0]);
        assert_eq!(order(Policy::Backfill, &waiting), vec![0, 2, 1]);
    }

    #[test]
    fn reasons_read_as_sentences() {
        let reason = WaitReason::Cards { needs: 4, free: 2 };
        assert_eq!(
            reason.to_string(),
            "needs 4 cards, 2 free for its time limit"
        );
    }

    /// A random pool (some cards busy, some booked ahead) and a random queue.
    fn workload() -> impl Strategy<Value = (Vec<Card>, Vec<Waiting>)> {
        let card = (0i64..200, prop::option::of((0i64..300, 1i64..200)), 0u32..3).prop_map(
            |(free_from, block, host)| Card {
                free_from,
                blocks: block.map(|(s, d)| vec![(s, s + d)]).unwrap_or_default(),
                memory_total: 80 * GIB,
                memory_free: 80 * GIB,
                host,
            },
        );
        let waiting = (1u32..5, 1i64..300);
        (
            prop::collection::vec(card, 1..10),
            prop::collection::vec(waiting, 1..15),
        )
            .prop_map(|(cards, jobs)| {
                let jobs = jobs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (gpus, limit))| job(i as i64, gpus, limit, i as Time))
                    .collect();
                (cards, jobs)
            })
    }

    proptest! {
        /// Backfill never delays the head job: after the jobs that start now are placed, the
        /// blocked head can still start at its reservation, and no earlier than it could have
        /// before any of them started.
        #[test]
        fn backfill_never_delays_the_head_reservation((pool, waiting) in workload()) {
            let now = 50;
            let pass = Pass { now, policy: Policy::Backfill, cards: &pool, waiting: &waiting,
                owners: &[Owner::default()], explain: false };
            let plan = schedule(&pass);
            let Some((head, at, _)) = plan.reservation.clone() else { return Ok(()) };
            let head_job = waiting.iter().find(|j| j.id == head).unwrap();
            // The jobs ahead of the head started; recompute its earliest start without the
            // backfilled jobs (those behind it in order) and with them.
            let order = order(Policy::Backfill, &waiting);
            let head_pos = order.iter().position(|&i| waiting[i].id == head).unwrap();
            let ahead: Vec<i64> = order[..head_pos].iter().map(|&i| waiting[i].id).collect();
            let mut before = pool.clone();
            let mut after = pool.clone();
            for start in &plan.starts {
                let limit = waiting.iter().find(|j| j.id == start.job).unwrap().time_limit;
                for &c in &start.cards {
                    after[c].free_from = now + limit;
                    if ahead.contains(&start.job) {
                        before[c].free_from = now + limit;
                    }
                }
            }
            let without = earliest(&before, head_job, now).map(|(t, _)| t);
            let with = earliest(&after, head_job, now).map(|(t, _)| t);
            prop_assert_eq!(without, Some(at));
            prop_assert_eq!(with, Some(at));
        }

        /// Started jobs never share a card, never use a busy card, never run into a block.
        #[test]
        fn starts_use_distinct_free_cards_clear_of_blocks((pool, waiting) in workload()) {
            for policy in Policy::ALL {
                let now = 50;
                let plan = schedule(&Pass { now, policy, cards: &pool, waiting: &waiting,
                    owners: &[Owner::default()], explain: true });
                let mut used = vec![false; pool.len()];
                for start in &plan.starts {
                    let job = waiting.iter().find(|j| j.id == start.job).unwrap();
                    prop_assert_eq!(start.cards.len(), job.gpus as usize);
                    // A job's cards are on one host: its runner is there.
                    prop_assert!(start.cards.iter().all(|&c| pool[c].host == pool[start.cards[0]].host));
                    for &c in &start.cards {
                        prop_assert!(!used[c]);
                        used[c] = true;
                        prop_assert!(pool[c].clear(now, now + job.time_limit));
                    }
                }
                prop_assert_eq!(plan.starts.len() + plan.waits.len(), waiting.len());
            }
        }

        /// Under fifo, a job starts only if every job ahead of it started.
        #[test]
        fn fifo_starts_a_prefix_of_the_queue((pool, waiting) in workload()) {
            let plan = schedule(&Pass { now: 50, policy: Policy::Fifo, cards: &pool,
                waiting: &waiting, owners: &[Owner::default()], explain: true });
            let started: Vec<i64> = plan.starts.iter().map(|s| s.job).collect();
            let prefix: Vec<i64> = waiting
                .iter()
                .filter(|j| j.gpus <= most_on_one_host(&pool, |_| true))
                .map(|j| j.id)
                .take(started.len())
                .collect();
            prop_assert_eq!(started, prefix);
        }
    }
}
