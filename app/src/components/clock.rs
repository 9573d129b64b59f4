//! The viewer's clock and time zone. Pages that show local times render them in the browser
//! only (the server does not know the viewer's zone), so server and browser never disagree.

use chrono::{DateTime, FixedOffset, Offset, Utc};

/// The browser's current UTC offset (UTC on the server).
pub fn local_offset() -> FixedOffset {
    #[cfg(feature = "hydrate")]
    {
        let minutes = js_sys::Date::new_0().get_timezone_offset();
        FixedOffset::west_opt((minutes * 60.0) as i32).unwrap_or(utc())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        utc()
    }
}

fn utc() -> FixedOffset {
    Utc.fix()
}

pub fn now() -> DateTime<Utc> {
    Utc::now()
}

/// An instant as an API query value (`2026-11-30T14:00:00Z`: no `+` to escape).
pub fn query_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
