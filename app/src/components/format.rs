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
    crate::dates::dated_in(t, pattern, crate::i18n::locale())
}

pub use crate::dates::span;

#[cfg(test)]
mod tests {
    use super::*;

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
