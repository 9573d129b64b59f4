//! The `lanes` command line: the terminal client's commands (`lanes_cli`) beside the
//! server's operator commands (`lanes_server::ops`), one help listing them apart.

use clap::{Parser, Subcommand};
use lanes_server::ops::cli::*;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "lanes",
    version,
    about = "Lanes: a self-hosted GPU pool portal"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line, its top-level help listing client and server commands apart.
    pub fn command_grouped() -> clap::Command {
        use clap::CommandFactory;
        let command = Self::command();
        let template = help_template(&command, &lanes_cli::ClientCommand::names());
        command.help_template(template)
    }

    /// Parses the process's arguments with the settings file beneath them (see
    /// [`lanes_server::ops::config_file`]); exits with 2 and the reason on bad ones.
    pub fn parse_layered() -> Self {
        use clap::FromArgMatches;
        let layered = match Self::layered(std::env::args_os().collect()) {
            Ok(layered) => layered,
            Err(e) => match e.downcast::<clap::Error>() {
                Ok(clap) => clap.exit(),
                Err(other) => {
                    eprintln!("lanes: {other}");
                    std::process::exit(2);
                }
            },
        };
        Self::from_arg_matches(&layered.matches).unwrap_or_else(|e| e.exit())
    }

    /// `argv` parsed, with the settings file under flags and environment.
    pub fn layered(
        argv: Vec<std::ffi::OsString>,
    ) -> Result<lanes_server::ops::config_file::Layered, Box<dyn std::error::Error + Send + Sync>>
    {
        let command = Self::command_grouped();
        let serve = Self::serve_command();
        lanes_server::ops::config_file::parse(&command, &serve, argv)
    }

    /// `lanes serve`'s command: the settings a file may hold.
    pub fn serve_command() -> clap::Command {
        use clap::CommandFactory;
        Self::command()
            .find_subcommand("serve")
            .expect("lanes has a serve command")
            .clone()
    }
}

/// A help template whose command list has two headings: the terminal client's commands (for
/// lab members) and the server's (for operators). Clap lists subcommands under one heading.
pub fn help_template(command: &clap::Command, client: &[String]) -> String {
    let visible: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    let width = visible
        .iter()
        .map(|c| c.get_name().len())
        .max()
        .unwrap_or(0);
    let list = |wanted: bool| {
        visible
            .iter()
            .filter(|c| client.iter().any(|n| n == c.get_name()) == wanted)
            .map(|c| {
                let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
                let first = about.lines().next().unwrap_or_default().to_string();
                format!("  {:width$}  {first}\n", c.get_name())
            })
            .collect::<String>()
    };
    format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n\
         Client commands (talk to a portal; log in first with `lanes login URL`):\n{}\n\
         Server commands (on a GPU host or the portal machine):\n{}  help{}  Print this message or the help of the given command\n\n\
         Options:\n{{options}}{{after-help}}",
        list(true),
        list(false),
        " ".repeat(width.saturating_sub(4)),
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The terminal client's commands (grouped apart in the help: see [`help_template`]).
    #[command(flatten)]
    Client(lanes_cli::ClientCommand),
    /// Serve the portal: dashboard, API and GPU poller.
    #[command(
        after_help = "Examples:\n  lanes serve --listen 0.0.0.0:3000\n  lanes serve --database-url postgres://lanes@db/lanes --gpus nvml"
    )]
    Serve(Box<ServeArgs>),
    /// Check the NVIDIA driver, NVML, the cards and what CUDA_VISIBLE_DEVICES selects.
    #[command(after_help = "Example:\n  lanes doctor --json")]
    Doctor(DoctorArgs),
    /// Manage accounts directly in the database (no running server needed).
    #[command(
        after_help = "Example:\n  echo \"$PASSWORD\" | lanes user add --username alice --unix-user alice --password-stdin"
    )]
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// The database: migrations, and moving a lab to another database.
    #[command(
        after_help = "Examples:\n  lanes db status\n  lanes db copy --from sqlite:///var/lib/lanes/lanes.db --to postgres://lanes@db/lanes"
    )]
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Write a consistent copy of the SQLite database while Lanes serves (PostgreSQL: pg_dump).
    #[command(after_help = "Example:\n  lanes backup --to /backups/lanes-$(date +%F).db")]
    Backup(BackupArgs),
    /// Put a backup made by `lanes backup` in place of the database (stop `lanes serve` first).
    #[command(
        after_help = "Example:\n  lanes restore --from /backups/lanes-2026-12-01.db --replace"
    )]
    Restore(RestoreArgs),
    /// Replay job traces through the scheduler with a virtual clock and compare policies.
    #[command(
        after_help = "Example:\n  lanes simulate --trace traces/philly.csv --gpus 64 --policy all"
    )]
    Simulate(SimulateArgs),
    /// The settings file: print what `lanes serve` would use, and where each value came from.
    #[command(after_help = "Example:\n  lanes config check --config /etc/lanes/lanes.toml")]
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// (Internal) Keep one of a job's output streams: stdin to stdout, capped.
    #[command(hide = true)]
    KeepLog(KeepLogArgs),
    /// (Packaging) Write a man page for lanes and each of its commands into DIR.
    #[command(hide = true)]
    ManPages { dir: PathBuf },
}
