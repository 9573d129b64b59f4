//! `/admin/queue`: the queue's policy, its time limits, the fair-share half-life and the
//! lending grace, and the shares of groups and users (before, only the API could set them).

use crate::components::remote::{field, render_remote, Remote};
use crate::components::write::Write;
use crate::rest;
use lanes_types::api::{self, Endpoint};
use lanes_types::notice::NoticeSignal;
use lanes_types::queue::{Policy, QueueSettings, Shares};
use lanes_types::units::{format_duration, parse_duration};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// What the section reads.
pub const SETTINGS: &str = api::QueueSettingsNow::PATH;
pub const SHARES: &str = api::SharesNow::PATH;

#[component]
pub fn QueueAdminSection() -> impl IntoView {
    let save = Write::new(|settings: &QueueSettings| {
        let settings = settings.clone();
        async move { rest::call::<api::SaveQueueSettings>((), &settings).await }
    });
    let save_shares = Write::new(|shares: &Shares| {
        let shares = shares.clone();
        async move { rest::call::<api::SaveShares>((), &shares).await }
    });
    let settings = Remote::<QueueSettings>::new(SETTINGS).follows(save);
    let shares = Remote::<Shares>::new(SHARES).follows(save_shares);
    view! {
        <section class="panel" data-testid="queue-settings">
            <h3>{tr!(queue_admin.title)}</h3>
            {render_remote(settings, tr!(queue_admin.what_settings), move |now: &QueueSettings| {
                view! { <SettingsForm now=now.clone() save /> }
            })}
        </section>
        <section class="panel" data-testid="queue-shares">
            <h3>{tr!(queue_admin.shares)}</h3>
            <p class="hint">{tr!(queue_admin.shares_hint)}</p>
            {render_remote(shares, tr!(queue_admin.what_shares), move |now: &Shares| {
                view! { <SharesForm now=now.clone() save_shares /> }
            })}
        </section>
    }
    .into_any()
}

/// A duration field's value as seconds: the form's own words when it is not one.
fn seconds(text: &str, what: &str) -> Result<i64, String> {
    match parse_duration(text) {
        Ok(d) if d > chrono::Duration::zero() => Ok(d.num_seconds()),
        _ => Err(tr!(queue_admin.bad_duration, what = what.to_string())),
    }
}

/// As [`seconds`], where `0` (none) is allowed too.
fn seconds_or_none(text: &str, what: &str) -> Result<i64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    seconds(text, what)
}

/// A count field's value (0 to 1000): the form's own words when it is not one.
fn count(text: &str, what: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= 1000)
        .ok_or_else(|| tr!(queue_admin.bad_count, what = what.to_string()))
}

fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Fifo => tr!(queue_policy.fifo),
        Policy::Backfill => tr!(queue_policy.backfill),
        Policy::Fairshare => tr!(queue_policy.fairshare),
        Policy::Las => tr!(queue_policy.las),
    }
}

#[component]
fn SettingsForm(now: QueueSettings, save: Write<QueueSettings, QueueSettings>) -> impl IntoView {
    let policy = NodeRef::<leptos::html::Select>::new();
    let (default_limit, max_limit, half_life, grace) = (
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
        NodeRef::new(),
    );
    let signal = NodeRef::<leptos::html::Select>::new();
    let (lead, most, requeues) = (NodeRef::new(), NodeRef::new(), NodeRef::new());
    let finding = RwSignal::new(None::<String>);
    let shown = |s: i64| {
        if s == 0 {
            "0".to_string()
        } else {
            format_duration(chrono::Duration::seconds(s))
        }
    };
    let base = now.clone();
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let read = || -> Result<QueueSettings, String> {
            let chosen = policy
                .get_untracked()
                .map(|s| s.value())
                .unwrap_or_default();
            let policy = Policy::ALL
                .into_iter()
                .find(|p| p.as_str() == chosen)
                .unwrap_or(base.policy);
            let default_time_limit_s = match field(default_limit).trim() {
                "" => None,
                text => Some(seconds(text, tr!(queue_admin.default_limit))?),
            };
            Ok(QueueSettings {
                policy,
                default_time_limit_s,
                max_time_limit_s: seconds(&field(max_limit), tr!(queue_admin.max_limit))?,
                half_life_s: seconds(&field(half_life), tr!(queue_admin.half_life))?,
                lending_grace_s: seconds(&field(grace), tr!(queue_admin.lending_grace))?,
                notice_signal: signal
                    .get_untracked()
                    .and_then(|s| s.value().parse::<NoticeSignal>().ok())
                    .unwrap_or(base.notice_signal),
                notice_lead_s: seconds_or_none(&field(lead), tr!(queue_admin.notice_lead))?,
                notice_max_s: seconds_or_none(&field(most), tr!(queue_admin.notice_max))?,
                max_requeues: count(&field(requeues), tr!(queue_admin.max_requeues))?,
                ..base.clone()
            })
        };
        match read() {
            Ok(settings) => {
                finding.set(None);
                save.run(settings);
            }
            Err(message) => finding.set(Some(message)),
        }
    };
    let options = Policy::ALL
        .into_iter()
        .map(|p| view! { <option value=p.as_str() selected=p == now.policy>{policy_name(p)}</option> })
        .collect_view();
    let signals = NoticeSignal::ALL
        .into_iter()
        .map(|s| {
            let label = match s {
                NoticeSignal::None => tr!(queue_admin.no_signal).to_string(),
                other => other.as_str().to_string(),
            };
            view! { <option value=s.as_str() selected=s == now.notice_signal>{label}</option> }
        })
        .collect_view();
    view! {
        <form class="policy" on:submit=send>
            <label>{tr!(queue_admin.policy)}
                <select name="policy" node_ref=policy prop:value=now.policy.as_str()>{options}</select>
            </label>
            <label>{tr!(queue_admin.default_limit)}
                <input name="default_time_limit" node_ref=default_limit placeholder=tr!(queue_admin.none_required)
                    value=now.default_time_limit_s.map(shown).unwrap_or_default() />
            </label>
            <label>{tr!(queue_admin.max_limit)}
                <input name="max_time_limit" node_ref=max_limit required value=shown(now.max_time_limit_s) />
            </label>
            <label>{tr!(queue_admin.half_life)}
                <input name="half_life" node_ref=half_life required value=shown(now.half_life_s) />
            </label>
            <label>{tr!(queue_admin.lending_grace)}
                <input name="lending_grace" node_ref=grace required value=shown(now.lending_grace_s) />
            </label>
            <p class="hint">{tr!(queue_admin.notice_hint)}</p>
            <label>{tr!(queue_admin.notice_signal)}
                <select name="notice_signal" node_ref=signal prop:value=now.notice_signal.as_str()>{signals}</select>
            </label>
            <label>{tr!(queue_admin.notice_lead)}
                <input name="notice_lead" node_ref=lead required value=shown(now.notice_lead_s) />
            </label>
            <label>{tr!(queue_admin.notice_max)}
                <input name="notice_max" node_ref=most required value=shown(now.notice_max_s) />
            </label>
            <label>{tr!(queue_admin.max_requeues)}
                <input name="max_requeues" node_ref=requeues required inputmode="numeric" value=now.max_requeues.to_string() />
            </label>
            <button type="submit">{tr!(queue_admin.save)}</button>
            {save.error_view_with(finding)}
            {move || save.succeeded().then(|| view! { <p class="notice" role="status">{tr!(queue_admin.saved)}</p> })}
        </form>
    }
    .into_any()
}

/// Shares as people write them: `vision = 2, nlp = 1`.
fn parse_shares(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for part in text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let parsed = part
            .split_once('=')
            .and_then(|(name, share)| Some((name.trim(), share.trim().parse::<f64>().ok()?)))
            .filter(|(name, share)| !name.is_empty() && share.is_finite() && *share > 0.0);
        match parsed {
            Some((name, share)) => {
                out.insert(name.to_string(), share);
            }
            None => return Err(tr!(queue_admin.bad_share, part = part.to_string())),
        }
    }
    Ok(out)
}

fn written(shares: &BTreeMap<String, f64>) -> String {
    shares
        .iter()
        .map(|(name, share)| format!("{name} = {share}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[component]
fn SharesForm(now: Shares, save_shares: Write<Shares, Shares>) -> impl IntoView {
    let (groups, users) = (NodeRef::new(), NodeRef::new());
    let finding = RwSignal::new(None::<String>);
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let read = || -> Result<Shares, String> {
            Ok(Shares {
                groups: parse_shares(&field(groups))?,
                users: parse_shares(&field(users))?,
            })
        };
        match read() {
            Ok(shares) => {
                finding.set(None);
                save_shares.run(shares);
            }
            Err(message) => finding.set(Some(message)),
        }
    };
    view! {
        <form class="stack" on:submit=send>
            <label>{tr!(queue_admin.group_shares)}
                <input name="group_shares" node_ref=groups placeholder="vision = 2, nlp = 1" value=written(&now.groups) />
            </label>
            <label>{tr!(queue_admin.user_shares)}
                <input name="user_shares" node_ref=users placeholder="ada = 1.5" value=written(&now.users) />
            </label>
            <button type="submit">{tr!(queue_admin.save_shares)}</button>
            {save_shares.error_view_with(finding)}
            {move || save_shares.succeeded().then(|| view! { <p class="notice" role="status">{tr!(queue_admin.saved)}</p> })}
        </form>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_read_as_written_and_refuse_what_is_not_a_share() {
        let read = parse_shares("vision = 2, nlp=1\nada = 0.5").unwrap();
        assert_eq!(read.get("vision"), Some(&2.0));
        assert_eq!(read.get("ada"), Some(&0.5));
        assert_eq!(written(&read), "ada = 0.5, nlp = 1, vision = 2");
        assert!(parse_shares("").unwrap().is_empty());
        for bad in ["vision", "vision = two", "= 2", "nlp = -1", "x = 0"] {
            assert!(parse_shares(bad).is_err(), "{bad}");
        }
    }
}
