//! The browser's end of the live telemetry channel: connect, apply messages to the fleet,
//! and reconnect with capped exponential backoff when the link drops.

#[cfg(feature = "hydrate")]
use lanes_types::api::{self, Endpoint};
#[cfg(feature = "hydrate")]
use lanes_types::FleetSnapshot;
#[cfg(feature = "hydrate")]
use leptos::prelude::*;

/// State of the link, shown in the page header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkStatus {
    Connecting,
    Live,
    /// The link dropped; the next attempt is `attempt` and starts after `delay_ms`.
    Reconnecting {
        attempt: u32,
        delay_ms: u32,
    },
}

impl LinkStatus {
    pub fn label(self) -> String {
        match self {
            LinkStatus::Connecting => tr!(live.connecting).into(),
            LinkStatus::Live => tr!(live.live).into(),
            LinkStatus::Reconnecting { delay_ms, .. } => {
                let seconds = format!("{:.0}", (delay_ms as f64 / 1000.0).ceil());
                tr!(live.reconnecting, seconds)
            }
        }
    }

    pub fn css_class(self) -> &'static str {
        match self {
            LinkStatus::Live => "link live",
            _ => "link down",
        }
    }
}

/// Delay before reconnect attempt `attempt` (1-based): 0.5 s doubling to a 30 s cap, plus up to
/// 25 % jitter from `jitter` (0..1) so that a restart does not bring every browser back at once.
pub fn backoff_delay_ms(attempt: u32, jitter: f64) -> u32 {
    const BASE_MS: u32 = 500;
    const CAP_MS: u32 = 30_000;
    let exp = attempt.saturating_sub(1).min(16);
    let delay = BASE_MS.saturating_mul(1 << exp).min(CAP_MS);
    delay + (delay as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u32
}

/// Keeps `fleet` current from the server's websocket until the page goes away.
#[cfg(feature = "hydrate")]
pub fn follow(fleet: RwSignal<FleetSnapshot>, status: RwSignal<LinkStatus>) {
    use lanes_types::TelemetryMessage;
    let on_text = move |text: String| match TelemetryMessage::from_json(&text) {
        Ok(message) => fleet.update(|f| f.apply(message)),
        Err(err) => leptos::logging::warn!("lanes: unreadable telemetry message: {err}"),
    };
    let on_link = move |link: Link| {
        status.set(match link {
            Link::Open { .. } => LinkStatus::Live,
            Link::Retrying { attempt, delay_ms } => LinkStatus::Reconnecting { attempt, delay_ms },
        })
    };
    keep_open(api::TelemetryWs::PATH.to_string(), 0, on_link, on_text);
}

/// How many times the server said that `area` changed since the page loaded (a reconnect
/// counts as a change of everything: changes may have been missed). The first call opens the
/// page's one changes channel (`/api/v1/telemetry/ws?only=changes`).
#[cfg(feature = "hydrate")]
pub fn changes(area: lanes_types::Area) -> RwSignal<u64> {
    use lanes_types::{Area, TelemetryMessage};
    let index = |area: Area| match area {
        Area::Bookings => 0,
        Area::Jobs => 1,
        Area::Queue => 2,
    };
    thread_local! {
        static COUNTERS: std::cell::OnceCell<[RwSignal<u64>; 3]> = const { std::cell::OnceCell::new() };
    }
    let counters = COUNTERS.with(|cell| {
        *cell.get_or_init(|| {
            // Owned by a root of their own, kept for the life of the page (not by the page that
            // asked first, whose signals go when the viewer moves to another page).
            // (`new_root` makes itself the current owner: the page's is put back after, or the
            // rest of the page would be built outside its router.)
            let page = Owner::current();
            let owner = Owner::new_root(None);
            let counters = owner.with(|| [RwSignal::new(0), RwSignal::new(0), RwSignal::new(0)]);
            if let Some(page) = page {
                page.set();
            }
            std::mem::forget(owner);
            let on_text = move |text: String| {
                if let Ok(TelemetryMessage::Changed { areas }) = TelemetryMessage::from_json(&text)
                {
                    for area in areas {
                        counters[index(area)].update(|n| *n += 1);
                    }
                }
            };
            let on_link = move |link: Link| {
                if let Link::Open { again: true } = link {
                    for counter in counters {
                        counter.update(|n| *n += 1);
                    }
                }
            };
            let path = format!("{}?only=changes", api::TelemetryWs::PATH);
            keep_open(path, 0, on_link, on_text);
            counters
        })
    });
    counters[index(area)]
}

/// What became of a kept-open socket.
#[cfg(feature = "hydrate")]
#[derive(Clone, Copy)]
enum Link {
    /// Open; `again` after it had been lost.
    Open { again: bool },
    /// Lost; attempt `attempt` starts after `delay_ms`.
    Retrying { attempt: u32, delay_ms: u32 },
}

/// Keeps a websocket to `path` open for the life of the page: each text message goes to
/// `on_text`, each change of the link to `on_link`, and a lost link is opened again with
/// capped exponential backoff.
#[cfg(feature = "hydrate")]
fn keep_open<L, T>(path: String, failures: u32, on_link: L, on_text: T)
where
    L: Fn(Link) + Clone + 'static,
    T: Fn(String) + Clone + 'static,
{
    use std::{cell::Cell, rc::Rc};
    use wasm_bindgen::closure::Closure;
    use web_sys::{MessageEvent, WebSocket};

    let Some(url) = socket_url(&path) else {
        return;
    };
    let reconnect = {
        let (on_link, on_text) = (on_link.clone(), on_text.clone());
        move |failures: u32| {
            let attempt = failures + 1;
            let delay_ms = backoff_delay_ms(attempt, js_sys::Math::random());
            on_link(Link::Retrying { attempt, delay_ms });
            let (path, on_link, on_text) = (path.clone(), on_link.clone(), on_text.clone());
            set_timeout(
                move || keep_open(path, attempt, on_link, on_text),
                std::time::Duration::from_millis(delay_ms.into()),
            );
        }
    };
    let socket = match WebSocket::new(&url) {
        Ok(socket) => socket,
        Err(_) => return reconnect(failures),
    };
    // A link that opened and then dropped starts its backoff afresh.
    let opened = Rc::new(Cell::new(false));
    let on_open = {
        let opened = opened.clone();
        Closure::<dyn FnMut()>::new(move || {
            opened.set(true);
            on_link(Link::Open {
                again: failures > 0,
            });
        })
    };
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        if let Some(text) = event.data().as_string() {
            on_text(text);
        }
    });
    let on_close = Closure::<dyn FnMut()>::new(move || {
        reconnect(if opened.get() { 0 } else { failures });
    });
    attach(&socket, on_open, on_message, on_close);
}

/// Gives `socket` its open, message and close handlers. The socket owns them for the life of
/// the page (a reconnect makes a new socket with new ones).
#[cfg(feature = "hydrate")]
pub fn attach<O, M, C>(
    socket: &web_sys::WebSocket,
    on_open: wasm_bindgen::closure::Closure<O>,
    on_message: wasm_bindgen::closure::Closure<M>,
    on_close: wasm_bindgen::closure::Closure<C>,
) where
    O: ?Sized + wasm_bindgen::closure::WasmClosure,
    M: ?Sized + wasm_bindgen::closure::WasmClosure,
    C: ?Sized + wasm_bindgen::closure::WasmClosure,
{
    use wasm_bindgen::JsCast;
    socket.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    socket.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    socket.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    on_open.forget();
    on_message.forget();
    on_close.forget();
}

/// The websocket URL of `path` on the server that served this page (`wss` under https).
#[cfg(feature = "hydrate")]
pub fn socket_url(path: &str) -> Option<String> {
    let location = web_sys::window()?.location();
    let scheme = if location.protocol().ok()? == "https:" {
        "wss"
    } else {
        "ws"
    };
    Some(format!("{scheme}://{}{path}", location.host().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_thirty_second_cap() {
        let delays: Vec<u32> = (1..=8).map(|a| backoff_delay_ms(a, 0.0)).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(backoff_delay_ms(u32::MAX, 0.0), 30_000);
    }

    #[test]
    fn jitter_adds_at_most_a_quarter() {
        assert_eq!(backoff_delay_ms(2, 1.0), 1250);
        assert_eq!(backoff_delay_ms(2, 7.0), 1250);
    }

    #[test]
    fn the_reconnecting_label_counts_whole_seconds() {
        let s = LinkStatus::Reconnecting {
            attempt: 1,
            delay_ms: 1200,
        };
        assert_eq!(s.label(), "reconnecting in 2 s…");
    }
}
