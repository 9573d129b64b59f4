//! Rate limits kept in memory, per key (a client's address, a Unix uid): a token bucket each,
//! in a table of bounded size. Used where anyone (anonymous or any local account) can make the
//! server do work or keep state: sign-in starts, the shell door.
//!
//! Written here rather than taken from `governor`, which keeps its own clock: every decision
//! in Lanes reads the time it is given, so that tests drive it. The whole of it is a refill
//! and a count.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many at once, and how fast they come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Taken at once by a key that has been quiet.
    pub burst: u32,
    /// One more comes back every `every`.
    pub every: Duration,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by key. At most `capacity` keys are kept: full buckets (a quiet key) are
/// forgotten first, and when every kept key is busy a new one waits as if its bucket were
/// empty, so a flood of new keys cannot grow the table.
pub struct Limiter<K> {
    rate: Rate,
    capacity: usize,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Eq + Hash + Clone> Limiter<K> {
    pub fn new(rate: Rate, capacity: usize) -> Self {
        Self {
            rate,
            capacity: capacity.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one for `key` at `now`; or how long until one is back.
    pub fn take(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let rate = self.rate;
        let every = rate.every.as_secs_f64().max(f64::MIN_POSITIVE);
        let refill = |b: &Bucket| {
            let back = now.saturating_duration_since(b.at).as_secs_f64() / every;
            (b.tokens + back).min(f64::from(rate.burst))
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(key) && buckets.len() >= self.capacity {
            buckets.retain(|_, b| refill(b) < f64::from(rate.burst));
            if buckets.len() >= self.capacity {
                return Err(rate.every);
            }
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: f64::from(rate.burst),
            at: now,
        });
        let tokens = refill(bucket);
        if tokens >= 1.0 {
            *bucket = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            *bucket = Bucket { tokens, at: now };
            Err(Duration::from_secs_f64((1.0 - tokens) * every))
        }
    }

    /// Keys kept now.
    pub fn len(&self) -> usize {
        self.buckets.lock().map_or(0, |b| b.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key of a client's address: an IPv4 address, or an IPv6 address's /64 (one host is
/// usually given a whole /64, so its single addresses are not separate clients).
pub fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
        },
    }
}

/// Counts what is held at once per key and in all; a [`Held`] gives its place back when it is
/// dropped, however its holder ends.
pub struct Slots<K: Eq + Hash + Clone> {
    per_key: usize,
    total: usize,
    held: Mutex<(HashMap<K, usize>, usize)>,
}

/// One place in [`Slots`].
pub struct Held<K: Eq + Hash + Clone> {
    slots: Arc<Slots<K>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Slots<K> {
    pub fn new(per_key: usize, total: usize) -> Self {
        Self {
            per_key,
            total,
            held: Mutex::new((HashMap::new(), 0)),
        }
    }

    /// A place for `key`, unless it holds `per_key` already or all hold `total`.
    pub fn hold(self: &Arc<Self>, key: K) -> Option<Held<K>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (by_key, total) = &mut *held;
        let mine = by_key.get(&key).copied().unwrap_or(0);
        if mine >= self.per_key || *total >= self.total {
            return None;
        }
        by_key.insert(key.clone(), mine + 1);
        *total += 1;
        Some(Held {
            slots: self.clone(),
            key,
        })
    }

    /// Places held now, in all.
    pub fn total(&self) -> usize {
        self.held.lock().map_or(0, |h| h.1)
    }
}

impl<K: Eq + Hash + Clone> Drop for Held<K> {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        let (by_key, total) = &mut *held;
        if let Some(n) = by_key.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                by_key.remove(&self.key);
            }
        }
        *total -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        burst: 3,
        every: Duration::from_secs(10),
    };

    #[test]
    fn a_key_takes_its_burst_then_one_per_period_and_others_are_untouched() {
        let limiter = Limiter::new(RATE, 100);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(&1, t0), Ok(()));
        }
        assert_eq!(limiter.take(&1, t0), Err(Duration::from_secs(10)));
        assert_eq!(limiter.take(&2, t0), Ok(()), "another key has its own");
        assert!(limiter.take(&1, t0 + Duration::from_secs(5)).is_err());
        assert_eq!(limiter.take(&1, t0 + Duration::from_secs(10)), Ok(()));
        assert!(limiter.take(&1, t0 + Duration::from_secs(10)).is_err());
        // Quiet long enough, the whole burst is back, and no more.
        let later = t0 + Duration::from_secs(1000);
        for _ in 0..3 {
            assert_eq!(limiter.take(&1, later), Ok(()));
        }
        assert!(limiter.take(&1, later).is_err());
    }

    #[test]
    fn a_flood_of_new_keys_never_grows_the_table_past_its_capacity() {
        let limiter = Limiter::new(RATE, 8);
        let t0 = Instant::now();
        let taken = (0..1000u32).filter(|k| limiter.take(k, t0).is_ok()).count();
        assert_eq!(taken, 8);
        assert_eq!(limiter.len(), 8);
        // Once the keys kept are quiet again, new ones get in.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(limiter.take(&5000, later), Ok(()));
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn an_ipv6_host_is_one_client_and_a_mapped_ipv4_is_the_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::7".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.9".parse().unwrap();
        assert_eq!(address_key(mapped), "10.0.0.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn places_are_given_back_when_their_holders_end() {
        let slots = Arc::new(Slots::new(2, 3));
        let a1 = slots.hold(1).unwrap();
        let _a2 = slots.hold(1).unwrap();
        assert!(slots.hold(1).is_none(), "per key");
        let _b1 = slots.hold(2).unwrap();
        assert!(slots.hold(3).is_none(), "in all");
        drop(a1);
        let _c = slots.hold(3).expect("a place given back");
        assert_eq!(slots.total(), 3);
    }
}
