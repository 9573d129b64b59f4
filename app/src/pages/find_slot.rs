//! The calendar's "Find a slot" panel: N cards for a duration within a window, answered by
//! `GET /api/v1/slots` as the earliest free windows (all cards of one node, within the
//! viewer's quota), each booked in one click; and "any N" booked straight from the same form.

use crate::calendar::{card_list, long_time};
use crate::components::clock::{local_input, now};
use crate::components::write::Write;
use crate::rest;
use chrono::FixedOffset;
use lanes_types::api;
use lanes_types::booking::{Booking, CreateBooking, FreeSlot};
use lanes_types::query::SlotQuery;
use lanes_types::GpuState;
use leptos::prelude::*;

#[component]
pub fn FindSlot(
    gpus: crate::components::remote::Remote<Vec<GpuState>>,
    offset: FixedOffset,
    book: Write<CreateBooking, Booking>,
) -> impl IntoView {
    let count = RwSignal::new("1".to_string());
    let duration = RwSignal::new("4h".to_string());
    let from = RwSignal::new(String::new());
    let to = RwSignal::new(String::new());
    let node = RwSignal::new(String::new());
    let search = Write::new(|query: &SlotQuery| {
        let query = query.clone();
        async move { rest::call::<api::Slots>((), &query).await }
    });
    // What the form itself finds wrong; the server's refusals are the requests'.
    let error = RwSignal::new(None::<String>);
    // A booked window is not offered again.
    book.on_success(move || search.clear());
    let booked = move || {
        book.answer().map(|booking| {
            let (start, end) = (
                long_time(booking.start, offset),
                long_time(booking.end, offset),
            );
            match booking.gpus.len() {
                1 => tr!(find_slot.booked_one, start, end),
                n => tr!(find_slot.booked, n, start, end),
            }
        })
    };
    // One line for whatever went wrong last: the form's check, the search, or the booking.
    let failed = move || {
        error
            .get()
            .or_else(|| search.error())
            .or_else(|| book.error())
    };
    let nodes = move || {
        let mut names: Vec<String> = gpus
            .ok()
            .unwrap_or_default()
            .into_iter()
            .filter(|g| !g.unmanaged)
            .map(|g| g.info.node)
            .collect();
        names.sort();
        names.dedup();
        names
    };
    // What the form asks, checked here so that a typo gets its message before any request.
    let asked = move || -> Result<(u32, chrono::Duration), String> {
        let n: u32 = count
            .get_untracked()
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or(tr!(find_slot.cards_whole))?;
        let d = lanes_types::units::parse_duration(&duration.get_untracked())?;
        Ok((n, d))
    };
    // The search "Find" runs for what the form asks.
    let query_of = move |n: u32, d: chrono::Duration| {
        let node = node.get_untracked();
        SlotQuery {
            gpus: n,
            duration: format!("{}s", d.num_seconds()),
            from: local_input(&from.get_untracked()),
            to: local_input(&to.get_untracked()),
            node: (!node.is_empty()).then_some(node),
            min_memory: None,
            limit: Some(5),
        }
    };
    let find = move |_| {
        let (n, d) = match asked() {
            Ok(asked) => asked,
            Err(message) => return error.set(Some(message)),
        };
        error.set(None);
        book.clear();
        search.run(query_of(n, d));
    };
    // "Book any" refused (nothing free for that now): the earliest windows "Find" would find
    // are offered at once, each a click from booked.
    let any_asked = RwSignal::new(None::<SlotQuery>);
    Effect::new(move |_| {
        if book.error().is_some() {
            if let Some(query) = any_asked.get_untracked() {
                any_asked.set(None);
                search.run(query);
            }
        } else if book.succeeded() {
            any_asked.set(None);
        }
    });
    let submit = move |body: CreateBooking| {
        error.set(None);
        search.clear();
        book.run(body);
    };
    let book_any = move |_| {
        let (n, d) = match asked() {
            Ok(asked) => asked,
            Err(message) => return error.set(Some(message)),
        };
        let start = local_input(&from.get_untracked())
            .filter(|t| *t > now())
            .unwrap_or_else(now);
        error.set(None);
        search.clear();
        any_asked.set(Some(query_of(n, d)));
        book.run(CreateBooking {
            project: None,
            gpus: None,
            count: Some(n),
            start,
            end: start + d,
            note: String::new(),
            user: None,
            lend: None,
        });
    };
    let card_names = move |slot: &FreeSlot| {
        gpus.with(|list| card_list(&slot.gpus, list.and_then(|l| l.as_ref().ok())))
    };
    let results = move || {
        search.answer().map(|list| {
            if list.is_empty() {
                return view! { <p class="muted" role="status">{tr!(find_slot.no_window_fits_in_that_range)}</p> }
                    .into_any();
            }
            let rows = list
                .into_iter()
                .map(|slot| {
                    let names = card_names(&slot);
                    let when = format!(
                        "{} – {}",
                        long_time(slot.start, offset),
                        long_time(slot.end, offset)
                    );
                    let body = CreateBooking {
                        project: None,
                        gpus: Some(slot.gpus.iter().map(|g| g.uuid.clone()).collect()),
                        count: None,
                        start: slot.start,
                        end: slot.end,
                        note: String::new(),
                        user: None,
                        lend: None,
                    };
                    view! {
                        <tr data-slot-node=slot.node.clone()>
                            <td>{when}</td>
                            <td>{slot.node.clone()}</td>
                            <td>{names}</td>
                            <td class="num">{slot.free_cards}</td>
                            <td class="actions">
                                <button on:click=move |_| {
                                    // A window starting now starts when the click books it.
                                    let mut body = body.clone();
                                    body.start = body.start.max(now());
                                    submit(body)
                                }>{tr!(find_slot.book)}</button>
                            </td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <table class="list" data-testid="slots">
                    <thead><tr><th>{tr!(find_slot.when)}</th><th>{tr!(find_slot.node)}</th><th>{tr!(find_slot.cards)}</th><th class="num">{tr!(find_slot.free_then)}</th><th></th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            }
            .into_any()
        })
    };
    view! {
        <section class="panel find-slot" data-testid="find-slot">
            <h3>{tr!(find_slot.find_a_slot)}</h3>
            <div class="form-row">
                <label>{tr!(find_slot.cards)} <input name="slot-gpus" type="number" min="1" prop:value=move || count.get() on:input=move |ev| count.set(event_target_value(&ev)) /></label>
                <label>{tr!(find_slot.for_text)} <input name="slot-duration" placeholder="4h, 90m" prop:value=move || duration.get() on:input=move |ev| duration.set(event_target_value(&ev)) /></label>
                <label>{tr!(find_slot.from)} <input name="slot-from" type="datetime-local" prop:value=move || from.get() on:input=move |ev| from.set(event_target_value(&ev)) /></label>
                <label>{tr!(find_slot.until)} <input name="slot-to" type="datetime-local" prop:value=move || to.get() on:input=move |ev| to.set(event_target_value(&ev)) /></label>
                <label>{tr!(find_slot.node)}
                    <select name="slot-node" on:change=move |ev| node.set(event_target_value(&ev))>
                        <option value="">{tr!(find_slot.any)}</option>
                        {move || nodes().into_iter().map(|n| view! { <option value=n.clone()>{n.clone()}</option> }).collect_view()}
                    </select>
                </label>
                <button on:click=find>{tr!(find_slot.find)}</button>
                <button on:click=book_any title=tr!(find_slot.any_free_cards_chosen_by_lanes)>{tr!(find_slot.book_any)}</button>
            </div>
            {move || failed().map(|m| view! { <p class="form-error" role="alert">{m}</p> })}
            {move || booked().map(|m| view! { <p class="ok" role="status">{m}</p> })}
            {results}
        </section>
    }
}
