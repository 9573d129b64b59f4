//! What a page arrives with: who is looking, and the API answers its sections read when they
//! open. Before a page with [`crate::pages::preloads`] is rendered, the server asks its own API
//! for them (the same routes and login gate as the browser's calls, with the page request's
//! cookie) and leaves them in the request; the page draws them at once, and sends them along
//! in `<script id="page-data">`, so that the browser's first render reads the very answers
//! the server drew and hydration meets the same page. Nothing here is a Resource: the data is
//! there before rendering starts, so no render waits on a task.

use lanes_types::account::User;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The element that carries the page's data to the browser.
pub const ELEMENT_ID: &str = "page-data";

/// A page's data as it travels: the viewer and the answers by the URL that was asked.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageData {
    pub viewer: Option<User>,
    pub answers: BTreeMap<String, serde_json::Value>,
}

impl PageData {
    /// The data as the text of a `<script type="application/json">`: JSON in which no `<`,
    /// `>` or `&` appears (they are escaped inside strings, the only place JSON has them), so
    /// that no value, however odd, can close the element or open another.
    pub fn script_text(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".into());
        let mut text = String::with_capacity(json.len());
        for c in json.chars() {
            match c {
                '<' => text.push_str("\\u003c"),
                '>' => text.push_str("\\u003e"),
                '&' => text.push_str("\\u0026"),
                c => text.push(c),
            }
        }
        text
    }
}

/// The API answers the server gathered for the request being rendered (in the request's
/// extensions; the viewer comes from the login gate).
#[cfg(feature = "ssr")]
#[derive(Clone, Debug, Default)]
pub struct Answers(pub std::sync::Arc<BTreeMap<String, serde_json::Value>>);

/// The answer to `GET url` that the page arrived with, if it came with one. In the browser
/// an answer is used once: a section opened again later asks the API afresh.
pub fn answer<T: DeserializeOwned>(url: &str) -> Option<T> {
    #[cfg(all(feature = "ssr", not(feature = "hydrate")))]
    {
        use leptos::prelude::use_context;
        let parts = use_context::<http::request::Parts>()?;
        T::deserialize(parts.extensions.get::<Answers>()?.0.get(url)?).ok()
    }
    #[cfg(feature = "hydrate")]
    {
        // Parsed from its own text, as the API client parses an answer: one deserializer
        // per type in the bundle, not a second one through `serde_json::Value`.
        let text = browser::with(|data| data.answers.remove(url))?;
        serde_json::from_str(text.get()).ok()
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    {
        let _ = url;
        None
    }
}

/// Who is looking, as the page was rendered (`None`: an anonymous viewer). Known at once on
/// both sides, so a page may decide on it without waiting.
pub fn viewer() -> Option<User> {
    #[cfg(all(feature = "ssr", not(feature = "hydrate")))]
    {
        crate::ssr::viewer()
    }
    #[cfg(feature = "hydrate")]
    {
        browser::with(|data| data.viewer.clone())
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    {
        None
    }
}

/// The page's data for `<script id="page-data">`, drawn by the server's shell.
#[cfg(all(feature = "ssr", not(feature = "hydrate")))]
pub fn rendered() -> PageData {
    use leptos::prelude::use_context;
    let answers = use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Answers>().cloned())
        .map(|answers| (*answers.0).clone())
        .unwrap_or_default();
    PageData {
        viewer: viewer(),
        answers,
    }
}

/// Whether the server drew the page's times in the zone this browser is in (it draws them
/// in the zone of the `tz` cookie, which a first visit, or a laptop that travelled, lacks).
pub fn drawn_in_this_zone() -> bool {
    #[cfg(feature = "hydrate")]
    {
        let drawn = leptos::prelude::document()
            .document_element()
            .and_then(|html| html.get_attribute("data-zone"));
        drawn.is_some() && drawn == crate::components::clock::browser_zone()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        true
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use super::ELEMENT_ID;
    use lanes_types::account::User;
    use serde::Deserialize;
    use serde_json::value::RawValue;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// [`super::PageData`] as the browser reads it: each answer kept as its JSON text until
    /// a section asks for it by type.
    #[derive(Default, Deserialize)]
    pub struct Arrived {
        pub viewer: Option<User>,
        pub answers: BTreeMap<String, Box<RawValue>>,
    }

    thread_local! {
        /// Read from the page once, on first use.
        static DATA: RefCell<Option<Arrived>> = const { RefCell::new(None) };
    }

    pub fn with<R>(f: impl FnOnce(&mut Arrived) -> R) -> R {
        DATA.with(|cell| {
            let mut cell = cell.borrow_mut();
            let data = cell.get_or_insert_with(|| {
                leptos::prelude::document()
                    .get_element_by_id(ELEMENT_ID)
                    .and_then(|element| element.text_content())
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or_default()
            });
            f(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_text_cannot_close_its_element_and_reads_back_the_same() {
        let mut data = PageData::default();
        let odd = "</script><script>alert(1)</script><!-- & é \u{2028}";
        data.answers.insert(
            "/api/v1/groups".into(),
            serde_json::json!([{ "name": odd }]),
        );
        let text = data.script_text();
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        let back: PageData = serde_json::from_str(&text).unwrap();
        assert_eq!(back.answers["/api/v1/groups"][0]["name"], odd);
        assert!(back.viewer.is_none());
    }
}
