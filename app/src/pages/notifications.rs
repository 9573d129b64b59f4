//! Notifications on two pages: on `/account`, what a member is told of and where (time zone,
//! webhook, channels per event, a test message); on `/admin`, the lab's settings (mail server,
//! lead times, defaults and required events), a test send and the outbox.

use crate::components::format::date_time;
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::write::Write;
use crate::rest;
use lanes_types::api::{self, Endpoint};
use lanes_types::notify::{
    Channels, EventKind, EventRule, NotifyPrefs, NotifyPrefsView, NotifySettings, OutboxEntry,
    SmtpSecurity, SmtpSettings, TestSend, TestSent,
};
use leptos::prelude::*;
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
    // Outside the form, which is made again when the saved choices come back.
    let save = Write::new(|prefs: &NotifyPrefs| {
        let prefs = prefs.clone();
        async move { rest::call::<api::SaveMyNotifications>((), &prefs).await }
    });
    let test = Write::new(|_: &()| rest::call::<api::TestMyNotifications>((), &()));
    let prefs = Remote::<NotifyPrefsView>::new(api::MyNotifications::PATH).follows(save);
    view! {
        <section class="panel" data-testid="my-notifications">
            <h3>{tr!(notifications.notifications)}</h3>
            {render_remote(prefs, tr!(notifications.what_prefs), move |view: &NotifyPrefsView| {
                view! { <PrefsForm view=view.clone() save test /> }
            })}
            {outcome(save, |_| tr!(notifications.saved).into())}
            {outcome(test, |sent| tr!(notifications.test_on_way, n = sent.queued.len()))}
        </section>
    }
    .into_any()
}

#[component]
fn PrefsForm(
    view: NotifyPrefsView,
    save: Write<NotifyPrefs, NotifyPrefsView>,
    test: Write<(), TestSent>,
) -> impl IntoView {
    let zone = NodeRef::<leptos::html::Input>::new();
    let hook = super::chat_hook::HookRefs::default();
    let rules = view.rules.clone();
    // What each event goes to now: the member's choice, else the lab's default.
    let chosen: RwSignal<BTreeMap<EventKind, Channels>> = RwSignal::new(
        EventKind::ALL
            .into_iter()
            .map(|k| (k, view.prefs.channels_with(&rules, k)))
            .collect(),
    );
    let save_rules = rules.clone();
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let events = chosen
            .get_untracked()
            .into_iter()
            .filter(|(k, c)| save_rules.get(k).is_none_or(|r| r.channels != *c))
            .collect();
        let prefs = NotifyPrefs {
            time_zone: optional(field(zone)),
            webhook_url: hook.url(),
            webhook_format: hook.format(),
            webhook_secret: hook.secret(),
            webhook_secret_set: false,
            events,
        };
        test.clear();
        save.run(prefs);
    };
    let send_test = move |_| {
        save.clear();
        test.run(());
    };
    let use_browser_zone = move |_| {
        if let (Some(z), Some(input)) = (browser_zone(), zone.get_untracked()) {
            input.set_value(&z);
        }
    };
    let email_line = match (&view.email, view.email_available) {
        (Some(address), true) => tr!(notifications.email_goes, address = address.clone()),
        (Some(address), false) => {
            tr!(notifications.no_mail_server, address = address.clone())
        }
        (None, _) => tr!(notifications.no_address).into(),
    };
    // A channel the member cannot be reached on is shown unticked and cannot be ticked: no
    // address (or no mail server), no webhook saved. The line above the table says why.
    let by_email = view.email.is_some() && view.email_available;
    let by_webhook = view
        .prefs
        .webhook_url
        .as_ref()
        .is_some_and(|u| !u.is_empty());
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
                    <td>{crate::i18n::event_label(kind)}{required.then_some(view! { <span class="muted">{tr!(notifications.required_by_the_lab)}</span> })}</td>
                    <td>
                        <input type="checkbox" name=format!("{}_email", kind.as_str())
                            aria-label=tr!(notifications.by_email, event = crate::i18n::event_label(kind))
                            prop:checked=move || by_email && chosen.with(|m| m.get(&kind).is_some_and(|c| c.email))
                            disabled=required || !by_email on:change=move |_| flip(true) />
                    </td>
                    <td>
                        <input type="checkbox" name=format!("{}_webhook", kind.as_str())
                            aria-label=tr!(notifications.by_webhook, event = crate::i18n::event_label(kind))
                            prop:checked=move || by_webhook && chosen.with(|m| m.get(&kind).is_some_and(|c| c.webhook))
                            disabled=required || !by_webhook
                            title=(!by_webhook).then(|| tr!(notifications.save_a_webhook_first).to_string())
                            on:change=move |_| flip(false) />
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <form class="stack" on:submit=send>
            <p class="muted">{email_line}</p>
            <label>
                {tr!(notifications.zone_label, zone = view.lab_time_zone.clone())}
                <span class="inline">
                    <input name="time_zone" placeholder=tr!(notifications.e_g_europe_berlin) maxlength="64"
                        prop:value=view.prefs.time_zone.clone().unwrap_or_default() node_ref=zone />
                    <button type="button" class="secondary" on:click=use_browser_zone>{tr!(notifications.use_this_browser_s)}</button>
                </span>
            </label>
            <super::chat_hook::HookFields refs=hook url=view.prefs.webhook_url.clone()
                format=view.prefs.webhook_format secret_set=view.prefs.webhook_secret_set
                whose=super::chat_hook::Whose::Mine
                label=tr!(notifications.your_own_webhook_optional_json_post).to_string() />
            <table class="list" data-testid="notify-events">
                <ListHead cols=vec![Col::Text(tr!(notifications.col_when_event)), Col::Text(tr!(notifications.col_email)), Col::Text(tr!(notifications.col_webhook))] />
                <tbody>{rows}</tbody>
            </table>
            <span class="inline">
                <button type="submit">{tr!(notifications.save_notifications)}</button>
                <button type="button" class="secondary" on:click=send_test>{tr!(notifications.send_me_a_test)}</button>
            </span>
        </form>
    }
    .into_any()
}

/// A form's last outcome: saved (or queued), or why not.
fn outcome<I, O>(
    write: Write<I, O>,
    said: impl Fn(&O) -> String + Send + Sync + 'static,
) -> impl IntoView
where
    I: Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    move || match (write.error(), write.answer()) {
        (Some(text), _) => Some(view! { <p class="form-error" role="alert">{text}</p> }.into_any()),
        (None, Some(answer)) => {
            Some(view! { <p class="notice" role="status">{said(&answer)}</p> }.into_any())
        }
        (None, None) => None,
    }
}

/// A form's own finding (a field it cannot read), shown where its write's answer would be.
fn finding(message: RwSignal<Option<String>>) -> impl IntoView {
    move || {
        message
            .get()
            .map(|text| view! { <p class="form-error" role="alert">{text}</p> })
    }
}

/// What the admins' outbox table shows of a message's recipient.
fn recipient(m: &OutboxEntry) -> String {
    m.username
        .clone()
        .unwrap_or_else(|| tr!(notifications.lab_channel).into())
}

/// What the admins' notification panel reads: the delivery settings and the outbox's newest.
pub const SETTINGS: &str = api::NotifySettingsNow::PATH;
/// The newest 50 messages of every status.
pub fn outbox_url() -> String {
    let query = lanes_types::query::OutboxQuery {
        status: None,
        limit: Some(50),
    };
    api::Outbox::url(&(), &query)
}

#[component]
pub fn NotifyPanel() -> impl IntoView {
    let save = Write::new(|settings: &NotifySettings| {
        let settings = settings.clone();
        async move { rest::call::<api::SaveNotifySettings>((), &settings).await }
    });
    let test = Write::new(|request: &TestSend| {
        let request = request.clone();
        async move { rest::call::<api::NotifyTest>((), &request).await }
    });
    let settings = Remote::<NotifySettings>::new(SETTINGS).follows(save);
    let outbox = Remote::<Vec<OutboxEntry>>::new(outbox_url()).follows(test);
    outbox.refresh_every(std::time::Duration::from_secs(5));
    let test_to = NodeRef::<leptos::html::Input>::new();
    // Outside the form, which is made again when the saved settings come back.
    let settings_finding = RwSignal::new(None::<String>);
    let send_test = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = TestSend {
            email: optional(field(test_to)),
            user: None,
        };
        test.run(request);
    };
    view! {
        <section class="panel" data-testid="notify-settings">
            <h3>{tr!(notifications.notifications)}</h3>
            {render_remote(settings, tr!(notifications.what_settings), move |s: &NotifySettings| {
                view! { <NotifySettingsForm settings=s.clone() finding=settings_finding save /> }
            })}
            {finding(settings_finding)}
            {outcome(save, |_| tr!(notifications.saved).into())}
            <h4>{tr!(notifications.test_message)}</h4>
            <form class="inline" on:submit=send_test>
                <input name="test_email" type="email" placeholder=tr!(notifications.an_address_empty_your_own_channels) node_ref=test_to />
                <button type="submit">{tr!(notifications.send_test)}</button>
            </form>
            {outcome(test, |sent| {
                let ids = sent.queued.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
                tr!(notifications.queued_as, ids)
            })}
            <h4>{tr!(notifications.outbox)}</h4>
            <p class="muted">{tr!(notifications.the_latest_50_messages_failed_and)}</p>
            {render_remote(outbox, tr!(notifications.what_outbox), |list: &Vec<OutboxEntry>| {
                if list.is_empty() {
                    return view! { <p class="muted">{tr!(notifications.nothing_sent_yet)}</p> }.into_any();
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
                        <ListHead cols=vec![Col::Text(tr!(notifications.col_when)), Col::Text(tr!(notifications.col_to)), Col::Text(tr!(notifications.col_by)), Col::Text(tr!(notifications.col_event)), Col::Text(tr!(notifications.col_what)), Col::Text(tr!(notifications.col_status)), Col::Text(tr!(notifications.col_tries)), Col::Text(tr!(notifications.col_why))] />
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
    finding: RwSignal<Option<String>>,
    save: Write<NotifySettings, NotifySettings>,
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
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let number = |node: NodeRef<leptos::html::Input>, what: &'static str| {
            field(node)
                .trim()
                .parse::<u32>()
                .map_err(|_| tr!(notifications.is_whole, what))
        };
        let numbers = (|| {
            Ok::<_, String>((
                number(starts, tr!(notifications.start_reminder))?,
                number(ends, tr!(notifications.end_reminder))?,
                number(quota, tr!(notifications.quota_warning))?,
                number(per_hour, tr!(notifications.hourly_limit))?,
            ))
        })();
        let (starts_soon_min, ends_soon_min, quota_near_pct, per_user_per_hour) = match numbers {
            Ok(n) => n,
            Err(e) => {
                save.clear();
                finding.set(Some(e));
                return;
            }
        };
        let smtp = match optional(field(host)) {
            None => None,
            Some(host) => {
                let Ok(port) = field(port).trim().parse::<u16>() else {
                    save.clear();
                    finding.set(Some(tr!(notifications.bad_port).into()));
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
        finding.set(None);
        save.run(wanted);
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
                    <td>{crate::i18n::event_label(kind)}</td>
                    <td><input type="checkbox" name=format!("default_{}_email", kind.as_str()) aria-label=tr!(notifications.by_email_default, event = crate::i18n::event_label(kind)) checked=move || is(0) prop:checked=move || is(0) on:change=move |_| flip(0) /></td>
                    <td><input type="checkbox" name=format!("default_{}_webhook", kind.as_str()) aria-label=tr!(notifications.by_webhook_default, event = crate::i18n::event_label(kind)) checked=move || is(1) prop:checked=move || is(1) on:change=move |_| flip(1) /></td>
                    <td><input type="checkbox" name=format!("required_{}", kind.as_str()) aria-label=tr!(notifications.required_aria, event = crate::i18n::event_label(kind)) checked=move || is(2) prop:checked=move || is(2) on:change=move |_| flip(2) /></td>
                </tr>
            }
        })
        .collect_view();
    // No mail server yet: STARTTLS, the submission port's usual (a blank select said nothing).
    let security_now = match smtp.as_ref().map(|s| s.security) {
        Some(SmtpSecurity::Tls) => "tls",
        Some(SmtpSecurity::None) => "none",
        Some(SmtpSecurity::Starttls) | None => "starttls",
    }
    .to_string();
    let smtp_value = move |f: fn(&SmtpSettings) -> String| smtp.as_ref().map(f).unwrap_or_default();
    let password_hint = if smtp_value(|s| s.password_set.to_string()) == "true" {
        tr!(notifications.password_kept)
    } else {
        tr!(notifications.no_password)
    };
    view! {
        <form class="stack" on:submit=send>
            <label>{tr!(notifications.lab_name_in_every_subject)} <input name="lab_name" required maxlength="80" value=settings.lab_name.clone() node_ref=lab /></label>
            <label>{tr!(notifications.portal_address_for_links_in_messages)} <input name="portal_url" type="url" placeholder="https://gpu.lab.example" value=settings.portal_url.clone().unwrap_or_default() node_ref=portal /></label>
            <label>{tr!(notifications.the_lab_s_time_zone)} <input name="lab_time_zone" value=settings.time_zone.clone() node_ref=zone /></label>
            <fieldset>
                <legend>{tr!(notifications.mail_server_empty_host_no_email)}</legend>
                <label>{tr!(notifications.host)} <input name="smtp_host" value=smtp_value(|s| s.host.clone()) node_ref=host /></label>
                <label>{tr!(notifications.port)} <input name="smtp_port" type="number" min="1" max="65535" value=smtp_value(|s| s.port.to_string()) placeholder="587" node_ref=port /></label>
                <label>{tr!(notifications.security)}
                    <select name="smtp_security" node_ref=security prop:value=security_now.clone()>
                        <option value="starttls" selected=security_now == "starttls">{tr!(notifications.starttls_587)}</option>
                        <option value="tls" selected=security_now == "tls">{tr!(notifications.tls_465)}</option>
                        <option value="none" selected=security_now == "none">{tr!(notifications.none_a_relay_on_this_host)}</option>
                    </select>
                </label>
                <label>{tr!(notifications.login_empty_none)} <input name="smtp_username" autocomplete="off" value=smtp_value(|s| s.username.clone()) node_ref=username /></label>
                <label>{tr!(notifications.password)} <input name="smtp_password" type="password" autocomplete="new-password" placeholder=password_hint node_ref=password /></label>
                <label>{tr!(notifications.sender)} <input name="smtp_from" placeholder=tr!(notifications.lab_gpus_gpus_lab_example) value=smtp_value(|s| s.from.clone()) node_ref=from /></label>
            </fieldset>
            <span class="inline">
                <label>{tr!(notifications.remind_this_many_minutes_before_a)} <input name="starts_soon_min" type="number" min="1" max="1440" value=settings.starts_soon_min.to_string() node_ref=starts /></label>
                <label>{tr!(notifications.and_before_it_ends)} <input name="ends_soon_min" type="number" min="1" max="1440" value=settings.ends_soon_min.to_string() node_ref=ends /></label>
                <label>{tr!(notifications.warn_at_this_of_the_weekly)} <input name="quota_near_pct" type="number" min="1" max="100" value=settings.quota_near_pct.to_string() node_ref=quota /></label>
                <label>{tr!(notifications.most_messages_per_member_an_hour)} <input name="per_user_per_hour" type="number" min="1" max="10000" value=settings.per_user_per_hour.to_string() node_ref=per_hour /></label>
            </span>
            <label class="check">
                <input type="checkbox" name="allow_private_webhooks" checked=settings.allow_private_webhooks node_ref=private />
                {tr!(notifications.members_webhooks_may_point_at_this)}
            </label>
            <table class="list" data-testid="notify-defaults">
                <ListHead cols=vec![Col::Text(tr!(notifications.col_event)), Col::Text(tr!(notifications.col_email_default)), Col::Text(tr!(notifications.col_webhook_default)), Col::Text(tr!(notifications.col_required))] />
                <tbody>{rows}</tbody>
            </table>
            <button type="submit">{tr!(notifications.save_notification_settings)}</button>
        </form>
    }
    .into_any()
}
