//! The login page. A plain HTML form posted to `/auth/login`, so logging in works before (and
//! without) the wasm bundle; errors come back as a query parameter.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

/// The message for an `error` code the login handler sends back.
pub fn error_message(code: &str, retry_secs: Option<&str>) -> String {
    match code {
        "invalid" => "Wrong username or password.".into(),
        "locked" => {
            let minutes = retry_secs
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(15, |s| s.div_ceil(60));
            format!("Too many failed logins. Try again in {minutes} min.")
        }
        _ => "The login could not be read; please try again.".into(),
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
            .map(|_| "Your password was changed. Log in with the new one.")
    };
    view! {
        <main class="login-page">
            <form class="login-form" method="post" action="/auth/login">
                <h1>"Lanes"</h1>
                <p class="subtitle">"Log in to see and book the GPUs."</p>
                <input type="hidden" name="next" value=next />
                <label>
                    "Username"
                    <input
                        name="username"
                        autocomplete="username"
                        required
                        autofocus
                        value=user
                    />
                </label>
                <label>
                    "Password"
                    <input
                        type="password"
                        name="password"
                        autocomplete="current-password"
                        required
                    />
                </label>
                {move || notice().map(|message| view! { <p class="notice" role="status">{message}</p> })}
                {move || {
                    error().map(|message| view! { <p class="form-error" role="alert">{message}</p> })
                }}
                <button type="submit">"Log in"</button>
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
