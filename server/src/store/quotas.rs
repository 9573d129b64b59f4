//! SQL of fairness quotas: the limits admins set, each member's use, and the check a booking
//! must pass inside its own write transaction.

use super::conn::{Arg, Conn, Kind};
use super::sql::placeholders;
use super::{at, insert_audit, ms, AuditEntry, StoreError};
use crate::bookings::quota::{self, BookedSlot, GroupUse};
use chrono::{DateTime, Utc};
use lanes_types::booking::{Quota, QuotaHolder, QuotaUse, Quotas};

repository!(
    /// Quotas of users and groups, and what a member has used against them.
    QuotaLimits, quotas
);

/// Reads what the quota rules need about `user_id` and their groups, and applies them to
/// `request` (a new booking, or booking `replacing` with its new slot).
pub(super) async fn check_quota(
    tx: &mut impl Conn,
    user_id: i64,
    request: &BookedSlot,
    replacing: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Result<(), quota::Refusal>, StoreError> {
    let window = (request.start - quota::week(), request.end + quota::week());
    let context = quota_context(tx, user_id, window, replacing, Turns::Take, now).await?;
    Ok(match context {
        Some(context) => context.check(request, now),
        None => Ok(()),
    })
}

/// Whether reading a quota's use takes the group's turn (a write about to happen), or not (a
/// look, as when searching for a slot).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Turns {
    Take,
    Skip,
}

/// What the quota rules need to judge `user_id`'s bookings inside `window`: their limits, their
/// holds and each limited group's members' holds. `None` when no limit applies.
pub(super) struct QuotaContext {
    limits: Quota,
    mine: Vec<BookedSlot>,
    groups: Vec<(String, Quota, Vec<BookedSlot>)>,
}

impl QuotaContext {
    pub(super) fn check(
        &self,
        request: &BookedSlot,
        now: DateTime<Utc>,
    ) -> Result<(), quota::Refusal> {
        let uses: Vec<GroupUse<'_>> = self
            .groups
            .iter()
            .map(|(name, limits, holds)| GroupUse {
                name,
                limits,
                holds,
            })
            .collect();
        quota::check(&self.limits, &self.mine, &uses, request, now)
    }
}

pub(super) async fn quota_context(
    tx: &mut impl Conn,
    user_id: i64,
    window: (DateTime<Utc>, DateTime<Utc>),
    replacing: Option<i64>,
    turns: Turns,
    now: DateTime<Utc>,
) -> Result<Option<QuotaContext>, StoreError> {
    // The quota rows that can apply: the default, the user's own, and their groups' (with
    // the group's id, for summing over members). One statement.
    let rows = tx
        .rows(
            "SELECT q.scope, q.name, g.id AS group_id, q.max_gpus, q.gpu_hours_per_week,
                    q.max_booking_hours, q.max_days_ahead, q.max_upcoming
             FROM quotas q LEFT JOIN groups g ON q.scope = 'group' AND g.name = q.name
             WHERE q.scope = 'default'
                OR (q.scope = 'user' AND q.name = (SELECT username FROM users WHERE id = $1))
                OR (q.scope = 'group' AND g.id IN (SELECT group_id FROM group_members WHERE user_id = $1))",
            &[user_id.into()],
            &[Kind::Text, Kind::Text, Kind::Int, Kind::Int, Kind::Real, Kind::Real, Kind::Real, Kind::Int],
        )
        .await?;
    let mut quotas = Quotas::default();
    let mut username = String::new();
    let mut groups: Vec<(i64, String)> = Vec::new();
    for row in rows {
        let (scope, name) = (row.text(0)?, row.text(1)?);
        let quota = Quota::from(QuotaRow {
            max_gpus: row.opt_int(3)?,
            gpu_hours_per_week: row.opt_real(4)?,
            max_booking_hours: row.opt_real(5)?,
            max_days_ahead: row.opt_real(6)?,
            max_upcoming: row.opt_int(7)?,
        });
        match (scope.as_str(), row.opt_int(2)?) {
            ("user", _) => {
                username = name.clone();
                quotas.users.insert(name, quota);
            }
            ("group", Some(id)) => {
                groups.push((id, name.clone()));
                quotas.groups.insert(name, quota);
            }
            _ => quotas.default = quota,
        }
    }
    let names: Vec<String> = groups.iter().map(|(_, n)| n.clone()).collect();
    let limits = quota::personal_limits(&quotas, &username, &names);
    let group_limits: Vec<(i64, &String, &Quota)> = groups
        .iter()
        .filter_map(|(id, name)| quotas.groups.get(name).map(|q| (*id, name, q)))
        .filter(|(_, _, q)| **q != Quota::default())
        .collect();
    if limits == Quota::default() && group_limits.is_empty() {
        // No limit applies: nothing to read.
        return Ok(None);
    }
    // What can matter: holds within a week either side of the request, and the number of
    // bookings not yet started.
    if turns == Turns::Take && tx.backend() == super::sql::Backend::Postgres {
        // Other members' bookings count against the group's limits: they take turns.
        let mut ids: Vec<i64> = group_limits.iter().map(|(id, ..)| *id).collect();
        ids.sort_unstable();
        let locks: Vec<super::Lock> = ids.into_iter().map(super::Lock::Group).collect();
        super::take_locks(tx, &locks).await?;
    }
    let mine = holds(tx, &[user_id], window, replacing, now).await?;
    let mut group_holds = Vec::new();
    for (group_id, name, group_limits) in group_limits {
        let members = tx
            .rows(
                "SELECT user_id FROM group_members WHERE group_id = $1",
                &[group_id.into()],
                &[Kind::Int],
            )
            .await?
            .iter()
            .map(|row| row.int(0))
            .collect::<Result<Vec<i64>, StoreError>>()?;
        let held = holds(tx, &members, window, replacing, now).await?;
        group_holds.push((name.clone(), group_limits.clone(), held));
    }
    Ok(Some(QuotaContext {
        limits,
        mine,
        groups: group_holds,
    }))
}

/// Holds of `members` that overlap `window` or have not started by `now` (for the count of
/// upcoming bookings), leaving out booking `except`.
async fn holds(
    tx: &mut impl Conn,
    members: &[i64],
    window: (DateTime<Utc>, DateTime<Utc>),
    except: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Vec<BookedSlot>, StoreError> {
    if members.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT b.start_ms, b.end_ms, COUNT(*)
         FROM bookings b JOIN booking_gpus bg ON bg.booking_id = b.id
         WHERE b.user_id IN ({}) AND b.status != 'cancelled'
           AND ((b.end_ms > $1 AND b.start_ms < $2) OR b.start_ms > $4)
           AND ($3 IS NULL OR b.id != $3)
         GROUP BY b.id, b.start_ms, b.end_ms",
        placeholders(5, members.len())
    );
    let (from, to, now) = (ms(window.0), ms(window.1), ms(now));
    let mut args: Vec<Arg<'_>> = vec![from.into(), to.into(), except.into(), now.into()];
    args.extend(members.iter().map(|m| Arg::from(*m)));
    tx.rows(&sql, &args, &[Kind::Int, Kind::Int, Kind::Int])
        .await?
        .iter()
        .map(|row| {
            Ok(BookedSlot {
                start: at(row.int(0)?),
                end: at(row.int(1)?),
                gpus: row.int(2)? as u32,
            })
        })
        .collect()
}

/// A quota's limits as stored.
#[derive(sqlx::FromRow)]
struct QuotaRow {
    max_gpus: Option<i64>,
    gpu_hours_per_week: Option<f64>,
    max_booking_hours: Option<f64>,
    max_days_ahead: Option<f64>,
    max_upcoming: Option<i64>,
}

impl From<QuotaRow> for Quota {
    fn from(r: QuotaRow) -> Self {
        Quota {
            max_gpus: r.max_gpus.and_then(|n| u32::try_from(n).ok()),
            gpu_hours_per_week: r.gpu_hours_per_week,
            max_booking_hours: r.max_booking_hours,
            max_days_ahead: r.max_days_ahead,
            max_upcoming: r.max_upcoming.and_then(|n| u32::try_from(n).ok()),
        }
    }
}

async fn read_quotas(conn: &mut sqlx::AnyConnection) -> Result<Quotas, StoreError> {
    #[derive(sqlx::FromRow)]
    struct Row {
        scope: String,
        name: String,
        #[sqlx(flatten)]
        quota: QuotaRow,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT scope, name, max_gpus, gpu_hours_per_week, max_booking_hours, max_days_ahead,
                max_upcoming FROM quotas",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut quotas = Quotas::default();
    for r in rows {
        let quota = Quota::from(r.quota);
        match r.scope.as_str() {
            "group" => {
                quotas.groups.insert(r.name, quota);
            }
            "user" => {
                quotas.users.insert(r.name, quota);
            }
            _ => quotas.default = quota,
        }
    }
    Ok(quotas)
}

impl QuotaLimits<'_> {
    /// Every quota: the default, and overrides per group and per user.
    pub async fn list(&self) -> Result<Quotas, StoreError> {
        let mut conn = self.pool.acquire().await?;
        read_quotas(&mut conn).await
    }

    /// Replaces every quota with `quotas`, which names groups and users that must exist.
    pub async fn save(
        &self,
        quotas: &Quotas,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.begin_immediate().await?;
        sqlx::query("DELETE FROM quotas").execute(&mut *tx).await?;
        let mut rows = vec![("default", String::new(), &quotas.default)];
        rows.extend(quotas.groups.iter().map(|(g, q)| ("group", g.clone(), q)));
        rows.extend(quotas.users.iter().map(|(u, q)| ("user", u.clone(), q)));
        for (scope, name, quota) in rows {
            let table = match scope {
                "group" => Some("groups WHERE name = $1"),
                "user" => Some("users WHERE username = $1"),
                _ => None,
            };
            if let Some(table) = table {
                let exists: Option<i64> = sqlx::query_scalar(&format!("SELECT 1 FROM {table}"))
                    .bind(&name)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Err(StoreError::Invalid(format!("no {scope} named {name:?}")));
                }
            }
            sqlx::query(
                "INSERT INTO quotas (scope, name, max_gpus, gpu_hours_per_week, max_booking_hours,
                                     max_days_ahead, max_upcoming)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(scope)
            .bind(&name)
            .bind(quota.max_gpus.map(i64::from))
            .bind(quota.gpu_hours_per_week)
            .bind(quota.max_booking_hours)
            .bind(quota.max_days_ahead)
            .bind(quota.max_upcoming.map(i64::from))
            .execute(&mut *tx)
            .await?;
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether any quota limits GPU-hours a week (else no member can come near one).
    pub async fn limits_weekly_hours(&self) -> Result<bool, StoreError> {
        let any: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM quotas WHERE gpu_hours_per_week > 0 LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        Ok(any.is_some())
    }

    /// Each user's and each group's use now, against the limits that apply to them.
    pub async fn usage(&self, now: DateTime<Utc>) -> Result<Vec<QuotaUse>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let quotas = read_quotas(&mut conn).await?;
        // The holds that count now or this week are read as rows; bookings further ahead only
        // as a count per user (a lab booked a month ahead has thousands).
        let holds: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT b.user_id, b.start_ms, b.end_ms, COUNT(*)
             FROM bookings b JOIN booking_gpus bg ON bg.booking_id = b.id
             WHERE b.status != 'cancelled' AND b.end_ms > $1 AND b.start_ms < $2
             GROUP BY b.id, b.user_id, b.start_ms, b.end_ms",
        )
        .bind(ms(now))
        .bind(ms(now + quota::week()))
        .fetch_all(&mut *conn)
        .await?;
        let upcoming: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT b.user_id, COUNT(*) FROM bookings b
             WHERE b.status != 'cancelled' AND b.start_ms > $1
               AND EXISTS (SELECT 1 FROM booking_gpus bg WHERE bg.booking_id = b.id)
             GROUP BY b.user_id",
        )
        .bind(ms(now))
        .fetch_all(&mut *conn)
        .await?;
        let upcoming_of = |members: &[i64]| -> u32 {
            (upcoming.iter())
                .filter(|(u, _)| members.contains(u))
                .map(|&(_, n)| u32::try_from(n).unwrap_or(u32::MAX))
                .fold(0, u32::saturating_add)
        };
        let users: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, username FROM users ORDER BY username")
                .fetch_all(&mut *conn)
                .await?;
        let memberships: Vec<(String, i64)> = sqlx::query_as(
            "SELECT g.name, m.user_id FROM groups g JOIN group_members m ON m.group_id = g.id",
        )
        .fetch_all(&mut *conn)
        .await?;
        let groups: Vec<String> = sqlx::query_scalar("SELECT name FROM groups ORDER BY name")
            .fetch_all(&mut *conn)
            .await?;
        let holds_of = |members: &[i64]| -> Vec<BookedSlot> {
            holds
                .iter()
                .filter(|(u, ..)| members.contains(u))
                .map(|&(_, s, e, n)| BookedSlot {
                    start: at(s),
                    end: at(e),
                    gpus: n as u32,
                })
                .collect()
        };
        let mut uses = Vec::new();
        for (id, username) in &users {
            let their_groups: Vec<String> = memberships
                .iter()
                .filter(|(_, u)| u == id)
                .map(|(g, _)| g.clone())
                .collect();
            let (gpus_now, gpu_hours_week) = quota::current_use(&holds_of(&[*id]), now);
            uses.push(QuotaUse {
                kind: QuotaHolder::User,
                name: username.clone(),
                limits: quota::personal_limits(&quotas, username, &their_groups),
                gpus_now,
                gpu_hours_week,
                upcoming: upcoming_of(&[*id]),
            });
        }
        for group in &groups {
            let members: Vec<i64> = memberships
                .iter()
                .filter(|(g, _)| g == group)
                .map(|&(_, u)| u)
                .collect();
            let (gpus_now, gpu_hours_week) = quota::current_use(&holds_of(&members), now);
            uses.push(QuotaUse {
                kind: QuotaHolder::Group,
                name: group.clone(),
                limits: quotas.groups.get(group).cloned().unwrap_or_default(),
                gpus_now,
                gpu_hours_week,
                upcoming: upcoming_of(&members),
            });
        }
        Ok(uses)
    }
}
