//! Monthly statements: on `/admin/statements`, the lab's month per project, group and member
//! (GPU-hours booked and used, the idle share, energy, cost and CO2e at the admins' rates, the
//! biggest jobs) with CSV downloads; on `/usage`, a member's own month against their quota and,
//! as far as the admins let members see, their groups' and others'.

use crate::components::format::kwh;
use crate::components::remote::{render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use lanes_types::api::{self, Endpoint};
use lanes_types::report::JobUsage;
use lanes_types::statement::{
    MyUsage, Project, Statement, StatementQuery, StatementRow, NO_PROJECT,
};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// The admins' projects as the settings form writes them: one per line, `name: description`.
pub fn parse_projects(text: &str) -> Result<Vec<Project>, String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, description) = match line.split_once(':') {
            Some((n, d)) => (n.trim(), d.trim()),
            None => (line, ""),
        };
        if let Some(problem) = Project::name_problem(name) {
            return Err(problem);
        }
        out.push(Project {
            name: name.to_string(),
            description: description.to_string(),
        });
    }
    Ok(out)
}

pub fn projects_text(projects: &[Project]) -> String {
    projects
        .iter()
        .map(|p| match p.description.is_empty() {
            true => p.name.clone(),
            false => format!("{}: {}", p.name, p.description),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each group's default project, one per line: `group = project`.
pub fn parse_group_projects(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((group, project)) = line.split_once('=') else {
            return Err(tr!(statements.group_line_wrong, line = line.to_string()).to_string());
        };
        out.insert(group.trim().to_string(), project.trim().to_string());
    }
    Ok(out)
}

pub fn group_projects_text(defaults: &BTreeMap<String, String>) -> String {
    defaults
        .iter()
        .map(|(g, p)| format!("{g} = {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn hours(h: f64) -> String {
    format!("{h:.1}")
}

fn money(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into())
}

fn share(x: Option<f64>) -> String {
    x.map(|x| format!("{:.0} %", x * 100.0))
        .unwrap_or_else(|| "—".into())
}

/// A table of statement rows under its caption.
fn rows_table(
    caption: &'static str,
    first: &'static str,
    rows: Vec<StatementRow>,
    testid: &'static str,
) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| {
            view! {
                <tr>
                    <td>{if r.name == NO_PROJECT { tr!(statements.no_project).to_string() } else { r.name }}</td>
                    <td class="num">{hours(r.gpu_hours_booked)}</td>
                    <td class="num">{hours(r.gpu_hours_used)}</td>
                    <td class="num">{share(r.idle_share)}</td>
                    <td class="num">{kwh(r.energy_kwh)}</td>
                    <td class="num">{money(r.cost)}</td>
                    <td class="num">{r.co2e_kg.map(|c| format!("{c:.1}")).unwrap_or_else(|| "—".into())}</td>
                    <td class="num">{r.jobs}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="list" data-testid=testid>
            <caption>{caption}</caption>
            <ListHead cols=vec![
                Col::Text(first),
                Col::Num(tr!(statements.col_booked)),
                Col::Num(tr!(statements.col_used)),
                Col::Num(tr!(statements.col_idle)),
                Col::Num(tr!(statements.col_energy)),
                Col::Num(tr!(statements.col_cost)),
                Col::Num(tr!(statements.col_co2e)),
                Col::Num(tr!(statements.col_jobs)),
            ] />
            <tbody>{body}</tbody>
        </table>
    }
}

fn jobs_table(jobs: Vec<JobUsage>) -> impl IntoView {
    let body = jobs
        .into_iter()
        .map(|j| {
            view! {
                <tr>
                    <td>{format!("#{}", j.job_id)}</td>
                    <td>{j.username}</td>
                    <td class="num">{hours(j.gpu_hours_used)}</td>
                    <td class="num">{kwh(j.energy_kwh)}</td>
                    <td class="num">{money(j.cost)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="list" data-testid="statement-jobs">
            <caption>{tr!(statements.top_jobs)}</caption>
            <ListHead cols=vec![
                Col::Text(tr!(statements.col_job)),
                Col::Text(tr!(statements.col_member)),
                Col::Num(tr!(statements.col_used)),
                Col::Num(tr!(statements.col_energy)),
                Col::Num(tr!(statements.col_cost)),
            ] />
            <tbody>{body}</tbody>
        </table>
    }
}

fn statement_url(month: &str) -> String {
    let query = StatementQuery {
        month: (!month.is_empty()).then(|| month.to_string()),
        ..Default::default()
    };
    api::Statements::url(&(), &query)
}

fn usage_url(month: &str) -> String {
    let query = StatementQuery {
        month: (!month.is_empty()).then(|| month.to_string()),
        ..Default::default()
    };
    api::MyUsageOfMonth::url(&(), &query)
}

/// The month picker: choosing a month loads its figures.
fn month_picker(month: RwSignal<String>, on_pick: impl Fn(String) + 'static) -> impl IntoView {
    view! {
        <label class="inline">
            {tr!(statements.month)}
            <input type="month" name="month" prop:value=move || month.get()
                on:change=move |ev| {
                    let value = event_target_value(&ev);
                    month.set(value.clone());
                    on_pick(value);
                } />
        </label>
    }
}

/// What the admins' statement section reads first: the month in progress.
pub fn statement_first() -> String {
    statement_url("")
}

#[component]
pub fn StatementSection() -> impl IntoView {
    let statement = Remote::<Statement>::new(statement_first());
    let month = RwSignal::new(String::new());
    view! {
        <section class="panel" data-testid="statement">
            <h3>{tr!(statements.statements)}</h3>
            {month_picker(month, move |m| statement.load(statement_url(&m)))}
            {render_remote(statement, tr!(statements.what_statement), move |s: &Statement| {
                let csv = |table: &str| {
                    let query = StatementQuery {
                        month: Some(s.month.clone()),
                        time_zone: Some(s.time_zone.clone()),
                        table: Some(table.to_string()),
                    };
                    api::StatementsCsv::url(&(), &query)
                };
                let downloads = [
                    ("projects", tr!(statements.col_project)),
                    ("groups", tr!(statements.col_group)),
                    ("users", tr!(statements.col_member)),
                    ("jobs", tr!(statements.top_jobs)),
                ]
                .into_iter()
                .map(|(table, words)| view! { <a class="button secondary" href=csv(table) download>{tr!(statements.csv_of, what = words)}</a> })
                .collect_view();
                let total = s.total.clone();
                view! {
                    <p class="muted" data-testid="statement-period">
                        {tr!(statements.period, month = s.month.clone(), zone = s.time_zone.clone())}
                    </p>
                    <p data-testid="statement-total">
                        {tr!(statements.total_line,
                            booked = hours(total.gpu_hours_booked), used = hours(total.gpu_hours_used),
                            idle = share(total.idle_share), energy = kwh(total.energy_kwh), cost = money(total.cost))}
                    </p>
                    {rows_table(tr!(statements.by_project), tr!(statements.col_project), s.projects.clone(), "statement-projects")}
                    {rows_table(tr!(statements.by_group), tr!(statements.col_group), s.groups.clone(), "statement-groups")}
                    {rows_table(tr!(statements.by_member), tr!(statements.col_member), s.users.clone(), "statement-users")}
                    {jobs_table(s.top_jobs.clone())}
                    <p class="inline">{downloads}</p>
                }
            })}
        </section>
    }
    .into_any()
}

/// `/usage`: the member's own month.
#[component]
pub fn UsagePage() -> impl IntoView {
    let usage = Remote::<MyUsage>::new(usage_url(""));
    let month = RwSignal::new(String::new());
    view! {
        <TopBar />
        <main class="page usage">
            <section class="panel" data-testid="my-usage">
                <h2>{tr!(statements.my_usage)}</h2>
                {month_picker(month, move |m| usage.load(usage_url(&m)))}
                {render_remote(usage, tr!(statements.what_usage), move |u: &MyUsage| {
                    let quota = match u.quota.limits.gpu_hours_per_week {
                        Some(limit) => tr!(statements.quota_line, booked = hours(u.quota.gpu_hours_week), limit = hours(limit)).to_string(),
                        None => tr!(statements.no_quota, booked = hours(u.quota.gpu_hours_week)).to_string(),
                    };
                    let me = u.me.clone();
                    let others = match u.visibility {
                        lanes_types::statement::UsageVisibility::Own => tr!(statements.others_hidden).to_string(),
                        lanes_types::statement::UsageVisibility::Group => tr!(statements.others_group).to_string(),
                        lanes_types::statement::UsageVisibility::Lab => tr!(statements.others_lab).to_string(),
                    };
                    view! {
                        <p class="muted" data-testid="usage-period">
                            {tr!(statements.period, month = u.month.clone(), zone = u.time_zone.clone())}
                        </p>
                        <p data-testid="usage-me">
                            {tr!(statements.my_line,
                                booked = hours(me.gpu_hours_booked), used = hours(me.gpu_hours_used),
                                idle = share(me.idle_share), energy = kwh(me.energy_kwh), cost = money(me.cost))}
                        </p>
                        <p data-testid="usage-quota">{quota}</p>
                        <p class="muted">{others}</p>
                        {(!u.groups.is_empty()).then(|| rows_table(tr!(statements.by_group), tr!(statements.col_group), u.groups.clone(), "usage-groups"))}
                        {(!u.users.is_empty()).then(|| rows_table(tr!(statements.by_member), tr!(statements.col_member), u.users.clone(), "usage-users"))}
                        {(!u.top_jobs.is_empty()).then(|| jobs_table(u.top_jobs.clone()))}
                    }
                })}
            </section>
        </main>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_text_of_projects_round_trips_and_bad_lines_are_named() {
        let projects = parse_projects("vision: Vision grant 2027\n\n  nlp  \n").unwrap();
        assert_eq!(projects.len(), 2);
        assert_eq!(projects[0].description, "Vision grant 2027");
        assert_eq!(parse_projects(&projects_text(&projects)).unwrap(), projects);
        assert!(parse_projects("a<b").is_err());
        let defaults = parse_group_projects("cv = vision\nnlp=nlp").unwrap();
        assert_eq!(defaults["cv"], "vision");
        assert_eq!(
            parse_group_projects(&group_projects_text(&defaults)).unwrap(),
            defaults
        );
        assert!(parse_group_projects("cv vision").is_err());
    }
}
