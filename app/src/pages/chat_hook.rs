//! A webhook's fields, on the member's notifications form and the admins' policy form: its URL,
//! the service it is (JSON, Slack, Feishu/Lark, DingTalk, WeCom, Teams, Matrix, ntfy), its
//! secret (a signing secret or an access token, written and never shown again), and "Send a
//! test", which sends the form's values now and shows what the service answered.

use crate::components::remote::{checked, field};
use crate::components::write::Write;
use crate::rest;
use lanes_types::api;
use lanes_types::enforcement::WebhookFormat;
use lanes_types::notify::{ChannelAnswer, ChannelTest};
use leptos::prelude::*;

/// The inputs of one webhook, read when its form is saved.
#[derive(Clone, Copy, Default)]
pub struct HookRefs {
    pub url: NodeRef<leptos::html::Input>,
    pub format: NodeRef<leptos::html::Select>,
    pub secret: NodeRef<leptos::html::Input>,
    pub forget: NodeRef<leptos::html::Input>,
}

impl HookRefs {
    pub fn url(&self) -> Option<String> {
        Some(field(self.url).trim().to_string()).filter(|u| !u.is_empty())
    }

    pub fn format(&self) -> WebhookFormat {
        let value = self.format.get().map(|s| s.value()).unwrap_or_default();
        WebhookFormat::parse(&value).unwrap_or_default()
    }

    /// What a save sends: a new secret, `""` to remove the kept one, none to keep it.
    pub fn secret(&self) -> Option<String> {
        let typed = field(self.secret).trim().to_string();
        match (typed.is_empty(), checked(self.forget)) {
            (false, _) => Some(typed),
            (true, true) => Some(String::new()),
            (true, false) => None,
        }
    }
}

/// Where a test goes: the lab's channel (admins) or the member's own webhook.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Lab,
    Mine,
}

/// The words of a service's answer to a test.
fn said(answer: &ChannelAnswer) -> String {
    let status = answer
        .status
        .map(|s| s.to_string())
        .unwrap_or_else(|| "—".into());
    let body = if answer.answer.trim().is_empty() {
        tr!(chat_hook.no_body).to_string()
    } else {
        answer.answer.clone()
    };
    match (answer.delivered, &answer.problem) {
        (true, _) => tr!(chat_hook.delivered, status, body).to_string(),
        (false, Some(problem)) => {
            tr!(chat_hook.not_delivered, problem = problem.clone()).to_string()
        }
        (false, None) => tr!(chat_hook.not_delivered, problem = body).to_string(),
    }
}

#[component]
pub fn HookFields(
    refs: HookRefs,
    url: Option<String>,
    format: WebhookFormat,
    secret_set: bool,
    whose: Whose,
    /// The URL field's words.
    label: String,
) -> impl IntoView {
    let test = Write::new(move |t: &ChannelTest| {
        let t = t.clone();
        async move {
            match whose {
                Whose::Lab => rest::call::<api::TestLabChannel>((), &t).await,
                Whose::Mine => rest::call::<api::TestMyChannel>((), &t).await,
            }
        }
    });
    let send_test = move |_| {
        test.run(ChannelTest {
            webhook_url: refs.url(),
            webhook_format: Some(refs.format()),
            webhook_secret: refs.secret(),
        });
    };
    let options = WebhookFormat::ALL
        .into_iter()
        .map(|f| {
            let name = match f {
                WebhookFormat::Json => tr!(chat_hook.json_for_programs).to_string(),
                other => other.service().to_string(),
            };
            view! { <option value=f.as_str() selected=f == format>{name}</option> }
        })
        .collect_view();
    let placeholder = if secret_set {
        tr!(chat_hook.secret_kept).to_string()
    } else {
        tr!(chat_hook.secret_none).to_string()
    };
    view! {
        <fieldset class="chat-hook" data-testid="chat-hook">
            <label>
                {label}
                <input node_ref=refs.url name="webhook_url" type="url" maxlength="2000"
                    placeholder="https://open.feishu.cn/open-apis/bot/v2/hook/…"
                    prop:value=url.unwrap_or_default() />
            </label>
            <label>
                {tr!(chat_hook.service)}
                <select node_ref=refs.format name="webhook_format">{options}</select>
            </label>
            <label>
                {tr!(chat_hook.secret)}
                <input node_ref=refs.secret name="webhook_secret" type="password" autocomplete="off"
                    maxlength="500" placeholder=placeholder />
            </label>
            <p class="muted">{tr!(chat_hook.secret_hint)}</p>
            {secret_set.then(|| view! {
                <label class="check">
                    <input node_ref=refs.forget name="webhook_secret_forget" type="checkbox" />
                    {tr!(chat_hook.forget_secret)}
                </label>
            })}
            <span class="inline">
                <button type="button" class="secondary" on:click=send_test>{tr!(chat_hook.send_test)}</button>
            </span>
            {move || match (test.error(), test.answer()) {
                (Some(text), _) => Some(view! { <p class="form-error" role="alert">{text}</p> }.into_any()),
                (None, Some(answer)) => Some(view! {
                    <p class=if answer.delivered { "notice" } else { "form-error" } role="status" data-testid="chat-answer">{said(&answer)}</p>
                }.into_any()),
                (None, None) => None,
            }}
        </fieldset>
    }
    .into_any()
}
