//! The live dashboard at `/`: one card per GPU with charts of the last five minutes, rendered
//! on the server with current values, then kept live over the telemetry websocket.

use crate::api::get_fleet;
use crate::calendar::{short_time, user_color};
use crate::components::chart::TimeSeriesChart;
use crate::components::clock::{local_offset, now};
use crate::components::format::{bytes, gib, kwh};
use crate::components::remote::Remote;
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use crate::live::LinkStatus;
use lanes_types::api::{self, Endpoint};
use lanes_types::booking::{holder_and_next, Booking, GpuRef};
use lanes_types::health::HealthLevel;
use lanes_types::report::BookingEnergyNow;
use lanes_types::{
    FleetSnapshot, GpuState, Health, NodeStatus, ProcessLane, SourceKind, HISTORY_WINDOW_MS,
};
use leptos::prelude::*;

#[component]
pub fn DashboardPage() -> impl IntoView {
    let initial = Resource::new(|| (), |_| get_fleet());
    view! {
        <Suspense fallback=|| view! { <p class="page loading">{tr!(dashboard.loading_gpus)}</p> }>
            {move || Suspend::new(async move {
                match initial.await {
                    Ok(snapshot) => view! { <LiveFleet snapshot /> }.into_any(),
                    Err(err) => {
                        view! {
                            <p class="page error">{format!("Could not load the GPUs: {err}")}</p>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn LiveFleet(snapshot: FleetSnapshot) -> impl IntoView {
    let fleet = RwSignal::new(snapshot);
    // Who holds each card now and who is next: loaded in the browser, whose clock and zone
    // the times are shown in (anonymous viewers of an open dashboard do not get bookings).
    let week = lanes_types::query::BookingQuery {
        from: Some(now()),
        to: Some(now() + chrono::Duration::days(7)),
        ..Default::default()
    };
    let bookings = Remote::<Vec<Booking>>::new(api::Bookings::url(&(), &week));
    // Queue jobs start and end by themselves: look again now and then.
    bookings.refresh_every(std::time::Duration::from_secs(10));
    // What each active booking's cards drew so far, for the cards' holder lines.
    let energy = Remote::<Vec<BookingEnergyNow>>::new(api::BookingEnergy::PATH);
    energy.refresh_every(std::time::Duration::from_secs(10));
    provide_context(energy);
    let status = RwSignal::new(LinkStatus::Connecting);
    #[cfg(feature = "hydrate")]
    Effect::new(move |started: Option<()>| {
        if started.is_none() {
            crate::live::follow(fleet, status);
        }
    });

    let simulated = move || {
        fleet.with(|f| {
            f.source == SourceKind::Simulated
                || f.nodes
                    .iter()
                    .any(|n| n.gpu_source == SourceKind::Simulated)
        })
    };
    // Which node's cards are shown ("" for all of them), as the filter says.
    let shown = RwSignal::new(String::new());
    let nodes = move || fleet.with(|f| f.node_names());
    let several = move || nodes().len() > 1;
    view! {
        <TopBar>
            <span class=move || status.get().css_class() data-testid="link-status">
                {move || status.get().label()}
            </span>
        </TopBar>
        <Show when=simulated>
            <p class="banner" role="status">
                {tr!(dashboard.simulated_gpu_fleet_no_nvidia_driver)}
                <code>"--gpus sim:N"</code>
                {tr!(dashboard.was_asked_for_the_cards_and)}
            </p>
        </Show>
        <main class="page">
            <Summary fleet />
            <Show when=several>
                <NodeFilter nodes shown />
            </Show>
            <For each=nodes key=|n| n.clone() let:name>
                <NodeSection fleet bookings name shown several />
            </For>
        </main>
    }
    .into_any()
}

/// Which node's cards the dashboard shows.
#[component]
fn NodeFilter(
    nodes: impl Fn() -> Vec<String> + Send + Sync + Copy + 'static,
    shown: RwSignal<String>,
) -> impl IntoView {
    view! {
        <label class="node-filter">
            {tr!(dashboard.node)}
            <select
                data-testid="node-filter"
                on:change=move |ev| shown.set(event_target_value(&ev))
            >
                <option value="" selected=move || shown.get().is_empty()>{tr!(dashboard.all_nodes)}</option>
                <For each=nodes key=|n| n.clone() let:name>
                    <option value=name.clone()>{name.clone()}</option>
                </For>
            </select>
        </label>
    }
    .into_any()
}

/// One node's cards under a heading that says how the node is (greyed while unreachable, with
/// its last values and since when).
#[component]
fn NodeSection(
    fleet: RwSignal<FleetSnapshot>,
    bookings: Remote<Vec<Booking>>,
    name: String,
    shown: RwSignal<String>,
    several: impl Fn() -> bool + Send + Sync + Copy + 'static,
) -> impl IntoView {
    let keys = {
        let name = name.clone();
        move || {
            fleet.with(|f| {
                f.gpus
                    .iter()
                    .filter(|g| g.info.node == name)
                    .map(|g| (g.info.node.clone(), g.info.uuid.clone()))
                    .collect::<Vec<_>>()
            })
        }
    };
    let visible = {
        let name = name.clone();
        move || shown.with(|s| s.is_empty() || *s == name)
    };
    let up = {
        let name = name.clone();
        move || fleet.with(|f| f.node_is_up(&name))
    };
    let heading = {
        let name = name.clone();
        move || {
            fleet.with(|f| {
                let mut parts = counts(&f.node_summary(&name));
                let unmanaged = f
                    .gpus
                    .iter()
                    .filter(|g| g.info.node == name && g.unmanaged)
                    .count();
                if unmanaged > 0 {
                    parts.push(tr!(counts.unmanaged, n = unmanaged));
                }
                if let Some(node) = f.node(&name) {
                    if node.status == NodeStatus::Unreachable {
                        parts.insert(
                            0,
                            tr!(
                                dashboard.unreachable_since,
                                when = short_time(node.last_seen, local_offset())
                            ),
                        );
                    }
                    parts.push(node.driver.clone());
                }
                parts.join(" · ")
            })
        }
    };
    let title = name.clone();
    view! {
        <section
            class="node"
            class:unreachable=move || !up()
            data-node=name
            style:display=move || if visible() { "" } else { "none" }
        >
            <Show when=several>
                <h2 class="node-name">
                    {title.clone()}
                    <span class="node-state" data-testid="node-state">{heading.clone()}</span>
                </h2>
            </Show>
            <div class="gpu-grid">
                <For each=keys.clone() key=|k| k.clone() let:key>
                    <GpuCard fleet bookings node=key.0 uuid=key.1 />
                </For>
            </div>
        </section>
    }
    .into_any()
}

#[component]
fn Summary(fleet: RwSignal<FleetSnapshot>) -> impl IntoView {
    let summary = Memo::new(move |_| fleet.with(|f| f.summary()));
    view! {
        <p class="summary" data-testid="summary">
            {move || {
                let s = summary.get();
                let mut parts = counts(&s);
                parts.push(
                    tr!(
                        dashboard.memory_in_use,
                        used = bytes(s.memory_used_bytes),
                        total = gib(s.memory_total_bytes)
                    ),
                );
                parts.join(" · ")
            }}
        </p>
    }
}

#[component]
fn GpuCard(
    fleet: RwSignal<FleetSnapshot>,
    bookings: Remote<Vec<Booking>>,
    node: String,
    uuid: String,
) -> impl IntoView {
    let energy = use_context::<Remote<Vec<BookingEnergyNow>>>();
    let energy_of = move |booking: i64| {
        energy?.with(|data| {
            let list = data?.as_ref().ok()?;
            list.iter()
                .find(|e| e.booking_id == booking)
                .map(|e| tr!(dashboard.this_booking_energy, energy = kwh(e.energy_kwh)))
        })
    };
    let me = crate::components::page_data::viewer().map(|u| u.id);
    let holder = {
        let card = GpuRef {
            node: node.clone(),
            uuid: uuid.clone(),
        };
        move || {
            bookings.with(|data| {
                let list = data?.as_ref().ok()?;
                let offset = local_offset();
                let (holder, next) = holder_and_next(list, &card, now());
                let next_text = next.map(|b| {
                    tr!(
                        dashboard.next,
                        who = b.display_name.clone(),
                        when = short_time(b.start, offset)
                    )
                });
                let next_part = next_text
                    .clone()
                    .map(|n| format!(" · {n}"))
                    .unwrap_or_default();
                let text = match holder {
                    Some(b) => {
                        let drawn = energy_of(b.id).unwrap_or_default();
                        match b.queue_job {
                            Some(job) => tr!(
                                dashboard.queue_job_holds,
                                job,
                                who = b.display_name.clone(),
                                until = short_time(b.end, offset),
                                rest = format!("{drawn}{next_part}")
                            ),
                            None => tr!(
                                dashboard.booked_by,
                                who = b.display_name.clone(),
                                until = short_time(b.end, offset),
                                rest = format!("{drawn}{next_part}")
                            ),
                        }
                    }
                    None => match next_text {
                        Some(next) => tr!(dashboard.free_next, next),
                        None => tr!(dashboard.free_week).into(),
                    },
                };
                let color = holder.map(|b| user_color(&b.username));
                let lent = holder.and_then(|b| b.lent_to.map(|job| (b.id, job)));
                // The viewer's own booking (not a queue job's, not a loan): a notebook on it.
                let mine = holder
                    .filter(|b| {
                        Some(b.user_id) == me && b.queue_job.is_none() && b.loan_of.is_none()
                    })
                    .map(|b| b.id);
                Some(view! {
                    <p class="holder" class:held=holder.is_some() data-testid="holder">
                        <span
                            class="dot"
                            style=color.map(|c| format!("background:{c}")).unwrap_or_default()
                        ></span>
                        {text}
                        {lent.map(|(booking, job)| view! { <Lent booking job /> })}
                        {mine.map(|booking| view! { <crate::pages::jobs::OpenNotebook booking /> })}
                    </p>
                })
            })
        }
    };
    let gpu: Memo<Option<GpuState>> = {
        let (node, uuid) = (node.clone(), uuid.clone());
        Memo::new(move |_| fleet.with(|f| f.gpu(&node, &uuid).cloned()))
    };
    // A card's recent points of one reading; a point without it (an older node, a card
    // without the sensor) is left out.
    let series = |pick: fn(&lanes_types::HistoryPoint) -> Option<f64>| {
        let (node, uuid) = (node.clone(), uuid.clone());
        Signal::derive(move || {
            fleet.with(|f| {
                f.history_of(&node, &uuid)
                    .iter()
                    .filter_map(|p| Some((p.at_ms, pick(p)?)))
                    .collect::<Vec<_>>()
            })
        })
    };
    let util_points = series(|p| Some(p.utilization_gpu_pct as f64));
    let mem_points = series(|p| Some(p.memory_used_bytes as f64));
    let temp_points = series(|p| p.temperature_c.map(f64::from));
    let power_points = series(|p| p.power_watts);
    let clock_points = series(|p| p.sm_clock_mhz.map(f64::from));
    let mem_busy_points = series(|p| p.utilization_memory_pct.map(f64::from));
    // Scales: power against the card's limit; temperature to 100 °C (or what it reached);
    // the clock to the fastest it ran in the window.
    let top_of = |points: Signal<Vec<(i64, f64)>>, floor: f64| {
        Signal::derive(move || points.with(|p| p.iter().map(|(_, v)| *v).fold(floor, f64::max)))
    };
    let temp_max = top_of(temp_points, 100.0);
    let clock_max = top_of(clock_points, 1.0);
    let power_top = top_of(power_points, 1.0);
    let power_max = Signal::derive(move || {
        gpu.with(|g| {
            g.as_ref()
                .and_then(|g| g.sample.as_ref())
                .and_then(|s| s.power_limit_watts)
        })
        .unwrap_or_else(|| power_top.get())
    });
    let gap_ms = fleet.with_untracked(|f| (f.interval_ms as i64).max(250) * 5);
    let field = move |f: fn(&GpuState) -> String| {
        move || gpu.with(|g| g.as_ref().map(f).unwrap_or_default())
    };

    let state_label = move || {
        gpu.with(|g| match g {
            Some(g) if !g.health.is_ok() => tr!(gpu_state.unhealthy),
            Some(g) if g.is_busy() => tr!(gpu_state.busy),
            _ => tr!(gpu_state.idle),
        })
    };
    let reason = move || {
        gpu.with(|g| match g.as_ref().map(|g| &g.health) {
            Some(Health::Unhealthy { reason }) => Some(reason.clone()),
            _ => None,
        })
    };
    // The health keeper's verdict: a badge, and why in words (with the Xid's meaning).
    let condition = move || {
        gpu.with(|g| {
            g.as_ref()
                .map(|g| g.condition.clone())
                // A failed reading is already said as the card's error.
                .filter(|c| {
                    c.findings
                        .iter()
                        .any(|f| !matches!(f, lanes_types::health::Finding::Unreadable { .. }))
                })
        })
    };
    let mem_total = Signal::derive(move || {
        gpu.with(|g| g.as_ref().map_or(1.0, |g| g.info.memory_total_bytes as f64))
    });
    let sample_text = move |f: fn(&lanes_types::GpuSample) -> String| {
        Signal::derive(move || {
            gpu.with(|g| {
                g.as_ref()
                    .and_then(|g| g.sample.as_ref())
                    .map_or_else(|| "—".to_string(), f)
            })
        })
    };

    view! {
        <article
            class="gpu-card"
            class:unmanaged=move || gpu.with(|g| g.as_ref().is_some_and(|g| g.unmanaged))
            class:unhealthy=move || state_label() == "unhealthy"
            class:violated=move || gpu.with(|g| g.as_ref().is_some_and(|g| g.processes.iter().any(|p| p.lane == Some(ProcessLane::Unbooked))))
            data-uuid=uuid.clone()
        >
            <header>
                <h2>"GPU " {field(|g| g.info.index.to_string())}</h2>
                <span class="gpu-name">{field(|g| g.info.name.clone())}</span>
                <span class=move || format!("badge {}", state_label())>{state_label}</span>
                {move || gpu.with(|g| g.as_ref().is_some_and(|g| g.unmanaged)).then(|| view! {
                    <span class="badge unmanaged" title=tr!(dashboard.lanes_does_not_manage_this_card)>{tr!(dashboard.unmanaged)}</span>
                })}
                {move || condition().map(|c| {
                    let label = match c.level {
                        HealthLevel::Failing => tr!(health.failing),
                        _ => tr!(health.degraded),
                    };
                    view! {
                        <span class=format!("badge health-{}", c.level.as_str()) data-testid="health" title=c.words()>{label}</span>
                    }
                })}
                {move || gpu.with(|g| g.as_ref().and_then(|g| g.idle_booking)).map(|id| view! {
                    <span class="badge idle-booking" title=format!("booking {id} is booked but idle")>{tr!(dashboard.booked_idle)}</span>
                })}
            </header>
            <p class="ids">
                <span title="UUID">{uuid.clone()}</span>
                " · "
                <span title=tr!(dashboard.pci_bus_id)>{field(|g| g.info.pci_bus_id.clone())}</span>
                " · "
                <span title=tr!(dashboard.node_2)>{field(|g| g.info.node.clone())}</span>
            </p>
            {holder}
            {move || reason().map(|r| view! { <p class="health-error">{r}</p> })}
            {move || condition().map(|c| view! {
                <p class=format!("health-reason {}", c.level.as_str()) data-testid="health-reason">{c.words()}</p>
            })}
            <div class="charts">
                <TimeSeriesChart
                    points=util_points
                    y_max=100.0
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.utilization)
                    current=sample_text(|s| format!("{} %", s.utilization_gpu_pct))
                    class="series-util"
                />
                <TimeSeriesChart
                    points=mem_points
                    y_max=mem_total
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.memory)
                    format=memory_text
                    current=Signal::derive(move || {
                        gpu.with(|g| match g.as_ref().and_then(|g| g.sample.as_ref().map(|s| (s, g))) {
                            Some((s, g)) => {
                                format!(
                                    "{} / {}",
                                    bytes(s.memory_used_bytes),
                                    gib(g.info.memory_total_bytes),
                                )
                            }
                            None => "—".into(),
                        })
                    })
                    class="series-mem"
                />
            </div>
            <div class="charts compact" data-testid="small-charts">
                <TimeSeriesChart
                    points=temp_points
                    y_max=temp_max
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.temperature)
                    current=sample_text(|s| s.temperature_c.map_or("—".into(), |t| format!("{t} °C")))
                    class="series-temp"
                    testid="temperature"
                />
                <TimeSeriesChart
                    points=power_points
                    y_max=power_max
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.power)
                    current=sample_text(|s| match (s.power_watts, s.power_limit_watts) {
                        (Some(p), Some(l)) => format!("{p:.0} / {l:.0} W"),
                        (Some(p), None) => format!("{p:.0} W"),
                        _ => "—".into(),
                    })
                    class="series-power"
                    testid="power"
                />
                <TimeSeriesChart
                    points=clock_points
                    y_max=clock_max
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.sm_clock)
                    current=sample_text(|s| s.sm_clock_mhz.map_or("—".into(), |c| format!("{c} MHz")))
                    class="series-clock"
                    testid="sm-clock"
                />
                <TimeSeriesChart
                    points=mem_busy_points
                    y_max=100.0
                    window_ms=HISTORY_WINDOW_MS
                    gap_ms
                    label=tr!(live_chart.memory_activity)
                    current=sample_text(|s| format!("{} %", s.utilization_memory_pct))
                    class="series-membusy"
                    testid="mem-busy"
                />
            </div>
            <CardDay node=node.clone() uuid=uuid.clone() />
            <Processes gpu />
        </article>
    }
    .into_any()
}

fn memory_text(v: f64) -> String {
    bytes(v.max(0.0) as u64)
}

/// A card's last 24 hours, loaded when the viewer opens it.
#[component]
fn CardDay(node: String, uuid: String) -> impl IntoView {
    let open = RwSignal::new(false);
    view! {
        <div class="card-day">
            <button
                type="button"
                class="day-toggle"
                data-testid="card-day"
                aria-expanded=move || open.get().to_string()
                on:click=move |_| open.update(|o| *o = !*o)
            >
                {move || if open.get() { tr!(dashboard.hide_day) } else { tr!(dashboard.show_day) }}
            </button>
            <Show when=move || open.get()>
                <DayCharts node=node.clone() uuid=uuid.clone() />
            </Show>
        </div>
    }
    .into_any()
}

#[component]
fn DayCharts(node: String, uuid: String) -> impl IntoView {
    let to = now();
    let from = to - chrono::Duration::hours(24);
    // The metrics the history page offers, with its captions.
    let charts = crate::pages::history::METRICS
        .iter()
        .map(|metric| {
            let caption = crate::pages::history::caption(metric);
            let query = lanes_types::query::HistoryQuery {
                gpu: Some(uuid.clone()),
                metric: Some(metric.to_string()),
                from: Some(from),
                to: Some(to),
                points: Some(144),
            };
            let answer = Remote::<lanes_types::history::HistoryAnswer>::new(api::History::url(
                &(),
                &query,
            ));
            let node = node.clone();
            view! {
                <figure class="history-chart" data-metric=*metric>
                    {move || answer.with(|data| match data {
                        None => view! { <figcaption>{tr!(dashboard.chart_loading, caption)}</figcaption> }.into_any(),
                        Some(Err(e)) => view! { <figcaption class="form-error">{e.clone()}</figcaption> }.into_any(),
                        Some(Ok(a)) => {
                            let series = a.series.iter().find(|s| s.node == node);
                            let points: Vec<(i64, f64)> = series
                                .map(|s| s.points.iter().map(|p| (p.t_ms, p.avg)).collect())
                                .unwrap_or_default();
                            let top = series.map_or(1.0, |s| {
                                crate::pages::history::scale_max(metric, std::slice::from_ref(s)).max(1.0)
                            });
                            let line = crate::components::chart::series_path(
                                &points,
                                a.to_ms,
                                a.to_ms - a.from_ms,
                                top,
                                a.bucket_s * 1500,
                            )
                            .line;
                            let text = |v: f64| if *metric == "memory" { memory_text(v) } else { format!("{v:.0}") };
                            let summary = match crate::components::chart::range_of(&points) {
                                Some((lo, hi)) => tr!(dashboard.day_range, caption, low = text(lo), high = text(hi)),
                                None => tr!(dashboard.day_none, caption),
                            };
                            view! {
                                <figcaption>{summary.clone()}</figcaption>
                                <svg viewBox="0 0 300 60" preserveAspectRatio="none" role="img" aria-label=summary>
                                    <path d=line class="line" />
                                </svg>
                            }
                            .into_any()
                        }
                    })}
                </figure>
            }
        })
        .collect_view();
    view! { <div class="day-charts">{charts}</div> }.into_any()
}

/// "lent to queue job #N", and a button for its holder to take the card back.
#[component]
fn Lent(booking: i64, job: i64) -> impl IntoView {
    // The dashboard is live: the card shows as its holder's again with the next tick.
    let reclaim = crate::components::write::Write::new(|booking: &i64| {
        crate::rest::call::<api::ReclaimBooking>(*booking, &())
    });
    view! {
        <span class="lent" data-testid="lent">{tr!(dashboard.lent, job)}</span>
        <button
            type="button"
            class="small"
            title=tr!(dashboard.take_the_card_back_now_the)
            on:click=move |_| reclaim.run(booking)
        >
            {tr!(dashboard.reclaim)}
        </button>
        {move || reclaim.error().map(|m| view! { <span class="form-error" role="alert">{m}</span> })}
    }
    .into_any()
}

/// "8 GPUs · 3 busy · 5 idle", and the unhealthy ones if any.
fn counts(s: &lanes_types::fleet::FleetSummary) -> Vec<String> {
    let mut parts = vec![
        tr!(counts.gpus, n = s.total),
        tr!(counts.busy, n = s.busy),
        tr!(counts.idle, n = s.idle),
    ];
    if s.unhealthy > 0 {
        parts.push(tr!(counts.unhealthy, n = s.unhealthy));
    }
    parts
}

/// What the watchdog made of a process, in a word or two.
fn lane_text(lane: Option<ProcessLane>, simulated: bool) -> String {
    match lane {
        Some(ProcessLane::Job { id }) => tr!(lane.job, id),
        Some(ProcessLane::Booked) => tr!(lane.booked).into(),
        Some(ProcessLane::Exempt) => tr!(lane.exempt).into(),
        Some(ProcessLane::Unbooked) => tr!(lane.unbooked).into(),
        Some(ProcessLane::Simulated) => tr!(lane.simulated).into(),
        None if simulated => tr!(lane.simulated).into(),
        None => "—".into(),
    }
}

#[component]
fn Processes(gpu: Memo<Option<GpuState>>) -> impl IntoView {
    let processes =
        move || gpu.with(|g| g.as_ref().map(|g| g.processes.clone()).unwrap_or_default());
    view! {
        <Show
            when=move || !processes().is_empty()
            fallback=|| view! { <p class="no-procs">{tr!(dashboard.no_processes)}</p> }
        >
            <table class="procs">
                <ListHead cols=vec![Col::Text("PID"), Col::Text(tr!(dashboard.col_user)), Col::Text(tr!(dashboard.col_command)), Col::Num("SM"), Col::Num(tr!(dashboard.col_memory)), Col::Text(tr!(dashboard.col_lane))] />
                <tbody>
                    <For each=processes key=|p| p.clone() let:p>
                        <tr class:unbooked=p.lane == Some(ProcessLane::Unbooked) class:simulated=p.simulated>
                            <td>{p.pid}</td>
                            <td>{match (&p.user, &p.container) {
                                (Some(user), _) => user.clone(),
                                (None, Some(_)) => tr!(dashboard.owner_unknown).to_string(),
                                (None, None) => "?".into(),
                            }}</td>
                            <td>
                                {p.command.clone().unwrap_or_else(|| "?".into())}
                                {p.container.clone().map(|c| {
                                    let name = c.name.clone().or(c.id.clone()).unwrap_or_default();
                                    let image = c.image.clone().map(|image| tr!(dashboard.container_image, image)).unwrap_or_default();
                                    view! { <br /><small class="muted" data-testid="container" title=image>{tr!(dashboard.in_container, runtime = c.runtime.clone(), name)}</small> }.into_any()
                                })}
                            </td>
                            {match p.sm_pct {
                                Some(sm) => view! {
                                    <td class="num sm" title=tr!(dashboard.its_share_of_the_card_s)>{format!("{sm} %")}</td>
                                }.into_any(),
                                None => view! {
                                    <td class="num sm" title=tr!(dashboard.the_driver_gives_no_per_process)>"n/a"</td>
                                }.into_any(),
                            }}
                            <td class="num">{p.used_memory_bytes.map_or("—".into(), bytes)}</td>
                            <td class="lane">{lane_text(p.lane, p.simulated)}</td>
                        </tr>
                    </For>
                </tbody>
            </table>
        </Show>
    }
    .into_any()
}
