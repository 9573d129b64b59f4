//! Lanes web UI: the Leptos app (pages, components, server functions). The wire types it shares
//! with the server live in `lanes-types`. Built for the server with `ssr`, for the browser with
//! `hydrate`.

// First, so that `tr!` is in scope in every other module.
#[macro_use]
pub mod i18n;
pub mod api;
pub mod calendar;
pub mod components;
pub mod dates;
pub mod live;
pub mod pages;
pub mod rest;
#[cfg(feature = "ssr")]
pub mod ssr;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    Lazy, ParamSegment, StaticSegment,
};
use pages::lazy;

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang=i18n::code(i18n::locale()) data-zone=components::clock::rendered_zone()>
            <head>
                <meta charset="utf-8" />
                <script type="application/json" id=components::page_data::ELEMENT_ID inner_html=page_data_text() />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                // Beside the bundle, under its versioned folder (the server's `Site`), so a
                // new build's styles never meet an old build's cache.
                <link rel="stylesheet" id="leptos" href=format!("/{}/lanes.css", options.site_pkg_dir) />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The page's data for the browser (`<script id="page-data">`): drawn by the server only, as
/// the shell is.
fn page_data_text() -> String {
    #[cfg(all(feature = "ssr", not(feature = "hydrate")))]
    {
        components::page_data::rendered().script_text()
    }
    #[cfg(not(all(feature = "ssr", not(feature = "hydrate"))))]
    {
        String::new()
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Title text="Lanes" />
        <Router>
            <Routes fallback=|| pages::not_found::NotFound>
                <Route path=StaticSegment("") view=pages::dashboard::DashboardPage />
                <Route path=StaticSegment("login") view=pages::login::LoginPage />
                <Route path=StaticSegment("account") view={Lazy::<lazy::Account>::new()} />
                <Route path=StaticSegment("calendar") view={Lazy::<lazy::Calendar>::new()} />
                // Its sections arrive with their data (components::page_data).
                <Route path=StaticSegment("admin") view={Lazy::<lazy::Admin>::new()} />
                <Route path=(StaticSegment("admin"), ParamSegment("section")) view={Lazy::<lazy::Admin>::new()} />
                <Route path=StaticSegment("jobs") view={Lazy::<lazy::Jobs>::new()} />
                <Route path=StaticSegment("queue") view={Lazy::<lazy::Queue>::new()} />
                <Route path=StaticSegment("history") view={Lazy::<lazy::History>::new()} />
                <Route path=StaticSegment("usage") view={Lazy::<lazy::Usage>::new()} />
            </Routes>
        </Router>
    }
}

/// Entry point of the browser bundle: attach to the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    components::clock::remember_zone();
    // Asynchronous hydration: a page that opens on a lazy route hydrates once its chunk is in.
    let _ = any_spawner::Executor::init_wasm_bindgen();
    leptos::task::spawn_local(async {
        leptos::mount::hydrate_from_async(document().body().expect("a page has a body"), App)
            .await
            .forget();
        label_table_cells();
        // The page now answers clicks: `<html data-live>` says so to whoever waits for it
        // (the browser tests, before they type into a page that arrived with its data).
        if let Some(html) = document().document_element() {
            let _ = html.set_attribute("data-live", "");
        }
        prefetch_linked_pages();
    });
}

/// Once the page is live, the parts of the pages its top bar links to are fetched at the
/// lowest priority (`<link rel=prefetch>`, from the split manifest beside the bundle), so that
/// opening one does not wait for its chunks on a slow network; the bundle's immutable caching
/// keeps them. Not with the browser's data saver on.
#[cfg(feature = "hydrate")]
fn prefetch_linked_pages() {
    let script = js_sys::Function::new_no_args(
        r#"
        if (navigator.connection && navigator.connection.saveData) return;
        const bundle = document.querySelector('link[rel=modulepreload][href$="/lanes.js"]');
        if (!bundle) return;
        const base = bundle.href.slice(0, bundle.href.lastIndexOf('/') + 1);
        const linked = new Set([...document.querySelectorAll('nav a[href^="/"]')]
          .map((a) => new URL(a.href).pathname.split('/')[1]).filter(Boolean));
        fetch(base + '__wasm_split_manifest.json')
          .then((r) => (r.ok ? r.json() : {}))
          .then((manifest) => {
            const files = new Set();
            for (const [split, parts] of Object.entries(manifest)) {
              const route = (split.match(/^__(\w+?)_view_/) || [])[1];
              if (linked.has(route)) parts.forEach((part) => files.add(part));
            }
            for (const file of files) {
              const link = document.createElement('link');
              link.rel = 'prefetch';
              link.href = base + file + '.wasm';
              document.head.append(link);
            }
          })
          .catch(() => {});
        "#,
    );
    let _ = script.call0(&wasm_bindgen::JsValue::NULL);
}

/// Below 600 px a table row is drawn as a card (style/main.css), each value under its
/// column's title: every cell gets its column's title as `data-label`, kept up as pages
/// redraw.
#[cfg(feature = "hydrate")]
fn label_table_cells() {
    let script = js_sys::Function::new_no_args(
        r#"
        const label = () => document.querySelectorAll('table').forEach((table) => {
          const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
          if (!heads.length) return;
          table.querySelectorAll('tbody tr').forEach((tr) => [...tr.children].forEach((td, i) => {
            if (heads[i] && td.dataset.label !== heads[i]) td.dataset.label = heads[i];
          }));
        });
        label();
        new MutationObserver(label).observe(document.body, { childList: true, subtree: true });
        "#,
    );
    let _ = script.call0(&wasm_bindgen::JsValue::NULL);
}
