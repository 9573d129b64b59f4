//! What an operator runs: `lanes serve`'s wiring (`serve`), the operator commands' arguments
//! (`cli`) and their settings file (`config_file`), the data directory, and the chores
//! (`doctor`, `user`, `db`). It uses every other folder; nothing but the `lanes` program
//! (`bin/`) uses it.

pub mod cli;
pub mod config_file;
pub mod data_dir;
pub mod db;
pub mod doctor;
pub mod serve;
pub mod user;
