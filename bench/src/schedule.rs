//! One scheduling pass over a deep queue: the server's pass (with reasons and estimated starts
//! for every waiting job) and the decisions alone, against sorting the queue (the floor any
//! priority scheduler pays) in the same run.

use lanes_scheduling::scheduler::{order, schedule, Card, Owner, Pass, Policy, Waiting};
use rand_chacha::rand_core::{Rng, SeedableRng};
use std::time::Instant;

const GIB: u64 = 1 << 30;

pub fn run(pending: usize, gpus: usize, runs: usize) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let now = 1_000_000;
    // Half the cards busy for up to a day, a booking ahead on every fourth.
    let cards: Vec<Card> = (0..gpus)
        .map(|i| Card {
            free_from: if i % 2 == 0 {
                now + (rng.next_u32() % 86_400) as i64
            } else {
                now
            },
            blocks: if i % 4 == 1 {
                let start = now + (rng.next_u32() % 20_000) as i64;
                vec![(start, start + 7_200)]
            } else {
                Vec::new()
            },
            memory_total: 80 * GIB,
            memory_free: 80 * GIB,
            // Eight cards per node, as a pool of 8-GPU servers.
            host: (i / 8) as u32,
        })
        .collect();
    let owners: Vec<Owner> = (0..40)
        .map(|i| Owner {
            holds: vec![(now - 3_600, now + 3_600 * (i % 5) as i64, (i % 5) as u32)],
            max_gpus: (i % 3 == 0).then_some(8),
        })
        .collect();
    let waiting: Vec<Waiting> = (0..pending)
        .map(|i| Waiting {
            id: i as i64,
            owner: (rng.next_u32() % 40) as usize,
            gpus: [1, 1, 1, 2, 2, 4, 8][(rng.next_u32() % 7) as usize],
            time_limit: 600 + (rng.next_u32() % 86_400) as i64,
            min_memory: if i % 10 == 0 { 40 * GIB } else { 0 },
            submitted: now - (rng.next_u32() % 86_400) as i64,
            priority: (rng.next_u32() % 10_000) as f64 / 10_000.0,
        })
        .collect();
    println!("| variant | pending | cards | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    let time = |name: &str, f: &dyn Fn()| {
        let mut ms: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!(
            "| {name} | {pending} | {gpus} | {:.2} | {:.2} |",
            crate::percentile(&ms, 50.0),
            crate::percentile(&ms, 99.0)
        );
    };
    time("sort the queue by priority (reference)", &|| {
        std::hint::black_box(order(Policy::Fairshare, &waiting));
    });
    for (policy, explain) in [
        (Policy::Fairshare, true),
        (Policy::Fairshare, false),
        (Policy::Fifo, true),
    ] {
        let name = format!(
            "{} pass{}",
            policy.as_str(),
            if explain {
                ", reasons and estimates for all"
            } else {
                ", decisions only"
            }
        );
        time(&name, &|| {
            let plan = schedule(&Pass {
                now,
                policy,
                cards: &cards,
                waiting: &waiting,
                owners: &owners,
                explain,
            });
            std::hint::black_box(plan);
        });
    }
}
