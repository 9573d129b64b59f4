//! The words of a personal message: a subject that says what and when (in the reader's time
//! zone, its UTC offset named), a plain-text body and an HTML one with the same content, the
//! lab's name, and the one-click answers that fit the event. Plain functions of the facts a
//! notice carries.

use super::event::{
    BookingFacts, DigestFacts, Event, FailingFacts, IdleFacts, JobEnd, JobFacts, QuotaFacts,
    StatementFacts, UnbookedFacts,
};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use html_escape::encode_text as esc;
use lanes_app::i18n::Locale;
use lanes_types::booking::GpuRef;
use lanes_types::notify::LinkAction;

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
    /// The body's own lines (no greeting, links or signature), for chats.
    pub lines: Vec<String>,
}

/// A message's text in the reader's language: `say!(reader, mail.key, name = value)`.
macro_rules! say {
    ($reader:expr, $($key:tt)*) => {
        lanes_app::i18n::i18n::td_string!($reader.locale, $($key)*).to_string()
    };
}

/// A time for the reader: "Wed 2 Dec 17:00 CET (UTC+01:00)".
fn when(t: DateTime<Utc>, reader: &Reader<'_>) -> String {
    lanes_app::dates::when_in(t, reader.tz, reader.locale)
}

/// `t` with a pattern from the translation files, day and month names (`%a %b`) in the
/// reader's language (the pages' names).
fn dated(t: DateTime<Tz>, pattern: &str, reader: &Reader<'_>) -> String {
    lanes_app::dates::dated_in(t, pattern, reader.locale)
}

/// Only the clock, for subjects: "17:00 CET".
fn clock(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%H:%M %Z").to_string()
}

/// "GPU 0 · node-a, GPU 1 · node-a" for these cards.
fn cards(gpus: &[GpuRef], reader: &Reader<'_>) -> String {
    let names = reader.cards.names(gpus);
    if names.is_empty() {
        say!(reader, mail.no_cards)
    } else {
        names.join(", ")
    }
}

/// A job's name, or "a job" in the reader's words.
fn job_name(job: &JobFacts, r: &Reader<'_>) -> String {
    job.name.clone().unwrap_or_else(|| say!(r, mail.a_job))
}

fn minutes(seconds: i64, reader: &Reader<'_>) -> String {
    lanes_app::dates::duration_in(seconds, reader.locale)
}

/// A one-click answer's words.
pub fn action_label(action: LinkAction, reader: &Reader<'_>) -> String {
    match action {
        LinkAction::ExtendHour => say!(reader, mail.extend_hour),
        LinkAction::Release => say!(reader, mail.release_now),
        LinkAction::StillUsing => say!(reader, mail.still_using),
        LinkAction::CancelJob => say!(reader, mail.cancel_job),
        LinkAction::ConfirmEmail => say!(reader, mail.confirm_email),
        LinkAction::MoveCard => say!(reader, mail.move_card),
    }
}

/// The portal link's words: "Open Lanes".
pub fn open_label(reader: &Reader<'_>) -> String {
    say!(reader, mail.open_link, lab = reader.lab)
}

/// A message's subject (without the lab's name) and its lines.
type Said = (String, Vec<String>);

/// The message for `event` with its links: each event's words from its own function below,
/// in the frame every message shares (greeting, answers, links to the portal, signature).
pub fn render(
    event: &Event,
    at: DateTime<Utc>,
    reader: &Reader<'_>,
    links: &[(LinkAction, String)],
) -> Message {
    let r = reader;
    let (subject, lines) = match event {
        Event::BookingStartsSoon(b) => starts_soon(b, at, r),
        Event::BookingEndsSoon(b) => ends_soon(b, at, r),
        Event::BookingIdle(idle) => idle_booking(idle, at, r),
        Event::BookingReleased(b) => released(b, at, r),
        Event::UnbookedUse(u) => unbooked(u, at, r),
        Event::JobStarted(job) => job_started(job, at, r),
        Event::JobEnded(how, job) => job_ended(*how, job, at, r),
        Event::JobBookingEnding(job) => job_booking_ending(job, at, r),
        Event::LoanReclaimed(job) => reclaimed(job, at, r),
        Event::QuotaNear(quota) => quota_near(quota, r),
        Event::WeeklyDigest(week) => digest(week, at, r),
        Event::CardFailing(failing) => card_failing(failing, r),
        Event::MonthlyStatement(facts) => statement(facts, r),
        Event::ConfirmEmail(email) => (
            say!(r, mail.confirm_email_subject),
            vec![say!(
                r,
                mail.confirm_email_line,
                lab = reader.lab,
                address = email.address.clone()
            )],
        ),
        Event::Test => (
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
        lines,
    }
}

fn starts_soon(b: &BookingFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let (start, end) = (b.start.unwrap_or(at), b.end.unwrap_or(at));
    let booking = b.booking_id;
    (
        say!(r, mail.starts_subject, booking, at = clock(start, r.tz)),
        vec![
            say!(r, mail.starts_line, booking, at = when(start, r)),
            say!(r, mail.cards_line, cards = cards(&b.gpus, r)),
            say!(r, mail.ends_at_line, at = when(end, r)),
            say!(r, mail.release_if_unneeded),
        ],
    )
}

fn ends_soon(b: &BookingFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let end = b.end.unwrap_or(at);
    let booking = b.booking_id;
    (
        say!(r, mail.ends_subject, booking, at = clock(end, r.tz)),
        vec![
            say!(r, mail.ends_line, booking, at = when(end, r)),
            say!(r, mail.cards_line, cards = cards(&b.gpus, r)),
            say!(r, mail.stopped_at_end),
        ],
    )
}

fn idle_booking(idle: &IdleFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let booking = idle.booking.booking_id;
    let mut lines = vec![
        say!(
            r,
            mail.idle_line,
            booking,
            pct = idle.threshold_pct,
            window = minutes(idle.window_s, r)
        ),
        say!(r, mail.cards_line, cards = cards(&idle.booking.gpus, r)),
    ];
    let subject = match idle.release_at {
        Some(t) => {
            lines.push(say!(
                r,
                mail.idle_release_line,
                at = when(t, r),
                left = minutes((t - at).num_seconds().max(0), r)
            ));
            say!(r, mail.idle_release_subject, booking, at = clock(t, r.tz))
        }
        None => {
            lines.push(say!(r, mail.idle_no_release));
            say!(r, mail.idle_subject, booking)
        }
    };
    (subject, lines)
}

fn released(b: &BookingFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let booking = b.booking_id;
    (
        say!(r, mail.released_subject, booking, at = clock(at, r.tz)),
        vec![
            say!(r, mail.released_line, booking, at = when(at, r)),
            say!(r, mail.cards_line, cards = cards(&b.gpus, r)),
        ],
    )
}

fn unbooked(u: &UnbookedFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let card = cards(
        &[GpuRef {
            node: u.node.clone(),
            uuid: u.gpu_uuid.clone(),
        }],
        r,
    );
    let command = u.command.clone().unwrap_or_else(|| say!(r, mail.a_process));
    let mut lines = vec![say!(
        r,
        mail.unbooked_line,
        command = command.clone(),
        pid = u.pid,
        card = card.clone()
    )];
    let subject = match u.terminate_at {
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
                at = clock(t, r.tz)
            )
        }
        None => {
            lines.push(say!(r, mail.unbooked_no_term));
            say!(r, mail.unbooked_subject, command, card)
        }
    };
    (subject, lines)
}

fn job_started(job: &JobFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let (id, name) = (job.job_id, job_name(job, r));
    (
        say!(
            r,
            mail.job_started_subject,
            job = id,
            name = name.clone(),
            at = clock(at, r.tz)
        ),
        vec![
            say!(r, mail.job_started_line, job = id, name, at = when(at, r)),
            say!(r, mail.cards_line, cards = cards(&job.gpus, r)),
        ],
    )
}

fn job_ended(how: JobEnd, job: &JobFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let (id, name) = (job.job_id, job_name(job, r));
    let ended = job.how.clone().unwrap_or_else(|| say!(r, mail.it_ended));
    let verb = match how {
        JobEnd::Finished => say!(r, mail.verb_finished),
        JobEnd::Failed => say!(r, mail.verb_failed),
        JobEnd::TimedOut => say!(r, mail.verb_timed_out),
    };
    let mut lines = vec![say!(
        r,
        mail.job_ended_line,
        job = id,
        name = name.clone(),
        verb = verb.clone(),
        at = when(at, r),
        how = ended
    )];
    // The typed note in the reader's words; an older notice's English words as they came.
    let message = match &job.note {
        Some(note) => Some(lanes_app::i18n::job_note_in(note, r.locale, |t| when(t, r))),
        None => job.message.clone(),
    };
    if let Some(message) = message.filter(|m| !m.is_empty()) {
        lines.push(say!(r, mail.lanes_says, message));
    }
    (say!(r, mail.job_ended_subject, job = id, name, verb), lines)
}

fn job_booking_ending(job: &JobFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let (id, name) = (job.job_id, job_name(job, r));
    let end = job.end.unwrap_or(at);
    (
        say!(
            r,
            mail.job_booking_subject,
            job = id,
            name = name.clone(),
            at = clock(end, r.tz)
        ),
        vec![
            say!(
                r,
                mail.job_booking_line,
                job = id,
                name,
                booking = job.booking_id.unwrap_or(0),
                at = when(end, r)
            ),
            say!(r, mail.job_booking_kill),
        ],
    )
}

fn reclaimed(job: &JobFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let (id, name) = (job.job_id, job_name(job, r));
    // Preempted by the least-attained-service policy, not by a holder taking cards back.
    if matches!(
        job.note,
        Some(lanes_types::job::JobNote::Requeued { made_way: true, .. })
    ) {
        return (
            say!(r, mail.made_way_subject, job = id, name = name.clone()),
            vec![
                say!(r, mail.made_way_line, job = id, name, at = when(at, r)),
                say!(r, mail.reclaimed_wait),
            ],
        );
    }
    (
        say!(r, mail.reclaimed_subject, job = id, name = name.clone()),
        vec![
            say!(r, mail.reclaimed_line, job = id, name, at = when(at, r)),
            say!(r, mail.reclaimed_wait),
        ],
    )
}

fn card_failing(f: &FailingFacts, r: &Reader<'_>) -> Said {
    let card = cards(f.gpu.as_slice(), r);
    let next = match &f.offer {
        Some(offer) => say!(
            r,
            mail.failing_move,
            card = cards(std::slice::from_ref(&offer.to), r)
        ),
        None => say!(r, mail.failing_no_move),
    };
    (
        say!(
            r,
            mail.failing_subject,
            booking = f.booking_id,
            card = card.clone()
        ),
        vec![
            say!(
                r,
                mail.failing_line,
                booking = f.booking_id,
                card,
                reason = f.reason.clone()
            ),
            next,
        ],
    )
}

fn quota_near(quota: &QuotaFacts, r: &Reader<'_>) -> Said {
    let used = format!("{:.1}", quota.used_h);
    let limit = format!("{:.1}", quota.limit_h);
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

fn statement(s: &StatementFacts, r: &Reader<'_>) -> Said {
    let idle = s
        .idle_share
        .map(|x| format!("{:.0} %", x * 100.0))
        .unwrap_or_else(|| "—".into());
    let money = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into());
    (
        say!(
            r,
            mail.statement_subject,
            group = s.group.clone(),
            month = s.month.clone()
        ),
        vec![
            say!(
                r,
                mail.statement_line,
                group = s.group.clone(),
                month = s.month.clone(),
                booked = format!("{:.1}", s.booked_h),
                used = format!("{:.1}", s.used_h),
                idle,
                energy = format!("{:.1}", s.energy_kwh),
                jobs = s.jobs.to_string()
            ),
            say!(
                r,
                mail.statement_cost,
                cost = money(s.cost),
                co2e = s
                    .co2e_kg
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "—".into())
            ),
            say!(
                r,
                mail.statement_whole,
                url = format!("{}/admin/statements", r.portal)
            ),
        ],
    )
}

fn digest(week: &DigestFacts, at: DateTime<Utc>, r: &Reader<'_>) -> Said {
    let from = week.from.unwrap_or(at);
    let share = if week.booked_h > 0.0 {
        say!(
            r,
            mail.digest_share,
            pct = format!("{:.0}", 100.0 * week.used_h / week.booked_h)
        )
    } else {
        String::new()
    };
    let (booked, used) = (
        format!("{:.1}", week.booked_h),
        format!("{:.1}", week.used_h),
    );
    (
        say!(
            r,
            mail.digest_subject,
            from = dated(from.with_timezone(&r.tz), &say!(r, mail.digest_day), r),
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
                jobs = week.jobs,
                kwh = format!("{:.2}", week.energy_kwh)
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
        let m = render(
            &Event::read("booking_starts_soon", &details),
            at,
            &reader,
            &links,
        );
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
            &Event::read("booking_starts_soon", &details),
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
            &Event::read("booking_starts_soon", &details),
            at,
            &reader(&cards, chrono_tz::UTC),
            &[],
        );
        assert_eq!(utc.subject, "[Vision Lab] Booking #12 starts at 16:00 UTC");
        assert!(!utc.text.contains("one click"));
    }

    #[test]
    fn a_job_that_made_way_is_told_so_and_not_that_a_holder_took_cards_back() {
        let cards = lanes_types::CardIndex::default();
        let at = DateTime::parse_from_rfc3339("2026-12-02T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let requeued = |made_way: bool| {
            let note = lanes_types::job::JobNote::Requeued {
                at,
                exit_code: Some(0),
                signal: None,
                made_way,
            };
            let details = json!({ "job_id": 7, "name": "train", "note": note });
            render(
                &Event::read("loan_reclaimed", &details),
                at,
                &reader(&cards, chrono_tz::UTC),
                &[],
            )
        };
        let made_way = requeued(true);
        assert!(
            made_way.subject.contains("made way"),
            "{}",
            made_way.subject
        );
        assert!(made_way.text.contains("less GPU time"), "{}", made_way.text);
        assert!(!made_way.text.contains("holder"), "{}", made_way.text);
        let reclaimed = requeued(false);
        assert!(
            reclaimed.text.contains("holder took them back"),
            "{}",
            reclaimed.text
        );
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
            &Event::read("booking_idle", &details),
            at,
            &reader(&cards, chrono_tz::UTC),
            &[],
        );
        assert!(m.subject.contains("released at 10:15 UTC unless used"));
        assert!(m.text.contains("(15 min from now)"), "{}", m.text);
    }
}
