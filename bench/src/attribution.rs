//! What container attribution adds to a poll: reading the owner (and container) of every
//! process on the cards, as the poller does at each process interval, with attribution against
//! without it, in the same run over the same processes. Two figures: the steady state (each
//! process already seen: its container is remembered by pid and start time) and first sight
//! (a fresh reader, so every process is looked up from its cgroup, ancestors and runtime files).

use lanes_server::telemetry::procinfo::ProcReader;
use std::time::{Duration, Instant};

/// Times `rounds` polls over `pids` with a reader `make` gives (a fresh one per poll when
/// `fresh`); returns the median of `repeats` per-poll times.
fn per_poll(pids: &[u32], rounds: u32, repeats: u32, fresh: bool, containers: bool) -> Duration {
    let make = || {
        let reader = ProcReader::default();
        if containers {
            reader
        } else {
            reader.without_containers()
        }
    };
    let mut times = Vec::new();
    for _ in 0..repeats {
        let mut reader = make();
        for pid in pids {
            std::hint::black_box(reader.owner(*pid));
        }
        let start = Instant::now();
        for _ in 0..rounds {
            if fresh {
                reader = make();
            }
            for pid in pids {
                std::hint::black_box(reader.owner(*pid));
            }
        }
        times.push(start.elapsed() / rounds);
    }
    times.sort();
    times[times.len() / 2]
}

pub fn run(pids: Vec<u32>, rounds: u32) {
    let alive = pids
        .iter()
        .filter(|p| ProcReader::default().owner(**p).is_some())
        .count();
    let in_containers = pids
        .iter()
        .filter(|p| {
            ProcReader::default()
                .owner(**p)
                .is_some_and(|o| o.container.is_some())
        })
        .count();
    println!(
        "{} processes ({alive} alive, {in_containers} in containers), {rounds} polls per variant, median of 5",
        pids.len()
    );
    for (label, fresh) in [
        ("steady state (seen before)", false),
        ("first sight (fresh reader)", true),
    ] {
        // Alternate the variants so that neither gets the warmer caches.
        let without = per_poll(&pids, rounds, 5, fresh, false);
        let with = per_poll(&pids, rounds, 5, fresh, true);
        let without_again = per_poll(&pids, rounds, 5, fresh, false);
        let base = (without + without_again) / 2;
        println!(
            "{label}: without attribution {:.1} µs per poll, with {:.1} µs: {:+.1} %",
            base.as_secs_f64() * 1e6,
            with.as_secs_f64() * 1e6,
            (with.as_secs_f64() / base.as_secs_f64() - 1.0) * 100.0
        );
    }
}
