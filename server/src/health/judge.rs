//! The verdict on one card from what its readings show: plain Rust, no I/O, time passed in.
//!
//! Failing findings are held until an admin clears the card or a reset shows its counters
//! clean; a reading that no longer shows them does not clear them (an Xid is an event: no
//! counter says it went away). Degraded findings count for [`DEGRADED_HOLD_MS`] after they were
//! last seen, so a card that throttles now and then does not flap between levels. Throttling
//! degrades a card only once it has lasted [`THROTTLE_ENTER_MS`] (gaps shorter than that do not
//! break a spell), and counts for [`THROTTLE_HOLD_MS`] after it was last seen: under load a card
//! near its thermal limit throttles for a few seconds at a time, and on a real H200 the verdict
//! then flipped every few seconds (`docs/device/preemption/health-flapping-first-run.txt`).

use lanes_types::health::{
    xid_class, Condition, Finding, HealthCounters, HealthLevel, XidClass, XidEvent,
    TROUBLE_THROTTLE,
};

/// How long a sign of a degraded card (ECC growth, PCIe replays, an Xid of unknown meaning)
/// keeps the card degraded after it was last seen.
pub const DEGRADED_HOLD_MS: i64 = 60 * 60 * 1000;

/// How long trouble throttling must last (readings showing it, with gaps shorter than this)
/// before it degrades a card.
pub const THROTTLE_ENTER_MS: i64 = 30 * 1000;
/// How long throttling keeps a card degraded after it was last seen.
pub const THROTTLE_HOLD_MS: i64 = 10 * 60 * 1000;

/// What the judge remembers of one card between readings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardMemory {
    pub level: HealthLevel,
    pub since_ms: i64,
    /// Failing findings, held until cleared.
    pub held: Vec<Finding>,
    /// Degraded findings and until when they count.
    pub recent: Vec<(Finding, i64)>,
    /// Findings of the latest reading that last only while seen (throttling, a failed read).
    pub current: Vec<Finding>,
    /// The counters as last read: growth is measured against them.
    pub last: Option<HealthCounters>,
    /// The card was lost and has not yet been read back with its counters.
    pub lost: bool,
    /// The current spell of trouble throttling: when it was first and last seen.
    pub throttling: Option<(i64, i64)>,
}

/// One tick's reading of a card.
#[derive(Clone, Copy, Debug)]
pub struct Reading<'a> {
    pub at_ms: i64,
    /// `Err(lost)`: the reading failed, and whether NVML said the card is lost.
    pub read: Result<(), (&'a str, bool)>,
    pub counters: Option<&'a HealthCounters>,
    pub xids: &'a [XidEvent],
}

/// What a reading changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    pub condition: Condition,
    /// The level before, when this reading changed it.
    pub changed_from: Option<HealthLevel>,
    /// The change is a reset that showed the counters clean (held findings were dropped).
    pub reset: bool,
    /// Xids that are the application's fault: told about the process, not held against the card.
    pub blamed: Vec<XidEvent>,
}

impl CardMemory {
    /// The card as an admin or a reset left it: held findings gone, counters kept as the new
    /// baseline (so only growth after this counts).
    pub fn clear(&mut self, at_ms: i64) {
        self.held.clear();
        self.recent.clear();
        self.lost = false;
        self.level = level_of(&self.current);
        self.since_ms = at_ms;
    }

    pub fn condition(&self, at_ms: i64) -> Condition {
        let findings: Vec<Finding> = (self.held.iter().cloned())
            .chain(
                self.recent
                    .iter()
                    .filter(|(_, until)| *until > at_ms)
                    .map(|(f, _)| f.clone()),
            )
            .chain(self.current.iter().cloned())
            .collect();
        Condition {
            level: level_of(&findings),
            findings,
        }
    }
}

fn level_of(findings: &[Finding]) -> HealthLevel {
    findings
        .iter()
        .map(Finding::level)
        .max()
        .unwrap_or_default()
}

/// Whether two findings are the same kind of thing (a newer count replaces the older; each
/// Xid is its own).
fn same_slot(a: &Finding, b: &Finding) -> bool {
    match (a, b) {
        (Finding::Xid { xid: x }, Finding::Xid { xid: y }) => x == y,
        _ => a.code() == b.code(),
    }
}

fn hold(list: &mut Vec<Finding>, finding: Finding) {
    list.retain(|f| !same_slot(f, &finding));
    list.push(finding);
}

fn remember(recent: &mut Vec<(Finding, i64)>, finding: Finding, until: i64) {
    recent.retain(|(f, _)| !same_slot(f, &finding));
    recent.push((finding, until));
}

/// Growth of a counter since the last reading (`None` without both readings).
fn growth(now: Option<u64>, before: Option<u64>) -> Option<u64> {
    Some(now?.saturating_sub(before?))
}

/// Whether the counters say the card was reset since `before`: volatile counts fell (a reset
/// zeroes them) or a pending remap was applied.
fn reset_between(before: &HealthCounters, now: &HealthCounters) -> bool {
    let fell = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if b < a);
    fell(before.ecc_corrected_volatile, now.ecc_corrected_volatile)
        || fell(
            before.ecc_uncorrected_volatile,
            now.ecc_uncorrected_volatile,
        )
        || (before.remap_pending == Some(true) && now.remap_pending == Some(false))
}

/// Whether nothing in the counters says the card is failing.
fn clean(c: &HealthCounters) -> bool {
    c.remap_pending != Some(true)
        && c.remap_failed != Some(true)
        && c.retirement_pending != Some(true)
        && c.ecc_uncorrected_volatile.unwrap_or(0) == 0
}

/// Judges one reading of a card, updating what is remembered of it.
pub fn judge(memory: &mut CardMemory, reading: Reading<'_>) -> Judged {
    let at = reading.at_ms;
    let before = memory.level;
    let mut judged = Judged::default();
    let mut reset = false;
    match reading.read {
        Err((_, true)) => {
            memory.lost = true;
            hold(&mut memory.held, Finding::Lost);
            memory.current.clear();
        }
        Err((error, false)) => {
            memory.current = vec![Finding::Unreadable {
                error: error.to_string(),
            }];
        }
        Ok(()) => {
            memory
                .current
                .retain(|f| !matches!(f, Finding::Unreadable { .. }));
        }
    }
    for xid in reading.xids {
        match xid_class(xid.xid) {
            XidClass::Application => judged.blamed.push(xid.clone()),
            XidClass::Card => hold(&mut memory.held, Finding::Xid { xid: xid.xid }),
            XidClass::Other => remember(
                &mut memory.recent,
                Finding::Xid { xid: xid.xid },
                at + DEGRADED_HOLD_MS,
            ),
        }
    }
    if let (Ok(()), Some(now)) = (reading.read, reading.counters) {
        let last = memory.last.clone();
        // Back on the bus and readable: the driver reset it.
        reset = memory.lost || last.as_ref().is_some_and(|l| reset_between(l, now));
        memory.lost = false;
        let before_counters = last.unwrap_or_default();
        let baseline = |v: Option<u64>| if memory.last.is_some() { v } else { Some(0) };
        // New uncorrectable errors (all of them at the first reading: since the driver loaded).
        if let Some(added) = growth(
            now.ecc_uncorrected_volatile,
            baseline(before_counters.ecc_uncorrected_volatile),
        )
        .filter(|n| *n > 0)
        {
            let total = now.ecc_uncorrected_volatile.unwrap_or(added);
            hold(&mut memory.held, Finding::UncorrectableEcc { count: total });
        }
        if memory.last.is_some() {
            if let Some(added) = growth(
                now.ecc_corrected_volatile,
                before_counters.ecc_corrected_volatile,
            )
            .filter(|n| *n > 0)
            {
                remember(
                    &mut memory.recent,
                    Finding::CorrectableEccGrowth { added },
                    at + DEGRADED_HOLD_MS,
                );
            }
            if let Some(added) =
                growth(now.pcie_replays, before_counters.pcie_replays).filter(|n| *n > 0)
            {
                remember(
                    &mut memory.recent,
                    Finding::PcieReplays { added },
                    at + DEGRADED_HOLD_MS,
                );
            }
        }
        if reset && clean(now) {
            memory.held.clear();
        }
        if now.remap_pending == Some(true) {
            hold(&mut memory.held, Finding::RemapPending);
        }
        if now.remap_failed == Some(true) {
            hold(&mut memory.held, Finding::RemapFailed);
        }
        if now.retirement_pending == Some(true) {
            hold(&mut memory.held, Finding::RetirementPending);
        }
        let trouble: Vec<String> = (now.throttle.iter())
            .filter(|r| TROUBLE_THROTTLE.contains(&r.as_str()))
            .cloned()
            .collect();
        // A spell goes on through gaps shorter than the time it takes to count.
        let spell = memory
            .throttling
            .filter(|&(_, last)| at - last < THROTTLE_ENTER_MS);
        if trouble.is_empty() {
            memory.throttling = spell;
        } else {
            let first = spell.map_or(at, |(first, _)| first);
            memory.throttling = Some((first, at));
            if at - first >= THROTTLE_ENTER_MS {
                remember(
                    &mut memory.recent,
                    Finding::Throttled { reasons: trouble },
                    at + THROTTLE_HOLD_MS,
                );
            }
        }
        memory.last = Some(now.clone());
    }
    memory.recent.retain(|(_, until)| *until > at);
    judged.condition = memory.condition(at);
    let level = judged.condition.level;
    if level != before {
        judged.changed_from = Some(before);
        judged.reset = reset && before == HealthLevel::Failing && level < HealthLevel::Failing;
        memory.level = level;
        memory.since_ms = at;
    }
    judged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean_counters() -> HealthCounters {
        HealthCounters {
            ecc_corrected_volatile: Some(0),
            ecc_uncorrected_volatile: Some(0),
            remap_pending: Some(false),
            remap_failed: Some(false),
            pcie_replays: Some(0),
            ..Default::default()
        }
    }

    fn read<'a>(
        at_ms: i64,
        counters: Option<&'a HealthCounters>,
        xids: &'a [XidEvent],
    ) -> Reading<'a> {
        Reading {
            at_ms,
            read: Ok(()),
            counters,
            xids,
        }
    }

    fn xid(xid: u32) -> XidEvent {
        XidEvent {
            xid,
            at_ms: 0,
            pid: Some(42),
        }
    }

    #[test]
    fn a_hardware_xid_fails_the_card_until_cleared_and_an_application_xid_blames_the_process() {
        let mut m = CardMemory::default();
        let c = clean_counters();
        assert_eq!(judge(&mut m, read(0, Some(&c), &[])).changed_from, None);
        let j = judge(&mut m, read(1, None, &[xid(13)]));
        assert_eq!(j.condition.level, HealthLevel::Healthy);
        assert_eq!(j.blamed, vec![xid(13)]);
        let j = judge(&mut m, read(2, None, &[xid(79)]));
        assert_eq!(j.changed_from, Some(HealthLevel::Healthy));
        assert_eq!(j.condition.findings, vec![Finding::Xid { xid: 79 }]);
        // Clean readings do not clear an Xid: nothing shows it went away.
        let j = judge(&mut m, read(3, Some(&c), &[]));
        assert_eq!(
            (j.condition.level, j.changed_from),
            (HealthLevel::Failing, None)
        );
        m.clear(4);
        assert_eq!(
            judge(&mut m, read(5, Some(&c), &[])).condition.level,
            HealthLevel::Healthy
        );
    }

    #[test]
    fn correctable_ecc_growth_degrades_for_an_hour_and_uncorrectable_errors_fail() {
        let mut m = CardMemory::default();
        let mut c = clean_counters();
        c.ecc_corrected_volatile = Some(10);
        // Errors from before the first reading are history, not growth.
        assert_eq!(
            judge(&mut m, read(0, Some(&c), &[])).condition.level,
            HealthLevel::Healthy
        );
        c.ecc_corrected_volatile = Some(13);
        let j = judge(&mut m, read(1000, Some(&c), &[]));
        assert_eq!(j.condition.level, HealthLevel::Degraded);
        assert_eq!(
            j.condition.findings,
            vec![Finding::CorrectableEccGrowth { added: 3 }]
        );
        let j = judge(&mut m, read(1000 + DEGRADED_HOLD_MS, Some(&c), &[]));
        assert_eq!(
            (j.condition.level, j.changed_from),
            (HealthLevel::Healthy, Some(HealthLevel::Degraded))
        );
        c.ecc_uncorrected_volatile = Some(1);
        let j = judge(&mut m, read(2 * DEGRADED_HOLD_MS, Some(&c), &[]));
        assert_eq!(
            j.condition.findings,
            vec![Finding::UncorrectableEcc { count: 1 }]
        );
    }

    #[test]
    fn a_reset_that_reads_clean_clears_a_failing_card_and_one_that_does_not_keeps_it() {
        let mut m = CardMemory::default();
        let mut c = clean_counters();
        judge(&mut m, read(0, Some(&c), &[]));
        c.remap_pending = Some(true);
        assert_eq!(
            judge(&mut m, read(1, Some(&c), &[xid(94)])).condition.level,
            HealthLevel::Failing
        );
        // Lost, then back: a reset; the remap was applied and the counters read clean.
        let lost = Reading {
            at_ms: 2,
            read: Err(("lost", true)),
            counters: None,
            xids: &[],
        };
        assert!(judge(&mut m, lost)
            .condition
            .findings
            .contains(&Finding::Lost));
        c.remap_pending = Some(false);
        let j = judge(&mut m, read(3, Some(&c), &[]));
        assert!(j.reset, "{j:?}");
        assert_eq!(j.condition.level, HealthLevel::Healthy);
        // A reset with a remap that failed stays failing.
        c.remap_failed = Some(true);
        c.remap_pending = Some(true);
        judge(&mut m, read(4, Some(&c), &[]));
        c.remap_pending = Some(false);
        let j = judge(&mut m, read(5, Some(&c), &[]));
        assert_eq!(j.condition.level, HealthLevel::Failing);
        assert!(!j.reset);
    }

    #[test]
    fn only_lasting_trouble_throttling_degrades_and_it_holds_after_it_stops() {
        let s = 1000;
        let mut m = CardMemory::default();
        let mut c = clean_counters();
        let level = |m: &mut CardMemory, at: i64, c: &HealthCounters| {
            judge(m, read(at, Some(c), &[])).condition.level
        };
        // The power cap is a card doing as told.
        c.throttle = vec!["sw_power_cap".into(), "gpu_idle".into()];
        assert_eq!(level(&mut m, 0, &c), HealthLevel::Healthy);
        // Thermal slowdown for a few seconds at a time, as under load: no verdict yet.
        let hot = vec!["sw_thermal_slowdown".to_string()];
        c.throttle = hot.clone();
        assert_eq!(level(&mut m, 2 * s, &c), HealthLevel::Healthy);
        c.throttle.clear();
        assert_eq!(level(&mut m, 10 * s, &c), HealthLevel::Healthy);
        // ... and again 20 s later: the same spell, 30 s long now.
        c.throttle = hot.clone();
        assert_eq!(level(&mut m, 20 * s, &c), HealthLevel::Healthy);
        assert_eq!(level(&mut m, 32 * s, &c), HealthLevel::Degraded);
        // Between counter readings the verdict stands.
        assert_eq!(
            judge(&mut m, read(33 * s, None, &[])).condition.level,
            HealthLevel::Degraded
        );
        // It stops: the card stays degraded for the hold, then is healthy.
        c.throttle.clear();
        assert_eq!(level(&mut m, 40 * s, &c), HealthLevel::Degraded);
        assert_eq!(
            level(&mut m, 32 * s + THROTTLE_HOLD_MS - 1, &c),
            HealthLevel::Degraded
        );
        assert_eq!(
            level(&mut m, 32 * s + THROTTLE_HOLD_MS, &c),
            HealthLevel::Healthy
        );
        // A spell broken by a gap as long as the entry time starts counting again.
        let t = 32 * s + THROTTLE_HOLD_MS + 60 * s;
        c.throttle = hot.clone();
        assert_eq!(level(&mut m, t, &c), HealthLevel::Healthy);
        c.throttle.clear();
        assert_eq!(level(&mut m, t + 20 * s, &c), HealthLevel::Healthy);
        c.throttle = hot;
        assert_eq!(level(&mut m, t + 50 * s, &c), HealthLevel::Healthy);
        assert_eq!(level(&mut m, t + 79 * s, &c), HealthLevel::Healthy);
        assert_eq!(level(&mut m, t + 80 * s, &c), HealthLevel::Degraded);
    }

    #[test]
    fn the_flapping_seen_on_a_real_card_gives_one_change_each_way() {
        // Seconds at which the first device run's H200 showed sw_thermal_slowdown (readings
        // every 2 s; the verdict then flipped six times in two minutes).
        let mut m = CardMemory::default();
        let mut c = clean_counters();
        let hot =
            |t: i64| (0..38).contains(&t) || (106..114).contains(&t) || (116..118).contains(&t);
        let mut changes = 0;
        for t in (0..900).step_by(2) {
            c.throttle = if hot(t) {
                vec!["sw_thermal_slowdown".into()]
            } else {
                Vec::new()
            };
            if judge(&mut m, read(t * 1000, Some(&c), &[]))
                .changed_from
                .is_some()
            {
                changes += 1;
            }
        }
        assert_eq!(changes, 2, "degraded once, healthy once");
    }
}
