//! Which cards a slot may take, and taking them: the machinery bookings and maintenance share.
//! On SQLite the write transaction (`BEGIN IMMEDIATE`) admits one writer, so two never both
//! find a card free; on PostgreSQL the exclusion constraint on `booking_gpus` refuses the
//! second hold (see `bookings.rs`).

use super::conn::{Arg, Conn, Kind, Row};
pub(super) use super::sql::Tx;
use super::sql::{placeholders, Backend};
use super::StoreError;
use super::{insert_audit, ms, AuditEntry};
use crate::bookings::plan::Holds;
use crate::bookings::BookingError;
use crate::bookings::Rule;
use chrono::{DateTime, Utc};
use lanes_types::booking::GpuRef;

pub(super) use super::sql::overlap_or;

/// A card as the booking tables know it.
#[derive(Clone, Debug)]
pub(super) struct CardRow {
    pub(super) id: i64,
    pub(super) node: String,
    pub(super) uuid: String,
    pub(super) idx: i64,
    pub(super) managed: i64,
}

impl CardRow {
    pub(super) fn gpu(&self) -> GpuRef {
        GpuRef {
            node: self.node.clone(),
            uuid: self.uuid.clone(),
        }
    }
}

pub(super) const CARD_COLUMNS: &str = "g.id, n.name AS node, g.uuid, g.idx, g.managed";

/// The kinds of [`CARD_COLUMNS`].
const CARD_KINDS: [Kind; 5] = [Kind::Int, Kind::Text, Kind::Text, Kind::Int, Kind::Int];

impl CardRow {
    /// The card in a row that starts with [`CARD_COLUMNS`].
    fn read(row: &Row) -> Result<Self, StoreError> {
        Ok(CardRow {
            id: row.int(0)?,
            node: row.text(1)?,
            uuid: row.text(2)?,
            idx: row.int(3)?,
            managed: row.int(4)?,
        })
    }
}

/// What a request's cards hold during `[start, end)`: the cards with these UUIDs (an unknown
/// one is refused by name), the live bookings other than `except` and the maintenance blocks
/// that hold any of them then, and which cards those take. One statement, since each is a
/// round trip to the database thread inside the write transaction.
pub(super) async fn cards_in_slot(
    conn: &mut impl Conn,
    uuids: &[String],
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    except: Option<i64>,
) -> Result<SlotCards, StoreError> {
    struct Read {
        card: CardRow,
        bookings: Option<String>,
        maintenance: Option<String>,
    }
    if uuids.is_empty() {
        return Ok(SlotCards::default());
    }
    let backend = conn.backend();
    if backend == Backend::Postgres {
        take_card_turns(conn, uuids).await?;
    }
    let sql = format!(
        "SELECT {CARD_COLUMNS},
                (SELECT {} FROM booking_gpus bg
                 WHERE bg.gpu_id = g.id AND bg.live = 1 AND bg.lane = 0 AND bg.end_ms > $1 AND bg.start_ms < $2
                   AND ($3 IS NULL OR bg.booking_id != $3)) AS bookings,
                (SELECT {} FROM maintenance_gpus mg
                 WHERE mg.gpu_id = g.id AND mg.end_ms > $1 AND mg.start_ms < $2) AS maintenance
         FROM gpus g JOIN nodes n ON n.id = g.node_id
         WHERE g.uuid IN ({}) ORDER BY n.name, g.idx",
        backend.list_agg("bg.booking_id"),
        backend.list_agg("mg.maintenance_id"),
        placeholders(4, uuids.len())
    );
    let mut args: Vec<Arg<'_>> = vec![ms(start).into(), ms(end).into(), except.into()];
    args.extend(uuids.iter().map(Arg::from));
    let kinds = [CARD_KINDS.as_slice(), &[Kind::Text, Kind::Text]].concat();
    let mut rows = conn
        .rows(&sql, &args, &kinds)
        .await?
        .iter()
        .map(|row| {
            Ok(Read {
                card: CardRow::read(row)?,
                bookings: row.opt_text(CARD_KINDS.len())?,
                maintenance: row.opt_text(CARD_KINDS.len() + 1)?,
            })
        })
        .collect::<Result<Vec<Read>, StoreError>>()?;
    if let Some(unknown) = uuids
        .iter()
        .find(|u| !rows.iter().any(|r| &r.card.uuid == *u))
    {
        return Err(BookingError::invalid(
            Rule::UnknownGpu,
            format!("no GPU with UUID {unknown:?}"),
        )
        .into());
    }
    // A card two nodes see (two nodes on one host, each managing some of its cards) is the
    // one node's that manages it.
    if let Some(row) = rows.iter().find(|r| {
        r.card.managed == 0
            && !rows
                .iter()
                .any(|other| other.card.managed == 1 && other.card.uuid == r.card.uuid)
    }) {
        return Err(BookingError::invalid(
            Rule::UnmanagedGpu,
            format!(
                "GPU {} on node {} is not managed by Lanes (its node's --gpus leaves it out)",
                row.card.idx, row.card.node
            ),
        )
        .into());
    }
    rows.retain(|r| r.card.managed == 1);
    if rows.len() != uuids.len() {
        return Err(BookingError::invalid(
            Rule::AmbiguousGpu,
            "a GPU UUID is known on more than one node",
        )
        .into());
    }
    let ids = |list: &Option<String>| -> Vec<i64> {
        list.as_deref()
            .unwrap_or_default()
            .split(',')
            .filter_map(|id| id.parse().ok())
            .collect()
    };
    let mut slot = SlotCards::default();
    for row in rows {
        let (b, m) = (ids(&row.bookings), ids(&row.maintenance));
        if !b.is_empty() || !m.is_empty() {
            slot.holds.taken.push(row.card.gpu());
        }
        slot.holds.bookings.extend(b);
        slot.holds.maintenance.extend(m);
        slot.cards.push(row.card);
    }
    for list in [&mut slot.holds.bookings, &mut slot.holds.maintenance] {
        list.sort_unstable();
        list.dedup();
    }
    Ok(slot)
}

/// PostgreSQL: this transaction's turn on each of these cards, in card id order (see
/// `sql::lock`), held to its end.
async fn take_card_turns(conn: &mut impl Conn, uuids: &[String]) -> Result<(), StoreError> {
    // One statement; `OFFSET 0` keeps the sorted subquery as it is, so the locks are taken in
    // card id order.
    let sql = format!(
        "SELECT pg_advisory_xact_lock(CAST($1 AS INTEGER), CAST(g.id AS INTEGER))
         FROM (SELECT id FROM gpus WHERE uuid IN ({}) ORDER BY id OFFSET 0) AS g",
        placeholders(2, uuids.len())
    );
    let mut args: Vec<Arg<'_>> = vec![i64::from(super::sql::lock::CARD).into()];
    args.extend(uuids.iter().map(Arg::from));
    conn.execute(&sql, &args).await
}

/// A slot's cards as read, and what else holds them in it.
#[derive(Default)]
pub(super) struct SlotCards {
    pub(super) cards: Vec<CardRow>,
    pub(super) holds: Holds,
}

/// Records that maintenance block `id` holds `cards` for its slot (one statement for all
/// cards), and audits it with the block as target. (A booking writes its holds with its own
/// row: `insert_booking`.)
pub(super) async fn hold_for_maintenance(
    tx: &mut Tx<'_>,
    id: i64,
    cards: &[CardRow],
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    audit: AuditEntry,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if !cards.is_empty() {
        let rows: Vec<String> = (0..cards.len())
            .map(|i| format!("($1, ${}, $2, $3)", i + 4))
            .collect();
        let sql = format!(
            "INSERT INTO maintenance_gpus (maintenance_id, gpu_id, start_ms, end_ms) VALUES {}",
            rows.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(id).bind(ms(start)).bind(ms(end));
        for card in cards {
            query = query.bind(card.id);
        }
        query.execute(&mut **tx).await.map_err(overlap_or)?;
    }
    let target = format!("maintenance {id}");
    insert_audit(tx, &AuditEntry { target, ..audit }, now).await?;
    Ok(())
}

/// The most cards any one node offers automatic choices (managed cards of nodes that are up),
/// asked only when a request found too few free: whether waiting could ever help.
pub(super) async fn largest_node(
    conn: &mut impl Conn,
    fresh_since_ms: i64,
) -> Result<usize, StoreError> {
    let rows = conn
        .rows(
            "SELECT MAX(cards) FROM (SELECT COUNT(*) AS cards FROM gpus g JOIN nodes n ON n.id = g.node_id
                                     WHERE g.managed = 1 AND (n.instance = '' OR n.heartbeat_ms >= $1)
                                     GROUP BY g.node_id) per_node",
            &[fresh_since_ms.into()],
            &[Kind::Int],
        )
        .await?;
    let most = match rows.first() {
        Some(row) => row.opt_int(0)?,
        None => None,
    };
    Ok(most.unwrap_or(0).max(0) as usize)
}

/// Cards free for all of `[start, end)`, with the end of their latest earlier booking.
/// Cards of silent nodes (no heartbeat since `fresh_since_ms`) and unmanaged cards are never
/// free for an automatic choice. A node no process has registered (a store opened by a tool
/// or a test) counts as up.
pub(super) async fn free_cards(
    conn: &mut impl Conn,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    fresh_since_ms: i64,
) -> Result<Vec<(CardRow, Option<i64>)>, StoreError> {
    let kinds = [CARD_KINDS.as_slice(), &[Kind::Int]].concat();
    let rows = conn
        .rows(
            &format!(
                "SELECT {CARD_COLUMNS},
                (SELECT MAX(bg.end_ms) FROM booking_gpus bg JOIN bookings b ON b.id = bg.booking_id
                 WHERE bg.gpu_id = g.id AND b.status != 'cancelled' AND bg.start_ms < $1) AS last_end
         FROM gpus g JOIN nodes n ON n.id = g.node_id
         WHERE g.managed = 1 AND (n.instance = '' OR n.heartbeat_ms >= $3)
           AND NOT EXISTS (SELECT 1 FROM booking_gpus bg WHERE bg.gpu_id = g.id AND bg.live = 1
                           AND bg.start_ms < $2 AND bg.end_ms > $1)
           AND NOT EXISTS (SELECT 1 FROM maintenance_gpus mg WHERE mg.gpu_id = g.id
                           AND mg.start_ms < $2 AND mg.end_ms > $1)
         ORDER BY n.name, g.idx"
            ),
            &[ms(start).into(), ms(end).into(), fresh_since_ms.into()],
            &kinds,
        )
        .await?;
    rows.iter()
        .map(|row| Ok((CardRow::read(row)?, row.opt_int(CARD_KINDS.len())?)))
        .collect()
}
