//! Several GPU servers, one pool, with PostgreSQL as the only thing they share: each node
//! registers and heartbeats (`membership`), relays its events and ticks to the others over
//! LISTEN/NOTIFY (`relay`), and one instance at a time leads the queue through an advisory
//! lock (`leader`). There is no protocol of our own and no process everything hangs on: a
//! node that drops off goes grey on every portal and the rest carry on. On SQLite there is
//! one node; membership still records it, and it always leads.

pub mod leader;
pub mod membership;
pub mod relay;

/// NOTIFY channels.
pub const EVENTS_CHANNEL: &str = "lanes_events";
pub const TICKS_CHANNEL: &str = "lanes_ticks";
/// "Someone watches": a process with viewers asks every node for its ticks (see `relay`).
pub const WATCH_CHANNEL: &str = "lanes_watch";

/// How often a node heartbeats and re-reads the pool: a third of the timeout, so a node is
/// called unreachable only after three missed beats, within 0.5–5 s (a beat is the largest
/// share of an idle node's transactions: 5 s is 12 a minute).
pub fn beat_interval(timeout: std::time::Duration) -> std::time::Duration {
    (timeout / 3).clamp(
        std::time::Duration::from_millis(500),
        std::time::Duration::from_secs(5),
    )
}
