//! The bar on top of every signed-in page: where you are, where you can go, who you are. Who
//! is looking comes with the page ([`viewer`]), so nothing here waits: no page's stream
//! depends on a task finishing.

use crate::components::clock::ZoneBadge;
use crate::components::page_data::viewer;
use lanes_types::account::User;
use leptos::prelude::*;

#[component]
pub fn TopBar(
    /// Page-specific items, such as the live-link badge of the dashboard.
    #[prop(optional)]
    children: Option<Children>,
) -> impl IntoView {
    view! {
        <header class="topbar">
            <a href="/" class="brand">
                <h1>{tr!(topbar.lanes)}</h1>
            </a>
            <nav class="nav">
                <a href="/">{tr!(topbar.dashboard)}</a>
                <a href="/calendar">{tr!(topbar.calendar)}</a>
                <a href="/jobs">{tr!(topbar.jobs)}</a>
                <a href="/queue">{tr!(topbar.queue)}</a>
                <a href="/history">{tr!(topbar.history)}</a>
                {viewer()
                    .filter(User::is_admin)
                    .map(|_| view! { <a href="/admin">{tr!(topbar.admin)}</a> })}
            </nav>
            <span class="spacer"></span>
            <ZoneBadge />
            <crate::components::language::LanguageSwitch />
            {children.map(|c| c())}
            {match viewer() {
                Some(user) => {
                    view! {
                        <a href="/account" class="whoami" data-testid="whoami">
                            {user.display_name}
                        </a>
                        <form method="post" action="/auth/logout" class="logout">
                            <button type="submit">{tr!(topbar.log_out)}</button>
                        </form>
                    }
                        .into_any()
                }
                None => view! { <a href="/login" class="login-link">{tr!(topbar.log_in)}</a> }.into_any(),
            }}
        </header>
    }
    .into_any()
}

/// A page for logged-in users: the top bar, then `body` for the viewer, or `absent` (a line
/// asking to log in) when nobody is.
#[component]
pub fn MemberPage<F, V>(absent: &'static str, body: F) -> impl IntoView
where
    F: FnOnce(User) -> V,
    V: IntoView + 'static,
{
    view! {
        <TopBar />
        <main class="page">
            {match viewer() {
                Some(me) => body(me).into_any(),
                None => view! { <p class="page error">{absent}</p> }.into_any(),
            }}
        </main>
    }
    .into_any()
}
