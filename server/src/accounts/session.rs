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

/// Failed logins allowed per account, and per address, within [`LOCKOUT_WINDOW`].
pub const LOCKOUT_FAILURES: usize = 5;
pub fn lockout_window() -> Duration {
    Duration::minutes(15)
}

/// How long a login must wait, given the times of recent failures (for one account or one
/// address): once [`LOCKOUT_FAILURES`] fall inside the window, until the oldest of them leaves it.
pub fn lockout_remaining(failures: &[DateTime<Utc>], now: DateTime<Utc>) -> Option<Duration> {
    let mut recent: Vec<DateTime<Utc>> = failures
        .iter()
        .copied()
        .filter(|t| *t > now - lockout_window() && *t <= now)
        .collect();
    if recent.len() < LOCKOUT_FAILURES {
        return None;
    }
    recent.sort_unstable_by(|a, b| b.cmp(a));
    let oldest_counted = recent[LOCKOUT_FAILURES - 1];
    Some(oldest_counted + lockout_window() - now)
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
}
