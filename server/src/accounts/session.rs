//! Session secrets, session lifetimes and login lockout: the rules, as plain functions.

use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

/// Name of the session cookie.
pub const COOKIE: &str = "lanes_session";

/// A fresh random secret (256 bits, URL-safe) and the hash that is stored in its place.
pub fn new_secret() -> Result<(String, String), getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hash = hash_secret(&secret);
    Ok((secret, hash))
}

/// What is stored for a secret: its SHA-256, hex. Secrets are random, so no salt is needed.
pub fn hash_secret(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How long sessions live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionPolicy {
    /// A session unused for this long ends.
    pub idle: Duration,
    /// A session ends this long after login, however busy.
    pub absolute: Duration,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        Self {
            idle: Duration::hours(8),
            absolute: Duration::days(7),
        }
    }
}

impl SessionPolicy {
    pub fn is_live(
        &self,
        created: DateTime<Utc>,
        last_seen: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> bool {
        now < created + self.absolute && now < last_seen + self.idle
    }
}

/// How many failed (or still unchecked) logins lock what, within a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockoutRules {
    pub window: Duration,
    /// Per account and address together: a guesser behind one address (every user of an SSH
    /// tunnel comes from 127.0.0.1) locks only that account from that address, not everyone.
    pub per_account_and_address: usize,
    /// Per account from anywhere: guessing from many addresses is bounded too.
    pub per_account: usize,
    /// Failures from one address, over all accounts, after which each login from it is slowed
    /// (never refused: a correct password from a busy address still works).
    pub slow_address_after: u64,
}

impl Default for LockoutRules {
    fn default() -> Self {
        Self {
            window: Duration::minutes(15),
            per_account_and_address: 5,
            per_account: 20,
            slow_address_after: 10,
        }
    }
}

impl LockoutRules {
    /// Terminal codes: every member's code is checked under one pseudo-account, so failures
    /// from everywhere together never lock it (a correct code always works); each address is
    /// limited on its own, and once many addresses guess, every check waits
    /// ([`Self::everyone_delay`]).
    pub fn terminal_codes() -> Self {
        Self {
            per_account: 0,
            ..Self::default()
        }
    }

    /// How long each terminal code waits before its check, given the failures of every address
    /// within the window: nothing up to 20, then 1 s. Guessing from many addresses is slowed
    /// for all; a correct code is slowed too, never refused.
    pub fn everyone_delay(&self, failures: u64) -> std::time::Duration {
        if failures > 20 {
            std::time::Duration::from_secs(1)
        } else {
            std::time::Duration::ZERO
        }
    }

    /// How long a login from an address with `failures` recent failures waits before its
    /// password is checked: nothing up to the threshold, then doubling from 250 ms, at most 5 s.
    pub fn address_delay(&self, failures: u64) -> std::time::Duration {
        let Some(over) = failures.checked_sub(self.slow_address_after) else {
            return std::time::Duration::ZERO;
        };
        let ms = 250u64.saturating_mul(1u64 << over.min(16));
        std::time::Duration::from_millis(ms.min(5_000))
    }
}

/// How long a login must wait, given the times of recent failures of one kind: once `limit` of
/// them fall inside the window, until the oldest of the latest `limit` leaves it.
pub fn locked_for(
    failures: &[DateTime<Utc>],
    limit: usize,
    window: Duration,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let mut recent: Vec<DateTime<Utc>> = failures
        .iter()
        .copied()
        .filter(|t| *t > now - window && *t <= now)
        .collect();
    if limit == 0 || recent.len() < limit {
        return None;
    }
    recent.sort_unstable_by(|a, b| b.cmp(a));
    Some(recent[limit - 1] + window - now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + minutes * 60, 0).unwrap()
    }

    #[test]
    fn secrets_are_random_and_only_their_hash_is_kept() {
        let (a, hash_a) = new_secret().unwrap();
        let (b, _) = new_secret().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(hash_secret(&a), hash_a);
        assert_ne!(hash_a, a);
    }

    #[test]
    fn a_session_ends_when_idle_too_long_or_too_old() {
        let p = SessionPolicy {
            idle: Duration::minutes(30),
            absolute: Duration::minutes(120),
        };
        assert!(p.is_live(t(0), t(0), t(29)));
        assert!(!p.is_live(t(0), t(0), t(30)));
        assert!(p.is_live(t(0), t(100), t(119)));
        assert!(!p.is_live(t(0), t(119), t(120)));
    }

    fn lockout_remaining(failures: &[DateTime<Utc>], now: DateTime<Utc>) -> Option<Duration> {
        locked_for(failures, 5, Duration::minutes(15), now)
    }

    #[test]
    fn five_failures_in_fifteen_minutes_lock_until_the_oldest_leaves_the_window() {
        let failures = [t(0), t(1), t(2), t(3)];
        assert_eq!(lockout_remaining(&failures, t(4)), None);
        let failures = [t(0), t(1), t(2), t(3), t(4)];
        assert_eq!(
            lockout_remaining(&failures, t(4)),
            Some(Duration::minutes(11))
        );
        assert_eq!(
            lockout_remaining(&failures, t(14)),
            Some(Duration::minutes(1))
        );
        assert_eq!(lockout_remaining(&failures, t(15)), None);
        // Older failures do not count; the fifth most recent one sets the wait.
        let failures = [t(-30), t(9), t(10), t(11), t(12), t(13), t(14)];
        assert_eq!(
            lockout_remaining(&failures, t(14)),
            Some(Duration::minutes(11))
        );
    }

    #[test]
    fn a_busy_address_is_slowed_more_with_each_failure_but_never_beyond_five_seconds() {
        let rules = LockoutRules::default();
        assert_eq!(rules.address_delay(0), std::time::Duration::ZERO);
        assert_eq!(rules.address_delay(9), std::time::Duration::ZERO);
        assert_eq!(rules.address_delay(10).as_millis(), 250);
        assert_eq!(rules.address_delay(11).as_millis(), 500);
        assert_eq!(rules.address_delay(1_000).as_millis(), 5_000);
    }
}
