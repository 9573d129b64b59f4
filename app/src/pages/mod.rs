//! One module per page.
pub mod account;
pub mod admin;
pub mod calendar;
pub mod dashboard;
pub mod enforcement;
pub mod history;
pub mod jobs;
pub mod login;
pub mod not_found;
pub mod queue;
pub mod quotas;
