//! The quota part of `/admin`: edit the default, group and user limits, and see each user's
//! and group's current use against them.

use crate::components::remote::{render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::write::Write;
use crate::rest;
use lanes_types::api::{self, Endpoint};
use lanes_types::booking::{Quota, QuotaUse, Quotas};
use leptos::prelude::*;

/// A quota's limits, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    MaxGpus,
    GpuHoursPerWeek,
    MaxBookingHours,
    MaxDaysAhead,
    MaxUpcoming,
}

impl Field {
    pub const ALL: [Field; 5] = [
        Field::MaxGpus,
        Field::GpuHoursPerWeek,
        Field::MaxBookingHours,
        Field::MaxDaysAhead,
        Field::MaxUpcoming,
    ];

    /// Its name in the API (and in the editor's input names).
    pub fn key(self) -> &'static str {
        match self {
            Field::MaxGpus => "max_gpus",
            Field::GpuHoursPerWeek => "gpu_hours_per_week",
            Field::MaxBookingHours => "max_booking_hours",
            Field::MaxDaysAhead => "max_days_ahead",
            Field::MaxUpcoming => "max_upcoming",
        }
    }

    /// Its column title.
    pub fn title(self) -> &'static str {
        match self {
            Field::MaxGpus => tr!(quota_field.max_gpus),
            Field::GpuHoursPerWeek => tr!(quota_field.gpu_hours_per_week),
            Field::MaxBookingHours => tr!(quota_field.max_booking_hours),
            Field::MaxDaysAhead => tr!(quota_field.max_days_ahead),
            Field::MaxUpcoming => tr!(quota_field.max_upcoming),
        }
    }
}

/// Whom a quota row limits: everyone (the default), a group's members together, or one user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Default,
    Group,
    User,
}

impl Scope {
    /// Its name in the editor's form values.
    pub fn slug(self) -> &'static str {
        match self {
            Scope::Default => "default",
            Scope::Group => "group",
            Scope::User => "user",
        }
    }

    /// "user" or "group", in the page's language.
    fn name(self) -> &'static str {
        match self {
            Scope::Group => tr!(quotas.scope_group),
            Scope::User | Scope::Default => tr!(quotas.scope_user),
        }
    }
}

/// One editable line: a scope, its name, and each limit as typed (empty: no limit here).
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaRow {
    pub scope: Scope,
    pub name: String,
    pub fields: [String; 5],
}

fn text<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn row(scope: Scope, name: &str, q: &Quota) -> QuotaRow {
    QuotaRow {
        scope,
        name: name.into(),
        fields: [
            text(q.max_gpus),
            text(q.gpu_hours_per_week),
            text(q.max_booking_hours),
            text(q.max_days_ahead),
            text(q.max_upcoming),
        ],
    }
}

pub fn quota_rows(quotas: &Quotas) -> Vec<QuotaRow> {
    let mut rows = vec![row(Scope::Default, "", &quotas.default)];
    rows.extend(quotas.groups.iter().map(|(g, q)| row(Scope::Group, g, q)));
    rows.extend(quotas.users.iter().map(|(u, q)| row(Scope::User, u, q)));
    rows
}

/// The quotas the rows say, or which field could not be read.
pub fn rows_to_quotas(rows: &[QuotaRow]) -> Result<Quotas, String> {
    let mut quotas = Quotas::default();
    for r in rows {
        let who = match r.scope {
            Scope::Default => tr!(quotas.the_default).to_string(),
            scope => tr!(quotas.who, scope = scope.name(), name = r.name.clone()),
        };
        let whole = |i: usize| -> Result<Option<u32>, String> {
            let t = r.fields[i].trim();
            if t.is_empty() {
                return Ok(None);
            }
            t.parse().map(Some).map_err(|_| {
                tr!(
                    quotas.whole,
                    who = who.clone(),
                    field = Field::ALL[i].title()
                )
            })
        };
        let real = |i: usize| -> Result<Option<f64>, String> {
            let t = r.fields[i].trim();
            if t.is_empty() {
                return Ok(None);
            }
            match t.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                _ => Err(tr!(
                    quotas.real,
                    who = who.clone(),
                    field = Field::ALL[i].title()
                )),
            }
        };
        let quota = Quota {
            max_gpus: whole(0)?,
            gpu_hours_per_week: real(1)?,
            max_booking_hours: real(2)?,
            max_days_ahead: real(3)?,
            max_upcoming: whole(4)?,
        };
        let name = r.name.trim().to_string();
        match r.scope {
            Scope::Default => quotas.default = quota,
            scope if name.is_empty() => return Err(tr!(quotas.needs_name, scope = scope.name())),
            Scope::Group => {
                quotas.groups.insert(name, quota);
            }
            Scope::User => {
                quotas.users.insert(name, quota);
            }
        }
    }
    Ok(quotas)
}

fn of(used: String, limit: Option<String>) -> String {
    match limit {
        Some(limit) => format!("{used} / {limit}"),
        None => used,
    }
}

/// What the quota panel reads: the quotas, and each user's and group's use of them.
/// A quota holder's kind, in the viewer's words.
fn holder(kind: lanes_types::booking::QuotaHolder) -> &'static str {
    match kind {
        lanes_types::booking::QuotaHolder::User => tr!(quotas.user),
        lanes_types::booking::QuotaHolder::Group => tr!(quotas.group),
    }
}

pub const QUOTAS: &str = api::QuotasNow::PATH;
pub const QUOTA_USE: &str = api::QuotaUses::PATH;

#[component]
pub fn QuotaPanel() -> impl IntoView {
    let save_quotas = Write::new(|quotas: &Quotas| {
        let quotas = quotas.clone();
        async move { rest::call::<api::SaveQuotas>((), &quotas).await }
    });
    let quotas = Remote::<Quotas>::new(QUOTAS).follows(save_quotas);
    let uses = Remote::<Vec<QuotaUse>>::new(QUOTA_USE).follows(save_quotas);
    // The editor's rows: `None` until edited, showing the saved quotas.
    let edited = RwSignal::new(None::<Vec<QuotaRow>>);
    let rows = move || {
        edited
            .get()
            .unwrap_or_else(|| quotas.ok().map(|q| quota_rows(&q)).unwrap_or_default())
    };
    let edit = move |change: &mut dyn FnMut(&mut Vec<QuotaRow>)| {
        let mut list = edited.get_untracked().unwrap_or_else(|| {
            untrack(|| quotas.ok())
                .map(|q| quota_rows(&q))
                .unwrap_or_default()
        });
        change(&mut list);
        edited.set(Some(list));
    };
    // What the editor itself finds wrong; the server's refusal is the write's.
    let error = RwSignal::new(None::<String>);
    let new_scope = RwSignal::new(Scope::User);
    let new_name = RwSignal::new(String::new());
    // Once saved, the editor shows the saved quotas again.
    save_quotas.on_success(move || edited.set(None));
    let save = move |_| match rows_to_quotas(&untrack(rows)) {
        Ok(wanted) => {
            error.set(None);
            save_quotas.run(wanted);
        }
        Err(message) => {
            save_quotas.clear();
            error.set(Some(message));
        }
    };
    let add = move |_| {
        let name = new_name.get_untracked().trim().to_string();
        if name.is_empty() {
            return;
        }
        edit(&mut |r| {
            r.push(QuotaRow {
                scope: new_scope.get_untracked(),
                name: name.clone(),
                fields: Default::default(),
            })
        });
        new_name.set(String::new());
    };
    let editor = move || {
        rows()
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let inputs = (0..5)
                    .map(|j| {
                        view! {
                            <td>
                                <input
                                    class="num"
                                    name=format!("{}-{}-{}", r.scope.slug(), r.name, Field::ALL[j].key())
                                    placeholder="—"
                                    value=r.fields[j].clone()
                                    on:change=move |ev| {
                                        let value = event_target_value(&ev);
                                        edit(&mut |rows| if let Some(row) = rows.get_mut(i) {
                                            row.fields[j] = value.clone();
                                        });
                                    }
                                />
                            </td>
                        }
                    })
                    .collect_view();
                let label = match r.scope {
                    Scope::Default => tr!(quotas.default_everyone).to_string(),
                    scope => tr!(quotas.who, scope = scope.name(), name = r.name.clone()),
                };
                let removable = r.scope != Scope::Default;
                view! {
                    <tr>
                        <td class="nowrap">{label}</td>
                        {inputs}
                        <td class="actions">
                            <Show when=move || removable>
                                <button on:click=move |_| edit(&mut |rows| { rows.remove(i); })>{tr!(quotas.remove)}</button>
                            </Show>
                        </td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <section class="panel" data-testid="quotas">
            <h3>{tr!(quotas.quotas)}</h3>
            <p class="muted">
                {tr!(quotas.empty_means_no_limit_at_that)}
            </p>
            <table class="list quota-editor">
                <thead>
                    <tr>
                        <th>{tr!(quotas.applies_to)}</th>
                        {Field::ALL.iter().map(|field| view! { <th>{field.title()}</th> }).collect_view()}
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    <Suspense fallback=|| ()>{editor}</Suspense>
                </tbody>
            </table>
            <div class="inline">
                <select aria-label=tr!(quotas.for_a_user_or_a_group) on:change=move |ev| {
                    new_scope.set(if event_target_value(&ev) == Scope::Group.slug() { Scope::Group } else { Scope::User })
                }>
                    <option value=Scope::User.slug() selected>{tr!(quotas.user)}</option>
                    <option value=Scope::Group.slug()>{tr!(quotas.group)}</option>
                </select>
                <input
                    placeholder=tr!(quotas.username_or_group_name)
                    prop:value=move || new_name.get()
                    on:input=move |ev| new_name.set(event_target_value(&ev))
                />
                <button on:click=add>{tr!(quotas.add_override)}</button>
                <button type="submit" on:click=save>{tr!(quotas.save_quotas)}</button>
            </div>
            {save_quotas.error_view_with(error)}
            {move || save_quotas.succeeded().then(|| view! { <p class="notice" role="status">{tr!(quotas.saved)}</p> })}
            <h3>{tr!(quotas.use_now)}</h3>
            {render_remote(uses, tr!(quotas.what_use), |list: &Vec<QuotaUse>| {
                let rows = list
                    .iter()
                    .map(|u| {
                        view! {
                            <tr>
                                <td>{format!("{} {}", holder(u.kind), u.name)}</td>
                                <td>{of(u.gpus_now.to_string(), u.limits.max_gpus.map(|v| v.to_string()))}</td>
                                <td>{of(format!("{:.1}", u.gpu_hours_week + 0.0 /* no "-0.0" */), u.limits.gpu_hours_per_week.map(|v| v.to_string()))}</td>
                                <td>{of(u.upcoming.to_string(), u.limits.max_upcoming.map(|v| v.to_string()))}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list">
                        <ListHead cols=vec![Col::Text(tr!(quotas.col_who)), Col::Text(tr!(quotas.col_held)), Col::Text(tr!(quotas.col_week)), Col::Text(tr!(quotas.col_upcoming))] />
                        <tbody>{rows}</tbody>
                    </table>
                }
            })}
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn quotas_survive_the_round_trip_through_the_editor() {
        let quotas = Quotas {
            default: Quota {
                max_gpus: Some(4),
                gpu_hours_per_week: Some(40.5),
                ..Quota::default()
            },
            groups: BTreeMap::from([(
                "vision".into(),
                Quota {
                    max_gpus: Some(8),
                    ..Quota::default()
                },
            )]),
            users: BTreeMap::from([(
                "ada".into(),
                Quota {
                    max_upcoming: Some(3),
                    ..Quota::default()
                },
            )]),
        };
        assert_eq!(rows_to_quotas(&quota_rows(&quotas)), Ok(quotas));
    }

    #[test]
    fn unreadable_limits_are_named() {
        let mut rows = quota_rows(&Quotas::default());
        rows[0].fields[0] = "four".into();
        assert_eq!(
            rows_to_quotas(&rows),
            Err("the default: GPUs at once must be a whole number".into())
        );
        rows[0].fields[0] = String::new();
        rows[0].fields[1] = "-1".into();
        assert!(rows_to_quotas(&rows).unwrap_err().contains("≥ 0"));
    }
}
