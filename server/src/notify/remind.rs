//! Reminders that come from the clock, not from an event: a booking starts soon, ends soon, a
//! running job's booking ends soon, the weekly quota is nearly booked, the weekly digest. Each
//! process looks when a booking or job changes (an event), at the moment the next booking
//! reminder is due (`next_due`, from the same rules as `plan`, the pure part), and each quarter
//! hour for the digests (due from Monday 08:00 in each member's zone) and the settings; each
//! reminder has a key in the outbox, so a second look, or a second node, adds nothing.

use super::{Notice, Notifier, NotifyContext, Personal};
use crate::store::{BookingFilter, StoreError};
use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use lanes_types::account::User;
use lanes_types::booking::{Booking, BookingState};
use lanes_types::notify::{EventKind, NotifySettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// How often every reminder is looked at without an event (the digests, and reminder leads
/// an admin changed): each quarter hour.
const FULL_PASS_MINUTES: i64 = 15;
/// How far ahead bookings are read for the next reminder due (the next full pass reads again).
const AHEAD: Duration = Duration::minutes(FULL_PASS_MINUTES + 1);
/// How long a pass waits after the event that woke it, for the events that follow it.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
/// How often old messages are pruned.
const PRUNE_EVERY: Duration = Duration::hours(1);
/// How soon a pass is tried again after the database did not answer.
const RETRY: Duration = Duration::seconds(5);
/// How long the outbox keeps messages that are over (for admins to look back on).
const KEEP: Duration = Duration::days(90);
/// The digest goes out on Mondays from this hour, in each member's zone.
const DIGEST_HOUR: u32 = 8;

/// A job that runs in a booking, as far as reminders care.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningJob {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    pub booking_id: i64,
}

/// The reminders due at `now` for these bookings and running jobs.
pub fn plan(
    bookings: &[Booking],
    jobs: &[RunningJob],
    settings: &NotifySettings,
    now: DateTime<Utc>,
) -> Vec<Notice> {
    let start_lead = Duration::minutes(i64::from(settings.starts_soon_min));
    let end_lead = Duration::minutes(i64::from(settings.ends_soon_min));
    let mut out = Vec::new();
    for b in bookings.iter().filter(|b| b.loan_of.is_none()) {
        let details = json!({
            "booking_id": b.id, "start": b.start, "end": b.end, "gpus": b.gpus,
            "note": b.note, "queue_job": b.queue_job,
        });
        // Booked inside the lead time: its holder knows already.
        if b.state == BookingState::Upcoming
            && b.start > now
            && b.start - now <= start_lead
            && b.created_at <= b.start - start_lead
            && b.queue_job.is_none()
        {
            out.push(reminder(
                b.user_id,
                EventKind::BookingStartsSoon,
                format!("booking_starts_soon:{}:{}", b.id, b.start.timestamp()),
                format!("booking {} of {} starts at {}", b.id, b.username, b.start),
                details.clone(),
                now,
            ));
        }
        if b.state == BookingState::Active
            && b.end > now
            && b.end - now <= end_lead
            && b.start <= b.end - end_lead
        {
            let running: Vec<&RunningJob> = jobs.iter().filter(|j| j.booking_id == b.id).collect();
            // A holder whose own job runs in it hears of the job's end instead (one message).
            if b.queue_job.is_none() && !running.iter().any(|j| j.user_id == b.user_id) {
                out.push(reminder(
                    b.user_id,
                    EventKind::BookingEndsSoon,
                    format!("booking_ends_soon:{}:{}", b.id, b.end.timestamp()),
                    format!("booking {} of {} ends at {}", b.id, b.username, b.end),
                    details.clone(),
                    now,
                ));
            }
            for job in running {
                let mut details = details.clone();
                details["job_id"] = json!(job.id);
                details["name"] = json!(job.name);
                out.push(reminder(
                    job.user_id,
                    EventKind::JobBookingEnding,
                    format!("job_booking_ending:{}:{}", job.id, b.end.timestamp()),
                    format!(
                        "job {} still runs; its booking {} ends at {}",
                        job.id, b.id, b.end
                    ),
                    details,
                    now,
                ));
            }
        }
    }
    out
}

/// When `plan` next has a booking reminder to give for these bookings, after `now`: a start
/// reminder's lead before the start, an end reminder's lead before the end (only where `plan`
/// would give it then).
pub fn next_due(
    bookings: &[Booking],
    settings: &NotifySettings,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let start_lead = Duration::minutes(i64::from(settings.starts_soon_min));
    let end_lead = Duration::minutes(i64::from(settings.ends_soon_min));
    let mut due = Vec::new();
    for b in bookings.iter().filter(|b| b.loan_of.is_none()) {
        let start_reminder = b.start - start_lead;
        if b.queue_job.is_none() && b.created_at <= start_reminder {
            due.push(start_reminder);
        }
        let end_reminder = b.end - end_lead;
        if b.start <= end_reminder {
            due.push(end_reminder);
        }
    }
    due.into_iter().filter(|t| *t > now).min()
}

/// The next quarter hour after `now`.
fn next_full_pass(now: DateTime<Utc>) -> DateTime<Utc> {
    let step = FULL_PASS_MINUTES * 60;
    let next = (now.timestamp().div_euclid(step) + 1) * step;
    DateTime::from_timestamp(next, 0).unwrap_or(now + Duration::minutes(FULL_PASS_MINUTES))
}

fn reminder(
    user_id: i64,
    kind: EventKind,
    key: String,
    text: String,
    details: serde_json::Value,
    now: DateTime<Utc>,
) -> Notice {
    Notice {
        event: None,
        at: now,
        text,
        details,
        to: Some(Personal {
            user_id,
            kind,
            dedupe: Some(key),
        }),
    }
}

/// The Monday that starts the week of `local`, as "YYYY-Www", when the digest is due at
/// `local` (Monday from [`DIGEST_HOUR`], or later in the week); the digest covers the week before.
pub fn digest_week(local: chrono::NaiveDateTime) -> String {
    let week = local.date().iso_week();
    format!("{}-W{:02}", week.year(), week.week())
}

/// Full reminder passes (digests included) on request, for tests and tools instead of waiting
/// for the quarter hour.
pub type Passes = crate::runtime::tasks::Passes;

pub fn start(context: NotifyContext, notifier: Notifier, shutdown: CancellationToken) -> Passes {
    let passes = Passes::default();
    let handle = passes.clone();
    crate::runtime::tasks::supervise("reminders", shutdown.clone(), move || {
        run(
            context.clone(),
            notifier.clone(),
            passes.clone(),
            shutdown.clone(),
        )
    });
    handle
}

async fn run(
    context: NotifyContext,
    notifier: Notifier,
    passes: Passes,
    shutdown: CancellationToken,
) {
    let mut events = context.store.events().subscribe();
    let mut full_at = context.clock.now();
    let mut prune_at = context.clock.now();
    loop {
        let now = context.clock.now();
        // Old messages go; keys of pruned reminders go with them (their bookings ended long
        // before).
        if now >= prune_at {
            prune_at = now + PRUNE_EVERY;
            if let Err(e) = context.store.outbox().prune(now - KEEP).await {
                tracing::warn!(error = %e, "could not prune the outbox");
            }
        }
        let asked = passes.asked();
        let full = now >= full_at || passes.wanted();
        if full {
            full_at = next_full_pass(now);
        }
        let result = pass(&context, now, full).await;
        if full {
            passes.served(asked);
        }
        let next = match result {
            Ok((queued, due)) => {
                if queued > 0 {
                    notifier.wake();
                }
                due.map_or(full_at, |due| due.min(full_at))
            }
            Err(e) => {
                tracing::warn!(error = %e, "the reminder pass failed");
                full_at = full_at.min(now + RETRY);
                full_at
            }
        };
        let sleep = (next - context.clock.now()).to_std().unwrap_or_default();
        tokio::select! {
            _ = events.changed(crate::runtime::events::Event::concerns_reminders) => {
                // Reminders are minutes apart: a burst of writes (a script booking a month of
                // slots) costs a pass a second, not one a booking.
                tokio::select! {
                    _ = tokio::time::sleep(SETTLE) => {}
                    _ = passes.requested() => {}
                    _ = shutdown.cancelled() => break,
                }
            }
            _ = passes.requested() => {}
            _ = tokio::time::sleep(sleep + std::time::Duration::from_millis(1)) => {}
            _ = shutdown.cancelled() => break,
        }
    }
}

/// One look at the clock: the booking and quota reminders due, and with `full` the digests.
/// How many messages it queued, and when the next booking reminder is due.
pub async fn pass(
    context: &NotifyContext,
    now: DateTime<Utc>,
    full: bool,
) -> Result<(usize, Option<DateTime<Utc>>), StoreError> {
    let store = &context.store;
    let settings = store.notifications().settings().await?;
    let lead = Duration::minutes(i64::from(
        settings.starts_soon_min.max(settings.ends_soon_min),
    ));
    let filter = BookingFilter {
        from: Some(now),
        to: Some(now + lead + AHEAD),
        ..Default::default()
    };
    let bookings = store.bookings().list(&filter, now).await?;
    let jobs: Vec<RunningJob> = store
        .jobs()
        .live()
        .await?
        .into_iter()
        .filter(|j| j.job.state == lanes_types::job::JobState::Running)
        .filter_map(|j| {
            Some(RunningJob {
                id: j.job.id,
                user_id: j.job.user_id,
                name: j.job.title(),
                booking_id: j.job.booking_id?,
            })
        })
        .collect();
    let mut queued = 0;
    let mut notices = plan(&bookings, &jobs, &settings, now);
    let users = store.accounts().list().await?;
    notices.extend(quota_warnings(context, &settings, &users, now).await?);
    if full {
        notices.extend(digests(context, &settings, &users, now).await?);
        notices.extend(statements(context, &settings, &users, now).await?);
    }
    for notice in notices {
        queued += super::enqueue(context, &notice).await?.len();
    }
    Ok((queued, next_due(&bookings, &settings, now)))
}

/// Members whose booked GPU-hours in the coming week reached the warning share of their quota.
async fn quota_warnings(
    context: &NotifyContext,
    settings: &NotifySettings,
    users: &[User],
    now: DateTime<Utc>,
) -> Result<Vec<Notice>, StoreError> {
    let store = &context.store;
    let mut out = Vec::new();
    // Every booking wakes this pass: without a weekly limit it reads nothing more.
    if !store.quotas().limits_weekly_hours().await? {
        return Ok(out);
    }
    for q in store.quotas().usage(now).await? {
        let Some(limit) = q.limits.gpu_hours_per_week.filter(|l| *l > 0.0) else {
            continue;
        };
        if q.kind != lanes_types::booking::QuotaHolder::User
            || q.gpu_hours_week < limit * f64::from(settings.quota_near_pct) / 100.0
        {
            continue;
        }
        let Some(user) = users.iter().find(|u| u.username == q.name) else {
            continue;
        };
        let week = digest_week(now.naive_utc());
        out.push(reminder(
            user.id,
            EventKind::QuotaNear,
            format!("quota_near:{}:{week}", user.id),
            format!(
                "{} booked {:.1} of {:.1} GPU-hours this week",
                user.username, q.gpu_hours_week, limit
            ),
            json!({"used_h": q.gpu_hours_week, "limit_h": limit, "pct": settings.quota_near_pct}),
            now,
        ));
    }
    Ok(out)
}

/// The weekly digest of every member for whom it is due and not yet queued.
async fn digests(
    context: &NotifyContext,
    settings: &NotifySettings,
    users: &[User],
    now: DateTime<Utc>,
) -> Result<Vec<Notice>, StoreError> {
    let store = &context.store;
    let mut out = Vec::new();
    for user in users.iter().filter(|u| u.enabled) {
        let prefs = store.notifications().prefs(user.id).await?;
        let channels = prefs.channels(settings, EventKind::WeeklyDigest);
        if !(channels.email || channels.webhook) {
            continue;
        }
        let tz = super::deliver::zone(prefs.time_zone.as_deref(), &settings.time_zone);
        let local = now.with_timezone(&tz);
        if local.weekday() == chrono::Weekday::Mon && local.hour() < DIGEST_HOUR {
            continue;
        }
        let week = digest_week(local.naive_local());
        let key = format!("weekly_digest:{}:{week}", user.id);
        if store.outbox().has(&format!("{key}:email")).await?
            || store.outbox().has(&format!("{key}:webhook")).await?
        {
            continue;
        }
        // The week before this one, Monday to Monday in the member's zone.
        let monday = local.date_naive()
            - chrono::Duration::days(i64::from(local.weekday().num_days_from_monday()));
        let Some(this_monday) = monday
            .and_hms_opt(0, 0, 0)
            .and_then(|t| t.and_local_timezone(tz).earliest())
        else {
            continue;
        };
        let to = this_monday.with_timezone(&Utc);
        let from = to - Duration::days(7);
        // A member who joined this week has no week before to tell of.
        if store
            .accounts()
            .created_at(user.id)
            .await?
            .is_some_and(|created| created > to)
        {
            continue;
        }
        let (period, _) = period(context, (from, to), now, Some(user.id)).await?;
        let report = crate::reports::gather(store, &period).await?;
        let row = report.users.iter().find(|r| r.name == user.username);
        let (booked, used, jobs, kwh) = row.map_or((0.0, 0.0, 0, 0.0), |r| {
            (r.gpu_hours_booked, r.gpu_hours_used, r.jobs, r.energy_kwh)
        });
        out.push(reminder(
            user.id,
            EventKind::WeeklyDigest,
            key,
            format!(
                "{}: {booked:.1} GPU-hours booked, {used:.1} used in the week from {from}",
                user.username
            ),
            json!({
                "from": from, "to": to, "booked_h": booked, "used_h": used,
                "jobs": jobs, "energy_kwh": kwh,
            }),
            now,
        ));
    }
    Ok(out)
}

/// A report's period `[from, to)` as the notifier reads it (the policy's idle threshold, the
/// history's resolutions, the admins' prices), and the portal settings it read them from.
async fn period(
    context: &NotifyContext,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    now: DateTime<Utc>,
    only_user: Option<i64>,
) -> Result<(crate::reports::Period, lanes_types::account::PortalSettings), StoreError> {
    let portal = context.store.settings().portal().await?;
    let idle_threshold_pct = context
        .policy
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .idle_threshold_pct;
    let period = crate::reports::Period {
        from,
        to,
        now,
        only_user,
        idle_threshold_pct,
        keep_minutes: context.keep_minutes,
        interval_s: context.interval_s,
        energy_price_per_kwh: portal.energy_price_per_kwh,
        carbon_g_per_kwh: portal.carbon_g_per_kwh,
    };
    Ok((period, portal))
}

/// On the first of the month from [`DIGEST_HOUR`] in the lab's zone (or later, if the server
/// was down then), each group's statement of the month before to the group's admins: the
/// admins who are its members, or every admin where none is. Once per group, month and admin
/// (the outbox's key). A lab that did not exist yet that month is sent nothing.
async fn statements(
    context: &NotifyContext,
    settings: &NotifySettings,
    users: &[User],
    now: DateTime<Utc>,
) -> Result<Vec<Notice>, StoreError> {
    use lanes_types::statement as st;
    let store = &context.store;
    let tz = super::deliver::zone(None, &settings.time_zone);
    let local = now.with_timezone(&tz);
    if local.day() == 1 && local.hour() < DIGEST_HOUR {
        return Ok(Vec::new());
    }
    let month = st::month_before(local.year(), local.month());
    let Ok((year, m)) = st::parse_month(&month) else {
        return Ok(Vec::new());
    };
    let (from, to) = st::month_bounds(year, m, &tz);
    let admins: Vec<&User> = users.iter().filter(|u| u.enabled && u.is_admin()).collect();
    if admins.is_empty() {
        return Ok(Vec::new());
    }
    // Who is told of which group, where that message was not queued yet.
    let mut due: Vec<(String, i64, String)> = Vec::new();
    for group in store.accounts().groups().await? {
        let mut readers: Vec<&&User> = admins
            .iter()
            .filter(|a| group.members.contains(&a.username))
            .collect();
        if readers.is_empty() {
            readers = admins.iter().collect();
        }
        for admin in readers {
            let key = format!("monthly_statement:{month}:{}:{}", group.id, admin.id);
            if store.outbox().has(&format!("{key}:email")).await?
                || store.outbox().has(&format!("{key}:webhook")).await?
            {
                continue;
            }
            let prefs = store.notifications().prefs(admin.id).await?;
            let channels = prefs.channels(settings, EventKind::MonthlyStatement);
            if channels.email || channels.webhook {
                due.push((group.name.clone(), admin.id, key));
            }
        }
    }
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let mut first_account: Option<DateTime<Utc>> = None;
    for user in users {
        if let Some(created) = store.accounts().created_at(user.id).await? {
            first_account = Some(first_account.map_or(created, |f| f.min(created)));
        }
    }
    if first_account.is_none_or(|first| first >= to) {
        return Ok(Vec::new());
    }
    let (period, portal) = period(context, (from, to), now, None).await?;
    let statement = crate::statements::gather(
        store,
        &crate::statements::Month {
            name: month.clone(),
            time_zone: settings.time_zone.clone(),
            period,
            rates: portal.rates(),
        },
    )
    .await?;
    Ok(due
        .into_iter()
        .map(|(group, admin, key)| {
            let row = (statement.groups.iter().find(|r| r.name == group).cloned())
                .unwrap_or_else(|| statement.rates.row(&group, 0.0, 0.0, 0.0, 0));
            reminder(
                admin,
                EventKind::MonthlyStatement,
                key,
                format!(
                    "{group} in {month}: {:.1} GPU-hours booked, {:.1} used",
                    row.gpu_hours_booked, row.gpu_hours_used
                ),
                json!({
                    "month": month, "group": group, "booked_h": row.gpu_hours_booked,
                    "used_h": row.gpu_hours_used, "idle_share": row.idle_share,
                    "energy_kwh": row.energy_kwh, "cost": row.cost, "co2e_kg": row.co2e_kg,
                    "jobs": row.jobs,
                }),
                now,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::booking::GpuRef;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn booking(id: i64, start: &str, end: &str, now: DateTime<Utc>) -> Booking {
        let (start, end) = (at(start), at(end));
        Booking {
            id,
            user_id: 7,
            username: "ada".into(),
            display_name: "Ada".into(),
            gpus: vec![GpuRef {
                node: "n".into(),
                uuid: "GPU-1".into(),
            }],
            start,
            end,
            state: state_at(start, end, now),
            created_at: start - Duration::days(1),
            ..Default::default()
        }
    }

    fn state_at(start: DateTime<Utc>, end: DateTime<Utc>, now: DateTime<Utc>) -> BookingState {
        crate::bookings::rules::state_at(start, end, false, false, now)
    }

    fn kinds(notices: &[Notice]) -> Vec<(EventKind, String)> {
        notices
            .iter()
            .map(|n| {
                let to = n.to.as_ref().unwrap();
                (to.kind, to.dedupe.clone().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_task_sleeps_until_the_next_reminder_plan_would_give() {
        let settings = NotifySettings::default(); // 10 min before the start, 15 before the end
        let now = at("2026-12-02T16:00:00Z");
        let b = booking(1, "2026-12-02T17:00:00Z", "2026-12-02T19:00:00Z", now);
        // The start reminder first; once it is past, the end reminder.
        assert_eq!(
            next_due(std::slice::from_ref(&b), &settings, now),
            Some(at("2026-12-02T16:50:00Z"))
        );
        let after = at("2026-12-02T16:50:00Z");
        assert_eq!(
            next_due(std::slice::from_ref(&b), &settings, after),
            Some(at("2026-12-02T18:45:00Z"))
        );
        // At the moment next_due named, plan gives the reminder.
        let due = at("2026-12-02T16:50:00Z");
        let b_then = booking(1, "2026-12-02T17:00:00Z", "2026-12-02T19:00:00Z", due);
        assert_eq!(plan(&[b_then], &[], &settings, due).len(), 1);
        // A booking made inside its lead time gets no start reminder, so none is waited for;
        // one shorter than the end lead gets no end reminder.
        let mut late = booking(2, "2026-12-02T16:05:00Z", "2026-12-02T16:15:00Z", now);
        late.created_at = now;
        assert_eq!(next_due(&[late], &settings, now), None);
        // Loans remind nobody; nothing booked: the task waits for an event or the quarter hour.
        let mut loan = b;
        loan.loan_of = Some(9);
        assert_eq!(next_due(&[loan], &settings, now), None);
        assert_eq!(
            next_full_pass(at("2026-12-02T16:07:30Z")),
            at("2026-12-02T16:15:00Z")
        );
        assert_eq!(
            next_full_pass(at("2026-12-02T16:15:00Z")),
            at("2026-12-02T16:30:00Z")
        );
    }

    #[test]
    fn a_start_reminder_comes_within_its_lead_time_and_not_before() {
        let settings = NotifySettings::default(); // 10 min before the start, 15 before the end
        let b = |now| {
            vec![booking(
                1,
                "2026-12-02T17:00:00Z",
                "2026-12-02T19:00:00Z",
                now,
            )]
        };
        let early = at("2026-12-02T16:49:59Z");
        assert!(plan(&b(early), &[], &settings, early).is_empty());
        let due = at("2026-12-02T16:50:00Z");
        assert_eq!(
            kinds(&plan(&b(due), &[], &settings, due)),
            vec![(
                EventKind::BookingStartsSoon,
                format!(
                    "booking_starts_soon:1:{}",
                    at("2026-12-02T17:00:00Z").timestamp()
                )
            )]
        );
        // Started: no more start reminder, and the end is far.
        let started = at("2026-12-02T17:00:00Z");
        assert!(plan(&b(started), &[], &settings, started).is_empty());
        let ending = at("2026-12-02T18:45:00Z");
        let job = RunningJob {
            id: 5,
            user_id: 8,
            name: "train".into(),
            booking_id: 1,
        };
        let planned = plan(&b(ending), &[job], &settings, ending);
        assert_eq!(
            kinds(&planned).iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            vec![EventKind::BookingEndsSoon, EventKind::JobBookingEnding]
        );
        // The job's owner is told of their job, whoever holds the booking.
        assert_eq!(planned[1].to.as_ref().unwrap().user_id, 8);
        // A holder whose own job runs there gets one message: the job's.
        let own = RunningJob {
            id: 6,
            user_id: 7,
            name: "mine".into(),
            booking_id: 1,
        };
        let planned = plan(&b(ending), &[own], &settings, ending);
        assert_eq!(
            kinds(&planned).iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            vec![EventKind::JobBookingEnding]
        );
    }

    #[test]
    fn a_booking_made_inside_the_lead_time_or_shorter_than_it_gets_no_reminder() {
        let settings = NotifySettings::default();
        let now = at("2026-12-02T16:55:00Z");
        let mut b = booking(1, "2026-12-02T17:00:00Z", "2026-12-02T19:00:00Z", now);
        b.created_at = at("2026-12-02T16:54:00Z");
        assert!(plan(&[b], &[], &settings, now).is_empty());
        let now = at("2026-12-02T17:01:00Z");
        let short = booking(2, "2026-12-02T17:00:00Z", "2026-12-02T17:10:00Z", now);
        assert!(plan(&[short], &[], &settings, now).is_empty());
    }

    #[test]
    fn the_digest_week_is_the_iso_week() {
        let t = at("2027-01-04T09:00:00Z").naive_utc(); // a Monday
        assert_eq!(digest_week(t), "2027-W01");
    }
}
