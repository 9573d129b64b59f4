//! The language switch in the top bar: English or Simplified Chinese. The choice goes into the
//! `lang` cookie (so pages and API answers follow it at once) and, for a logged-in member,
//! onto the account (so another browser, and the messages Lanes sends, follow it too); then
//! the page reloads in the new language.

use crate::i18n::{self, Locale};
use leptos::prelude::*;

#[component]
pub fn LanguageSwitch() -> impl IntoView {
    let current = i18n::locale();
    let options = <Locale as leptos_i18n::Locale>::get_all()
        .iter()
        .map(|locale| {
            view! {
                <option value=i18n::code(*locale) selected=*locale == current lang=i18n::code(*locale)>
                    {i18n::native_name(*locale)}
                </option>
            }
        })
        .collect_view();
    let change = move |ev: leptos::ev::Event| {
        let Some(locale) = i18n::parse(&event_target_value(&ev)) else {
            return;
        };
        choose(locale);
    };
    view! {
        <select class="language" aria-label=tr!(nav.language) data-testid="language" on:change=change>
            {options}
        </select>
    }
}

#[cfg(feature = "hydrate")]
fn choose(locale: Locale) {
    use wasm_bindgen::JsCast;
    if let Some(document) = document().dyn_ref::<web_sys::HtmlDocument>() {
        let _ = document.set_cookie(&format!(
            "{}={}; path=/; max-age=31536000; samesite=lax",
            i18n::COOKIE,
            i18n::code(locale)
        ));
    }
    leptos::task::spawn_local(async move {
        // Anonymous viewers have no account to remember it on: the cookie is enough.
        let body = lanes_types::account::LanguageChoice {
            language: i18n::code(locale).to_string(),
        };
        let _ = crate::rest::call::<lanes_types::api::SetLanguage>((), &body).await;
        let _ = window().location().reload();
    });
}

#[cfg(not(feature = "hydrate"))]
fn choose(_: Locale) {}
