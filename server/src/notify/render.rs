//! The words of a personal message: a subject that says what and when (in the reader's time
//! zone, its UTC offset named), a plain-text body and an HTML one with the same content, the
//! lab's name, and the one-click answers that fit the event. Plain functions of the facts a
//! notice carries.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use html_escape::encode_text as esc;
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

/// A time for the reader: "Wed 2 Dec 17:00 CET (UTC+01:00)".
pub fn when(t: DateTime<Utc>, tz: Tz) -> String {
    let local = t.with_timezone(&tz);
    let offset = local.format("%:z").to_string();
    let name = local.format("%Z").to_string();
    if offset == "+00:00" && name == "UTC" {
        local.format("%a %-d %b %H:%M UTC").to_string()
    } else {
        format!("{} (UTC{offset})", local.format("%a %-d %b %H:%M %Z"))
    }
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
        "no cards".into()
    } else {
        names.join(", ")
    }
}

fn minutes(seconds: i64) -> String {
    if seconds < 120 {
        format!("{seconds} s")
    } else if seconds < 2 * 3600 {
        format!("{} min", seconds / 60)
    } else {
        format!("{:.1} h", seconds as f64 / 3600.0)
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
    let tz = reader.tz;
    let booking = details["booking_id"].as_i64().unwrap_or(0);
    let job = details["job_id"].as_i64().unwrap_or(0);
    let job_name = details["name"].as_str().unwrap_or("a job");
    let start = time(details, "start").unwrap_or(at);
    let end = time(details, "end").unwrap_or(at);
    let gpus = cards(details, reader);
    let (subject, lines): (String, Vec<String>) = match EventKind::parse(event) {
        Some(EventKind::BookingStartsSoon) => (
            format!("Booking #{booking} starts at {}", clock(start, tz)),
            vec![
                format!("Your booking #{booking} starts at {}.", when(start, tz)),
                format!("Cards: {gpus}."),
                format!("It ends at {}.", when(end, tz)),
                "If you no longer need it, release it so others can use the cards.".into(),
            ],
        ),
        Some(EventKind::BookingEndsSoon) => (
            format!("Booking #{booking} ends at {}", clock(end, tz)),
            vec![
                format!("Your booking #{booking} ends at {}.", when(end, tz)),
                format!("Cards: {gpus}."),
                "Anything still running on them is stopped when it ends.".into(),
            ],
        ),
        Some(EventKind::BookingIdle) => {
            let release = time(details, "release_at");
            let mut lines = vec![
                format!(
                    "Your booking #{booking} has been idle: under {}% GPU utilization for {}.",
                    details["threshold_pct"].as_u64().unwrap_or(0),
                    minutes(details["window_s"].as_i64().unwrap_or(0))
                ),
                format!("Cards: {gpus}."),
            ];
            let subject = match release {
                Some(r) => {
                    lines.push(format!(
                        "It will be released at {} ({} from now) unless the cards are used again or you answer \"still using it\".",
                        when(r, tz),
                        minutes((r - at).num_seconds().max(0))
                    ));
                    format!("Booking #{booking} is idle: released at {} unless used", clock(r, tz))
                }
                None => {
                    lines.push("Nothing will be released; if you are done, release it so others can use the cards.".into());
                    format!("Booking #{booking} is idle")
                }
            };
            (subject, lines)
        }
        Some(EventKind::BookingReleased) => (
            format!("Booking #{booking} was released at {}", clock(at, tz)),
            vec![
                format!(
                    "Your booking #{booking} was released at {}: it sat idle past the grace period.",
                    when(at, tz)
                ),
                format!("Cards: {gpus}."),
            ],
        ),
        Some(EventKind::UnbookedUse) => {
            let card = cards(
                &serde_json::json!({"gpus": [{"node": details["node"], "uuid": details["gpu_uuid"]}]}),
                reader,
            );
            let command = details["command"].as_str().unwrap_or("a process");
            let pid = details["pid"].as_u64().unwrap_or(0);
            let mut lines = vec![format!(
                "Your process {command} (pid {pid}) runs on {card}, which you have not booked."
            )];
            let subject = match time(details, "terminate_at") {
                Some(t) => {
                    lines.push(format!(
                        "It will be sent SIGTERM at {} ({} from now) unless you book the card or stop it.",
                        when(t, tz),
                        minutes((t - at).num_seconds().max(0))
                    ));
                    format!("{command} on {card} ends at {} unless booked", clock(t, tz))
                }
                None => {
                    lines.push("Book the card, or stop the process, so that others can rely on their bookings.".into());
                    format!("{command} runs on {card} without a booking")
                }
            };
            (subject, lines)
        }
        Some(EventKind::JobStarted) => (
            format!("Job #{job} ({job_name}) started at {}", clock(at, tz)),
            vec![
                format!("Your queue job #{job} ({job_name}) started at {}.", when(at, tz)),
                format!("Cards: {gpus}."),
            ],
        ),
        Some(kind @ (EventKind::JobFinished | EventKind::JobFailed | EventKind::JobTimedOut)) => {
            let how = details["how"].as_str().unwrap_or("it ended");
            let verb = match kind {
                EventKind::JobFinished => "finished",
                EventKind::JobFailed => "failed",
                _ => "reached its time limit",
            };
            let mut lines = vec![format!(
                "Your job #{job} ({job_name}) {verb} at {}: {how}.",
                when(at, tz)
            )];
            if let Some(message) = details["message"].as_str().filter(|m| !m.is_empty()) {
                lines.push(format!("Lanes says: {message}."));
            }
            (format!("Job #{job} ({job_name}) {verb}"), lines)
        }
        Some(EventKind::JobBookingEnding) => (
            format!("Job #{job} ({job_name}) is stopped at {}", clock(end, tz)),
            vec![
                format!(
                    "Your job #{job} ({job_name}) still runs, and its booking #{booking} ends at {}.",
                    when(end, tz)
                ),
                "The job gets SIGTERM then, and SIGKILL shortly after. Extend the booking to let it finish.".into(),
            ],
        ),
        Some(EventKind::LoanReclaimed) => (
            format!("Job #{job} ({job_name}) waits again: its borrowed cards were taken back"),
            vec![
                format!(
                    "Your preemptible job #{job} ({job_name}) ran on cards lent by an idle booking; their holder took them back at {}.",
                    when(at, tz)
                ),
                "The job waits in the queue again and starts once cards are free; resume from your last checkpoint.".into(),
            ],
        ),
        Some(EventKind::QuotaNear) => {
            let used = details["used_h"].as_f64().unwrap_or(0.0);
            let limit = details["limit_h"].as_f64().unwrap_or(0.0);
            (
                format!("{used:.1} of your {limit:.1} GPU-hours this week are booked"),
                vec![
                    format!("You have booked {used:.1} of your {limit:.1} GPU-hours for this week."),
                    "Bookings beyond the quota are refused until older ones leave the week.".into(),
                ],
            )
        }
        Some(EventKind::WeeklyDigest) => {
            let booked = details["booked_h"].as_f64().unwrap_or(0.0);
            let used = details["used_h"].as_f64().unwrap_or(0.0);
            let from = time(details, "from").unwrap_or(at);
            let share = if booked > 0.0 {
                format!(" ({:.0} % of what you booked)", 100.0 * used / booked)
            } else {
                String::new()
            };
            (
                format!(
                    "Your week from {}: {booked:.1} GPU-hours booked, {used:.1} used",
                    from.with_timezone(&tz).format("%-d %b")
                ),
                vec![
                    format!(
                        "In the week from {}, you booked {booked:.1} GPU-hours and your processes used {used:.1}{share}.",
                        when(from, tz)
                    ),
                    format!(
                        "Jobs run: {}. Energy: {:.2} kWh.",
                        details["jobs"].as_u64().unwrap_or(0),
                        details["energy_kwh"].as_f64().unwrap_or(0.0)
                    ),
                ],
            )
        }
        None => (
            "Test message".to_string(),
            vec![format!(
                "This is a test message from {}, sent at {}. If you read it, messages reach you here.",
                reader.lab,
                when(at, tz)
            )],
        ),
    };
    let subject = format!("[{}] {subject}", reader.lab);
    let mut text = format!("Hello {},\n\n", reader.name);
    for line in &lines {
        text.push_str(line);
        text.push('\n');
    }
    if !links.is_empty() {
        text.push_str("\nAnswer with one click (each link works once):\n");
        for (action, url) in links {
            text.push_str(&format!("  {}: {url}\n", action.label()));
        }
    }
    text.push_str(&format!(
        "\nOpen {}: {}\nChoose what you are told of on your account page: {}/account\n\n-- \n{} · sent by Lanes\n",
        reader.lab, reader.portal, reader.portal, reader.lab
    ));
    let mut html = format!(
        "<!DOCTYPE html><html><body style=\"font-family:system-ui,sans-serif;line-height:1.45;color:#1b1f24\">\
         <p>Hello {},</p>",
        esc(reader.name)
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
                esc(action.label())
            ));
        }
        html.push_str(
            "</p><p style=\"color:#57606a;font-size:90%\">Each link works once and expires.</p>",
        );
    }
    html.push_str(&format!(
        "<p><a href=\"{0}\">Open {1}</a> · <a href=\"{0}/account\">choose what you are told of</a></p>\
         <p style=\"color:#57606a;font-size:90%\">{1} · sent by Lanes</p></body></html>",
        html_escape::encode_double_quoted_attribute(reader.portal),
        esc(reader.lab)
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
        }
    }

    #[test]
    fn a_reminder_says_what_and_when_in_the_readers_zone_with_its_cards_named() {
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
