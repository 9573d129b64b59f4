//! `/history`: every card's past at a glance (a heatmap of cards × time) and one chart per card,
//! or chosen cards on one chart to compare them, over presets or a range typed in the viewer's
//! zone, with zoom and paging; and the usage report of the same range with CSV downloads.

use crate::components::chart::series_path;
use crate::components::clock::{local_input, local_input_value, now, offset_at};
use crate::components::format::{bytes, date_time, kwh};
use crate::components::remote::{render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use chrono::{DateTime, Duration, Utc};
use lanes_types::api::{self, Endpoint};
use lanes_types::history::{HistoryAnswer, HistorySeries};
use lanes_types::query::{HistoryQuery, ReportQuery};
use lanes_types::report::{UsageReport, UsageRow};
use leptos::prelude::*;

/// Buckets per card the page asks for: about one per heatmap column.
const POINTS: i64 = 240;

/// The metrics `/api/v1/history` answers.
pub const METRICS: [&str; 5] = ["utilization", "memory", "temperature", "power", "sm_clock"];

/// A metric's caption, with its unit.
pub fn caption(metric: &str) -> &'static str {
    match metric {
        "utilization" => tr!(metric.utilization),
        "memory" => tr!(metric.memory),
        "temperature" => tr!(metric.temperature),
        "power" => tr!(metric.power),
        _ => tr!(metric.sm_clock),
    }
}

/// The range shown, `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Range {
    pub fn last(span: Duration, to: DateTime<Utc>) -> Self {
        Self {
            from: to - span,
            to,
        }
    }

    /// From the viewer's midnight today until now.
    pub fn today(now: DateTime<Utc>) -> Self {
        let local = now.with_timezone(&offset_at(now));
        let midnight = local
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .and_then(|m| m.and_local_timezone(offset_at(now)).single())
            .map_or(now - Duration::hours(24), |m| m.with_timezone(&Utc));
        Self {
            from: midnight,
            to: now.max(midnight + Duration::minutes(1)),
        }
    }

    fn span(&self) -> Duration {
        self.to - self.from
    }

    /// Half as wide, around the same middle (never under a minute).
    pub fn zoom_in(&self) -> Self {
        let half = (self.span() / 4).max(Duration::seconds(30));
        let mid = self.from + self.span() / 2;
        Self {
            from: mid - half,
            to: mid + half,
        }
    }

    /// Twice as wide, around the same middle.
    pub fn zoom_out(&self) -> Self {
        let mid = self.from + self.span() / 2;
        Self {
            from: mid - self.span(),
            to: mid + self.span(),
        }
    }

    /// Moved by half its width (`direction` -1 earlier, +1 later).
    pub fn page(&self, direction: i32) -> Self {
        let step = self.span() / 2 * direction;
        Self {
            from: self.from + step,
            to: self.to + step,
        }
    }
}

/// A heatmap cell's colour for `value` of `max`: light for low, dark blue for high.
pub fn heat_color(value: f64, max: f64) -> String {
    let ratio = if max > 0.0 {
        (value / max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let lightness = 95.0 - ratio * 60.0;
    format!("hsl(215, 80%, {lightness:.0}%)")
}

/// The value a metric's scale tops out at: 100 for percentages, else the largest maximum seen.
pub fn scale_max(metric: &str, series: &[HistorySeries]) -> f64 {
    if metric == "utilization" {
        return 100.0;
    }
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.max))
        .fold(0.0, f64::max)
}

fn value_text(metric: &str, v: f64) -> String {
    match metric {
        "memory" => bytes(v.max(0.0) as u64),
        "utilization" => format!("{v:.0} %"),
        _ => format!("{v:.0}"),
    }
}

#[component]
pub fn HistoryPage() -> impl IntoView {
    let range = RwSignal::new(Range::last(Duration::hours(24), now()));
    let metric = RwSignal::new("utilization".to_string());
    let url = move || {
        let r = range.get();
        let query = HistoryQuery {
            gpu: Some("all".into()),
            metric: Some(metric.get()),
            from: Some(r.from),
            to: Some(r.to),
            points: Some(POINTS),
        };
        api::History::url(&(), &query)
    };
    let history = Remote::<HistoryAnswer>::new(url());
    let report_url = move || {
        let r = range.get();
        ReportQuery {
            from: Some(r.from),
            to: Some(r.to),
            table: None,
        }
    };
    let report = Remote::<UsageReport>::new(api::Usage::url(&(), &report_url()));
    Effect::new(move |previous: Option<String>| {
        let next = url();
        if previous.as_ref().is_some_and(|p| *p != next) {
            history.load(next.clone());
            report.load(api::Usage::url(&(), &report_url()));
        }
        next
    });
    // Which preset is showing ("" once zoomed, paged or typed).
    let chosen = RwSignal::new("24h");
    let preset = move |key: &'static str| {
        let t = now();
        range.set(match key {
            "1h" => Range::last(Duration::hours(1), t),
            "7d" => Range::last(Duration::days(7), t),
            "30d" => Range::last(Duration::days(30), t),
            "today" => Range::today(t),
            _ => Range::last(Duration::hours(24), t),
        });
        chosen.set(key);
    };
    let moved = move |f: fn(&Range) -> Range| {
        range.update(|r| *r = f(r));
        chosen.set("");
    };
    let compare = RwSignal::new(Vec::<String>::new());
    let presets: [(&'static str, &'static str); 5] = [
        ("1h", tr!(history_preset.p1h)),
        ("24h", tr!(history_preset.p24h)),
        ("today", tr!(history_preset.today)),
        ("7d", tr!(history_preset.p7d)),
        ("30d", tr!(history_preset.p30d)),
    ];
    view! {
        <TopBar />
        <main class="page">
            <h2>{tr!(history.history)}</h2>
            <div class="panel history-controls">
            <div class="toolbar" data-testid="range">
                <div class="segmented" role="group" aria-label=tr!(history.range)>
                    {presets
                        .into_iter()
                        .map(|(key, label)| view! {
                            <button
                                type="button"
                                class:active=move || chosen.get() == key
                                aria-pressed=move || (chosen.get() == key).to_string()
                                on:click=move |_| preset(key)
                            >
                                {label}
                            </button>
                        })
                        .collect_view()}
                </div>
                <div class="segmented" role="group" aria-label=tr!(history.move_and_zoom)>
                    <button type="button" aria-label=tr!(history.earlier) on:click=move |_| moved(|r| r.page(-1))>"‹"</button>
                    <button type="button" aria-label=tr!(history.zoom_in) on:click=move |_| moved(Range::zoom_in)>"+"</button>
                    <button type="button" aria-label=tr!(history.zoom_out) on:click=move |_| moved(Range::zoom_out)>"−"</button>
                    <button type="button" aria-label=tr!(history.later) on:click=move |_| moved(|r| r.page(1))>"›"</button>
                </div>
                <label class="inline">
                    {tr!(history.metric)}
                    <select on:change=move |ev| metric.set(event_target_value(&ev))>
                        {METRICS
                            .iter()
                            .map(|value| view! { <option value=*value>{caption(value)}</option> })
                            .collect_view()}
                    </select>
                </label>
            </div>
            <CustomRange range chosen />
            </div>
            <p class="muted">
                {move || {
                    let r = range.get();
                    format!("{} → {}", date_time(r.from), date_time(r.to))
                }}
            </p>
            {render_remote(history, tr!(history.what_history), move |answer: &HistoryAnswer| {
                view! {
                    <Heatmap answer=answer.clone() />
                    <Compare answer=answer.clone() chosen=compare />
                    <Charts answer=answer.clone() />
                }
            })}
            <ByDay range />
            <HealthTimeline />
            <section class="panel">
                <h3>{tr!(history.usage_in_this_range)}</h3>
                {render_remote(report, tr!(history.what_report), move |r: &UsageReport| {
                    view! { <ReportTables report=r.clone() query=report_url() /> }
                })}
            </section>
        </main>
    }
    .into_any()
}

/// Each card's health changes, newest first, card by card; an admin puts a card that is not
/// healthy back in service from here.
#[component]
fn HealthTimeline() -> impl IntoView {
    use lanes_types::health::{CardHealth, ClearHealth, HealthCause, HealthChange};
    let clear = crate::components::write::Write::new(|request: &ClearHealth| {
        let request = request.clone();
        async move { crate::rest::call::<api::ClearCardHealth>((), &request).await }
    });
    let changes = Remote::<Vec<HealthChange>>::new(api::HealthChanges::url(
        &(),
        &lanes_types::health::HealthChangesQuery::default(),
    ))
    .follows(clear);
    let cards = Remote::<Vec<CardHealth>>::new(api::HealthOfCards::PATH).follows(clear);
    let admin = crate::components::page_data::viewer().is_some_and(|u| u.is_admin());
    view! {
        <section class="panel health-timeline" data-testid="health-timeline">
            <h3>{tr!(health.timeline)}</h3>
            {render_remote(cards, tr!(health.timeline), move |cards: &Vec<CardHealth>| {
                let cards = cards.clone();
                render_remote(changes, tr!(health.timeline), move |changes: &Vec<HealthChange>| {
                    let changes = changes.clone();
                    let shown = cards
                        .iter()
                        .any(|c| !c.condition.is_healthy() || changes.iter().any(|h| h.gpu == c.gpu));
                    let empty = (!shown).then(|| view! { <p class="muted">{tr!(health.none)}</p> });
                    let rows = cards
                        .iter()
                        .filter(|c| !c.condition.is_healthy() || changes.iter().any(|h| h.gpu == c.gpu))
                        .map(|card| {
                            let mine: Vec<HealthChange> =
                                changes.iter().filter(|h| h.gpu == card.gpu).cloned().collect();
                            let gpu = card.gpu.clone();
                            let unhealthy = !card.condition.is_healthy();
                            view! {
                                <h4 data-uuid=card.gpu.uuid.clone()>
                                    {lanes_types::card_name(card.index, &card.gpu.node)} " · "
                                    <span class=format!("badge health-{}", card.condition.level.as_str())>{level_word(card.condition.level)}</span>
                                </h4>
                                {(admin && unhealthy).then(|| {
                                    let gpu = gpu.clone();
                                    view! {
                                        <button type="button" data-testid="clear-health" on:click=move |_| clear.run(ClearHealth { gpu: gpu.clone(), note: String::new() })>
                                            {tr!(health.clear)}
                                        </button>
                                    }
                                })}
                                {if mine.is_empty() {
                                    view! { <p class="muted">{tr!(health.no_changes)}</p> }.into_any()
                                } else {
                                    view! {
                                        <table class="list">
                                            <thead><tr><th>{tr!(health.at)}</th><th>{tr!(health.level)}</th><th>{tr!(health.why)}</th></tr></thead>
                                            <tbody>
                                                {mine.into_iter().map(|h| {
                                                    let why = match h.cause {
                                                        HealthCause::Cleared => tr!(health.cleared_by, who = h.by.clone().unwrap_or_default()),
                                                        HealthCause::Reset => tr!(health.reset).to_string(),
                                                        HealthCause::Process => format!(
                                                            "{} — {}",
                                                            h.findings.iter().map(|f| f.words()).collect::<Vec<_>>().join("; "),
                                                            tr!(health.process, process = h.process.clone().unwrap_or_default())
                                                        ),
                                                        HealthCause::Seen => h.findings.iter().map(|f| f.words()).collect::<Vec<_>>().join("; "),
                                                    };
                                                    view! {
                                                        <tr>
                                                            <td>{date_time(h.at)}</td>
                                                            <td><span class=format!("badge health-{}", h.level.as_str())>{level_word(h.level)}</span></td>
                                                            <td>{why}</td>
                                                        </tr>
                                                    }
                                                }).collect_view()}
                                            </tbody>
                                        </table>
                                    }.into_any()
                                }}
                            }
                        })
                        .collect_view();
                    view! { {empty} {rows} }
                })
            })}
            {move || clear.succeeded().then(|| view! { <p class="muted" role="status">{tr!(health.cleared)}</p> })}
            {clear.error_view()}
        </section>
    }
}

fn level_word(level: lanes_types::health::HealthLevel) -> &'static str {
    match level {
        lanes_types::health::HealthLevel::Healthy => tr!(health.healthy),
        lanes_types::health::HealthLevel::Degraded => tr!(health.degraded),
        lanes_types::health::HealthLevel::Failing => tr!(health.failing),
    }
}

/// The range typed in the viewer's zone; the fields follow the range shown.
#[component]
fn CustomRange(range: RwSignal<Range>, chosen: RwSignal<&'static str>) -> impl IntoView {
    let from = RwSignal::new(String::new());
    let to = RwSignal::new(String::new());
    Effect::new(move |_| {
        let r = range.get();
        from.set(local_input_value(r.from));
        to.set(local_input_value(r.to));
    });
    let error = RwSignal::new(None::<String>);
    let apply = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let parse =
            |text: String| local_input(&text).ok_or_else(|| tr!(history.pick_both).to_string());
        match (parse(from.get_untracked()), parse(to.get_untracked())) {
            (Ok(f), Ok(t)) if f < t => {
                error.set(None);
                range.set(Range { from: f, to: t });
                chosen.set("");
            }
            (Ok(_), Ok(_)) => error.set(Some(tr!(history.start_before_end).into())),
            (Err(e), _) | (_, Err(e)) => error.set(Some(e)),
        }
    };
    view! {
        <form class="inline-form range-form" on:submit=apply data-testid="custom-range">
            <label>
                {tr!(history.from)}
                <input type="datetime-local" name="from" prop:value=move || from.get() on:input=move |ev| from.set(event_target_value(&ev)) />
            </label>
            <label>
                {tr!(history.to)}
                <input type="datetime-local" name="to" prop:value=move || to.get() on:input=move |ev| to.set(event_target_value(&ev)) />
            </label>
            <button type="submit">{tr!(history.show)}</button>
            {move || error.get().map(|e| view! { <span class="form-error" role="alert">{e}</span> })}
        </form>
    }
    .into_any()
}

/// Cards × time, one cell per bucket, coloured by the bucket's mean; gaps stay blank.
#[component]
fn Heatmap(answer: HistoryAnswer) -> impl IntoView {
    let span_ms = (answer.to_ms - answer.from_ms).max(1) as f64;
    let max = scale_max(&answer.metric, &answer.series);
    let row_h = 18.0;
    let label_w = 150.0;
    let width = 1000.0;
    let cell_w = (answer.bucket_s as f64 * 1000.0 / span_ms * (width - label_w)).max(0.5);
    let height = row_h * answer.series.len() as f64;
    let rows = answer
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let y = i as f64 * row_h;
            let cells = s
                .points
                .iter()
                .map(|p| {
                    let x = label_w + (p.t_ms - answer.from_ms) as f64 / span_ms * (width - label_w);
                    let title = tr!(
                        history.cell_title,
                        card = s.name(),
                        when = date_time(DateTime::from_timestamp_millis(p.t_ms).unwrap_or_default()),
                        mean = value_text(&answer.metric, p.avg),
                        max = value_text(&answer.metric, p.max)
                    );
                    view! {
                        <rect x=format!("{x:.1}") y=format!("{y:.1}") width=format!("{cell_w:.2}") height=format!("{:.1}", row_h - 2.0) fill=heat_color(p.avg, max)>
                            <title>{title}</title>
                        </rect>
                    }
                })
                .collect_view();
            view! {
                <text x="0" y=format!("{:.1}", y + row_h * 0.7) class="heat-label">
                    {s.name()}
                    <title>{s.uuid.clone()}</title>
                </text>
                {cells}
            }
        })
        .collect_view();
    view! {
        <section class="panel">
            <h3>{tr!(history.all_cards, seconds = answer.bucket_s, resolution = answer.resolution.to_string())}</h3>
            <svg class="heatmap" data-testid="heatmap" viewBox=format!("0 0 {width} {height}") role="img" aria-label=tr!(history.cards_by_time)>
                <rect x=label_w y="0" width=width - label_w height=height class="heat-gap" />
                {rows}
            </svg>
        </section>
    }
    .into_any()
}

/// Most days the per-user view asks reports for (one request a day).
const MAX_DAYS: usize = 31;

/// The viewer's days that `range` touches, as `[start, end)` clipped to the range.
pub fn days_of(range: Range) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let mut days = Vec::new();
    let mut start = range.from;
    while start < range.to && days.len() < MAX_DAYS {
        let offset = offset_at(start);
        let next = start
            .with_timezone(&offset)
            .date_naive()
            .succ_opt()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .and_then(|m| m.and_local_timezone(offset).single())
            .map_or(range.to, |m| m.with_timezone(&Utc))
            .min(range.to);
        days.push((start, next));
        start = next;
    }
    days
}

/// Per user and day: GPU-hours booked beside GPU-hours used, each bar stacked by user (the
/// usage report of each day in the range).
#[component]
fn ByDay(range: RwSignal<Range>) -> impl IntoView {
    let days = RwSignal::new(None::<Result<Vec<(DateTime<Utc>, UsageReport)>, String>>);
    Effect::new(move |_| {
        let spans = days_of(range.get());
        days.set(None);
        leptos::task::spawn_local(async move {
            let mut out = Vec::new();
            for (from, to) in spans {
                let day = ReportQuery {
                    from: Some(from),
                    to: Some(to),
                    table: None,
                };
                match crate::rest::call::<api::Usage>((), &day).await {
                    Ok(r) => out.push((from, r)),
                    Err(e) => {
                        days.set(Some(Err(e)));
                        return;
                    }
                }
            }
            days.set(Some(Ok(out)));
        });
    });
    let chart = move || {
        days.with(|d| match d {
            None => view! { <p class="muted">{tr!(history.loading_the_days)}</p> }.into_any(),
            Some(Err(e)) => view! { <p class="form-error" role="alert">{e.clone()}</p> }.into_any(),
            Some(Ok(list)) => view! { <ByDayChart days=list.clone() /> }.into_any(),
        })
    };
    view! {
        <section class="panel" data-testid="by-day">
            <h3>{tr!(history.per_user_by_day)}</h3>
            <p class="muted">{tr!(history.each_day_gpu_hours_booked_left)}</p>
            {chart}
        </section>
    }
    .into_any()
}

#[component]
fn ByDayChart(days: Vec<(DateTime<Utc>, UsageReport)>) -> impl IntoView {
    let mut users: Vec<String> = days
        .iter()
        .flat_map(|(_, r)| r.users.iter().map(|u| u.name.clone()))
        .collect();
    users.sort();
    users.dedup();
    if users.is_empty() {
        return view! { <p class="muted">{tr!(history.nobody_booked_or_used_a_card)}</p> }
            .into_any();
    }
    let total = |r: &UsageReport, f: fn(&UsageRow) -> f64| r.users.iter().map(f).sum::<f64>();
    let top = days
        .iter()
        .map(|(_, r)| total(r, |u| u.gpu_hours_booked).max(total(r, |u| u.gpu_hours_used)))
        .fold(0.0, f64::max)
        .max(0.1);
    let (width, height) = (600.0, 160.0);
    let slot = width / days.len() as f64;
    let bar = (slot * 0.35).min(28.0);
    let mut rects = Vec::new();
    let mut lines = Vec::new();
    for (i, (day, r)) in days.iter().enumerate() {
        let x = i as f64 * slot + slot / 2.0;
        for (side, f, kind) in [
            (
                -1.0,
                (|u: &UsageRow| u.gpu_hours_booked) as fn(&UsageRow) -> f64,
                "booked",
            ),
            (0.0, |u: &UsageRow| u.gpu_hours_used, "used"),
        ] {
            let mut y = height;
            for u in &r.users {
                let h = f(u) / top * height;
                if h <= 0.0 {
                    continue;
                }
                y -= h;
                rects.push(view! {
                    <rect
                        x=format!("{:.1}", x + side * bar)
                        y=format!("{y:.1}")
                        width=format!("{bar:.1}")
                        height=format!("{h:.1}")
                        fill=crate::calendar::user_color(&u.name)
                        class=kind
                    >
                        <title>{tr!(history.bar_title, day = day_label(*day), user = u.name.clone(), hours = lanes_types::units::hours(f(u)), kind = if kind == "booked" { tr!(history.booked) } else { tr!(history.used) })}</title>
                    </rect>
                });
            }
        }
        lines.push(tr!(
            history.day_line,
            day = day_label(*day),
            booked = lanes_types::units::hours(total(r, |u| u.gpu_hours_booked)),
            used = lanes_types::units::hours(total(r, |u| u.gpu_hours_used))
        ));
    }
    let labels = days
        .iter()
        .enumerate()
        .filter(|(i, _)| days.len() <= 10 || i % (days.len() / 7).max(1) == 0)
        .map(|(i, (day, _))| {
            view! {
                <text x=format!("{:.1}", i as f64 * slot + slot / 2.0) y=height + 14.0 class="day-label" text-anchor="middle">
                    {day_label(*day)}
                </text>
            }
        })
        .collect_view();
    let legend = users
        .iter()
        .map(|u| {
            view! {
                <li>
                    <span class="swatch" style=format!("background:{}", crate::calendar::user_color(u))></span>
                    {u.clone()}
                </li>
            }
        })
        .collect_view();
    view! {
        <svg class="by-day" viewBox=format!("0 0 {width} {}", height + 18.0) role="img" aria-label=tr!(history.per_day_label, days = lines.join("; "))>
            {rects}
            {labels}
        </svg>
        <ul class="legend">{legend}</ul>
    }
    .into_any()
}

/// "Tue 1 Dec" in the viewer's zone.
fn day_label(t: DateTime<Utc>) -> String {
    crate::components::format::dated(t.with_timezone(&offset_at(t)), tr!(date.weekday_day_month))
}

/// Colours of compared cards, in order of choice (distinct in light and dark themes).
const COMPARE_COLORS: [&str; 6] = [
    "#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2",
];

/// Chosen cards on one chart, each its own colour, with their means as text beside.
#[component]
fn Compare(answer: HistoryAnswer, chosen: RwSignal<Vec<String>>) -> impl IntoView {
    let max = scale_max(&answer.metric, &answer.series).max(1.0);
    let window = answer.to_ms - answer.from_ms;
    let gap = answer.bucket_s * 1000 * 3 / 2;
    let series = answer.series.clone();
    let metric = answer.metric.clone();
    let boxes = answer
        .series
        .iter()
        .map(|s| {
            let uuid = s.uuid.clone();
            let checked = {
                let uuid = uuid.clone();
                move || chosen.with(|c| c.contains(&uuid))
            };
            let title = uuid.clone();
            let key = uuid.clone();
            view! {
                <label class="check" title=title>
                    <input
                        type="checkbox"
                        data-compare=key
                        prop:checked=checked
                        on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            let uuid = uuid.clone();
                            chosen.update(|c| {
                                c.retain(|u| *u != uuid);
                                if on {
                                    c.push(uuid);
                                }
                            });
                        }
                    />
                    {s.name()}
                </label>
            }
        })
        .collect_view();
    let drawn = move || {
        let picked = chosen.get();
        let lines: Vec<_> = picked
            .iter()
            .take(COMPARE_COLORS.len())
            .enumerate()
            .filter_map(|(i, uuid)| {
                let s = series.iter().find(|s| s.uuid == *uuid)?;
                let points: Vec<(i64, f64)> = s.points.iter().map(|p| (p.t_ms, p.avg)).collect();
                let path = series_path(&points, answer.to_ms, window, max, gap);
                let mean = (!s.points.is_empty())
                    .then(|| s.points.iter().map(|p| p.avg).sum::<f64>() / s.points.len() as f64);
                Some((COMPARE_COLORS[i], s.name(), path.line, mean))
            })
            .collect();
        if lines.is_empty() {
            return view! { <p class="muted">{tr!(history.tick_cards_above_to_draw_them)}</p> }
                .into_any();
        }
        let summary = lines
            .iter()
            .map(|(_, name, _, mean)| {
                format!(
                    "{name}: {}",
                    mean.map_or(tr!(history.no_readings).into(), |m| tr!(
                        history.mean,
                        value = value_text(&metric, m)
                    ))
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let legend = lines
            .iter()
            .map(|(color, name, _, mean)| {
                view! {
                    <li>
                        <span class="swatch" style=format!("background:{color}")></span>
                        {format!(
                            "{name} · {}",
                            mean.map_or(tr!(history.no_readings).into(), |m| tr!(history.mean, value = value_text(&metric, m)))
                        )}
                    </li>
                }
            })
            .collect_view();
        let paths = lines
            .into_iter()
            .map(|(color, _, line, _)| view! { <path d=line class="line" style=format!("stroke:{color}") /> })
            .collect_view();
        view! {
            <figure class="history-chart compare-chart" data-testid="compare-chart">
                <svg viewBox="0 0 300 60" preserveAspectRatio="none" role="img" aria-label=summary>
                    {paths}
                </svg>
                <ul class="legend">{legend}</ul>
            </figure>
        }
        .into_any()
    };
    view! {
        <section class="panel" data-testid="compare">
            <h3>{tr!(history.compare_cards)}</h3>
            <div class="checks">{boxes}</div>
            {drawn}
        </section>
    }
    .into_any()
}

/// One chart per card: the mean as a line over the min–max band.
#[component]
fn Charts(answer: HistoryAnswer) -> impl IntoView {
    let max = scale_max(&answer.metric, &answer.series).max(1.0);
    let window = answer.to_ms - answer.from_ms;
    let gap = answer.bucket_s * 1000 * 3 / 2;
    let charts = answer
        .series
        .iter()
        .map(|s| {
            let path = |f: fn(&lanes_types::history::HistoryBucket) -> f64| {
                let points: Vec<(i64, f64)> = s.points.iter().map(|p| (p.t_ms, f(p))).collect();
                series_path(&points, answer.to_ms, window, max, gap)
            };
            let (avg, top) = (path(|p| p.avg), path(|p| p.max));
            let mean = if s.points.is_empty() {
                tr!(history.no_readings).to_string()
            } else {
                let m = s.points.iter().map(|p| p.avg).sum::<f64>() / s.points.len() as f64;
                tr!(history.mean, value = value_text(&answer.metric, m))
            };
            view! {
                <figure class="history-chart" data-uuid=s.uuid.clone()>
                    <figcaption title=s.uuid.clone()>
                        <span class="card-name">{s.name()}</span>
                        {format!(" · {mean}")}
                    </figcaption>
                    <svg viewBox="0 0 300 60" preserveAspectRatio="none" role="img" aria-label=format!("{} {}: {mean}", s.name(), answer.metric)>
                        <path d=top.area class="band" />
                        <path d=avg.line class="line" />
                    </svg>
                </figure>
            }
        })
        .collect_view();
    view! { <div class="history-charts">{charts}</div> }.into_any()
}

#[component]
fn ReportTables(report: UsageReport, query: ReportQuery) -> impl IntoView {
    // The CSV of one of the report's tables, for the same range.
    let csv_of = move |table: &str| {
        let query = ReportQuery {
            table: Some(table.to_string()),
            ..query.clone()
        };
        api::UsageCsv::url(&(), &query)
    };
    let priced = report.energy_price_per_kwh.is_some();
    let carbon = report.carbon_g_per_kwh.is_some();
    // "2.4 kWh", with its cost and CO2e when the admins set a price and a carbon intensity.
    let energy = move |kwh_used: f64, cost: Option<f64>, co2e: Option<f64>| {
        let mut text = kwh(kwh_used);
        if let (true, Some(c)) = (priced, cost) {
            text.push_str(&format!(" · {c:.2}"));
        }
        if let (true, Some(g)) = (carbon, co2e) {
            text.push_str(&format!(" · {g:.1} kg CO2e"));
        }
        text
    };
    let table = |rows: Vec<UsageRow>, who: &'static str, csv: &'static str| {
        let body = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td>{r.name}</td>
                        <td class="num">{lanes_types::units::hours(r.gpu_hours_booked)}</td>
                        <td class="num" title=tr!(history.card_level, hours = lanes_types::units::hours(r.gpu_hours_used_card_level))>
                            {lanes_types::units::hours(r.gpu_hours_used)}
                        </td>
                        <td class="num">{lanes_types::units::hours(r.idle_booked_hours)}</td>
                        <td class="num">{r.violations}</td>
                        <td class="num">{r.jobs}</td>
                        <td class="num">{energy(r.energy_kwh, r.cost, r.co2e_kg)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h4>{who} " " <a href=csv_of(csv) download>"CSV"</a></h4>
            <table class="list" data-testid=format!("report-{csv}")>
                <thead>
                    <tr>
                        <th>{who}</th>
                        <th class="num">{tr!(history.gpu_hours_booked)}</th>
                        <th class="num">{tr!(history.gpu_hours_used)}</th>
                        <th class="num">{tr!(history.idle_booked_hours)}</th>
                        <th class="num">{tr!(history.violations)}</th>
                        <th class="num">{tr!(history.jobs)}</th>
                        <th class="num">{tr!(history.energy)}</th>
                    </tr>
                </thead>
                <tbody>{body}</tbody>
            </table>
        }
    };
    let bookings = report
        .bookings
        .iter()
        .map(|b| {
            view! {
                <tr>
                    <td>{format!("#{}", b.booking_id)}</td>
                    <td>{b.username.clone()}</td>
                    <td class="cards">{if b.cards.is_empty() { b.gpus.to_string() } else { b.cards.join(", ") }}</td>
                    <td>{date_time(b.start)}</td>
                    <td>{date_time(b.end)}</td>
                    <td class="num">{lanes_types::units::hours(b.gpu_hours_booked)}</td>
                    <td class="num">{b.avg_utilization_pct.map_or("—".into(), |u| format!("{u:.0} %"))}</td>
                    <td class="num">{b.peak_memory_bytes.map_or("—".into(), bytes)}</td>
                    <td class="num">{energy(b.energy_kwh, b.cost, b.co2e_kg)}</td>
                </tr>
            }
        })
        .collect_view();
    let jobs = report
        .jobs
        .iter()
        .map(|j| {
            view! {
                <tr>
                    <td>{format!("#{}", j.job_id)}</td>
                    <td>{j.username.clone()}</td>
                    <td class="num">{lanes_types::units::hours(j.gpu_hours_used)}</td>
                    <td class="num">{j.mean_sm_pct.map_or("—".into(), |u| format!("{u:.0} %"))}</td>
                    <td class="num">{energy(j.energy_kwh, j.cost, j.co2e_kg)}</td>
                </tr>
            }
        })
        .collect_view();
    let accounts = report
        .unix_users
        .iter()
        .map(|u| {
            view! {
                <tr>
                    <td>{u.unix_user.clone()}</td>
                    <td>{u.username.clone().unwrap_or_else(|| "—".into())}</td>
                    <td class="num">{lanes_types::units::hours(u.gpu_hours_used)}</td>
                    <td class="num">{lanes_types::units::hours(u.hours_on_card)}</td>
                    <td class="num">{u.mean_sm_pct.map_or("—".into(), |s| format!("{s:.0} %"))}</td>
                    <td class="num">{kwh(u.energy_kwh)}</td>
                </tr>
            }
        })
        .collect_view();
    let attribution = if report.per_process {
        tr!(history.per_process)
    } else {
        tr!(history.card_level_only)
    };
    view! {
        <p class="muted">{tr!(history.idle_line, pct = report.idle_threshold_pct)}</p>
        <p class="muted" data-testid="attribution">{attribution}</p>
        {table(report.users.clone(), tr!(history.who_user), "users")}
        {(!report.groups.is_empty()).then(|| table(report.groups.clone(), tr!(history.who_group), "groups"))}
        <h4>{tr!(history.bookings)} <a href=csv_of("bookings") download>"CSV"</a></h4>
        <table class="list" data-testid="report-bookings">
            <ListHead cols=vec![Col::Text(tr!(history.col_booking)), Col::Text(tr!(history.col_user)), Col::Text(tr!(history.col_cards)), Col::Text(tr!(history.col_start)), Col::Text(tr!(history.col_end)), Col::Num(tr!(history.col_gpu_hours)), Col::Num(tr!(history.col_mean_util)), Col::Num(tr!(history.col_peak_memory)), Col::Num(tr!(history.col_energy))] />
            <tbody>{bookings}</tbody>
        </table>
        {(!report.jobs.is_empty()).then(|| view! {
            <h4>{tr!(history.jobs_2)} <a href=csv_of("jobs") download>"CSV"</a></h4>
            <table class="list" data-testid="report-jobs">
                <ListHead cols=vec![Col::Text(tr!(history.col_job)), Col::Text(tr!(history.col_user)), Col::Num(tr!(history.col_used)), Col::Num(tr!(history.col_mean_sm)), Col::Num(tr!(history.col_energy))] />
                <tbody>{jobs}</tbody>
            </table>
        })}
        {(!report.unix_users.is_empty()).then(|| view! {
            <h4>{tr!(history.unix_accounts)} <a href=csv_of("unix_users") download>"CSV"</a></h4>
            <table class="list" data-testid="report-unix_users">
                <ListHead cols=vec![Col::Text(tr!(history.col_account)), Col::Text(tr!(history.col_lanes_user)), Col::Num(tr!(history.col_used)), Col::Num(tr!(history.col_hours_on_card)), Col::Num(tr!(history.col_mean_sm)), Col::Num(tr!(history.col_energy))] />
                <tbody>{accounts}</tbody>
            </table>
        })}
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    #[test]
    fn zoom_halves_or_doubles_around_the_middle_and_paging_moves_by_half() {
        let r = Range {
            from: at(0),
            to: at(8),
        };
        assert_eq!(
            r.zoom_in(),
            Range {
                from: at(2),
                to: at(6)
            }
        );
        assert_eq!(
            r.zoom_out(),
            Range {
                from: at(-4),
                to: at(12)
            }
        );
        assert_eq!(
            r.page(-1),
            Range {
                from: at(-4),
                to: at(4)
            }
        );
        assert_eq!(
            r.page(1),
            Range {
                from: at(4),
                to: at(12)
            }
        );
        let tiny = Range {
            from: at(0),
            to: at(0) + Duration::seconds(40),
        };
        assert_eq!(tiny.zoom_in().span(), Duration::seconds(60));
    }

    #[test]
    fn a_range_splits_into_the_viewers_days_clipped_at_both_ends() {
        // Outside a browser the viewer's zone is UTC.
        let r = Range {
            from: at(-30),
            to: at(20),
        };
        let days = days_of(r);
        assert_eq!(days.first().unwrap().0, at(-30));
        assert_eq!(days.last().unwrap().1, at(20));
        assert!(days.windows(2).all(|w| w[0].1 == w[1].0));
        assert!(days
            .iter()
            .skip(1)
            .all(|(from, _)| from.timestamp() % 86_400 == 0));
        let long = Range {
            from: at(-24 * 90),
            to: at(0),
        };
        assert_eq!(days_of(long).len(), MAX_DAYS);
    }

    #[test]
    fn heat_runs_from_light_to_dark_and_clamps() {
        assert_eq!(heat_color(0.0, 100.0), "hsl(215, 80%, 95%)");
        assert_eq!(heat_color(100.0, 100.0), "hsl(215, 80%, 35%)");
        assert_eq!(heat_color(250.0, 100.0), heat_color(100.0, 100.0));
        assert_eq!(heat_color(5.0, 0.0), heat_color(0.0, 1.0));
    }
}
