//! SQL of one-click links in messages (extend, release, confirm in use).

use super::*;
use lanes_types::notify::LinkAction;

repository!(
    /// One-click links in messages (extend, release, confirm in use).
    Links, links
);

/// A one-click link as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub id: i64,
    pub user_id: i64,
    pub action: LinkAction,
    pub booking_id: Option<i64>,
    pub job_id: Option<i64>,
    /// The address a [`LinkAction::ConfirmEmail`] link confirms.
    pub email: Option<String>,
    /// What else the action needs: a [`LinkAction::MoveCard`]'s cards, as JSON.
    pub detail: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
}

/// A link to store for a message: its secret's hash, what it does and until when.
#[derive(Clone, Debug, PartialEq)]
pub struct NewLink {
    pub token_hash: String,
    pub user_id: i64,
    pub action: LinkAction,
    pub booking_id: Option<i64>,
    pub job_id: Option<i64>,
    pub email: Option<String>,
    pub detail: Option<String>,
    pub expires_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct LinkRow {
    id: i64,
    user_id: i64,
    action: String,
    booking_id: Option<i64>,
    job_id: Option<i64>,
    email: Option<String>,
    detail: Option<String>,
    expires_ms: i64,
    used_ms: Option<i64>,
    outcome: Option<String>,
}

const LINK_COLUMNS: &str =
    "id, user_id, action, booking_id, job_id, email, detail, expires_ms, used_ms, outcome";

impl TryFrom<LinkRow> for Link {
    type Error = StoreError;
    fn try_from(r: LinkRow) -> Result<Self, StoreError> {
        Ok(Link {
            id: r.id,
            user_id: r.user_id,
            action: LinkAction::parse(&r.action).ok_or_else(|| unreadable(&r.action))?,
            booking_id: r.booking_id,
            job_id: r.job_id,
            email: r.email,
            detail: r.detail,
            expires_at: at(r.expires_ms),
            used_at: r.used_ms.map(at),
            outcome: r.outcome,
        })
    }
}

impl Links<'_> {
    /// Stores the links of one attempt at a message, replacing those of earlier attempts (which
    /// never reached anyone, or reached them with a message that is now sent again).
    pub async fn replace(
        &self,
        outbox_id: i64,
        links: &[NewLink],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM action_links WHERE outbox_id = $1 AND used_ms IS NULL")
            .bind(outbox_id)
            .execute(&mut *tx)
            .await?;
        for link in links {
            sqlx::query(
                "INSERT INTO action_links (token_hash, outbox_id, user_id, action, booking_id,
                                           job_id, email, created_ms, expires_ms, detail)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&link.token_hash)
            .bind(outbox_id)
            .bind(link.user_id)
            .bind(link.action.as_str())
            .bind(link.booking_id)
            .bind(link.job_id)
            .bind(&link.email)
            .bind(ms(now))
            .bind(ms(link.expires_at))
            .bind(&link.detail)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The link a secret's hash names, used or not.
    pub async fn get(&self, token_hash: &str) -> Result<Option<Link>, StoreError> {
        sqlx::query_as::<_, LinkRow>(&format!(
            "SELECT {LINK_COLUMNS} FROM action_links WHERE token_hash = $1"
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?
        .map(Link::try_from)
        .transpose()
    }

    /// Marks a link used, if it is still unused and unexpired: only one caller gets `true`.
    pub async fn mark_used(&self, id: i64, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE action_links SET used_ms = $2
             WHERE id = $1 AND used_ms IS NULL AND expires_ms > $2",
        )
        .bind(id)
        .bind(ms(now))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(done == 1)
    }

    /// Records what a used link did; `None` gives it back (its action was refused, and may be
    /// asked again once what refused it changed).
    pub async fn set_outcome(&self, id: i64, outcome: Option<&str>) -> Result<(), StoreError> {
        let query = match outcome {
            Some(_) => "UPDATE action_links SET outcome = $2 WHERE id = $1",
            None => "UPDATE action_links SET used_ms = NULL, outcome = $2 WHERE id = $1",
        };
        sqlx::query(query)
            .bind(id)
            .bind(outcome)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// "Still using it": clears a booking's idle mark and starts its idle watch again from now,
    /// audited.
    pub async fn confirm_in_use(
        &self,
        booking_id: i64,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE bookings SET idle_since_ms = NULL, in_use_ms = $2 WHERE id = $1")
            .bind(booking_id)
            .bind(ms(now))
            .execute(&mut *tx)
            .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        self.emit(Event::WatchChanged(Change::InUseConfirmed));
        Ok(())
    }
}
