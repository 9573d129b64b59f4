//! One module per page (and the calendar's find-a-slot panel).
pub mod account;
pub mod admin;
pub mod calendar;
pub mod chat_hook;
pub mod dashboard;
pub mod enforcement;
pub mod find_slot;
pub mod history;
pub mod jobs;
pub mod login;
pub mod not_found;
pub mod notifications;
pub mod queue;
pub mod queue_admin;
pub mod quotas;
pub mod statements;

/// The API answers the page at `path` reads as it opens, for the server to ask for before it
/// renders the page ([`crate::components::page_data`]); empty for pages that load in the
/// browser.
pub fn preloads(path: &str) -> Vec<String> {
    if path == "/login" {
        // "Sign in with NAME" is on the page as it arrives, before any script runs.
        use lanes_types::api::Endpoint;
        return vec![lanes_types::api::AuthMethods::PATH.to_string()];
    }
    admin::section_of(path)
        .and_then(admin::AdminSection::from_slug)
        .map(admin::AdminSection::reads)
        .unwrap_or_default()
}
