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

/// The pages loaded when visited: the browser's first load carries the dashboard (and the
/// login page) only; each of these is a chunk of the bundle fetched as its route opens
/// (`#[lazy_route]`, split by `cargo xtask site`). The server renders them as any other.
pub mod lazy {
    use leptos::prelude::*;
    use leptos_router::{lazy_route, LazyRoute};

    macro_rules! lazy_page {
        ($($route:ident => $page:path),* $(,)?) => {$(
            pub struct $route;

            #[lazy_route]
            impl LazyRoute for $route {
                fn data() -> Self {
                    $route
                }

                fn view(_this: Self) -> AnyView {
                    view! { <$page /> }.into_any()
                }
            }
        )*};
    }

    lazy_page! {
        Account => super::account::AccountPage,
        Admin => super::admin::AdminPage,
        Calendar => super::calendar::CalendarPage,
        Jobs => super::jobs::JobsPage,
        Queue => super::queue::QueuePage,
        History => super::history::HistoryPage,
        Usage => super::statements::UsagePage,
    }
}

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
