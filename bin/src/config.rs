//! `lanes config check`: the settings `lanes serve` would run with, as TOML one could paste into
//! the file, each line saying where its value came from; and `lanes man-pages`, for packaging.

use crate::cli::Cli;
use lanes_server::ops::cli::ConfigCheckArgs;
use lanes_server::ops::config_file::Source;
use std::ffi::OsString;
use std::process::ExitCode;

pub fn check(args: ConfigCheckArgs) -> ExitCode {
    let mut argv: Vec<OsString> = vec!["lanes".into(), "serve".into()];
    if let Some(path) = &args.config {
        argv.push("--config".into());
        argv.push(path.into());
    }
    let layered = match Cli::layered(argv) {
        Ok(layered) => layered,
        Err(e) => {
            eprintln!("lanes: {e}");
            return ExitCode::from(2);
        }
    };
    let command = Cli::command_grouped();
    let serve = Cli::serve_command();
    let Some(matches) = layered.matches.subcommand_matches("serve") else {
        return ExitCode::from(2);
    };
    // Written at once, and a closed pipe (`| head`) is no error.
    let mut out = match &layered.file {
        Some(path) => format!("# lanes serve, with {}\n", path.display()),
        None => format!(
            "# lanes serve, with no settings file ({} does not exist)\n",
            lanes_server::ops::config_file::DEFAULT_PATH
        ),
    };
    for arg in serve.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || matches!(id, "help" | "config") {
            continue;
        }
        let source = layered.source(&command, id);
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|values| values.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let secret = arg.is_hide_env_values_set();
        let many = matches!(arg.get_action(), clap::ArgAction::Append);
        let shown: Vec<String> = values
            .iter()
            .map(|v| toml_value(&shown(v, secret)))
            .collect();
        let line = match (shown.as_slice(), &source) {
            ([], _) | (_, Source::Unset) => format!("# {id} ="),
            ([one], _) if !many => format!("{id} = {one}"),
            (all, _) => format!("{id} = [{}]", all.join(", ")),
        };
        out.push_str(&format!("{line:<44} # {source}\n"));
    }
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    ExitCode::SUCCESS
}

/// A value as TOML: numbers and true/false bare, the rest quoted (the file takes either).
fn toml_value(text: &str) -> String {
    if text.parse::<i64>().is_ok() || matches!(text, "true" | "false") {
        text.to_string()
    } else {
        toml::Value::String(text.to_string()).to_string()
    }
}

/// A secret's value is not printed: a URL keeps all but its password, anything else is starred.
fn shown(value: &str, secret: bool) -> String {
    if !secret {
        return value.to_string();
    }
    match value.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((user, host)) => match user.split_once(':') {
                Some((name, _)) => format!("{scheme}://{name}:****@{host}"),
                None => value.to_string(),
            },
            None => value.to_string(),
        },
        None => "****".to_string(),
    }
}

/// Writes `lanes.1` and `lanes-COMMAND.1` (`lanes-user-add.1`, …) for every visible command.
pub fn man_pages(dir: &std::path::Path) -> ExitCode {
    fn write(command: clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
        let name = command.get_name().to_string();
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone()).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let full = format!("{name}-{}", sub.get_name());
            write(sub.clone().name(full), dir)?;
        }
        Ok(())
    }
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    match std::fs::create_dir_all(dir).and_then(|()| write(command, dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lanes: cannot write man pages into {}: {e}", dir.display());
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_never_printed() {
        assert_eq!(
            shown("postgres://lanes:hunter2@db/lanes", true),
            "postgres://lanes:****@db/lanes"
        );
        assert_eq!(
            shown("postgres://lanes@db/lanes", true),
            "postgres://lanes@db/lanes"
        );
        assert_eq!(shown("s3cret-token", true), "****");
        assert_eq!(shown("127.0.0.1:3000", false), "127.0.0.1:3000");
    }
}
