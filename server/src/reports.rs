//! Usage reports (pure): from the bookings of a period, what the history says about their cards,
//! and counts of violations and jobs, the rows per user, per group and per booking; and the CSV
//! form of each table.

use crate::store::CardUse;
use chrono::{DateTime, Utc};
use lanes_types::booking::{Booking, BookingState};
use lanes_types::report::{BookingUsage, UsageReport, UsageRow};
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
        idle_booked_hours: 0.0,
        violations: 0,
        jobs: 0,
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
        let user = per_user
            .entry(b.user_id)
            .or_insert_with(|| row(&b.username));
        user.gpu_hours_booked += booked;
        user.gpu_hours_used += used.used_hours;
        user.idle_booked_hours += used.idle_hours;
        bookings.push(BookingUsage {
            booking_id: b.id,
            username: b.username.clone(),
            gpus: b.gpus.len(),
            start: b.start,
            end: b.end,
            gpu_hours_booked: booked,
            gpu_hours_used: used.used_hours,
            avg_utilization_pct: used.avg_utilization_pct,
            peak_memory_bytes: used.peak_memory_mib.map(|m| (m.max(0) as u64) << 20),
        });
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
    }
    let mut users: Vec<UsageRow> = per_user.into_values().collect();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    UsageReport {
        from: inputs.from,
        to: inputs.to,
        idle_threshold_pct: inputs.idle_threshold_pct,
        users,
        groups: per_group.into_values().collect(),
        bookings,
    }
}

/// Which table of a report a CSV holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Users,
    Groups,
    Bookings,
}

impl std::str::FromStr for Table {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "users" => Ok(Table::Users),
            "groups" => Ok(Table::Groups),
            "bookings" => Ok(Table::Bookings),
            other => Err(format!(
                "unknown table {other:?}: expected users, groups or bookings"
            )),
        }
    }
}

/// A CSV field: quoted when it holds a comma, a quote or a line break; a leading `=`, `+`, `-`
/// or `@` is defused so that spreadsheets do not run it as a formula.
fn field(text: &str) -> String {
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

/// One table of `report` as CSV (RFC 4180, CRLF line ends, a header row).
pub fn csv(report: &UsageReport, table: Table) -> String {
    let mut lines: Vec<String> = Vec::new();
    match table {
        Table::Users | Table::Groups => {
            let who = if table == Table::Users {
                "user"
            } else {
                "group"
            };
            lines.push(format!(
                "{who},gpu_hours_booked,gpu_hours_used,idle_booked_hours,violations,jobs"
            ));
            let rows = if table == Table::Users {
                &report.users
            } else {
                &report.groups
            };
            for r in rows {
                lines.push(format!(
                    "{},{},{},{},{},{}",
                    field(&r.name),
                    num(r.gpu_hours_booked),
                    num(r.gpu_hours_used),
                    num(r.idle_booked_hours),
                    r.violations,
                    r.jobs
                ));
            }
        }
        Table::Bookings => {
            lines.push(
                "booking_id,user,gpus,start,end,gpu_hours_booked,gpu_hours_used,avg_utilization_pct,peak_memory_bytes"
                    .into(),
            );
            for b in &report.bookings {
                lines.push(format!(
                    "{},{},{},{},{},{},{},{},{}",
                    b.booking_id,
                    field(&b.username),
                    b.gpus,
                    b.start.to_rfc3339(),
                    b.end.to_rfc3339(),
                    num(b.gpu_hours_booked),
                    num(b.gpu_hours_used),
                    b.avg_utilization_pct.map(num).unwrap_or_default(),
                    b.peak_memory_bytes
                        .map(|m| m.to_string())
                        .unwrap_or_default()
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
            note: String::new(),
            state,
            created_at: at(-100),
            idle_since: None,
            queue_job: None,
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
        });
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
                idle_booked_hours: 0.25,
                violations: 2,
                jobs: 3,
            }],
            groups: vec![],
            bookings: vec![],
        };
        assert_eq!(
            csv(&report, Table::Users),
            "user,gpu_hours_booked,gpu_hours_used,idle_booked_hours,violations,jobs\r\n\
             \"'=HYPERLINK(\"\"x\"\")\",1.000,0.500,0.250,2,3\r\n"
        );
        assert_eq!(
            csv(&report, Table::Groups),
            "group,gpu_hours_booked,gpu_hours_used,idle_booked_hours,violations,jobs\r\n"
        );
    }
}
