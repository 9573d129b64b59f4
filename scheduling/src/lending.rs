//! The mixed model: part of the pool held by bookings whose holders work in spells and leave
//! the cards idle between them (at an idle fraction measured in real clusters, a parameter),
//! the rest run by the queue; replayed with and without lending idle booked cards to
//! preemptible queue jobs, as Lanes lends them: a booking idle for the detection window lends
//! its cards to one preemptible job that fits on them (or, with loans across bookings, a wider
//! job gathers the idle cards of several bookings on one node); when a holder's next spell
//! begins the borrower gets the grace period to checkpoint and leave (the holder waits for it),
//! giving back every card it borrowed, then waits in the queue again with the rest of its work
//! plus a restart cost.
//!
//! Time advances in fixed steps (a minute by default); the queue runs first-fit in submission
//! order on its own cards (backfill without reservations), and the same holders' spells are
//! replayed in both runs, so the two differ by lending alone. Deterministic for a seed.

use super::scheduler::Time;
use super::trace::Workload;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq)]
pub struct MixedModel {
    /// Cards held by bookings (the queue has the rest of the pool).
    pub booked_gpus: u32,
    /// Cards per booking.
    pub booking_width: u32,
    /// Cards per node: bookings fill nodes in turn, and a loan across bookings takes cards of
    /// one node's bookings (a job runs on one node).
    pub node_gpus: u32,
    /// Share of booked card-time the holders leave idle.
    pub idle_fraction: f64,
    /// Mean length of an idle spell (spell lengths are exponential).
    pub idle_spell_s: Time,
    /// How long a booking must sit idle before it lends (the watchdog's idle window).
    pub idle_detect_s: Time,
    /// SIGTERM to SIGKILL when the holder takes the cards back.
    pub grace_s: Time,
    /// Work a preempted job repeats when it starts again (from its last checkpoint).
    pub restart_s: Time,
    /// Share of queue jobs submitted as preemptible.
    pub preemptible_fraction: f64,
    pub step_s: Time,
    pub seed: u64,
}

impl Default for MixedModel {
    fn default() -> Self {
        Self {
            booked_gpus: 0,
            booking_width: 4,
            node_gpus: 8,
            idle_fraction: 0.5,
            idle_spell_s: 2 * 3600,
            idle_detect_s: 30 * 60,
            grace_s: 60,
            restart_s: 120,
            preemptible_fraction: 1.0,
            step_s: 60,
            seed: 1,
        }
    }
}

/// How idle booked cards are lent, if at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lending {
    Off,
    /// A loan takes cards of one booking: no job wider than a booking borrows.
    OneBooking,
    /// A loan takes idle cards of one booking, or of several on one node when one is too
    /// narrow; any of their holders' return sends the borrower away from all of them.
    AcrossBookings,
}

impl Lending {
    pub const ALL: [Lending; 3] = [Lending::Off, Lending::OneBooking, Lending::AcrossBookings];

    pub fn label(self) -> &'static str {
        match self {
            Lending::Off => "no",
            Lending::OneBooking => "one booking",
            Lending::AcrossBookings => "across bookings",
        }
    }
}

/// The figures of one replay of the mixed model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixedMetrics {
    pub lending: Lending,
    pub jobs: usize,
    /// Busy card-time (holders' and queue jobs') over all cards × the replay's span.
    pub utilization: f64,
    /// Booked card-time that nobody used: idle holders' cards not lent out.
    pub booked_idle_fraction: f64,
    pub queue_mean_wait_s: f64,
    pub queue_p95_wait_s: f64,
    /// Mean of end − submit of queue jobs.
    pub queue_mean_completion_s: f64,
    /// Mean and worst wait of a holder for a borrower to leave, over all their work spells.
    pub holder_mean_delay_s: f64,
    pub holder_max_delay_s: Time,
    /// Holder spells that had to wait for a borrower.
    pub reclaims: usize,
    /// Share of booked card-time lent out.
    pub lent_fraction: f64,
    /// Loans that took cards of more than one booking.
    pub wide_loans: usize,
    pub span_s: Time,
}

struct Booking {
    /// The holder works in `[busy_from, busy_to)` spells; between them the cards idle.
    spells: Vec<(Time, Time)>,
    spell: usize,
    /// Since when the cards have sat idle (none while the holder works).
    idle_since: Option<Time>,
    loan: Option<Loan>,
}

struct Loan {
    job: usize,
    cards: u32,
}

#[derive(Clone)]
struct QueueJob {
    gpus: u32,
    remaining: Time,
    preemptible: bool,
    first_start: Option<Time>,
    end: Option<Time>,
}

/// The holders' spells from `start` to `until`: exponential busy and idle spells whose means
/// give `idle_fraction`, starting in either at random.
fn spells(rng: &mut ChaCha8Rng, model: &MixedModel, start: Time, until: Time) -> Vec<(Time, Time)> {
    let idle_mean = model.idle_spell_s.max(1) as f64;
    let f = model.idle_fraction.clamp(0.01, 0.99);
    let busy_mean = idle_mean * (1.0 - f) / f;
    let mut draw = |mean: f64| {
        let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        ((-u.ln() * mean) as Time).max(model.step_s)
    };
    let mut t = start;
    let mut out = Vec::new();
    if draw(1.0) % 2 == 0 {
        t += draw(idle_mean);
    }
    while t < until {
        let busy = draw(busy_mean);
        out.push((t, t + busy));
        t += busy + draw(idle_mean);
    }
    out
}

/// Replays `w` (its jobs the queue's, scaled to the queue's own cards) on a pool of
/// `queue_gpus + model.booked_gpus` cards, lending as `lending` says.
pub fn run(w: &Workload, queue_gpus: u32, model: &MixedModel, lending: Lending) -> MixedMetrics {
    let step = model.step_s.max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(model.seed);
    let mut jobs: Vec<QueueJob> = w
        .jobs
        .iter()
        .map(|j| QueueJob {
            gpus: j.gpus,
            remaining: j.duration.max(1),
            preemptible: (rng.next_u64() as f64 / u64::MAX as f64) < model.preemptible_fraction,
            first_start: None,
            end: None,
        })
        .collect();
    let t0 = w.jobs.first().map_or(0, |j| j.submit);
    let total_work: Time = w.jobs.iter().map(|j| j.duration).sum();
    // Long enough for everything to finish however it goes.
    let horizon = w.jobs.last().map_or(0, |j| j.submit) + total_work + 30 * 86_400;
    let width = model.booking_width.max(1);
    let n_bookings = model.booked_gpus / width;
    let per_node = (model.node_gpus / width).max(1) as usize;
    let mut bookings: Vec<Booking> = (0..n_bookings)
        .map(|_| Booking {
            spells: spells(&mut rng, model, t0, horizon),
            spell: 0,
            idle_since: Some(t0),
            loan: None,
        })
        .collect();
    let booked = n_bookings * width;
    let mut queue_free = queue_gpus;
    // Borrowers on lent cards, by job: the bookings they borrow from, and once a holder wants
    // its cards back, when the borrower is gone.
    let mut on_loan: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    let mut leaving: Vec<Option<Time>> = vec![None; jobs.len()];
    let mut running: Vec<usize> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut next = 0;
    let (mut busy_card_s, mut booked_idle_s, mut lent_s) = (0f64, 0f64, 0f64);
    let mut delays: Vec<Time> = Vec::new();
    let mut wide_loans = 0;
    let mut t = t0;
    let mut done = 0;
    let working = |b: &Booking, t: Time| {
        b.spells
            .get(b.spell)
            .is_some_and(|&(from, to)| from <= t && t < to)
    };
    while done < jobs.len() && t < horizon {
        while next < jobs.len() && w.jobs[next].submit <= t {
            pending.push(next);
            next += 1;
        }
        // Holders: a spell that begins asks for the cards back; one that ends leaves them idle.
        for b in &mut bookings {
            while b.spell < b.spells.len() && b.spells[b.spell].1 <= t {
                b.spell += 1;
                b.idle_since = Some(b.spells[b.spell - 1].1);
            }
            if working(b, t) {
                b.idle_since = None;
                match &b.loan {
                    Some(loan) => {
                        leaving[loan.job].get_or_insert(t + model.grace_s);
                    }
                    None if b.spells[b.spell].0 + step > t => delays.push(0),
                    None => {}
                }
            }
        }
        // Borrowers whose grace is over leave every card they borrowed and queue again.
        for j in 0..jobs.len() {
            let Some(at) = leaving[j].filter(|&at| at <= t) else {
                continue;
            };
            for b in std::mem::take(&mut on_loan[j]) {
                if working(&bookings[b], t) {
                    delays.push((at - bookings[b].spells[bookings[b].spell].0).max(0));
                }
                bookings[b].loan = None;
            }
            leaving[j] = None;
            running.retain(|&r| r != j);
            jobs[j].remaining += model.restart_s;
            pending.push(j);
            pending.sort_unstable();
        }
        // Start what fits: the queue's own cards, first fit in submission order.
        let mut still = Vec::with_capacity(pending.len());
        for &j in &pending {
            if jobs[j].gpus <= queue_free {
                queue_free -= jobs[j].gpus;
                jobs[j].first_start.get_or_insert(t);
                running.push(j);
            } else {
                still.push(j);
            }
        }
        pending = still;
        if lending != Lending::Off {
            let mut still = Vec::with_capacity(pending.len());
            for &j in &pending {
                let free = |b: &Booking| {
                    b.loan.is_none() && b.idle_since.is_some_and(|s| t - s >= model.idle_detect_s)
                };
                let lenders = if !jobs[j].preemptible {
                    Vec::new()
                } else if jobs[j].gpus <= width {
                    bookings.iter().position(free).into_iter().collect()
                } else if lending == Lending::AcrossBookings {
                    // The first node whose free bookings together are wide enough.
                    let need = jobs[j].gpus.div_ceil(width) as usize;
                    (0..bookings.len())
                        .step_by(per_node)
                        .map(|first| {
                            (first..(first + per_node).min(bookings.len()))
                                .filter(|&b| free(&bookings[b]))
                                .take(need)
                                .collect::<Vec<_>>()
                        })
                        .find(|on_node| on_node.len() == need)
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                if lenders.is_empty() {
                    still.push(j);
                    continue;
                }
                let mut left = jobs[j].gpus;
                for &b in &lenders {
                    let cards = left.min(width);
                    left -= cards;
                    bookings[b].loan = Some(Loan { job: j, cards });
                }
                wide_loans += usize::from(lenders.len() > 1);
                on_loan[j] = lenders;
                jobs[j].first_start.get_or_insert(t);
                running.push(j);
            }
            pending = still;
        }
        // One step of work: holders' cards, borrowers (none progress while leaving), the queue.
        for b in &bookings {
            let lent = b.loan.as_ref().map_or(0, |l| l.cards);
            let holder_cards = if working(b, t) && b.loan.is_none() {
                width
            } else {
                0
            };
            busy_card_s += ((holder_cards + lent) * step as u32) as f64;
            lent_s += (lent * step as u32) as f64;
            booked_idle_s += ((width - holder_cards - lent) * step as u32) as f64;
        }
        let mut finished = Vec::new();
        for &j in &running {
            if on_loan[j].is_empty() {
                busy_card_s += (jobs[j].gpus * step as u32) as f64;
            }
            if leaving[j].is_none() {
                jobs[j].remaining -= step;
            }
            if jobs[j].remaining <= 0 {
                jobs[j].end = Some(t + step);
                finished.push(j);
            }
        }
        for j in finished {
            running.retain(|&r| r != j);
            let lenders = std::mem::take(&mut on_loan[j]);
            if lenders.is_empty() {
                queue_free += jobs[j].gpus;
            }
            for b in lenders {
                bookings[b].loan = None;
            }
            done += 1;
        }
        t += step;
    }
    let span = (t - t0).max(1);
    let waits: Vec<f64> = jobs
        .iter()
        .zip(&w.jobs)
        .filter_map(|(j, s)| j.first_start.map(|f| (f - s.submit) as f64))
        .collect();
    let completions: Vec<f64> = jobs
        .iter()
        .zip(&w.jobs)
        .filter_map(|(j, s)| j.end.map(|e| (e - s.submit) as f64))
        .collect();
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    let mut sorted = waits.clone();
    sorted.sort_by(f64::total_cmp);
    let p95 = sorted
        .get(((sorted.len() as f64 * 0.95) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    let booked_s = (booked as f64 * span as f64).max(1.0);
    MixedMetrics {
        lending,
        jobs: jobs.len(),
        utilization: busy_card_s / ((queue_gpus + booked) as f64 * span as f64),
        booked_idle_fraction: booked_idle_s / booked_s,
        queue_mean_wait_s: mean(&waits),
        queue_p95_wait_s: p95,
        queue_mean_completion_s: mean(&completions),
        holder_mean_delay_s: mean(&delays.iter().map(|&d| d as f64).collect::<Vec<_>>()),
        holder_max_delay_s: delays.iter().copied().max().unwrap_or(0),
        reclaims: delays.iter().filter(|&&d| d > 0).count(),
        lent_fraction: lent_s / booked_s,
        wide_loans,
        span_s: span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::SimJob;

    fn workload(jobs: &[(Time, u32, Time)]) -> Workload {
        Workload {
            jobs: jobs
                .iter()
                .map(|&(submit, gpus, duration)| SimJob {
                    submit,
                    gpus,
                    duration,
                    limit: duration,
                    group: 0,
                })
                .collect(),
            groups: vec!["g".into()],
            skipped: 0,
            trace_load: 1.0,
            load: 1.0,
        }
    }

    #[test]
    fn holders_spells_leave_the_idle_fraction_asked_for() {
        let model = MixedModel {
            idle_fraction: 0.3,
            ..Default::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let until = 400 * 86_400;
        let busy: Time = spells(&mut rng, &model, 0, until)
            .iter()
            .map(|(a, b)| b.min(&until) - a)
            .sum();
        let idle = 1.0 - busy as f64 / until as f64;
        assert!((idle - 0.3).abs() < 0.03, "{idle}");
    }

    #[test]
    fn lending_runs_queue_jobs_on_idle_booked_cards_and_holders_wait_at_most_the_grace() {
        // A queue of 1 card, 4 booked cards idle half the time, and a backlog of one-card jobs.
        let jobs: Vec<(Time, u32, Time)> = (0..400).map(|i| (i * 600, 1, 3 * 3600)).collect();
        let w = workload(&jobs);
        let model = MixedModel {
            booked_gpus: 4,
            booking_width: 1,
            grace_s: 120,
            ..Default::default()
        };
        let without = run(&w, 1, &model, Lending::Off);
        let with = run(&w, 1, &model, Lending::OneBooking);
        assert_eq!(without.lent_fraction, 0.0);
        assert_eq!((without.reclaims, without.holder_max_delay_s), (0, 0));
        assert!(
            with.utilization > without.utilization + 0.1,
            "{with:?} {without:?}"
        );
        assert!(with.booked_idle_fraction < without.booked_idle_fraction * 0.7);
        assert!(with.queue_mean_wait_s < without.queue_mean_wait_s);
        assert!(with.reclaims > 0 && with.holder_max_delay_s <= 120 + model.step_s);
        // Nothing is lost: every job finishes in both.
        assert!(without.queue_mean_completion_s > 0.0 && with.queue_mean_completion_s > 0.0);
        // Jobs that are not preemptible never borrow.
        let none = run(
            &w,
            1,
            &MixedModel {
                preemptible_fraction: 0.0,
                ..model.clone()
            },
            Lending::OneBooking,
        );
        assert_eq!(none.lent_fraction, 0.0);
        assert_eq!(none.utilization, without.utilization);
        // Jobs no wider than a booking: loans across bookings are one-booking loans.
        let across = run(&w, 1, &model, Lending::AcrossBookings);
        assert_eq!(
            MixedMetrics {
                lending: Lending::OneBooking,
                ..across
            },
            with
        );
    }

    #[test]
    fn wide_jobs_borrow_across_the_bookings_of_one_node_and_any_holder_takes_all_back() {
        // Eight-card jobs, a queue of 8 cards, and four 4-card bookings on two 8-card nodes.
        let jobs: Vec<(Time, u32, Time)> = (0..150).map(|i| (i * 1800, 8, 4 * 3600)).collect();
        let w = workload(&jobs);
        let model = MixedModel {
            booked_gpus: 16,
            booking_width: 4,
            node_gpus: 8,
            grace_s: 120,
            ..Default::default()
        };
        let one = run(&w, 8, &model, Lending::OneBooking);
        let across = run(&w, 8, &model, Lending::AcrossBookings);
        assert_eq!((one.lent_fraction, one.wide_loans), (0.0, 0));
        assert!(
            across.wide_loans > 0 && across.lent_fraction > 0.05,
            "{across:?}"
        );
        assert!(
            across.queue_mean_wait_s < one.queue_mean_wait_s,
            "{across:?} {one:?}"
        );
        // Either holder's return ends the loan; neither waits past the grace (and a step).
        assert!(across.reclaims > 0 && across.holder_max_delay_s <= 120 + model.step_s);
        // A job never spans nodes: with 4-card nodes nothing is wide enough.
        let narrow_nodes = MixedModel {
            node_gpus: 4,
            ..model.clone()
        };
        assert_eq!(
            run(&w, 8, &narrow_nodes, Lending::AcrossBookings).lent_fraction,
            0.0
        );
    }
}
