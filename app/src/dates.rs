//! Dates, times and durations in a reader's language and zone: the one place the pages, the
//! server's API messages, mail and link pages write them (weekday and month names come from
//! the translation files).

use crate::i18n::i18n::td_string;
use crate::i18n::Locale;
use chrono::{DateTime, Utc};

/// The strftime fields [`dated_in`] writes: what the translation files' patterns use.
pub const FIELDS: &[&str] = &[
    "%Y", "%m", "%-m", "%d", "%-d", "%H", "%M", "%S", "%a", "%A", "%b", "%B", "%Z", "%z", "%:z",
    "%%",
];

/// `t` written with a strftime `pattern` from the translation files, in any zone, as chrono's
/// `format` writes it for the fields in [`FIELDS`], weekday and month names (`%a %A %b %B`) in
/// `locale`; anything else after a `%` is written as it stands. Written here rather than with
/// chrono's `format`: its pattern parser and formatter took 8 KB of the dashboard's brotli
/// bundle, for a dozen fields.
pub fn dated_in<Tz: chrono::TimeZone>(
    t: chrono::DateTime<Tz>,
    pattern: &str,
    locale: crate::i18n::Locale,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    use chrono::{Datelike, Offset, Timelike};
    use std::fmt::Write;
    let name = |list: &str, i: u32| {
        list.split(',')
            .nth(i as usize)
            .unwrap_or_default()
            .to_string()
    };
    let offset = |colon: bool| {
        let seconds = t.offset().fix().local_minus_utc();
        let (sign, minutes) = (if seconds < 0 { '-' } else { '+' }, seconds.abs() / 60);
        let sep = if colon { ":" } else { "" };
        format!("{sign}{:02}{sep}{:02}", minutes / 60, minutes % 60)
    };
    let (day, month) = (t.weekday().num_days_from_monday(), t.month0());
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let rest = chars.as_str();
        let (field, used) = match rest.as_bytes() {
            [b'-', f, ..] if b"md".contains(f) => (&rest[..2], 2),
            [b':', b'z', ..] => (&rest[..2], 2),
            [f, ..] if f.is_ascii() => (&rest[..1], 1),
            _ => ("", 0),
        };
        let _ = match field {
            "Y" => write!(out, "{:04}", t.year()),
            "m" => write!(out, "{:02}", t.month()),
            "-m" => write!(out, "{}", t.month()),
            "d" => write!(out, "{:02}", t.day()),
            "-d" => write!(out, "{}", t.day()),
            "H" => write!(out, "{:02}", t.hour()),
            "M" => write!(out, "{:02}", t.minute()),
            "S" => write!(out, "{:02}", t.second()),
            "A" => write!(out, "{}", name(td_string!(locale, date.weekdays_long), day)),
            "a" => write!(
                out,
                "{}",
                name(td_string!(locale, date.weekdays_short), day)
            ),
            "B" => write!(out, "{}", name(td_string!(locale, date.months_long), month)),
            "b" => write!(
                out,
                "{}",
                name(td_string!(locale, date.months_short), month)
            ),
            "Z" => write!(out, "{}", t.offset()),
            "z" => write!(out, "{}", offset(false)),
            ":z" => write!(out, "{}", offset(true)),
            "%" => write!(out, "%"),
            _ => {
                out.push('%');
                continue;
            }
        };
        for _ in 0..used {
            chars.next();
        }
    }
    out
}

/// A moment for a reader in `tz`, with its zone and UTC offset named ("Wed 2 Dec 17:00 CET
/// (UTC+01:00)"; in UTC, "Wed 2 Dec 16:00 UTC").
pub fn when_in<Z: chrono::TimeZone>(t: DateTime<Utc>, tz: Z, locale: Locale) -> String
where
    Z::Offset: std::fmt::Display,
{
    let local = t.with_timezone(&tz);
    let offset = dated_in(local.clone(), "%:z", locale);
    let name = local.offset().to_string();
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

    /// Every pattern of the translation files, and every field, written as chrono's `format`
    /// writes it (names in English, whose translation file has chrono's names), in zones east
    /// and west and at the edges of the day.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn patterns_are_written_as_chrono_writes_them() {
        let mut patterns: Vec<String> = FIELDS.iter().map(|f| format!("<{f}>")).collect();
        patterns.push("%Y-%m-%dT%H:%M".into());
        for file in ["locales/en.json", "locales/zh.json"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let text = std::fs::read_to_string(path).unwrap();
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
                match v {
                    serde_json::Value::Object(map) => map.values().for_each(|v| walk(v, out)),
                    serde_json::Value::String(s) if s.contains("%H") || s.contains("%-d") => {
                        out.push(s.clone())
                    }
                    _ => {}
                }
            }
            walk(&value, &mut patterns);
        }
        assert!(patterns.len() > 30, "{patterns:?}");
        let moments = [
            "2026-12-02T16:00:00Z",
            "2026-01-04T00:05:09Z",
            "2024-02-29T23:59:59Z",
            "1999-07-14T12:30:00Z",
        ];
        for moment in moments {
            let t = DateTime::parse_from_rfc3339(moment)
                .unwrap()
                .with_timezone(&Utc);
            for pattern in &patterns {
                for tz in [
                    chrono_tz::UTC,
                    chrono_tz::Asia::Shanghai,
                    chrono_tz::America::St_Johns,
                ] {
                    let local = t.with_timezone(&tz);
                    assert_eq!(
                        dated_in(local, pattern, Locale::en),
                        local.format(pattern).to_string(),
                        "{pattern} at {moment} in {tz}"
                    );
                }
                let fixed = t.with_timezone(&chrono::FixedOffset::west_opt(9000).unwrap());
                assert_eq!(
                    dated_in(fixed, pattern, Locale::en),
                    fixed.format(pattern).to_string(),
                    "{pattern} at {moment} at -02:30"
                );
            }
        }
        // Names come from the reader's language; a field it does not know stays as written.
        let t = DateTime::parse_from_rfc3339("2026-12-02T16:00:00Z").unwrap();
        let nth = |list: &str, i: usize| list.split(',').nth(i).unwrap().to_string();
        assert_eq!(
            dated_in(t, "%a %-d %b", Locale::zh),
            format!(
                "{} 2 {}",
                nth(td_string!(Locale::zh, date.weekdays_short), 2),
                nth(td_string!(Locale::zh, date.months_short), 11)
            )
        );
        assert_eq!(dated_in(t, "100% %q %", Locale::en), "100% %q %");
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
