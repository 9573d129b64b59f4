//! What an operator runs: `lanes serve`'s wiring (`serve`), the command line (`cli`) and its
//! settings file (`config_file`), the data directory, and the chores (`doctor`, `user`, `db`,
//! `config`). It uses every other folder; nothing but `main.rs` uses it.

pub mod cli;
pub mod config;
pub mod config_file;
pub mod data_dir;
pub mod db;
pub mod doctor;
pub mod serve;
pub mod user;
