//! The page for unknown paths.
use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http_status_not_found());
    }
    view! {
        <main class="page">
            <h1>{tr!(not_found.page_not_found)}</h1>
            <p><a href="/">{tr!(not_found.back_to_the_dashboard)}</a></p>
        </main>
    }
}

#[cfg(feature = "ssr")]
fn http_status_not_found() -> http::StatusCode {
    http::StatusCode::NOT_FOUND
}
