//! `/account`: every user's own page: who they are, what they are told of (notifications),
//! changing their password, and their API tokens for scripts and the CLI.

use crate::components::format::date_time;
use crate::components::remote::{checked, field, render_remote, Remote};
use crate::components::table::{Col, ListHead};
use crate::components::topbar::{current_viewer, TopBar};
use crate::rest::{self, Method};
use lanes_types::account::{ApiToken, CreatedToken, NewToken, PasswordChange, User};
use leptos::prelude::*;
use leptos::task::spawn_local;

#[component]
pub fn AccountPage() -> impl IntoView {
    view! {
        <TopBar />
        <main class="page narrow">
            <h2>"Your account"</h2>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move { current_viewer().await.map(|user| view! { <Profile user /> }) })}
            </Suspense>
            <crate::pages::notifications::MyNotifications />
            <PasswordForm />
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
                <dt>"Username"</dt>
                <dd>{user.username}</dd>
                <dt>"Role"</dt>
                <dd>{user.role.to_string()}</dd>
                <dt>"Jobs run as"</dt>
                <dd>{user.unix_user.unwrap_or_else(|| "(no Unix account yet: ask an admin)".into())}</dd>
                <dt>"Email"</dt>
                <dd>{user.email.unwrap_or_else(|| "—".into())}</dd>
            </dl>
        </section>
    }
    .into_any()
}

#[component]
fn PasswordForm() -> impl IntoView {
    let current = NodeRef::new();
    let new = NodeRef::new();
    let again = NodeRef::new();
    let revoke = NodeRef::new();
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let change = PasswordChange {
            current_password: field(current),
            new_password: field(new),
            keep_tokens: !checked(revoke),
        };
        if change.new_password != field(again) {
            error.set(Some("The two new passwords differ.".into()));
            return;
        }
        spawn_local(async move {
            match rest::send_empty(Method::Post, "/api/v1/me/password", Some(&change)).await {
                // Every session ended, this one too: log in again with the new password.
                Ok(()) => {
                    let _ = window().location().set_href("/login?notice=password");
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <section class="panel">
            <h3>"Change password"</h3>
            <form class="stack" on:submit=submit>
                <label>
                    "Current password"
                    <input type="password" name="current_password" autocomplete="current-password" required node_ref=current />
                </label>
                <label>
                    "New password (at least 10 characters)"
                    <input type="password" name="new_password" autocomplete="new-password" minlength="10" required node_ref=new />
                </label>
                <label>
                    "New password again"
                    <input type="password" name="new_password_again" autocomplete="new-password" required node_ref=again />
                </label>
                <label class="check">
                    <input type="checkbox" name="revoke_tokens" checked node_ref=revoke />
                    "Also revoke my API tokens (whoever knew the old password may have made one)"
                </label>
                {move || error.get().map(|m| view! { <p class="form-error" role="alert">{m}</p> })}
                <p class="muted">"Changing it logs you out everywhere, here included."</p>
                <button type="submit">"Change password"</button>
            </form>
        </section>
    }
    .into_any()
}

#[component]
fn Tokens() -> impl IntoView {
    let tokens = Remote::<Vec<ApiToken>>::new("/api/v1/tokens");
    let name = NodeRef::new();
    let error = RwSignal::new(None::<String>);
    let created = RwSignal::new(None::<CreatedToken>);
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = NewToken { name: field(name) };
        spawn_local(async move {
            match rest::send::<_, CreatedToken>(Method::Post, "/api/v1/tokens", &request).await {
                Ok(token) => {
                    error.set(None);
                    created.set(Some(token));
                    if let Some(input) = name.get_untracked() {
                        input.set_value("");
                    }
                    tokens.reload();
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let revoke = move |id: i64| {
        spawn_local(async move {
            let url = format!("/api/v1/tokens/{id}");
            match rest::send_empty::<()>(Method::Delete, &url, None).await {
                Ok(()) => tokens.reload(),
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <section class="panel">
            <h3>"API tokens"</h3>
            <p class="muted">
                "For scripts and the " <code>"lanes"</code> " command line: send "
                <code>"Authorization: Bearer <token>"</code>
                ". A token can do everything you can; revoke one you no longer use."
            </p>
            {move || {
                created
                    .get()
                    .map(|token| {
                        view! {
                            <div class="notice" role="status">
                                <p>
                                    "Token " <strong>{token.token.name}</strong>
                                    " created. Copy it now: it is not shown again."
                                </p>
                                <code class="secret" data-testid="token-secret">{token.secret}</code>
                            </div>
                        }
                    })
            }}
            <form class="inline" on:submit=create>
                <input name="token_name" placeholder="What it is for, e.g. laptop CLI" maxlength="256" required node_ref=name />
                <button type="submit">"Create token"</button>
            </form>
            {move || error.get().map(|m| view! { <p class="form-error" role="alert">{m}</p> })}
            {render_remote(tokens, "tokens", move |list: &Vec<ApiToken>| {
                if list.is_empty() {
                    return view! { <p class="muted">"No tokens."</p> }.into_any();
                }
                let rows = list
                    .iter()
                    .map(|token| {
                        let id = token.id;
                        view! {
                            <tr>
                                <td>{token.name.clone()}</td>
                                <td>{date_time(token.created_at)}</td>
                                <td>{token.last_used_at.map_or("never".into(), date_time)}</td>
                                <td class="actions">
                                    <button class="danger" on:click=move |_| revoke(id)>"Revoke"</button>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="list">
                        <ListHead cols=&[Col::Text("Name"), Col::Text("Created"), Col::Text("Last used"), Col::Blank] />
                        <tbody>{rows}</tbody>
                    </table>
                }
                    .into_any()
            })}
        </section>
    }
    .into_any()
}
