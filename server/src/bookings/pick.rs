//! Choosing cards for an "any N cards" request: all on one node when possible (jobs on one
//! node talk over NVLink, not the network), and the least recently booked first, so wear and
//! luck spread over the fleet.

use super::GpuRef;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// A card free for the whole requested slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeGpu {
    pub gpu: GpuRef,
    /// Its enumeration index on its node, to keep a node's choice in bus order.
    pub index: i64,
    /// When its latest booking ended; `None` if it was never booked.
    pub last_booked: Option<DateTime<Utc>>,
}

/// Picks `count` of the free cards, or `None` if there are not enough.
pub fn pick(free: &[FreeGpu], count: usize) -> Option<Vec<GpuRef>> {
    if count == 0 || free.len() < count {
        return None;
    }
    // Least recently booked first (never booked before anything), then bus order.
    let order = |a: &&FreeGpu, b: &&FreeGpu| {
        (a.last_booked, &a.gpu.node, a.index).cmp(&(b.last_booked, &b.gpu.node, b.index))
    };
    let mut by_node: BTreeMap<&str, Vec<&FreeGpu>> = BTreeMap::new();
    for gpu in free {
        by_node.entry(gpu.gpu.node.as_str()).or_default().push(gpu);
    }
    let best_node = by_node
        .values_mut()
        .filter(|cards| cards.len() >= count)
        .map(|cards| {
            cards.sort_by(order);
            cards.truncate(count);
            cards.clone()
        })
        // The node whose chosen cards rested longest (the latest of their last bookings is the
        // earliest).
        .min_by(|a, b| {
            let latest = |cards: &Vec<&FreeGpu>| cards.iter().map(|c| c.last_booked).max();
            latest(a).cmp(&latest(b))
        });
    let mut chosen = match best_node {
        Some(cards) => cards,
        None => {
            let mut all: Vec<&FreeGpu> = free.iter().collect();
            all.sort_by(order);
            all.truncate(count);
            all
        }
    };
    chosen.sort_by(|a, b| (&a.gpu.node, a.index).cmp(&(&b.gpu.node, b.index)));
    Some(chosen.into_iter().map(|c| c.gpu.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(node: &str, index: i64, last: Option<i64>) -> FreeGpu {
        FreeGpu {
            gpu: GpuRef {
                node: node.into(),
                uuid: format!("GPU-{node}-{index}"),
            },
            index,
            last_booked: last.map(|h| DateTime::from_timestamp(h * 3600, 0).unwrap()),
        }
    }

    fn uuids(picked: Option<Vec<GpuRef>>) -> Vec<String> {
        picked.unwrap().into_iter().map(|g| g.uuid).collect()
    }

    #[test]
    fn cards_come_from_one_node_when_one_has_enough() {
        let free = [
            card("a", 0, None),
            card("b", 0, Some(1)),
            card("b", 1, Some(2)),
            card("c", 3, Some(5)),
        ];
        assert_eq!(uuids(pick(&free, 2)), ["GPU-b-0", "GPU-b-1"]);
    }

    #[test]
    fn the_least_recently_booked_cards_and_node_win() {
        let free = [
            card("a", 0, Some(9)),
            card("a", 1, Some(8)),
            card("a", 2, None),
            card("b", 0, Some(3)),
            card("b", 1, Some(4)),
        ];
        assert_eq!(uuids(pick(&free, 1)), ["GPU-a-2"]);
        // Node b's pair rested longer than any pair of node a.
        assert_eq!(uuids(pick(&free, 2)), ["GPU-b-0", "GPU-b-1"]);
        assert_eq!(uuids(pick(&free, 3)), ["GPU-a-0", "GPU-a-1", "GPU-a-2"]);
    }

    #[test]
    fn without_a_node_big_enough_cards_spread_and_too_few_is_none() {
        let free = [card("a", 0, None), card("b", 0, None)];
        assert_eq!(uuids(pick(&free, 2)), ["GPU-a-0", "GPU-b-0"]);
        assert_eq!(pick(&free, 3), None);
        assert_eq!(pick(&free, 0), None);
    }
}
