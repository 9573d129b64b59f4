//! The `lanes` server: configuration, telemetry, storage and the HTTP surface. `main.rs` only
//! parses the command line and calls in here, so tests can start the real server in-process.

pub mod accounts;
pub mod audit;
pub mod bookings;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config_command;
pub mod config_file;
pub mod data_dir;
pub mod db_command;
pub mod doctor;
pub mod enforce;
pub mod events;
pub mod history;
pub mod history_writer;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod notify;
pub mod queue;
pub mod reports;
pub mod startup;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod usecases;
pub mod user_command;
