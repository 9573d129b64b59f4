//! The viewer's clock and time zone. The browser keeps its zone (an IANA name) in the `tz`
//! cookie, so that a time the server draws is in it too; `<html data-zone>` says which zone
//! the server used.

use chrono::{DateTime, FixedOffset, NaiveDateTime, Offset, TimeZone, Utc};
use leptos::prelude::*;

/// The browser's current UTC offset (UTC on the server).
pub fn local_offset() -> FixedOffset {
    offset_at(now())
}

/// The viewer's UTC offset at `t`: the browser's zone with its summer time, so a time from
/// last July reads in July's offset. On the server, the zone of the request's `tz` cookie
/// (UTC without one).
pub fn offset_at(t: DateTime<Utc>) -> FixedOffset {
    #[cfg(feature = "hydrate")]
    {
        let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(t.timestamp_millis() as f64));
        FixedOffset::west_opt((date.get_timezone_offset() * 60.0) as i32).unwrap_or(utc())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        server_zone().map_or(utc(), |zone| {
            zone.offset_from_utc_datetime(&t.naive_utc()).fix()
        })
    }
}

/// The cookie in which the browser keeps its time zone's IANA name (`Asia/Shanghai`).
pub const ZONE_COOKIE: &str = "tz";

/// The zone a request's times are drawn in on the server, chosen once per request from its
/// `tz` cookie (`None`: no cookie, or one naming no zone `chrono-tz` knows; then UTC). The
/// server's middleware puts it in the request's extensions beside the language.
#[cfg(all(feature = "ssr", not(feature = "hydrate")))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewerZone(pub Option<chrono_tz::Tz>);

#[cfg(all(feature = "ssr", not(feature = "hydrate")))]
impl ViewerZone {
    /// The zone a request's `tz` cookie names.
    pub fn of_request(headers: &http::HeaderMap) -> Self {
        Self(crate::ssr::cookie(headers, ZONE_COOKIE).and_then(|name| zone_of(&name)))
    }
}

/// The zone the server renders the request's times in.
#[cfg(all(feature = "ssr", not(feature = "hydrate")))]
fn server_zone() -> Option<chrono_tz::Tz> {
    let parts = use_context::<http::request::Parts>()?;
    parts.extensions.get::<ViewerZone>()?.0
}

#[cfg(not(any(feature = "ssr", feature = "hydrate")))]
fn server_zone() -> Option<chrono_tz::Tz> {
    None
}

/// A zone by its IANA name, as the cookie carries it. Names are short (the longest is 32
/// bytes); anything longer is no zone, and is not looked up.
#[cfg(not(feature = "hydrate"))]
pub fn zone_of(name: &str) -> Option<chrono_tz::Tz> {
    (name.len() <= 64).then(|| name.parse().ok()).flatten()
}

/// The name of the zone the server drew this page's times in, for `<html data-zone>`.
pub fn rendered_zone() -> String {
    #[cfg(not(feature = "hydrate"))]
    {
        server_zone().map_or_else(|| "UTC".to_string(), |zone| zone.name().to_string())
    }
    #[cfg(feature = "hydrate")]
    {
        String::new()
    }
}

/// The IANA name of the browser's zone (`Asia/Shanghai`).
#[cfg(feature = "hydrate")]
pub fn browser_zone() -> Option<String> {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new())
        .resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into())
        .ok()
        .and_then(|z| z.as_string())
}

/// Before the page goes live: keeps the browser's zone in the `tz` cookie.
#[cfg(feature = "hydrate")]
pub fn remember_zone() {
    use wasm_bindgen::JsCast;
    let Some(zone) = browser_zone() else {
        return;
    };
    let Ok(html) = document().dyn_into::<web_sys::HtmlDocument>() else {
        return;
    };
    let wanted = format!("{ZONE_COOKIE}={zone}");
    let kept = html
        .cookie()
        .unwrap_or_default()
        .split(';')
        .any(|pair| pair.trim() == wanted);
    if !kept {
        let _ = html.set_cookie(&format!("{wanted}; path=/; max-age=31536000; samesite=lax"));
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
    let naive = input_time(value)?;
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

/// A `datetime-local` input's value ("2026-12-02T16:00", seconds where the input shows them)
/// as the wall time it names.
fn input_time(value: &str) -> Option<NaiveDateTime> {
    let number = |s: &str, digits: std::ops::RangeInclusive<usize>| {
        (digits.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let (date, time) = value.split_once('T')?;
    let mut date = date.split('-');
    let mut time = time.split(':');
    let (y, m, d) = (date.next()?, date.next()?, date.next()?);
    let (h, min, s) = (time.next()?, time.next()?, time.next().unwrap_or("0"));
    if date.next().is_some() || time.next().is_some() {
        return None;
    }
    chrono::NaiveDate::from_ymd_opt(
        number(y, 4..=4)? as i32,
        number(m, 1..=2)?,
        number(d, 1..=2)?,
    )?
    .and_hms_opt(number(h, 1..=2)?, number(min, 1..=2)?, number(s, 1..=2)?)
}

/// `t` as a `datetime-local` input's value in the viewer's zone.
pub fn local_input_value(t: DateTime<Utc>) -> String {
    crate::dates::dated_in(
        t.with_timezone(&offset_at(t)),
        "%Y-%m-%dT%H:%M",
        crate::i18n::Locale::en,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_value_reads_as_the_wall_time_it_names_and_back() {
        let t = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        assert_eq!(
            input_time("2026-12-02T16:05"),
            Some(t("2026-12-02 16:05:00"))
        );
        assert_eq!(
            input_time("2026-12-02T16:05:09"),
            Some(t("2026-12-02 16:05:09"))
        );
        for bad in [
            "",
            "2026-12-02",
            "2026-12-02 16:05",
            "2026-13-02T16:05",
            "2026-02-30T16:05",
            "2026-12-02T24:00",
            "26-12-02T16:05",
            "2026-12-02T16:05:00:00",
            "2026-12-+2T16:05",
            "2026-12-02T16:5x",
        ] {
            assert_eq!(input_time(bad), None, "{bad}");
        }
        // Outside a browser the viewer's zone is UTC.
        let at = "2026-12-02T16:05:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(local_input_value(at), "2026-12-02T16:05");
        assert_eq!(local_input(&local_input_value(at)), Some(at));
    }
}
