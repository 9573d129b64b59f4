//! Data a page loads from the REST API, with its failure, and reloads after a change. A page
//! that arrived with the answer ([`page_data`]) draws it at once, on the server and in the
//! browser alike; otherwise the server draws the loading line and the browser fills it in.

use crate::components::page_data;
use crate::rest;
use leptos::prelude::*;
use serde::de::DeserializeOwned;

/// The latest answer of `GET url`: `None` while loading.
pub struct Remote<T: Send + Sync + 'static> {
    data: RwSignal<Option<Result<T, String>>>,
    url: StoredValue<String>,
}

impl<T: Send + Sync + 'static> Clone for Remote<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Send + Sync + 'static> Copy for Remote<T> {}

impl<T: DeserializeOwned + Send + Sync + 'static> Remote<T> {
    /// The answer the page arrived with, or else loading `url` once the page is live in the
    /// browser. An answer drawn in another zone than the browser's is asked for again once
    /// live, so that its times are redrawn in the viewer's.
    pub fn new(url: impl Into<String>) -> Self {
        let url = url.into();
        let arrived = page_data::answer::<T>(&url);
        let redraw = arrived.is_some() && !page_data::drawn_in_this_zone();
        let ask = arrived.is_none() || redraw;
        let remote = Self {
            data: RwSignal::new(arrived.map(Ok)),
            url: StoredValue::new(url),
        };
        if ask {
            Effect::new(move |_| {
                // Hydration kept the server's text but remembers the browser's: the same data
                // again would change nothing on screen. Drawing the loading line first makes
                // the answer's rows new, in this browser's zone.
                if redraw {
                    remote.data.set(None);
                }
                remote.reload();
            });
        }
        remote
    }

    /// Loads from another URL from now on (a calendar moving to another week).
    pub fn load(&self, url: impl Into<String>) {
        self.url.set_value(url.into());
        self.reload();
    }

    /// Reloads whenever `write` succeeds: a list follows the writes that change it.
    pub fn follows<I, O>(self, write: super::write::Write<I, O>) -> Self
    where
        I: Send + Sync + 'static,
        O: Send + Sync + 'static,
    {
        let remote = self;
        write.on_success(move || remote.reload());
        self
    }

    /// Reloads when the server says that something in `area` changed (a job started or
    /// ended, a booking was made elsewhere): the list follows the server's events, in the
    /// browser only, over one channel per page (`live::changes`).
    pub fn follows_area(self, area: lanes_types::Area) -> Self {
        #[cfg(feature = "hydrate")]
        {
            let remote = self;
            let counter = crate::live::changes(area);
            let seen = std::cell::Cell::new(counter.get_untracked());
            Effect::new(move |_| {
                let now = counter.get();
                if now != seen.replace(now) {
                    remote.reload();
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = area;
        self
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

impl<T: Send + Sync + 'static> Remote<T> {
    /// Reads the latest answer: `None` while loading.
    pub fn with<R>(&self, f: impl FnOnce(Option<&Result<T, String>>) -> R) -> R {
        self.data.with(|data| f(data.as_ref()))
    }

    /// The latest answer if it came and was not an error.
    pub fn ok(&self) -> Option<T>
    where
        T: Clone,
    {
        self.with(|data| data.and_then(|r| r.as_ref().ok()).cloned())
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
    let loading = move || view! { <p class="muted">{tr!(remote.loading, what)}</p> };
    let drawn = move || {
        remote.with(|data| match data {
            None => loading().into_any(),
            Some(Err(message)) => {
                view! { <p class="form-error" role="alert">{tr!(remote.could_not_load, what, message = message.clone())}</p> }
                    .into_any()
            }
            Some(Ok(value)) => show(value).into_any(),
        })
    };
    drawn.into_any()
}

/// The value of a form field, or empty when the page is not live.
pub fn field(input: NodeRef<leptos::html::Input>) -> String {
    input.get().map(|i| i.value()).unwrap_or_default()
}

/// Whether a checkbox is ticked.
pub fn checked(input: NodeRef<leptos::html::Input>) -> bool {
    input.get().is_some_and(|i| i.checked())
}
