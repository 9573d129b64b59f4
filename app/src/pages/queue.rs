//! `/queue`: submit a job that waits for free cards, see what runs and what waits (with why and
//! until when), cancel your jobs, and see everyone's use against their fair share.

use crate::components::cards::Cards;
use crate::components::format::{date_time, span};
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::MemberPage;
use crate::components::write::Write;
use crate::rest;
use lanes_types::account::User;
use lanes_types::api::{self, Endpoint};
use lanes_types::queue::{
    ForecastRequest, QueueForecast, QueueSettings, QueueState, QueueView, QueuedJob, Standing,
    SubmitJob,
};
use leptos::prelude::*;
use std::time::Duration;

#[component]
pub fn QueuePage() -> impl IntoView {
    view! { <MemberPage absent=tr!(queue.log_in) body=|me| view! { <QueueSections me /> } /> }
}

#[component]
fn QueueSections(me: User) -> impl IntoView {
    let enqueue = Write::new(|job: &SubmitJob| {
        let job = job.clone();
        async move { rest::call::<api::Enqueue>((), &job).await }
    });
    let dequeue = Write::new(|id: &i64| rest::call::<api::Dequeue>(*id, &()));
    let queue = Remote::<QueueView>::new(api::Queue::PATH)
        .follows(enqueue)
        .follows(dequeue);
    queue.refresh_every(Duration::from_secs(2));
    Cards::provide();
    view! {
        <h2>{tr!(queue.queue)}</h2>
        <section class="panel">
            <h3>{tr!(queue.queue_a_job)}</h3>
            {render_remote(queue, tr!(queue.what_queue), move |view: &QueueView| {
                let settings = view.settings.clone();
                view! { <SubmitForm settings enqueue /> }
            })}
        </section>
        <section class="panel">
            <h3>{tr!(queue.running_and_waiting)}</h3>
            {render_remote(queue, tr!(queue.what_queue), move |view: &QueueView| {
                let me = me.clone();
                let live: Vec<QueuedJob> = view
                    .jobs
                    .iter()
                    .filter(|j| matches!(j.state, QueueState::Running | QueueState::Pending))
                    .cloned()
                    .collect();
                let ended: Vec<QueuedJob> = view
                    .jobs
                    .iter()
                    .filter(|j| !matches!(j.state, QueueState::Running | QueueState::Pending))
                    .cloned()
                    .collect();
                view! {
                    <p class="hint">{policy_line(&view.settings)}</p>
                    <JobTable jobs=live me=me.clone() dequeue testid="queue-live" empty=tr!(queue.nothing_live) />
                    <h3>{tr!(queue.ended)}</h3>
                    <JobTable jobs=ended me dequeue testid="queue-ended" empty=tr!(queue.nothing_ended) />
                }
            })}
        </section>
        <section class="panel">
            <h3>{tr!(queue.fair_share)}</h3>
            <p class="hint">
                {tr!(queue.use_is_gpu_hours_held_bookings)}
            </p>
            {render_remote(queue, tr!(queue.what_fair_share), |view: &QueueView| view! { <Standings list=view.standings.clone() /> })}
        </section>
    }
    .into_any()
}

/// "If you queue this now: likely start …, and by … nine times in ten." and the earliest slot.
fn forecast_line(f: &QueueForecast) -> String {
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| match t {
        Some(t) if t <= chrono::Utc::now() + chrono::Duration::seconds(30) => {
            tr!(queue.forecast_now).to_string()
        }
        Some(t) => date_time(t),
        None => tr!(queue.forecast_never, days = f.horizon_days),
    };
    let slot = match &f.earliest_booking {
        Some(slot) => tr!(
            queue.forecast_slot,
            start = date_time(slot.start),
            node = slot.node.clone()
        ),
        None => tr!(queue.forecast_no_slot).to_string(),
    };
    let soon = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.is_some_and(|t| t <= chrono::Utc::now() + chrono::Duration::seconds(30))
    };
    let start = if soon(f.p50) && soon(f.p90) {
        tr!(queue.forecast_at_once).to_string()
    } else {
        tr!(queue.forecast, p50 = at(f.p50), p90 = at(f.p90))
    };
    format!("{start} {slot}")
}

fn policy_line(s: &QueueSettings) -> String {
    let policy = match s.policy {
        lanes_types::queue::Policy::Fifo => tr!(queue_policy.fifo),
        lanes_types::queue::Policy::Backfill => tr!(queue_policy.backfill),
        lanes_types::queue::Policy::Fairshare => tr!(queue_policy.fairshare),
        lanes_types::queue::Policy::Las => tr!(queue_policy.las),
    };
    tr!(
        queue.policy_line,
        policy,
        default = s
            .default_time_limit_s
            .map(|d| tr!(queue.unless_you_say, limit = span(d)))
            .unwrap_or_default(),
        max = span(s.max_time_limit_s),
        half_life = span(s.half_life_s)
    )
}

#[component]
fn SubmitForm(settings: QueueSettings, enqueue: Write<SubmitJob, QueuedJob>) -> impl IntoView {
    let (gpus, hours, command, cwd, name, memory) = (
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
    );
    let preemptible = NodeRef::new();
    let (image, runtime) = (NodeRef::new(), NodeRef::<leptos::html::Select>::new());
    // What the form itself finds wrong; the server's refusal is the write's.
    let error = RwSignal::new(None::<String>);
    let default_limit = settings
        .default_time_limit_s
        .map(|s| lanes_types::units::format_duration(chrono::Duration::seconds(s)))
        .unwrap_or_default();
    // The fields a start depends on: cards, time limit, memory per card.
    let sizing = move || -> Result<(u32, Option<i64>, Option<u64>), String> {
        let Ok(count) = field(gpus).trim().parse::<u32>() else {
            return Err(tr!(queue.gpus_whole).into());
        };
        let limit = match field(hours).trim() {
            "" => None,
            text => match lanes_types::units::parse_duration(text) {
                Ok(d) if d > chrono::Duration::zero() => Some(d.num_seconds()),
                _ => return Err(tr!(queue.limit_duration).into()),
            },
        };
        let min_memory = match field(memory).trim() {
            "" => None,
            text => match text.parse::<f64>() {
                Ok(g) if g >= 0.0 && g.is_finite() => Some((g * (1u64 << 30) as f64) as u64),
                _ => return Err(tr!(queue.memory_gib).into()),
            },
        };
        Ok((count, limit, min_memory))
    };
    let forecast = Write::new(|request: &ForecastRequest| {
        let request = request.clone();
        async move { rest::call::<api::ForecastStart>((), &request).await }
    });
    let ask = move |_| match sizing() {
        Ok((gpus, time_limit_s, min_memory_bytes)) => {
            error.set(None);
            forecast.run(ForecastRequest {
                gpus,
                time_limit_s,
                min_memory_bytes,
            });
        }
        Err(message) => error.set(Some(message)),
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (count, limit, min_memory) = match sizing() {
            Ok(sized) => sized,
            Err(message) => return error.set(Some(message)),
        };
        let argv = match crate::pages::jobs::command_words(&field(command)) {
            Ok(argv) => argv,
            Err(message) => return error.set(Some(message)),
        };
        let chosen = runtime.get().map(|s| s.value()).unwrap_or_default();
        let container = match crate::pages::jobs::container_of(&field(image), &chosen) {
            Ok(container) => container,
            Err(message) => return error.set(Some(message)),
        };
        let body = SubmitJob {
            project: None,
            container,
            gpus: count,
            time_limit_s: limit,
            argv,
            cwd: Some(field(cwd)).filter(|c| !c.is_empty()),
            env: None,
            environment: None,
            min_memory_bytes: min_memory,
            name: Some(field(name)).filter(|n| !n.is_empty()),
            preemptible: checked(preemptible),
            notice: None,
        };
        error.set(None);
        enqueue.run(body);
    };
    view! {
        <form class="inline-form" on:submit=submit data-testid="submit-queue">
            <label>{tr!(queue.gpus)} <input node_ref=gpus type="number" min="1" value="1" size="3" required /></label>
            <label>{tr!(queue.time_limit)} <input node_ref=hours name="time_limit" size="7" value=default_limit.clone() placeholder=if default_limit.is_empty() { "4h".to_string() } else { default_limit.clone() } /></label>
            <label>{tr!(queue.command)} <input node_ref=command placeholder="python train.py --epochs 3" required /></label>
            <label>{tr!(queue.directory)} <input node_ref=cwd placeholder=tr!(queue.your_home) /></label>
            <label>{tr!(queue.name)} <input node_ref=name placeholder=tr!(queue.optional) /></label>
            <label>{tr!(queue.image)} <input node_ref=image data-testid="queue-image" placeholder=tr!(queue.image_hint) /></label>
            <label>
                {tr!(queue.runtime)}
                <crate::pages::jobs::RuntimeChoice select=runtime default_label=tr!(queue.runtime_default) />
            </label>
            <label>{tr!(queue.free_memory_per_gpu_gib)} <input node_ref=memory inputmode="decimal" size="5" placeholder=tr!(queue.any) /></label>
            <label class="check" title=tr!(queue.it_may_run_on_idle_booked)>
                <input node_ref=preemptible type="checkbox" name="preemptible" />
                {tr!(queue.preemptible_may_borrow_idle_booked_cards)}
            </label>
            <button type="submit">{tr!(queue.queue)}</button>
            <button type="button" class="secondary" on:click=ask data-testid="forecast">{tr!(queue.when_would_it_start)}</button>
            <p class="hint">
                {tr!(queue.it_starts_as_soon_as_enough)}
            </p>
            {move || forecast.answer().map(|f| view! { <p class="hint" role="status" data-testid="forecast-answer">{forecast_line(&f)}</p> })}
            {forecast.error_view()}
            {enqueue.error_view_with(error)}
        </form>
    }
    .into_any()
}

#[component]
fn JobTable(
    jobs: Vec<QueuedJob>,
    me: User,
    dequeue: Write<i64, QueuedJob>,
    testid: &'static str,
    empty: &'static str,
) -> impl IntoView {
    if jobs.is_empty() {
        return view! { <p class="muted" data-testid=testid>{empty}</p> }.into_any();
    }
    let rows = jobs
        .into_iter()
        .map(|job| {
            let mine = job.username == me.username || me.is_admin();
            view! { <JobRow job mine dequeue /> }
        })
        .collect_view();
    view! {
        <table class="list queue" data-testid=testid>
            <ListHead cols=vec![Col::Text(tr!(queue.col_job)), Col::Text(tr!(queue.col_user)), Col::Num(tr!(queue.col_gpus)), Col::Text(tr!(queue.col_limit)), Col::Text(tr!(queue.col_state)), Col::Text(tr!(queue.col_cards)), Col::Text(tr!(queue.col_submitted)), Col::Text(tr!(queue.col_started)), Col::Blank] />
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

#[component]
fn JobRow(job: QueuedJob, mine: bool, dequeue: Write<i64, QueuedJob>) -> impl IntoView {
    let id = job.id;
    let cancel = move |_| dequeue.run(id);
    let title = match (job.name.is_empty(), job.argv.is_empty()) {
        (false, _) => job.name.clone(),
        (true, false) => job.argv.join(" "),
        (true, true) => String::new(),
    };
    let detail = match job.state {
        QueueState::Pending => {
            // The structured reason in the page's language; a server without it, its words.
            let reason = job
                .wait
                .as_ref()
                .map(crate::i18n::wait_reason)
                .or_else(|| job.reason.clone())
                .unwrap_or_default();
            match job.estimated_start {
                Some(at) => tr!(queue.estimated, reason = reason.clone(), at = date_time(at)),
                None => reason,
            }
        }
        QueueState::Running => {
            let cards = Cards::get()
                .map(|c| c.names(&job.cards))
                .unwrap_or_default();
            match (job.borrowed_from, job.lenders.len()) {
                (_, 2..) => {
                    let bookings = job
                        .lenders
                        .iter()
                        .map(|b| format!("#{b}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    tr!(queue.lent_by_several, cards = cards.clone(), bookings)
                }
                (Some(booking), _) => tr!(queue.lent_by, cards = cards.clone(), booking),
                (None, _) => cards,
            }
        }
        _ => {
            let code = job
                .exit_code
                .map(|code| tr!(queue.exit, code))
                .unwrap_or_default();
            let note = job
                .note
                .as_ref()
                .map(|n| crate::i18n::job_note_in(n, crate::i18n::locale(), date_time))
                .unwrap_or_else(|| job.message.clone());
            [code, note]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    // Preemptible jobs say so, and how often they made way for a holder.
    let detail = match (job.preemptible, job.requeues) {
        (false, _) => detail,
        (true, 0) => tr!(queue.preemptible, detail),
        (true, n) => tr!(queue.made_way, n, detail),
    };
    let live = matches!(job.state, QueueState::Pending | QueueState::Running);
    let position = job
        .position
        .map(|position| tr!(queue.in_line, position))
        .unwrap_or_default();
    view! {
        <tr data-queue-job=id.to_string() data-state=job.state.as_str()>
            <td title=job.argv.join(" ")>{format!("#{id} ")}<code>{title}</code></td>
            <td>{job.username.clone()}</td>
            <td class="num">{job.gpus}</td>
            <td>{span(job.time_limit_s)}</td>
            <td class=format!("state {}", job.state.as_str())>{format!("{}{position}", crate::i18n::queue_state(job.state))}</td>
            <td class="reason" data-testid="reason">{detail}</td>
            <td>{date_time(job.submitted_at)}</td>
            <td>{job.started_at.map(date_time).unwrap_or_default()}</td>
            <td>
                {(live && mine).then(|| view! { <button class="danger" on:click=cancel>{tr!(queue.cancel)}</button> })}
                {mine.then(|| view! { <a class="secondary" href=format!("/jobs?watch={id}")>{tr!(queue.log)}</a> })}
                {move || dequeue.error_of(&id).map(|e| view! { <span class="form-error">{e}</span> })}
            </td>
        </tr>
    }
    .into_any()
}

#[component]
fn Standings(list: Vec<Standing>) -> impl IntoView {
    let mut list = list;
    list.sort_by(|a, b| {
        b.gpu_hours
            .total_cmp(&a.gpu_hours)
            .then(a.username.cmp(&b.username))
    });
    let rows = list
        .into_iter()
        .map(|s| {
            view! {
                <tr>
                    <td>{s.username.clone()}</td>
                    <td>{if s.group.is_empty() { "—".to_string() } else { s.group.clone() }}</td>
                    <td class="num">{format!("{:.1}%", s.share * 100.0)}</td>
                    <td class="num">{format!("{:.1}%", s.usage * 100.0)}</td>
                    <td class="num">{format!("{:.2}", s.gpu_hours)}</td>
                    <td class="num">{format!("{:.3}", s.factor)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="list" data-testid="standings">
            <ListHead cols=vec![Col::Text(tr!(queue.col_user)), Col::Text(tr!(queue.col_group)), Col::Num(tr!(queue.col_share)), Col::Num(tr!(queue.col_use)), Col::Num(tr!(queue.col_decayed)), Col::Num(tr!(queue.col_factor))] />
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}
