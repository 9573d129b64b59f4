//! Fair-share priority in the manner of Slurm's classic algorithm: each user's GPU-seconds,
//! decayed with a half-life, against the shares an admin gave their group and them, plus a
//! small age factor so nothing waits forever.
//!
//! With `U` a user's share of all decayed usage and `S` their normalized share (their group's
//! fraction of all groups' shares times their fraction of the group's), the effective usage is
//! `UE = U + (U_group − U) · s_user / Σ s_users_in_group` (a user is judged partly by their
//! group), and the factor is `F = 2^(−UE / S)`: 1 for no use, ½ for use exactly at the share,
//! towards 0 beyond it.

use super::scheduler::Time;
use std::collections::BTreeMap;

/// `2^(−dt / half_life)`.
pub fn decay(dt: Time, half_life: Time) -> f64 {
    (-(dt as f64) / half_life.max(1) as f64).exp2()
}

/// Decayed GPU-seconds, kept up to date as time passes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub value: f64,
    pub at: Time,
}

impl Usage {
    /// Moves to `to`, with `gpus` busy all the while since the last call. Exact: the integral
    /// of `gpus · 2^(−(to − t)/h)` over the interval, added to the old value decayed.
    pub fn advance(&mut self, to: Time, gpus: u32, half_life: Time) {
        let dt = to - self.at;
        if dt <= 0 {
            return;
        }
        let d = decay(dt, half_life);
        let h = half_life.max(1) as f64 / std::f64::consts::LN_2;
        self.value = self.value * d + f64::from(gpus) * h * (1.0 - d);
        self.at = to;
    }
}

/// Decayed GPU-seconds at `now` of holds `[start, end)` on `gpus` cards (ends past `now` are cut
/// at `now`).
pub fn decayed_usage(holds: &[(Time, Time, u32)], now: Time, half_life: Time) -> f64 {
    let h = half_life.max(1) as f64 / std::f64::consts::LN_2;
    holds
        .iter()
        .filter(|&&(start, _, _)| start < now)
        .map(|&(start, end, gpus)| {
            let end = end.min(now);
            f64::from(gpus) * h * (decay(now - end, half_life) - decay(now - start, half_life))
        })
        .sum()
}

/// One user's standing: who they are, their shares and their decayed usage.
#[derive(Clone, Debug, PartialEq)]
pub struct Account {
    pub user: String,
    pub group: String,
    pub usage: f64,
}

/// Raw shares set by an admin; anyone not named has 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareTable {
    pub groups: BTreeMap<String, f64>,
    pub users: BTreeMap<String, f64>,
}

impl ShareTable {
    fn group(&self, name: &str) -> f64 {
        self.groups.get(name).copied().unwrap_or(1.0).max(0.0)
    }
    fn user(&self, name: &str) -> f64 {
        self.users.get(name).copied().unwrap_or(1.0).max(0.0)
    }
}

/// Where a user stands: normalized share, normalized and effective usage, factor.
#[derive(Clone, Debug, PartialEq)]
pub struct Standing {
    pub share: f64,
    pub usage: f64,
    pub effective_usage: f64,
    pub factor: f64,
}

/// The standing of each account (same order). Shares count among the accounts given: a group
/// nobody in the list belongs to takes no share.
pub fn standings(accounts: &[Account], shares: &ShareTable) -> Vec<Standing> {
    let total_usage: f64 = accounts.iter().map(|a| a.usage).sum();
    let mut groups: BTreeMap<&str, (f64, f64)> = BTreeMap::new(); // user shares, usage
    for a in accounts {
        let g = groups.entry(&a.group).or_default();
        g.0 += shares.user(&a.user);
        g.1 += a.usage;
    }
    let group_total: f64 = groups.keys().map(|g| shares.group(g)).sum();
    accounts
        .iter()
        .map(|a| {
            let (users_in_group, group_usage) = groups[a.group.as_str()];
            let own = shares.user(&a.user);
            let within = if users_in_group > 0.0 {
                own / users_in_group
            } else {
                0.0
            };
            let share = if group_total > 0.0 {
                shares.group(&a.group) / group_total * within
            } else {
                0.0
            };
            let norm = |u: f64| {
                if total_usage > 0.0 {
                    u / total_usage
                } else {
                    0.0
                }
            };
            let usage = norm(a.usage);
            let effective_usage = usage + (norm(group_usage) - usage) * within;
            let factor = if share > 0.0 {
                (-effective_usage / share).exp2()
            } else {
                0.0
            };
            Standing {
                share,
                usage,
                effective_usage,
                factor,
            }
        })
        .collect()
}

/// How much waiting counts next to fair share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgeWeight {
    /// Priority added at `full_after` of waiting (fair share weighs 1).
    pub weight: f64,
    pub full_after: Time,
}

impl Default for AgeWeight {
    fn default() -> Self {
        Self {
            weight: 0.1,
            full_after: 7 * 86_400,
        }
    }
}

/// Priority of a job: its owner's fair-share factor plus its age factor.
pub fn priority(factor: f64, waited: Time, age: AgeWeight) -> f64 {
    let age_factor = (waited.max(0) as f64 / age.full_after.max(1) as f64).min(1.0);
    factor + age.weight * age_factor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(user: &str, group: &str, usage: f64) -> Account {
        Account {
            user: user.into(),
            group: group.into(),
            usage,
        }
    }

    #[test]
    fn usage_halves_after_one_half_life_and_advancing_matches_the_integral() {
        let day = 86_400;
        let mut usage = Usage::default();
        usage.advance(3_600, 2, day); // two cards for an hour
        let direct = decayed_usage(&[(0, 3_600, 2)], 3_600, day);
        assert!((usage.value - direct).abs() < 1e-6);
        assert!((usage.value - 7_200.0).abs() < 7_200.0 * 0.03); // barely decayed yet
        usage.advance(3_600 + day, 0, day);
        let later = decayed_usage(&[(0, 3_600, 2)], 3_600 + day, day);
        assert!((usage.value - direct / 2.0).abs() < 1e-6);
        assert!((later - usage.value).abs() < 1e-6);
        // Steps add up to the same as one step.
        let mut stepped = Usage::default();
        for t in (600..=3_600).step_by(600) {
            stepped.advance(t, 2, day);
        }
        assert!((stepped.value - direct).abs() < 1e-6);
    }

    #[test]
    fn no_usage_gives_factor_one_and_use_at_the_share_gives_one_half() {
        let shares = ShareTable::default();
        let idle = standings(&[account("a", "g", 0.0), account("b", "h", 0.0)], &shares);
        assert!(idle.iter().all(|s| s.factor == 1.0 && s.share == 0.5));
        let even = standings(&[account("a", "g", 5.0), account("b", "h", 5.0)], &shares);
        assert!(even.iter().all(|s| (s.factor - 0.5).abs() < 1e-12));
    }

    #[test]
    fn shares_split_by_group_then_user_and_the_heavy_user_ranks_last() {
        let shares = ShareTable {
            groups: [("vision".into(), 3.0), ("nlp".into(), 1.0)].into(),
            users: [("ann".into(), 2.0)].into(),
        };
        let list = [
            account("ann", "vision", 10.0),
            account("bob", "vision", 0.0),
            account("cid", "nlp", 30.0),
        ];
        let s = standings(&list, &shares);
        assert!((s[0].share - 0.5).abs() < 1e-12); // 3/4 · 2/3
        assert!((s[1].share - 0.25).abs() < 1e-12); // 3/4 · 1/3
        assert!((s[2].share - 0.25).abs() < 1e-12);
        // bob used nothing but shares ann's group usage through the effective usage.
        // Usage 10, 0 and 30 of 40: bob's own is 0, his group's ¼, his part of the group ⅓.
        assert!((s[1].effective_usage - 0.25 / 3.0).abs() < 1e-12);
        assert!((s[0].effective_usage - 0.25).abs() < 1e-12);
        assert!(s[1].factor > s[0].factor && s[0].factor > s[2].factor);
    }

    #[test]
    fn age_lifts_priority_up_to_its_weight() {
        let age = AgeWeight {
            weight: 0.2,
            full_after: 100,
        };
        assert_eq!(priority(0.5, 0, age), 0.5);
        assert!((priority(0.5, 50, age) - 0.6).abs() < 1e-12);
        assert!((priority(0.5, 1_000, age) - 0.7).abs() < 1e-12);
    }
}
