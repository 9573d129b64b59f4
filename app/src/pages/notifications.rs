//! Notifications on two pages: on `/account`, what a member is told of and where (time zone,
//! webhook, channels per event, a test message); on `/admin`, the lab's settings (mail server,
//! lead times, defaults and required events), a test send and the outbox.

use crate::components::format::date_time;
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::rest::{self, Method};
use lanes_types::enforcement::WebhookFormat;
use lanes_types::notify::{
    Channels, EventKind, EventRule, NotifyPrefs, NotifyPrefsView, NotifySettings, OutboxEntry,
    SmtpSecurity, SmtpSettings, TestSend, TestSent,
};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;

/// The time zone this browser is in (`Europe/Berlin`), where it says.
fn browser_zone() -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        let options =
            js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new())
                .resolved_options();
        js_sys::Reflect::get(&options, &"timeZone".into())
            .ok()
            .and_then(|z| z.as_string())
    }
    #[cfg(not(feature = "hydrate"))]
    None
}

fn optional(text: String) -> Option<String> {
    let text = text.trim().to_string();
    (!text.is_empty()).then_some(text)
}

#[component]
pub fn MyNotifications() -> impl IntoView {
    let prefs = Remote::<NotifyPrefsView>::new("/api/v1/me/notifications");
    // Outside the form, which is made again when the saved choices come back.
    let message = RwSignal::new(None::<Result<String, String>>);
    view! {
        <section class="panel" data-testid="my-notifications">
            <h3>"Notifications"</h3>
            {render_remote(prefs, "your notification choices", move |view: &NotifyPrefsView| {
                view! { <PrefsForm view=view.clone() message on_saved=move || prefs.reload() /> }
            })}
            {outcome(message)}
        </section>
    }
    .into_any()
}

#[component]
fn PrefsForm(
    view: NotifyPrefsView,
    message: RwSignal<Option<Result<String, String>>>,
    on_saved: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let zone = NodeRef::<leptos::html::Input>::new();
    let hook = NodeRef::<leptos::html::Input>::new();
    let slack = NodeRef::<leptos::html::Input>::new();
    let rules = view.rules.clone();
    // What each event goes to now: the member's choice, else the lab's default.
    let chosen: RwSignal<BTreeMap<EventKind, Channels>> = RwSignal::new(
        EventKind::ALL
            .into_iter()
            .map(|k| (k, view.prefs.channels_with(&rules, k)))
            .collect(),
    );
    let save_rules = rules.clone();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let events = chosen
            .get_untracked()
            .into_iter()
            .filter(|(k, c)| save_rules.get(k).is_none_or(|r| r.channels != *c))
            .collect();
        let prefs = NotifyPrefs {
            time_zone: optional(field(zone)),
            webhook_url: optional(field(hook)),
            webhook_format: if checked(slack) {
                WebhookFormat::Slack
            } else {
                WebhookFormat::Json
            },
            events,
        };
        spawn_local(async move {
            match rest::send::<_, NotifyPrefsView>(Method::Put, "/api/v1/me/notifications", &prefs)
                .await
            {
                Ok(_) => {
                    message.set(Some(Ok("Saved.".into())));
                    on_saved();
                }
                Err(e) => message.set(Some(Err(e))),
            }
        });
    };
    let test = move |_| {
        spawn_local(async move {
            match rest::send::<_, TestSent>(Method::Post, "/api/v1/me/notifications/test", &())
                .await
            {
                Ok(sent) => message.set(Some(Ok(format!(
                    "A test message is on its way ({} queued).",
                    sent.queued.len()
                )))),
                Err(e) => message.set(Some(Err(e))),
            }
        });
    };
    let use_browser_zone = move |_| {
        if let (Some(z), Some(input)) = (browser_zone(), zone.get_untracked()) {
            input.set_value(&z);
        }
    };
    let email_line = match (&view.email, view.email_available) {
        (Some(address), true) => format!("Email goes to {address}."),
        (Some(address), false) => {
            format!("Your address is {address}, but the lab has no mail server set up yet.")
        }
        (None, _) => "You have no email address on record: ask an admin to add one.".into(),
    };
    let rows = EventKind::ALL
        .into_iter()
        .map(|kind| {
            let rule = rules.get(&kind).copied();
            let required = rule.is_some_and(|r| r.required);
            let flip = move |email: bool| {
                chosen.update(|m| {
                    let c = m.entry(kind).or_default();
                    if email {
                        c.email = !c.email;
                    } else {
                        c.webhook = !c.webhook;
                    }
                })
            };
            view! {
                <tr>
                    <td>{kind.label()}{required.then_some(view! { <span class="muted">" (required by the lab)"</span> })}</td>
                    <td>
                        <input type="checkbox" name=format!("{}_email", kind.as_str())
                            aria-label=format!("{} by email", kind.label())
                            prop:checked=move || chosen.with(|m| m.get(&kind).is_some_and(|c| c.email))
                            disabled=required on:change=move |_| flip(true) />
                    </td>
                    <td>
                        <input type="checkbox" name=format!("{}_webhook", kind.as_str())
                            aria-label=format!("{} by webhook", kind.label())
                            prop:checked=move || chosen.with(|m| m.get(&kind).is_some_and(|c| c.webhook))
                            disabled=required on:change=move |_| flip(false) />
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <form class="stack" on:submit=save>
            <p class="muted">{email_line}</p>
            <label>
                {format!("Time zone for times in messages (empty: the lab's, {})", view.lab_time_zone)}
                <span class="inline">
                    <input name="time_zone" placeholder="e.g. Europe/Berlin" maxlength="64"
                        prop:value=view.prefs.time_zone.clone().unwrap_or_default() node_ref=zone />
                    <button type="button" class="secondary" on:click=use_browser_zone>"Use this browser's"</button>
                </span>
            </label>
            <label>
                "Your own webhook (optional; JSON POST, or Slack-compatible)"
                <input name="webhook_url" type="url" placeholder="https://hooks.example/…" maxlength="2000"
                    prop:value=view.prefs.webhook_url.clone().unwrap_or_default() node_ref=hook />
            </label>
            <label class="check">
                <input type="checkbox" name="webhook_slack" prop:checked=view.prefs.webhook_format == WebhookFormat::Slack node_ref=slack />
                "Send it as Slack's (and Mattermost's) incoming webhooks take it"
            </label>
            <table class="list" data-testid="notify-events">
                <ListHead cols=&[Col::Text("Tell me when"), Col::Text("Email"), Col::Text("Webhook")] />
                <tbody>{rows}</tbody>
            </table>
            <span class="inline">
                <button type="submit">"Save notifications"</button>
                <button type="button" class="secondary" on:click=test>"Send me a test"</button>
            </span>
        </form>
    }
    .into_any()
}

/// A form's last outcome: saved (or queued), or why not.
fn outcome(message: RwSignal<Option<Result<String, String>>>) -> impl IntoView {
    move || {
        message.get().map(|m| match m {
            Ok(text) => view! { <p class="notice" role="status">{text}</p> }.into_any(),
            Err(text) => view! { <p class="form-error" role="alert">{text}</p> }.into_any(),
        })
    }
}

/// What the admins' outbox table shows of a message's recipient.
fn recipient(m: &OutboxEntry) -> String {
    m.username.clone().unwrap_or_else(|| "lab channel".into())
}

#[component]
pub fn NotifyPanel(on_done: impl Fn() + Copy + Send + Sync + 'static) -> impl IntoView {
    let settings = Remote::<NotifySettings>::new("/api/v1/notifications/settings");
    let outbox = Remote::<Vec<OutboxEntry>>::new("/api/v1/notifications/outbox?limit=50");
    outbox.refresh_every(std::time::Duration::from_secs(5));
    let test_to = NodeRef::<leptos::html::Input>::new();
    let test_message = RwSignal::new(None::<Result<String, String>>);
    let settings_message = RwSignal::new(None::<Result<String, String>>);
    let send_test = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = TestSend {
            email: optional(field(test_to)),
            user: None,
        };
        spawn_local(async move {
            match rest::send::<_, TestSent>(Method::Post, "/api/v1/notifications/test", &request)
                .await
            {
                Ok(sent) => {
                    test_message.set(Some(Ok(format!(
                        "Queued as message {}: watch it below.",
                        sent.queued
                            .iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))));
                    outbox.reload();
                }
                Err(e) => test_message.set(Some(Err(e))),
            }
        });
    };
    view! {
        <section class="panel" data-testid="notify-settings">
            <h3>"Notifications"</h3>
            {render_remote(settings, "notification settings", move |s: &NotifySettings| {
                view! { <NotifySettingsForm settings=s.clone() message=settings_message on_saved=move || { settings.reload(); on_done(); } /> }
            })}
            {outcome(settings_message)}
            <h4>"Test message"</h4>
            <form class="inline" on:submit=send_test>
                <input name="test_email" type="email" placeholder="an address (empty: your own channels)" node_ref=test_to />
                <button type="submit">"Send test"</button>
            </form>
            {outcome(test_message)}
            <h4>"Outbox"</h4>
            <p class="muted">"The latest 50 messages; failed and suppressed ones say why."</p>
            {render_remote(outbox, "the outbox", |list: &Vec<OutboxEntry>| {
                if list.is_empty() {
                    return view! { <p class="muted">"Nothing sent yet."</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .map(|m| {
                        let status = m.status.as_str();
                        view! {
                            <tr class=format!("outbox-{status}")>
                                <td class="nowrap">{date_time(m.created_at)}</td>
                                <td>{recipient(m)}</td>
                                <td>{m.channel.as_str()}</td>
                                <td><code>{m.event.clone()}</code></td>
                                <td>{m.text.clone()}</td>
                                <td>{status}</td>
                                <td>{m.attempts}</td>
                                <td>{m.last_error.clone().unwrap_or_default()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list" data-testid="outbox">
                        <ListHead cols=&[Col::Text("When"), Col::Text("To"), Col::Text("By"), Col::Text("Event"), Col::Text("What"), Col::Text("Status"), Col::Text("Tries"), Col::Text("Why not sent")] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                    .into_any()
            })}
        </section>
    }
    .into_any()
}

#[component]
fn NotifySettingsForm(
    settings: NotifySettings,
    message: RwSignal<Option<Result<String, String>>>,
    on_saved: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let lab = NodeRef::<leptos::html::Input>::new();
    let portal = NodeRef::<leptos::html::Input>::new();
    let zone = NodeRef::<leptos::html::Input>::new();
    let host = NodeRef::<leptos::html::Input>::new();
    let port = NodeRef::<leptos::html::Input>::new();
    let security = NodeRef::<leptos::html::Select>::new();
    let username = NodeRef::<leptos::html::Input>::new();
    let password = NodeRef::<leptos::html::Input>::new();
    let from = NodeRef::<leptos::html::Input>::new();
    let starts = NodeRef::<leptos::html::Input>::new();
    let ends = NodeRef::<leptos::html::Input>::new();
    let quota = NodeRef::<leptos::html::Input>::new();
    let per_hour = NodeRef::<leptos::html::Input>::new();
    let private = NodeRef::<leptos::html::Input>::new();
    let rules: RwSignal<BTreeMap<EventKind, EventRule>> = RwSignal::new(
        EventKind::ALL
            .into_iter()
            .map(|k| (k, settings.rule(k)))
            .collect(),
    );
    let link_hours = settings.link_hours;
    let smtp = settings.smtp.clone();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let number = |node: NodeRef<leptos::html::Input>, what: &str| {
            field(node)
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{what} is a whole number."))
        };
        let numbers = (|| {
            Ok::<_, String>((
                number(starts, "The start reminder")?,
                number(ends, "The end reminder")?,
                number(quota, "The quota warning")?,
                number(per_hour, "The hourly limit")?,
            ))
        })();
        let (starts_soon_min, ends_soon_min, quota_near_pct, per_user_per_hour) = match numbers {
            Ok(n) => n,
            Err(e) => {
                message.set(Some(Err(e)));
                return;
            }
        };
        let smtp = match optional(field(host)) {
            None => None,
            Some(host) => {
                let Ok(port) = field(port).trim().parse::<u16>() else {
                    message.set(Some(Err(
                        "The mail server's port is a number from 1 to 65535.".into(),
                    )));
                    return;
                };
                let security = match security.get_untracked().map(|s| s.value()).as_deref() {
                    Some("tls") => SmtpSecurity::Tls,
                    Some("none") => SmtpSecurity::None,
                    _ => SmtpSecurity::Starttls,
                };
                Some(SmtpSettings {
                    host,
                    port,
                    security,
                    username: field(username).trim().to_string(),
                    // Empty: keep the stored one.
                    password: optional(field(password)),
                    password_set: false,
                    from: field(from).trim().to_string(),
                })
            }
        };
        let wanted = NotifySettings {
            lab_name: field(lab).trim().to_string(),
            portal_url: optional(field(portal)),
            time_zone: optional(field(zone)).unwrap_or_else(|| "UTC".into()),
            smtp,
            starts_soon_min,
            ends_soon_min,
            quota_near_pct,
            per_user_per_hour,
            link_hours,
            allow_private_webhooks: checked(private),
            events: rules.get_untracked(),
        };
        spawn_local(async move {
            match rest::send::<_, NotifySettings>(
                Method::Put,
                "/api/v1/notifications/settings",
                &wanted,
            )
            .await
            {
                Ok(_) => {
                    message.set(Some(Ok("Saved.".into())));
                    on_saved();
                }
                Err(e) => message.set(Some(Err(e))),
            }
        });
    };
    let rows = EventKind::ALL
        .into_iter()
        .map(|kind| {
            let flip = move |which: u8| {
                rules.update(|m| {
                    if let Some(r) = m.get_mut(&kind) {
                        match which {
                            0 => r.channels.email = !r.channels.email,
                            1 => r.channels.webhook = !r.channels.webhook,
                            _ => r.required = !r.required,
                        }
                    }
                })
            };
            let is = move |which: u8| {
                rules.with(|m| {
                    m.get(&kind).is_some_and(|r| match which {
                        0 => r.channels.email,
                        1 => r.channels.webhook,
                        _ => r.required,
                    })
                })
            };
            view! {
                <tr>
                    <td>{kind.label()}</td>
                    <td><input type="checkbox" name=format!("default_{}_email", kind.as_str()) aria-label=format!("{} by email by default", kind.label()) prop:checked=move || is(0) on:change=move |_| flip(0) /></td>
                    <td><input type="checkbox" name=format!("default_{}_webhook", kind.as_str()) aria-label=format!("{} by webhook by default", kind.label()) prop:checked=move || is(1) on:change=move |_| flip(1) /></td>
                    <td><input type="checkbox" name=format!("required_{}", kind.as_str()) aria-label=format!("{}: members may not turn it off", kind.label()) prop:checked=move || is(2) on:change=move |_| flip(2) /></td>
                </tr>
            }
        })
        .collect_view();
    let smtp_value = move |f: fn(&SmtpSettings) -> String| smtp.as_ref().map(f).unwrap_or_default();
    let security_now = smtp_value(|s| match s.security {
        SmtpSecurity::Starttls => "starttls".into(),
        SmtpSecurity::Tls => "tls".into(),
        SmtpSecurity::None => "none".into(),
    });
    let password_hint = if smtp_value(|s| s.password_set.to_string()) == "true" {
        "a password is kept: leave empty to keep it"
    } else {
        "none"
    };
    view! {
        <form class="stack" on:submit=save>
            <label>"Lab name (in every subject)" <input name="lab_name" required maxlength="80" prop:value=settings.lab_name.clone() node_ref=lab /></label>
            <label>"Portal address for links in messages (empty: this server's own)" <input name="portal_url" type="url" placeholder="https://gpu.lab.example" prop:value=settings.portal_url.clone().unwrap_or_default() node_ref=portal /></label>
            <label>"The lab's time zone" <input name="lab_time_zone" prop:value=settings.time_zone.clone() node_ref=zone /></label>
            <fieldset>
                <legend>"Mail server (empty host: no email)"</legend>
                <label>"Host" <input name="smtp_host" prop:value=smtp_value(|s| s.host.clone()) node_ref=host /></label>
                <label>"Port" <input name="smtp_port" type="number" min="1" max="65535" prop:value=smtp_value(|s| s.port.to_string()) placeholder="587" node_ref=port /></label>
                <label>"Security"
                    <select name="smtp_security" node_ref=security prop:value=security_now.clone()>
                        <option value="starttls" selected=security_now == "starttls" || security_now.is_empty()>"STARTTLS (587)"</option>
                        <option value="tls" selected=security_now == "tls">"TLS (465)"</option>
                        <option value="none" selected=security_now == "none">"None (a relay on this host only)"</option>
                    </select>
                </label>
                <label>"Login (empty: none)" <input name="smtp_username" autocomplete="off" prop:value=smtp_value(|s| s.username.clone()) node_ref=username /></label>
                <label>"Password" <input name="smtp_password" type="password" autocomplete="new-password" placeholder=password_hint node_ref=password /></label>
                <label>"Sender" <input name="smtp_from" placeholder="Lab GPUs <gpus@lab.example>" prop:value=smtp_value(|s| s.from.clone()) node_ref=from /></label>
            </fieldset>
            <span class="inline">
                <label>"Remind this many minutes before a booking starts" <input name="starts_soon_min" type="number" min="1" max="1440" prop:value=settings.starts_soon_min.to_string() node_ref=starts /></label>
                <label>"…and before it ends" <input name="ends_soon_min" type="number" min="1" max="1440" prop:value=settings.ends_soon_min.to_string() node_ref=ends /></label>
                <label>"Warn at this % of the weekly quota" <input name="quota_near_pct" type="number" min="1" max="100" prop:value=settings.quota_near_pct.to_string() node_ref=quota /></label>
                <label>"Most messages per member an hour" <input name="per_user_per_hour" type="number" min="1" max="10000" prop:value=settings.per_user_per_hour.to_string() node_ref=per_hour /></label>
            </span>
            <label class="check">
                <input type="checkbox" name="allow_private_webhooks" prop:checked=settings.allow_private_webhooks node_ref=private />
                "Members' webhooks may point at this machine or a private network"
            </label>
            <table class="list" data-testid="notify-defaults">
                <ListHead cols=&[Col::Text("Event"), Col::Text("Email by default"), Col::Text("Webhook by default"), Col::Text("Required")] />
                <tbody>{rows}</tbody>
            </table>
            <button type="submit">"Save notification settings"</button>
        </form>
    }
    .into_any()
}
