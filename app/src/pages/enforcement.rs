//! The admin page's enforcement panels: the watchdog and idle policy with the webhook, and the
//! list of unbooked GPU use.

use crate::components::format::{bytes, date_time};
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::rest::{self, Method};
use lanes_types::enforcement::{Policy, Violation, WatchdogMode, WebhookFormat};
use leptos::prelude::*;
use leptos::task::spawn_local;

/// Names from a comma-separated field: trimmed, without blanks.
fn names(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[component]
pub fn PolicyPanel(on_done: impl Fn() + Copy + Send + Sync + 'static) -> impl IntoView {
    let policy = Remote::<Policy>::new("/api/v1/policy");
    let error = RwSignal::new(None::<String>);
    let saved = RwSignal::new(false);
    let mode = NodeRef::<leptos::html::Select>::new();
    let format = NodeRef::<leptos::html::Select>::new();
    let (grace, exempt_users, exempt_commands) = (NodeRef::new(), NodeRef::new(), NodeRef::new());
    let (threshold, window, release, release_grace, webhook) = (
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
    );
    let number = |input: NodeRef<leptos::html::Input>, what: &str| {
        field(input)
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{what} must be a whole number"))
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
                violation_grace_s: number(grace, "The grace period")?,
                exempt_users: names(&field(exempt_users)),
                exempt_commands: names(&field(exempt_commands)),
                idle_threshold_pct: number(threshold, "The idle threshold")? as u32,
                idle_window_s: number(window, "The idle window")? * 60,
                idle_release: checked(release),
                idle_release_grace_s: number(release_grace, "The release grace")? * 60,
                webhook_url: Some(field(webhook).trim().to_string()).filter(|u| !u.is_empty()),
                webhook_format: if select(format) == "slack" {
                    WebhookFormat::Slack
                } else {
                    WebhookFormat::Json
                },
            })
        })();
        let wanted = match wanted {
            Ok(p) => p,
            Err(e) => return error.set(Some(e)),
        };
        spawn_local(async move {
            match rest::send::<_, Policy>(Method::Put, "/api/v1/policy", &wanted).await {
                Ok(_) => {
                    error.set(None);
                    saved.set(true);
                    policy.reload();
                    on_done();
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <section class="panel">
            <h3>"Enforcement"</h3>
            {render_remote(policy, "the policy", move |p: &Policy| {
                let mode_is = |m: WatchdogMode| p.watchdog == m;
                view! {
                    <form class="policy" on:submit=save data-testid="policy">
                        <label>
                            "Unbooked GPU use "
                            <select node_ref=mode name="watchdog">
                                <option value="observe" selected=mode_is(WatchdogMode::Observe)>"observe: record and show it"</option>
                                <option value="warn" selected=mode_is(WatchdogMode::Warn)>"warn: also notify"</option>
                                <option value="terminate" selected=mode_is(WatchdogMode::Terminate)>"terminate: also end it after the grace period"</option>
                            </select>
                        </label>
                        <label>"Grace period (s) " <input node_ref=grace name="violation_grace_s" type="number" min="0" value=p.violation_grace_s /></label>
                        <label>"Exempt Unix accounts " <input node_ref=exempt_users name="exempt_users" value=p.exempt_users.join(", ") placeholder="e.g. dcgm" /></label>
                        <label>"Exempt executables " <input node_ref=exempt_commands name="exempt_commands" value=p.exempt_commands.join(", ") placeholder="e.g. /usr/bin/nvidia-persistenced" /></label>
                        <label>"Idle under (% GPU utilization) " <input node_ref=threshold name="idle_threshold_pct" type="number" min="0" max="100" value=p.idle_threshold_pct /></label>
                        <label>"for (min) " <input node_ref=window name="idle_window_min" type="number" min="1" value=p.idle_window_s / 60 /></label>
                        <label class="check">
                            <input node_ref=release name="idle_release" type="checkbox" prop:checked=p.idle_release />
                            "Release idle bookings after (min) "
                            <input node_ref=release_grace name="idle_release_grace_min" type="number" min="0" value=p.idle_release_grace_s / 60 />
                        </label>
                        <label>"Webhook URL " <input node_ref=webhook name="webhook_url" type="url" value=p.webhook_url.clone().unwrap_or_default() placeholder="https://hooks.slack.com/…" /></label>
                        <label>
                            "Body "
                            <select node_ref=format name="webhook_format">
                                <option value="json" selected=p.webhook_format == WebhookFormat::Json>"JSON"</option>
                                <option value="slack" selected=p.webhook_format == WebhookFormat::Slack>"Slack-compatible"</option>
                            </select>
                        </label>
                        <button type="submit">"Save policy"</button>
                    </form>
                }
            })}
            {move || saved.get().then(|| view! { <p class="muted" role="status">"Saved."</p> })}
            {move || error.get().map(|m| view! { <p class="form-error" role="alert">{m}</p> })}
        </section>
    }
    .into_any()
}

#[component]
pub fn ViolationsPanel() -> impl IntoView {
    let violations = Remote::<Vec<Violation>>::new("/api/v1/violations");
    view! {
        <section class="panel">
            <h3>"Unbooked GPU use"</h3>
            <button class="secondary" on:click=move |_| violations.reload()>"Refresh"</button>
            {render_remote(violations, "violations", move |list: &Vec<Violation>| {
                if list.is_empty() {
                    return view! { <p class="muted">"None seen."</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .map(|v| {
                        let open = v.ended.is_none();
                        view! {
                            <tr class:unbooked=open>
                                <td title=v.gpu_uuid.clone()>{format!("{} · {}…", v.node, &v.gpu_uuid[..v.gpu_uuid.len().min(12)])}</td>
                                <td>{v.pid}</td>
                                <td>{v.unix_user.clone().unwrap_or_else(|| "?".into())}{v.username.clone().map(|u| format!(" ({u})")).unwrap_or_default()}</td>
                                <td>{v.command.clone().unwrap_or_else(|| "?".into())}</td>
                                <td class="num">{v.memory_bytes.map(bytes).unwrap_or_else(|| "—".into())}</td>
                                <td>{date_time(v.first_seen)}</td>
                                <td>{v.ended.map(date_time).unwrap_or_else(|| "still running".into())}</td>
                                <td>{v.action.as_str()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list violations" data-testid="violations">
                        <ListHead cols=&[Col::Text("Card"), Col::Text("PID"), Col::Text("Owner"), Col::Text("Command"), Col::Num("Memory"), Col::Text("First seen"), Col::Text("Ended"), Col::Text("Action")] />
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
