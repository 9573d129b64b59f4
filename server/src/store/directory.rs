//! SQL of directory accounts: who the lab's directory says an account is, sign-ins under way at
//! the OpenID provider, and one-time codes for the terminal.

use super::accounts::Origin;
use super::*;
use crate::accounts::NewUser;
use lanes_types::account::AccountSource;

repository!(
    /// Directory accounts and the short-lived secrets of signing in through a directory.
    Directory, directory
);

/// What a stored sign-in under way is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowKind {
    Browser,
    Device,
}

impl FlowKind {
    fn as_str(self) -> &'static str {
        match self {
            FlowKind::Browser => "browser",
            FlowKind::Device => "device",
        }
    }
}

impl Directory<'_> {
    /// The account the directory knows as `external_id`.
    pub async fn by_external_id(
        &self,
        source: AccountSource,
        external_id: &str,
    ) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE source = $1 AND external_id = $2"
        ))
        .bind(source.as_str())
        .bind(external_id)
        .fetch_optional(&self.pool)
        .await?
        .map(User::try_from)
        .transpose()
    }

    /// Accounts of `source`, by username.
    pub async fn accounts_of(&self, source: AccountSource) -> Result<Vec<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE source = $1 ORDER BY username"
        ))
        .bind(source.as_str())
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(User::try_from)
        .collect()
    }

    /// Makes the account of a first sign-in through the directory, with no password of its
    /// own (`password_hash` is one no password matches), enabled or waiting for approval.
    pub async fn create(
        &self,
        new: &NewUser,
        source: AccountSource,
        external_id: &str,
        pending: bool,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<User, StoreError> {
        let origin = Origin::Directory {
            source,
            external_id,
            pending,
        };
        self.accounts().insert(new, origin, audit, now).await
    }

    /// Makes a local account a directory one (its password no longer signs in), audited.
    pub async fn adopt(
        &self,
        user_id: i64,
        source: AccountSource,
        external_id: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE users SET source = $2, external_id = $3, password_hash = $4 WHERE id = $1",
        )
        .bind(user_id)
        .bind(source.as_str())
        .bind(external_id)
        .bind(crate::accounts::password::NO_PASSWORD)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Makes the groups of `names` that do not exist yet (for directories whose groups
    /// become Lanes groups as they are first seen).
    pub async fn ensure_groups(
        &self,
        names: &[String],
        audit_actor: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for name in names {
            let made = sqlx::query(
                "INSERT INTO groups (name, description, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind("from the directory")
            .bind(Stamp(now))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if made == 1 {
                let audit = AuditEntry::new(audit_actor, AuditAction::GroupCreate, name)
                    .detail("from the directory");
                insert_audit(&mut tx, &audit, now).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Keeps a sign-in under way until `expires_at`, by a hash of its key; clears expired ones.
    pub async fn put_flow(
        &self,
        key_hash: &str,
        kind: FlowKind,
        detail: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM sign_in_flows WHERE expires_at < $1")
            .bind(Stamp(now))
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO sign_in_flows (key_hash, kind, detail, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(key_hash)
        .bind(kind.as_str())
        .bind(detail)
        .bind(Stamp(expires_at))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes a browser's sign-in under way: it is gone after this, used or not, so a callback
    /// replayed finds nothing.
    pub async fn take_flow(
        &self,
        key_hash: &str,
        kind: FlowKind,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        let detail: Option<(String, Stamp)> = sqlx::query_as(
            "DELETE FROM sign_in_flows WHERE key_hash = $1 AND kind = $2
             RETURNING detail, expires_at",
        )
        .bind(key_hash)
        .bind(kind.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(detail.and_then(|(detail, Stamp(expires))| (expires > now).then_some(detail)))
    }

    /// Reads a terminal's device sign-in under way without taking it (it is polled until the
    /// member confirms).
    pub async fn flow(
        &self,
        key_hash: &str,
        kind: FlowKind,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        let detail: Option<(String, Stamp)> = sqlx::query_as(
            "SELECT detail, expires_at FROM sign_in_flows WHERE key_hash = $1 AND kind = $2",
        )
        .bind(key_hash)
        .bind(kind.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(detail.and_then(|(detail, Stamp(expires))| (expires > now).then_some(detail)))
    }

    /// Keeps a one-time terminal code (by its hash) for `user_id`, audited.
    pub async fn put_terminal_code(
        &self,
        code_hash: &str,
        user_id: i64,
        expires_at: DateTime<Utc>,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM terminal_codes WHERE expires_at < $1 OR user_id = $2")
            .bind(Stamp(now))
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO terminal_codes (code_hash, user_id, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(code_hash)
        .bind(user_id)
        .bind(Stamp(expires_at))
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes a terminal code once: the enabled account it was made for, if it is still live.
    pub async fn take_terminal_code(
        &self,
        code_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<(i64, Stamp)> = sqlx::query_as(
            "DELETE FROM terminal_codes WHERE code_hash = $1 RETURNING user_id, expires_at",
        )
        .bind(code_hash)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some((user_id, Stamp(expires))) if expires > now => {
                self.accounts().enabled_user(user_id).await
            }
            _ => Ok(None),
        }
    }
}
