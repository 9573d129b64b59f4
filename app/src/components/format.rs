//! Human-readable numbers for the UI.

/// Bytes in binary units with one decimal ("1.5 GiB"), as nvidia-smi users expect.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// GiB with no decimals for large totals ("141 GiB").
pub fn gib(n: u64) -> String {
    format!("{:.0} GiB", n as f64 / (1u64 << 30) as f64)
}

/// Energy in kWh, with enough digits to see it move ("0.042 kWh", "3.2 kWh", "1250 kWh").
pub fn kwh(k: f64) -> String {
    if k < 1.0 {
        format!("{k:.3} kWh")
    } else if k < 100.0 {
        format!("{k:.1} kWh")
    } else {
        format!("{k:.0} kWh")
    }
}

/// A moment to the minute in the viewer's zone ("2026-11-30 01:40"); the top bar names the
/// zone. On the server (and in tests) that zone is UTC.
pub fn date_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.with_timezone(&super::clock::offset_at(at))
        .format("%Y-%m-%d %H:%M")
        .to_string()
}

/// `t` written with a strftime `pattern` from the translation files, weekday and month names
/// (`%a %A %b %B`) in the page's language.
pub fn dated(t: chrono::DateTime<chrono::FixedOffset>, pattern: &str) -> String {
    dated_in(t, pattern, crate::i18n::locale())
}

/// [`dated`] in `locale`, for any zone: the server's mail writes its times with it.
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

/// A span of seconds in the two largest units ("2 h 30 min", "45 s", "3 d 4 h").
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3_600, s % 3_600 / 60);
    match (d, h, m) {
        (0, 0, 0) => tr!(span.s, n = s),
        (0, 0, m) => tr!(span.min, n = m),
        (0, h, 0) => tr!(span.h, n = h),
        (0, h, m) => tr!(span.h_min, h, m),
        (d, 0, _) => tr!(span.d, n = d),
        (d, h, _) => tr!(span.d_h, d, h),
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

    #[test]
    fn moments_are_shown_to_the_minute_in_the_viewers_zone() {
        // Outside a browser the viewer's zone is UTC.
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-30T01:40:59+01:00").unwrap();
        assert_eq!(date_time(at.into()), "2026-11-30 00:40");
    }

    #[test]
    fn bytes_pick_the_largest_binary_unit() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(80 * (1 << 30)), "80.0 GiB");
    }

    #[test]
    fn gib_rounds_to_whole_units() {
        assert_eq!(gib(150_754_820_096), "140 GiB");
    }
}
