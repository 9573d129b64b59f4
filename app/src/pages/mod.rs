//! One module per page.
pub mod dashboard;
pub mod login;
pub mod not_found;
