//! The login page. A plain HTML form posted to `/auth/login`, so logging in works before (and
//! without) the wasm bundle; errors come back as a query parameter.

use crate::components::page_data;
use lanes_types::account::SignInMethods;
use lanes_types::api::{self, Endpoint};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

/// The message for an `error` code the login handler sends back.
pub fn error_message(code: &str, retry_secs: Option<&str>) -> String {
    match code {
        "invalid" => tr!(login.wrong_password).into(),
        "pending" => tr!(login.account_pending).into(),
        "use-sso" => tr!(login.use_sso).into(),
        "use-directory" => tr!(login.use_directory).into(),
        "taken" => tr!(login.username_taken).into(),
        "unavailable" => tr!(login.directory_unavailable).into(),
        "sso-cancelled" => tr!(login.sso_cancelled).into(),
        "sso-expired" => tr!(login.sso_expired).into(),
        "refused" => tr!(login.sso_refused).into(),
        "locked" => {
            let minutes = retry_secs
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(15, |s| s.div_ceil(60));
            tr!(login.locked, minutes)
        }
        _ => tr!(login.unreadable).into(),
    }
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_else(|| "/".into());
    let user = move || query.read().get("user").unwrap_or_default();
    let error = move || {
        query.with(|q| {
            q.get("error")
                .map(|code| error_message(&code, q.get("retry").as_deref()))
        })
    };
    let notice = move || {
        query
            .read()
            .get("notice")
            .filter(|n| n == "password")
            .map(|_| tr!(login.password_changed))
    };
    // No admin yet: a first visitor (sent here, or refused) learns how the first one is made.
    let no_admin = move || {
        query.with(|q| {
            q.get("notice").as_deref() == Some("setup")
                || q.get("error").as_deref() == Some("setup")
        })
    };
    // How this portal signs people in, as the page arrived with it.
    let methods = page_data::answer::<SignInMethods>(api::AuthMethods::PATH).unwrap_or_default();
    let sso = methods.oidc.clone().map(|oidc| {
        let href = move || {
            format!(
                "{}?next={}",
                oidc.start,
                lanes_types::query::escape_value(&next())
            )
        };
        view! {
            // Not a page of this app: the router must let the browser go (to the provider).
            <a class="button sso" href=href rel="external" data-testid="sign-in-sso">
                {tr!(login.sign_in_with, name = oidc.name.clone())}
            </a>
            <p class="or">{tr!(login.or_with_a_password)}</p>
        }
    });
    let ldap = methods
        .ldap
        .then(|| view! { <p class="hint">{tr!(login.ldap_hint)}</p> });
    view! {
        <main class="login-page">
            <form class="login-form" method="post" action="/auth/login">
                <h1>{tr!(login.lanes)}</h1>
                <p class="subtitle">{tr!(login.log_in_to_see_and_book)}</p>
                {sso}
                {ldap}
                <input type="hidden" name="next" value=next />
                <label>
                    {tr!(login.username)}
                    <input
                        name="username"
                        autocomplete="username"
                        required
                        autofocus
                        value=user
                    />
                </label>
                <label>
                    {tr!(login.password)}
                    <input
                        type="password"
                        name="password"
                        autocomplete="current-password"
                        required
                    />
                </label>
                {move || notice().map(|message| view! { <p class="notice" role="status">{message}</p> })}
                {move || no_admin().then(|| view! {
                    <div class="notice" role="status" data-testid="no-admin">
                        <p>{tr!(login.no_admin_yet)}</p>
                        <pre><code>"lanes user add --username NAME --admin --unix-user ACCOUNT"</code></pre>
                    </div>
                })}
                {move || {
                    (!no_admin()).then(error).flatten().map(|message| view! { <p class="form-error" role="alert">{message}</p> })
                }}
                <button type="submit">{tr!(login.log_in)}</button>
            </form>
        </main>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockout_messages_round_up_to_whole_minutes() {
        assert_eq!(
            error_message("locked", Some("61")),
            "Too many failed logins. Try again in 2 min."
        );
        assert_eq!(
            error_message("locked", None),
            "Too many failed logins. Try again in 15 min."
        );
        assert_eq!(
            error_message("invalid", None),
            "Wrong username or password."
        );
    }
}
