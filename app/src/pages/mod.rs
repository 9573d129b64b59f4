//! One module per page.
pub mod account;
pub mod admin;
pub mod dashboard;
pub mod login;
pub mod not_found;
