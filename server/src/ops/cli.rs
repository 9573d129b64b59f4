//! The arguments of the operator commands (`lanes serve`, `doctor`, `user`, `db`, `backup`,
//! `restore`, `config`, `simulate`), which the `lanes` program's command line (`bin/`) puts
//! beside the terminal client's. Every `serve` flag can also come from a `LANES_*`
//! environment variable, so the same binary runs from a shell, a systemd unit or a container.

use crate::telemetry::GpuSelection;
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective settings of `lanes serve` as TOML, each with its source (flag,
    /// environment, file, default); fails naming any unknown key or bad value.
    Check(ConfigCheckArgs),
}

#[derive(Debug, Args)]
pub struct ConfigCheckArgs {
    /// The settings file [default: /etc/lanes/lanes.toml when it exists].
    #[arg(long, env = "LANES_CONFIG")]
    pub config: Option<PathBuf>,
}

/// `lanes keep-log`: started by the runner for each stream of a job.
#[derive(Debug, Args)]
pub struct KeepLogArgs {
    /// Bytes to keep before the marker line.
    #[arg(long)]
    pub limit: u64,
    /// Become this user (and group) before reading anything.
    #[arg(long, requires = "gid")]
    pub uid: Option<u32>,
    #[arg(long, requires = "uid")]
    pub gid: Option<u32>,
}

/// `lanes simulate`: see docs/scheduling.md.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Trace files (`job_id,submit_s,gpus,duration_s,group`), comma-separated; merged.
    #[arg(long, value_delimiter = ',', required = true)]
    pub trace: Vec<PathBuf>,
    /// Cards in the pool; jobs needing more are left out (and counted).
    #[arg(long)]
    pub gpus: u32,
    /// fifo, backfill, fairshare, static, or all; comma-separated for several.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub policy: Vec<String>,
    /// Rescale arrivals so the offered load is this fraction of the pool; comma-separated for
    /// several [default: the trace's own timing].
    #[arg(long, value_delimiter = ',')]
    pub load: Vec<f64>,
    /// Time limits users give: exact (the run time) or noisy (run time × [1, 3)).
    #[arg(long, default_value = "exact")]
    pub estimate: String,
    /// Seed of the noisy estimates.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Block size of the static model (bookings are whole blocks on a grid of this size).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub block: Duration,
    /// Fair-share half-life of usage.
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub half_life: Duration,
    /// Fair shares of groups, GROUP=SHARES (repeatable); groups not named have 1.
    #[arg(long)]
    pub share: Vec<String>,
    /// Also write every replay's figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw utilization over time per policy as SVG here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The mixed model instead of the policies: this many of the cards are held by bookings
    /// whose holders leave them idle part of the time; the trace is the queue's, on the rest
    /// (--load is of those). Replayed without and with lending idle booked cards.
    #[arg(long)]
    pub booked: Option<u32>,
    /// Mixed model: share of booked card-time the holders leave idle.
    #[arg(long, default_value_t = 0.5)]
    pub idle_fraction: f64,
    /// Mixed model: mean idle spell of a holder.
    #[arg(long, default_value = "2h", value_parser = humantime::parse_duration)]
    pub idle_spell: Duration,
    /// Mixed model: how long a booking sits idle before it lends (the watchdog's idle window).
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub idle_detect: Duration,
    /// Mixed model: cards per booking.
    #[arg(long, default_value_t = 4)]
    pub booking_width: u32,
    /// Mixed model: cards per node (bookings fill nodes in turn; a loan across bookings takes
    /// cards of one node's).
    #[arg(long, default_value_t = 8)]
    pub node_gpus: u32,
    /// Mixed model: SIGTERM to SIGKILL when a holder takes cards back.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Instead of the policies' figures: how often start-time forecasts came true. Jobs
    /// submitted after --forecast-after are forecast the moment they arrive, as the server
    /// forecasts (the current queue replayed with run times drawn from the last 1,000 jobs'),
    /// and compared with when they started.
    #[arg(long)]
    pub forecast: bool,
    /// Forecast only jobs submitted this long after the trace's first (the earlier weeks are
    /// the history).
    #[arg(long, default_value = "14d", value_parser = humantime::parse_duration)]
    pub forecast_after: Duration,
    /// Forecast every Nth job of the held-out part.
    #[arg(long, default_value_t = 25)]
    pub forecast_every: usize,
    /// Replays per forecast.
    #[arg(long, default_value_t = lanes_scheduling::forecast::SAMPLES)]
    pub forecast_samples: u32,
    /// Mixed model: share of queue jobs submitted as preemptible.
    #[arg(long, default_value_t = 1.0)]
    pub preemptible: f64,
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// List this Lanes' migrations and whether the database has each.
    Status(DbArgs),
    /// Apply the migrations the database lacks (`lanes serve` also does at start).
    Migrate(DbArgs),
    /// Copy everything from one database into a new, empty one, checked table by table.
    Copy(CopyArgs),
}

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The database to copy (sqlite://PATH or postgres://…); read in one snapshot, unchanged.
    #[arg(long)]
    pub from: String,
    /// The database to fill: migrated first, refused unless it is empty.
    #[arg(long)]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The file to write; never overwritten.
    #[arg(long)]
    pub to: PathBuf,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// A file `lanes backup` wrote.
    #[arg(long)]
    pub from: PathBuf,
    /// Replace a database that exists (the one replaced is kept beside it, renamed).
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create an account. On a terminal the password is asked for twice, without echo; a
    /// script pipes it in with --password-stdin.
    Add(UserAddArgs),
    /// List the accounts: name, role, Unix account, e-mail, whether they may sign in.
    List(UserListArgs),
    /// Set a new password for an account; its sessions end and its tokens are revoked.
    Passwd(UserPasswdArgs),
    /// Let a disabled account sign in again.
    Enable(UserNameArgs),
    /// Stop an account from signing in; its sessions end and its tokens are revoked.
    Disable(UserNameArgs),
}

#[derive(Debug, Args)]
pub struct UserListArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Print the accounts as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UserNameArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The account's login name.
    pub username: String,
}

#[derive(Debug, Args)]
pub struct UserPasswdArgs {
    #[command(flatten)]
    pub user: UserNameArgs,
    /// Read the new password from the first line of standard input instead of asking.
    #[arg(long)]
    pub password_stdin: bool,
}

/// Where the database is: the same options, variables and defaults as `lanes serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct DbArgs {
    /// Settings file, beneath flags and LANES_* variables [default: /etc/lanes/lanes.toml when
    /// it exists]. Keys are the flags' names with `_` for `-`.
    #[arg(long, env = "LANES_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for the database and job files [default: $XDG_DATA_HOME/lanes or ~/.local/share/lanes].
    #[arg(long, env = "LANES_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database URL [default: sqlite://DATA_DIR/lanes.db].
    #[arg(long, env = "LANES_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct UserAddArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Login name: lowercase letters, digits, '.', '_' or '-', starting with a letter.
    #[arg(long)]
    pub username: String,
    /// Name shown in the UI [default: the username].
    #[arg(long)]
    pub display_name: Option<String>,
    #[arg(long)]
    pub email: Option<String>,
    /// Unix account the user's jobs run as (never root).
    #[arg(long)]
    pub unix_user: Option<String>,
    /// Make the user an admin.
    #[arg(long)]
    pub admin: bool,
    /// Read the password from the first line of standard input instead of asking for it on
    /// the terminal (passwords never go on the command line).
    #[arg(long)]
    pub password_stdin: bool,
}

/// `lanes serve`'s arguments as a command of their own: the settings a file may hold.
pub fn serve_command() -> clap::Command {
    ServeArgs::augment_args(clap::Command::new("serve"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LANES_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub db: DbArgs,
    /// GPU source: auto (NVML if the driver loads, else a simulated 8-GPU node), nvml, sim:N,
    /// or none (a portal that serves the web for the pool and runs no cards). `nvml:0,2` (or
    /// UUIDs; `sim:N:0,2` alike) manages only those cards; the others are shown as unmanaged.
    #[arg(long, env = "LANES_GPUS", default_value = "auto")]
    pub gpus: GpuSelection,
    /// Time between two readings of every card (e.g. 1s, 500ms).
    #[arg(long, env = "LANES_POLL_INTERVAL", default_value = "1s", value_parser = parse_interval)]
    pub poll_interval: Duration,
    /// Time between two readings of the process lists, which cost more than counters.
    #[arg(long, env = "LANES_PROCESS_INTERVAL", default_value = "2s", value_parser = parse_interval)]
    pub process_interval: Duration,
    /// Name of this node [default: the host name].
    #[arg(long, env = "LANES_NODE_NAME")]
    pub node_name: Option<String>,
    /// Serve the node's name even while another process still serves it (that one stops at
    /// its next heartbeat). Without it, a name in use is refused.
    #[arg(long)]
    pub take_over: bool,
    /// A node silent for this long is unreachable: shown greyed, and nothing new is placed on
    /// its cards (several nodes on one PostgreSQL).
    #[arg(long, env = "LANES_NODE_TIMEOUT", default_value = "15s", value_parser = parse_node_timeout)]
    pub node_timeout: Duration,
    /// The address other people reach this node's web server at, as shown on the nodes list
    /// [default: --listen].
    #[arg(long, env = "LANES_ADVERTISE")]
    pub advertise: Option<String>,
    /// Serve the web assets from this folder (as `cargo xtask site` writes target/site) instead
    /// of those embedded in the binary: for working on the pages.
    #[arg(long, env = "LANES_SITE_ROOT")]
    pub site_root: Option<PathBuf>,
    /// Seed of the simulated fleet.
    #[arg(long, env = "LANES_SIM_SEED", default_value_t = 1)]
    pub sim_seed: u64,
    /// Require this bearer token on /metrics (for Prometheus' `authorization` setting).
    #[arg(long, env = "LANES_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Mark the session cookie Secure: set it when serving over TLS or behind a TLS proxy.
    #[arg(long, env = "LANES_SECURE_COOKIES")]
    pub secure_cookies: bool,
    /// Address of a reverse proxy in front of Lanes, whose X-Forwarded-For header then names
    /// the client (for login lockout and the audit log). Repeat, or comma-separate in the env.
    #[arg(
        long = "trusted-proxy",
        env = "LANES_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The device wall around jobs: `cgroup` (each job in a cgroup that admits only its booked
    /// cards' device files, where the host allows it, else the mask alone, said at start),
    /// `cgroup-v2` or `cgroup-v1` (that one or fail), or `none` (the mask alone).
    #[arg(long, env = "LANES_ISOLATION", value_enum, default_value_t = crate::jobs::wall::Isolation::Cgroup)]
    pub isolation: crate::jobs::wall::Isolation,
    /// The cgroup under which jobs' cgroups are made (in each cgroup v1 hierarchy alike).
    #[arg(long, env = "LANES_CGROUP_PARENT", default_value = crate::jobs::wall::DEFAULT_PARENT)]
    pub cgroup_parent: String,
    /// Allow jobs whose container runs with Docker (`--runtime docker`). Its daemon runs as
    /// root, so this is off unless the admin turns it on; rootless Podman and Apptainer need
    /// no leave.
    #[arg(long, env = "LANES_DOCKER_JOBS")]
    pub docker_jobs: bool,
    /// Docker jobs may share the host's network and IPC namespaces (`--network=host`,
    /// `--ipc=host`), as rootless Podman jobs do.
    #[arg(long, env = "LANES_DOCKER_HOST_NAMESPACES")]
    pub docker_host_namespaces: bool,
    /// Directories any member's container may mount (shared data sets), besides their own.
    /// Repeat, or comma-separate in the env.
    #[arg(
        long = "container-shared-dir",
        env = "LANES_CONTAINER_SHARED_DIRS",
        value_delimiter = ','
    )]
    pub container_shared_dirs: Vec<PathBuf>,
    /// How long a user's login profile may take to set up a job's environment.
    #[arg(long, env = "LANES_PROFILE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub profile_timeout: Duration,
    /// Character devices standing for the simulated cards, in order (e.g.
    /// /dev/null,/dev/zero): for trying the device wall without a GPU.
    #[arg(
        long,
        env = "LANES_SIM_DEVICE_FILES",
        value_delimiter = ',',
        hide = true
    )]
    pub sim_device_files: Vec<PathBuf>,
    /// List a real process that holds a simulated card's device file open on that card (its
    /// owner and container read from /proc), as the driver lists a CUDA process.
    #[arg(long, env = "LANES_SIM_DEVICE_HOLDERS", hide = true)]
    pub sim_device_holders: bool,
    /// Time a job gets between SIGTERM and SIGKILL when its slot ends or it is cancelled.
    #[arg(long, env = "LANES_JOB_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub job_grace: Duration,
    /// Where jobs' notice files are written (`LANES_NOTICE_FILE`): a directory the server
    /// owns that every job user may pass through (made 0711) [default: /run/lanes/notices as
    /// root, else notices in the data directory].
    #[arg(long, env = "LANES_NOTICE_DIR")]
    pub notice_dir: Option<PathBuf>,
    /// The local socket `lanes shell` asks at: it puts a member's shell inside their booking
    /// on this node, knowing them by the connecting process's uid [default:
    /// /run/lanes/shell.sock as root, else shell.sock in the data directory; an empty value
    /// turns shells off].
    #[arg(long, env = "LANES_SHELL_SOCKET", value_parser = path_or_nothing)]
    pub shell_socket: Option<PathBuf>,
    /// A session unused this long ends (e.g. 8h).
    #[arg(long, env = "LANES_SESSION_IDLE", default_value = "8h", value_parser = humantime::parse_duration)]
    pub session_idle: Duration,
    /// A session ends this long after login however busy (e.g. 7days).
    #[arg(long, env = "LANES_SESSION_MAX_AGE", default_value = "7days", value_parser = humantime::parse_duration)]
    pub session_max_age: Duration,
    /// How long raw readings (one per card per second) are kept.
    #[arg(long, env = "LANES_KEEP_RAW", default_value = "48h", value_parser = humantime::parse_duration)]
    pub keep_raw: Duration,
    /// How long minute buckets are kept.
    #[arg(long, env = "LANES_KEEP_MINUTES", default_value = "90days", value_parser = humantime::parse_duration)]
    pub keep_minutes: Duration,
    /// How long hour buckets are kept: a duration, or "forever".
    #[arg(long, env = "LANES_KEEP_HOURS", default_value = "forever", value_parser = parse_keep)]
    pub keep_hours: Keep,
    /// Make this simulated card fail every reading (to see how an unhealthy card looks).
    #[arg(long, env = "LANES_SIM_FAULTY_GPU", hide = true)]
    pub sim_faulty_gpu: Option<u32>,
    /// Make this simulated card run hot at its power cap (to see alerts fire).
    #[arg(long, env = "LANES_SIM_HOT_GPU", hide = true)]
    pub sim_hot_gpu: Option<u32>,
    /// Bytes kept of each of a job's output streams (stdout, stderr); past it the log ends
    /// with a marker line and the job goes on (e.g. 1GiB, 200MB).
    #[arg(long, env = "LANES_JOB_LOG_LIMIT", default_value = "1GiB", value_parser = parse_bytes)]
    pub job_log_limit: u64,
    /// Client connections open at once, at most (more get 503 and are closed); lowered to fit
    /// the descriptor limit with a reserve for the database and job logs.
    #[arg(long, env = "LANES_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Connections one client address may hold open at once, as a fraction of
    /// --max-connections (4: a quarter; at least 4). Trusted proxies are exempt. Raise it when
    /// a whole lab reaches Lanes through one NAT address without a proxy.
    #[arg(long, env = "LANES_CONNECTIONS_PER_ADDRESS_SHARE", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub connections_per_address_share: u16,
    /// A connection with no traffic either way this long is closed (e.g. 90s).
    #[arg(long, env = "LANES_IDLE_TIMEOUT", default_value = "90s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// How the log on stderr is written: `human` lines, or `json`, one object per line, for a
    /// log collector. RUST_LOG picks what is logged.
    #[arg(long, env = "LANES_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub directory: crate::directory::DirectoryArgs,
    /// Random jobs of made-up users on the simulated cards (false: cards stay idle unless a
    /// Lanes job runs on them, which makes enforcement easy to watch).
    #[arg(long, env = "LANES_SIM_BACKGROUND", default_value_t = true, action = clap::ArgAction::Set)]
    pub sim_background: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A size like `1GiB`, `200MB`, `64KiB` or a plain number of bytes (at least 4 KiB).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let bytes = lanes_types::units::parse_bytes(text)?;
    if bytes < 4096 {
        return Err("must be at least 4KiB".into());
    }
    Ok(bytes)
}

/// Shortest and longest poll interval: faster wastes the host, slower is not "live".
const INTERVAL_RANGE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(60));

fn parse_node_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(2) || d > Duration::from_secs(3600) {
        return Err("the node timeout must be from 2s to 1h".into());
    }
    Ok(d)
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 1s, 500ms)"))?;
    if d < INTERVAL_RANGE.0 || d > INTERVAL_RANGE.1 {
        return Err(format!(
            "must be between {} and {}",
            humantime::format_duration(INTERVAL_RANGE.0),
            humantime::format_duration(INTERVAL_RANGE.1)
        ));
    }
    Ok(d)
}

/// A path where an empty value is one too: it says "none" (clap's own refuses it as missing).
fn path_or_nothing(s: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_shell_socket_flag_turns_shells_off() {
        use clap::FromArgMatches;
        let parsed = |argv: &[&str]| {
            let matches = serve_command().try_get_matches_from(argv).unwrap();
            ServeArgs::from_arg_matches(&matches).unwrap().shell_socket
        };
        assert_eq!(
            parsed(&["serve", "--shell-socket", ""]),
            Some(PathBuf::new())
        );
        assert_eq!(parsed(&["serve", "--shell-socket="]), Some(PathBuf::new()));
        assert_eq!(
            parsed(&["serve", "--shell-socket", "/run/x.sock"]),
            Some(PathBuf::from("/run/x.sock"))
        );
    }

    #[test]
    fn intervals_take_human_units_within_bounds() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("5ms").unwrap_err().contains("between"));
        assert!(parse_interval("2h").unwrap_err().contains("between"));
        assert!(parse_interval("fast").is_err());
    }

    #[test]
    fn serve_defaults_match_the_documentation() {
        use clap::FromArgMatches;
        let matches = serve_command().try_get_matches_from(["serve"]).unwrap();
        let args = ServeArgs::from_arg_matches(&matches).unwrap();
        assert_eq!(args.listen, "127.0.0.1:3000".parse().unwrap());
        assert_eq!(
            args.gpus,
            GpuSelection::of(crate::telemetry::SourceChoice::Auto)
        );
        assert_eq!(args.poll_interval, Duration::from_secs(1));
    }

    #[test]
    fn a_bad_gpu_source_is_a_usage_error() {
        let err = serve_command()
            .try_get_matches_from(["serve", "--gpus", "sim:x"])
            .unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("expected auto, nvml, nvml:CARDS"));
    }
}

/// A retention: a duration, or forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keep(pub Option<Duration>);

fn parse_keep(s: &str) -> Result<Keep, String> {
    if s == "forever" {
        return Ok(Keep(None));
    }
    humantime::parse_duration(s)
        .map(|d| Keep(Some(d)))
        .map_err(|e| format!("{e}: expected a duration such as 400days, or forever"))
}
