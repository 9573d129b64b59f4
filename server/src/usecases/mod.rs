//! Use cases: what a caller may ask of the service, each as one function that authorizes the
//! actor, validates the request, writes through the store (which audits in the same
//! transaction and emits the event) and returns a domain value. Handlers parse the request,
//! call one of these, and map the result; the terminal client's server side will call the same.

pub mod accounts;
pub mod bookings;
pub mod directory;
pub mod health;
pub mod jobs;
pub mod notify;
pub mod queue;
pub mod said;
pub mod sessions;
pub mod settings;

pub use said::Said;

use crate::bookings::BookingError;
use crate::store::StoreError;

/// Why a use case did not happen: the request is malformed, the actor may not, the thing is
/// not there, the request is refused by a rule, the server is busy, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum UseCaseError {
    /// Malformed: over-long values and the like.
    #[error("{0}")]
    BadRequest(String),
    #[error("wrong username or password")]
    InvalidCredentials,
    /// Too many failed logins for this account or address.
    #[error("too many failed logins; try again in {retry_after_secs} s")]
    Locked { retry_after_secs: u64 },
    #[error("{0}")]
    Forbidden(Said),
    #[error("{0}")]
    NotFound(Said),
    #[error("{0}")]
    Unprocessable(Said),
    /// Too many of one kind of request lately (429).
    #[error("{message}; try again in {retry_after_secs} s")]
    SlowDown {
        message: String,
        retry_after_secs: u64,
    },
    /// Too much work at once; worth retrying in a moment.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<crate::accounts::InvalidAccount> for UseCaseError {
    fn from(e: crate::accounts::InvalidAccount) -> Self {
        UseCaseError::Unprocessable(e.to_string().into())
    }
}

impl From<crate::accounts::password::PasswordError> for UseCaseError {
    fn from(e: crate::accounts::password::PasswordError) -> Self {
        use crate::accounts::password::PasswordError;
        match e {
            PasswordError::Hash(m) => UseCaseError::Internal(m),
            other => UseCaseError::Unprocessable(other.to_string().into()),
        }
    }
}

impl From<BookingError> for UseCaseError {
    fn from(e: BookingError) -> Self {
        UseCaseError::Store(StoreError::Refused(e))
    }
}

/// Admins only.
pub fn require_admin(actor: &lanes_types::account::User) -> Result<(), UseCaseError> {
    if actor.is_admin() {
        Ok(())
    } else {
        Err(UseCaseError::Forbidden(Said::OnlyAdmins))
    }
}

/// Whose records a listing shows `viewer`: admins see anyone's (`username`, or everyone's when
/// it is `None`), others only their own whatever they ask. `None`: no such user, so nothing.
pub async fn listing_owner(
    store: &crate::store::Store,
    viewer: &lanes_types::account::User,
    username: Option<&str>,
) -> Result<Option<Option<i64>>, UseCaseError> {
    Ok(match (username, viewer.is_admin()) {
        (Some(name), true) => store
            .accounts()
            .by_username(name)
            .await?
            .map(|u| Some(u.id)),
        (None, true) => Some(None),
        (_, false) => Some(Some(viewer.id)),
    })
}
