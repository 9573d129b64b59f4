//! Usage reports: from the bookings of a period, what the history says about their cards,
//! and counts of violations and jobs, the rows per user, per group and per booking; and the CSV
//! form of each table.
//! `build` is pure; `gather` reads its inputs from the store.

use crate::history::Resolution;
use crate::store::{BookingEnergy, BookingFilter, CardUse, ProcessTotal, Store, StoreError};
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::report::{BookingUsage, JobUsage, UnixUsage, UsageReport, UsageRow, MJ_PER_KWH};
use std::collections::{BTreeMap, HashMap};

/// Everything a report is made of.
pub struct Inputs<'a> {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub idle_threshold_pct: u32,
    pub bookings: &'a [Booking],
    pub card_use: &'a HashMap<i64, CardUse>,
    /// Per user id.
    pub violations: &'a HashMap<i64, i64>,
    pub jobs: &'a HashMap<i64, i64>,
    /// User id → username, for everyone who appears.
    pub usernames: &'a HashMap<i64, String>,
    /// (user id, group name).
    pub memberships: &'a [(i64, String)],
    /// A member's own report: only this user's rows.
    pub only_user: Option<i64>,
    /// Per booking: its cards' energy and what per-process samples split of them.
    pub energy: &'a HashMap<i64, BookingEnergy>,
    /// Per-process use per Unix account and job.
    pub processes: &'a [ProcessTotal],
    /// Unix account → Lanes user id, from the accounts that name one.
    pub unix_accounts: &'a HashMap<String, i64>,
    pub energy_price_per_kwh: Option<f64>,
    pub carbon_g_per_kwh: Option<f64>,
    /// To name each booking's cards.
    pub cards: &'a lanes_types::CardIndex,
}

/// What a report covers and how it is read.
pub struct Period {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// A member's own report.
    pub only_user: Option<i64>,
    pub idle_threshold_pct: u32,
    /// How long minute readings are kept: a period within it is read by the minute.
    pub keep_minutes: chrono::Duration,
    /// Seconds between readings.
    pub interval_s: f64,
    pub energy_price_per_kwh: Option<f64>,
    pub carbon_g_per_kwh: Option<f64>,
}

/// Reads what a report of `period` needs from the store and builds it.
pub async fn gather(store: &Store, period: &Period) -> Result<UsageReport, StoreError> {
    let (from, to, mine) = (period.from, period.to, period.only_user);
    let resolution = if period.now - from <= period.keep_minutes {
        Resolution::Minute
    } else {
        Resolution::Hour
    };
    let filter = BookingFilter {
        from: Some(from),
        to: Some(to),
        user_id: mine,
        ..Default::default()
    };
    let bookings = store.bookings().list(&filter, period.now).await?;
    let card_use = store
        .reports()
        .booking_card_use(
            from.timestamp(),
            to.timestamp(),
            period.idle_threshold_pct,
            resolution,
            period.interval_s,
        )
        .await?;
    let keep = |mut counts: HashMap<i64, i64>| {
        if let Some(me) = mine {
            counts.retain(|user, _| *user == me);
        }
        counts
    };
    let violations = keep(store.reports().violation_counts(from, to).await?);
    let jobs = keep(store.reports().job_counts(from, to).await?);
    let users = store.accounts().list().await?;
    let usernames: HashMap<i64, String> =
        users.iter().map(|u| (u.id, u.username.clone())).collect();
    let memberships = if mine.is_some() {
        Vec::new()
    } else {
        store.accounts().memberships().await?
    };
    let unix_accounts: HashMap<String, i64> = users
        .iter()
        .filter_map(|u| Some((u.unix_user.clone()?, u.id)))
        .collect();
    let (energy, processes) = store
        .usage()
        .energy_and_processes(from.timestamp(), to.timestamp())
        .await?;
    let cards = store.inventory().card_index().await?;
    Ok(build(&Inputs {
        from,
        to,
        idle_threshold_pct: period.idle_threshold_pct,
        bookings: &bookings,
        card_use: &card_use,
        violations: &violations,
        jobs: &jobs,
        usernames: &usernames,
        memberships: &memberships,
        only_user: mine,
        energy: &energy,
        processes: &processes,
        unix_accounts: &unix_accounts,
        energy_price_per_kwh: period.energy_price_per_kwh,
        carbon_g_per_kwh: period.carbon_g_per_kwh,
        cards: &cards,
    }))
}

/// Cost and CO2e of `kwh` at the admins' price and carbon intensity.
fn priced(kwh: f64, inputs: &Inputs<'_>) -> (Option<f64>, Option<f64>) {
    (
        inputs.energy_price_per_kwh.map(|p| p * kwh),
        inputs.carbon_g_per_kwh.map(|g| g * kwh / 1000.0),
    )
}

/// Hours of `[start, end)` inside `[from, to)`.
fn hours_inside(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> f64 {
    let (a, b) = (start.max(from), end.min(to));
    if b <= a {
        0.0
    } else {
        (b - a).num_milliseconds() as f64 / 3_600_000.0
    }
}

pub fn build(inputs: &Inputs<'_>) -> UsageReport {
    let mut per_user: BTreeMap<i64, UsageRow> = BTreeMap::new();
    let row = |name: &str| UsageRow {
        name: name.to_string(),
        gpu_hours_booked: 0.0,
        gpu_hours_used: 0.0,
        gpu_hours_used_card_level: 0.0,
        idle_booked_hours: 0.0,
        violations: 0,
        jobs: 0,
        energy_kwh: 0.0,
        cost: None,
        co2e_kg: None,
    };
    let name_of = |id: i64| {
        inputs
            .usernames
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("user {id}"))
    };
    let mut bookings = Vec::new();
    for b in inputs.bookings {
        if b.state == BookingState::Cancelled {
            continue;
        }
        let booked = b.gpus.len() as f64 * hours_inside(b.start, b.end, inputs.from, inputs.to);
        if booked <= 0.0 {
            continue;
        }
        let used = inputs.card_use.get(&b.id).copied().unwrap_or_default();
        let energy = inputs.energy.get(&b.id).copied().unwrap_or_default();
        let user = per_user
            .entry(b.user_id)
            .or_insert_with(|| row(&b.username));
        user.gpu_hours_booked += booked;
        // What per-process samples gave to someone is theirs (below); the rest of the
        // booking's use and draw is its holder's, as a card-level figure.
        let card_level = (used.used_hours - energy.attributed_hours).max(0.0);
        user.gpu_hours_used += card_level;
        user.gpu_hours_used_card_level += card_level;
        user.energy_kwh += (energy.energy_mj - energy.attributed_mj).max(0.0) / MJ_PER_KWH;
        user.idle_booked_hours += used.idle_hours;
        let kwh = energy.energy_mj / MJ_PER_KWH;
        let (cost, co2e_kg) = priced(kwh, inputs);
        bookings.push(BookingUsage {
            booking_id: b.id,
            project: b.project.clone(),
            username: b.username.clone(),
            gpus: b.gpus.len(),
            cards: inputs.cards.names(&b.gpus),
            start: b.start,
            end: b.end,
            gpu_hours_booked: booked,
            gpu_hours_used: used.used_hours,
            avg_utilization_pct: used.avg_utilization_pct,
            peak_memory_bytes: used.peak_memory_mib.map(|m| (m.max(0) as u64) << 20),
            energy_kwh: kwh,
            cost,
            co2e_kg,
        });
    }
    // Per-process use, to whoever ran it: a job's owner, else the user whose account the
    // process ran as.
    let mut jobs: BTreeMap<i64, JobUsage> = BTreeMap::new();
    let mut unix: BTreeMap<String, UnixUsage> = BTreeMap::new();
    let mut sm_weight: HashMap<String, f64> = HashMap::new();
    let mut job_sm_weight: HashMap<i64, (f64, f64)> = HashMap::new();
    // Who each job and each account belongs to (an account: as its first row said, as its
    // `username` does).
    let mut job_owner: HashMap<i64, Option<i64>> = HashMap::new();
    let mut account_owner: HashMap<String, Option<i64>> = HashMap::new();
    for p in inputs.processes {
        let owner = p
            .job_user_id
            .filter(|_| p.job_id != 0)
            .or_else(|| inputs.unix_accounts.get(&p.unix_user).copied());
        let kwh = p.energy_mj / MJ_PER_KWH;
        if p.job_id != 0 {
            job_owner.insert(p.job_id, owner);
        }
        account_owner.entry(p.unix_user.clone()).or_insert(owner);
        if let Some(owner) = owner {
            let user = per_user
                .entry(owner)
                .or_insert_with(|| row(&name_of(owner)));
            user.gpu_hours_used += p.used_hours;
            user.energy_kwh += kwh;
        }
        let u = unix
            .entry(p.unix_user.clone())
            .or_insert_with(|| UnixUsage {
                unix_user: p.unix_user.clone(),
                username: owner.map(name_of),
                gpu_hours_used: 0.0,
                hours_on_card: 0.0,
                mean_sm_pct: None,
                energy_kwh: 0.0,
            });
        u.gpu_hours_used += p.used_hours;
        u.hours_on_card += p.hours_on_card;
        u.energy_kwh += kwh;
        *sm_weight.entry(p.unix_user.clone()).or_default() +=
            p.mean_sm_pct.unwrap_or(0.0) * p.hours_on_card;
        if p.job_id != 0 {
            let j = jobs.entry(p.job_id).or_insert_with(|| JobUsage {
                job_id: p.job_id,
                username: owner.map(name_of).unwrap_or_else(|| p.unix_user.clone()),
                gpu_hours_used: 0.0,
                mean_sm_pct: None,
                energy_kwh: 0.0,
                cost: None,
                co2e_kg: None,
            });
            j.gpu_hours_used += p.used_hours;
            j.energy_kwh += kwh;
            let w = job_sm_weight.entry(p.job_id).or_default();
            *w = (
                w.0 + p.mean_sm_pct.unwrap_or(0.0) * p.hours_on_card,
                w.1 + p.hours_on_card,
            );
        }
    }
    for u in unix.values_mut() {
        u.mean_sm_pct = (u.hours_on_card > 0.0).then(|| sm_weight[&u.unix_user] / u.hours_on_card);
    }
    for j in jobs.values_mut() {
        let (w, h) = job_sm_weight[&j.job_id];
        j.mean_sm_pct = (h > 0.0).then(|| w / h);
        (j.cost, j.co2e_kg) = priced(j.energy_kwh, inputs);
    }
    // A member's report shows their own use only.
    if let Some(me) = inputs.only_user {
        per_user.retain(|id, _| *id == me);
        jobs.retain(|id, _| job_owner.get(id).copied().flatten() == Some(me));
        unix.retain(|name, _| account_owner.get(name).copied().flatten() == Some(me));
    }
    for (user, n) in inputs.violations {
        per_user
            .entry(*user)
            .or_insert_with(|| row(&name_of(*user)))
            .violations += n;
    }
    for (user, n) in inputs.jobs {
        per_user
            .entry(*user)
            .or_insert_with(|| row(&name_of(*user)))
            .jobs += n;
    }
    let mut per_group: BTreeMap<String, UsageRow> = BTreeMap::new();
    for (user, group) in inputs.memberships {
        let Some(u) = per_user.get(user) else {
            continue;
        };
        let g = per_group.entry(group.clone()).or_insert_with(|| row(group));
        g.gpu_hours_booked += u.gpu_hours_booked;
        g.gpu_hours_used += u.gpu_hours_used;
        g.idle_booked_hours += u.idle_booked_hours;
        g.violations += u.violations;
        g.jobs += u.jobs;
        g.gpu_hours_used_card_level += u.gpu_hours_used_card_level;
        g.energy_kwh += u.energy_kwh;
    }
    let mut users: Vec<UsageRow> = per_user.into_values().collect();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    let mut groups: Vec<UsageRow> = per_group.into_values().collect();
    for r in users.iter_mut().chain(groups.iter_mut()) {
        (r.cost, r.co2e_kg) = priced(r.energy_kwh, inputs);
    }
    UsageReport {
        from: inputs.from,
        to: inputs.to,
        idle_threshold_pct: inputs.idle_threshold_pct,
        users,
        groups,
        bookings,
        jobs: jobs.into_values().collect(),
        unix_users: unix.into_values().collect(),
        per_process: !inputs.processes.is_empty(),
        energy_price_per_kwh: inputs.energy_price_per_kwh,
        carbon_g_per_kwh: inputs.carbon_g_per_kwh,
    }
}

/// Which table of a report a CSV holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Users,
    Groups,
    Bookings,
    Jobs,
    UnixUsers,
}

impl std::str::FromStr for Table {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "users" => Ok(Table::Users),
            "groups" => Ok(Table::Groups),
            "bookings" => Ok(Table::Bookings),
            "jobs" => Ok(Table::Jobs),
            "unix_users" => Ok(Table::UnixUsers),
            other => Err(format!(
                "unknown table {other:?}: expected users, groups, bookings, jobs or unix_users"
            )),
        }
    }
}

/// A CSV field: quoted when it holds a comma, a quote or a line break; a leading `=`, `+`, `-`
/// or `@` is defused so that spreadsheets do not run it as a formula.
pub fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@']) {
        format!("'{text}")
    } else {
        text.to_string()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

fn num(x: f64) -> String {
    format!("{x:.3}")
}

fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_default()
}

/// One table of `report` as CSV (RFC 4180, CRLF line ends, a header row). Cost and CO2e
/// columns are empty where the admins set no price or carbon intensity.
pub fn csv(report: &UsageReport, table: Table) -> String {
    let mut lines: Vec<String> = Vec::new();
    const ENERGY: &str = "energy_kwh,cost,co2e_kg";
    let energy = |kwh: f64, cost: Option<f64>, co2: Option<f64>| {
        format!("{},{},{}", num(kwh), opt(cost), opt(co2))
    };
    match table {
        Table::Users | Table::Groups => {
            let who = if table == Table::Users {
                "user"
            } else {
                "group"
            };
            lines.push(format!(
                "{who},gpu_hours_booked,gpu_hours_used,gpu_hours_used_card_level,idle_booked_hours,violations,jobs,{ENERGY}"
            ));
            let rows = if table == Table::Users {
                &report.users
            } else {
                &report.groups
            };
            for r in rows {
                lines.push(format!(
                    "{},{},{},{},{},{},{},{}",
                    csv_field(&r.name),
                    num(r.gpu_hours_booked),
                    num(r.gpu_hours_used),
                    num(r.gpu_hours_used_card_level),
                    num(r.idle_booked_hours),
                    r.violations,
                    r.jobs,
                    energy(r.energy_kwh, r.cost, r.co2e_kg),
                ));
            }
        }
        Table::Bookings => {
            lines.push(format!(
                "booking_id,user,gpus,cards,start,end,gpu_hours_booked,gpu_hours_used,avg_utilization_pct,peak_memory_bytes,{ENERGY}"
            ));
            for b in &report.bookings {
                lines.push(format!(
                    "{},{},{},{},{},{},{},{},{},{},{}",
                    b.booking_id,
                    csv_field(&b.username),
                    b.gpus,
                    csv_field(&b.cards.join("; ")),
                    b.start.to_rfc3339(),
                    b.end.to_rfc3339(),
                    num(b.gpu_hours_booked),
                    num(b.gpu_hours_used),
                    opt(b.avg_utilization_pct),
                    b.peak_memory_bytes
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    energy(b.energy_kwh, b.cost, b.co2e_kg),
                ));
            }
        }
        Table::Jobs => {
            lines.push(format!("job_id,user,gpu_hours_used,mean_sm_pct,{ENERGY}"));
            for j in &report.jobs {
                lines.push(format!(
                    "{},{},{},{},{}",
                    j.job_id,
                    csv_field(&j.username),
                    num(j.gpu_hours_used),
                    opt(j.mean_sm_pct),
                    energy(j.energy_kwh, j.cost, j.co2e_kg),
                ));
            }
        }
        Table::UnixUsers => {
            lines.push("unix_user,user,gpu_hours_used,hours_on_card,mean_sm_pct,energy_kwh".into());
            for u in &report.unix_users {
                lines.push(format!(
                    "{},{},{},{},{},{}",
                    csv_field(&u.unix_user),
                    csv_field(u.username.as_deref().unwrap_or("")),
                    num(u.gpu_hours_used),
                    num(u.hours_on_card),
                    opt(u.mean_sm_pct),
                    num(u.energy_kwh),
                ));
            }
        }
    }
    lines.join("\r\n") + "\r\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::booking::GpuRef;

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    fn booking(
        id: i64,
        user: i64,
        name: &str,
        cards: usize,
        from_h: i64,
        to_h: i64,
        state: BookingState,
    ) -> Booking {
        Booking {
            id,
            user_id: user,
            username: name.into(),
            display_name: name.into(),
            gpus: (0..cards)
                .map(|i| GpuRef {
                    node: "n".into(),
                    uuid: format!("GPU-{i}"),
                })
                .collect(),
            start: at(from_h),
            end: at(to_h),
            state,
            created_at: at(-100),
            ..Default::default()
        }
    }

    #[test]
    fn gpu_hours_are_clipped_to_the_period_summed_per_user_and_group() {
        let bookings = [
            // Two cards for 4 h, of which 3 h fall in the period [0, 10).
            booking(1, 1, "ada", 2, -1, 3, BookingState::Ended),
            // One card for 2 h, all inside.
            booking(2, 1, "ada", 1, 5, 7, BookingState::Ended),
            // Cancelled: counts for nothing.
            booking(3, 2, "bo", 4, 1, 2, BookingState::Cancelled),
            // Four cards from 8 h to 12 h: 2 h inside.
            booking(4, 2, "bo", 4, 8, 12, BookingState::Active),
        ];
        let card_use: HashMap<i64, CardUse> = [
            (
                1,
                CardUse {
                    used_hours: 1.5,
                    idle_hours: 2.0,
                    avg_utilization_pct: Some(25.0),
                    peak_memory_mib: Some(1024),
                },
            ),
            (
                4,
                CardUse {
                    used_hours: 6.0,
                    idle_hours: 0.0,
                    avg_utilization_pct: Some(75.0),
                    peak_memory_mib: Some(2048),
                },
            ),
        ]
        .into();
        let violations = [(2, 3)].into();
        let jobs = [(1, 4), (3, 1)].into();
        let usernames = [(1, "ada".into()), (2, "bo".into()), (3, "cy".into())].into();
        let memberships = [
            (1, "vision".to_string()),
            (2, "vision".to_string()),
            (2, "nlp".to_string()),
        ];
        let report = build(&Inputs {
            from: at(0),
            to: at(10),
            idle_threshold_pct: 5,
            bookings: &bookings,
            card_use: &card_use,
            violations: &violations,
            jobs: &jobs,
            usernames: &usernames,
            memberships: &memberships,
            only_user: None,
            energy: &HashMap::new(),
            processes: &[],
            unix_accounts: &HashMap::new(),
            energy_price_per_kwh: None,
            carbon_g_per_kwh: None,
            cards: &lanes_types::CardIndex::new([
                ("n".into(), "GPU-0".into(), 0),
                ("n".into(), "GPU-1".into(), 1),
            ]),
        });
        assert_eq!(
            report.bookings[0].cards,
            ["GPU 0 · n", "GPU 1 · n"],
            "a booking's cards are named by index and node"
        );
        let ada = &report.users[0];
        // 2 cards × 3 h + 1 card × 2 h.
        assert_eq!((ada.name.as_str(), ada.gpu_hours_booked), ("ada", 8.0));
        assert_eq!(
            (ada.gpu_hours_used, ada.idle_booked_hours, ada.jobs),
            (1.5, 2.0, 4)
        );
        let bo = &report.users[1];
        assert_eq!(
            (bo.gpu_hours_booked, bo.gpu_hours_used, bo.violations),
            (8.0, 6.0, 3)
        );
        // cy ran a job without booking anything in the period.
        assert_eq!(
            (report.users[2].name.as_str(), report.users[2].jobs),
            ("cy", 1)
        );
        let group = |n: &str| report.groups.iter().find(|g| g.name == n).unwrap();
        assert_eq!(group("vision").gpu_hours_booked, 16.0);
        assert_eq!(group("nlp").gpu_hours_booked, 8.0);
        assert_eq!(report.bookings.len(), 3);
        assert_eq!(report.bookings[2].peak_memory_bytes, Some(2048 << 20));
    }

    #[test]
    fn csv_quotes_what_needs_it_and_defuses_formulas() {
        let report = UsageReport {
            from: at(0),
            to: at(1),
            idle_threshold_pct: 5,
            users: vec![UsageRow {
                name: "=HYPERLINK(\"x\")".into(),
                gpu_hours_booked: 1.0,
                gpu_hours_used: 0.5,
                gpu_hours_used_card_level: 0.5,
                idle_booked_hours: 0.25,
                violations: 2,
                jobs: 3,
                energy_kwh: 1.25,
                cost: Some(0.375),
                co2e_kg: None,
            }],
            groups: vec![],
            bookings: vec![],
            jobs: vec![],
            unix_users: vec![],
            per_process: false,
            energy_price_per_kwh: Some(0.3),
            carbon_g_per_kwh: None,
        };
        assert_eq!(
            csv(&report, Table::Users),
            "user,gpu_hours_booked,gpu_hours_used,gpu_hours_used_card_level,idle_booked_hours,violations,jobs,energy_kwh,cost,co2e_kg\r\n\
             \"'=HYPERLINK(\"\"x\"\")\",1.000,0.500,0.500,0.250,2,3,1.250,0.375,\r\n"
        );
        assert_eq!(
            csv(&report, Table::Groups),
            "group,gpu_hours_booked,gpu_hours_used,gpu_hours_used_card_level,idle_booked_hours,violations,jobs,energy_kwh,cost,co2e_kg\r\n"
        );
        assert_eq!(
            csv(&report, Table::Jobs),
            "job_id,user,gpu_hours_used,mean_sm_pct,energy_kwh,cost,co2e_kg\r\n"
        );
    }

    #[test]
    fn a_shared_card_s_hours_and_energy_split_by_sm_share_not_by_who_booked_it() {
        // ada booked one card for 2 h; bo ran on it too (a job of his), carol's account ran
        // an unbooked process. Per-process samples split 1.5 of its 1.6 used hours and 2 of
        // its 2.4 kWh; the rest (idle draw, unmeasured spells) is ada's, as card-level figures.
        let bookings = [booking(1, 1, "ada", 1, 0, 2, BookingState::Ended)];
        let card_use: HashMap<i64, CardUse> = [(
            1,
            CardUse {
                used_hours: 1.6,
                idle_hours: 0.2,
                avg_utilization_pct: Some(80.0),
                peak_memory_mib: Some(1),
            },
        )]
        .into();
        let kwh = |k: f64| k * MJ_PER_KWH;
        let energy: HashMap<i64, BookingEnergy> = [(
            1,
            BookingEnergy {
                energy_mj: kwh(2.4),
                attributed_hours: 1.5,
                attributed_mj: kwh(2.0),
            },
        )]
        .into();
        let total = |unix: &str, job: i64, job_user: Option<i64>, used: f64, e: f64| ProcessTotal {
            unix_user: unix.into(),
            job_id: job,
            job_user_id: job_user,
            used_hours: used,
            hours_on_card: 2.0,
            mean_sm_pct: Some(used / 2.0 * 100.0),
            energy_mj: kwh(e),
        };
        // ada 40 %, bo 60 % of the measured load (0.6 h and 0.9 h); carol's account is
        // nobody's in Lanes.
        let processes = [
            total("ada", 0, None, 0.6, 0.8),
            total("bob", 12, Some(2), 0.9, 1.2),
            total("carol", 0, None, 0.25, 0.5),
        ];
        let usernames = [(1, "ada".into()), (2, "bo".into())].into();
        let unix_accounts = [("ada".to_string(), 1)].into();
        let inputs = Inputs {
            from: at(0),
            to: at(10),
            idle_threshold_pct: 5,
            bookings: &bookings,
            card_use: &card_use,
            violations: &HashMap::new(),
            jobs: &HashMap::new(),
            usernames: &usernames,
            memberships: &[(1, "vision".into()), (2, "vision".into())],
            only_user: None,
            energy: &energy,
            processes: &processes,
            unix_accounts: &unix_accounts,
            energy_price_per_kwh: Some(0.25),
            carbon_g_per_kwh: Some(400.0),
            cards: &lanes_types::CardIndex::default(),
        };
        let report = build(&inputs);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let ada = &report.users[0];
        let bo = &report.users[1];
        assert_eq!((ada.name.as_str(), bo.name.as_str()), ("ada", "bo"));
        // ada: her 0.6 h plus the 0.1 h nobody's samples covered.
        assert!(close(ada.gpu_hours_used, 0.7), "{ada:?}");
        assert!(close(ada.gpu_hours_used_card_level, 0.1));
        assert!(close(bo.gpu_hours_used, 0.9) && close(bo.gpu_hours_used_card_level, 0.0));
        assert_eq!(bo.gpu_hours_booked, 0.0);
        // Energy: ada 0.8 + 0.4 unattributed; bo 1.2; priced at 0.25 a kWh and 400 g/kWh.
        assert!(close(ada.energy_kwh, 1.2) && close(bo.energy_kwh, 1.2));
        assert!(close(bo.cost.unwrap(), 0.3) && close(bo.co2e_kg.unwrap(), 0.48));
        assert!(close(report.bookings[0].energy_kwh, 2.4));
        assert!(close(report.groups[0].energy_kwh, 2.4));
        assert_eq!(report.jobs.len(), 1);
        assert_eq!(
            (report.jobs[0].job_id, report.jobs[0].username.as_str()),
            (12, "bo")
        );
        assert!(close(report.jobs[0].energy_kwh, 1.2));
        let carol = report
            .unix_users
            .iter()
            .find(|u| u.unix_user == "carol")
            .unwrap();
        assert_eq!(carol.username, None);
        assert!(close(carol.gpu_hours_used, 0.25));
        assert!(report.per_process);

        // ada's own report: her row, her account; bo's job is not hers.
        let mine = build(&Inputs {
            only_user: Some(1),
            ..inputs
        });
        assert_eq!(mine.users.len(), 1);
        assert!(mine.jobs.is_empty());
        assert_eq!(mine.unix_users.len(), 1);
        assert_eq!(mine.unix_users[0].unix_user, "ada");
    }
}
