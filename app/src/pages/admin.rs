//! `/admin/{section}`: the admins' area in sections: users (create, disable, reset password,
//! role, Unix account, groups), groups, quotas, policy and settings, notifications, unbooked
//! use and the audit log (paged, filtered). Everything goes through the same REST API scripts
//! use, so the page can do nothing the API would not allow. A section opened by its address
//! arrives with its data ([`AdminSection::reads`], [`crate::components::page_data`]).

use super::statements;
use crate::components::format::date_time;
use crate::components::page_data;
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use crate::components::write::Write;
use crate::rest;
use lanes_types::account::{
    AccountSource, AuditRecord, CreateGroup, CreateUser, Group, NewDirectoryAccounts,
    PortalSettings, Role, UserPatch, UserView, MAX_BOOKING_HORIZON_DAYS,
};
use lanes_types::api::{self, Endpoint};
use lanes_types::job::DefaultEnvironment;
use lanes_types::statement::UsageVisibility;
use leptos::prelude::*;

/// The admin area's sections, each at `/admin/{slug}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminSection {
    Users,
    Groups,
    Quotas,
    Policy,
    Queue,
    Notifications,
    Violations,
    Audit,
    Statements,
}

impl AdminSection {
    /// In the side navigation's order; `/admin` alone opens the first.
    pub const ALL: [AdminSection; 9] = [
        AdminSection::Users,
        AdminSection::Groups,
        AdminSection::Quotas,
        AdminSection::Policy,
        AdminSection::Queue,
        AdminSection::Notifications,
        AdminSection::Violations,
        AdminSection::Audit,
        AdminSection::Statements,
    ];

    /// Its path segment.
    pub fn slug(self) -> &'static str {
        match self {
            AdminSection::Users => "users",
            AdminSection::Groups => "groups",
            AdminSection::Quotas => "quotas",
            AdminSection::Policy => "policy",
            AdminSection::Queue => "queue",
            AdminSection::Notifications => "notifications",
            AdminSection::Violations => "violations",
            AdminSection::Audit => "audit",
            AdminSection::Statements => "statements",
        }
    }

    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|section| section.slug() == slug)
    }

    /// Its title in the side navigation.
    fn title(self) -> &'static str {
        match self {
            AdminSection::Users => tr!(admin_section.users),
            AdminSection::Groups => tr!(admin_section.groups),
            AdminSection::Quotas => tr!(admin_section.quotas),
            AdminSection::Policy => tr!(admin_section.policy),
            AdminSection::Queue => tr!(admin_section.queue),
            AdminSection::Notifications => tr!(admin_section.notifications),
            AdminSection::Violations => tr!(admin_section.violations),
            AdminSection::Audit => tr!(admin_section.audit),
            AdminSection::Statements => tr!(admin_section.statements),
        }
    }

    /// What it reads from the API when it opens. The server asks for these before it renders
    /// the section, so that the page arrives whole.
    pub fn reads(self) -> Vec<String> {
        use crate::pages::{enforcement, notifications, quotas};
        match self {
            AdminSection::Users => vec![USERS.into()],
            AdminSection::Groups => vec![GROUPS.into(), USERS.into()],
            AdminSection::Quotas => vec![quotas::QUOTAS.into(), quotas::QUOTA_USE.into()],
            AdminSection::Policy => vec![SETTINGS.into(), enforcement::POLICY.into()],
            AdminSection::Queue => vec![
                crate::pages::queue_admin::SETTINGS.into(),
                crate::pages::queue_admin::SHARES.into(),
            ],
            AdminSection::Notifications => {
                vec![notifications::SETTINGS.into(), notifications::outbox_url()]
            }
            AdminSection::Violations => {
                vec![enforcement::VIOLATIONS.into(), enforcement::GPUS.into()]
            }
            AdminSection::Audit => vec![audit_first_page()],
            AdminSection::Statements => vec![statements::statement_first()],
        }
    }
}

/// What the users, groups and settings panels read.
const USERS: &str = api::Users::PATH;
const GROUPS: &str = api::Groups::PATH;
const SETTINGS: &str = api::Settings::PATH;

/// The audit log's first page, unfiltered.
fn audit_first_page() -> String {
    audit_url("", "", "", "", None)
}

/// The section slug at an admin page's address (`/admin` is the first section's); `None` for
/// any other page. An unknown slug is the page's to refuse.
pub fn section_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/admin")?;
    match rest.trim_end_matches('/') {
        "" => Some(AdminSection::ALL[0].slug()),
        section => section
            .strip_prefix('/')
            .filter(|s| !s.is_empty() && !s.contains('/')),
    }
}

/// `/admin` (the users) and `/admin/{section}`: one section at a time beside a side
/// navigation, each at its own address so that it can be linked and reloaded.
#[component]
pub fn AdminPage() -> impl IntoView {
    let params = leptos_router::hooks::use_params_map();
    let section = move || {
        params.with(|p| {
            p.get("section")
                .unwrap_or_else(|| AdminSection::ALL[0].slug().to_string())
        })
    };
    // Known as the page is drawn, on both sides: nothing here waits, so the section is in
    // the first bytes the server sends (the login gate refuses others before this).
    let admin = page_data::viewer().is_some_and(|u| u.is_admin());
    let body = if admin {
        view! {
            <div class="admin-layout">
                <SideNav section />
                <div class="admin-section" data-section=section>
                    {move || view! { <Section name=section() /> }}
                </div>
            </div>
        }
        .into_any()
    } else {
        view! { <p class="page error">{tr!(admin.only_admins_may_see_this_page)}</p> }.into_any()
    };
    view! {
        <TopBar />
        <main class="page admin">{body}</main>
    }
    .into_any()
}

#[component]
fn SideNav(section: impl Fn() -> String + Send + Sync + Copy + 'static) -> impl IntoView {
    let links = AdminSection::ALL
        .into_iter()
        .map(|each| {
            let current = move || section() == each.slug();
            view! {
                <li>
                    <a
                        href=format!("/admin/{}", each.slug())
                        class:current=current
                        aria-current=move || current().then_some("page")
                    >
                        {each.title()}
                    </a>
                </li>
            }
        })
        .collect_view();
    view! {
        <nav class="side-nav" aria-label=tr!(admin.admin_sections) data-testid="admin-nav">
            <h2>{tr!(admin.admin)}</h2>
            <ul>{links}</ul>
        </nav>
    }
}

#[component]
fn Section(name: String) -> impl IntoView {
    // A change in one section can show in another (a user's groups, the audit log): each
    // section loads its own data when opened, so nothing else needs reloading.
    let Some(section) = AdminSection::from_slug(&name) else {
        return view! {
            <p class="page error" role="alert">{tr!(admin.no_such_section, name = name)}</p>
        }
        .into_any();
    };
    match section {
        AdminSection::Users => view! { <UsersSection /> }.into_any(),
        AdminSection::Groups => view! { <GroupsSection /> }.into_any(),
        AdminSection::Quotas => view! { <crate::pages::quotas::QuotaPanel /> }.into_any(),
        AdminSection::Queue => {
            view! { <crate::pages::queue_admin::QueueAdminSection /> }.into_any()
        }
        AdminSection::Policy => view! {
            <SettingsPanel />
            <crate::pages::enforcement::PolicyPanel />
        }
        .into_any(),
        AdminSection::Notifications => {
            view! { <crate::pages::notifications::NotifyPanel /> }.into_any()
        }
        AdminSection::Violations => {
            view! { <crate::pages::enforcement::ViolationsPanel /> }.into_any()
        }
        AdminSection::Audit => view! { <AuditSection /> }.into_any(),
        AdminSection::Statements => view! { <statements::StatementSection /> }.into_any(),
    }
}

#[component]
fn UsersSection() -> impl IntoView {
    let add_user = Write::new(|request: &CreateUser| {
        let request = request.clone();
        async move { rest::call::<api::AddUser>((), &request).await }
    });
    let update_user = Write::new(|(id, patch): &(i64, UserPatch)| {
        let (id, patch) = (*id, patch.clone());
        async move { rest::call::<api::UpdateUser>(id, &patch).await }
    });
    // Rows are drawn again from the reloaded list, their editors closed.
    let users = Remote::<Vec<UserView>>::new(USERS)
        .follows(add_user)
        .follows(update_user);
    view! {
        <section class="panel">
            <h3>{tr!(admin.users)}</h3>
            <CreateUserForm add_user />
            {render_remote(users, tr!(admin.what_users), move |list: &Vec<UserView>| {
                let rows = list
                    .iter()
                    .cloned()
                    .map(|user| view! { <UserRow user update_user /> })
                    .collect_view();
                view! {
                    <table class="list users" data-testid="users">
                        <ListHead cols=vec![Col::Text(tr!(admin.col_username)), Col::Text(tr!(admin.col_name)), Col::Text(tr!(admin.col_role)), Col::Text(tr!(admin.col_runs_as)), Col::Text(tr!(admin.col_groups)), Col::Text(tr!(admin.col_status)), Col::Blank] />
                        <tbody>{rows}</tbody>
                    </table>
                }
            })}
        </section>
    }
    .into_any()
}

#[component]
fn GroupsSection() -> impl IntoView {
    let add_group = Write::new(|request: &CreateGroup| {
        let request = request.clone();
        async move { rest::call::<api::AddGroup>((), &request).await }
    });
    // Membership is a user's set of groups: adding or removing one member writes theirs.
    let set_groups = Write::new(|(id, groups): &(i64, Vec<String>)| {
        let patch = UserPatch {
            groups: Some(groups.clone()),
            ..Default::default()
        };
        let id = *id;
        async move { rest::call::<api::UpdateUser>(id, &patch).await }
    });
    let groups = Remote::<Vec<Group>>::new(GROUPS)
        .follows(add_group)
        .follows(set_groups);
    let users = Remote::<Vec<UserView>>::new(USERS).follows(set_groups);
    view! {
        <section class="panel">
            <h3>{tr!(admin.groups)}</h3>
            <CreateGroupForm add_group />
            {render_remote(groups, tr!(admin.what_groups), move |list: &Vec<Group>| {
                if list.is_empty() {
                    return view! { <p class="muted">{tr!(admin.no_groups_yet)}</p> }.into_any();
                }
                let everyone = users.ok().unwrap_or_default();
                let rows = list
                    .iter()
                    .map(|g| {
                        let group = g.name.clone();
                        let members = g.members.iter().map(|name| {
                            let member = everyone.iter().find(|u| &u.user.username == name).cloned();
                            let group = group.clone();
                            view! {
                                <span class="member">
                                    {name.clone()}
                                    {member.map(|u| {
                                        let left: Vec<String> = u.groups.iter().filter(|x| **x != group).cloned().collect();
                                        let label = tr!(admin.remove_member, name = u.user.username.clone(), group = group.clone());
                                        view! { <button type="button" class="link" aria-label=label.clone() title=label on:click=move |_| set_groups.run((u.user.id, left.clone()))>"×"</button> }
                                    })}
                                </span>
                            }
                        }).collect_view();
                        let outside: Vec<UserView> = everyone.iter().filter(|u| !g.members.contains(&u.user.username)).cloned().collect();
                        let pick = NodeRef::<leptos::html::Select>::new();
                        let add = {
                            let (group, outside) = (group.clone(), outside.clone());
                            move |ev: leptos::ev::SubmitEvent| {
                                ev.prevent_default();
                                let chosen = pick.get_untracked().map(|s| s.value()).unwrap_or_default();
                                if let Some(u) = outside.iter().find(|u| u.user.username == chosen) {
                                    let mut more = u.groups.clone();
                                    more.push(group.clone());
                                    set_groups.run((u.user.id, more));
                                }
                            }
                        };
                        view! {
                            <tr data-group=group.clone()>
                                <td>{g.name.clone()}</td>
                                <td>{g.description.clone()}</td>
                                <td>
                                    {members}
                                    {(!outside.is_empty()).then(|| view! {
                                        <form class="inline" on:submit=add>
                                            <select node_ref=pick name="member" aria-label=tr!(admin.add_member_to, group = group.clone())>
                                                {outside.iter().map(|u| view! { <option value=u.user.username.clone()>{u.user.username.clone()}</option> }).collect_view()}
                                            </select>
                                            <button type="submit" class="secondary">{tr!(admin.add_member)}</button>
                                        </form>
                                    })}
                                </td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list" data-testid="groups">
                        <ListHead cols=vec![Col::Text(tr!(admin.col_name)), Col::Text(tr!(admin.col_description)), Col::Text(tr!(admin.col_members))] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                    .into_any()
            })}
            {set_groups.error_view()}
        </section>
    }
    .into_any()
}

/// Entries per page of the audit log.
const AUDIT_PAGE: usize = 50;

/// The audit log's query string for a filter and a page (`before`: older than that entry).
pub fn audit_url(actor: &str, action: &str, from: &str, to: &str, before: Option<i64>) -> String {
    let mut parts = vec![format!("limit={AUDIT_PAGE}")];
    let mut add = |key: &str, value: &str| {
        if !value.trim().is_empty() {
            parts.push(format!("{key}={}", encode(value.trim())));
        }
    };
    add("actor", actor);
    add("action", action);
    add("from", from);
    add("to", to);
    if let Some(id) = before {
        parts.push(format!("before={id}"));
    }
    format!("{}?{}", api::Audit::PATH, parts.join("&"))
}

/// Percent-encodes a query value (letters, digits and `-._~` stay).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The audit log, newest first, a page at a time, narrowed by who, what and when.
#[component]
fn AuditSection() -> impl IntoView {
    let (actor, action, from, to) = (
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
    );
    // The pages walked so far: each entry is the `before` cursor of that page.
    let pages = RwSignal::new(vec![None::<i64>]);
    let error = RwSignal::new(None::<String>);
    let url = move || {
        let range = |text: String| {
            if text.is_empty() {
                Ok(String::new())
            } else {
                crate::components::clock::local_input(&text)
                    .map(crate::components::clock::query_time)
                    .ok_or_else(|| tr!(admin.not_a_time, text = text.to_string()))
            }
        };
        let before = pages.with(|p| p.last().copied().flatten());
        match (range(from.get()), range(to.get())) {
            (Ok(f), Ok(t)) => Ok(audit_url(&actor.get(), &action.get(), &f, &t, before)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    };
    let audit = Remote::<Vec<AuditRecord>>::new(audit_first_page());
    let apply = move || match url() {
        Ok(u) => {
            error.set(None);
            audit.load(u);
        }
        Err(e) => error.set(Some(e)),
    };
    let filter = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        pages.set(vec![None]);
        apply();
    };
    let older = move |_| {
        let last = audit.with(|d| {
            d.and_then(|r| r.as_ref().ok())
                .and_then(|l| l.last().map(|e| e.id))
        });
        if let Some(id) = last {
            pages.update(|p| p.push(Some(id)));
            apply();
        }
    };
    let newer = move |_| {
        pages.update(|p| {
            if p.len() > 1 {
                p.pop();
            }
        });
        apply();
    };
    let input = |signal: RwSignal<String>| move |ev| signal.set(event_target_value(&ev));
    view! {
        <section class="panel">
            <h3>{tr!(admin.audit_log)}</h3>
            <p class="muted">{tr!(admin.logins_account_token_booking_and_settings)}</p>
            <form class="inline-form" on:submit=filter data-testid="audit-filter">
                <label>{tr!(admin.who)} <input name="actor" placeholder=tr!(admin.username) prop:value=move || actor.get() on:input=input(actor) /></label>
                <label>{tr!(admin.what)} <input name="action" placeholder="booking.create" prop:value=move || action.get() on:input=input(action) /></label>
                <label>{tr!(admin.from)} <input name="from" type="datetime-local" prop:value=move || from.get() on:input=input(from) /></label>
                <label>{tr!(admin.to)} <input name="to" type="datetime-local" prop:value=move || to.get() on:input=input(to) /></label>
                <button type="submit">{tr!(admin.filter)}</button>
                {move || error.get().map(|e| view! { <span class="form-error" role="alert">{e}</span> })}
            </form>
            {render_remote(audit, tr!(admin.what_audit), |list: &Vec<AuditRecord>| {
                if list.is_empty() {
                    return view! { <p class="muted" data-testid="audit-empty">{tr!(admin.no_entries_match)}</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .map(|a| {
                        view! {
                            <tr data-audit=a.id>
                                <td class="nowrap">{date_time(a.at)}</td>
                                <td>{a.actor.clone().unwrap_or_else(|| "—".into())}</td>
                                <td><code>{a.action.clone()}</code></td>
                                <td>{a.target.clone()}</td>
                                <td lang="en">{crate::components::format::moments_in(&a.detail)}</td>
                                <td>{a.remote_addr.clone().unwrap_or_default()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list" data-testid="audit">
                        <ListHead cols=vec![Col::Text(tr!(admin.col_when)), Col::Text(tr!(admin.col_who)), Col::Text(tr!(admin.col_what)), Col::Text(tr!(admin.col_on)), Col::Text(tr!(admin.col_detail)), Col::Text(tr!(admin.col_from))] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                .into_any()
            })}
            <div class="pager">
                <button type="button" on:click=newer disabled=move || pages.with(|p| p.len() <= 1)>{tr!(admin.newer)}</button>
                <span class="muted" data-testid="audit-page">{move || tr!(admin.page, number = pages.with(Vec::len))}</span>
                <button
                    type="button"
                    on:click=older
                    disabled=move || audit.with(|d| d.and_then(|r| r.as_ref().ok()).is_none_or(|l| l.len() < AUDIT_PAGE))
                >
                    {tr!(admin.older)}
                </button>
            </div>
        </section>
    }
    .into_any()
}

/// Turns the optional text of a form field into `None` when empty.
fn non_empty(text: String) -> Option<String> {
    let text = text.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Group names typed as a comma-separated list.
pub fn parse_groups(text: &str) -> Vec<String> {
    let mut groups: Vec<String> = text
        .split(',')
        .map(|g| g.trim().to_string())
        .filter(|g| !g.is_empty())
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

fn role_of(value: &str) -> Role {
    value.parse().unwrap_or(Role::User)
}

#[component]
fn CreateUserForm(add_user: Write<CreateUser, UserView>) -> impl IntoView {
    let username = NodeRef::new();
    let display_name = NodeRef::new();
    let email = NodeRef::new();
    let unix_user = NodeRef::new();
    let password = NodeRef::new();
    let role = NodeRef::<leptos::html::Select>::new();
    let form = NodeRef::<leptos::html::Form>::new();
    add_user.on_success(move || {
        if let Some(form) = form.get_untracked() {
            form.reset();
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = CreateUser {
            username: field(username).trim().to_string(),
            display_name: non_empty(field(display_name)),
            email: non_empty(field(email)),
            unix_user: non_empty(field(unix_user)),
            role: role_of(&role.get().map(|s| s.value()).unwrap_or_default()),
            password: field(password),
        };
        add_user.run(request);
    };
    view! {
        <details class="create">
            <summary>{tr!(admin.new_user)}</summary>
            <form class="grid-form" on:submit=submit node_ref=form data-testid="create-user">
                <label>{tr!(admin.username_2)} <input name="username" required maxlength="32" node_ref=username /></label>
                <label>{tr!(admin.display_name)} <input name="display_name" maxlength="256" node_ref=display_name /></label>
                <label>{tr!(admin.email)} <input name="email" type="email" maxlength="256" node_ref=email /></label>
                <label>{tr!(admin.unix_account_for_jobs)} <input name="unix_user" maxlength="32" node_ref=unix_user /></label>
                <label>
                    {tr!(admin.role)}
                    <select name="role" node_ref=role>
                        <option value="user" selected>{tr!(admin.user)}</option>
                        <option value="admin">{tr!(admin.admin_2)}</option>
                    </select>
                </label>
                <label>
                    {tr!(admin.initial_password_10_characters)}
                    <input name="password" type="password" autocomplete="new-password" required minlength="10" node_ref=password />
                </label>
                <button type="submit">{tr!(admin.create_user)}</button>
            </form>
            {add_user.error_view()}
            {move || add_user.answer().map(|user| view! { <p class="notice" role="status">{tr!(admin.created, name = user.user.username.clone())}</p> })}
        </details>
    }
    .into_any()
}

#[component]
fn UserRow(user: UserView, update_user: Write<(i64, UserPatch), UserView>) -> impl IntoView {
    let editing = RwSignal::new(false);
    let id = user.user.id;
    let enabled = user.user.enabled;
    let pending = user.user.pending;
    let toggle = move |_| {
        let patch = UserPatch {
            enabled: Some(!enabled),
            ..Default::default()
        };
        update_user.run((id, patch));
    };
    // This row's own refusal (the editor shows its own below the form).
    let error =
        move || update_user.error_for(|(user, patch)| *user == id && patch.enabled.is_some());
    let u = user.user.clone();
    view! {
        <tr class:disabled=!enabled data-username=u.username.clone()>
            <td>
                {u.username.clone()}
                {(u.source != AccountSource::Local).then(|| view! {
                    <span class="tag" data-testid="account-source">{crate::i18n::account_source(u.source)}</span>
                })}
            </td>
            <td>{u.display_name.clone()}</td>
            <td>{crate::i18n::role_name(u.role)}</td>
            <td>
                {u.unix_user.clone().unwrap_or_else(|| "—".into())}
                {(user.unix_account_found == Some(false)).then(|| {
                    let name = u.unix_user.clone().unwrap_or_default();
                    view! { <p class="form-error" data-testid="unix-missing">{tr!(admin.unix_missing, name)}</p> }
                })}
            </td>
            <td>{user.groups.join(", ")}</td>
            <td>
                {if enabled {
                    tr!(admin.enabled)
                } else if pending {
                    tr!(admin.waiting_for_approval)
                } else {
                    tr!(admin.disabled)
                }}
            </td>
            <td class="actions">
                <button on:click=move |_| editing.update(|e| *e = !*e)>{tr!(admin.edit)}</button>
                <button class:danger=enabled on:click=toggle>
                    {if enabled {
                        tr!(admin.disable)
                    } else if pending {
                        tr!(admin.approve)
                    } else {
                        tr!(admin.enable)
                    }}
                </button>
            </td>
        </tr>
        {move || error().map(|m| view! { <tr><td colspan="7"><p class="form-error" role="alert">{m}</p></td></tr> })}
        <Show when=move || editing.get()>
            <tr class="editor">
                <td colspan="7">
                    <UserEditor user=user.clone() update_user />
                </td>
            </tr>
        </Show>
    }
    .into_any()
}

#[component]
fn UserEditor(user: UserView, update_user: Write<(i64, UserPatch), UserView>) -> impl IntoView {
    let display_name = NodeRef::new();
    let email = NodeRef::new();
    let unix_user = NodeRef::new();
    let groups = NodeRef::new();
    let password = NodeRef::new();
    let revoke = NodeRef::new();
    let role = NodeRef::<leptos::html::Select>::new();
    let id = user.user.id;
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let patch = UserPatch {
            display_name: Some(field(display_name)),
            email: Some(field(email).trim().to_string()),
            unix_user: Some(field(unix_user).trim().to_string()),
            role: role.get().map(|s| role_of(&s.value())),
            enabled: None,
            password: non_empty(field(password)),
            groups: Some(parse_groups(&field(groups))),
            keep_tokens: !checked(revoke),
        };
        update_user.run((id, patch));
    };
    let u = user.user;
    let is_admin = u.is_admin();
    view! {
        <form class="grid-form" on:submit=submit>
            <label>{tr!(admin.display_name)} <input name="display_name" value=u.display_name maxlength="256" node_ref=display_name /></label>
            <label>{tr!(admin.email)} <input name="email" type="email" value=u.email.unwrap_or_default() maxlength="256" node_ref=email /></label>
            <label>{tr!(admin.unix_account_for_jobs)} <input name="unix_user" value=u.unix_user.unwrap_or_default() maxlength="32" node_ref=unix_user /></label>
            <label>
                {tr!(admin.role)}
                <select name="role" node_ref=role>
                    <option value="user" selected=!is_admin>{tr!(admin.user)}</option>
                    <option value="admin" selected=is_admin>{tr!(admin.admin_2)}</option>
                </select>
            </label>
            <label>{tr!(admin.groups_comma_separated)} <input name="groups" value=user.groups.join(", ") node_ref=groups /></label>
            <label>
                {tr!(admin.reset_password_leave_empty_to_keep)}
                <input name="password" type="password" autocomplete="new-password" minlength="10" node_ref=password />
            </label>
            <label class="check">
                <input type="checkbox" name="revoke_tokens" checked node_ref=revoke />
                {tr!(admin.a_reset_also_revokes_their_api)}
            </label>
            <button type="submit">{tr!(admin.save)}</button>
        </form>
        {move || update_user.error_for(|(user, patch)| *user == id && patch.enabled.is_none()).map(|m| view! { <p class="form-error" role="alert">{m}</p> })}
    }
    .into_any()
}

#[component]
fn CreateGroupForm(add_group: Write<CreateGroup, Group>) -> impl IntoView {
    let name = NodeRef::new();
    let description = NodeRef::new();
    let form = NodeRef::<leptos::html::Form>::new();
    add_group.on_success(move || {
        if let Some(form) = form.get_untracked() {
            form.reset();
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = CreateGroup {
            name: field(name).trim().to_string(),
            description: field(description),
        };
        add_group.run(request);
    };
    view! {
        <form class="inline" on:submit=submit node_ref=form>
            <input name="group_name" placeholder=tr!(admin.group_name_e_g_vision) required maxlength="32" node_ref=name />
            <input name="group_description" placeholder=tr!(admin.description) maxlength="256" node_ref=description />
            <button type="submit">{tr!(admin.create_group)}</button>
        </form>
        {add_group.error_view()}
    }
    .into_any()
}

#[component]
fn SettingsPanel() -> impl IntoView {
    let save_settings = Write::new(|settings: &PortalSettings| {
        let settings = settings.clone();
        async move { rest::call::<api::SaveSettings>((), &settings).await }
    });
    let settings = Remote::<PortalSettings>::new(SETTINGS).follows(save_settings);
    let anonymous = NodeRef::new();
    let horizon = NodeRef::new();
    let clean = NodeRef::new();
    let price = NodeRef::new();
    let carbon = NodeRef::new();
    let lend = NodeRef::new();
    let approve = NodeRef::new();
    let directory_only = NodeRef::new();
    let admins_sessions = NodeRef::new();
    let gpu_price = NodeRef::new();
    let visibility = NodeRef::<leptos::html::Select>::new();
    let projects = NodeRef::<leptos::html::Textarea>::new();
    let defaults = NodeRef::<leptos::html::Textarea>::new();
    let error = RwSignal::new(None::<String>);
    // One way to save, as every admin panel does: the form's button, then "Saved".
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let Ok(booking_horizon_days) = field(horizon).trim().parse::<u32>() else {
            save_settings.clear();
            error.set(Some(tr!(admin.horizon_whole_days).into()));
            return;
        };
        // An empty box: not set.
        let optional = |node: NodeRef<leptos::html::Input>, what: &'static str| {
            let text = field(node);
            let text = text.trim();
            if text.is_empty() {
                return Ok(None);
            }
            text.parse::<f64>().map(Some).map_err(|_| what.to_string())
        };
        let (energy_price_per_kwh, carbon_g_per_kwh, gpu_hour_price) = match (
            optional(price, tr!(admin.price_not_number)),
            optional(carbon, tr!(admin.carbon_not_number)),
            optional(gpu_price, tr!(admin.price_not_number)),
        ) {
            (Ok(p), Ok(c), Ok(g)) => (p, c, g),
            (Err(m), _, _) | (_, Err(m), _) | (_, _, Err(m)) => {
                save_settings.clear();
                error.set(Some(m));
                return;
            }
        };
        let text = |node: NodeRef<leptos::html::Textarea>| {
            node.get().map(|t| t.value()).unwrap_or_default()
        };
        let (project_list, group_projects) = match (
            statements::parse_projects(&text(projects)),
            statements::parse_group_projects(&text(defaults)),
        ) {
            (Ok(p), Ok(g)) => (p, g),
            (Err(m), _) | (_, Err(m)) => {
                save_settings.clear();
                error.set(Some(m));
                return;
            }
        };
        let wanted = PortalSettings {
            anonymous_dashboard: checked(anonymous),
            booking_horizon_days,
            job_environment: if checked(clean) {
                DefaultEnvironment::Clean
            } else {
                DefaultEnvironment::Login
            },
            energy_price_per_kwh,
            carbon_g_per_kwh,
            lend_idle_by_default: checked(lend),
            new_directory_accounts: if checked(approve) {
                NewDirectoryAccounts::Approve
            } else {
                NewDirectoryAccounts::Create
            },
            members_use_directory: checked(directory_only),
            admins_open_sessions: checked(admins_sessions),
            projects: project_list,
            group_projects,
            gpu_hour_price,
            usage_visibility: match visibility.get().map(|s| s.value()).as_deref() {
                Some("group") => UsageVisibility::Group,
                Some("lab") => UsageVisibility::Lab,
                _ => UsageVisibility::Own,
            },
        };
        error.set(None);
        save_settings.run(wanted);
    };
    view! {
        <section class="panel">
            <h3>{tr!(admin.settings)}</h3>
            {render_remote(settings, tr!(admin.what_settings), move |s: &PortalSettings| {
                view! {
                    <form class="policy" on:submit=save data-testid="portal-settings">
                        <label class="check">
                            <input
                                type="checkbox"
                                name="anonymous_dashboard"
                                checked=s.anonymous_dashboard
                                node_ref=anonymous
                            />
                            {tr!(admin.anyone_may_watch_the_dashboard_without)}
                        </label>
                        <label>
                            {tr!(admin.bookings_may_end_at_most_this)}
                            <input
                                type="number"
                                name="booking_horizon_days"
                                min="1"
                                max=MAX_BOOKING_HORIZON_DAYS
                                value=s.booking_horizon_days.to_string()
                                node_ref=horizon
                            />
                        </label>
                        <label class="check">
                            <input
                                type="checkbox"
                                name="clean_job_environment"
                                checked=s.job_environment == DefaultEnvironment::Clean
                                node_ref=clean
                            />
                            {tr!(admin.jobs_start_in_a_clean_environment)}
                        </label>
                        <label class="check">
                            <input
                                type="checkbox"
                                name="lend_idle_by_default"
                                checked=s.lend_idle_by_default
                                node_ref=lend
                            />
                            {tr!(admin.new_bookings_lend_their_cards_to)}
                        </label>
                        <label class="check">
                            <input
                                type="checkbox"
                                name="approve_directory_accounts"
                                checked=s.new_directory_accounts == NewDirectoryAccounts::Approve
                                node_ref=approve
                            />
                            {tr!(admin.directory_accounts_wait_for_approval)}
                        </label>
                        <label class="check">
                            <input
                                type="checkbox"
                                name="members_use_directory"
                                checked=s.members_use_directory
                                node_ref=directory_only
                            />
                            {tr!(admin.members_sign_in_through_the_directory)}
                        </label>
                        <label class="check">
                            <input
                                type="checkbox"
                                name="admins_open_sessions"
                                checked=s.admins_open_sessions
                                node_ref=admins_sessions
                            />
                            {tr!(admin.admins_open_members_notebooks)}
                        </label>
                        <label>
                            {tr!(admin.energy_price_per_kwh_for_reports)}
                            <input
                                type="number"
                                name="energy_price_per_kwh"
                                min="0"
                                step="any"
                                value=s.energy_price_per_kwh.map(|p| p.to_string()).unwrap_or_default()
                                node_ref=price
                            />
                        </label>
                        <label>
                            {tr!(admin.grid_carbon_intensity_g_co2e_per)}
                            <input
                                type="number"
                                name="carbon_g_per_kwh"
                                min="0"
                                step="any"
                                value=s.carbon_g_per_kwh.map(|c| c.to_string()).unwrap_or_default()
                                node_ref=carbon
                            />
                        </label>
                        <label>
                            {tr!(statements.gpu_hour_price)}
                            <input
                                type="number"
                                name="gpu_hour_price"
                                min="0"
                                step="any"
                                value=s.gpu_hour_price.map(|p| p.to_string()).unwrap_or_default()
                                node_ref=gpu_price
                            />
                        </label>
                        <label>
                            {tr!(statements.members_see)}
                            <select name="usage_visibility" node_ref=visibility>
                                <option value="own" selected=s.usage_visibility == UsageVisibility::Own>{tr!(statements.see_own)}</option>
                                <option value="group" selected=s.usage_visibility == UsageVisibility::Group>{tr!(statements.see_group)}</option>
                                <option value="lab" selected=s.usage_visibility == UsageVisibility::Lab>{tr!(statements.see_lab)}</option>
                            </select>
                        </label>
                        <label>
                            {tr!(statements.projects_label)}
                            <textarea name="projects" rows="4" node_ref=projects
                                placeholder=tr!(statements.projects_placeholder)
                                prop:value=statements::projects_text(&s.projects)></textarea>
                        </label>
                        <label>
                            {tr!(statements.group_projects_label)}
                            <textarea name="group_projects" rows="3" node_ref=defaults
                                placeholder=tr!(statements.group_projects_placeholder)
                                prop:value=statements::group_projects_text(&s.group_projects)></textarea>
                        </label>
                        <button type="submit">{tr!(admin.save_settings)}</button>
                    </form>
                }
            })}
            {move || save_settings.succeeded().then(|| view! { <p class="notice" role="status">{tr!(admin.saved)}</p> })}
            {save_settings.error_view_with(error)}
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_log_arrives_with_the_page_it_would_ask_for_unfiltered() {
        assert_eq!(audit_url("", " ", "", "", None), "/api/v1/audit?limit=50");
        assert_eq!(audit_first_page(), "/api/v1/audit?limit=50");
    }

    #[test]
    fn an_admin_address_names_its_section_and_every_section_says_what_it_reads() {
        assert_eq!(section_of("/admin"), Some("users"));
        assert_eq!(section_of("/admin/"), Some("users"));
        assert_eq!(section_of("/admin/audit"), Some("audit"));
        assert_eq!(section_of("/admin/audit/"), Some("audit"));
        assert_eq!(section_of("/admin/audit/x"), None);
        assert_eq!(section_of("/administrator"), None);
        assert_eq!(section_of("/queue"), None);
        for section in AdminSection::ALL {
            assert_eq!(AdminSection::from_slug(section.slug()), Some(section));
            let reads = section.reads();
            assert!(!reads.is_empty() && reads.iter().all(|u| u.starts_with("/api/v1/")));
        }
        assert_eq!(AdminSection::from_slug("nope"), None);
    }

    #[test]
    fn group_lists_are_trimmed_sorted_and_without_repeats() {
        assert_eq!(parse_groups(" vision, nlp ,,vision"), vec!["nlp", "vision"]);
        assert!(parse_groups("  ").is_empty());
    }
}
