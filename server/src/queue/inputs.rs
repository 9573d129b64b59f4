//! From what the database and the hub say to what the scheduler reads: cards with their blocks,
//! owners with their limits and use, waiting jobs with their priority. Plain functions.

use crate::store::{CardBlock, UsageSpan};
use lanes_scheduling::fairshare::{self, Account, AgeWeight, ShareTable};
use lanes_scheduling::scheduler::{Card, Owner, Time, Waiting};
use lanes_types::booking::GpuRef;
use lanes_types::job::Job;
use lanes_types::queue::{QueueSettings, Shares, Standing};
use std::collections::{BTreeMap, HashMap};

/// A card the queue may use: who it is, its memory.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolCard {
    pub gpu: GpuRef,
    pub memory_total: u64,
    pub memory_free: u64,
}

/// A user as fair share and limits see them.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: i64,
    pub username: String,
    /// Where their fair share counts: their first group by name, or "" without one.
    pub group: String,
    pub max_gpus: Option<u32>,
}

/// Seconds of a millisecond instant: starts round down, ends up, so a block never shrinks.
fn secs_floor(ms: i64) -> Time {
    ms.div_euclid(1000)
}
fn secs_ceil(ms: i64) -> Time {
    -((-ms).div_euclid(1000))
}

/// The scheduler's cards (same order as `pool`), with every hold on them as a block.
pub fn cards(pool: &[PoolCard], holds: &[CardBlock], now: Time) -> Vec<Card> {
    let index: HashMap<(&str, &str), usize> = pool
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.gpu.node.as_str(), c.gpu.uuid.as_str()), i))
        .collect();
    // Hosts numbered by node name: a job's cards all come from one node.
    let mut nodes: Vec<&str> = pool.iter().map(|c| c.gpu.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let host = |node: &str| nodes.binary_search(&node).unwrap_or_default() as u32;
    let mut cards: Vec<Card> = pool
        .iter()
        .map(|c| Card {
            free_from: now,
            blocks: Vec::new(),
            memory_total: c.memory_total,
            memory_free: c.memory_free,
            host: host(&c.gpu.node),
        })
        .collect();
    for hold in holds {
        if let Some(&i) = index.get(&(hold.node.as_str(), hold.uuid.as_str())) {
            cards[i]
                .blocks
                .push((secs_floor(hold.start_ms), secs_ceil(hold.end_ms)));
        }
    }
    for card in &mut cards {
        card.blocks.sort_unstable();
    }
    cards
}

/// Each member's limit and the cards they hold, now and ahead (bookings, so queue jobs too).
pub fn owners(members: &[Member], holds: &[CardBlock]) -> Vec<Owner> {
    let mut by_user: HashMap<i64, Vec<(Time, Time, u32)>> = HashMap::new();
    for hold in holds {
        if let Some(user) = hold.user_id {
            by_user.entry(user).or_default().push((
                secs_floor(hold.start_ms),
                secs_ceil(hold.end_ms),
                1,
            ));
        }
    }
    members
        .iter()
        .map(|m| Owner {
            holds: by_user.remove(&m.id).unwrap_or_default(),
            max_gpus: m.max_gpus,
        })
        .collect()
}

/// Every member's fair-share standing from their decayed use.
pub fn standings(
    members: &[Member],
    holds: &[UsageSpan],
    shares: &Shares,
    half_life: Time,
    now: Time,
) -> Vec<Standing> {
    let mut by_user: HashMap<i64, Vec<(Time, Time, u32)>> = HashMap::new();
    for h in holds {
        by_user.entry(h.user_id).or_default().push((
            secs_floor(h.start_ms),
            secs_ceil(h.end_ms),
            h.gpus.max(0) as u32,
        ));
    }
    // A user in no group stands alone, as if their own group, with their own share there
    // (group names cannot contain '/', so these cannot clash with real ones).
    let mut table = ShareTable {
        groups: shares.groups.clone(),
        users: shares.users.clone(),
    };
    let accounts: Vec<Account> = members
        .iter()
        .map(|m| {
            let group = if m.group.is_empty() {
                let alone = format!("/{}", m.username);
                let share = shares.users.get(&m.username).copied().unwrap_or(1.0);
                table.groups.insert(alone.clone(), share);
                alone
            } else {
                m.group.clone()
            };
            Account {
                user: m.username.clone(),
                group,
                usage: by_user
                    .get(&m.id)
                    .map_or(0.0, |list| fairshare::decayed_usage(list, now, half_life)),
            }
        })
        .collect();
    fairshare::standings(&accounts, &table)
        .into_iter()
        .zip(members.iter().zip(&accounts))
        .map(|(s, (m, a))| Standing {
            username: a.user.clone(),
            group: m.group.clone(),
            share: s.share,
            usage: s.usage,
            gpu_hours: a.usage / 3_600.0,
            factor: s.factor,
        })
        .collect()
}

/// A waiting job's priority: its owner's fair-share factor aged by its wait; under least
/// attained service, the level of what it received before comes first.
pub fn priority(
    settings: &QueueSettings,
    standing: Option<&Standing>,
    waited_s: Time,
    attained_gpu_s: u64,
) -> f64 {
    let age = AgeWeight {
        weight: settings.age_weight,
        full_after: settings.age_full_after_s,
    };
    let fair = fairshare::priority(standing.map_or(1.0, |s| s.factor), waited_s, age);
    match settings.policy {
        lanes_types::queue::Policy::Las => lanes_scheduling::las::rank(
            &lanes_scheduling::las::LasSettings::default(),
            attained_gpu_s as f64,
            fair,
        ),
        _ => fair,
    }
}

/// The running queue jobs (and borrowers) from their holds: their cards (indices into `pool`),
/// start and time-limit end. A job on cards outside the pool is left out.
pub fn running(pool: &[PoolCard], holds: &[CardBlock]) -> Vec<lanes_scheduling::forecast::Running> {
    let mut by_job: BTreeMap<i64, lanes_scheduling::forecast::Running> = BTreeMap::new();
    for hold in holds {
        let Some(job) = hold.queue_job else { continue };
        let Some(card) = pool
            .iter()
            .position(|c| c.gpu.node == hold.node && c.gpu.uuid == hold.uuid)
        else {
            continue;
        };
        let r = by_job
            .entry(job)
            .or_insert_with(|| lanes_scheduling::forecast::Running {
                cards: Vec::new(),
                started: secs_floor(hold.start_ms),
                limit_end: secs_ceil(hold.end_ms),
            });
        r.cards.push(card);
        r.started = r.started.min(secs_floor(hold.start_ms));
        r.limit_end = r.limit_end.max(secs_ceil(hold.end_ms));
    }
    by_job.into_values().collect()
}

/// The waiting jobs, each with its owner's index in `members` (jobs of unknown or disabled
/// members are left out) and its priority.
pub fn waiting(
    pending: &[Job],
    members: &[Member],
    standings: &[Standing],
    settings: &QueueSettings,
    now: Time,
) -> Vec<Waiting> {
    let owner: BTreeMap<i64, usize> = members.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    pending
        .iter()
        .filter_map(|job| {
            let request = job.queue?;
            let owner = *owner.get(&job.user_id)?;
            let submitted = job.created_at.timestamp();
            let priority = priority(
                settings,
                standings.get(owner),
                now - submitted,
                request.attained_gpu_s,
            );
            Some(Waiting {
                id: job.id,
                owner,
                gpus: request.gpus,
                // Bounded at submission; clamped again so an old record cannot overflow a pass.
                time_limit: request
                    .time_limit_s
                    .clamp(1, lanes_types::queue::MAX_TIME_LIMIT_S),
                min_memory: request.min_memory_bytes.unwrap_or(0),
                submitted,
                priority,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(uuid: &str) -> PoolCard {
        PoolCard {
            gpu: GpuRef {
                node: "n".into(),
                uuid: uuid.into(),
            },
            memory_total: 100,
            memory_free: 60,
        }
    }

    fn hold(uuid: &str, start_ms: i64, end_ms: i64, user: Option<i64>) -> CardBlock {
        CardBlock {
            node: "n".into(),
            uuid: uuid.into(),
            start_ms,
            end_ms,
            user_id: user,
            queue_job: None,
        }
    }

    #[test]
    fn holds_become_blocks_that_never_shrink_and_other_nodes_are_ignored() {
        let pool = [card("a"), card("b")];
        let holds = [
            hold("b", 10_500, 20_001, Some(1)),
            hold("a", 5_000, 6_000, None),
            CardBlock {
                node: "elsewhere".into(),
                ..hold("a", 0, 99_000, Some(1))
            },
        ];
        let cards = cards(&pool, &holds, 10);
        assert_eq!(cards[0].blocks, vec![(5, 6)]);
        assert_eq!(cards[1].blocks, vec![(10, 21)]);
        assert_eq!(cards[1].memory_free, 60);
    }

    #[test]
    fn users_in_no_group_stand_alone_with_their_own_share() {
        let member = |id: i64, name: &str, group: &str| Member {
            id,
            username: name.into(),
            group: group.into(),
            max_gpus: None,
        };
        let members = [
            member(1, "ann", ""),
            member(2, "bob", ""),
            member(3, "cid", "lab"),
        ];
        let holds = [UsageSpan {
            user_id: 2,
            start_ms: 0,
            end_ms: 3_600_000,
            gpus: 2,
        }];
        let shares = Shares {
            groups: [("lab".into(), 2.0)].into(),
            users: [("ann".into(), 2.0)].into(),
        };
        let s = standings(&members, &holds, &shares, 86_400, 3_600);
        // Shares 2 (ann alone), 1 (bob alone), 2 (lab): ann and cid 40 % each, bob 20 %.
        assert!((s[0].share - 0.4).abs() < 1e-12 && (s[2].share - 0.4).abs() < 1e-12);
        assert!((s[1].share - 0.2).abs() < 1e-12);
        // Bob's use is his alone: ann is not judged by it.
        assert_eq!(s[0].factor, 1.0);
        assert!(s[1].factor < 0.5);
        assert_eq!(s[0].group, "");
        assert!((s[1].gpu_hours - 2.0).abs() < 0.05);
    }

    #[test]
    fn owners_hold_their_bookings_cards_now_and_ahead() {
        let members = [
            Member {
                id: 1,
                username: "ann".into(),
                group: "".into(),
                max_gpus: Some(2),
            },
            Member {
                id: 2,
                username: "bob".into(),
                group: "".into(),
                max_gpus: None,
            },
        ];
        let holds = [
            hold("a", 0, 10_000, Some(1)),
            hold("b", 0, 10_000, Some(1)),
            hold("c", 20_000, 30_000, Some(2)),
        ];
        let owners = owners(&members, &holds);
        assert_eq!(owners[0].peak(5, 6), 2);
        assert_eq!(owners[0].max_gpus, Some(2));
        assert_eq!(owners[1].peak(5, 6), 0);
        assert_eq!(owners[1].peak(5, 25), 1);
    }
}
