//! SQL of messages waiting to go out, their attempts and the hourly limit.

use super::*;
use lanes_types::notify::{Channel, OutboxEntry, OutboxStatus};

repository!(
    /// Messages waiting to go out, their attempts and the hourly limit.
    Outbox, outbox
);

/// A message to put in the outbox.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMessage {
    pub user_id: Option<i64>,
    pub channel: Channel,
    /// The personal event's name, or the lab channel's event.
    pub event: String,
    pub text: String,
    pub details: serde_json::Value,
    /// Asking twice with one key adds one message.
    pub dedupe_key: Option<String>,
}

/// A message claimed for one delivery attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    pub id: i64,
    pub user_id: Option<i64>,
    pub channel: Channel,
    pub event: String,
    pub text: String,
    pub details: serde_json::Value,
    /// This attempt's number, from 1.
    pub attempt: u32,
    pub created_at: DateTime<Utc>,
}

impl Outbox<'_> {
    /// Puts messages in the outbox, due now; one whose dedupe key is there already is left out.
    /// The ids of those added.
    pub async fn enqueue(
        &self,
        messages: &[NewMessage],
        now: DateTime<Utc>,
    ) -> Result<Vec<i64>, StoreError> {
        // Reminders are asked for on every pass while due: those queued already are found by a
        // read, so that a pass with nothing new takes no write transaction (SQLite has one
        // writer). The insert's conflict clause still settles two nodes asking at once.
        let mut fresh = Vec::with_capacity(messages.len());
        for m in messages {
            match &m.dedupe_key {
                Some(key) if self.has(key).await? => {}
                _ => fresh.push(m),
            }
        }
        if fresh.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        let mut ids = Vec::new();
        for m in fresh {
            let id: Option<i64> = sqlx::query_scalar(
                "INSERT INTO outbox (user_id, channel, event, text, details, dedupe_key,
                                     created_ms, next_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
                 ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
            )
            .bind(m.user_id)
            .bind(m.channel.as_str())
            .bind(&m.event)
            .bind(&m.text)
            .bind(m.details.to_string())
            .bind(&m.dedupe_key)
            .bind(ms(now))
            .fetch_optional(&mut *tx)
            .await?;
            ids.extend(id);
        }
        tx.commit().await?;
        if !ids.is_empty() {
            self.emit(Event::OutboxChanged(Change::MessagesQueued));
        }
        Ok(ids)
    }

    /// Whether a message with this dedupe key was ever queued.
    pub async fn has(&self, dedupe_key: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM outbox WHERE dedupe_key = $1")
            .bind(dedupe_key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// Claims the next due message for one attempt (counted in its row), skipping the destinations in `busy` (member ids; 0 for the lab
    /// channel) that already hold their share of this process's deliverer.
    pub async fn claim(
        &self,
        now: DateTime<Utc>,
        lease: chrono::Duration,
        busy: &[i64],
    ) -> Result<Option<Claimed>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            user_id: Option<i64>,
            channel: String,
            event: String,
            text: String,
            details: String,
            attempts: i64,
            created_ms: i64,
        }
        let skip = not_busy(3, busy);
        // The outer conditions repeat the inner ones: on PostgreSQL, a second node that picked
        // the same row waits for the first, then finds it claimed and updates nothing.
        let sql = format!(
            "UPDATE outbox SET claimed_until_ms = $2, attempts = attempts + 1
             WHERE id = (SELECT id FROM outbox
                         WHERE status = 'pending' AND next_ms <= $1
                           AND (claimed_until_ms IS NULL OR claimed_until_ms <= $1){skip}
                         ORDER BY next_ms, id LIMIT 1)
               AND status = 'pending' AND (claimed_until_ms IS NULL OR claimed_until_ms <= $1)
             RETURNING id, user_id, channel, event, text, details, attempts, created_ms"
        );
        let mut query = sqlx::query_as(&sql).bind(ms(now)).bind(ms(now + lease));
        for id in busy {
            query = query.bind(*id);
        }
        let row: Option<Row> = query.fetch_optional(&self.pool).await?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some(Claimed {
            id: r.id,
            user_id: r.user_id,
            channel: Channel::parse(&r.channel).ok_or_else(|| unreadable(&r.channel))?,
            event: r.event,
            text: r.text,
            details: serde_json::from_str(&r.details).map_err(unreadable)?,
            attempt: r.attempts as u32,
            created_at: at(r.created_ms),
        }))
    }

    /// When the next message the deliverer could claim comes due (its next attempt, or the end
    /// of another sender's lease on it), leaving out destinations in `busy`; `None` when no
    /// message waits.
    pub async fn next_due(&self, busy: &[i64]) -> Result<Option<DateTime<Utc>>, StoreError> {
        let skip = not_busy(1, busy);
        let sql = format!(
            "SELECT MIN(CASE WHEN claimed_until_ms > next_ms THEN claimed_until_ms ELSE next_ms END)
             FROM outbox WHERE status = 'pending'{skip}"
        );
        let mut query = sqlx::query_scalar::<_, Option<i64>>(&sql);
        for id in busy {
            query = query.bind(*id);
        }
        Ok(query.fetch_one(&self.pool).await?.map(at))
    }

    /// Records how an attempt ended: sent, to be retried at `retry_at`, or over (`status`
    /// failed or suppressed) with the reason.
    pub async fn finish(
        &self,
        id: i64,
        status: OutboxStatus,
        retry_at: Option<DateTime<Utc>>,
        error: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox SET status = $2, next_ms = COALESCE($3, next_ms),
                    claimed_until_ms = NULL, last_error = $4,
                    sent_ms = CASE WHEN $2 = 'sent' THEN $5 ELSE sent_ms END
             WHERE id = $1",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(retry_at.map(ms))
        .bind(error)
        .bind(ms(now))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A request about to go out for one of `user_id`'s messages: counted against their
    /// hourly limit whatever its outcome, or refused (`false`) when `limit` requests were made
    /// since `since`. Counted and checked in one transaction that takes turns per member, so
    /// two deliveries at once cannot both take the last request of the hour.
    pub async fn claim_attempt(
        &self,
        user_id: i64,
        limit: Option<u32>,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_serial(&[super::Lock::User(user_id)]).await?;
        if let Some(limit) = limit {
            let made: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM delivery_attempts WHERE user_id = $1 AND at_ms >= $2",
            )
            .bind(user_id)
            .bind(ms(since))
            .fetch_one(&mut *tx)
            .await?;
            if made >= i64::from(limit) {
                return Ok(false);
            }
        }
        sqlx::query("INSERT INTO delivery_attempts (user_id, at_ms) VALUES ($1, $2)")
            .bind(user_id)
            .bind(ms(now))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Requests made for `user_id`'s messages since `since`.
    pub async fn attempts_since(
        &self,
        user_id: i64,
        since: DateTime<Utc>,
    ) -> Result<u32, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM delivery_attempts WHERE user_id = $1 AND at_ms >= $2",
        )
        .bind(user_id)
        .bind(ms(since))
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u32)
    }

    /// Messages of kind `event` queued for `user_id` since `since` (test messages, to limit).
    pub async fn messages_since(
        &self,
        user_id: i64,
        event: &str,
        since: DateTime<Utc>,
    ) -> Result<u32, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM outbox WHERE user_id = $1 AND event = $2 AND created_ms >= $3",
        )
        .bind(user_id)
        .bind(event)
        .bind(ms(since))
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u32)
    }

    /// The newest outbox messages, optionally only those in `status`.
    pub async fn list(
        &self,
        status: Option<OutboxStatus>,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            created_ms: i64,
            username: Option<String>,
            channel: String,
            event: String,
            text: String,
            status: String,
            attempts: i64,
            next_ms: i64,
            sent_ms: Option<i64>,
            last_error: Option<String>,
        }
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT o.id, o.created_ms, u.username, o.channel, o.event, o.text, o.status,
                    o.attempts, o.next_ms, o.sent_ms, o.last_error
             FROM outbox o LEFT JOIN users u ON u.id = o.user_id
             WHERE ($1 IS NULL OR o.status = $1)
             ORDER BY o.id DESC LIMIT $2",
        )
        .bind(status.map(|s| s.as_str()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let status = OutboxStatus::parse(&r.status).ok_or_else(|| unreadable(&r.status))?;
                Ok(OutboxEntry {
                    id: r.id,
                    created_at: at(r.created_ms),
                    username: r.username,
                    channel: Channel::parse(&r.channel).ok_or_else(|| unreadable(&r.channel))?,
                    event: r.event,
                    text: r.text,
                    status,
                    attempts: r.attempts as u32,
                    next_attempt_at: (status == OutboxStatus::Pending).then(|| at(r.next_ms)),
                    sent_at: r.sent_ms.map(at),
                    last_error: r.last_error,
                })
            })
            .collect()
    }

    /// Forgets messages that are over (sent, failed, suppressed) and older than `before`, with
    /// their links; how many.
    pub async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let old = "SELECT id FROM outbox WHERE status <> 'pending' AND created_ms < $1";
        sqlx::query(&format!(
            "DELETE FROM action_links WHERE outbox_id IN ({old})"
        ))
        .bind(ms(before))
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query(&format!("DELETE FROM outbox WHERE id IN ({old})"))
            .bind(ms(before))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM delivery_attempts WHERE at_ms < $1")
            .bind(ms(before))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone)
    }
}

/// The condition that leaves out messages to destinations in `busy` (member ids, 0 for the lab
/// channel), bound from placeholder `$first` on; empty when none is busy.
fn not_busy(first: usize, busy: &[i64]) -> String {
    if busy.is_empty() {
        return String::new();
    }
    format!(
        " AND COALESCE(user_id, 0) NOT IN ({})",
        super::sql::placeholders(first, busy.len())
    )
}
