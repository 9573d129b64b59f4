//! A personal message's event, typed: one variant per kind, each with the facts its words need,
//! read from the details its notice carried (the same JSON the lab channel and webhooks get).
//! `render.rs` writes each variant with its own function; the one-click answers a message
//! offers are decided here, from the facts.

use chrono::{DateTime, Utc};
use lanes_types::booking::GpuRef;
use lanes_types::notify::{EventKind, LinkAction};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// A booking's facts, as reminders, the watchdog and the idle policy give them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct BookingFacts {
    pub booking_id: i64,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    pub gpus: Vec<GpuRef>,
    /// The queue job whose cards it holds, if it is one's (sized to the job: never extended).
    pub queue_job: Option<i64>,
}

/// A booking found idle: its facts, the policy's threshold and window, and when the policy
/// releases it (`None`: it does not).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct IdleFacts {
    #[serde(flatten)]
    pub booking: BookingFacts,
    pub threshold_pct: u64,
    pub window_s: i64,
    pub release_at: Option<DateTime<Utc>>,
}

/// A process on a card its owner did not book, and when the watchdog ends it (`None`: it
/// does not).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct UnbookedFacts {
    pub node: String,
    pub gpu_uuid: String,
    pub command: Option<String>,
    pub pid: u64,
    pub terminate_at: Option<DateTime<Utc>>,
}

/// A job's facts: which, in which booking, and (at its end) how it ended.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct JobFacts {
    pub job_id: i64,
    pub name: Option<String>,
    pub booking_id: Option<i64>,
    pub gpus: Vec<GpuRef>,
    pub end: Option<DateTime<Utc>>,
    /// How its process ended ("exit code 1").
    pub how: Option<String>,
    /// What Lanes has to say about it ("python4: not found"), in English.
    pub message: Option<String>,
    /// The same, typed: said in the reader's language.
    pub note: Option<lanes_types::job::JobNote>,
    /// The queue job whose cards its booking holds, if any.
    pub queue_job: Option<i64>,
}

/// A member's GPU-hours this week against their limit.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct QuotaFacts {
    pub used_h: f64,
    pub limit_h: f64,
}

/// A member's week before: booked and used GPU-hours, jobs, energy.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DigestFacts {
    pub from: Option<DateTime<Utc>>,
    pub booked_h: f64,
    pub used_h: f64,
    pub jobs: u64,
    pub energy_kwh: f64,
}

/// A group's month, for its admins.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct StatementFacts {
    pub month: String,
    pub group: String,
    pub booked_h: f64,
    pub used_h: f64,
    pub idle_share: Option<f64>,
    pub energy_kwh: f64,
    pub cost: Option<f64>,
    pub co2e_kg: Option<f64>,
    pub jobs: i64,
}

/// A failing card under a booking, and the move offered off it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FailingFacts {
    pub booking_id: i64,
    pub gpu: Option<GpuRef>,
    /// The findings in English words (with the Xid's meaning).
    pub reason: String,
    #[serde(rename = "move")]
    pub offer: Option<MoveOffer>,
}

/// The card a one-click move would take the booking to.
#[derive(Clone, Debug, Deserialize, PartialEq, serde::Serialize)]
pub struct MoveOffer {
    pub from: GpuRef,
    pub to: GpuRef,
}

/// How a job ended, for the words of its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEnd {
    Finished,
    Failed,
    TimedOut,
}

/// A personal message's event and its facts.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    BookingStartsSoon(BookingFacts),
    BookingEndsSoon(BookingFacts),
    BookingIdle(IdleFacts),
    BookingReleased(BookingFacts),
    UnbookedUse(UnbookedFacts),
    JobStarted(JobFacts),
    JobEnded(JobEnd, JobFacts),
    /// The booking a job runs in ends soon (its facts are the booking's and the job's).
    JobBookingEnding(JobFacts),
    LoanReclaimed(JobFacts),
    QuotaNear(QuotaFacts),
    WeeklyDigest(DigestFacts),
    CardFailing(FailingFacts),
    MonthlyStatement(StatementFacts),
    /// A member asked to use a new address: the link sent to it confirms it.
    ConfirmEmail(EmailFacts),
    /// A test message a member asked for.
    Test,
}

/// The address a member asked messages to go to.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct EmailFacts {
    pub address: String,
}

/// The event name of the message that confirms a member's new address (not a preference:
/// it goes to the new address whatever the member chose).
pub const CONFIRM_EMAIL: &str = "confirm_email";

/// Facts of type `T` from `details`; a fact missing or unreadable is its default (the
/// message then says less, never nothing).
fn facts<T: DeserializeOwned + Default>(details: &Value) -> T {
    serde_json::from_value(details.clone()).unwrap_or_default()
}

impl Event {
    /// The event a stored message names (a personal event's name, or anything else for a
    /// test message), with its facts.
    pub fn read(name: &str, details: &Value) -> Self {
        if name == CONFIRM_EMAIL {
            return Event::ConfirmEmail(facts(details));
        }
        let Some(kind) = EventKind::parse(name) else {
            return Event::Test;
        };
        match kind {
            EventKind::BookingStartsSoon => Event::BookingStartsSoon(facts(details)),
            EventKind::BookingEndsSoon => Event::BookingEndsSoon(facts(details)),
            EventKind::BookingIdle => Event::BookingIdle(facts(details)),
            EventKind::BookingReleased => Event::BookingReleased(facts(details)),
            EventKind::UnbookedUse => Event::UnbookedUse(facts(details)),
            EventKind::JobStarted => Event::JobStarted(facts(details)),
            EventKind::JobFinished => Event::JobEnded(JobEnd::Finished, facts(details)),
            EventKind::JobFailed => Event::JobEnded(JobEnd::Failed, facts(details)),
            EventKind::JobTimedOut => Event::JobEnded(JobEnd::TimedOut, facts(details)),
            EventKind::JobBookingEnding => Event::JobBookingEnding(facts(details)),
            EventKind::LoanReclaimed => Event::LoanReclaimed(facts(details)),
            EventKind::QuotaNear => Event::QuotaNear(facts(details)),
            EventKind::WeeklyDigest => Event::WeeklyDigest(facts(details)),
            EventKind::CardFailing => Event::CardFailing(facts(details)),
            EventKind::MonthlyStatement => Event::MonthlyStatement(facts(details)),
        }
    }

    /// The one-click answers its message offers. A queue job's booking is sized to the job's
    /// time limit: it is never extended by link.
    pub fn actions(&self) -> Vec<LinkAction> {
        match self {
            Event::BookingStartsSoon(_) => vec![LinkAction::Release],
            Event::BookingEndsSoon(b) if b.queue_job.is_none() => {
                vec![LinkAction::ExtendHour, LinkAction::Release]
            }
            Event::BookingIdle(_) => vec![LinkAction::StillUsing, LinkAction::Release],
            Event::JobStarted(_) => vec![LinkAction::CancelJob],
            Event::CardFailing(f) if f.offer.is_some() => vec![LinkAction::MoveCard],
            Event::ConfirmEmail(_) => vec![LinkAction::ConfirmEmail],
            Event::JobBookingEnding(j) if j.queue_job.is_none() => {
                vec![LinkAction::ExtendHour, LinkAction::CancelJob]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_reads_its_own_facts_and_a_missing_fact_is_its_default() {
        let details = json!({
            "booking_id": 4, "threshold_pct": 5, "window_s": 1800,
            "release_at": "2026-12-02T10:15:00Z",
            "gpus": [{"node": "a", "uuid": "GPU-1"}],
        });
        match Event::read("booking_idle", &details) {
            Event::BookingIdle(idle) => {
                assert_eq!(idle.booking.booking_id, 4);
                assert_eq!(idle.booking.gpus.len(), 1);
                assert_eq!((idle.threshold_pct, idle.window_s), (5, 1800));
                assert!(idle.release_at.is_some());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Event::read("job_failed", &json!({"job_id": 9})),
            Event::JobEnded(
                JobEnd::Failed,
                JobFacts {
                    job_id: 9,
                    ..JobFacts::default()
                }
            )
        );
        assert_eq!(Event::read("test", &json!({})), Event::Test);
    }

    #[test]
    fn answers_fit_the_event_and_a_queue_booking_is_never_extended_by_link() {
        let idle = Event::read("booking_idle", &json!({"booking_id": 4}));
        assert_eq!(
            idle.actions(),
            vec![LinkAction::StillUsing, LinkAction::Release]
        );
        let ends = Event::read("booking_ends_soon", &json!({"booking_id": 4}));
        assert!(ends.actions().contains(&LinkAction::ExtendHour));
        let queued = Event::read("booking_ends_soon", &json!({"queue_job": 3}));
        assert!(!queued.actions().contains(&LinkAction::ExtendHour));
        let job = Event::read("job_booking_ending", &json!({"job_id": 2, "queue_job": 2}));
        assert_eq!(job.actions(), Vec::<LinkAction>::new());
        assert!(Event::Test.actions().is_empty());
    }
}
