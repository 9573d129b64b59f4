//! The API's one error type: a status, a stable machine-readable code and a human message, as
//! JSON `{ "error": code, "message": text }`. Internal details go to the log, not the client.

use crate::bookings::BookingError;
use crate::usecases::Said;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lanes_app::i18n::i18n::td_string;
use lanes_app::i18n::Locale;
use lanes_types::api::ErrorBody;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed request: unreadable JSON, unknown fields, over-long values.
    #[error("{0}")]
    BadRequest(String),
    #[error("wrong username or password")]
    InvalidCredentials,
    #[error("log in first")]
    Unauthenticated,
    #[error("{0}")]
    Forbidden(Said),
    #[error("{0}")]
    NotFound(Said),
    #[error("{0}")]
    Conflict(Said),
    /// Well-formed but against the rules (a short password, an unknown group).
    #[error("{0}")]
    Unprocessable(Said),
    /// Against a named rule (a rule of slots or requests, or a quota): 422 with the rule in
    /// the body, said in the caller's language from the refusal's own values.
    #[error("{0}")]
    Refused(BookingError),
    /// Cards already taken: 409 with the cards and the bookings that hold them.
    #[error("{}", .0.message)]
    Taken(Box<ErrorBody>),
    #[error("too many failed logins; try again in {retry_after_secs} s")]
    TooManyRequests { retry_after_secs: u64 },
    /// Too many of one kind of request lately (test messages): 429, with when to retry.
    #[error("{message}; try again in {retry_after_secs} s")]
    SlowDown {
        message: String,
        retry_after_secs: u64,
    },
    /// The server cannot do this now (busy, or its database is gone): 503, with when to retry.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after_secs: u64,
    },
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::InvalidCredentials | ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unprocessable(_) | ApiError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Taken(_) => StatusCode::CONFLICT,
            ApiError::TooManyRequests { .. } | ApiError::SlowDown { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::InvalidCredentials => "invalid_credentials",
            ApiError::Unauthenticated => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Unprocessable(_) => "invalid",
            ApiError::Refused(BookingError::Quota(_)) => "quota_exceeded",
            ApiError::Refused(_) => "invalid",
            ApiError::Taken(_) => "conflict",
            ApiError::TooManyRequests { .. } | ApiError::SlowDown { .. } => "too_many_requests",
            ApiError::Unavailable { .. } => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match e {
            StoreError::Conflict(m) => ApiError::Conflict(m.into()),
            // Lost to other processes' bookings of the same cards again and again.
            e @ StoreError::Overlap(_) => ApiError::Conflict(e.to_string().into()),
            StoreError::Invalid(m) => ApiError::Unprocessable(m.into()),
            StoreError::Unavailable(m) => ApiError::Unavailable {
                message: m,
                retry_after_secs: 30,
            },
            StoreError::Refused(refusal) => refusal.into(),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<crate::usecases::UseCaseError> for ApiError {
    fn from(e: crate::usecases::UseCaseError) -> Self {
        use crate::usecases::UseCaseError;
        match e {
            UseCaseError::BadRequest(m) => ApiError::BadRequest(m),
            UseCaseError::InvalidCredentials => ApiError::InvalidCredentials,
            UseCaseError::Locked { retry_after_secs } => {
                ApiError::TooManyRequests { retry_after_secs }
            }
            UseCaseError::SlowDown {
                message,
                retry_after_secs,
            } => ApiError::SlowDown {
                message,
                retry_after_secs,
            },
            UseCaseError::Busy(message) => ApiError::Unavailable {
                message,
                retry_after_secs: 2,
            },
            UseCaseError::Internal(m) => ApiError::Internal(m),
            UseCaseError::Forbidden(m) => ApiError::Forbidden(m),
            UseCaseError::NotFound(m) => ApiError::NotFound(m),
            UseCaseError::Unprocessable(m) => ApiError::Unprocessable(m),
            UseCaseError::Store(e) => e.into(),
        }
    }
}

impl From<BookingError> for ApiError {
    fn from(e: BookingError) -> Self {
        match e {
            e @ (BookingError::Slot(_)
            | BookingError::Invalid { .. }
            | BookingError::Quota(_)
            | BookingError::BeyondPool { .. }) => ApiError::Refused(e),
            BookingError::Conflict {
                message,
                gpus,
                bookings,
                maintenance,
            } => ApiError::Taken(Box::new(ErrorBody {
                gpus,
                bookings,
                maintenance,
                ..ErrorBody::new("conflict", message)
            })),
            BookingError::NotFound => ApiError::NotFound(Said::NoSuchBooking),
        }
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(e: axum::extract::rejection::PathRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl ApiError {
    /// The message in `locale`: the `code` and `rule` stay as they are, only the words change.
    /// A sentence with no translation of its own (free text from deeper layers) is given as
    /// its code's sentence in that language, with the English detail after it.
    pub fn message_in(&self, locale: Locale) -> String {
        if locale == Locale::en {
            return self.to_string();
        }
        match self {
            ApiError::InvalidCredentials => td_string!(locale, api.invalid_credentials).into(),
            ApiError::Unauthenticated => td_string!(locale, api.unauthenticated).into(),
            ApiError::TooManyRequests { retry_after_secs } => {
                td_string!(locale, api.too_many_requests, seconds = *retry_after_secs)
            }
            ApiError::Unavailable {
                retry_after_secs, ..
            } => td_string!(locale, api.unavailable, seconds = *retry_after_secs),
            ApiError::SlowDown {
                retry_after_secs, ..
            } => td_string!(locale, api.slow_down, seconds = *retry_after_secs),
            ApiError::Internal(_) => td_string!(locale, api.internal).into(),
            ApiError::Refused(refusal) => refusal_in(locale, refusal)
                .unwrap_or_else(|| td_string!(locale, api.refused, detail = refusal.to_string())),
            ApiError::Taken(body) if !body.gpus.is_empty() => {
                let cards: Vec<&str> = body.gpus.iter().map(|g| g.uuid.as_str()).collect();
                td_string!(locale, api.taken, cards = cards.join(", "))
            }
            ApiError::Taken(body) => {
                td_string!(locale, api.conflict, detail = body.message.clone())
            }
            // A typed sentence whole; English text after its code's sentence.
            ApiError::NotFound(said) => said
                .said_in(locale)
                .unwrap_or_else(|| td_string!(locale, api.not_found, detail = said.to_string())),
            ApiError::Forbidden(said) => said
                .said_in(locale)
                .unwrap_or_else(|| td_string!(locale, api.forbidden, detail = said.to_string())),
            ApiError::Conflict(said) => said
                .said_in(locale)
                .unwrap_or_else(|| td_string!(locale, api.conflict, detail = said.to_string())),
            ApiError::BadRequest(detail) => {
                td_string!(locale, api.bad_request, detail = detail.clone())
            }
            ApiError::Unprocessable(said) => said
                .said_in(locale)
                .unwrap_or_else(|| td_string!(locale, api.refused, detail = said.to_string())),
        }
    }
}

/// A refusal's sentence in `locale`, from the values it names; `None` for a rule with no
/// sentence of its own.
fn refusal_in(locale: Locale, refusal: &BookingError) -> Option<String> {
    use crate::bookings::quota::Refusal;
    use crate::bookings::rules::InvalidSlot;
    let text = match refusal {
        BookingError::Slot(slot) => match slot {
            InvalidSlot::EndNotAfterStart => td_string!(locale, api.rule.end_after_start).into(),
            InvalidSlot::StartInPast => td_string!(locale, api.rule.start_not_in_past).into(),
            InvalidSlot::NotLonger => td_string!(locale, api.rule.extend_later).into(),
            InvalidSlot::NotExtendable => td_string!(locale, api.rule.extend_live_only).into(),
            InvalidSlot::BeyondHorizon(days) => td_string!(locale, api.rule.horizon, days = *days),
            InvalidSlot::OutOfRange => td_string!(locale, api.rule.time_range).into(),
        },
        BookingError::Quota(quota) => match quota {
            Refusal::BookingHours { hours, max } => td_string!(
                locale,
                api.rule.max_booking_hours,
                hours = format!("{hours:.1}"),
                max = *max
            ),
            Refusal::DaysAhead { days, max } => td_string!(
                locale,
                api.rule.max_days_ahead,
                days = format!("{days:.1}"),
                max = *max
            ),
            Refusal::Gpus {
                group: None,
                peak,
                at,
                max,
            } => td_string!(
                locale,
                api.rule.max_gpus_mine,
                peak = *peak,
                at = at.clone(),
                max = *max
            ),
            Refusal::Gpus {
                group: Some(group),
                peak,
                at,
                max,
            } => td_string!(
                locale,
                api.rule.max_gpus_group,
                group = group.clone(),
                peak = *peak,
                at = at.clone(),
                max = *max
            ),
            Refusal::GpuHours {
                group: None,
                hours,
                from,
                max,
            } => td_string!(
                locale,
                api.rule.gpu_hours_mine,
                hours = format!("{hours:.1}"),
                from = from.clone(),
                max = *max
            ),
            Refusal::GpuHours {
                group: Some(group),
                hours,
                from,
                max,
            } => td_string!(
                locale,
                api.rule.gpu_hours_group,
                group = group.clone(),
                hours = format!("{hours:.1}"),
                from = from.clone(),
                max = *max
            ),
            Refusal::Upcoming {
                group: None,
                upcoming,
                max,
            } => td_string!(
                locale,
                api.rule.max_upcoming_mine,
                upcoming = *upcoming,
                max = *max
            ),
            Refusal::Upcoming {
                group: Some(group),
                upcoming,
                max,
            } => td_string!(
                locale,
                api.rule.max_upcoming_group,
                group = group.clone(),
                upcoming = *upcoming,
                max = *max
            ),
        },
        BookingError::BeyondPool { asked, largest } => td_string!(
            locale,
            api.rule.beyond_pool,
            asked = *asked,
            largest = *largest
        ),
        BookingError::Invalid { .. } | BookingError::Conflict { .. } | BookingError::NotFound => {
            return None
        }
    };
    Some(text)
}

/// Refuses times beyond what the API accepts at all (422, rule `time_range`): every `from`
/// and `to` a query takes.
pub fn check_times(times: &[Option<chrono::DateTime<chrono::Utc>>]) -> Result<(), ApiError> {
    use crate::bookings::rules;
    if times.iter().flatten().all(|t| rules::is_sane_time(*t)) {
        Ok(())
    } else {
        Err(BookingError::from(rules::InvalidSlot::OutOfRange).into())
    }
}

/// `Query` whose rejections are API errors.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// `Path` whose rejections are API errors.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// `Json` whose rejections are API errors (JSON bodies, 400) instead of plain text.
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "request failed");
        }
        let message = self.message_in(super::language::current());
        let mut response = match &self {
            ApiError::Taken(body) => {
                let body = ErrorBody {
                    message,
                    ..(**body).clone()
                };
                (self.status(), Json(body)).into_response()
            }
            ApiError::Refused(refusal) => {
                let body = ErrorBody {
                    rule: refusal.rule(),
                    ..ErrorBody::new(self.code(), message)
                };
                (self.status(), Json(body)).into_response()
            }
            _ => (self.status(), Json(ErrorBody::new(self.code(), message))).into_response(),
        };
        if let ApiError::TooManyRequests { retry_after_secs }
        | ApiError::SlowDown {
            retry_after_secs, ..
        }
        | ApiError::Unavailable {
            retry_after_secs, ..
        } = self
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, retry_after_secs.into());
        }
        response
    }
}
