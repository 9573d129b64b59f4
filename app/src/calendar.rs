//! The geometry and words of the booking calendar, as plain functions: which instants a view
//! shows, where a booking's bar goes, which slot a dragged selection means, what a booking
//! does to a quota, and each user's color. The page only wires these to the DOM.

use crate::components::format::dated;
use chrono::{DateTime, Duration, FixedOffset, NaiveDate, TimeZone, Utc};
use lanes_types::booking::{Quota, QuotaUse};

/// What the calendar shows: `cells` columns of `cell` each, from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub start: DateTime<Utc>,
    pub cell: Duration,
    pub cells: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    Day,
    Week,
    /// The 24 hours from now's hour: late in the evening a day view has one bookable column.
    Next24,
}

impl View {
    /// The day or week (from Monday) containing `date`, in the viewer's `offset`: one-hour
    /// cells for a day, three-hour cells for a week.
    pub fn of(span: Span, date: NaiveDate, offset: FixedOffset) -> Self {
        use chrono::Datelike;
        let first = match span {
            Span::Day | Span::Next24 => date,
            Span::Week => date - Duration::days(date.weekday().num_days_from_monday() as i64),
        };
        let midnight = offset
            .from_local_datetime(&first.and_hms_opt(0, 0, 0).unwrap_or_default())
            .single()
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        match span {
            Span::Day | Span::Next24 => View {
                start: midnight,
                cell: Duration::hours(1),
                cells: 24,
            },
            Span::Week => View {
                start: midnight,
                cell: Duration::hours(3),
                cells: 56,
            },
        }
    }

    /// The 24 one-hour cells from the start of the viewer's hour holding `now`.
    pub fn next_24_hours(now: DateTime<Utc>, offset: FixedOffset) -> Self {
        use chrono::Timelike;
        let local = now.with_timezone(&offset);
        let hour = local
            - Duration::seconds(i64::from(local.minute() * 60 + local.second()))
            - Duration::nanoseconds(i64::from(local.nanosecond()));
        View {
            start: hour.with_timezone(&Utc),
            cell: Duration::hours(1),
            cells: 24,
        }
    }

    pub fn end(&self) -> DateTime<Utc> {
        self.start + self.cell * self.cells as i32
    }

    pub fn cell_start(&self, i: usize) -> DateTime<Utc> {
        self.start + self.cell * i as i32
    }

    /// Where `[start, end)` lies across the view, as percentages of its width (left, width),
    /// clipped to the view; `None` when it is outside.
    pub fn bar(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> Option<(f64, f64)> {
        let (from, to) = (start.max(self.start), end.min(self.end()));
        if to <= from {
            return None;
        }
        let total = (self.end() - self.start).num_milliseconds() as f64;
        let left = (from - self.start).num_milliseconds() as f64 / total * 100.0;
        let width = (to - from).num_milliseconds() as f64 / total * 100.0;
        Some((left, width))
    }

    /// The slot a drag from cell `a` to cell `b` (either order, inclusive) selects.
    pub fn selection(&self, a: usize, b: usize) -> (DateTime<Utc>, DateTime<Utc>) {
        let (first, last) = (a.min(b), a.max(b).min(self.cells.saturating_sub(1)));
        (self.cell_start(first), self.cell_start(last + 1))
    }
}

/// A steady color for a user, from their name: the same person is the same color everywhere.
pub fn user_color(username: &str) -> String {
    let hash = username.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    format!("hsl({} 60% 28%)", hash % 360)
}

/// A booking's note as the page says it: a queue booking's (which the scheduler wrote) in the
/// page's language, a person's as they wrote it.
pub fn note_of(b: &lanes_types::booking::Booking) -> String {
    match b
        .queue_job
        .and_then(|job| lanes_types::queue::queue_job_name(&b.note, job).map(|name| (job, name)))
    {
        Some((job, name)) => tr!(calendar.queue_job_note, job, name = name.to_string()),
        None => b.note.clone(),
    }
}

/// "Tue 14:00" in the viewer's offset.
pub fn short_time(t: DateTime<Utc>, offset: FixedOffset) -> String {
    dated(t.with_timezone(&offset), tr!(date.weekday_time))
}

/// "Tue 1 Dec 14:00" in the viewer's offset.
pub fn long_time(t: DateTime<Utc>, offset: FixedOffset) -> String {
    dated(t.with_timezone(&offset), tr!(date.day_month_time))
}

/// What a booking of `gpus` cards for `hours` does to the booker's quota, in words: the
/// GPU-hours it uses against the weekly limit, and the cards against the limit at any instant.
pub fn quota_impact(gpus: u32, hours: f64, usage: Option<&QuotaUse>) -> String {
    let gpu_hours = f64::from(gpus) * hours;
    let Some(usage) = usage else {
        return tr!(calendar.gpu_hours, hours = format!("{gpu_hours:.1}"));
    };
    let Quota {
        max_gpus,
        gpu_hours_per_week,
        ..
    } = &usage.limits;
    let mut parts = Vec::new();
    match gpu_hours_per_week {
        Some(limit) => parts.push(tr!(
            calendar.uses_of_weekly,
            hours = format!("{gpu_hours:.1}"),
            limit,
            booked = format!("{:.1}", usage.gpu_hours_week)
        )),
        None => parts.push(tr!(
            calendar.uses_no_limit,
            hours = format!("{gpu_hours:.1}")
        )),
    }
    if let Some(limit) = max_gpus {
        parts.push(tr!(calendar.cards_of_limit, gpus, limit));
    }
    parts.join(" ")
}

/// Cards as the calendar rows name them ("GPU 0, GPU 1"); the UUID of a card not among them.
pub fn card_list(
    cards: &[lanes_types::booking::GpuRef],
    rows: Option<&Vec<lanes_types::GpuState>>,
) -> String {
    cards
        .iter()
        .map(|g| {
            rows.and_then(|l| {
                l.iter()
                    .find(|s| s.info.node == g.node && s.info.uuid == g.uuid)
            })
            .map_or_else(|| g.uuid.clone(), |s| format!("GPU {}", s.info.index))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_day_starts_at_local_midnight_and_a_week_on_monday() {
        let berlin = FixedOffset::east_opt(3600).unwrap();
        let date = NaiveDate::from_ymd_opt(2026, 12, 3).unwrap(); // a Thursday
        let day = View::of(Span::Day, date, berlin);
        assert_eq!(day.start, utc("2026-12-02T23:00:00Z"));
        assert_eq!(day.end(), utc("2026-12-03T23:00:00Z"));
        let week = View::of(Span::Week, date, berlin);
        assert_eq!(week.start, utc("2026-11-29T23:00:00Z"));
        assert_eq!(week.end(), utc("2026-12-06T23:00:00Z"));
        assert_eq!(week.cells, 56);
    }

    #[test]
    fn the_next_24_hours_start_at_the_viewers_hour() {
        // India's half-hour offset: the view starts at the viewer's hour, not UTC's.
        let kolkata = FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
        let at = utc("2026-12-03T16:10:42Z"); // 21:40:42 in Kolkata
        let next = View::next_24_hours(at, kolkata);
        assert_eq!(next.start, utc("2026-12-03T15:30:00Z"));
        assert_eq!((next.cells, next.end()), (24, utc("2026-12-04T15:30:00Z")));
    }

    #[test]
    fn bars_are_placed_in_percent_and_clipped_to_the_view() {
        let view = View::of(
            Span::Day,
            NaiveDate::from_ymd_opt(2026, 12, 3).unwrap(),
            FixedOffset::east_opt(0).unwrap(),
        );
        assert_eq!(
            view.bar(utc("2026-12-03T06:00:00Z"), utc("2026-12-03T12:00:00Z")),
            Some((25.0, 25.0))
        );
        assert_eq!(
            view.bar(utc("2026-12-02T20:00:00Z"), utc("2026-12-03T06:00:00Z")),
            Some((0.0, 25.0))
        );
        assert_eq!(
            view.bar(utc("2026-12-04T00:00:00Z"), utc("2026-12-04T06:00:00Z")),
            None
        );
    }

    #[test]
    fn a_drag_selects_whole_cells_in_either_direction() {
        let view = View::of(
            Span::Day,
            NaiveDate::from_ymd_opt(2026, 12, 3).unwrap(),
            FixedOffset::east_opt(0).unwrap(),
        );
        let expected = (utc("2026-12-03T09:00:00Z"), utc("2026-12-03T12:00:00Z"));
        assert_eq!(view.selection(9, 11), expected);
        assert_eq!(view.selection(11, 9), expected);
        assert_eq!(view.selection(23, 99).1, view.end());
    }

    #[test]
    fn quota_impact_says_what_the_booking_uses_of_the_limits() {
        let usage = QuotaUse {
            kind: lanes_types::booking::QuotaHolder::User,
            name: "ada".into(),
            limits: Quota {
                max_gpus: Some(4),
                gpu_hours_per_week: Some(40.0),
                ..Quota::default()
            },
            gpus_now: 0,
            gpu_hours_week: 8.0,
            upcoming: 1,
        };
        assert_eq!(
            quota_impact(2, 8.0, Some(&usage)),
            "Uses 16.0 of your 40 GPU-hours a week (8.0 already booked in the next 7 days). 2 of the 4 cards you may hold at once."
        );
        assert_eq!(quota_impact(1, 1.5, None), "1.5 GPU-hours.");
    }

    #[test]
    fn users_keep_one_color() {
        assert_eq!(user_color("ada"), user_color("ada"));
        assert_ne!(user_color("ada"), user_color("bob"));
    }
}
