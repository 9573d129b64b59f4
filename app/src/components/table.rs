//! The header row of a list table, so every table spells its columns the same way.

use leptos::prelude::*;

/// A column of a list table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    /// Text, left-aligned.
    Text(&'static str),
    /// A number, right-aligned.
    Num(&'static str),
    /// No title (a column of buttons).
    Blank,
}

/// `<thead>` with one `<th>` per column.
#[component]
pub fn ListHead(#[prop(into)] cols: Vec<Col>) -> impl IntoView {
    let cells = cols
        .into_iter()
        .map(|col| match col {
            Col::Text(title) => view! { <th>{title}</th> }.into_any(),
            Col::Num(title) => view! { <th class="num">{title}</th> }.into_any(),
            Col::Blank => view! { <th></th> }.into_any(),
        })
        .collect_view();
    view! {
        <thead>
            <tr>{cells}</tr>
        </thead>
    }
}
