//! `/account`: every user's own page: who they are, what they are told of (notifications),
//! changing their password, and their API tokens for scripts and the CLI.

use crate::components::format::date_time;
use crate::components::page_data::viewer;
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::TopBar;
use crate::components::write::Write;
use crate::rest;
use lanes_types::account::{
    AccountSource, ApiToken, EmailChange, NewToken, PasswordChange, TerminalCode, User,
};
use lanes_types::api::{self, Endpoint};
use leptos::prelude::*;

#[component]
pub fn AccountPage() -> impl IntoView {
    view! {
        <TopBar />
        <main class="page narrow">
            <h2>{tr!(account.your_account)}</h2>
            <p><a href="/usage" data-testid="usage-link">{tr!(statements.nav)}</a></p>
            {viewer().map(|user| view! { <Profile user /> })}
            <crate::pages::notifications::MyNotifications />
            {move || {
                let local = viewer().is_none_or(|u| u.source == AccountSource::Local);
                if local {
                    view! { <PasswordForm /> }.into_any()
                } else {
                    view! {
                        <section class="panel">
                            <h3>{tr!(account.change_password)}</h3>
                            <p class="muted">{tr!(account.password_is_the_directorys)}</p>
                        </section>
                    }
                    .into_any()
                }
            }}
            <TerminalCodePanel />
            <Tokens />
        </main>
    }
    .into_any()
}

#[component]
fn Profile(user: User) -> impl IntoView {
    view! {
        <section class="panel">
            <dl class="facts">
                <dt>{tr!(account.username)}</dt>
                <dd>{user.username}</dd>
                <dt>{tr!(account.role)}</dt>
                <dd>{crate::i18n::role_name(user.role)}</dd>
                <dt>{tr!(account.jobs_run_as)}</dt>
                <dd>{user.unix_user.unwrap_or_else(|| tr!(account.no_unix_account).into())}</dd>
                <dt>{tr!(account.email)}</dt>
                <dd>{user.email.clone().unwrap_or_else(|| "—".into())}</dd>
            </dl>
            <EmailForm current=user.email />
        </section>
    }
    .into_any()
}

/// A member's own address: a new one waits for the link sent to it; an empty one removes it.
#[component]
fn EmailForm(current: Option<String>) -> impl IntoView {
    let change_email = Write::new(|change: &EmailChange| {
        let change = change.clone();
        async move { rest::call::<api::ChangeEmail>((), &change).await }
    });
    let address = NodeRef::new();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        change_email.run(EmailChange {
            email: Some(field(address).trim().to_string()),
        });
    };
    let done = move || {
        change_email
            .answer()
            .map(|answer| match answer.confirm_sent_to {
                Some(address) => tr!(account.email_sent, address),
                None if answer.email.is_none() => tr!(account.email_removed).to_string(),
                None => String::new(),
            })
    };
    let open = current.is_none();
    let summary = if current.is_some() {
        tr!(account.change_email)
    } else {
        tr!(account.add_email)
    };
    view! {
        <details class="email-change" open=open>
            <summary>{summary}</summary>
            <form class="stack" on:submit=submit data-testid="email-change">
                <label>
                    {tr!(account.email_new)}
                    <input type="email" name="email" autocomplete="email" value=current.unwrap_or_default() node_ref=address />
                </label>
                <div><button type="submit">{tr!(account.email_send_link)}</button></div>
            </form>
            {move || done().filter(|m| !m.is_empty()).map(|m| view! { <p class="notice" role="status">{m}</p> })}
            {change_email.error_view()}
        </details>
    }
    .into_any()
}

#[component]
fn PasswordForm() -> impl IntoView {
    let current = NodeRef::new();
    let new = NodeRef::new();
    let again = NodeRef::new();
    let revoke = NodeRef::new();
    let change_password = Write::new(|change: &PasswordChange| {
        let change = change.clone();
        async move { rest::call::<api::ChangePassword>((), &change).await }
    });
    // Every session ended, this one too: log in again with the new password.
    change_password.on_success(|| {
        let _ = window().location().set_href("/login?notice=password");
    });
    // What the form itself finds wrong; the server's refusal is the write's.
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let change = PasswordChange {
            current_password: field(current),
            new_password: field(new),
            keep_tokens: !checked(revoke),
        };
        if change.new_password != field(again) {
            change_password.clear();
            error.set(Some(tr!(account.passwords_differ).into()));
            return;
        }
        error.set(None);
        change_password.run(change);
    };
    view! {
        <section class="panel">
            <h3>{tr!(account.change_password)}</h3>
            <form class="stack" on:submit=submit>
                <label>
                    {tr!(account.current_password)}
                    <input type="password" name="current_password" autocomplete="current-password" required node_ref=current />
                </label>
                <label>
                    {tr!(account.new_password_at_least_10_characters)}
                    <input type="password" name="new_password" autocomplete="new-password" minlength="10" required node_ref=new />
                </label>
                <label>
                    {tr!(account.new_password_again)}
                    <input type="password" name="new_password_again" autocomplete="new-password" required node_ref=again />
                </label>
                <label class="check">
                    <input type="checkbox" name="revoke_tokens" checked node_ref=revoke />
                    {tr!(account.also_revoke_my_api_tokens_whoever)}
                </label>
                {change_password.error_view_with(error)}
                <p class="muted">{tr!(account.changing_it_logs_you_out_everywhere)}</p>
                <button type="submit">{tr!(account.change_password)}</button>
            </form>
        </section>
    }
    .into_any()
}

/// A one-time code for `lanes login`: how a member who signs in through the lab's provider
/// signs in on a terminal without typing a password there.
#[component]
fn TerminalCodePanel() -> impl IntoView {
    let make_code = Write::new(|_: &()| rest::call::<api::NewTerminalCode>((), &()));
    view! {
        <section class="panel">
            <h3>{tr!(account.sign_in_on_a_terminal)}</h3>
            <p class="muted">
                {tr!(account.run)} <code>"lanes login"</code> {tr!(account.and_type_this_code_when_asked)}
            </p>
            <button on:click=move |_| make_code.run(()) data-testid="make-terminal-code">
                {tr!(account.show_a_code)}
            </button>
            {move || make_code.answer().map(|code: TerminalCode| view! {
                <p class="notice" role="status">
                    <code class="secret" data-testid="terminal-code">{code.code}</code>
                    " " {tr!(account.valid_until)} " " {date_time(code.expires_at)}
                </p>
            })}
            {make_code.error_view()}
        </section>
    }
    .into_any()
}

#[component]
fn Tokens() -> impl IntoView {
    let create_token = Write::new(|request: &NewToken| {
        let request = request.clone();
        async move { rest::call::<api::CreateToken>((), &request).await }
    });
    let revoke_token = Write::new(|id: &i64| rest::call::<api::RevokeToken>(*id, &()));
    let tokens = Remote::<Vec<ApiToken>>::new(api::Tokens::PATH)
        .follows(create_token)
        .follows(revoke_token);
    let name = NodeRef::<leptos::html::Input>::new();
    create_token.on_success(move || {
        if let Some(input) = name.get_untracked() {
            input.set_value("");
        }
    });
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        revoke_token.clear();
        create_token.run(NewToken { name: field(name) });
    };
    let revoke = move |id: i64| revoke_token.run(id);
    view! {
        <section class="panel">
            <h3>{tr!(account.api_tokens)}</h3>
            <p class="muted">
                {tr!(account.for_scripts_and_the)} <code>"lanes"</code> {tr!(account.command_line_send)}
                <code>"Authorization: Bearer <token>"</code>
                {tr!(account.a_token_can_do_everything_you)}
            </p>
            {move || {
                create_token
                    .answer()
                    .map(|token| {
                        view! {
                            <div class="notice" role="status">
                                <p>
                                    {tr!(account.token)} <strong>{token.token.name}</strong>
                                    {tr!(account.created_copy_it_now_it_is)}
                                </p>
                                <code class="secret" data-testid="token-secret">{token.secret}</code>
                            </div>
                        }
                    })
            }}
            <form class="inline" on:submit=create>
                <input name="token_name" placeholder=tr!(account.what_it_is_for_e_g) maxlength="256" required node_ref=name />
                <button type="submit">{tr!(account.create_token)}</button>
            </form>
            {create_token.error_view()}
            {revoke_token.error_view()}
            {render_remote(tokens, tr!(account.what_tokens), move |list: &Vec<ApiToken>| {
                if list.is_empty() {
                    return view! { <p class="muted">{tr!(account.no_tokens)}</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .map(|token| {
                        let id = token.id;
                        view! {
                            <tr>
                                <td>{token.name.clone()}</td>
                                <td>{date_time(token.created_at)}</td>
                                <td>{token.last_used_at.map_or(tr!(common.never).into(), date_time)}</td>
                                <td class="actions">
                                    <button class="danger" on:click=move |_| revoke(id)>{tr!(account.revoke)}</button>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list">
                        <ListHead cols=vec![Col::Text(tr!(account.col_name)), Col::Text(tr!(account.col_created)), Col::Text(tr!(account.col_last_used)), Col::Blank] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                    .into_any()
            })}
        </section>
    }
    .into_any()
}
