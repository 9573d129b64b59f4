//! One module per page.
pub mod dashboard;
pub mod not_found;
