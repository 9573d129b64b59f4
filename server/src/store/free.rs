//! SQL of finding a slot: the cards a search may use, their holds in its range, and the
//! caller's quota, read in one snapshot and handed to [`crate::bookings::find`].

use super::quotas::{quota_context, Turns};
use super::sql::Backend;
use super::{at, ms, StoreError};
use crate::bookings::find::{self, Card, Search};
use chrono::{DateTime, Utc};
use lanes_types::booking::{FreeSlot, GpuRef};

/// Which cards a search may use besides being managed on a node that answers.
#[derive(Clone, Debug, Default)]
pub struct CardFilter {
    pub node: Option<String>,
    pub min_memory_bytes: Option<u64>,
}

impl super::bookings::Bookings<'_> {
    /// The earliest windows of `search` for `user_id`; `enforce_quota` off (admins) finds
    /// windows whatever their quota says.
    pub async fn free_slots(
        &self,
        user_id: i64,
        search: &Search,
        filter: &CardFilter,
        enforce_quota: bool,
        now: DateTime<Utc>,
    ) -> Result<Vec<FreeSlot>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            node: String,
            uuid: String,
            idx: i64,
            holds: Option<String>,
        }
        let fresh = self.fresh_since_ms(now);
        let mut tx = self.pool.begin().await?;
        let backend = Backend::of(&tx);
        // Each card with its holds in the range as "start:end" pairs, one statement.
        let sql = format!(
            "SELECT n.name AS node, g.uuid, g.idx,
                    (SELECT {} FROM (
                        SELECT bg.start_ms AS s, bg.end_ms AS e FROM booking_gpus bg
                        WHERE bg.gpu_id = g.id AND bg.live = 1 AND bg.end_ms > $1 AND bg.start_ms < $2
                        UNION ALL
                        SELECT mg.start_ms, mg.end_ms FROM maintenance_gpus mg
                        WHERE mg.gpu_id = g.id AND mg.end_ms > $1 AND mg.start_ms < $2) h) AS holds
             FROM gpus g JOIN nodes n ON n.id = g.node_id
             WHERE g.managed = 1 AND (n.instance = '' OR n.heartbeat_ms >= $3)
               AND ($4 IS NULL OR n.name = $4) AND g.memory_total_bytes >= $5
             ORDER BY n.name, g.idx",
            backend.list_agg("h.s || ':' || h.e")
        );
        let rows: Vec<Row> = sqlx::query_as(&sql)
            .bind(ms(search.from))
            .bind(ms(search.to))
            .bind(fresh)
            .bind(filter.node.as_deref())
            .bind(filter.min_memory_bytes.unwrap_or(0).min(i64::MAX as u64) as i64)
            .fetch_all(&mut *tx)
            .await?;
        let cards: Vec<Card> = rows
            .into_iter()
            .map(|r| Card {
                gpu: GpuRef {
                    node: r.node,
                    uuid: r.uuid,
                },
                index: r.idx,
                busy: parse_pairs(r.holds.as_deref().unwrap_or("")),
            })
            .collect();
        let window = (
            search.from - crate::bookings::quota::week(),
            search.to + crate::bookings::quota::week(),
        );
        let context = if enforce_quota {
            quota_context(&mut tx, user_id, window, None, Turns::Skip, now).await?
        } else {
            None
        };
        tx.rollback().await?;
        Ok(find::find(&cards, search, |slot| match &context {
            Some(context) => context.check(slot, now).is_ok(),
            None => true,
        }))
    }
}

/// "s:e,s:e" (milliseconds) as intervals; a malformed pair is skipped.
fn parse_pairs(text: &str) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    text.split(',')
        .filter_map(|pair| {
            let (s, e) = pair.split_once(':')?;
            Some((at(s.trim().parse().ok()?), at(e.trim().parse().ok()?)))
        })
        .collect()
}
