//! Monthly statements: the usage report of a calendar month (its days counted in a time zone,
//! so a month is 743 or 745 hours where the clocks change) per project, group and member, priced
//! at the admins' rates; a member's own month beside their quota and as much of others' as the
//! admins show; and the CSV of each table. `build` and `mine` are pure; `gather` reads.

use crate::reports::{self, Period};
use crate::store::{Store, StoreError};
use lanes_types::booking::QuotaUse;
use lanes_types::report::UsageReport;
use lanes_types::statement::{
    MyUsage, Rates, Statement, StatementRow, UsageVisibility, NO_PROJECT,
};
use std::collections::{BTreeMap, HashMap};

/// The biggest jobs a statement lists.
const TOP_JOBS: usize = 10;

/// A month to state, and how to read it.
pub struct Month {
    /// `YYYY-MM`.
    pub name: String,
    pub time_zone: String,
    pub period: Period,
    pub rates: Rates,
}

/// Reads the month's usage report and per-project job counts.
pub async fn gather(store: &Store, month: &Month) -> Result<Statement, StoreError> {
    let report = reports::gather(store, &month.period).await?;
    let jobs = store
        .reports()
        .project_job_counts(month.period.from, month.period.to)
        .await?;
    Ok(build(month, &report, &jobs))
}

/// The statement of a month's report.
pub fn build(
    month: &Month,
    report: &UsageReport,
    project_jobs: &HashMap<Option<String>, i64>,
) -> Statement {
    let rates = month.rates;
    let row = |r: &lanes_types::report::UsageRow| {
        rates.row(
            &r.name,
            r.gpu_hours_booked,
            r.gpu_hours_used,
            r.energy_kwh,
            r.jobs,
        )
    };
    // Per project: its bookings' booked and used hours and their cards' energy.
    let mut projects: BTreeMap<Option<String>, (f64, f64, f64)> = BTreeMap::new();
    for b in &report.bookings {
        let p = projects.entry(b.project.clone()).or_default();
        p.0 += b.gpu_hours_booked;
        p.1 += b.gpu_hours_used;
        p.2 += b.energy_kwh;
    }
    for project in project_jobs.keys() {
        projects.entry(project.clone()).or_default();
    }
    let projects = projects
        .into_iter()
        .map(|(name, (booked, used, kwh))| {
            let jobs = project_jobs.get(&name).copied().unwrap_or(0);
            rates.row(
                name.as_deref().unwrap_or(NO_PROJECT),
                booked,
                used,
                kwh,
                jobs,
            )
        })
        .collect::<Vec<_>>();
    let users: Vec<StatementRow> = report.users.iter().map(row).collect();
    let groups: Vec<StatementRow> = report.groups.iter().map(row).collect();
    let sum = |f: fn(&StatementRow) -> f64| users.iter().map(f).sum::<f64>();
    let total = rates.row(
        "total",
        sum(|r| r.gpu_hours_booked),
        sum(|r| r.gpu_hours_used),
        sum(|r| r.energy_kwh),
        users.iter().map(|r| r.jobs).sum(),
    );
    let mut top_jobs = report.jobs.clone();
    top_jobs.sort_by(|a, b| b.gpu_hours_used.total_cmp(&a.gpu_hours_used));
    top_jobs.truncate(TOP_JOBS);
    Statement {
        month: month.name.clone(),
        time_zone: month.time_zone.clone(),
        from: month.period.from,
        to: month.period.to,
        rates,
        total,
        projects,
        groups,
        users,
        top_jobs,
    }
}

/// What one member sees of `statement`: their row, their quota, and others' as `visibility`
/// allows (their groups' totals and members for `group`, everyone for `lab`).
pub fn mine(
    statement: &Statement,
    me: &str,
    my_groups: &[String],
    members: &[(String, String)],
    visibility: UsageVisibility,
    quota: QuotaUse,
) -> MyUsage {
    let empty = statement.rates.row(me, 0.0, 0.0, 0.0, 0);
    let my_row = statement
        .users
        .iter()
        .find(|r| r.name == me)
        .cloned()
        .unwrap_or(empty);
    let mine_too = |group: &str| my_groups.iter().any(|g| g == group);
    let (groups, users) = match visibility {
        UsageVisibility::Own => (Vec::new(), Vec::new()),
        UsageVisibility::Group => {
            let peers: Vec<&str> = members
                .iter()
                .filter(|(_, g)| mine_too(g))
                .map(|(u, _)| u.as_str())
                .collect();
            (
                (statement.groups.iter())
                    .filter(|g| mine_too(&g.name))
                    .cloned()
                    .collect(),
                (statement.users.iter())
                    .filter(|u| u.name != me && peers.contains(&u.name.as_str()))
                    .cloned()
                    .collect(),
            )
        }
        UsageVisibility::Lab => (
            statement.groups.clone(),
            (statement.users.iter())
                .filter(|u| u.name != me)
                .cloned()
                .collect(),
        ),
    };
    MyUsage {
        month: statement.month.clone(),
        time_zone: statement.time_zone.clone(),
        from: statement.from,
        to: statement.to,
        rates: statement.rates,
        visibility,
        me: my_row,
        quota,
        my_groups: my_groups.to_vec(),
        groups,
        users,
        top_jobs: (statement.top_jobs.iter())
            .filter(|j| j.username == me)
            .cloned()
            .collect(),
    }
}

/// Which table of a statement a CSV holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Projects,
    Groups,
    Users,
    Jobs,
}

impl std::str::FromStr for Table {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "projects" => Ok(Table::Projects),
            "groups" => Ok(Table::Groups),
            "users" => Ok(Table::Users),
            "jobs" => Ok(Table::Jobs),
            other => Err(format!(
                "unknown table {other:?}: expected projects, groups, users or jobs"
            )),
        }
    }
}

/// One table of `statement` as CSV (RFC 4180, CRLF line ends, a header row; fields a
/// spreadsheet would run as formulas defused).
pub fn csv(statement: &Statement, table: Table) -> String {
    let num = |x: f64| format!("{x:.3}");
    let opt = |x: Option<f64>| x.map(num).unwrap_or_default();
    let mut out = String::new();
    let mut line = |fields: Vec<String>| {
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    };
    let rows = match table {
        Table::Projects => &statement.projects,
        Table::Groups => &statement.groups,
        Table::Users => &statement.users,
        Table::Jobs => {
            line(
                [
                    "month",
                    "job",
                    "member",
                    "gpu_hours_used",
                    "energy_kwh",
                    "cost",
                    "co2e_kg",
                ]
                .map(String::from)
                .to_vec(),
            );
            for j in &statement.top_jobs {
                line(vec![
                    statement.month.clone(),
                    j.job_id.to_string(),
                    reports::csv_field(&j.username),
                    num(j.gpu_hours_used),
                    num(j.energy_kwh),
                    opt(j.cost),
                    opt(j.co2e_kg),
                ]);
            }
            return out;
        }
    };
    let first = match table {
        Table::Projects => "project",
        Table::Groups => "group",
        _ => "member",
    };
    line(
        [
            "month",
            first,
            "gpu_hours_booked",
            "gpu_hours_used",
            "idle_share",
            "energy_kwh",
            "cost",
            "co2e_kg",
            "jobs",
        ]
        .map(String::from)
        .to_vec(),
    );
    for r in rows {
        line(vec![
            statement.month.clone(),
            reports::csv_field(&r.name),
            num(r.gpu_hours_booked),
            num(r.gpu_hours_used),
            opt(r.idle_share),
            num(r.energy_kwh),
            opt(r.cost),
            opt(r.co2e_kg),
            r.jobs.to_string(),
        ]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use lanes_types::report::{BookingUsage, JobUsage, UsageRow};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn usage_row(name: &str, booked: f64, used: f64, kwh: f64, jobs: i64) -> UsageRow {
        UsageRow {
            name: name.into(),
            gpu_hours_booked: booked,
            gpu_hours_used: used,
            gpu_hours_used_card_level: used,
            idle_booked_hours: booked - used,
            violations: 0,
            jobs,
            energy_kwh: kwh,
            cost: None,
            co2e_kg: None,
        }
    }

    fn booking(id: i64, project: Option<&str>, booked: f64, used: f64, kwh: f64) -> BookingUsage {
        BookingUsage {
            booking_id: id,
            project: project.map(str::to_string),
            username: "ada".into(),
            gpus: 1,
            cards: vec![],
            start: at("2027-03-01T00:00:00Z"),
            end: at("2027-03-02T00:00:00Z"),
            gpu_hours_booked: booked,
            gpu_hours_used: used,
            avg_utilization_pct: None,
            peak_memory_bytes: None,
            energy_kwh: kwh,
            cost: None,
            co2e_kg: None,
        }
    }

    fn month() -> Month {
        Month {
            name: "2027-03".into(),
            time_zone: "Europe/Berlin".into(),
            period: Period {
                from: at("2027-02-28T23:00:00Z"),
                to: at("2027-03-31T22:00:00Z"),
                now: at("2027-04-02T00:00:00Z"),
                only_user: None,
                idle_threshold_pct: 5,
                keep_minutes: chrono::Duration::days(2),
                interval_s: 1.0,
                energy_price_per_kwh: Some(0.5),
                carbon_g_per_kwh: Some(400.0),
            },
            rates: Rates {
                gpu_hour_price: Some(2.0),
                energy_price_per_kwh: Some(0.5),
                carbon_g_per_kwh: Some(400.0),
            },
        }
    }

    fn report() -> UsageReport {
        UsageReport {
            from: at("2027-02-28T23:00:00Z"),
            to: at("2027-03-31T22:00:00Z"),
            idle_threshold_pct: 5,
            users: vec![
                usage_row("ada", 10.0, 4.0, 2.0, 3),
                usage_row("bo", 6.0, 6.0, 4.0, 1),
            ],
            groups: vec![
                usage_row("cv", 10.0, 4.0, 2.0, 3),
                usage_row("nlp", 6.0, 6.0, 4.0, 1),
            ],
            bookings: vec![
                booking(1, Some("vision"), 8.0, 3.0, 1.5),
                booking(2, None, 2.0, 1.0, 0.5),
                booking(3, Some("vision"), 6.0, 6.0, 4.0),
            ],
            jobs: (1..=12)
                .map(|i| JobUsage {
                    job_id: i,
                    username: if i % 2 == 0 {
                        "ada".into()
                    } else {
                        "bo".into()
                    },
                    gpu_hours_used: i as f64,
                    mean_sm_pct: None,
                    energy_kwh: 0.0,
                    cost: None,
                    co2e_kg: None,
                })
                .collect(),
            unix_users: vec![],
            per_process: false,
            energy_price_per_kwh: Some(0.5),
            carbon_g_per_kwh: Some(400.0),
        }
    }

    #[test]
    fn projects_sum_their_bookings_and_everything_is_priced_at_both_rates() {
        let jobs = HashMap::from([(Some("vision".to_string()), 3), (None, 1)]);
        let s = build(&month(), &report(), &jobs);
        let vision = s.projects.iter().find(|p| p.name == "vision").unwrap();
        assert_eq!(
            (
                vision.gpu_hours_booked,
                vision.gpu_hours_used,
                vision.energy_kwh
            ),
            (14.0, 9.0, 5.5)
        );
        // 14 GPU-h × 2 + 5.5 kWh × 0.5; 5.5 kWh × 400 g.
        assert_eq!(vision.cost, Some(30.75));
        assert_eq!(vision.co2e_kg, Some(2.2));
        assert_eq!(vision.jobs, 3);
        assert_eq!(vision.idle_share, Some(5.0 / 14.0));
        let none = s.projects.iter().find(|p| p.name == NO_PROJECT).unwrap();
        assert_eq!((none.gpu_hours_booked, none.jobs), (2.0, 1));
        assert_eq!(
            (
                s.total.gpu_hours_booked,
                s.total.gpu_hours_used,
                s.total.jobs
            ),
            (16.0, 10.0, 4)
        );
        assert_eq!(s.top_jobs.len(), 10);
        assert_eq!(s.top_jobs[0].job_id, 12);
    }

    #[test]
    fn a_member_sees_others_only_as_far_as_the_admins_allow() {
        let s = build(&month(), &report(), &HashMap::new());
        let members = vec![
            ("ada".to_string(), "cv".to_string()),
            ("bo".to_string(), "nlp".to_string()),
        ];
        let quota = QuotaUse {
            kind: lanes_types::booking::QuotaHolder::User,
            name: "ada".into(),
            limits: Default::default(),
            gpus_now: 0,
            gpu_hours_week: 0.0,
            upcoming: 0,
        };
        let own = mine(
            &s,
            "ada",
            &["cv".into()],
            &members,
            UsageVisibility::Own,
            quota.clone(),
        );
        assert_eq!(own.me.gpu_hours_booked, 10.0);
        assert!(own.groups.is_empty() && own.users.is_empty());
        assert!(own.top_jobs.iter().all(|j| j.username == "ada"));
        let group = mine(
            &s,
            "ada",
            &["cv".into()],
            &members,
            UsageVisibility::Group,
            quota.clone(),
        );
        assert_eq!(
            group
                .groups
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>(),
            ["cv"]
        );
        assert!(group.users.is_empty(), "bo is in another group");
        let lab = mine(
            &s,
            "ada",
            &["cv".into()],
            &members,
            UsageVisibility::Lab,
            quota,
        );
        assert_eq!(lab.groups.len(), 2);
        assert_eq!(
            lab.users
                .iter()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>(),
            ["bo"]
        );
        // Someone with nothing this month still has a row.
        let newcomer = mine(
            &s,
            "cy",
            &[],
            &members,
            UsageVisibility::Own,
            group.quota.clone(),
        );
        assert_eq!(newcomer.me.gpu_hours_booked, 0.0);
    }

    #[test]
    fn csv_tables_have_their_header_and_defuse_formulas() {
        let mut r = report();
        r.users[0].name = "=cmd|' /C calc'!A0".into();
        let s = build(&month(), &r, &HashMap::new());
        let users = csv(&s, Table::Users);
        assert!(users.starts_with("month,member,gpu_hours_booked,gpu_hours_used,idle_share,energy_kwh,cost,co2e_kg,jobs\r\n"));
        assert!(users.contains("2027-03,'=cmd|' /C calc'!A0,"), "{users}");
        let jobs = csv(&s, Table::Jobs);
        assert_eq!(jobs.lines().count(), 11);
        assert!("bookings".parse::<Table>().is_err());
    }
}
