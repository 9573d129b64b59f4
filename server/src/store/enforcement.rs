//! SQL of enforcement: the admin policy, violations (unbooked GPU use) and idle marks.

use super::{at, AuditEntry, StoreError};
use chrono::{DateTime, Utc};
use lanes_types::container::ContainerRef;
use lanes_types::enforcement::{Policy, Violation, ViolationAction};

repository!(
    /// The enforcement policy and the violations the watchdog records.
    Enforcement, enforcement
);

/// A violation as the watchdog first records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewViolation {
    pub node: String,
    pub gpu_uuid: String,
    pub pid: u32,
    pub unix_user: Option<String>,
    pub user_id: Option<i64>,
    pub command: Option<String>,
    pub memory_bytes: Option<u64>,
    pub seen_ms: i64,
    pub container: Option<ContainerRef>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    node: String,
    gpu_uuid: String,
    pid: i64,
    unix_user: Option<String>,
    username: Option<String>,
    command: Option<String>,
    memory_bytes: Option<i64>,
    first_seen_ms: i64,
    last_seen_ms: i64,
    ended_ms: Option<i64>,
    action: String,
    container: Option<String>,
}

impl Row {
    fn into_violation(self) -> Result<Violation, StoreError> {
        Ok(Violation {
            id: self.id,
            node: self.node,
            gpu_uuid: self.gpu_uuid,
            pid: self.pid as u32,
            unix_user: self.unix_user,
            username: self.username,
            command: self.command,
            memory_bytes: self.memory_bytes.map(|b| b as u64),
            first_seen: at(self.first_seen_ms),
            last_seen: at(self.last_seen_ms),
            ended: self.ended_ms.map(at),
            action: self.action.parse().map_err(super::unreadable)?,
            container: self.container.and_then(|c| serde_json::from_str(&c).ok()),
        })
    }
}

const SELECT: &str = "SELECT v.id, v.node, v.gpu_uuid, v.pid, v.unix_user, u.username, v.command,
        v.memory_bytes, v.first_seen_ms, v.last_seen_ms, v.ended_ms, v.action, v.container
    FROM violations v LEFT JOIN users u ON u.id = v.user_id";

impl Enforcement<'_> {
    pub async fn policy(&self) -> Result<Policy, StoreError> {
        self.store.settings().get("policy").await
    }

    pub async fn save_policy(
        &self,
        policy: &Policy,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.store
            .settings()
            .save("policy", policy, audit, now)
            .await
    }

    pub async fn insert_violation(&self, v: &NewViolation) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO violations (node, gpu_uuid, pid, unix_user, user_id, command,
                                     memory_bytes, first_seen_ms, last_seen_ms, container)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9) RETURNING id",
        )
        .bind(&v.node)
        .bind(&v.gpu_uuid)
        .bind(i64::from(v.pid))
        .bind(&v.unix_user)
        .bind(v.user_id)
        .bind(&v.command)
        .bind(v.memory_bytes.map(|b| b as i64))
        .bind(v.seen_ms)
        .bind(
            v.container
                .as_ref()
                .map(|c| serde_json::to_string(c).unwrap_or_default()),
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Marks violations `ids` as seen at `seen_ms`, in one statement.
    pub async fn touch_violations(&self, ids: &[i64], seen_ms: i64) -> Result<(), StoreError> {
        for ids in ids.chunks(10_000) {
            let sql = format!(
                "UPDATE violations SET last_seen_ms = $1 WHERE id IN ({})",
                super::sql::placeholders(2, ids.len())
            );
            let mut query = sqlx::query(&sql).bind(seen_ms);
            for id in ids {
                query = query.bind(*id);
            }
            query.execute(&self.pool).await?;
        }
        Ok(())
    }

    pub async fn end_violation(&self, id: i64, ended_ms: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE violations SET ended_ms = $2 WHERE id = $1")
            .bind(id)
            .bind(ended_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn set_violation_action(
        &self,
        id: i64,
        action: ViolationAction,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE violations SET action = $2 WHERE id = $1")
            .bind(id)
            .bind(action.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Violations, newest first: all of them or one user's, open ones only if asked.
    pub async fn violations(
        &self,
        node: Option<&str>,
        user_id: Option<i64>,
        open_only: bool,
        limit: i64,
    ) -> Result<Vec<Violation>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{SELECT} WHERE ($1 IS NULL OR v.node = $1) AND ($2 IS NULL OR v.user_id = $2)
               AND ($3 = 0 OR v.ended_ms IS NULL)
             ORDER BY v.id DESC LIMIT $4"
        ))
        .bind(node)
        .bind(user_id)
        .bind(super::sql::flag(open_only))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Row::into_violation).collect()
    }

    /// Marks a booking idle since `since_ms`, or not idle (`None`).
    pub async fn set_booking_idle(
        &self,
        booking_id: i64,
        since_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE bookings SET idle_since_ms = $2 WHERE id = $1")
            .bind(booking_id)
            .bind(since_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
