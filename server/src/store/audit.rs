//! SQL of the audit log: every state change writes its line in the change's own transaction.

use super::*;

/// One line of the audit log, as it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// The user who acted; `None` for the operator's command line.
    pub actor_user_id: Option<i64>,
    /// What happened.
    pub action: AuditAction,
    pub target: String,
    pub detail: String,
    pub remote_addr: Option<String>,
}

impl AuditEntry {
    /// An entry for `action` on `target` by `actor` (`None`: the operator's command line),
    /// with no detail or address until [`AuditEntry::detail`] and [`AuditEntry::from_addr`].
    pub fn new(actor: Option<i64>, action: AuditAction, target: impl Into<String>) -> Self {
        Self {
            actor_user_id: actor,
            action,
            target: target.into(),
            detail: String::new(),
            remote_addr: None,
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub fn from_addr(mut self, addr: impl Into<String>) -> Self {
        self.remote_addr = Some(addr.into());
        self
    }
}

#[derive(sqlx::FromRow)]
struct AuditRow {
    id: i64,
    at: Stamp,
    actor: Option<String>,
    action: String,
    target: String,
    detail: String,
    remote_addr: Option<String>,
}

impl From<AuditRow> for AuditRecord {
    fn from(row: AuditRow) -> Self {
        AuditRecord {
            id: row.id,
            at: row.at.0,
            actor: row.actor,
            action: row.action,
            target: row.target,
            detail: row.detail,
            remote_addr: row.remote_addr,
        }
    }
}

pub(super) async fn insert_audit(
    tx: &mut Tx<'_>,
    entry: &AuditEntry,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor_user_id, action, target, detail, remote_addr)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(Stamp(now))
    .bind(entry.actor_user_id)
    .bind(entry.action.as_str())
    .bind(&entry.target)
    .bind(&entry.detail)
    .bind(&entry.remote_addr)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    pub async fn audit(&self, entry: &AuditEntry, now: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        insert_audit(&mut tx, entry, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The newest audit entries first.
    pub async fn recent_audit(&self, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT a.id, a.at, u.username AS actor, a.action, a.target, a.detail, a.remote_addr
             FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
             ORDER BY a.id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditRecord::from).collect())
    }
}
