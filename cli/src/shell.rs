//! `lanes shell`: your login shell on this node, inside your booking. The node's Lanes moves
//! this very process into the booking's cgroup (walled to the booked cards) and records it as a
//! job of the booking; this process then takes the booking's variables and becomes your login
//! shell, so everything you start from it is accounted to the booking, gets its notice before
//! the slot ends and stops with it. It asks over a local socket, where the node knows you by
//! your process's uid; no login to the portal is needed.

use crate::error::{CliError, Result};
use crate::output;
use clap::Args;
use lanes_types::shell::{ShellAnswer, ShellRequest, DEFAULT_SOCKET};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ShellArgs {
    /// Join this booking of yours (default: your one active booking on this node).
    #[arg(long, short)]
    pub booking: Option<i64>,
    /// The node's socket for shells (the server's --shell-socket).
    #[arg(long, env = "LANES_SHELL_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Run this command (through your login shell) instead of an interactive shell.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

pub fn shell(args: ShellArgs) -> Result<ExitCode> {
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .ok_or_else(|| CliError::usage("cannot find your own account (getpwuid)"))?;
    let mut stream = UnixStream::connect(&args.socket).map_err(|e| {
        CliError::Unreachable(format!(
            "no Lanes listens for shells at {} ({e}): run lanes shell on a GPU node the portal \
             manages, or name its socket with --socket or LANES_SHELL_SOCKET",
            args.socket.display()
        ))
    })?;
    let unreachable =
        |e: std::io::Error| CliError::Unreachable(format!("the node's Lanes did not answer: {e}"));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut line = serde_json::to_string(&ShellRequest {
        booking: args.booking,
    })
    .unwrap_or_default();
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(unreachable)?;
    let joined = match serde_json::from_str::<ShellAnswer>(&answer) {
        Ok(ShellAnswer::Joined(joined)) => joined,
        Ok(ShellAnswer::Refused { message }) => return Err(CliError::refused(message)),
        Err(e) => {
            return Err(CliError::Unreachable(format!(
                "the node's answer is not one this lanes understands ({e}): is it the same version?"
            )))
        }
    };
    drop(stream);
    let end = joined
        .booking_end
        .with_timezone(&chrono::Local)
        .format("%a %-d %b %H:%M");
    output::say(&format!(
        "lanes: in booking #{} until {end} on {} (job {}); everything started here stops with it",
        joined.booking,
        joined.cards.join(", "),
        joined.job
    ));
    let shell = me.shell.to_string_lossy().into_owned();
    let shell = if shell.is_empty() {
        "/bin/sh".into()
    } else {
        shell
    };
    let name = shell.rsplit('/').next().unwrap_or("sh").to_string();
    let mut command = std::process::Command::new(&shell);
    if args.command.is_empty() {
        // A login shell, as login(1) starts one: its name with a leading dash.
        command.arg0(format!("-{name}"));
    } else {
        command
            .args(["-l", "-c", "exec \"$@\"", &name])
            .args(&args.command);
    }
    command.envs(&joined.environment);
    let failed = command.exec();
    Err(CliError::refused(format!("cannot start {shell}: {failed}")))
}
