//! The `lanes` binary: parse the command line and hand over to the library.
//!
//! Exit status: 0 on success, 2 for a usage or configuration problem (bad flag, busy port,
//! unwritable data dir, unusable database), 1 when a running server fails. Client commands:
//! 2 for bad usage, 1 when the server refused, 3 when it cannot be reached (`lanes run` and
//! `lanes logs -f`: the command's or job's own status once it ran).

mod cli;
mod config;

use cli::{Cli, Command};
use lanes_server::ops::cli::{ConfigCommand, DbCommand, UserCommand};
use lanes_server::ops::db;
use lanes_server::ops::serve::{shutdown_signal, Application, ServeConfig};
use lanes_server::ops::user as commands;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse_layered();
    match cli.command {
        Command::Client(command) => lanes_cli::run(command, Cli::command_grouped),
        Command::Serve(args) => serve(*args),
        Command::Doctor(args) => ExitCode::from(lanes_server::ops::doctor::run(args.json) as u8),
        Command::User { command } => match command {
            UserCommand::Add(args) => user_add(args),
            UserCommand::List(args) => chore(commands::list_users(args)),
            UserCommand::Passwd(args) => match password(args.password_stdin, &args.user.username) {
                Ok(password) => chore(commands::set_password(args.user, password)),
                Err(e) => failed(e),
            },
            UserCommand::Enable(args) => chore(commands::set_enabled(args, true)),
            UserCommand::Disable(args) => chore(commands::set_enabled(args, false)),
        },
        Command::Db { command } => chore(async move {
            match command {
                DbCommand::Status(args) => db::status(args).await,
                DbCommand::Migrate(args) => db::migrate(args).await,
                DbCommand::Copy(args) => db::copy(args).await,
            }
        }),
        Command::Backup(args) => chore(db::backup(args)),
        Command::Restore(args) => chore(db::restore(args)),
        Command::Simulate(args) => simulate(args),
        Command::Config {
            command: ConfigCommand::Check(args),
        } => config::check(args),
        Command::ManPages { dir } => config::man_pages(&dir),
        Command::KeepLog(args) => ExitCode::from(lanes_server::jobs::keeper::run(
            args.limit, args.uid, args.gid,
        )),
    }
}

/// What `lanes simulate` can fail on: a file it reads or writes, or the replay itself.
#[derive(Debug, thiserror::Error)]
enum SimulateCommandError {
    #[error("cannot {verb} {path}: {error}")]
    File {
        verb: &'static str,
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Simulate(#[from] lanes_scheduling::report::SimulateError),
}

/// What a `lanes simulate` run replayed.
enum Replayed {
    Policies(lanes_scheduling::report::Report),
    Mixed(String),
    Forecast(String),
}

fn simulate(args: lanes_server::ops::cli::SimulateArgs) -> ExitCode {
    use lanes_scheduling::report::{self, Request, SimulateError, TraceText};
    use lanes_scheduling::simulate::Settings;
    let started = std::time::Instant::now();
    let result = (|| {
        let block = args.block.as_secs() as i64;
        let traces = args
            .trace
            .iter()
            .map(|path| {
                std::fs::read_to_string(path)
                    .map(|text| TraceText {
                        name: path.display().to_string(),
                        text,
                    })
                    .map_err(|error| SimulateCommandError::File {
                        verb: "read",
                        path: path.clone(),
                        error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(booked) = args.booked {
            let model = lanes_scheduling::lending::MixedModel {
                booked_gpus: booked,
                booking_width: args.booking_width,
                node_gpus: args.node_gpus,
                idle_fraction: args.idle_fraction,
                idle_spell_s: args.idle_spell.as_secs() as i64,
                idle_detect_s: args.idle_detect.as_secs() as i64,
                grace_s: args.grace.as_secs() as i64,
                preemptible_fraction: args.preemptible,
                seed: args.seed,
                ..Default::default()
            };
            let loads: Vec<Option<f64>> = args.load.iter().map(|&l| Some(l)).collect();
            let estimate = args.estimate.parse().map_err(SimulateError::Invalid)?;
            let table = report::lending_table(&traces, args.gpus, &loads, estimate, &model)?;
            return Ok(Replayed::Mixed(table));
        }
        let request = Request {
            traces,
            gpus: args.gpus,
            models: report::models(&args.policy, block)?,
            loads: args.load.iter().map(|&l| Some(l)).collect(),
            estimate: args.estimate.parse().map_err(SimulateError::Invalid)?,
            seed: args.seed,
            settings: Settings {
                half_life: args.half_life.as_secs() as i64,
                shares: report::shares(&args.share)?,
                ..Settings::default()
            },
        };
        if args.forecast {
            let table = report::forecast_table(
                &request,
                args.forecast_after.as_secs() as i64,
                args.forecast_every,
                args.forecast_samples,
            )?;
            return Ok(Replayed::Forecast(table));
        }
        let report = report::run(&request)?;
        let write = |path: &std::path::Path, text: String| {
            std::fs::write(path, text).map_err(|error| SimulateCommandError::File {
                verb: "write",
                path: path.to_path_buf(),
                error,
            })
        };
        if let Some(path) = &args.json {
            write(
                path,
                serde_json::to_string_pretty(&report).unwrap_or_default(),
            )?;
        }
        if let Some(path) = &args.plot {
            write(path, report.svg())?;
        }
        Ok::<_, SimulateCommandError>(Replayed::Policies(report))
    })();
    match result {
        Ok(Replayed::Mixed(table)) => {
            println!(
                "mixed model: {} of {} cards booked; replayed in {:.2} s",
                args.booked.unwrap_or_default(),
                args.gpus,
                started.elapsed().as_secs_f64()
            );
            print!("{table}");
            ExitCode::SUCCESS
        }
        Ok(Replayed::Forecast(table)) => {
            println!(
                "start-time forecasts on {} cards; replayed in {:.2} s",
                args.gpus,
                started.elapsed().as_secs_f64()
            );
            print!("{table}");
            ExitCode::SUCCESS
        }
        Ok(Replayed::Policies(report)) => {
            println!(
                "{} jobs ({} larger than {} cards left out); trace load {:.2}; estimates {}; \
                 replayed in {:.2} s",
                report.jobs,
                report.skipped,
                report.gpus,
                report.trace_load,
                report.estimate,
                started.elapsed().as_secs_f64()
            );
            print!("{}", report.table());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lanes: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs a database chore: its report on stdout, or one line on stderr and its exit status.
fn chore(
    work: impl std::future::Future<Output = Result<String, commands::CommandError>>,
) -> ExitCode {
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| commands::CommandError::Failed(e.to_string()))
        .and_then(|runtime| runtime.block_on(work));
    match result {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lanes: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn user_add(args: lanes_server::ops::cli::UserAddArgs) -> ExitCode {
    let result = password(args.password_stdin, &args.username).and_then(|password| {
        tokio::runtime::Runtime::new()
            .map_err(|e| commands::CommandError::Failed(e.to_string()))?
            .block_on(commands::add_user(args, password))
    });
    match result {
        Ok(user) => {
            println!("created {} {:?} (id {})", user.role, user.username, user.id);
            for note in commands::unix_account_notes(&user) {
                eprintln!("lanes: note: {note}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => failed(e),
    }
}

fn failed(e: commands::CommandError) -> ExitCode {
    eprintln!("lanes: error: {e}");
    ExitCode::from(e.exit_code())
}

/// A new password for `username`: the first line of standard input with `--password-stdin`,
/// otherwise asked for twice on the terminal without echo. Without a terminal and without
/// the flag it says how, rather than wait for input nobody was asked for.
fn password(from_stdin: bool, username: &str) -> Result<String, commands::CommandError> {
    use std::io::IsTerminal;
    if from_stdin {
        return commands::read_password(std::io::stdin().lock());
    }
    if !std::io::stdin().is_terminal() {
        return Err(commands::CommandError::Invalid(
            "no terminal to ask for the password on: pipe it in with --password-stdin".into(),
        ));
    }
    let ask = |prompt: &str| {
        rpassword::prompt_password(prompt)
            .map_err(|e| commands::CommandError::Invalid(format!("cannot read the password: {e}")))
    };
    let first = ask(&format!(
        "New password for {username} (at least {} characters): ",
        lanes_server::accounts::password::MIN_CHARS
    ))?;
    let checked = commands::read_password(first.as_bytes())?;
    if ask("The same again: ")? != checked {
        return Err(commands::CommandError::Invalid(
            "the two passwords differ; nothing was changed".into(),
        ));
    }
    Ok(checked)
}

fn serve(args: lanes_server::ops::cli::ServeArgs) -> ExitCode {
    init_tracing(args.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lanes: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let app = match ServeConfig::from_args(args) {
            Ok(config) => Application::build(config).await,
            Err(e) => Err(e),
        };
        let app = match app {
            Ok(app) => app,
            Err(e) => {
                eprintln!("lanes: error: {e}");
                return ExitCode::from(2);
            }
        };
        // Scripts and tests read this line to find the port when --listen ends in :0.
        println!("lanes: listening on http://{}", app.local_addr());
        match app.run_until(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lanes: error: server failed: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn init_tracing(format: lanes_server::ops::cli::LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    use std::io::IsTerminal;
    // Colour only for a person at a terminal: a pipe, a file or journald gets plain text
    // (and NO_COLOR, https://no-color.org, turns it off anywhere).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        lanes_server::ops::cli::LogFormat::Human => log.init(),
        // Each line one object, with the request span's fields (method, route) on it.
        lanes_server::ops::cli::LogFormat::Json => log.json().with_current_span(true).init(),
    }
}
