//! The viewer's clock and time zone. Pages that show local times render them in the browser
//! only (the server does not know the viewer's zone), so server and browser never disagree.

use chrono::{DateTime, FixedOffset, NaiveDateTime, Offset, TimeZone, Utc};
use leptos::prelude::*;

/// The browser's current UTC offset (UTC on the server).
pub fn local_offset() -> FixedOffset {
    offset_at(now())
}

/// The viewer's UTC offset at `t`: the browser's zone with its summer time, so a time from
/// last July reads in July's offset (UTC on the server).
pub fn offset_at(t: DateTime<Utc>) -> FixedOffset {
    #[cfg(feature = "hydrate")]
    {
        let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(t.timestamp_millis() as f64));
        FixedOffset::west_opt((date.get_timezone_offset() * 60.0) as i32).unwrap_or(utc())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = t;
        utc()
    }
}

/// "UTC+01:00" ("UTC" itself at zero): how pages name the zone their times are in.
pub fn zone_name(offset: FixedOffset) -> String {
    if offset.local_minus_utc() == 0 {
        "UTC".into()
    } else {
        format!("UTC{offset}")
    }
}

/// A `datetime-local` input's value, read in the viewer's zone; `None` when empty or
/// malformed.
pub fn local_input(value: &str) -> Option<DateTime<Utc>> {
    let naive = NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M").ok()?;
    // The offset of that wall time: try the offset now, then the one it gives.
    let guess = local_offset();
    let first = guess
        .from_local_datetime(&naive)
        .single()?
        .with_timezone(&Utc);
    let offset = offset_at(first);
    offset
        .from_local_datetime(&naive)
        .single()
        .map(|t| t.with_timezone(&Utc))
}

/// `t` as a `datetime-local` input's value in the viewer's zone.
pub fn local_input_value(t: DateTime<Utc>) -> String {
    t.with_timezone(&offset_at(t))
        .format("%Y-%m-%dT%H:%M")
        .to_string()
}

/// The zone the page's times are in, named in the top bar. The server does not know the
/// viewer's zone, so it appears once the page runs in the browser.
#[component]
pub fn ZoneBadge() -> impl IntoView {
    let mounted = RwSignal::new(false);
    Effect::new(move |_| mounted.set(true));
    move || {
        mounted.get().then(|| {
            let zone = zone_name(local_offset());
            view! {
                <span class="zone" data-testid="zone" title=tr!(clock.every_time_on_this_page_is)>
                    {tr!(clock.times_in, zone)}
                </span>
            }
        })
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
