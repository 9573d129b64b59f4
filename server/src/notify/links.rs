//! One-click answers in messages. A link is a 256-bit random secret, kept only as its SHA-256
//! hash beside what it may do: one action, on one booking or job, for one member, until it
//! expires, once. Anything else (an altered secret, a second use, a late one) finds no row it
//! may act on. This does what a signed link does, and more: a signature alone cannot be used up
//! or revoked, and needs a key to keep and rotate.
//!
//! Opening a link shows what it would do; the page's button does it. Mail scanners and link
//! previews open every link in a message, and must not release a booking by doing so.

use super::render;
use crate::store::{Claimed, Link, NewLink, Store, StoreError};
use chrono::{DateTime, Utc};
use lanes_types::notify::{EventKind, LinkAction, NotifySettings};

/// Makes the links a message offers, replacing those of an earlier attempt at it; their URLs.
pub async fn mint(
    store: &Store,
    message: &Claimed,
    user_id: i64,
    portal: &str,
    settings: &NotifySettings,
    now: DateTime<Utc>,
) -> Result<Vec<(LinkAction, String)>, StoreError> {
    let Some(kind) = EventKind::parse(&message.event) else {
        return Ok(Vec::new());
    };
    let booking_id = message.details["booking_id"].as_i64();
    let job_id = message.details["job_id"].as_i64();
    let expires_at = now + chrono::Duration::hours(i64::from(settings.link_hours));
    let mut links = Vec::new();
    let mut urls = Vec::new();
    for action in render::actions(kind, &message.details) {
        let (booking_id, job_id) = match action {
            LinkAction::CancelJob => (None, job_id),
            _ => (booking_id, None),
        };
        if booking_id.is_none() && job_id.is_none() {
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
            expires_at,
        });
        urls.push((action, format!("{portal}/act/{secret}")));
    }
    store.replace_links(message.id, &links, now).await?;
    Ok(urls)
}

/// Why a link does nothing.
#[derive(Debug)]
pub enum Refused {
    /// No such link: mistyped, altered, or never made.
    Unknown,
    Used {
        at: DateTime<Utc>,
        outcome: Option<String>,
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
    let link = store.link(&hash).await?.ok_or(Refused::Unknown)?;
    if let Some(at) = link.used_at {
        return Err(Refused::Used {
            at,
            outcome: link.outcome.clone(),
        });
    }
    if link.expires_at <= now {
        return Err(Refused::Expired(link.expires_at));
    }
    Ok(link)
}
