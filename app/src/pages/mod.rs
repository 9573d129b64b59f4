//! One module per page (and the calendar's find-a-slot panel).
pub mod account;
pub mod admin;
pub mod calendar;
pub mod dashboard;
pub mod enforcement;
pub mod find_slot;
pub mod history;
pub mod jobs;
pub mod login;
pub mod not_found;
pub mod notifications;
pub mod queue;
pub mod quotas;
