//! Dates, times and durations in a reader's language and zone: the one place the pages, the
//! server's API messages, mail and link pages write them (weekday and month names come from
//! the translation files).

use crate::i18n::i18n::td_string;
use crate::i18n::Locale;
use chrono::{DateTime, Utc};

/// `t` written with a strftime `pattern` from the translation files, weekday and month names
/// (`%a %A %b %B`) in `locale`, in any zone.
pub fn dated_in<Tz: chrono::TimeZone>(
    t: chrono::DateTime<Tz>,
    pattern: &str,
    locale: crate::i18n::Locale,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    use crate::i18n::i18n::td_string;
    use chrono::Datelike;
    let name = |list: &str, i: usize| list.split(',').nth(i).unwrap_or_default().to_string();
    let (day, month) = (
        t.weekday().num_days_from_monday() as usize,
        t.month0() as usize,
    );
    let pattern = pattern
        .replace("%A", &name(td_string!(locale, date.weekdays_long), day))
        .replace("%a", &name(td_string!(locale, date.weekdays_short), day))
        .replace("%B", &name(td_string!(locale, date.months_long), month))
        .replace("%b", &name(td_string!(locale, date.months_short), month));
    t.format(&pattern).to_string()
}

/// A moment for a reader in `tz`, with its zone and UTC offset named ("Wed 2 Dec 17:00 CET
/// (UTC+01:00)"; in UTC, "Wed 2 Dec 16:00 UTC").
pub fn when_in<Z: chrono::TimeZone>(t: DateTime<Utc>, tz: Z, locale: Locale) -> String
where
    Z::Offset: std::fmt::Display,
{
    let local = t.with_timezone(&tz);
    let offset = local.format("%:z").to_string();
    let name = local.format("%Z").to_string();
    if offset == "+00:00" && name == "UTC" {
        dated_in(local, td_string!(locale, mail.when_utc), locale)
    } else {
        format!(
            "{} (UTC{offset})",
            dated_in(local, td_string!(locale, mail.when_zone), locale)
        )
    }
}

/// How long, as a message says it: seconds under two minutes, minutes under two hours, then
/// hours to a tenth ("90 seconds", "15 min", "2.5 hours").
pub fn duration_in(seconds: i64, locale: Locale) -> String {
    if seconds < 120 {
        td_string!(locale, mail.seconds, n = seconds)
    } else if seconds < 2 * 3600 {
        td_string!(locale, mail.minutes, n = seconds / 60)
    } else {
        td_string!(
            locale,
            mail.hours,
            n = format!("{:.1}", seconds as f64 / 3600.0)
        )
    }
}

/// A span of seconds in the two largest units ("2 h 30 min", "45 s", "3 d 4 h"), in the
/// page's language.
pub fn span(seconds: i64) -> String {
    span_in(seconds, crate::i18n::locale())
}

/// [`span`] in `locale`.
pub fn span_in(seconds: i64, locale: Locale) -> String {
    let s = seconds.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3_600, s % 3_600 / 60);
    match (d, h, m) {
        (0, 0, 0) => td_string!(locale, span.s, n = s),
        (0, 0, m) => td_string!(locale, span.min, n = m),
        (0, h, 0) => td_string!(locale, span.h, n = h),
        (0, h, m) => td_string!(locale, span.h_min, h, m),
        (d, 0, _) => td_string!(locale, span.d, n = d),
        (d, h, _) => td_string!(locale, span.d_h, d, h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_use_their_two_largest_units() {
        assert_eq!(span(45), "45 s");
        assert_eq!(span(600), "10 min");
        assert_eq!(span(9_000), "2 h 30 min");
        assert_eq!(span(7_200), "2 h");
        assert_eq!(span(3 * 86_400 + 4 * 3_600 + 59), "3 d 4 h");
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_moment_names_its_zone_and_offset_and_a_duration_its_unit() {
        let t = DateTime::parse_from_rfc3339("2026-12-02T16:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            when_in(t, chrono_tz::Europe::Berlin, Locale::en),
            "Wed 2 Dec 17:00 CET (UTC+01:00)"
        );
        assert!(when_in(t, chrono_tz::UTC, Locale::en).ends_with("16:00 UTC"));
        assert_eq!(duration_in(900, Locale::en), "15 min");
    }
}
