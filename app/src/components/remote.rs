//! Data a page loads from the REST API in the browser, with its failure, and reloads after a
//! change. The server renders the empty state; the browser fills it in after hydration.

use crate::rest;
use leptos::prelude::*;
use serde::de::DeserializeOwned;

/// The latest answer of `GET url`: `None` while loading.
pub struct Remote<T: Send + Sync + 'static> {
    pub data: RwSignal<Option<Result<T, String>>>,
    url: StoredValue<String>,
}

impl<T: Send + Sync + 'static> Clone for Remote<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Send + Sync + 'static> Copy for Remote<T> {}

impl<T: DeserializeOwned + Send + Sync + 'static> Remote<T> {
    /// Starts loading `url` once the page is live in the browser.
    pub fn new(url: impl Into<String>) -> Self {
        let remote = Self {
            data: RwSignal::new(None),
            url: StoredValue::new(url.into()),
        };
        Effect::new(move |_| remote.reload());
        remote
    }

    /// Loads from another URL from now on (a calendar moving to another week).
    pub fn load(&self, url: impl Into<String>) {
        self.url.set_value(url.into());
        self.reload();
    }

    /// Reloads every `period` while the page lives (in the browser only).
    pub fn refresh_every(&self, period: std::time::Duration) {
        #[cfg(feature = "hydrate")]
        {
            let remote = *self;
            if let Ok(handle) = set_interval_with_handle(move || remote.reload(), period) {
                on_cleanup(move || handle.clear());
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = period;
    }

    pub fn reload(&self) {
        let (data, url) = (self.data, self.url.get_value());
        leptos::task::spawn_local(async move {
            data.set(Some(rest::get::<T>(&url).await));
        });
    }
}

/// Shows a [`Remote`]'s data with `show`, a loading line, or its error.
pub fn render_remote<T, V>(
    remote: Remote<T>,
    what: &'static str,
    show: impl Fn(&T) -> V + Send + Sync + 'static,
) -> impl IntoView
where
    T: Send + Sync + 'static,
    V: IntoView + 'static,
{
    move || {
        remote.data.with(|data| match data {
            None => view! { <p class="muted">{tr!(remote.loading, what)}</p> }.into_any(),
            Some(Err(message)) => {
                view! { <p class="form-error" role="alert">{tr!(remote.could_not_load, what, message = message.clone())}</p> }
                    .into_any()
            }
            Some(Ok(value)) => show(value).into_any(),
        })
    }
}

/// The value of a form field, or empty when the page is not live.
pub fn field(input: NodeRef<leptos::html::Input>) -> String {
    input.get().map(|i| i.value()).unwrap_or_default()
}

/// Whether a checkbox is ticked.
pub fn checked(input: NodeRef<leptos::html::Input>) -> bool {
    input.get().is_some_and(|i| i.checked())
}
