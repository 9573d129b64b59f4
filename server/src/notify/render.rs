//! The words of a personal message: a subject that says what and when (in the reader's time
//! zone, its UTC offset named), a plain-text body and an HTML one with the same content, the
//! lab's name, and the one-click answers that fit the event. Plain functions of the facts a
//! notice carries.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use html_escape::encode_text as esc;
use lanes_app::i18n::Locale;
use lanes_types::notify::{EventKind, LinkAction};
use serde_json::Value;

/// Who reads it, and how to name things for them.
pub struct Reader<'a> {
    pub lab: &'a str,
    pub name: &'a str,
    pub tz: Tz,
    /// Each card's index on its node, by (node, UUID), to name it "GPU 3 · node".
    pub cards: &'a lanes_types::CardIndex,
    /// Where the portal is, for the "open" link.
    pub portal: &'a str,
    /// The language the reader chose (English unless they chose another).
    pub locale: Locale,
}

/// A message ready to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub subject: String,
    pub text: String,
    pub html: String,
}

/// The one-click answers a message of `kind` offers, given its facts.
pub fn actions(kind: EventKind, details: &Value) -> Vec<LinkAction> {
    let queue_booking = details["queue_job"].as_i64().is_some();
    match kind {
        EventKind::BookingStartsSoon => vec![LinkAction::Release],
        EventKind::BookingEndsSoon if !queue_booking => {
            vec![LinkAction::ExtendHour, LinkAction::Release]
        }
        EventKind::BookingIdle => vec![LinkAction::StillUsing, LinkAction::Release],
        EventKind::JobStarted => vec![LinkAction::CancelJob],
        EventKind::JobBookingEnding if !queue_booking => {
            vec![LinkAction::ExtendHour, LinkAction::CancelJob]
        }
        _ => Vec::new(),
    }
}

/// A message's text in the reader's language: `say!(reader, mail.key, name = value)`.
macro_rules! say {
    ($reader:expr, $($key:tt)*) => {
        lanes_app::i18n::i18n::td_string!($reader.locale(), $($key)*).to_string()
    };
}

/// What `say!` needs of its reader: the language.
trait Speaks {
    fn locale(&self) -> Locale;
}

impl Speaks for Reader<'_> {
    fn locale(&self) -> Locale {
        self.locale
    }
}

impl Speaks for Locale {
    fn locale(&self) -> Locale {
        *self
    }
}

/// A time for the reader: "Wed 2 Dec 17:00 CET (UTC+01:00)".
fn when(t: DateTime<Utc>, reader: &Reader<'_>) -> String {
    when_in(t, reader.tz, reader.locale)
}

/// A time in `tz`, written in `locale`'s words.
pub fn when_in(t: DateTime<Utc>, tz: Tz, locale: Locale) -> String {
    let reader = &locale;
    let local = t.with_timezone(&tz);
    let offset = local.format("%:z").to_string();
    let name = local.format("%Z").to_string();
    if offset == "+00:00" && name == "UTC" {
        dated(local, &say!(reader, mail.when_utc), reader)
    } else {
        format!(
            "{} (UTC{offset})",
            dated(local, &say!(reader, mail.when_zone), reader)
        )
    }
}

/// `t` with a pattern from the translation files, day and month names (`%a %b`) in the
/// reader's language (the pages' names).
fn dated(t: DateTime<Tz>, pattern: &str, reader: &impl Speaks) -> String {
    lanes_app::components::format::dated_in(t, pattern, reader.locale())
}

/// Only the clock, for subjects: "17:00 CET".
fn clock(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%H:%M %Z").to_string()
}

fn time(details: &Value, key: &str) -> Option<DateTime<Utc>> {
    details[key]
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// "GPU 0 · node-a, GPU 1 · node-a" for the cards in `details["gpus"]`.
fn cards(details: &Value, reader: &Reader<'_>) -> String {
    let refs: Vec<lanes_types::booking::GpuRef> = details["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| lanes_types::booking::GpuRef {
            node: g["node"].as_str().unwrap_or("?").to_string(),
            uuid: g["uuid"].as_str().unwrap_or("?").to_string(),
        })
        .collect();
    let names = reader.cards.names(&refs);
    if names.is_empty() {
        say!(reader, mail.no_cards)
    } else {
        names.join(", ")
    }
}

fn minutes(seconds: i64, reader: &Reader<'_>) -> String {
    if seconds < 120 {
        say!(reader, mail.seconds, n = seconds)
    } else if seconds < 2 * 3600 {
        say!(reader, mail.minutes, n = seconds / 60)
    } else {
        say!(
            reader,
            mail.hours,
            n = format!("{:.1}", seconds as f64 / 3600.0)
        )
    }
}

/// A one-click answer's words.
pub fn action_label(action: LinkAction, reader: &Reader<'_>) -> String {
    match action {
        LinkAction::ExtendHour => say!(reader, mail.extend_hour),
        LinkAction::Release => say!(reader, mail.release_now),
        LinkAction::StillUsing => say!(reader, mail.still_using),
        LinkAction::CancelJob => say!(reader, mail.cancel_job),
    }
}

/// The message for `event` (a personal event's name, or `test`) with its links.
pub fn render(
    event: &str,
    details: &Value,
    at: DateTime<Utc>,
    reader: &Reader<'_>,
    links: &[(LinkAction, String)],
) -> Message {
    let r = reader;
    let tz = reader.tz;
    let booking = details["booking_id"].as_i64().unwrap_or(0);
    let job = details["job_id"].as_i64().unwrap_or(0);
    let name = details["name"]
        .as_str()
        .map_or_else(|| say!(r, mail.a_job), str::to_string);
    let start = time(details, "start").unwrap_or(at);
    let end = time(details, "end").unwrap_or(at);
    let gpus = cards(details, reader);
    let cards_line = say!(r, mail.cards_line, cards = gpus.clone());
    let (subject, lines): (String, Vec<String>) = match EventKind::parse(event) {
        Some(EventKind::BookingStartsSoon) => (
            say!(r, mail.starts_subject, booking, at = clock(start, tz)),
            vec![
                say!(r, mail.starts_line, booking, at = when(start, r)),
                cards_line,
                say!(r, mail.ends_at_line, at = when(end, r)),
                say!(r, mail.release_if_unneeded),
            ],
        ),
        Some(EventKind::BookingEndsSoon) => (
            say!(r, mail.ends_subject, booking, at = clock(end, tz)),
            vec![
                say!(r, mail.ends_line, booking, at = when(end, r)),
                cards_line,
                say!(r, mail.stopped_at_end),
            ],
        ),
        Some(EventKind::BookingIdle) => {
            let release = time(details, "release_at");
            let mut lines = vec![
                say!(
                    r,
                    mail.idle_line,
                    booking,
                    pct = details["threshold_pct"].as_u64().unwrap_or(0),
                    window = minutes(details["window_s"].as_i64().unwrap_or(0), r)
                ),
                cards_line,
            ];
            let subject = match release {
                Some(t) => {
                    lines.push(say!(
                        r,
                        mail.idle_release_line,
                        at = when(t, r),
                        left = minutes((t - at).num_seconds().max(0), r)
                    ));
                    say!(r, mail.idle_release_subject, booking, at = clock(t, tz))
                }
                None => {
                    lines.push(say!(r, mail.idle_no_release));
                    say!(r, mail.idle_subject, booking)
                }
            };
            (subject, lines)
        }
        Some(EventKind::BookingReleased) => (
            say!(r, mail.released_subject, booking, at = clock(at, tz)),
            vec![
                say!(r, mail.released_line, booking, at = when(at, r)),
                cards_line,
            ],
        ),
        Some(EventKind::UnbookedUse) => {
            let card = cards(
                &serde_json::json!({"gpus": [{"node": details["node"], "uuid": details["gpu_uuid"]}]}),
                reader,
            );
            let command = details["command"]
                .as_str()
                .map_or_else(|| say!(r, mail.a_process), str::to_string);
            let pid = details["pid"].as_u64().unwrap_or(0);
            let mut lines = vec![say!(
                r,
                mail.unbooked_line,
                command = command.clone(),
                pid,
                card = card.clone()
            )];
            let subject = match time(details, "terminate_at") {
                Some(t) => {
                    lines.push(say!(
                        r,
                        mail.unbooked_term_line,
                        at = when(t, r),
                        left = minutes((t - at).num_seconds().max(0), r)
                    ));
                    say!(
                        r,
                        mail.unbooked_term_subject,
                        command,
                        card,
                        at = clock(t, tz)
                    )
                }
                None => {
                    lines.push(say!(r, mail.unbooked_no_term));
                    say!(r, mail.unbooked_subject, command, card)
                }
            };
            (subject, lines)
        }
        Some(EventKind::JobStarted) => (
            say!(
                r,
                mail.job_started_subject,
                job,
                name = name.clone(),
                at = clock(at, tz)
            ),
            vec![
                say!(
                    r,
                    mail.job_started_line,
                    job,
                    name = name.clone(),
                    at = when(at, r)
                ),
                cards_line,
            ],
        ),
        Some(kind @ (EventKind::JobFinished | EventKind::JobFailed | EventKind::JobTimedOut)) => {
            let how = details["how"]
                .as_str()
                .map_or_else(|| say!(r, mail.it_ended), str::to_string);
            let verb = match kind {
                EventKind::JobFinished => say!(r, mail.verb_finished),
                EventKind::JobFailed => say!(r, mail.verb_failed),
                _ => say!(r, mail.verb_timed_out),
            };
            let mut lines = vec![say!(
                r,
                mail.job_ended_line,
                job,
                name = name.clone(),
                verb = verb.clone(),
                at = when(at, r),
                how
            )];
            if let Some(message) = details["message"].as_str().filter(|m| !m.is_empty()) {
                lines.push(say!(r, mail.lanes_says, message));
            }
            (say!(r, mail.job_ended_subject, job, name, verb), lines)
        }
        Some(EventKind::JobBookingEnding) => (
            say!(
                r,
                mail.job_booking_subject,
                job,
                name = name.clone(),
                at = clock(end, tz)
            ),
            vec![
                say!(
                    r,
                    mail.job_booking_line,
                    job,
                    name,
                    booking,
                    at = when(end, r)
                ),
                say!(r, mail.job_booking_kill),
            ],
        ),
        Some(EventKind::LoanReclaimed) => (
            say!(r, mail.reclaimed_subject, job, name = name.clone()),
            vec![
                say!(r, mail.reclaimed_line, job, name, at = when(at, r)),
                say!(r, mail.reclaimed_wait),
            ],
        ),
        Some(EventKind::QuotaNear) => {
            let used = format!("{:.1}", details["used_h"].as_f64().unwrap_or(0.0));
            let limit = format!("{:.1}", details["limit_h"].as_f64().unwrap_or(0.0));
            (
                say!(
                    r,
                    mail.quota_subject,
                    used = used.clone(),
                    limit = limit.clone()
                ),
                vec![
                    say!(r, mail.quota_line, used, limit),
                    say!(r, mail.quota_refused),
                ],
            )
        }
        Some(EventKind::WeeklyDigest) => {
            let booked = details["booked_h"].as_f64().unwrap_or(0.0);
            let used = details["used_h"].as_f64().unwrap_or(0.0);
            let from = time(details, "from").unwrap_or(at);
            let share = if booked > 0.0 {
                say!(
                    r,
                    mail.digest_share,
                    pct = format!("{:.0}", 100.0 * used / booked)
                )
            } else {
                String::new()
            };
            let (booked, used) = (format!("{booked:.1}"), format!("{used:.1}"));
            (
                say!(
                    r,
                    mail.digest_subject,
                    from = dated(from.with_timezone(&tz), &say!(r, mail.digest_day), r),
                    booked = booked.clone(),
                    used = used.clone()
                ),
                vec![
                    say!(
                        r,
                        mail.digest_line,
                        from = when(from, r),
                        booked,
                        used,
                        share
                    ),
                    say!(
                        r,
                        mail.digest_jobs,
                        jobs = details["jobs"].as_u64().unwrap_or(0),
                        kwh = format!("{:.2}", details["energy_kwh"].as_f64().unwrap_or(0.0))
                    ),
                ],
            )
        }
        None => (
            say!(r, mail.test_subject),
            vec![say!(r, mail.test_line, lab = reader.lab, at = when(at, r))],
        ),
    };
    let subject = format!("[{}] {subject}", reader.lab);
    let mut text = format!("{}\n\n", say!(r, mail.hello, name = reader.name));
    for line in &lines {
        text.push_str(line);
        text.push('\n');
    }
    if !links.is_empty() {
        text.push_str(&format!("\n{}\n", say!(r, mail.answer)));
        for (action, url) in links {
            text.push_str(&format!("  {}: {url}\n", action_label(*action, r)));
        }
    }
    text.push_str(&format!(
        "\n{}\n{}\n\n-- \n{}\n",
        say!(r, mail.open, lab = reader.lab, url = reader.portal),
        say!(r, mail.choose, url = format!("{}/account", reader.portal)),
        say!(r, mail.signature, lab = reader.lab)
    ));
    let mut html = format!(
        "<!DOCTYPE html><html><body style=\"font-family:system-ui,sans-serif;line-height:1.45;color:#1b1f24\">\
         <p>{}</p>",
        esc(&say!(r, mail.hello, name = reader.name))
    );
    for line in &lines {
        html.push_str(&format!("<p>{}</p>", esc(line)));
    }
    if !links.is_empty() {
        html.push_str("<p>");
        for (action, url) in links {
            html.push_str(&format!(
                "<a href=\"{}\" style=\"display:inline-block;margin:0 8px 8px 0;padding:8px 14px;border-radius:6px;background:#0b5fff;color:#fff;text-decoration:none\">{}</a>",
                html_escape::encode_double_quoted_attribute(url),
                esc(&action_label(*action, r))
            ));
        }
        html.push_str(&format!(
            "</p><p style=\"color:#57606a;font-size:90%\">{}</p>",
            esc(&say!(r, mail.link_once))
        ));
    }
    html.push_str(&format!(
        "<p><a href=\"{0}\">{1}</a> · <a href=\"{0}/account\">{2}</a></p>\
         <p style=\"color:#57606a;font-size:90%\">{3}</p></body></html>",
        html_escape::encode_double_quoted_attribute(reader.portal),
        esc(&say!(r, mail.open_link, lab = reader.lab)),
        esc(&say!(r, mail.choose_link)),
        esc(&say!(r, mail.signature, lab = reader.lab))
    ));
    Message {
        subject,
        text,
        html,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reader<'a>(cards: &'a lanes_types::CardIndex, tz: Tz) -> Reader<'a> {
        Reader {
            lab: "Vision Lab",
            name: "Ada <Lovelace>",
            tz,
            cards,
            portal: "https://gpu.lab.example",
            locale: lanes_app::i18n::Locale::en,
        }
    }

    /// A booking on GPU 3 of node-a from 16:00 to 18:00 UTC, reminded of at 15:50, with a
    /// release link.
    fn reminder() -> (
        lanes_types::CardIndex,
        Value,
        DateTime<Utc>,
        Vec<(LinkAction, String)>,
    ) {
        let cards = lanes_types::CardIndex::new([("node-a".into(), "GPU-1".into(), 3)]);
        let details = json!({
            "booking_id": 12,
            "start": "2026-12-02T16:00:00Z",
            "end": "2026-12-02T18:00:00Z",
            "gpus": [{"node": "node-a", "uuid": "GPU-1"}],
        });
        let at = DateTime::parse_from_rfc3339("2026-12-02T15:50:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let links = vec![(LinkAction::Release, "https://x/act/abc".to_string())];
        (cards, details, at, links)
    }

    #[test]
    fn a_reader_who_chose_chinese_gets_the_message_in_chinese_with_the_same_facts() {
        let (cards, details, at, links) = reminder();
        let reader = Reader {
            locale: lanes_app::i18n::Locale::zh,
            ..reader(&cards, chrono_tz::Asia::Shanghai)
        };
        let m = render("booking_starts_soon", &details, at, &reader, &links);
        assert_eq!(m.subject, "[Vision Lab] 预约 #12 将于 00:00 CST 开始");
        assert!(
            m.text.contains("12月3日 周四 00:00 CST (UTC+08:00)"),
            "{}",
            m.text
        );
        assert!(m.text.contains("显卡：GPU 3 · node-a。"), "{}", m.text);
        assert!(m.text.contains("立即释放: https://x/act/abc"), "{}", m.text);
        assert!(
            m.html.contains("Ada &lt;Lovelace&gt;，你好："),
            "{}",
            m.html
        );
    }

    #[test]
    fn a_reminder_says_what_and_when_in_the_readers_zone_with_its_cards_named() {
        let (cards, details, at, links) = reminder();
        let m = render(
            "booking_starts_soon",
            &details,
            at,
            &reader(&cards, chrono_tz::Europe::Berlin),
            &links,
        );
        assert_eq!(m.subject, "[Vision Lab] Booking #12 starts at 17:00 CET");
        assert!(
            m.text.contains("Wed 2 Dec 17:00 CET (UTC+01:00)"),
            "{}",
            m.text
        );
        assert!(m.text.contains("GPU 3 · node-a"));
        assert!(m.text.contains("Release now: https://x/act/abc"));
        // The HTML body has the same facts, escaped.
        assert!(m.html.contains("Ada &lt;Lovelace&gt;"));
        assert!(m.html.contains("href=\"https://x/act/abc\""));
        assert!(m.html.contains("GPU 3 · node-a"));
        let utc = render(
            "booking_starts_soon",
            &details,
            at,
            &reader(&cards, chrono_tz::UTC),
            &[],
        );
        assert_eq!(utc.subject, "[Vision Lab] Booking #12 starts at 16:00 UTC");
        assert!(!utc.text.contains("one click"));
    }

    #[test]
    fn an_idle_warning_says_how_long_is_left_and_offers_still_using_it() {
        let cards = lanes_types::CardIndex::default();
        let at = DateTime::parse_from_rfc3339("2026-12-02T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let details = json!({
            "booking_id": 4, "threshold_pct": 5, "window_s": 1800,
            "release_at": "2026-12-02T10:15:00Z",
        });
        let m = render(
            "booking_idle",
            &details,
            at,
            &reader(&cards, chrono_tz::UTC),
            &[],
        );
        assert!(m.subject.contains("released at 10:15 UTC unless used"));
        assert!(m.text.contains("(15 min from now)"), "{}", m.text);
        assert_eq!(
            actions(EventKind::BookingIdle, &details),
            vec![LinkAction::StillUsing, LinkAction::Release]
        );
        // A queue job's booking is sized to its time limit: no extending it by link.
        assert!(
            !actions(EventKind::BookingEndsSoon, &json!({"queue_job": 3}))
                .contains(&LinkAction::ExtendHour)
        );
    }
}
