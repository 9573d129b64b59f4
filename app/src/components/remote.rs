//! Data a page loads from the REST API, with its failure, and reloads after a change. Most
//! pages render the empty state on the server and fill it in once live in the browser; the
//! admin sections are [`Remote::rendered`]: the server asks its own API for them while it
//! renders, so the page arrives with its data.

use crate::rest;
use leptos::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The latest answer of `GET url`: `None` while loading.
pub struct Remote<T: Send + Sync + 'static> {
    /// Answers loaded in the browser (read through [`Remote::with`], which also sees the
    /// server's first answer).
    data: RwSignal<Option<Result<T, String>>>,
    url: StoredValue<String>,
    /// The first answer, fetched while the server rendered the page and sent with it.
    first: Option<Resource<Result<T, String>>>,
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
            first: None,
        };
        Effect::new(move |_| remote.reload());
        remote
    }

    /// Like [`Remote::new`], but the server answers it while it renders the page (through its
    /// own API, as the viewer), so the page comes with the data and no loading line. A page
    /// opened by a link inside the app loads it in the browser instead.
    pub fn rendered(url: impl Into<String>) -> Self
    where
        T: Serialize + Clone,
    {
        let url = url.into();
        let first = Resource::new(|| (), first_answer::<T>(url.clone()));
        Self {
            data: RwSignal::new(None),
            url: StoredValue::new(url),
            first: Some(first),
        }
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

impl<T: Send + Sync + 'static> Remote<T> {
    /// Reads the latest answer: `None` while loading. Inside a `<Suspense/>` (as
    /// [`render_remote`] puts it), the server waits for its first answer.
    pub fn with<R>(&self, f: impl FnOnce(Option<&Result<T, String>>) -> R) -> R {
        if self.data.with(Option::is_some) {
            return self.data.with(|data| f(data.as_ref()));
        }
        match self.first {
            Some(first) => first.with(|answer| f(answer.as_ref())),
            None => f(None),
        }
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
    if remote.first.is_some() {
        view! { <Suspense fallback=loading>{drawn}</Suspense> }.into_any()
    } else {
        drawn.into_any()
    }
}

/// An answer on its way.
type Pending<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, String>> + Send>>;

/// How a [`Remote::rendered`] gets its first answer: on the server, from its own API as the
/// viewer of the page; in the browser (a page opened inside the app), by asking it.
fn first_answer<T>(url: String) -> impl Fn(()) -> Pending<T> + Send + Sync + 'static
where
    T: DeserializeOwned + Send + Sync + 'static,
{
    #[cfg(feature = "ssr")]
    {
        let api = use_context::<std::sync::Arc<dyn crate::ssr::LocalApi>>();
        let request = use_context::<http::request::Parts>();
        move |_| -> Pending<T> {
            let (Some(api), Some(request)) = (&api, &request) else {
                let missing = tr!(remote.not_on_this_server).to_string();
                return Box::pin(async move { Err(missing) });
            };
            let asked = api.get(&url, request);
            Box::pin(async move {
                let (status, body) = asked.await;
                if (200..300).contains(&status) {
                    serde_json::from_str(&body).map_err(|e| e.to_string())
                } else {
                    Err(rest::error_message(status, &body))
                }
            })
        }
    }
    #[cfg(not(feature = "ssr"))]
    {
        move |_| -> Pending<T> {
            let url = url.clone();
            #[cfg(feature = "hydrate")]
            return Box::pin(send_wrapper::SendWrapper::new(async move {
                rest::get::<T>(&url).await
            }));
            #[cfg(not(feature = "hydrate"))]
            Box::pin(async move { rest::get::<T>(&url).await })
        }
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
