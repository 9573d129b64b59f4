//! `/calendar`: GPUs as rows, time as columns (a day or a week), everyone's bookings drawn in
//! their color, maintenance hatched, a line at now. Drag across free cells (or move with the
//! arrow keys and extend with Shift) to choose cards × time, confirm with the quota impact
//! shown (Enter books), find the earliest free slot, and manage your own bookings below.
//!
//! Local times need the viewer's time zone, so the calendar renders in the browser only.

use crate::calendar::{card_list, long_time, quota_impact, short_time, user_color, Span, View};
use crate::components::clock::{local_offset, now};
use crate::components::format::dated;
use crate::components::remote::{render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use crate::components::write::Write;
use crate::rest;
use chrono::{Duration, FixedOffset};
use lanes_types::account::User;
use lanes_types::api::{self, Endpoint};
use lanes_types::booking::{
    Booking, BookingState, CreateBooking, ExtendBooking, MaintenanceBlock, QuotaUse,
};
use lanes_types::report::UsageReport;
use lanes_types::statement::ProjectChoices;
use lanes_types::GpuState;
use leptos::prelude::*;

#[component]
pub fn CalendarPage() -> impl IntoView {
    let mounted = RwSignal::new(false);
    Effect::new(move |_| mounted.set(true));
    view! {
        <TopBar />
        <main class="page">
            <Show
                when=move || mounted.get()
                fallback=|| view! { <p class="muted">{tr!(calendar.loading_the_calendar)}</p> }
            >
                <Calendar />
            </Show>
        </main>
    }
    .into_any()
}

/// A dragged (or dragging) choice of rows × cells.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Selection {
    rows: (usize, usize),
    cells: (usize, usize),
}

impl Selection {
    fn contains(&self, row: usize, cell: usize) -> bool {
        let (r0, r1) = (self.rows.0.min(self.rows.1), self.rows.0.max(self.rows.1));
        let (c0, c1) = (
            self.cells.0.min(self.cells.1),
            self.cells.0.max(self.cells.1),
        );
        (r0..=r1).contains(&row) && (c0..=c1).contains(&cell)
    }
}

#[component]
fn Calendar() -> impl IntoView {
    let offset = local_offset();
    let span = RwSignal::new(Span::Day);
    let date = RwSignal::new(now().with_timezone(&offset).date_naive());
    let view = Memo::new(move |_| match span.get() {
        Span::Next24 => View::next_24_hours(now(), offset),
        other => View::of(other, date.get(), offset),
    });
    let range = move |v: View| {
        let query = lanes_types::query::BookingQuery {
            from: Some(v.start),
            to: Some(v.end()),
            ..Default::default()
        };
        api::Bookings::url(&(), &query)
    };
    // Mine from now on.
    let upcoming = || {
        let query = lanes_types::query::BookingQuery {
            from: Some(now()),
            ..Default::default()
        };
        api::Bookings::url(&(), &query)
    };
    let gpus = Remote::<Vec<GpuState>>::new(api::Gpus::PATH);
    let bookings = Remote::<Vec<Booking>>::new(range(view.get_untracked()))
        .follows_area(lanes_types::Area::Bookings);
    let maintenance = Remote::<Vec<MaintenanceBlock>>::new(api::Maintenance::PATH);
    let me = Remote::<User>::new(api::Me::PATH);
    let my_quota = Remote::<QuotaUse>::new(api::MyQuota::PATH);
    let mine = Remote::<Vec<Booking>>::new(upcoming());
    Effect::new(move |previous: Option<View>| {
        let v = view.get();
        if previous.is_some_and(|p| p != v) {
            bookings.load(range(v));
        }
        v
    });
    // The writes of this page; what shows bookings follows each.
    let book = booking_write();
    let book_found = booking_write();
    let extend = Write::new(|(id, body): &(i64, ExtendBooking)| {
        let (id, body) = (*id, body.clone());
        async move { rest::call::<api::ExtendBookingById>(id, &body).await }
    });
    let withdraw = Write::new(|id: &i64| rest::call::<api::WithdrawBooking>(*id, &()));
    let changed = move || {
        bookings.reload();
        my_quota.reload();
        mine.load(upcoming());
    };
    book.on_success(changed);
    book_found.on_success(changed);
    extend.on_success(changed);
    withdraw.on_success(changed);

    let selection = RwSignal::new(None::<Selection>);
    let dragging = RwSignal::new(false);
    // The keyboard's place in the grid (row, cell), and Enter's request to book: it starts at
    // now's cell (one Tab into the grid), not at midnight.
    let now_cell = move || {
        let v = view.get_untracked();
        let t = now();
        (0..v.cells).find(|&i| v.cell_start(i + 1) > t).unwrap_or(0)
    };
    let cursor = RwSignal::new((0usize, now_cell()));
    // Another day: the cursor goes to its start, or to now's cell on today.
    Effect::new(move |previous: Option<View>| {
        let v = view.get();
        if previous.is_some_and(|p| p != v) {
            cursor.update(|c| c.1 = now_cell());
        }
        v
    });
    let book_now = RwSignal::new(0u64);
    #[cfg(feature = "hydrate")]
    {
        let handle = window_event_listener(leptos::ev::pointerup, move |_| dragging.set(false));
        on_cleanup(move || handle.remove());
    }

    let step = move |forward: bool| {
        let days = match span.get_untracked() {
            // From the next 24 hours, the arrows go to whole days: tomorrow, or today.
            Span::Next24 => {
                span.set(Span::Day);
                date.set(now().with_timezone(&offset).date_naive());
                1
            }
            Span::Day => 1,
            Span::Week => 7,
        };
        date.update(|d| *d += Duration::days(if forward { days } else { -days }));
        selection.set(None);
    };
    let title = move || {
        let v = view.get();
        let first = v.start.with_timezone(&offset);
        match span.get() {
            Span::Day => dated(first, tr!(date.full_day)),
            Span::Next24 => tr!(
                calendar.next_24_title,
                first = dated(first, tr!(date.day_month_time)),
                last = dated(v.end().with_timezone(&offset), tr!(date.day_month_time))
            ),
            Span::Week => tr!(
                calendar.week_of,
                first = dated(first, tr!(date.day_month)),
                last = dated(
                    (v.end() - Duration::seconds(1)).with_timezone(&offset),
                    tr!(date.day_month_year)
                )
            ),
        }
    };

    view! {
        <div class="cal-controls">
            <h2>{title}</h2>
            <div class="segmented">
                <button class:active=move || span.get() == Span::Next24 on:click=move |_| { span.set(Span::Next24); selection.set(None); } data-testid="next-24">{tr!(calendar.next_24)}</button>
                <button class:active=move || span.get() == Span::Day on:click=move |_| span.set(Span::Day)>{tr!(calendar.day)}</button>
                <button class:active=move || span.get() == Span::Week on:click=move |_| span.set(Span::Week)>{tr!(calendar.week)}</button>
            </div>
            <div class="segmented">
                <button on:click=move |_| step(false) aria-label=tr!(calendar.earlier)>"‹"</button>
                <button on:click=move |_| { if span.get_untracked() == Span::Next24 { span.set(Span::Day) } date.set(now().with_timezone(&offset).date_naive()); selection.set(None); }>{tr!(calendar.today)}</button>
                <button on:click=move |_| step(true) aria-label=tr!(calendar.later)>"›"</button>
            </div>
        </div>
        <p class="muted">{tr!(calendar.drag_across_free_cells_to_choose)}</p>
        <ul class="cal-legend" data-testid="legend">
            <li><span class="swatch past"></span>{tr!(calendar.legend_past)}</li>
            <li><span class="swatch booked"></span>{tr!(calendar.legend_booked)}</li>
            <li><span class="swatch loan"></span>{tr!(calendar.legend_lent)}</li>
            <li><span class="swatch maint"></span>{tr!(calendar.legend_maintenance)}</li>
            <li><span class="swatch now"></span>{tr!(calendar.legend_now)}</li>
        </ul>
        {render_remote(gpus, tr!(calendar.what_gpus), move |list: &Vec<GpuState>| {
            let mut rows: Vec<GpuState> = list.clone();
            rows.sort_by(|a, b| (&a.info.node, a.info.index).cmp(&(&b.info.node, b.info.index)));
            view! { <Grid rows view bookings maintenance selection dragging cursor book_now offset /> }
        })}
        <Confirm selection view gpus bookings maintenance my_quota offset book_now book />
        <crate::pages::find_slot::FindSlot gpus offset book=book_found />
        <MyBookings mine me gpus offset extend withdraw />
    }
    .into_any()
}

#[component]
fn Grid(
    rows: Vec<GpuState>,
    view: Memo<View>,
    bookings: Remote<Vec<Booking>>,
    maintenance: Remote<Vec<MaintenanceBlock>>,
    selection: RwSignal<Option<Selection>>,
    dragging: RwSignal<bool>,
    cursor: RwSignal<(usize, usize)>,
    book_now: RwSignal<u64>,
    offset: FixedOffset,
) -> impl IntoView {
    let row_count = rows.len();
    // Arrows move the cursor (and drop a choice), Shift+arrows extend the choice from where the
    // cursor was, Enter books the choice (or chooses the cursor's cell), Escape clears it.
    let on_key = move |ev: leptos::ev::KeyboardEvent, row: usize, cell: usize| {
        let cells = view.get_untracked().cells;
        let step = match ev.key().as_str() {
            "ArrowRight" => (0, 1),
            "ArrowLeft" => (0, -1),
            "ArrowDown" => (1, 0),
            "ArrowUp" => (-1, 0),
            "Enter" | " " => {
                ev.prevent_default();
                if selection.get_untracked().is_some() {
                    book_now.update(|n| *n += 1);
                } else {
                    selection.set(Some(Selection {
                        rows: (row, row),
                        cells: (cell, cell),
                    }));
                }
                return;
            }
            "Escape" => {
                selection.set(None);
                return;
            }
            _ => return,
        };
        ev.prevent_default();
        let to = (
            (row as i64 + step.0).clamp(0, row_count as i64 - 1) as usize,
            (cell as i64 + step.1).clamp(0, cells as i64 - 1) as usize,
        );
        cursor.set(to);
        if ev.shift_key() {
            selection.update(|s| match s {
                Some(s) => {
                    s.rows.1 = to.0;
                    s.cells.1 = to.1;
                }
                None => {
                    *s = Some(Selection {
                        rows: (row, to.0),
                        cells: (cell, to.1),
                    })
                }
            });
        } else {
            selection.set(None);
        }
        focus_cell(to);
    };
    let header =
        move || {
            let v = view.get();
            let every = if v.cells > 24 { 8 } else { 3 };
            (0..v.cells)
            .map(|i| {
                let label = (i % every == 0).then(|| {
                    let t = v.cell_start(i).with_timezone(&offset);
                    if v.cells > 24 {
                        dated(t, tr!(date.weekday_day))
                    } else {
                        dated(t, "%H:%M")
                    }
                });
                let name = dated(v.cell_start(i).with_timezone(&offset), tr!(date.weekday_time));
                view! { <div class="cal-time" role="columnheader" aria-label=name>{label}</div> }
            })
            .collect_view()
        };
    // With several nodes, each node's rows come under its name.
    let nodes: Vec<String> = rows.iter().map(|g| g.info.node.clone()).collect();
    let several = nodes.iter().any(|n| *n != nodes[0]);
    let rows_view = rows
        .into_iter()
        .enumerate()
        .map(|(row, gpu)| {
            let heading = (several && (row == 0 || nodes[row - 1] != gpu.info.node)).then(|| {
                view! { <div class="cal-node" data-node=gpu.info.node.clone()>{gpu.info.node.clone()}</div> }
            });
            let uuid = gpu.info.uuid.clone();
            let card_label = format!("GPU {} · {}", gpu.info.index, gpu.info.node);
            let cells = move || {
                let v = view.get();
                let t = now();
                (0..v.cells)
                    .map(|cell| {
                        let past = v.cell_start(cell + 1) <= t;
                        let label = format!(
                            "{card_label}, {} – {}",
                            long_time(v.cell_start(cell), offset),
                            short_time(v.cell_start(cell + 1), offset)
                        );
                        view! {
                            <div
                                class="cal-cell"
                                class:past=past
                                role="gridcell"
                                aria-label=label
                                data-row=row
                                data-cell=cell
                                tabindex=move || if cursor.get() == (row, cell) { "0" } else { "-1" }
                                aria-selected=move || selection.get().is_some_and(|s| s.contains(row, cell)).to_string()
                                class:selected=move || selection.get().is_some_and(|s| s.contains(row, cell))
                                on:keydown=move |ev| on_key(ev, row, cell)
                                on:focus=move |_| cursor.set((row, cell))
                                on:pointerdown=move |ev| {
                                    if ev.button() != 0 {
                                        return;
                                    }
                                    ev.prevent_default();
                                    dragging.set(true);
                                    cursor.set((row, cell));
                                    selection.set(Some(Selection { rows: (row, row), cells: (cell, cell) }));
                                }
                            ></div>
                        }
                    })
                    .collect_view()
            };
            let bars = {
                let uuid = uuid.clone();
                move || {
                    let v = view.get();
                    let list = bookings.ok().unwrap_or_default();
                    list.into_iter()
                        .filter(|b| b.state.holds_cards() || b.state == BookingState::Ended || b.state == BookingState::Released)
                        .filter(|b| b.gpus.iter().any(|g| g.uuid == uuid))
                        .filter_map(|b| {
                            let (left, width) = v.bar(b.start, b.end)?;
                            let idle = b.idle_since.is_some() && b.state == BookingState::Active;
                            let lent = b
                                .lent_to
                                .map(|job| tr!(calendar.lent_suffix, job))
                                .unwrap_or_default();
                            let title = format!(
                                "{} · {} – {}{}{}{lent}",
                                b.display_name,
                                long_time(b.start, offset),
                                short_time(b.end, offset),
                                if b.note.is_empty() { String::new() } else { format!(" · {}", crate::calendar::note_of(&b)) },
                                if idle { tr!(calendar.idle_suffix) } else { "" }
                            );
                            // A loan is drawn as a band along the foot of its host's bar.
                            let label = match (b.loan_of, b.queue_job) {
                                (Some(_), Some(job)) => tr!(calendar.lent, job),
                                _ => b.display_name.clone(),
                            };
                            Some(view! {
                                <div
                                    class="cal-bar"
                                    class:idle=idle
                                    class:loan=b.loan_of.is_some()
                                    data-booking=b.id
                                    style=format!("left:{left:.3}%;width:{width:.3}%;background:{}", user_color(&b.username))
                                    title=title
                                >
                                    {label}
                                </div>
                            })
                        })
                        .collect_view()
                }
            };
            let blocks = {
                let uuid = uuid.clone();
                move || {
                    let v = view.get();
                    let list = maintenance.ok().unwrap_or_default();
                    list.into_iter()
                        .filter(|m| m.gpus.iter().any(|g| g.uuid == uuid))
                        .filter_map(|m| {
                            let (left, width) = v.bar(m.start, m.end)?;
                            Some(view! {
                                <div class="cal-maint" style=format!("left:{left:.3}%;width:{width:.3}%") title=tr!(calendar.maintenance_title, reason = m.reason.clone())>
                                    {tr!(calendar.maintenance)}
                                </div>
                            })
                        })
                        .collect_view()
                }
            };
            let now_line = move || {
                let t = now();
                view.get().bar(t, t + Duration::seconds(1)).map(|(left, _)| {
                    view! { <div class="cal-now" style=format!("left:{left:.3}%")></div> }
                })
            };
            let unmanaged = gpu.unmanaged.then(|| {
                view! { <span class="muted" title=tr!(calendar.lanes_does_not_manage_this_card)>{tr!(calendar.unmanaged)}</span> }
            });
            view! {
                {heading}
                <div class="cal-row" role="row" class:unmanaged=gpu.unmanaged data-uuid=uuid.clone()>
                    <div class="cal-gpu" role="rowheader">
                        <strong>{format!("GPU {}", gpu.info.index)}</strong>
                        <span class="muted">{gpu.info.node.clone()}</span>
                        {unmanaged}
                    </div>
                    <div class="cal-track" role="presentation">
                        <div class="cal-cells" role="presentation">{cells}</div>
                        {bars}
                        {blocks}
                        {now_line}
                    </div>
                </div>
            }
        })
        .collect_view();
    // A drag goes on over whatever cell the pointer is over now: a finger's pointer stays with
    // the cell it touched first, so the cell is found by position, for mouse and touch alike.
    let drag_over = move |ev: leptos::ev::PointerEvent| {
        if !dragging.get_untracked() {
            return;
        }
        if let Some((row, cell)) = cell_at(ev.client_x(), ev.client_y()) {
            selection.update(|s| {
                if let Some(s) = s {
                    if s.rows.1 != row || s.cells.1 != cell {
                        s.rows.1 = row;
                        s.cells.1 = cell;
                    }
                }
            });
        }
    };
    // On open (and on another day), the grid scrolls sideways to now when it is wider than
    // the screen, so a phone shows the now-line and this hour's bookings.
    let grid = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        view.track();
        scroll_to_now(grid);
    });
    view! {
        <div
            class="cal"
            node_ref=grid
            on:pointermove=drag_over
            on:pointerup=move |_| dragging.set(false)
            on:pointercancel=move |_| dragging.set(false)
            role="grid"
            aria-label=tr!(calendar.bookings_cards_by_time_arrows_move)
            aria-multiselectable="true"
            style=move || format!("--cells:{}", view.get().cells)
            data-testid="calendar"
        >
            <div class="cal-row cal-head" role="row">
                <div class="cal-gpu" role="columnheader">{tr!(calendar.card)}</div>
                <div class="cal-track cal-times" role="presentation">{header}</div>
            </div>
            {rows_view}
        </div>
    }
    .into_any()
}

/// The grid cell (row, cell) under the point, if any.
fn cell_at(x: i32, y: i32) -> Option<(usize, usize)> {
    #[cfg(feature = "hydrate")]
    {
        let element = document().element_from_point(x as f32, y as f32)?;
        let row = element.get_attribute("data-row")?.parse().ok()?;
        let cell = element.get_attribute("data-cell")?.parse().ok()?;
        Some((row, cell))
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (x, y);
        None
    }
}

/// Scrolls the grid so that the now-line sits a third of the way in, once it is drawn.
fn scroll_to_now(grid: NodeRef<leptos::html::Div>) {
    #[cfg(feature = "hydrate")]
    request_animation_frame(move || {
        let Some(grid) = grid.get_untracked() else {
            return;
        };
        let Some(line) = grid.query_selector(".cal-now").ok().flatten() else {
            return;
        };
        let (box_, at) = (
            grid.get_bounding_client_rect(),
            line.get_bounding_client_rect(),
        );
        let offset = at.left() - box_.left() + grid.scroll_left() as f64;
        grid.set_scroll_left((offset - box_.width() / 3.0).max(0.0) as i32);
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = grid;
}

/// Moves the keyboard focus to the grid cell at (row, cell).
fn focus_cell((row, cell): (usize, usize)) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let selector = format!(".cal-cell[data-row=\"{row}\"][data-cell=\"{cell}\"]");
        if let Some(element) = document()
            .query_selector(&selector)
            .ok()
            .flatten()
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
        {
            let _ = element.focus();
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (row, cell);
}

#[component]
fn Confirm(
    selection: RwSignal<Option<Selection>>,
    view: Memo<View>,
    gpus: Remote<Vec<GpuState>>,
    bookings: Remote<Vec<Booking>>,
    maintenance: Remote<Vec<MaintenanceBlock>>,
    my_quota: Remote<QuotaUse>,
    offset: FixedOffset,
    book_now: RwSignal<u64>,
    book: Write<CreateBooking, Booking>,
) -> impl IntoView {
    let note = RwSignal::new(String::new());
    // Checked: lend while idle; unchecked: the portal's default (off unless admins set it).
    let lend = RwSignal::new(false);
    // The project it is for; empty: the member's group's default (or none).
    let projects = Remote::<ProjectChoices>::new(api::Projects::PATH);
    let project = RwSignal::new(String::new());
    // The request the selection means: its cards (in row order) and slot. A slot whose first
    // cell holds "now" starts now.
    let request = Memo::new(move |_| {
        let s = selection.get()?;
        let mut rows = gpus.ok()?;
        rows.sort_by(|a, b| (&a.info.node, a.info.index).cmp(&(&b.info.node, b.info.index)));
        let (r0, r1) = (s.rows.0.min(s.rows.1), s.rows.0.max(s.rows.1));
        let chosen: Vec<(String, String)> = rows
            .get(r0..=r1.min(rows.len().saturating_sub(1)))?
            .iter()
            .map(|g| {
                (
                    g.info.uuid.clone(),
                    format!("GPU {} · {}", g.info.index, g.info.node),
                )
            })
            .collect();
        let (mut start, end) = view.get().selection(s.cells.0, s.cells.1);
        let t = now();
        if start < t && t < end {
            start = t;
        }
        Some((chosen, start, end))
    });
    // What makes the choice impossible, said before "Book" rather than after it: a time that
    // has passed, or cards that someone (or maintenance) holds then.
    let problem = Memo::new(move |_| {
        let (cards, start, end) = request.get()?;
        if end <= now() {
            return Some(tr!(calendar.in_the_past).to_string());
        }
        let held = bookings.ok().unwrap_or_default().into_iter().find_map(|b| {
            let card = cards
                .iter()
                .find(|(uuid, _)| b.gpus.iter().any(|g| &g.uuid == uuid))?;
            (b.state.holds_cards() && b.loan_of.is_none() && b.start < end && start < b.end).then(
                || {
                    tr!(
                        calendar.held_by,
                        card = card.1.clone(),
                        who = b.display_name.clone(),
                        start = short_time(b.start, offset),
                        end = short_time(b.end, offset)
                    )
                },
            )
        });
        let maintained = || {
            maintenance
                .ok()
                .unwrap_or_default()
                .into_iter()
                .find_map(|m| {
                    let card = cards
                        .iter()
                        .find(|(uuid, _)| m.gpus.iter().any(|g| &g.uuid == uuid))?;
                    (m.start < end && start < m.end)
                        .then(|| tr!(calendar.in_maintenance, card = card.1.clone()))
                })
        };
        held.or_else(maintained)
    });
    let send = move || {
        if problem.get_untracked().is_some() {
            return;
        }
        let Some((cards, start, end)) = request.get_untracked() else {
            return;
        };
        let body = CreateBooking {
            project: Some(project.get_untracked()).filter(|p| !p.is_empty()),
            gpus: Some(cards.into_iter().map(|(uuid, _)| uuid).collect()),
            count: None,
            start,
            end,
            note: note.get_untracked(),
            user: None,
            lend: lend.get_untracked().then_some(true),
        };
        book.run(body);
    };
    // Once booked, the choice is done.
    book.on_success(move || {
        note.set(String::new());
        selection.set(None);
    });
    // Enter in the grid books what is chosen.
    Effect::new(move |previous: Option<u64>| {
        let asked = book_now.get();
        if previous.is_some_and(|p| p != asked) {
            send();
        }
        asked
    });
    move || {
        request.get().map(|(cards, start, end)| {
            let hours = (end - start).num_minutes() as f64 / 60.0;
            let names: Vec<String> = cards.iter().map(|(_, n)| n.clone()).collect();
            let impact = my_quota.with(|q| quota_impact(cards.len() as u32, hours, q.and_then(|q| q.as_ref().ok())));
            view! {
                <section class="panel confirm" data-testid="confirm">
                    <h3>{tr!(calendar.book_these_cards)}</h3>
                    <p>
                        <strong>{names.join(", ")}</strong>
                        {tr!(calendar.from_to, start = long_time(start, offset), end = long_time(end, offset), hours = format!("{hours:.1}"))}
                    </p>
                    <p class="muted" data-testid="quota-impact">{impact}</p>
                    <div class="inline">
                        <input
                            name="note"
                            placeholder=tr!(calendar.note_optional_what_it_is_for)
                            maxlength="1000"
                            prop:value=move || note.get()
                            on:input=move |ev| note.set(event_target_value(&ev))
                        />
                        <label class="check" title=tr!(calendar.preemptible_queue_jobs_may_run_on)>
                            <input
                                type="checkbox"
                                name="lend"
                                prop:checked=move || lend.get()
                                on:change=move |ev| lend.set(event_target_checked(&ev))
                            />
                            {tr!(calendar.lend_while_idle)}
                        </label>
                        {move || projects.ok().filter(|p| !p.projects.is_empty()).map(|choices| {
                            let default = match &choices.default {
                                Some(name) => tr!(calendar.project_default, project = name.clone()).to_string(),
                                None => tr!(calendar.project_none).to_string(),
                            };
                            let options = choices.projects.iter().map(|p| {
                                let name = p.name.clone();
                                let shown = if p.description.is_empty() { name.clone() } else { format!("{} — {}", p.name, p.description) };
                                view! { <option value=name.clone() selected=move || project.get() == name>{shown}</option> }
                            }).collect_view();
                            view! {
                                <label class="inline">
                                    {tr!(calendar.project)}
                                    <select name="project" on:change=move |ev| project.set(event_target_value(&ev))>
                                        <option value="" selected=move || project.get().is_empty()>{default}</option>
                                        {options}
                                    </select>
                                </label>
                            }
                            .into_any()
                        })}
                        <button type="submit" disabled=move || problem.get().is_some() on:click=move |_| send()>{tr!(calendar.book)}</button>
                        <button on:click=move |_| { selection.set(None); book.clear(); }>{tr!(calendar.cancel)}</button>
                    </div>
                    {move || problem.get().map(|p| view! { <p class="form-error" role="alert" data-testid="choice-problem">{p}</p> })}
                    {book.error_view()}
                </section>
            }
        })
    }
}

#[component]
fn MyBookings(
    mine: Remote<Vec<Booking>>,
    me: Remote<User>,
    gpus: Remote<Vec<GpuState>>,
    offset: FixedOffset,
    extend: Write<(i64, ExtendBooking), Booking>,
    withdraw: Write<i64, Booking>,
) -> impl IntoView {
    // How the active bookings use their cards so far (the usage report of the last 30 days).
    let last_month = lanes_types::query::ReportQuery {
        from: Some(now() - Duration::days(30)),
        ..Default::default()
    };
    let usage = Remote::<UsageReport>::new(api::Usage::url(&(), &last_month));
    let use_of = move |id: i64| {
        usage.with(|d| {
            let b = d?
                .as_ref()
                .ok()?
                .bookings
                .iter()
                .find(|b| b.booking_id == id)?;
            Some(tr!(
                calendar.use_and_peak,
                avg = b
                    .avg_utilization_pct
                    .map_or("—".into(), |u| format!("{u:.0} %")),
                peak = b
                    .peak_memory_bytes
                    .map_or("—".into(), crate::components::format::bytes)
            ))
        })
    };
    view! {
        <section class="panel" data-testid="my-bookings">
            <h3>{tr!(calendar.my_bookings)}</h3>
            {extend.error_view()}
            {withdraw.error_view()}
            {render_remote(mine, tr!(calendar.what_mine), move |list: &Vec<Booking>| {
                let my_id = me.with(|m| m.and_then(|m| m.as_ref().ok()).map(|m| m.id));
                let rows: Vec<Booking> = list
                    .iter()
                    .filter(|b| Some(b.user_id) == my_id && b.state.holds_cards())
                    .cloned()
                    .collect();
                if rows.is_empty() {
                    return view! { <p class="muted">{tr!(calendar.no_upcoming_or_active_bookings)}</p> }.into_any();
                }
                let rows = rows
                    .into_iter()
                    .map(|b| {
                        let id = b.id;
                        let end = b.end;
                        // "GPU n" as on the calendar rows; the UUID for a card not on them.
                        let cards = gpus.with(|list| {
                            card_list(&b.gpus, list.and_then(|l| l.as_ref().ok()))
                        });
                        // A notebook on an active booking of one's own making.
                        let notebook = (b.state == BookingState::Active && b.queue_job.is_none() && b.loan_of.is_none())
                            .then(|| view! { <crate::pages::jobs::OpenNotebook booking=id /> });
                        let (label, withdraw_label) = match (b.state, b.idle_since) {
                            (BookingState::Active, Some(_)) => (tr!(calendar.state_active_idle), tr!(calendar.release)),
                            (BookingState::Active, None) => (tr!(calendar.state_active), tr!(calendar.release)),
                            _ => (tr!(calendar.state_upcoming), tr!(calendar.withdraw)),
                        };
                        view! {
                            <tr data-booking=id>
                                <td>{format!("{} – {}", long_time(b.start, offset), long_time(b.end, offset))}</td>
                                <td>{cards}</td>
                                <td>{label}</td>
                                <td class="num" title=tr!(calendar.mean_utilization_of_its_cards_so)>{move || use_of(id).unwrap_or_default()}</td>
                                <td>{crate::calendar::note_of(&b)}</td>
                                <td class="actions">
                                    <button on:click=move |_| { withdraw.clear(); extend.run((id, ExtendBooking { end: end + Duration::hours(1) })) }>"+1 h"</button>
                                    <button class="danger" on:click=move |_| { extend.clear(); withdraw.run(id) }>{withdraw_label}</button>
                                    {notebook}
                                </td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list">
                        <ListHead cols=vec![Col::Text(tr!(calendar.col_when)), Col::Text(tr!(calendar.col_cards)), Col::Text(tr!(calendar.col_state)), Col::Num(tr!(calendar.col_use)), Col::Text(tr!(calendar.col_note)), Col::Blank] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                    .into_any()
            })}
        </section>
    }
    .into_any()
}

/// A booking write (`POST /bookings`).
pub fn booking_write() -> Write<CreateBooking, Booking> {
    Write::new(|booking: &CreateBooking| {
        let booking = booking.clone();
        async move { rest::call::<api::Book>((), &booking).await }
    })
}
