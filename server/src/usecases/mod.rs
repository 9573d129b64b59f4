//! Use cases: what a caller may ask of the service, each as one function that authorizes the
//! actor, validates the request, writes through the store (which audits in the same
//! transaction and emits the event) and returns a domain value. Handlers parse the request,
//! call one of these, and map the result; the terminal client's server side will call the same.

pub mod bookings;
pub mod jobs;

use crate::bookings::BookingError;
use crate::store::StoreError;

/// Why a use case did not happen: the actor may not, the thing is not there, the request is
/// refused by a rule, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum UseCaseError {
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unprocessable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<BookingError> for UseCaseError {
    fn from(e: BookingError) -> Self {
        UseCaseError::Store(StoreError::Refused(e))
    }
}
