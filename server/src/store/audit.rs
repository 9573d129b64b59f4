//! SQL of the audit log: every state change writes its line in the change's own transaction.

use super::conn::Conn;
use super::*;

repository!(
    /// The audit log: who changed what, when, from where.
    AuditLog, audit_log
);

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

/// Which audit entries a page shows.
#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    pub limit: i64,
    pub before: Option<i64>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
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
    tx: &mut impl Conn,
    entry: &AuditEntry,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let at = Stamp(now).text();
    tx.execute(
        "INSERT INTO audit_log (at, actor_user_id, action, target, detail, remote_addr)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            at.as_str().into(),
            entry.actor_user_id.into(),
            entry.action.as_str().into(),
            (&entry.target).into(),
            (&entry.detail).into(),
            entry.remote_addr.as_ref().into(),
        ],
    )
    .await
}

impl AuditLog<'_> {
    pub async fn record(&self, entry: &AuditEntry, now: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        insert_audit(&mut tx, entry, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The newest audit entries first.
    pub async fn recent(&self, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        self.page(&AuditFilter {
            limit,
            ..Default::default()
        })
        .await
    }

    /// One page of the audit log, newest first, as `filter` narrows it.
    pub async fn page(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        // Only the conditions asked for: a NULL test on an untyped parameter is not portable.
        let mut conditions: Vec<String> = Vec::new();
        let mut next = 1;
        let mut placeholder = || {
            let p = format!("${next}");
            next += 1;
            p
        };
        if filter.actor.is_some() {
            conditions.push(format!("u.username = {}", placeholder()));
        }
        if filter.action.is_some() {
            conditions.push(format!("a.action = {}", placeholder()));
        }
        if filter.from.is_some() {
            conditions.push(format!("a.at >= {}", placeholder()));
        }
        if filter.to.is_some() {
            conditions.push(format!("a.at < {}", placeholder()));
        }
        if filter.before.is_some() {
            conditions.push(format!("a.id < {}", placeholder()));
        }
        let limit = placeholder();
        let sql = format!(
            "SELECT a.id, a.at, u.username AS actor, a.action, a.target, a.detail, a.remote_addr
             FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
             {} ORDER BY a.id DESC LIMIT {limit}",
            if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            }
        );
        let mut query = sqlx::query_as::<_, AuditRow>(&sql);
        if let Some(actor) = &filter.actor {
            query = query.bind(actor.clone());
        }
        if let Some(action) = &filter.action {
            query = query.bind(action.clone());
        }
        if let Some(from) = filter.from {
            query = query.bind(Stamp(from));
        }
        if let Some(to) = filter.to {
            query = query.bind(Stamp(to));
        }
        if let Some(before) = filter.before {
            query = query.bind(before);
        }
        let rows = query.bind(filter.limit).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(AuditRecord::from).collect())
    }
}
