//! The terminal client: what a lab member types in SSH or tmux. `lanes login` keeps a token,
//! `lanes status` shows every card, `lanes book` / `lanes run` / `lanes submit` take cards, and
//! `lanes history` / `lanes report` look back. Every command talks to the portal through the
//! typed client crate, prints a table (or `--json`), and exits 2 for bad usage, 1 when the
//! server refused, 3 when it cannot be reached.

mod account;
mod bookings;
pub mod config;
pub mod error;
mod jobs;
mod jupyter;
mod looks;
pub mod output;
mod run;
mod shell;
mod status;
pub mod time;

use clap::{Args, Subcommand};
use error::{CliError, Result};
use std::process::ExitCode;

/// Flags every client command takes.
#[derive(Clone, Debug, Default, Args)]
pub struct Common {
    /// Print the answer as JSON (the API's own shapes) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Log in to a portal; keeps an API token for this host in ~/.config/lanes/config.toml.
    #[command(after_help = "Example:\n  lanes login http://gpu-portal:3000")]
    Login(account::LoginArgs),
    /// Revoke this host's token and forget the login.
    #[command(after_help = "Example:\n  lanes logout")]
    Logout(Common),
    /// Every card of every node: use, memory, temperature, power, holder, next booking, processes.
    #[command(after_help = "Examples:\n  lanes status\n  lanes status --node gpu2 --watch")]
    Status(status::StatusArgs),
    /// Book cards for a slot (now, at a time, or the earliest that fits).
    #[command(
        after_help = "Examples:\n  lanes book --gpus 2 --for 4h\n  lanes book --gpus 1 --at 14:00 --note 'ablation run'\n  lanes book --gpus 4 --for 8h --earliest"
    )]
    Book(bookings::BookArgs),
    /// The earliest windows in which N cards of one node are free for a duration.
    #[command(after_help = "Example:\n  lanes slots --gpus 2 --for 4h --to 'tomorrow 18:00'")]
    Slots(bookings::SlotsArgs),
    /// Your bookings that are active or upcoming (`--all`: everyone's).
    #[command(after_help = "Examples:\n  lanes bookings\n  lanes bookings --all")]
    Bookings(bookings::BookingsArgs),
    /// Move a booking's end later.
    #[command(after_help = "Example:\n  lanes extend 42 1h")]
    Extend(bookings::ExtendArgs),
    /// Give back an active booking now (the rest of its slot is freed).
    #[command(after_help = "Example:\n  lanes release 42")]
    Release(bookings::IdArgs),
    /// Cancel a booking that has not started.
    #[command(after_help = "Example:\n  lanes cancel 42")]
    Cancel(bookings::IdArgs),
    /// Take back the cards your booking lends to a queue job (it gets SIGTERM, and goes back to
    /// the queue within the grace). Starting work on them does the same by itself.
    #[command(after_help = "Example:\n  lanes reclaim 42")]
    Reclaim(bookings::IdArgs),
    /// Run a command here, on this node's booked cards: your booking, or N cards booked now and
    /// released when the command ends.
    #[command(
        after_help = "Examples:\n  lanes run --gpus 2 --for 2h -- python3 train.py\n  lanes run --booking 42 -- ./eval.sh\n  lanes run -- python3 -c 'import torch; print(torch.cuda.device_count())'"
    )]
    Run(run::RunArgs),
    /// Print the `export` lines that put this shell on your booked cards.
    #[command(after_help = "Example:\n  eval \"$(lanes env)\"")]
    Env(run::EnvArgs),
    /// Your login shell on this node, inside your booking: its cards only, accounted to it,
    /// stopped with it (also the remote command of an editor's SSH session).
    #[command(
        after_help = "Examples:\n  lanes shell\n  lanes shell --booking 42\n  lanes shell -- python3 train.py"
    )]
    Shell(shell::ShellArgs),
    /// Your own Jupyter on your booked cards, through the portal: started as you, from your
    /// login environment, inside the booking (its cards only), ended with it or when idle.
    #[command(
        after_help = "Examples:\n  lanes jupyter --gpus 2 --for 4h\n  lanes jupyter --booking 42"
    )]
    Jupyter(jupyter::JupyterArgs),
    /// Submit a job: to the queue (it starts when cards free up) or into a booking.
    #[command(
        after_help = "Examples:\n  lanes submit --gpus 2 --time 6h -- python3 train.py --epochs 90\n  lanes submit --booking 42 --follow -- ./eval.sh"
    )]
    Submit(jobs::SubmitArgs),
    /// The queue: waiting and running jobs, their place and expected start, and fair shares.
    #[command(after_help = "Example:\n  lanes queue")]
    Queue(Common),
    /// Your jobs, newest first (`--all`: everyone's, for admins).
    #[command(after_help = "Example:\n  lanes jobs")]
    Jobs(jobs::JobsArgs),
    /// A job's output; `-f` follows it live and exits with the job's status.
    #[command(after_help = "Examples:\n  lanes logs 17\n  lanes logs -f 17")]
    Logs(jobs::LogsArgs),
    /// Cancel a job (a waiting one leaves the queue; a running one is stopped).
    #[command(after_help = "Example:\n  lanes cancel-job 17")]
    CancelJob(bookings::IdArgs),
    /// Each card's utilization (or another metric) over a past range, as a small chart.
    #[command(
        after_help = "Examples:\n  lanes history --since 24h\n  lanes history --node gpu2 --gpu 3 --metric memory"
    )]
    History(looks::HistoryArgs),
    /// Who booked and used how many GPU-hours over a range.
    #[command(
        after_help = "Examples:\n  lanes report\n  lanes report --from 2026-11-01 --to 2026-12-01 --csv > nov.csv"
    )]
    Report(looks::ReportArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  lanes completions bash > ~/.local/share/bash-completion/completions/lanes\n  lanes completions zsh > ~/.zfunc/_lanes"
    )]
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

impl ClientCommand {
    /// The names of the client commands, to group them in the top-level help.
    pub fn names() -> Vec<String> {
        use clap::Subcommand as _;
        let command = Self::augment_subcommands(clap::Command::new("lanes"));
        command
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect()
    }
}

/// Runs a client command; `full` gives the whole command line (for completions).
pub fn run(command: ClientCommand, full: impl FnOnce() -> clap::Command) -> ExitCode {
    // Like every Unix filter: a reader that stops early (`lanes bookings | head`) ends this
    // process quietly, where Rust's default (SIGPIPE ignored) made `println!` panic.
    // SAFETY: at start, before any thread exists; SIG_DFL needs no handler code.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
    if let ClientCommand::Completions(args) = &command {
        // Written whole, once: a reader that stops early (`| head`) is not an error.
        let mut script = Vec::new();
        clap_complete::generate(args.shell, &mut full(), "lanes", &mut script);
        use std::io::Write;
        return match std::io::stdout().write_all(&script) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                output::say(&format!("lanes: error: {e}"));
                ExitCode::FAILURE
            }
            _ => ExitCode::SUCCESS,
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            output::say(&format!("lanes: error: cannot start: {e}"));
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(command)) {
        Ok(code) => code,
        Err(e) => {
            output::say(&format!("lanes: error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

async fn dispatch(command: ClientCommand) -> Result<ExitCode> {
    let done = |()| ExitCode::SUCCESS;
    match command {
        ClientCommand::Login(args) => account::login(args).await.map(done),
        ClientCommand::Logout(common) => account::logout(common).await.map(done),
        ClientCommand::Status(args) => status::status(args).await.map(done),
        ClientCommand::Book(args) => bookings::book(args).await.map(done),
        ClientCommand::Slots(args) => bookings::slots(args).await.map(done),
        ClientCommand::Bookings(args) => bookings::list(args).await.map(done),
        ClientCommand::Extend(args) => bookings::extend(args).await.map(done),
        ClientCommand::Release(args) => bookings::withdraw(args, bookings::Withdraw::Release)
            .await
            .map(done),
        ClientCommand::Cancel(args) => bookings::withdraw(args, bookings::Withdraw::Cancel)
            .await
            .map(done),
        ClientCommand::Reclaim(args) => bookings::reclaim(args).await.map(done),
        ClientCommand::Run(args) => run::run(args).await,
        ClientCommand::Env(args) => run::env(args).await.map(done),
        ClientCommand::Shell(args) => shell::shell(args),
        ClientCommand::Jupyter(args) => jupyter::jupyter(args).await,
        ClientCommand::Submit(args) => jobs::submit(args).await,
        ClientCommand::Queue(common) => jobs::queue(common).await.map(done),
        ClientCommand::Jobs(args) => jobs::list(args).await.map(done),
        ClientCommand::Logs(args) => jobs::logs(args).await,
        ClientCommand::CancelJob(args) => jobs::cancel(args).await.map(done),
        ClientCommand::History(args) => looks::history(args).await.map(done),
        ClientCommand::Report(args) => looks::report(args).await.map(done),
        ClientCommand::Completions(_) => unreachable!("handled before the runtime starts"),
    }
}

/// Parses a number of cards: a whole number, at least 1.
pub(crate) fn count_arg(text: &str) -> std::result::Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("the number of cards is a whole number, at least 1".into()),
    }
}

/// Parses a duration flag (`4h`, `90m`), as a usage error.
pub(crate) fn duration_arg(text: &str) -> std::result::Result<chrono::Duration, String> {
    let d = lanes_types::units::parse_duration(text)?;
    if d <= chrono::Duration::zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// Asks a yes/no question on the terminal; `default` when the answer is empty.
pub(crate) fn confirm(question: &str, default: bool) -> Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(format!(
            "{question} needs an answer, and there is no terminal to ask on: pass -y"
        )));
    }
    let hint = if default { "[Y/n]" } else { "[y/N]" };
    eprint!("{question} {hint} ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(match answer.trim().to_ascii_lowercase().as_str() {
        "" => default,
        "y" | "yes" => true,
        _ => false,
    })
}
