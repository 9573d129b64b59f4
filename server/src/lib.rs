//! The `lanes` server. `main.rs` only parses the command line and calls in here, so tests can
//! start the real server in-process.
//!
//! Folders are capabilities, each holding what it decides (pure rules, unit-tested without
//! I/O) and the task that runs it: `accounts/`, `bookings/`, `history/`, `jobs/`, `queue/`,
//! `enforce/`, `notify/`, `telemetry/`, `cluster/`, and `audit.rs` and `reports.rs`. Three
//! layers cut across them, one folder each, in one direction: `http/` (routes: parse, call,
//! answer) uses `usecases/` (authorize, validate, audit), which uses `store/` (one repository
//! per capability over one database handle). Around them, `ops/` holds what an operator runs
//! (`lanes serve`'s wiring, `doctor`, `user`, `db`, `config`, the command line) and uses
//! everything; `runtime/` holds what every task stands on (the event bus, supervision, the
//! clock) and uses nothing. `python3 .ci/modgraph.py server/src --check` keeps every level of
//! this graph free of cycles.

pub mod accounts;
pub mod audit;
pub mod bookings;
pub mod cluster;
pub mod directory;
pub mod enforce;
pub mod health;
pub mod history;
pub mod http;
pub mod jobs;
pub mod notify;
pub mod ops;
pub mod queue;
pub mod reports;
pub mod runtime;
pub mod statements;
pub mod store;
pub mod telemetry;
pub mod usecases;
