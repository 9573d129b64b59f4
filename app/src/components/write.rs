//! A change a page asks of the API, as a Leptos action: the page runs it, shows its error
//! beside the form, and every list that shows what it changes follows it
//! ([`Remote::follows`](super::remote::Remote::follows)), so a list reloads because a write
//! succeeded, never because a callback remembered to reload it (the pattern of leptos'
//! `todo_app_sqlite_axum`, with the REST API in place of server functions).

use leptos::prelude::*;
use std::future::Future;

/// A write: what it sends (`I`), what it answers (`O`), its latest error, and how many times it
/// succeeded.
pub struct Write<I: Send + Sync + 'static, O: Send + Sync + 'static> {
    action: Action<I, Result<O, String>>,
    done: RwSignal<usize>,
    /// What the latest answer was for.
    answered: RwSignal<Option<I>>,
}

impl<I: Send + Sync + 'static, O: Send + Sync + 'static> Clone for Write<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I: Send + Sync + 'static, O: Send + Sync + 'static> Copy for Write<I, O> {}

impl<I: Clone + Send + Sync + 'static, O: Send + Sync + 'static> Write<I, O> {
    /// A write that asks `call(input)` of the API (a `rest::call`).
    pub fn new<F, Fu>(call: F) -> Self
    where
        F: Fn(&I) -> Fu + 'static,
        Fu: Future<Output = Result<O, String>> + 'static,
    {
        let done = RwSignal::new(0usize);
        let answered = RwSignal::new(None::<I>);
        let action = Action::new_unsync(move |input: &I| {
            let (answer, input) = (call(input), input.clone());
            async move {
                let answer = answer.await;
                answered.set(Some(input));
                if answer.is_ok() {
                    done.update(|n| *n += 1);
                }
                answer
            }
        });
        Self {
            action,
            done,
            answered,
        }
    }

    /// The latest answer's error, if the latest answer was one and was for `input` (a row's
    /// button shows only its own).
    pub fn error_of(&self, input: &I) -> Option<String>
    where
        I: PartialEq,
    {
        self.error_for(|answered| answered == input)
    }

    /// The latest answer's error, if the latest answer was one and its input is `mine`.
    pub fn error_for(&self, mine: impl Fn(&I) -> bool) -> Option<String> {
        let mine = self
            .answered
            .with(|answered| answered.as_ref().is_some_and(mine));
        mine.then(|| self.error()).flatten()
    }
}

impl<I: Send + Sync + 'static, O: Send + Sync + 'static> Write<I, O> {
    /// Asks for the change.
    pub fn run(&self, input: I) {
        self.action.dispatch(input);
    }

    /// How many times it succeeded: what follows it reloads when this changes.
    fn done(&self) -> usize {
        self.done.get()
    }

    /// Does `react` each time it succeeds (in the browser, after the answer is in).
    pub fn on_success(self, react: impl Fn() + 'static) {
        Effect::new(move |seen: Option<usize>| {
            let done = self.done();
            if seen.is_some_and(|seen| seen != done) {
                react();
            }
            done
        });
    }

    /// The latest answer's error, if the latest answer was one.
    pub fn error(&self) -> Option<String> {
        self.action
            .value()
            .with(|answer| answer.as_ref().and_then(|a| a.as_ref().err().cloned()))
    }

    /// Whether the latest answer was a success.
    pub fn succeeded(&self) -> bool {
        self.action
            .value()
            .with(|answer| matches!(answer, Some(Ok(_))))
    }

    /// The latest answer, if it was a success.
    pub fn answer(&self) -> Option<O>
    where
        O: Clone,
    {
        self.action
            .value()
            .with(|answer| answer.as_ref().and_then(|a| a.as_ref().ok().cloned()))
    }

    /// Forgets the latest answer (its error, or its success line).
    pub fn clear(&self) {
        self.action.clear();
    }

    /// Shows the latest error, where a form shows its errors.
    pub fn error_view(self) -> impl IntoView {
        move || {
            self.error()
                .map(|m| view! { <p class="form-error" role="alert">{m}</p> })
        }
    }

    /// Shows what the form itself found wrong (`finding`, set before it asks anything), else
    /// the latest error of the write, in one place.
    pub fn error_view_with(self, finding: RwSignal<Option<String>>) -> impl IntoView {
        move || {
            finding
                .get()
                .or_else(|| self.error())
                .map(|m| view! { <p class="form-error" role="alert">{m}</p> })
        }
    }
}
