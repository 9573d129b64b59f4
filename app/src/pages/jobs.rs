//! `/jobs`: submit a command to one of your bookings, follow your jobs (admins: everyone's),
//! read a job's output live as it is written, cancel a job.

use crate::components::cards::Cards;
use crate::components::format::{bytes, date_time};
use crate::components::remote::{field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::MemberPage;
use crate::components::write::Write;
use crate::rest;
use lanes_types::account::User;
use lanes_types::api::{self, Endpoint};
use lanes_types::booking::Booking;
use lanes_types::job::{CreateJob, Job};
use leptos::prelude::*;

#[component]
pub fn JobsPage() -> impl IntoView {
    view! { <MemberPage absent=tr!(jobs.log_in) body=|me| view! { <JobsSections me /> } /> }
}

#[component]
fn JobsSections(me: User) -> impl IntoView {
    let submit = Write::new(|job: &CreateJob| {
        let job = job.clone();
        async move { rest::call::<api::SubmitToBooking>((), &job).await }
    });
    let cancel = Write::new(|id: &i64| rest::call::<api::CancelJob>(*id, &()));
    let jobs = Remote::<Vec<Job>>::new(api::Jobs::PATH)
        .follows(submit)
        .follows(cancel)
        .follows_area(lanes_types::Area::Jobs);
    // `?watch=ID` opens a job's output (the queue page links here).
    let asked = leptos_router::hooks::use_query_map()
        .with_untracked(|q| q.get("watch").and_then(|id| id.parse::<i64>().ok()));
    let watching = RwSignal::new(asked);
    // A job just submitted: its output opens.
    submit.on_success(move || watching.set(submit.answer().map(|job| job.id)));
    view! {
        <h2>{tr!(jobs.jobs)}</h2>
        <section class="panel">
            <h3>{tr!(jobs.run_a_command_in_a_booking)}</h3>
            <SubmitForm me=me.clone() submit />
        </section>
        <section class="panel">
            <h3>{tr!(jobs.jobs)}</h3>
            <button class="secondary" data-testid="refresh-jobs" on:click=move |_| jobs.reload()>{tr!(jobs.refresh)}</button>
            {render_remote(jobs, tr!(jobs.what_jobs), move |list: &Vec<Job>| {
                if list.is_empty() {
                    return view! { <p class="muted">{tr!(jobs.no_jobs_yet)}</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .cloned()
                    .map(|job| view! { <JobRow job watching cancel /> })
                    .collect_view();
                view! {
                    <table class="list jobs" data-testid="jobs">
                        <ListHead cols=vec![Col::Text(tr!(jobs.col_job)), Col::Text(tr!(jobs.col_user)), Col::Text(tr!(jobs.col_booking)), Col::Text(tr!(jobs.col_state)), Col::Text(tr!(jobs.col_started)), Col::Text(tr!(jobs.col_ended)), Col::Num(tr!(jobs.col_peak)), Col::Blank] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                .into_any()
            })}
        </section>
        {move || watching.get().map(|id| view! { <LogTail id /> })}
        // Members see their own unbooked use here (admins see everyone's on the admin page).
        {(!me.is_admin()).then(|| view! { <crate::pages::enforcement::ViolationsPanel /> })}
    }
    .into_any()
}

#[component]
fn SubmitForm(me: User, submit: Write<CreateJob, Job>) -> impl IntoView {
    let mine = lanes_types::query::BookingQuery {
        from: Some(crate::components::clock::now()),
        user: Some(me.username.clone()),
        ..Default::default()
    };
    let bookings = Remote::<Vec<Booking>>::new(api::Bookings::url(&(), &mine));
    let cards = Cards::provide();
    let booking = NodeRef::<leptos::html::Select>::new();
    let (command, cwd, name) = (NodeRef::new(), NodeRef::new(), NodeRef::new());
    let (image, runtime) = (NodeRef::new(), NodeRef::<leptos::html::Select>::new());
    let error = RwSignal::new(None::<String>);
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let booking_id = booking.get().and_then(|s| s.value().parse::<i64>().ok());
        let Some(booking_id) = booking_id else {
            error.set(Some(tr!(jobs.pick_booking).into()));
            return;
        };
        let argv = match command_words(&field(command)) {
            Ok(argv) => argv,
            Err(message) => return error.set(Some(message)),
        };
        let chosen = runtime.get().map(|s| s.value()).unwrap_or_default();
        let container = match container_of(&field(image), &chosen) {
            Ok(container) => container,
            Err(message) => return error.set(Some(message)),
        };
        let body = CreateJob {
            booking_id,
            argv,
            cwd: Some(field(cwd)).filter(|c| !c.is_empty()),
            env: None,
            environment: None,
            name: Some(field(name)).filter(|n| !n.is_empty()),
            container,
            notice: None,
            session: None,
        };
        error.set(None);
        submit.run(body);
    };
    let notebook = notebook_opener();
    let open_notebook = move |_| {
        let Some(booking_id) = booking.get().and_then(|s| s.value().parse::<i64>().ok()) else {
            error.set(Some(tr!(jobs.pick_booking).into()));
            return;
        };
        error.set(None);
        notebook.run(booking_id);
    };
    view! {
        <form class="inline-form" on:submit=send data-testid="submit-job">
            <label>
                {tr!(jobs.booking)}
                <select node_ref=booking>
                    {move || bookings.with(|data| match data {
                        Some(Ok(list)) => list
                            .iter()
                            .filter(|b| b.state.holds_cards())
                            .map(|b| {
                                let label = format!(
                                    "#{} · {} · {} → {}",
                                    b.id,
                                    cards.names(&b.gpus),
                                    date_time(b.start),
                                    date_time(b.end),
                                );
                                view! { <option value=b.id.to_string()>{label}</option> }
                            })
                            .collect_view()
                            .into_any(),
                        _ => ().into_any(),
                    })}
                </select>
            </label>
            <label>{tr!(jobs.command)} <input node_ref=command placeholder="python train.py --epochs 3" required /></label>
            <label>{tr!(jobs.directory)} <input node_ref=cwd placeholder=tr!(jobs.your_home) /></label>
            <label>{tr!(jobs.name)} <input node_ref=name placeholder=tr!(jobs.optional) /></label>
            <label>{tr!(jobs.image)} <input node_ref=image data-testid="job-image" placeholder=tr!(jobs.image_hint) /></label>
            <label>
                {tr!(jobs.runtime)}
                <RuntimeChoice select=runtime default_label=tr!(jobs.runtime_default) />
            </label>
            <button type="submit">{tr!(jobs.run)}</button>
            <button type="button" class="secondary" data-testid="open-jupyter" title=tr!(jobs.jupyter_hint) on:click=open_notebook>{tr!(jobs.jupyterlab)}</button>
            <p class="hint">
                {tr!(jobs.the_command_runs_as_you_in)}
                <code>"PATH"</code>{tr!(jobs.venv_or_conda_without_a_shell)} <code>"sh -c '…'"</code>
                {tr!(jobs.for_one_with_only_the_booking)}
            </p>
            {submit.error_view_with(error)}
            {move || notebook.error().map(|e| view! { <p class="form-error">{e}</p> })}
        </form>
    }
    .into_any()
}

/// One click: the member's own Jupyter in booking `id`; the tab goes to it, and the portal
/// shows "starting" until it answers.
pub fn notebook_opener() -> Write<i64, Job> {
    let notebook = Write::new(|booking_id: &i64| {
        let job = CreateJob::session(*booking_id, lanes_types::job::SessionKind::Jupyter);
        async move { rest::call::<api::SubmitToBooking>((), &job).await }
    });
    notebook.on_success(move || {
        if let Some(path) = notebook.answer().and_then(|job| job.session_path()) {
            let _ = window().location().set_href(&path);
        }
    });
    notebook
}

/// A "JupyterLab" button for the viewer's own active booking `booking`.
#[component]
pub fn OpenNotebook(booking: i64) -> impl IntoView {
    let notebook = notebook_opener();
    view! {
        <button type="button" class="small" data-testid="open-jupyter" title=tr!(jobs.jupyter_hint) on:click=move |_| notebook.run(booking)>
            {tr!(jobs.jupyterlab)}
        </button>
        {move || notebook.error().map(|m| view! { <span class="form-error" role="alert">{m}</span> })}
    }
    .into_any()
}

/// The runtimes a form offers; the first, empty, is "the default for the image".
#[component]
pub fn RuntimeChoice(
    select: NodeRef<leptos::html::Select>,
    default_label: &'static str,
) -> impl IntoView {
    let options = lanes_types::container::ContainerRuntime::ALL
        .map(|r| view! { <option value=r.as_str()>{r.as_str()}</option> });
    view! {
        <select node_ref=select data-testid="job-runtime">
            <option value="">{default_label}</option>
            {options.to_vec()}
        </select>
    }
}

/// The container a form asks for: none without an image; else checked as the server checks
/// it, so a mistake shows beside the form at once.
pub fn container_of(
    image: &str,
    runtime: &str,
) -> Result<Option<lanes_types::container::ContainerSpec>, String> {
    let image = image.trim();
    if image.is_empty() {
        return Ok(None);
    }
    let runtime = match runtime {
        "" => None,
        other => Some(
            other
                .parse()
                .map_err(|e| crate::i18n::container_error(&e))?,
        ),
    };
    let spec = lanes_types::container::ContainerSpec {
        image: image.to_string(),
        runtime,
        volumes: Vec::new(),
        options: Vec::new(),
    };
    spec.check().map_err(|e| crate::i18n::container_error(&e))?;
    Ok(Some(spec))
}

/// A command line typed into a form, split into words as a shell would (no shell runs it).
pub fn command_words(line: &str) -> Result<Vec<String>, String> {
    match shell_words::split(line) {
        Ok(argv) if !argv.is_empty() => Ok(argv),
        Ok(_) => Err(tr!(jobs.type_command).into()),
        Err(error) => Err(tr!(jobs.bad_command, error)),
    }
}

#[component]
fn JobRow(job: Job, watching: RwSignal<Option<i64>>, cancel: Write<i64, Job>) -> impl IntoView {
    let id = job.id;
    let title = job.title();
    let how = match (job.exit_code, job.signal) {
        (Some(code), _) => tr!(jobs.exit, code),
        (None, Some(signal)) => tr!(jobs.signal, signal),
        _ => String::new(),
    };
    let live = !job.state.is_over();
    // Why it stopped or did not start, in the page's language.
    let note = job
        .note
        .as_ref()
        .map(|n| crate::i18n::job_note_in(n, crate::i18n::locale(), date_time))
        .unwrap_or_else(|| job.message.clone());
    // What it ran in, once started: its environment, its CPU time and host memory (from its
    // cgroup), and its device wall on hover.
    let started_in = job
        .started_in
        .as_ref()
        .map(crate::i18n::started_in)
        .or_else(|| job.environment.clone());
    let ran_in = started_in.map(|env| {
        let mut line = env;
        if let Some(ms) = job.cpu_time_ms {
            line.push_str(&format!(" · CPU {:.1} s", ms as f64 / 1000.0));
        }
        if let Some(peak) = job.peak_host_memory_bytes {
            line.push_str(&format!(" · RAM {}", bytes(peak)));
        }
        line
    });
    let ran_in = match (&job.container, ran_in) {
        (Some(c), Some(line)) => Some(format!(
            "{} · {line}",
            tr!(jobs.in_image, image = c.image.clone())
        )),
        (Some(c), None) => Some(tr!(jobs.in_image, image = c.image.clone())),
        (None, line) => line,
    };
    let wall = job.device_wall.clone().unwrap_or_default();
    let session = job.session_path();
    view! {
        <tr data-job=id.to_string()>
            <td title=job.argv.join(" ")>
                {format!("#{id} ")}<code>{title}</code>
                {ran_in.map(|line| view! { <br /><small class="muted" title=tr!(jobs.device_wall, wall = wall.clone())>{line}</small> })}
            </td>
            <td>{job.username.clone()}</td>
            <td>{match (job.booking_id, job.queue.is_some()) {
                (Some(b), false) => format!("#{b}"),
                (Some(booking), true) => tr!(jobs.queue_booking, booking),
                (None, _) => tr!(jobs.queue).into(),
            }}</td>
            <td class=format!("state {}", job.state.as_str()) title=note.clone()>
                {format!("{}{how}", crate::i18n::job_standing(job.standing()))}
                {(!note.is_empty()).then(|| view! { <br /><small class="muted">{note.clone()}</small> })}
            </td>
            <td>{job.started_at.map(date_time).unwrap_or_default()}</td>
            <td>{job.ended_at.map(date_time).unwrap_or_default()}</td>
            <td class="num">{job.peak_memory_bytes.map(bytes).unwrap_or_else(|| "—".into())}</td>
            <td>
                {session.filter(|_| job.state == lanes_types::job::JobState::Running).map(|path| view! { <a class="button" href=path target="_blank" rel="noopener" data-testid="open-session">{tr!(jobs.open_session)}</a> })}
                <button class="secondary" on:click=move |_| watching.set(Some(id))>{tr!(jobs.log)}</button>
                {live.then(|| view! { <button class="danger" on:click=move |_| cancel.run(id)>{tr!(jobs.cancel)}</button> })}
                {move || cancel.error_of(&id).map(|e| view! { <span class="form-error">{e}</span> })}
            </td>
        </tr>
    }
    .into_any()
}

/// A job's output, followed live over `/api/v1/jobs/{id}/log/ws` until the job ends.
#[component]
fn LogTail(id: i64) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let status = RwSignal::new(tr!(live.connecting).to_string());
    #[cfg(feature = "hydrate")]
    {
        let socket = follow_log(id, text, status);
        on_cleanup(move || {
            if let Some(socket) = socket {
                let _ = socket.take().close();
            }
        });
    }
    view! {
        <section class="panel">
            <h3>{format!("Output of job #{id} ")}<small class="muted">{move || status.get()}</small></h3>
            <pre class="log" data-testid="log">{move || text.get()}</pre>
        </section>
    }
    .into_any()
}

/// Opens the tail socket; its messages append to `text`.
#[cfg(feature = "hydrate")]
fn follow_log(
    id: i64,
    text: RwSignal<String>,
    status: RwSignal<String>,
) -> Option<send_wrapper::SendWrapper<web_sys::WebSocket>> {
    use wasm_bindgen::closure::Closure;
    use web_sys::{CloseEvent, MessageEvent, WebSocket};
    let url = crate::live::socket_url(&api::JobLogWs::path(&id))?;
    let socket = WebSocket::new(&url).ok()?;
    let on_open = Closure::<dyn FnMut()>::new(move || status.set(tr!(live.live).into()));
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        if let Some(chunk) = event.data().as_string() {
            text.update(|t| t.push_str(&chunk));
        }
    });
    let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |event: CloseEvent| {
        status.set(if event.code() == 1000 {
            tr!(jobs.over).into()
        } else {
            tr!(jobs.disconnected).into()
        });
    });
    crate::live::attach(&socket, on_open, on_message, on_close);
    Some(send_wrapper::SendWrapper::new(socket))
}
