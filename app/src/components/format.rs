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

/// A moment to the minute in the viewer's zone, written as every page writes one ("Thu 3 Dec
/// 10:27", with the year when it is not this year's); the top bar names the zone. On the
/// server (and in tests) that zone is UTC.
pub fn date_time(at: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::Datelike;
    let local = at.with_timezone(&super::clock::offset_at(at));
    let pattern = if local.year() == chrono::Utc::now().year() {
        tr!(date.day_month_time)
    } else {
        tr!(date.day_month_year_time)
    };
    dated(local, pattern)
}

/// A recorded sentence (an audit entry's detail) with each RFC 3339 moment in it written as
/// [`date_time`] writes moments, so a page never shows raw UTC beside its own times.
pub fn moments_in(text: &str) -> String {
    text.split_inclusive(char::is_whitespace)
        .map(|word| {
            let body = word.trim_end_matches(|c: char| c.is_whitespace() || ",;:)".contains(c));
            let body = body.trim_start_matches('(');
            match chrono::DateTime::parse_from_rfc3339(body) {
                Ok(at) => word.replacen(body, &date_time(at.into()), 1),
                Err(_) => word.to_string(),
            }
        })
        .collect()
}

/// `t` written with a strftime `pattern` from the translation files, weekday and month names
/// (`%a %A %b %B`) in the page's language.
pub fn dated(t: chrono::DateTime<chrono::FixedOffset>, pattern: &str) -> String {
    crate::dates::dated_in(t, pattern, crate::i18n::locale())
}

pub use crate::dates::span;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_shown_to_the_minute_in_the_viewers_zone() {
        // Outside a browser the viewer's zone is UTC.
        let at = chrono::DateTime::parse_from_rfc3339("2024-11-30T01:40:59+01:00").unwrap();
        assert_eq!(date_time(at.into()), "Sat 30 Nov 2024 00:40");
        // This year's moments leave the year out, as the calendar does.
        let now = chrono::Utc::now();
        assert_eq!(
            date_time(now),
            crate::calendar::long_time(now, chrono::FixedOffset::east_opt(0).unwrap())
        );
    }

    #[test]
    fn recorded_moments_are_written_as_pages_write_them() {
        assert_eq!(
            moments_in("2024-11-30T01:40:00+00:00 → 2024-11-30T03:00:00Z: (fans)"),
            "Sat 30 Nov 2024 01:40 → Sat 30 Nov 2024 03:00: (fans)"
        );
        assert_eq!(moments_in("role admin"), "role admin");
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
