//! SQL of login sessions (stored by the hash of their id, never the id).
//!
//! SQL of login attempts: each is counted before its password is checked, in one write
//! transaction with the check of the limits, so concurrent guesses cannot all slip under them.

use super::*;
use super::{at, ms, StoreError};
use crate::accounts::session::{locked_for, LockoutRules};
use chrono::{DateTime, Duration, Utc};

repository!(
    /// Sign-ins: attempts (for their limit) and browser sessions.
    Sessions, sessions
);

/// Ends every session of a user: disabled, or with a reset or changed password.
pub(super) async fn end_sessions_of(tx: &mut Tx<'_>, user_id: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sessions WHERE user_id = $1")
        .bind(user_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Sessions<'_> {
    /// Starts a session (stored by the hash of its secret) and audits the login, in one step.
    pub async fn start(
        &self,
        user_id: i64,
        id_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO sessions (id_hash, user_id, created_at, last_seen_at, remote_addr)
             VALUES ($1, $2, $3, $3, $4)",
        )
        .bind(id_hash)
        .bind(user_id)
        .bind(Stamp(now))
        .bind(&audit.remote_addr)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The enabled user behind a live session, touching its last use; an expired session is
    /// removed.
    pub async fn user(
        &self,
        id_hash: &str,
        policy: &SessionPolicy,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<(i64, Stamp, Stamp)> = sqlx::query_as(
            "SELECT user_id, created_at, last_seen_at FROM sessions WHERE id_hash = $1",
        )
        .bind(id_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some((user_id, Stamp(created), Stamp(last_seen))) = row else {
            return Ok(None);
        };
        if !policy.is_live(created, last_seen, now) {
            self.end(id_hash).await?;
            return Ok(None);
        }
        // Writing on every request would serialize readers; a minute's precision is plenty.
        if now - last_seen > chrono::Duration::minutes(1) {
            sqlx::query("UPDATE sessions SET last_seen_at = $2 WHERE id_hash = $1")
                .bind(id_hash)
                .bind(Stamp(now))
                .execute(&self.pool)
                .await?;
        }
        self.store.accounts().enabled_user(user_id).await
    }

    pub async fn end(&self, id_hash: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE id_hash = $1")
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// What counting an attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptStart {
    /// Counted (as a failure until it ends otherwise); check the password. With the failures
    /// within the window from this address (over all accounts) and of this account (from
    /// every address).
    Counted {
        id: i64,
        address_failures: u64,
        account_failures: u64,
    },
    /// Locked for this long; nothing was counted.
    Locked(Duration),
}

impl Sessions<'_> {
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
            account_failures: rows.len() as u64,
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
