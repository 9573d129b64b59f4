//! The settings file (`/etc/lanes/lanes.toml`, or `--config`): every `lanes serve` flag as a
//! TOML key of the flag's name with `_` for `-`. A flag beats its `LANES_*` variable, which beats
//! the file, which beats the default. The file's values go through the flags' own parsers, so
//! a value means the same written anywhere; an unknown key is an error, never ignored.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the package puts the file; read when it exists and no `--config` names another.
pub const DEFAULT_PATH: &str = "/etc/lanes/lanes.toml";

/// The id of the argument naming the file, in every command that reads one.
const CONFIG_ARG: &str = "config";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: unknown {}: {}", if .keys.len() == 1 { "key" } else { "keys" }, .keys.join(", "))]
    Unknown { path: PathBuf, keys: Vec<String> },
    #[error("{path}: {key}: {message}")]
    Value {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// Where one setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Environment(String),
    File(PathBuf),
    Default,
    Unset,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => write!(f, "flag"),
            Source::Environment(name) => write!(f, "environment {name}"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Default => write!(f, "default"),
            Source::Unset => write!(f, "not set"),
        }
    }
}

/// A command line parsed with the file's settings beneath it.
#[derive(Debug)]
pub struct Layered {
    pub matches: ArgMatches,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// Ids of the leaf command's arguments whose value the file gave.
    from_file: BTreeSet<String>,
}

impl Layered {
    /// Where the leaf command's argument `id` got its value.
    pub fn source(&self, command: &Command, id: &str) -> Source {
        let (_, leaf) = leaf(&self.matches);
        if self.from_file.contains(id) {
            return Source::File(self.file.clone().unwrap_or_default());
        }
        match leaf.value_source(id) {
            Some(ValueSource::CommandLine) => Source::Flag,
            Some(ValueSource::EnvVariable) => Source::Environment(
                leaf_command(command, &self.matches)
                    .get_arguments()
                    .find(|a| a.get_id() == id)
                    .and_then(|a| a.get_env())
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            Some(ValueSource::DefaultValue) => Source::Default,
            _ => Source::Unset,
        }
    }
}

/// Parses `argv` against `command`, then, when the chosen subcommand takes `--config`, puts
/// the file's settings under what flags and environment did not set. `settings` is the
/// command whose arguments the file describes (`lanes serve`): keys it lacks are unknown;
/// keys the chosen subcommand lacks (a poll interval for `lanes user add`) are not its concern.
pub fn parse(
    command: &Command,
    settings: &Command,
    argv: Vec<OsString>,
) -> Result<Layered, Box<dyn std::error::Error + Send + Sync>> {
    let first = command.clone().try_get_matches_from(&argv)?;
    let (names, leaf_matches) = leaf(&first);
    let sub = leaf_command(command, &first);
    if !sub.get_arguments().any(|a| a.get_id() == CONFIG_ARG) {
        return Ok(Layered {
            matches: first,
            file: None,
            from_file: BTreeSet::new(),
        });
    }
    let path = match leaf_matches.get_one::<PathBuf>(CONFIG_ARG) {
        Some(path) => path.clone(),
        None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
        None => {
            return Ok(Layered {
                matches: first,
                file: None,
                from_file: BTreeSet::new(),
            })
        }
    };
    let table = read(&path)?;
    check_keys(&path, &table, settings)?;

    let mut extra = Vec::new();
    let mut from_file = BTreeSet::new();
    for (key, value) in &table {
        let Some(arg) = sub.get_arguments().find(|a| a.get_id() == key.as_str()) else {
            continue;
        };
        let set_elsewhere = matches!(
            leaf_matches.value_source(key),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if set_elsewhere {
            continue;
        }
        let long = arg.get_long().unwrap_or(key.as_str());
        let bad = |message: String| ConfigError::Value {
            path: path.clone(),
            key: key.clone(),
            message,
        };
        let values = match value {
            toml::Value::Array(items) => items.iter().map(scalar).collect::<Result<Vec<_>, _>>(),
            other => scalar(other).map(|v| vec![v]),
        }
        .map_err(bad)?;
        let flags = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
        for text in &values {
            if flags {
                match text.as_str() {
                    "true" => extra.push(OsString::from(format!("--{long}"))),
                    "false" => {}
                    _ => return Err(bad("expected true or false".into()).into()),
                }
                continue;
            }
            // Each value through the flag's own parser, alone, so an error names the key.
            let flag = format!("--{long}={text}");
            Command::new("lanes")
                .no_binary_name(true)
                .arg(arg.clone().required(false).env(None::<&'static str>))
                .try_get_matches_from([flag.as_str()])
                .map_err(|e| bad(clap_message(&e)))?;
            extra.push(OsString::from(flag));
        }
        from_file.insert(key.clone());
    }
    if extra.is_empty() {
        return Ok(Layered {
            matches: first,
            file: Some(path),
            from_file,
        });
    }
    // The file's flags go right after the subcommand's name, before anything positional.
    let mut at = 1;
    for name in &names {
        if let Some(i) = argv[at..].iter().position(|a| a == name.as_str()) {
            at += i + 1;
        }
    }
    let mut layered = argv[..at].to_vec();
    layered.extend(extra);
    layered.extend_from_slice(&argv[at..]);
    let matches = command.clone().try_get_matches_from(layered)?;
    Ok(Layered {
        matches,
        file: Some(path),
        from_file,
    })
}

fn read(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })
}

/// Refuses keys that are no setting of `settings`, naming the nearest one for a typo.
fn check_keys(path: &Path, table: &toml::Table, settings: &Command) -> Result<(), ConfigError> {
    let known: Vec<String> = settings
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .filter(|id| id != CONFIG_ARG && id != "help")
        .collect();
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !known.contains(k))
        .map(|k| match nearest(k, &known) {
            Some(near) => format!("{k} (did you mean {near}?)"),
            None => k.clone(),
        })
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Unknown {
            path: path.to_path_buf(),
            keys: unknown,
        })
    }
}

fn nearest<'a>(key: &str, known: &'a [String]) -> Option<&'a str> {
    let key = key.replace('-', "_");
    known
        .iter()
        .map(|k| (strsim::levenshtein(&key, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

fn scalar(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!(
            "expected a string, a number or true/false, not {}",
            other.type_str()
        )),
    }
}

/// clap's message without its "error: " prefix and usage footer.
fn clap_message(e: &clap::Error) -> String {
    let text = e.kind().to_string();
    let rendered = e.render().to_string();
    rendered
        .lines()
        .next()
        .map(|l| l.trim_start_matches("error: ").to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or(text)
}

/// The names of the chosen subcommands, outermost first, and the innermost one's matches.
fn leaf(matches: &ArgMatches) -> (Vec<String>, &ArgMatches) {
    let mut names = Vec::new();
    let mut current = matches;
    while let Some((name, sub)) = current.subcommand() {
        names.push(name.to_string());
        current = sub;
    }
    (names, current)
}

fn leaf_command<'a>(command: &'a Command, matches: &ArgMatches) -> &'a Command {
    let (names, _) = leaf(matches);
    let mut current = command;
    for name in names {
        match current.find_subcommand(&name) {
            Some(sub) => current = sub,
            None => break,
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Arg;

    /// A command like `lanes serve`, its variables named for these tests alone; only
    /// [`the_environment_beats_the_file`] sets one, on a command of its own.
    fn command() -> Command {
        command_reading("LANES_CONFIG_TEST_LISTEN")
    }

    fn command_reading(listen_variable: &'static str) -> Command {
        Command::new("lanes").subcommand(
            Command::new("serve")
                .arg(
                    Arg::new("config")
                        .long("config")
                        .value_parser(clap::value_parser!(PathBuf)),
                )
                .arg(
                    Arg::new("listen")
                        .long("listen")
                        .env(listen_variable)
                        .default_value("127.0.0.1:3000")
                        .value_parser(clap::value_parser!(std::net::SocketAddr)),
                )
                .arg(
                    Arg::new("poll_interval")
                        .long("poll-interval")
                        .env("LANES_CONFIG_TEST_POLL")
                        .default_value("1s"),
                )
                .arg(
                    Arg::new("trusted_proxies")
                        .long("trusted-proxy")
                        .action(ArgAction::Append),
                )
                .arg(
                    Arg::new("secure_cookies")
                        .long("secure-cookies")
                        .action(ArgAction::SetTrue),
                ),
        )
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn run(args: &[&str]) -> Result<Layered, String> {
        run_on(command(), args)
    }

    fn run_on(cmd: Command, args: &[&str]) -> Result<Layered, String> {
        let settings = cmd.find_subcommand("serve").unwrap().clone();
        parse(&cmd, &settings, args.iter().map(OsString::from).collect()).map_err(|e| e.to_string())
    }

    fn value(layered: &Layered, id: &str) -> String {
        leaf(&layered.matches)
            .1
            .get_raw(id)
            .map(|v| {
                v.map(|s| s.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_file_beats_defaults_and_the_flag_beats_the_file() {
        let f = file(
            "listen = \"0.0.0.0:4000\"\npoll_interval = \"5s\"\n\
             trusted_proxies = [\"10.0.0.1\", \"10.0.0.2\"]\nsecure_cookies = true\n",
        );
        let path = f.path().to_str().unwrap();
        let layered = run(&["lanes", "serve", "--config", path, "--poll-interval", "2s"]).unwrap();
        let cmd = command();
        assert_eq!(value(&layered, "listen"), "0.0.0.0:4000");
        assert_eq!(
            layered.source(&cmd, "listen"),
            Source::File(f.path().into())
        );
        assert_eq!(value(&layered, "poll_interval"), "2s");
        assert_eq!(layered.source(&cmd, "poll_interval"), Source::Flag);
        assert_eq!(value(&layered, "trusted_proxies"), "10.0.0.1,10.0.0.2");
        assert!(leaf(&layered.matches).1.get_flag("secure_cookies"));
    }

    #[test]
    fn the_environment_beats_the_file() {
        // The variable is this test's own; no other test reads or writes it.
        const VARIABLE: &str = "LANES_CONFIG_TEST_ENV_LISTEN";
        std::env::set_var(VARIABLE, "127.0.0.1:5000");
        let f = file("listen = \"0.0.0.0:4000\"\n");
        let args = ["lanes", "serve", "--config", f.path().to_str().unwrap()];
        let layered = run_on(command_reading(VARIABLE), &args).unwrap();
        std::env::remove_var(VARIABLE);
        let cmd = command_reading(VARIABLE);
        assert_eq!(value(&layered, "listen"), "127.0.0.1:5000");
        assert_eq!(
            layered.source(&cmd, "listen"),
            Source::Environment(VARIABLE.into())
        );
        assert_eq!(layered.source(&cmd, "poll_interval"), Source::Default);
        assert_eq!(layered.source(&cmd, "trusted_proxies"), Source::Unset);
    }

    #[test]
    fn unknown_keys_are_named_with_the_nearest_setting() {
        let f = file("poll_intervall = \"5s\"\ncolour = \"blue\"\n");
        let err = run(&["lanes", "serve", "--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(err.contains("unknown keys"), "{err}");
        assert!(
            err.contains("poll_intervall (did you mean poll_interval?)"),
            "{err}"
        );
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn a_bad_value_names_its_key_and_a_bad_file_its_line() {
        let f = file("listen = \"somewhere\"\n");
        let err = run(&["lanes", "serve", "--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(err.contains(": listen: "), "{err}");
        let f = file("listen = [[]]\n");
        let err = run(&["lanes", "serve", "--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(err.contains("listen: expected a string"), "{err}");
        let f = file("listen = \n");
        let err = run(&["lanes", "serve", "--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(err.contains("not valid TOML"), "{err}");
        let err = run(&["lanes", "serve", "--config", "/nonexistent/lanes.toml"]).unwrap_err();
        assert!(err.contains("cannot read /nonexistent/lanes.toml"), "{err}");
    }
}

#[cfg(test)]
mod shipped {
    /// The file the package installs names every setting of `lanes serve`, and nothing else.
    #[test]
    fn the_shipped_file_documents_every_setting_and_only_settings() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/lanes.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let uncommented: String = text
            .lines()
            .map(|line| {
                let bare = line.trim_start_matches('#');
                let key = bare.split('=').next().unwrap_or_default().trim();
                let is_setting = bare.contains(" = ")
                    && !key.is_empty()
                    && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
                if is_setting {
                    bare.split(" #").next().unwrap_or(bare).to_string()
                } else {
                    String::new()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let table: toml::Table = uncommented.parse().unwrap();
        let serve = crate::ops::cli::serve_command();
        super::check_keys(std::path::Path::new(path), &table, &serve).unwrap();
        for arg in serve.get_arguments() {
            let id = arg.get_id().as_str();
            if arg.is_hide_set() || matches!(id, "help" | "config") {
                continue;
            }
            assert!(
                table.contains_key(id),
                "deploy/lanes.toml does not mention {id}"
            );
        }
    }
}
