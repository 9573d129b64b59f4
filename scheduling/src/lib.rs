//! Scheduling of queued jobs, as plain Rust: the pass that decides what starts where
//! (`scheduler`), fair-share priority (`fairshare`), and the trace replays that measure both
//! (`trace`, `simulate`, `plot`, `report`). The server's queue (`crate::queue`) feeds the same
//! pass from the database.

pub mod fairshare;
pub mod forecast;
pub mod las;
pub mod lending;
pub mod plot;
pub mod report;
pub mod scheduler;
pub mod simulate;
pub mod trace;
