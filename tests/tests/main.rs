//! The integration tests: one binary, a module per area. Each test starts the real server
//! in-process on a random port with a fresh database (see `lanes_tests::TestApp`).

mod admin;
mod api;
mod auth;
mod authorization;
mod backup;
mod booking_sequences;
mod bookings;
mod cli;
mod cluster;
mod containers;
mod device_wall;
mod directory;
mod enforcement;
mod environment;
mod events;
mod health;
mod history;
mod job_launch;
mod jobs;
mod language;
mod lending;
mod logging;
mod notice;
mod notify;
mod openapi;
mod postgres;
mod queue;
mod restart;
mod security;
mod settings;
mod shell;
mod simulate;
mod telemetry_ws;
mod terminal;
mod usage;
