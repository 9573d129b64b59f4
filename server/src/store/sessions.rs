//! SQL of login sessions (stored by the hash of their id, never the id).

use super::*;

/// Ends every session of a user: disabled, or with a reset or changed password.
pub(super) async fn end_sessions_of(tx: &mut Tx<'_>, user_id: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sessions WHERE user_id = $1")
        .bind(user_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Store {
    /// Starts a session (stored by the hash of its secret) and audits the login, in one step.
    pub async fn start_session(
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
    pub async fn session_user(
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
            self.end_session(id_hash).await?;
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
        self.enabled_user(user_id).await
    }

    pub async fn end_session(&self, id_hash: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE id_hash = $1")
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
