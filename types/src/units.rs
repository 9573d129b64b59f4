//! Durations and sizes as people type them (`4h`, `1h30m`, `80GiB`), parsed the same way by
//! the server's query strings, the command line and the pages.

/// A duration like `4h`, `90m`, `1h30m`, `2d`, `45s`: everywhere Lanes takes one (the command
/// line, the pages' forms, the API's query strings). A bare number is refused, never guessed:
/// people mean seconds, minutes (Slurm's `-t 90`) or hours (a form's "hours") by it, and a
/// guess books or limits the wrong length without a word.
pub fn parse_duration(text: &str) -> Result<chrono::Duration, String> {
    let text = text.trim();
    if text.parse::<u64>().is_ok() {
        return Err(format!(
            "{text:?} has no unit: write {text}m for minutes, {text}h for hours or {text}s for seconds"
        ));
    }
    if text.parse::<f64>().is_ok() {
        return Err(format!(
            "{text:?} has no unit, and a duration counts whole units: write 1h30m for an hour and a half, 90m or 45s"
        ));
    }
    let bad = || format!("{text:?} is not a duration (examples: 4h, 90m, 1h30m, 2d)");
    let std = humantime::parse_duration(text).map_err(|_| bad())?;
    chrono::Duration::from_std(std).map_err(|_| bad())
}

/// A duration as people read it: `4h`, `1h 30m`, `2d 3h`, `45s` (seconds only under a minute).
pub fn format_duration(d: chrono::Duration) -> String {
    let total = d.num_seconds().max(0);
    if total < 60 {
        return format!("{total}s");
    }
    let (days, hours, minutes) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60);
    let parts: Vec<String> = [(days, "d"), (hours, "h"), (minutes, "m")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    parts.join(" ")
}

/// A count of cards in English words: "1 card", "2 cards" (never "1 cards" or "card(s)").
pub fn cards(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 card".into(),
        n => format!("{n} cards"),
    }
}

/// Hours (GPU-hours, hours on a card) with the precision that keeps small amounts visible
/// and large ones short, the same in every table: "0.03", "4.25", "12.5", "340".
pub fn hours(h: f64) -> String {
    let a = h.abs();
    if a < 10.0 {
        format!("{h:.2}")
    } else if a < 100.0 {
        format!("{h:.1}")
    } else {
        format!("{h:.0}")
    }
}

/// A size like `80GiB`, `200MB`, `64KiB` or a plain number of bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 80GiB, 200MB, 65536)"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        "tb" => 1_000_000_000_000,
        "tib" | "t" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit {other:?} (use KiB, MiB, GiB, kB, MB, GB)"
            ))
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_typed_and_print_back() {
        assert_eq!(parse_duration("4h"), Ok(chrono::Duration::hours(4)));
        assert_eq!(parse_duration("1h30m"), Ok(chrono::Duration::minutes(90)));
        assert_eq!(parse_duration("1h 30m"), Ok(chrono::Duration::minutes(90)));
        assert!(parse_duration("soon").unwrap_err().contains("examples"));
        // A bare number is said back with the units it could mean, never guessed.
        for bare in ["90", " 3600 "] {
            let refused = parse_duration(bare).unwrap_err();
            assert!(
                refused.contains("has no unit") && refused.contains(&format!("{}m", bare.trim())),
                "{refused}"
            );
        }
        // A fraction is not offered back as "1.5h" (which is no duration either).
        let refused = parse_duration("1.5").unwrap_err();
        assert!(
            refused.contains("1h30m") && !refused.contains("1.5h"),
            "{refused}"
        );
        for nonsense in [".", "", "h"] {
            let refused = parse_duration(nonsense).unwrap_err();
            assert!(
                refused.contains("is not a duration"),
                "{nonsense:?}: {refused}"
            );
        }
        assert_eq!(format_duration(chrono::Duration::minutes(90)), "1h 30m");
        assert_eq!(format_duration(chrono::Duration::hours(51)), "2d 3h");
        assert_eq!(format_duration(chrono::Duration::seconds(12)), "12s");
    }

    #[test]
    fn hours_keep_small_amounts_visible_in_every_table() {
        // A job row's 0.03 GPU-hours once summed to a user row's "0.0".
        assert_eq!(hours(0.03), "0.03");
        assert_eq!(hours(4.254), "4.25");
        assert_eq!(hours(12.54), "12.5");
        assert_eq!(hours(339.6), "340");
    }

    #[test]
    fn a_count_of_cards_is_said_as_english_says_it() {
        assert_eq!(cards(1u32), "1 card");
        assert_eq!(cards(0u32), "0 cards");
        assert_eq!(cards(8u64), "8 cards");
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_bytes("80GiB"), Ok(80 << 30));
        assert_eq!(parse_bytes("40GB"), Ok(40_000_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5XB").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
    }
}
