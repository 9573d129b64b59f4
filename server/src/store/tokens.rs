//! SQL of API tokens (stored by the hash of their secret, never the secret).

use super::*;

repository!(
    /// API tokens of members.
    Tokens, tokens
);

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: i64,
    name: String,
    created_at: Stamp,
    last_used_at: Option<Stamp>,
}

impl From<TokenRow> for ApiToken {
    fn from(row: TokenRow) -> Self {
        ApiToken {
            id: row.id,
            name: row.name,
            created_at: row.created_at.0,
            last_used_at: row.last_used_at.map(|s| s.0),
        }
    }
}

/// Revokes every live API token of a user: disabled, or with a reset or changed password.
pub(super) async fn revoke_tokens_of(
    tx: &mut Tx<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE api_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL")
        .bind(user_id)
        .bind(Stamp(now))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Tokens<'_> {
    /// Stores a new token (by hash) for `user_id`, and audits it.
    pub async fn create(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<ApiToken, StoreError> {
        let mut tx = self.begin().await?;
        let token = sqlx::query_as::<_, TokenRow>(
            "INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)
             RETURNING id, name, created_at, last_used_at",
        )
        .bind(user_id)
        .bind(name)
        .bind(token_hash)
        .bind(Stamp(now))
        .fetch_one(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(token.into())
    }

    /// A user's tokens that are not revoked, newest first.
    pub async fn of(&self, user_id: i64) -> Result<Vec<ApiToken>, StoreError> {
        let rows: Vec<TokenRow> = sqlx::query_as(
            "SELECT id, name, created_at, last_used_at FROM api_tokens
             WHERE user_id = $1 AND revoked_at IS NULL ORDER BY id DESC",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(ApiToken::from).collect())
    }

    /// Revokes a token of `user_id`; `false` when it has no such live token.
    pub async fn revoke(
        &self,
        user_id: i64,
        token_id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let revoked = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $3
             WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
        )
        .bind(token_id)
        .bind(user_id)
        .bind(Stamp(now))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if revoked {
            insert_audit(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        Ok(revoked)
    }

    /// The enabled owner of a live token, noting its use.
    pub async fn user(
        &self,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            token_id: i64,
            last_used_at: Option<Stamp>,
            #[sqlx(flatten)]
            user: UserRow,
        }
        // The token and its enabled owner in one query: it runs on every scripted request.
        let row: Option<Row> = sqlx::query_as(&format!(
            "SELECT t.id AS token_id, t.last_used_at, {}
             FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.enabled = 1",
            USER_COLUMNS
                .split(", ")
                .map(|c| format!("u.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        // As with sessions, a minute's precision spares a write (and the database's write lock,
        // which bookings contend for) on every request.
        if row
            .last_used_at
            .is_none_or(|t| now - t.0 > chrono::Duration::minutes(1))
        {
            sqlx::query("UPDATE api_tokens SET last_used_at = $2 WHERE id = $1")
                .bind(row.token_id)
                .bind(Stamp(now))
                .execute(&self.pool)
                .await?;
        }
        User::try_from(row.user).map(Some)
    }
}
