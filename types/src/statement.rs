//! Monthly statements: who used how much of what the lab paid for, per project, group and
//! member, for a calendar month in a time zone (`GET /api/v1/statements`, admins), and a
//! member's own month against their quota and, as far as the admins let them see, others'
//! (`GET /api/v1/me/usage`).

use crate::booking::QuotaUse;
use crate::report::JobUsage;
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// What members see of others' usage on their usage page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageVisibility {
    /// Their own only (the default: the most private).
    #[default]
    Own,
    /// Also their groups' totals and the rows of their groups' members.
    Group,
    /// Also every group and every member of the lab.
    Lab,
}

impl UsageVisibility {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageVisibility::Own => "own",
            UsageVisibility::Group => "group",
            UsageVisibility::Lab => "lab",
        }
    }
}

/// A project bookings may carry, for statements (defined by admins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// 1 to 64 characters: letters, digits, `-`, `_`, `.`, spaces.
    pub name: String,
    #[serde(default)]
    pub description: String,
}

impl Project {
    /// The first thing wrong with `name` as a project's name, in words.
    pub fn name_problem(name: &str) -> Option<String> {
        let ok = !name.trim().is_empty()
            && name.trim() == name
            && name.chars().count() <= 64
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '));
        (!ok).then(|| {
            format!(
                "{name:?} is not a project name: 1 to 64 letters, digits, spaces, '-', '_' or '.'"
            )
        })
    }
}

/// The projects a member may book for, and what their bookings carry when they name none
/// (`GET /api/v1/projects`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectChoices {
    pub projects: Vec<Project>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// The row name of bookings that carry no project.
pub const NO_PROJECT: &str = "(no project)";

/// One row of a statement: a project's, a group's, a member's, or the lab's total.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatementRow {
    pub name: String,
    /// Booked cards × hours inside the month.
    pub gpu_hours_booked: f64,
    /// Card-hours their processes kept the cards busy.
    pub gpu_hours_used: f64,
    /// The share of booked GPU-hours not used (0 to 1); none when nothing was booked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_share: Option<f64>,
    pub energy_kwh: f64,
    /// At the admins' rates: booked GPU-hours × the GPU-hour price plus kWh × the energy
    /// price; none when neither is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_kg: Option<f64>,
    pub jobs: i64,
}

/// The admins' rates a statement is priced at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_price_per_kwh: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carbon_g_per_kwh: Option<f64>,
}

impl Rates {
    /// (cost, CO2e kg) of `booked` GPU-hours that drew `kwh`.
    pub fn price(&self, booked: f64, kwh: f64) -> (Option<f64>, Option<f64>) {
        let cost = match (self.gpu_hour_price, self.energy_price_per_kwh) {
            (None, None) => None,
            (g, e) => Some(g.unwrap_or(0.0) * booked + e.unwrap_or(0.0) * kwh),
        };
        (cost, self.carbon_g_per_kwh.map(|g| g * kwh / 1000.0))
    }

    /// A row of these figures, priced and with its idle share.
    pub fn row(&self, name: &str, booked: f64, used: f64, kwh: f64, jobs: i64) -> StatementRow {
        let (cost, co2e_kg) = self.price(booked, kwh);
        StatementRow {
            name: name.to_string(),
            gpu_hours_booked: booked,
            gpu_hours_used: used,
            idle_share: (booked > 0.0).then(|| ((booked - used) / booked).clamp(0.0, 1.0)),
            energy_kwh: kwh,
            cost,
            co2e_kg,
            jobs,
        }
    }
}

/// A month's statement (`GET /api/v1/statements?month=2026-11`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// `YYYY-MM`.
    pub month: String,
    /// The IANA zone the month's days are counted in.
    pub time_zone: String,
    /// The month's first instant and the next month's, in that zone.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub rates: Rates,
    pub total: StatementRow,
    pub projects: Vec<StatementRow>,
    pub groups: Vec<StatementRow>,
    pub users: Vec<StatementRow>,
    /// The month's ten biggest jobs by GPU-hours used.
    pub top_jobs: Vec<JobUsage>,
}

/// Query of the statement and usage pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatementQuery {
    /// `YYYY-MM`; default the month in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<String>,
    /// IANA zone; default the lab's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// For the CSV: `projects` (default), `groups`, `users` or `jobs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// A member's month (`GET /api/v1/me/usage`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MyUsage {
    pub month: String,
    pub time_zone: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub rates: Rates,
    /// What the admins let members see of others.
    pub visibility: UsageVisibility,
    pub me: StatementRow,
    /// This week's booked GPU-hours against the weekly quota.
    pub quota: QuotaUse,
    /// The member's groups.
    pub my_groups: Vec<String>,
    /// Groups' totals: the member's groups (`group`) or every group (`lab`); none for `own`.
    pub groups: Vec<StatementRow>,
    /// Others' rows: their groups' members (`group`) or everyone (`lab`); none for `own`.
    pub users: Vec<StatementRow>,
    /// The member's own ten biggest jobs of the month.
    pub top_jobs: Vec<JobUsage>,
}

/// `YYYY-MM` → (year, month), or why not.
pub fn parse_month(text: &str) -> Result<(i32, u32), String> {
    let bad = || format!("{text:?} is not a month: write it as YYYY-MM, e.g. 2026-11");
    let (y, m) = text.split_once('-').ok_or_else(bad)?;
    // Digits only: `parse` also takes a sign (`2026-+1`).
    let digits = |part: &str, n: usize| part.len() == n && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(y, 4) || !digits(m, 2) {
        return Err(bad());
    }
    let (y, m): (i32, u32) = (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if !(2000..=9999).contains(&y) || !(1..=12).contains(&m) || text.len() != 7 {
        return Err(bad());
    }
    Ok((y, m))
}

/// The first instant of `year`-`month` in `tz`, and of the month after: a day starts at local
/// midnight, or at the first instant after it where a change of clocks skips midnight.
pub fn month_bounds<Z: TimeZone>(year: i32, month: u32, tz: &Z) -> (DateTime<Utc>, DateTime<Utc>) {
    let start = |y: i32, m: u32| {
        let day = NaiveDate::from_ymd_opt(y, m, 1).expect("a valid month");
        let mut local = day.and_hms_opt(0, 0, 0).expect("midnight");
        // A zone whose clocks jump over midnight: the day starts when they land.
        for _ in 0..48 {
            if let Some(t) = tz.from_local_datetime(&local).earliest() {
                return t.with_timezone(&Utc);
            }
            local += chrono::Duration::minutes(30);
        }
        Utc.from_utc_datetime(&local)
    };
    let (ny, nm) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (start(year, month), start(ny, nm))
}

/// `YYYY-MM` of `t` in `tz`.
pub fn month_of<Z: TimeZone>(t: DateTime<Utc>, tz: &Z) -> String {
    let local = t.with_timezone(tz);
    format!("{:04}-{:02}", local.year(), local.month())
}

/// `YYYY-MM` of the month before `year`-`month`.
pub fn month_before(year: i32, month: u32) -> String {
    if month == 1 {
        format!("{:04}-12", year - 1)
    } else {
        format!("{year:04}-{:02}", month - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_parse_strictly() {
        assert_eq!(parse_month("2026-11"), Ok((2026, 11)));
        for bad in [
            "2026-13", "2026-1", "26-11", "2026/11", "november", "2026-00", "", "2026-+1",
            "+026-11", "2026--1", " 2026-1",
        ] {
            assert!(parse_month(bad).is_err(), "{bad}");
        }
        assert_eq!(month_before(2027, 1), "2026-12");
        assert_eq!(month_before(2027, 4), "2027-03");
    }

    #[test]
    fn a_month_starts_at_local_midnight_and_its_length_follows_the_clock_changes() {
        let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
        let (from, to) = month_bounds(2027, 3, &berlin);
        assert_eq!(from.to_rfc3339(), "2027-02-28T23:00:00+00:00");
        // April starts in summer time: March has 31 days less one hour.
        assert_eq!(to.to_rfc3339(), "2027-03-31T22:00:00+00:00");
        assert_eq!((to - from).num_hours(), 31 * 24 - 1);
        let (from, to) = month_bounds(2026, 10, &berlin);
        assert_eq!((to - from).num_hours(), 31 * 24 + 1);
        assert_eq!(month_of(to, &berlin), "2026-11");
        assert_eq!(
            month_of(to - chrono::Duration::seconds(1), &berlin),
            "2026-10"
        );
        // A zone whose clocks once jumped over midnight (Santiago, 2022-09-11 00:00 → 01:00).
        let santiago: chrono_tz::Tz = "America/Santiago".parse().unwrap();
        let (_, to) = month_bounds(2022, 8, &santiago);
        assert!(to < month_bounds(2022, 9, &santiago).1);
    }

    #[test]
    fn rows_are_priced_at_both_rates_and_say_their_idle_share() {
        let rates = Rates {
            gpu_hour_price: Some(2.0),
            energy_price_per_kwh: Some(0.5),
            carbon_g_per_kwh: Some(400.0),
        };
        let row = rates.row("x", 10.0, 4.0, 3.0, 2);
        assert_eq!(row.cost, Some(21.5));
        assert_eq!(row.co2e_kg, Some(1.2));
        assert_eq!(row.idle_share, Some(0.6));
        assert_eq!(Rates::default().row("x", 0.0, 0.0, 0.0, 0).idle_share, None);
        assert_eq!(Rates::default().row("x", 1.0, 0.0, 0.0, 0).cost, None);
        assert!(Project::name_problem("vision-2027").is_none());
        assert!(Project::name_problem(" x").is_some());
        assert!(Project::name_problem("a<b").is_some());
    }
}
