//! SQL of card health: each card's verdict, the timeline of its changes, and the drain (an
//! open-ended maintenance block) that takes a failing card out of service.

use super::sql::Stamp;
use super::*;
use lanes_types::booking::GpuRef;
use lanes_types::health::{
    CardHealth, Condition, Finding, HealthCause, HealthChange, HealthCounters, HealthLevel,
};

repository!(
    /// Card health verdicts, their timeline and drains.
    CardHealthRepo, card_health
);

/// A change of a card's health to record.
#[derive(Clone, Debug)]
pub struct NewHealthChange {
    pub gpu: GpuRef,
    pub condition: Condition,
    pub counters: Option<HealthCounters>,
    pub cause: HealthCause,
    /// Take the card out of service (a failing card under the drain policy).
    pub drain: bool,
}

#[derive(sqlx::FromRow)]
struct HealthRow {
    node: String,
    uuid: String,
    idx: i64,
    level: String,
    findings: String,
    counters: Option<String>,
    since_ms: i64,
    drain_id: Option<i64>,
}

impl TryFrom<HealthRow> for CardHealth {
    type Error = StoreError;
    fn try_from(r: HealthRow) -> Result<Self, StoreError> {
        Ok(CardHealth {
            gpu: GpuRef {
                node: r.node,
                uuid: r.uuid,
            },
            index: r.idx as u32,
            condition: Condition {
                level: HealthLevel::parse(&r.level).ok_or_else(|| unreadable(&r.level))?,
                findings: serde_json::from_str(&r.findings).map_err(|_| unreadable(&r.findings))?,
            },
            since: Some(at(r.since_ms)),
            drain: r.drain_id,
            counters: r.counters.and_then(|c| serde_json::from_str(&c).ok()),
        })
    }
}

const HEALTH_SELECT: &str = "SELECT n.name AS node, g.uuid, g.idx, h.level, h.findings, h.counters,
        h.since_ms, h.drain_id
     FROM card_health h JOIN gpus g ON g.id = h.gpu_id JOIN nodes n ON n.id = g.node_id";

/// The id of card `gpu`, inside a transaction.
async fn card_id(tx: &mut Tx<'_>, gpu: &GpuRef) -> Result<i64, StoreError> {
    sqlx::query_scalar(
        "SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE n.name = $1 AND g.uuid = $2",
    )
    .bind(&gpu.node)
    .bind(&gpu.uuid)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::Invalid(format!("no GPU {} on node {}", gpu.uuid, gpu.node)))
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

impl CardHealthRepo<'_> {
    /// Every card's verdict other than a plain healthy one (and any card still drained).
    pub async fn all(&self) -> Result<Vec<CardHealth>, StoreError> {
        let rows: Vec<HealthRow> = sqlx::query_as(&format!(
            "{HEALTH_SELECT} WHERE h.level != 'healthy' OR h.drain_id IS NOT NULL
             ORDER BY n.name, g.idx"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(CardHealth::try_from).collect()
    }

    /// Every verdict kept for this node's cards (healthy ones too: their counters are the
    /// baseline after a restart).
    pub async fn of_node(&self, node: &str) -> Result<Vec<CardHealth>, StoreError> {
        let rows: Vec<HealthRow> = sqlx::query_as(&format!("{HEALTH_SELECT} WHERE n.name = $1"))
            .bind(node)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(CardHealth::try_from).collect()
    }

    /// Records a new level of a card, and drains it when asked (unless it is drained already).
    /// Returns the drain's maintenance block if this change made one.
    pub async fn record(
        &self,
        change: &NewHealthChange,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin_serial(&[Lock::Exclusive(lock::CARDS)]).await?;
        let gpu_id = card_id(&mut tx, &change.gpu).await?;
        let level = change.condition.level.as_str();
        let findings = json(&change.condition.findings);
        let counters = change.counters.as_ref().map(json);
        sqlx::query(
            "INSERT INTO card_health (gpu_id, level, findings, counters, since_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (gpu_id) DO UPDATE SET level = excluded.level,
                 findings = excluded.findings, since_ms = excluded.since_ms,
                 counters = COALESCE(excluded.counters, card_health.counters)",
        )
        .bind(gpu_id)
        .bind(level)
        .bind(&findings)
        .bind(&counters)
        .bind(ms(now))
        .execute(&mut *tx)
        .await?;
        insert_change(
            &mut tx,
            gpu_id,
            now,
            level,
            &findings,
            change.cause,
            None,
            None,
        )
        .await?;
        let drained: Option<i64> =
            sqlx::query_scalar("SELECT drain_id FROM card_health WHERE gpu_id = $1")
                .bind(gpu_id)
                .fetch_one(&mut *tx)
                .await?;
        let mut made = None;
        if change.drain && drained.is_none() {
            let reason = format!(
                "drained: failing ({}); ends when an admin clears the card",
                change.condition.words()
            );
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO maintenance (start_ms, end_ms, reason, created_at, created_by)
                 VALUES ($1, $2, $3, $4, NULL) RETURNING id",
            )
            .bind(ms(now))
            .bind(ms(crate::bookings::rules::time_bounds().1))
            .bind(&reason)
            .bind(Stamp(now))
            .fetch_one(&mut *tx)
            .await?;
            // Bookings on the card stand: their holders are offered a move. Nothing new is
            // placed on it while the block lasts.
            sqlx::query(
                "INSERT INTO maintenance_gpus (maintenance_id, gpu_id, start_ms, end_ms)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id)
            .bind(gpu_id)
            .bind(ms(now))
            .bind(ms(crate::bookings::rules::time_bounds().1))
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE card_health SET drain_id = $2 WHERE gpu_id = $1")
                .bind(gpu_id)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let audit =
                AuditEntry::new(None, AuditAction::HealthDrain, format!("maintenance {id}"))
                    .detail(format!(
                        "GPU {} on {}: {}",
                        change.gpu.uuid,
                        change.gpu.node,
                        change.condition.words()
                    ));
            insert_audit(&mut tx, &audit, now).await?;
            made = Some(id);
        }
        tx.commit().await?;
        if made.is_some() {
            self.emit(Event::CardsChanged(Change::MaintenanceChanged));
        }
        Ok(made)
    }

    /// An application's Xid on a card: the timeline names the process; the card keeps its level.
    pub async fn blame_process(
        &self,
        gpu: &GpuRef,
        level: HealthLevel,
        xid: u32,
        process: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin().await?;
        let gpu_id = card_id(&mut tx, gpu).await?;
        let findings = json(&[Finding::Xid { xid }]);
        insert_change(
            &mut tx,
            gpu_id,
            now,
            level.as_str(),
            &findings,
            HealthCause::Process,
            None,
            Some(process),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Puts a card back in service: healthy, its drain ended, the change on its timeline and in
    /// the audit log (`audit`'s actor: the admin; none for a reset the counters showed).
    /// `counters` become the baseline growth is measured against. The drain it ended, if any.
    pub async fn clear(
        &self,
        gpu: &GpuRef,
        cause: HealthCause,
        counters: Option<&HealthCounters>,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin_serial(&[Lock::Exclusive(lock::CARDS)]).await?;
        let gpu_id = card_id(&mut tx, gpu).await?;
        let drain: Option<Option<i64>> =
            sqlx::query_scalar("SELECT drain_id FROM card_health WHERE gpu_id = $1")
                .bind(gpu_id)
                .fetch_optional(&mut *tx)
                .await?;
        let drain = drain.flatten();
        sqlx::query(
            "INSERT INTO card_health (gpu_id, level, findings, counters, since_ms)
             VALUES ($1, 'healthy', '[]', $2, $3)
             ON CONFLICT (gpu_id) DO UPDATE SET level = 'healthy', findings = '[]',
                 since_ms = excluded.since_ms, drain_id = NULL,
                 counters = COALESCE(excluded.counters, card_health.counters)",
        )
        .bind(gpu_id)
        .bind(counters.map(json))
        .bind(ms(now))
        .execute(&mut *tx)
        .await?;
        if let Some(id) = drain {
            sqlx::query("DELETE FROM maintenance WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        insert_change(
            &mut tx,
            gpu_id,
            now,
            "healthy",
            "[]",
            cause,
            audit.actor_user_id,
            None,
        )
        .await?;
        insert_audit(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.emit(Event::CardsChanged(Change::HealthCleared));
        Ok(drain)
    }

    /// The timeline of one card (or of every card), newest first.
    pub async fn changes(
        &self,
        gpu: Option<&GpuRef>,
        limit: u32,
    ) -> Result<Vec<HealthChange>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            node: String,
            uuid: String,
            at_ms: i64,
            level: String,
            findings: String,
            cause: String,
            by_name: Option<String>,
            process: Option<String>,
        }
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT n.name AS node, g.uuid, c.at_ms, c.level, c.findings, c.cause,
                    u.username AS by_name, c.process
             FROM health_changes c JOIN gpus g ON g.id = c.gpu_id JOIN nodes n ON n.id = g.node_id
             LEFT JOIN users u ON u.id = c.by_user
             WHERE ($1 IS NULL OR n.name = $1) AND ($2 IS NULL OR g.uuid = $2)
             ORDER BY c.at_ms DESC, c.id DESC LIMIT $3",
        )
        .bind(gpu.map(|g| g.node.as_str()))
        .bind(gpu.map(|g| g.uuid.as_str()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(HealthChange {
                    gpu: GpuRef {
                        node: r.node,
                        uuid: r.uuid,
                    },
                    at: at(r.at_ms),
                    level: HealthLevel::parse(&r.level).ok_or_else(|| unreadable(&r.level))?,
                    findings: serde_json::from_str(&r.findings).unwrap_or_default(),
                    cause: HealthCause::parse(&r.cause).ok_or_else(|| unreadable(&r.cause))?,
                    by: r.by_name,
                    process: r.process,
                })
            })
            .collect()
    }

    /// A free card for what is left of `booking` (`[from, end)`) on `node`: managed, not the
    /// one given up, not failing, held by nothing then. The lowest index first.
    pub async fn free_card(
        &self,
        node: &str,
        except_uuid: &str,
        (from, end): (DateTime<Utc>, DateTime<Utc>),
    ) -> Result<Option<GpuRef>, StoreError> {
        let uuid: Option<String> = sqlx::query_scalar(
            "SELECT g.uuid FROM gpus g JOIN nodes n ON n.id = g.node_id
             LEFT JOIN card_health h ON h.gpu_id = g.id
             WHERE n.name = $1 AND g.uuid != $2 AND g.managed = 1
               AND (h.level IS NULL OR h.level != 'failing')
               AND NOT EXISTS (SELECT 1 FROM booking_gpus bg WHERE bg.gpu_id = g.id AND bg.live = 1
                               AND bg.end_ms > $3 AND bg.start_ms < $4)
               AND NOT EXISTS (SELECT 1 FROM maintenance_gpus mg WHERE mg.gpu_id = g.id
                               AND mg.end_ms > $3 AND mg.start_ms < $4)
             ORDER BY g.idx LIMIT 1",
        )
        .bind(node)
        .bind(except_uuid)
        .bind(ms(from))
        .bind(ms(end))
        .fetch_optional(&self.pool)
        .await?;
        Ok(uuid.map(|uuid| GpuRef {
            node: node.to_string(),
            uuid,
        }))
    }
}

#[allow(clippy::too_many_arguments)]
async fn insert_change(
    tx: &mut Tx<'_>,
    gpu_id: i64,
    now: DateTime<Utc>,
    level: &str,
    findings: &str,
    cause: HealthCause,
    by_user: Option<i64>,
    process: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO health_changes (gpu_id, at_ms, level, findings, cause, by_user, process)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(gpu_id)
    .bind(ms(now))
    .bind(level)
    .bind(findings)
    .bind(cause.as_str())
    .bind(by_user)
    .bind(process)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
