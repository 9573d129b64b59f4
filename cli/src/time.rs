//! Moments as people type them at a prompt: `now`, `14:00` (the next 14:00), `tomorrow 9:00`,
//! `2026-12-02 14:00`, `+2h`, or RFC 3339; all in the viewer's zone unless the text names one.

use chrono::{DateTime, Duration, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

pub fn parse_when(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a time (examples: now, 14:00, tomorrow 9:00, 2026-12-02 14:00, +2h)"
        )
    };
    if text.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rest) = text.strip_prefix('+') {
        return lanes_types::units::parse_duration(rest).map(|d| now + d);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let local_now = now.with_timezone(&Local);
    let local = |naive: NaiveDateTime| {
        Local
            .from_local_datetime(&naive)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
            .ok_or_else(bad)
    };
    let clock = |s: &str| {
        NaiveTime::parse_from_str(s, "%H:%M")
            .or_else(|_| NaiveTime::parse_from_str(s, "%H:%M:%S"))
            .ok()
    };
    if let Some(rest) = text.strip_prefix("tomorrow") {
        let time = clock(rest.trim()).ok_or_else(bad)?;
        let day = local_now.date_naive() + Duration::days(1);
        return local(day.and_time(time));
    }
    if let Some(time) = clock(text) {
        // The next such time: today's if it is still ahead, else tomorrow's.
        let today = local(local_now.date_naive().and_time(time))?;
        return if today + Duration::minutes(1) >= now {
            Ok(today)
        } else {
            local((local_now.date_naive() + Duration::days(1)).and_time(time))
        };
    }
    for format in ["%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
            return local(naive);
        }
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return local(day.and_time(NaiveTime::MIN));
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_time_is_the_next_one_and_offsets_count_from_now() {
        let now = Local
            .with_ymd_and_hms(2026, 12, 1, 15, 30, 0)
            .unwrap()
            .with_timezone(&Utc);
        let at = |s| parse_when(s, now).unwrap().with_timezone(&Local);
        assert_eq!(at("16:00").format("%d %H:%M").to_string(), "01 16:00");
        assert_eq!(at("09:00").format("%d %H:%M").to_string(), "02 09:00");
        assert_eq!(
            at("tomorrow 9:00").format("%d %H:%M").to_string(),
            "02 09:00"
        );
        assert_eq!(parse_when("+2h", now).unwrap(), now + Duration::hours(2));
        assert_eq!(parse_when("now", now).unwrap(), now);
        assert_eq!(
            parse_when("2026-12-03T10:00:00Z", now)
                .unwrap()
                .to_rfc3339(),
            "2026-12-03T10:00:00+00:00"
        );
        assert!(parse_when("teatime", now).unwrap_err().contains("examples"));
    }
}
