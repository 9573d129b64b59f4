//! The admin page's enforcement panels: the watchdog and idle policy with the webhook, and the
//! list of unbooked GPU use.

use crate::components::format::{bytes, date_time};
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::write::Write;
use crate::rest;
use lanes_types::api::{self, Endpoint};
use lanes_types::enforcement::{Policy, Violation, WatchdogMode};
use lanes_types::health::HealthPolicy;
use lanes_types::{CardIndex, GpuState};
use leptos::prelude::*;

/// Names from a comma-separated field: trimmed, without blanks.
fn names(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// What the policy panel reads.
pub const POLICY: &str = api::PolicyNow::PATH;
/// What the unbooked-use panel reads: the violations, and the cards to name them by.
pub const VIOLATIONS: &str = api::Violations::PATH;
pub const GPUS: &str = api::Gpus::PATH;

#[component]
pub fn PolicyPanel() -> impl IntoView {
    let save_policy = Write::new(|policy: &Policy| {
        let policy = policy.clone();
        async move { rest::call::<api::SavePolicy>((), &policy).await }
    });
    let policy = Remote::<Policy>::new(POLICY).follows(save_policy);
    // What the form itself finds wrong; the server's refusal is the write's.
    let error = RwSignal::new(None::<String>);
    let mode = NodeRef::<leptos::html::Select>::new();
    let hook = super::chat_hook::HookRefs::default();
    let (grace, exempt_users, exempt_commands) = (NodeRef::new(), NodeRef::new(), NodeRef::new());
    let (threshold, window, release, release_grace) = (
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
    );
    let (drain, stop_jobs, warn_degraded) = (NodeRef::new(), NodeRef::new(), NodeRef::new());
    let number = |input: NodeRef<leptos::html::Input>, what: &'static str| {
        field(input)
            .trim()
            .parse::<u64>()
            .map_err(|_| tr!(common.whole_number, what))
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let select =
            |node: NodeRef<leptos::html::Select>| node.get().map(|s| s.value()).unwrap_or_default();
        let wanted = (|| -> Result<Policy, String> {
            Ok(Policy {
                watchdog: match select(mode).as_str() {
                    "warn" => WatchdogMode::Warn,
                    "terminate" => WatchdogMode::Terminate,
                    _ => WatchdogMode::Observe,
                },
                violation_grace_s: number(grace, tr!(enforcement.grace))?,
                exempt_users: names(&field(exempt_users)),
                exempt_commands: names(&field(exempt_commands)),
                idle_threshold_pct: number(threshold, tr!(enforcement.idle_threshold))? as u32,
                idle_window_s: number(window, tr!(enforcement.idle_window))? * 60,
                idle_release: checked(release),
                idle_release_grace_s: number(release_grace, tr!(enforcement.release_grace))? * 60,
                webhook_url: hook.url(),
                webhook_format: hook.format(),
                webhook_secret: hook.secret(),
                webhook_secret_set: false,
                health: HealthPolicy {
                    drain_failing: checked(drain),
                    stop_jobs_on_failing: checked(stop_jobs),
                    warn_degraded: checked(warn_degraded),
                },
            })
        })();
        match wanted {
            Ok(wanted) => {
                error.set(None);
                save_policy.run(wanted);
            }
            Err(e) => {
                save_policy.clear();
                error.set(Some(e));
            }
        }
    };
    view! {
        <section class="panel">
            <h3>{tr!(enforcement.enforcement)}</h3>
            {render_remote(policy, tr!(enforcement.what_policy), move |p: &Policy| {
                let mode_is = |m: WatchdogMode| p.watchdog == m;
                view! {
                    <form class="policy" on:submit=save data-testid="policy">
                        <label>
                            {tr!(enforcement.unbooked_gpu_use)}
                            <select node_ref=mode name="watchdog">
                                <option value="observe" selected=mode_is(WatchdogMode::Observe)>{tr!(enforcement.observe_record_and_show_it)}</option>
                                <option value="warn" selected=mode_is(WatchdogMode::Warn)>{tr!(enforcement.warn_also_notify)}</option>
                                <option value="terminate" selected=mode_is(WatchdogMode::Terminate)>{tr!(enforcement.terminate_also_end_it_after_the)}</option>
                            </select>
                        </label>
                        <label>{tr!(enforcement.grace_period_s)} <input node_ref=grace name="violation_grace_s" type="number" min="0" value=p.violation_grace_s /></label>
                        <label>{tr!(enforcement.exempt_unix_accounts)} <input node_ref=exempt_users name="exempt_users" value=p.exempt_users.join(", ") placeholder=tr!(enforcement.e_g_dcgm) /></label>
                        <label>{tr!(enforcement.exempt_executables)} <input node_ref=exempt_commands name="exempt_commands" value=p.exempt_commands.join(", ") placeholder=tr!(enforcement.e_g_usr_bin_nvidia_persistenced) /></label>
                        <label>{tr!(enforcement.idle_under_gpu_utilization)} <input node_ref=threshold name="idle_threshold_pct" type="number" min="0" max="100" value=p.idle_threshold_pct /></label>
                        <label>{tr!(enforcement.for_min)} <input node_ref=window name="idle_window_min" type="number" min="1" value=p.idle_window_s / 60 /></label>
                        <label class="check">
                            <input node_ref=release name="idle_release" type="checkbox" checked=p.idle_release />
                            {tr!(enforcement.release_idle_bookings_after_min)}
                            <input node_ref=release_grace name="idle_release_grace_min" type="number" min="0" value=p.idle_release_grace_s / 60 />
                        </label>
                        <super::chat_hook::HookFields refs=hook url=p.webhook_url.clone()
                            format=p.webhook_format secret_set=p.webhook_secret_set
                            whose=super::chat_hook::Whose::Lab
                            label=tr!(enforcement.webhook_url).to_string() />
                        <fieldset class="card-health">
                            <legend>{tr!(enforcement.card_health)}</legend>
                            <label class="check"><input node_ref=drain name="drain_failing" type="checkbox" checked=p.health.drain_failing />{tr!(enforcement.drain_failing)}</label>
                            <label class="check"><input node_ref=stop_jobs name="stop_jobs_on_failing" type="checkbox" checked=p.health.stop_jobs_on_failing />{tr!(enforcement.stop_jobs_on_failing)}</label>
                            <label class="check"><input node_ref=warn_degraded name="warn_degraded" type="checkbox" checked=p.health.warn_degraded />{tr!(enforcement.warn_degraded)}</label>
                        </fieldset>
                        <button type="submit">{tr!(enforcement.save_policy)}</button>
                    </form>
                }
            })}
            {move || save_policy.succeeded().then(|| view! { <p class="muted" role="status">{tr!(enforcement.saved)}</p> })}
            {save_policy.error_view_with(error)}
        </section>
    }
    .into_any()
}

#[component]
pub fn ViolationsPanel() -> impl IntoView {
    let violations = Remote::<Vec<Violation>>::new(VIOLATIONS);
    // To name cards as the dashboard does ("GPU 3 · node").
    let gpus = Remote::<Vec<GpuState>>::new(GPUS);
    view! {
        <section class="panel">
            <h3>{tr!(enforcement.unbooked_gpu_use_2)}</h3>
            <button class="secondary" on:click=move |_| violations.reload()>{tr!(enforcement.refresh)}</button>
            {render_remote(violations, tr!(enforcement.what_violations), move |list: &Vec<Violation>| {
                if list.is_empty() {
                    return view! { <p class="muted">{tr!(enforcement.none_seen)}</p> }.into_any();
                }
                let cards = gpus.with(|data| match data {
                    Some(Ok(list)) => CardIndex::of_gpus(list.iter().map(|g| &g.info)),
                    _ => CardIndex::default(),
                });
                let rows = list
                    .iter()
                    .map(|v| {
                        let open = v.ended.is_none();
                        view! {
                            <tr class:unbooked=open>
                                <td title=v.gpu_uuid.clone()>{cards.name(&v.node, &v.gpu_uuid)}</td>
                                <td>{v.pid}</td>
                                <td>{match (&v.unix_user, &v.container) {
                                    (Some(user), _) => user.clone(),
                                    (None, Some(_)) => tr!(dashboard.owner_unknown).to_string(),
                                    (None, None) => "?".into(),
                                }}{v.username.clone().map(|u| format!(" ({u})")).unwrap_or_default()}</td>
                                <td>
                                    {v.command.clone().unwrap_or_else(|| "?".into())}
                                    {v.container.clone().map(|c| {
                                        let name = c.name.clone().or(c.id.clone()).unwrap_or_default();
                                        let image = c.image.clone().map(|image| tr!(dashboard.container_image, image)).unwrap_or_default();
                                        let title = image.clone();
                                        view! { <br /><small class="muted" data-testid="container" title=title>{tr!(dashboard.in_container, runtime = c.runtime.clone(), name)}" · "{image}</small> }.into_any()
                                    })}
                                </td>
                                <td class="num">{v.memory_bytes.map(bytes).unwrap_or_else(|| "—".into())}</td>
                                <td>{date_time(v.first_seen)}</td>
                                <td>{v.ended.map(date_time).unwrap_or_else(|| tr!(enforcement.still_running).into())}</td>
                                <td>{crate::i18n::violation_action(v.action)}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list violations" data-testid="violations">
                        <ListHead cols=vec![Col::Text(tr!(enforcement.col_card)), Col::Text("PID"), Col::Text(tr!(enforcement.col_owner)), Col::Text(tr!(enforcement.col_command)), Col::Num(tr!(enforcement.col_memory)), Col::Text(tr!(enforcement.col_first_seen)), Col::Text(tr!(enforcement.col_ended)), Col::Text(tr!(enforcement.col_action))] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                .into_any()
            })}
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_lists_are_trimmed_without_blanks() {
        assert_eq!(
            names(" dcgm, ,nvidia-persistenced "),
            vec!["dcgm", "nvidia-persistenced"]
        );
        assert!(names("").is_empty());
    }
}
