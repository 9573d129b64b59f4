//! SQL of login attempts: each is counted before its password is checked, in one write
//! transaction with the check of the limits, so concurrent guesses cannot all slip under them.

use super::{at, ms, Store, StoreError};
use crate::accounts::session::{locked_for, LockoutRules};
use chrono::{DateTime, Duration, Utc};

/// What counting an attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptStart {
    /// Counted (as a failure until it ends otherwise); check the password.
    Counted { id: i64, address_failures: u64 },
    /// Locked for this long; nothing was counted.
    Locked(Duration),
}

impl Store {
    /// Counts a login attempt for `username` from `address` unless the rules lock it now.
    /// Also returns how many failures came from the address in the window (for a slow-down).
    pub async fn begin_login_attempt(
        &self,
        username: &str,
        address: &str,
        rules: &LockoutRules,
        now: DateTime<Utc>,
    ) -> Result<AttemptStart, StoreError> {
        let since = ms(now - rules.window);
        let mut tx = self.begin_immediate().await?;
        // Failures and attempts still being checked (`ok IS NULL`) count alike.
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT at_ms, remote_addr FROM login_attempts
             WHERE username = $1 AND at_ms > $2 AND (ok IS NULL OR ok = 0)",
        )
        .bind(username)
        .bind(since)
        .fetch_all(&mut *tx)
        .await?;
        let times = |pair_only: bool| -> Vec<DateTime<Utc>> {
            rows.iter()
                .filter(|(_, a)| !pair_only || a == address)
                .map(|(t, _)| at(*t))
                // A concurrent attempt may have read the clock a moment after this one.
                .map(|t| t.min(now))
                .collect()
        };
        let wait = [
            locked_for(
                &times(true),
                rules.per_account_and_address,
                rules.window,
                now,
            ),
            locked_for(&times(false), rules.per_account, rules.window, now),
        ]
        .into_iter()
        .flatten()
        .max();
        if let Some(wait) = wait {
            return Ok(AttemptStart::Locked(wait));
        }
        let address_failures: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM login_attempts WHERE remote_addr = $1 AND at_ms > $2 AND ok = 0",
        )
        .bind(address)
        .bind(since)
        .fetch_one(&mut *tx)
        .await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO login_attempts (username, remote_addr, at_ms) VALUES ($1, $2, $3)
             RETURNING id",
        )
        .bind(username)
        .bind(address)
        .bind(ms(now))
        .fetch_one(&mut *tx)
        .await?;
        // Attempts older than a day matter to no rule.
        sqlx::query("DELETE FROM login_attempts WHERE at_ms < $1")
            .bind(ms(now - Duration::days(1)))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(AttemptStart::Counted {
            id,
            address_failures: address_failures.max(0) as u64,
        })
    }

    /// Records how a counted attempt ended; `None`: it was not judged (the server was busy), so
    /// it does not count.
    pub async fn end_login_attempt(&self, id: i64, ok: Option<bool>) -> Result<(), StoreError> {
        match ok {
            Some(ok) => {
                sqlx::query("UPDATE login_attempts SET ok = $2 WHERE id = $1")
                    .bind(id)
                    .bind(super::sql::flag(ok))
                    .execute(&self.pool)
                    .await?
            }
            None => {
                sqlx::query("DELETE FROM login_attempts WHERE id = $1")
                    .bind(id)
                    .execute(&self.pool)
                    .await?
            }
        };
        Ok(())
    }
}
