//! The bar on top of every signed-in page: where you are, where you can go, who you are.

use crate::components::clock::ZoneBadge;
use lanes_types::account::User;
use leptos::prelude::*;

/// Who is looking, loaded once per page from the server (`None`: an anonymous viewer).
#[derive(Clone, Copy)]
pub struct ViewerResource(pub Resource<Result<Option<User>, ServerFnError>>);

impl ViewerResource {
    pub fn provide() {
        let viewer = Resource::new(|| (), |_| crate::api::get_viewer());
        provide_context(ViewerResource(viewer));
    }
}

/// The logged-in user, once known; `None` for anonymous viewers or when it cannot be loaded.
pub async fn current_viewer() -> Option<User> {
    let ViewerResource(viewer) = expect_context::<ViewerResource>();
    viewer.await.ok().flatten()
}

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
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        current_viewer()
                            .await
                            .filter(User::is_admin)
                            .map(|_| view! { <a href="/admin">{tr!(topbar.admin)}</a> })
                    })}
                </Suspense>
            </nav>
            <span class="spacer"></span>
            <ZoneBadge />
            <crate::components::language::LanguageSwitch />
            {children.map(|c| c())}
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    match current_viewer().await {
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
                    }
                })}
            </Suspense>
        </header>
    }
    .into_any()
}

/// A page for logged-in users: the top bar, then `body` for the viewer, or `absent` (a line
/// asking to log in) when nobody is.
#[component]
pub fn MemberPage<F, V>(absent: &'static str, body: F) -> impl IntoView
where
    F: Fn(User) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    view! {
        <TopBar />
        <main class="page">
            <Suspense fallback=|| view! { <p class="muted">{tr!(topbar.loading)}</p> }>
                {move || {
                    let body = body.clone();
                    Suspend::new(async move {
                        match current_viewer().await {
                            Some(me) => body(me).into_any(),
                            None => view! { <p class="page error">{absent}</p> }.into_any(),
                        }
                    })
                }}
            </Suspense>
        </main>
    }
    .into_any()
}
