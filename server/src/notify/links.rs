//! One-click answers in messages. A link is a 256-bit random secret, kept only as its SHA-256
//! hash beside what it may do: one action, on one booking or job, for one member, until it
//! expires, once. Anything else (an altered secret, a second use, a late one) finds no row it
//! may act on. This does what a signed link does, and more: a signature alone cannot be used up
//! or revoked, and needs a key to keep and rotate.
//!
//! Opening a link shows what it would do; the page's button does it. Mail scanners and link
//! previews open every link in a message, and must not release a booking by doing so.

use super::event::Event;
use crate::store::{Claimed, Link, NewLink, Store, StoreError};
use chrono::{DateTime, Utc};
use lanes_types::coded::Coded;
use lanes_types::notify::{LinkAction, NotifySettings};

/// Makes the links a message offers, replacing those of an earlier attempt at it; their URLs.
pub async fn mint(
    store: &Store,
    message: &Claimed,
    user_id: i64,
    portal: &str,
    settings: &NotifySettings,
    now: DateTime<Utc>,
) -> Result<Vec<(LinkAction, String)>, StoreError> {
    let booking_id = message.details["booking_id"].as_i64();
    let job_id = message.details["job_id"].as_i64();
    let expires_at = now + chrono::Duration::hours(i64::from(settings.link_hours));
    let mut links = Vec::new();
    let mut urls = Vec::new();
    for action in Event::read(&message.event, &message.details).actions() {
        let email = message.details["address"].as_str().map(str::to_string);
        let (booking_id, job_id, email) = match action {
            LinkAction::CancelJob => (None, job_id, None),
            LinkAction::ConfirmEmail => (None, None, email),
            _ => (booking_id, None, None),
        };
        let detail = match action {
            LinkAction::MoveCard => match message.details.get("move") {
                Some(offer) if !offer.is_null() => Some(offer.to_string()),
                _ => continue,
            },
            _ => None,
        };
        if booking_id.is_none() && job_id.is_none() && email.is_none() {
            continue;
        }
        let (secret, token_hash) = crate::accounts::session::new_secret()
            .map_err(|e| StoreError::Database(format!("no randomness for a link: {e}")))?;
        links.push(NewLink {
            token_hash,
            user_id,
            action,
            booking_id,
            job_id,
            email,
            detail,
            expires_at,
        });
        urls.push((action, format!("{portal}/act/{secret}")));
    }
    store.links().replace(message.id, &links, now).await?;
    Ok(urls)
}

/// What a used link did, as stored with it (a code and its values, not words): said in the
/// language of whoever opens the link again.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "done", rename_all = "snake_case")]
pub enum Outcome {
    JobCancelled {
        job: i64,
        title: String,
    },
    Extended {
        booking: i64,
        end: DateTime<Utc>,
    },
    Cancelled {
        booking: i64,
    },
    Released {
        booking: i64,
        at: DateTime<Utc>,
    },
    InUse {
        booking: i64,
    },
    EmailConfirmed {
        address: String,
    },
    Moved {
        booking: i64,
        /// The card's name ("GPU 2 · node-a") when it moved.
        to: String,
    },
    /// Words an older Lanes stored instead.
    #[serde(skip)]
    Said(String),
}

/// Stored as a code; older rows hold words.
impl Coded for Outcome {
    fn words(&self) -> Option<&str> {
        match self {
            Outcome::Said(words) => Some(words),
            _ => None,
        }
    }

    fn from_words(words: &str) -> Self {
        Outcome::Said(words.to_string())
    }
}

impl Outcome {
    /// In `locale`'s words, times in `tz`.
    pub fn words(&self, tz: chrono_tz::Tz, locale: lanes_app::i18n::Locale) -> String {
        use lanes_app::i18n::i18n::td_string;
        let when = |t| lanes_app::dates::when_in(t, tz, locale);
        match self {
            Outcome::JobCancelled { job, title } => {
                td_string!(locale, link.job_cancelled, id = *job, title = title.clone())
            }
            Outcome::Extended { booking, end } => {
                td_string!(locale, link.extended, id = *booking, at = when(*end))
            }
            Outcome::Cancelled { booking } => td_string!(locale, link.cancelled, id = *booking),
            Outcome::Released { booking, at } => {
                td_string!(locale, link.released, id = *booking, at = when(*at))
            }
            Outcome::InUse { booking } => td_string!(locale, link.in_use, id = *booking),
            Outcome::EmailConfirmed { address } => {
                td_string!(locale, link.email_confirmed, address = address.clone())
            }
            Outcome::Moved { booking, to } => {
                td_string!(locale, link.moved, id = *booking, to = to.clone())
            }
            Outcome::Said(words) => words.clone(),
        }
    }
}

/// Why a link does nothing.
#[derive(Debug)]
pub enum Refused {
    /// No such link: mistyped, altered, or never made.
    Unknown,
    Used {
        at: DateTime<Utc>,
        outcome: Option<Outcome>,
    },
    Expired(DateTime<Utc>),
    /// Its member may not do this any more (disabled), or the thing is gone.
    Gone(String),
    Store(StoreError),
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Self {
        Refused::Store(e)
    }
}

/// The link `secret` names, if it may still act.
pub async fn check(store: &Store, secret: &str, now: DateTime<Utc>) -> Result<Link, Refused> {
    // Every secret is 64 hex digits; anything else is not worth a query.
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refused::Unknown);
    }
    let hash = crate::accounts::session::hash_secret(secret);
    let link = store.links().get(&hash).await?.ok_or(Refused::Unknown)?;
    if let Some(at) = link.used_at {
        return Err(Refused::Used {
            at,
            outcome: link.outcome.as_deref().map(Outcome::read),
        });
    }
    if link.expires_at <= now {
        return Err(Refused::Expired(link.expires_at));
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_is_stored_as_a_code_and_said_in_each_language() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let done = Outcome::Released { booking: 7, at };
        let stored = done.code();
        assert!(stored.contains("\"done\":\"released\""), "{stored}");
        assert_eq!(Outcome::read(&stored), done);
        let tz = chrono_tz::UTC;
        let en = done.words(tz, lanes_app::i18n::Locale::en);
        let zh = done.words(tz, lanes_app::i18n::Locale::zh);
        assert!(en.contains('7') && zh.contains('7'), "{en} / {zh}");
        assert_ne!(en, zh);
        // What an older Lanes stored reads back as it was.
        let old = Outcome::read("booking #7 released");
        assert_eq!(
            old.words(tz, lanes_app::i18n::Locale::zh),
            "booking #7 released"
        );
    }
}
