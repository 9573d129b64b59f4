//! The fleet's cards as a page loads them once, to name cards that the API gives by
//! `(node, uuid)` alone ("GPU 3 · node-a"), the way the dashboard and the calendar do.

use super::remote::Remote;
use lanes_types::api::{self, Endpoint};
use lanes_types::booking::GpuRef;
use lanes_types::{CardIndex, GpuState};
use leptos::prelude::*;

/// The index of the page's cards, built once per answer of `/api/v1/gpus`.
#[derive(Clone, Copy)]
pub struct Cards(Memo<CardIndex>);

impl Cards {
    /// Loads the cards for this page and its components (found again with [`Cards::get`]).
    pub fn provide() -> Self {
        let gpus = Remote::<Vec<GpuState>>::new(api::Gpus::PATH);
        let index = Memo::new(move |_| {
            gpus.with(|data| match data {
                Some(Ok(list)) => CardIndex::of_gpus(list.iter().map(|g| &g.info)),
                _ => CardIndex::default(),
            })
        });
        let cards = Cards(index);
        provide_context(cards);
        cards
    }

    pub fn get() -> Option<Self> {
        use_context::<Cards>()
    }

    /// "GPU 0 · node-a, GPU 1 · node-a", node then index (reactive: names fill in once the
    /// cards are loaded).
    pub fn names(&self, refs: &[GpuRef]) -> String {
        self.0.with(|index| index.names(refs).join(", "))
    }
}
