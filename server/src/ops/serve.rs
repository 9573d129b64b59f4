//! Building and running the server: bind first (so a busy port fails before anything is
//! written), then the data dir, the database, the GPU source and the poller.

use crate::accounts::session::SessionPolicy;
use crate::enforce::Enforcer;
use crate::history::HistorySettings;
use crate::history::Retention;
use crate::http::{self, AppState, AuthSettings};
use crate::notify::{Notifier, Retry};
use crate::ops::cli::ServeArgs;
use crate::ops::data_dir::{prepare_data_dir, resolve_db};
use crate::store::{Store, StoreError};
use crate::telemetry::history_writer;
use crate::telemetry::hub::Hub;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::poller::{PollSettings, Poller, Sampler};
use crate::telemetry::{self, GpuSelection, OpenError, SimOptions};
use lanes_types::SourceKind;
use leptos::prelude::LeptosOptions;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A configuration or environment problem: the process exits with status 2 and this line.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    DataDir(#[from] crate::ops::data_dir::DataDirError),
    #[error(transparent)]
    Directory(#[from] crate::directory::config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gpus(#[from] OpenError),
    #[error("cannot tell this host's name: pass --node-name")]
    NodeName,
    #[error(
        "SQLite keeps one node; {0} needs several, on PostgreSQL (--database-url postgres://…)"
    )]
    SingleNode(&'static str),
    #[error(transparent)]
    Wall(#[from] crate::jobs::wall::WallError),
    #[error(transparent)]
    Site(#[from] crate::http::site::SiteError),
    #[error(transparent)]
    Busy(#[from] crate::ops::data_dir::ServeLockError),
    #[error(
        "another Lanes process serves node {name} (its last heartbeat {ago_s:.1} s ago, and \
         still beating); stop it, give this one another --node-name, or pass --take-over to \
         replace it"
    )]
    NodeInUse { name: String, ago_s: f64 },
    #[error(
        "node {0} serves GPUs; a portal without cards (--gpus none) takes a name of its own \
         (--node-name)"
    )]
    NodeHasCards(String),
}

/// Settings for one server, resolved from flags, environment and defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub gpus: GpuSelection,
    pub poll: PollSettings,
    pub node_name: String,
    /// A node silent for this long is unreachable.
    pub node_timeout: Duration,
    /// The address this node registers as its web server's.
    pub advertise: Option<String>,
    /// Web assets from this folder instead of those embedded in the binary.
    pub site_root: Option<PathBuf>,
    pub sim: SimOptions,
    pub auth: AuthSettings,
    pub metrics_token: Option<String>,
    /// Between SIGTERM and SIGKILL when a job's slot ends or it is cancelled.
    pub job_grace: std::time::Duration,
    /// Where jobs' notice files go (see `--notice-dir`).
    pub notice_dir: PathBuf,
    /// Where `lanes shell` knocks (see `--shell-socket`); `None`: no shells.
    pub shell_socket: Option<PathBuf>,
    /// How webhook deliveries are retried.
    pub webhook_retry: Retry,
    pub history: HistorySettings,
    /// Bytes kept of each of a job's output streams.
    pub job_log_limit: u64,
    /// The `lanes` binary, run as `lanes keep-log` to keep job logs: this very program
    /// (`/proc/self/exe`) except in tests, where the server runs inside a test binary.
    pub keeper_exe: PathBuf,
    /// How many connections, and how long silent ones live.
    pub connections: crate::http::serve::ConnectionLimits,
    /// Longest time between two queue passes when no event asks for one.
    pub queue_idle: Duration,
    /// The device wall asked for, and the cgroup its job cgroups go under.
    pub isolation: crate::jobs::wall::Isolation,
    pub cgroup_parent: String,
    /// How long a login profile may take.
    pub profile_timeout: Duration,
    /// What the admin allows of containers (Docker, shared directories).
    pub containers: crate::jobs::container::ContainerPolicy,
    /// Replace a process that still serves this node's name (it stops at its next heartbeat).
    pub take_over: bool,
    /// What time it is: the system's, except in tests.
    pub clock: crate::runtime::clock::Clock,
}

impl ServeConfig {
    pub fn from_args(args: ServeArgs) -> Result<Self, StartupError> {
        let (data_dir, database_url) = resolve_db(args.db)?;
        let node_name = match args.node_name {
            Some(name) => name,
            None => nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .ok_or(StartupError::NodeName)?,
        };
        let directory = crate::directory::Directory::from_args(&args.directory)?;
        let oidc_redirect = args.directory.oidc_redirect_url.clone().or_else(|| {
            let host = args
                .advertise
                .clone()
                .unwrap_or_else(|| args.listen.to_string());
            let base = if host.contains("://") {
                host
            } else {
                format!("http://{host}")
            };
            Some(format!("{}/auth/oidc/callback", base.trim_end_matches('/')))
        });
        let notice_dir = args.notice_dir.unwrap_or_else(|| {
            if nix::unistd::geteuid().is_root() {
                PathBuf::from("/run/lanes/notices")
            } else {
                data_dir.join("notices")
            }
        });
        let shell_socket = match args.shell_socket {
            Some(path) if path.as_os_str().is_empty() => None,
            Some(path) => Some(path),
            None if nix::unistd::geteuid().is_root() => {
                Some(PathBuf::from(lanes_types::shell::DEFAULT_SOCKET))
            }
            None => Some(data_dir.join("shell.sock")),
        };
        Ok(Self {
            listen: args.listen,
            data_dir,
            database_url,
            gpus: args.gpus,
            poll: PollSettings {
                interval: args.poll_interval,
                process_interval: args.process_interval.max(args.poll_interval),
            },
            node_name,
            node_timeout: args.node_timeout,
            advertise: args.advertise,
            site_root: args.site_root,
            sim: SimOptions {
                seed: args.sim_seed,
                faulty_gpu: args.sim_faulty_gpu,
                hot_gpu: args.sim_hot_gpu,
                background: args.sim_background,
                device_files: args.sim_device_files,
                device_holders: args.sim_device_holders,
            },
            auth: AuthSettings {
                policy: SessionPolicy {
                    idle: chrono::Duration::from_std(args.session_idle)
                        .unwrap_or(chrono::Duration::hours(8)),
                    absolute: chrono::Duration::from_std(args.session_max_age)
                        .unwrap_or(chrono::Duration::days(7)),
                },
                secure_cookies: args.secure_cookies,
                trusted_proxies: args.trusted_proxies.into(),
                directory,
                oidc_redirect,
            },
            metrics_token: args.metrics_token.filter(|t| !t.is_empty()),
            job_grace: args.job_grace,
            notice_dir,
            shell_socket,
            webhook_retry: Retry::default(),
            history: HistorySettings {
                retention: Retention {
                    raw: args.keep_raw,
                    minute: args.keep_minutes,
                    hour: args.keep_hours.0,
                },
                ..HistorySettings::default()
            },
            job_log_limit: args.job_log_limit,
            keeper_exe: PathBuf::from("/proc/self/exe"),
            connections: crate::http::serve::ConnectionLimits {
                max_connections: args.max_connections.max(1),
                idle_timeout: args.idle_timeout.max(Duration::from_secs(5)),
                per_address_share: args.connections_per_address_share.into(),
                ..Default::default()
            },
            queue_idle: crate::queue::IDLE,
            isolation: args.isolation,
            cgroup_parent: args.cgroup_parent,
            profile_timeout: args.profile_timeout,
            containers: crate::jobs::container::ContainerPolicy {
                docker: args.docker_jobs,
                docker_host_namespaces: args.docker_host_namespaces,
                shared_dirs: args.container_shared_dirs,
            },
            take_over: args.take_over,
            clock: crate::runtime::clock::Clock::system(),
        })
    }
}

/// A server that is bound and ready; [`Application::run_until`] serves it.
/// The service's internals a test may watch: the event bus, and counters of the queue's passes
/// and the runner's ticks (wait for one to move past the value read before acting).
#[derive(Clone)]
pub struct Hooks {
    pub events: crate::runtime::events::Events,
    pub queue_passes: tokio::sync::watch::Receiver<u64>,
    /// Runs a queue pass (lending included) and waits for it.
    pub queue: crate::runtime::tasks::Passes,
    pub runner_ticks: tokio::sync::watch::Receiver<u64>,
    /// Runs the job runner's look (start, stop, signal what is due now) and waits for it.
    pub runner: crate::runtime::tasks::Passes,
    /// Runs a full reminder pass (digests included) and waits for it.
    pub reminders: crate::notify::remind::Passes,
    /// Writes the history writer's buffered readings and minutes of use now and waits for it.
    pub history: crate::runtime::tasks::Passes,
    /// Judges the next reading of the cards (unbooked use, idle bookings) and waits for it.
    pub enforcer: crate::runtime::tasks::Passes,
    /// Judges the cards' health at the next tick and waits for it.
    pub health: crate::runtime::tasks::Passes,
    /// Claims every message that may go now and waits for it (a destination with its share
    /// in flight keeps the rest queued).
    pub deliverer: crate::runtime::tasks::Passes,
    /// The server's clock; a test moves it forward instead of waiting.
    pub clock: crate::runtime::clock::Clock,
    /// Whether this process leads the queue (at once on SQLite; once it holds the lock on
    /// PostgreSQL).
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// The cards' readings as they are taken (`subscribe_raw`: one message a tick).
    pub telemetry: Arc<Hub>,
}

pub struct Application {
    listener: TcpListener,
    state: AppState,
    poller: Poller,
    store: Store,
    /// The history writer; it makes a last write at shutdown before the store closes.
    history: tokio::task::JoinHandle<()>,
    /// This process's name and instance id as a node, cleared from its row at shutdown.
    node: (String, String),
    /// Set when another process took this node's name over: this one stopped serving.
    displaced: Arc<std::sync::atomic::AtomicBool>,
    /// The data dir's (and an SQLite database's) "a server runs here" locks.
    _locks: Vec<crate::ops::data_dir::ServeLock>,
    connections: crate::http::serve::ConnectionLimits,
    /// The notifier, for its reminder and delivery passes on request (test hooks).
    notifier: crate::notify::Notifier,
    /// History flushes on request (a test hook).
    flushes: crate::runtime::tasks::Passes,
    /// Enforcer passes on request (a test hook).
    enforcer: crate::runtime::tasks::Passes,
    health: crate::runtime::tasks::Passes,
    leading: tokio::sync::watch::Receiver<bool>,
}

impl Application {
    pub async fn build(config: ServeConfig) -> Result<Self, StartupError> {
        if crate::store::Backend::of_url(&config.database_url)
            == Some(crate::store::Backend::Sqlite)
            && config.gpus.source == telemetry::SourceChoice::None
        {
            return Err(StartupError::SingleNode(
                "a portal without cards (--gpus none)",
            ));
        }
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartupError::Listen {
                    addr: config.listen,
                    source,
                })?;
        // Read before anything is written: a --site-root that is no site leaves nothing behind.
        let site = crate::http::site::Site::load(config.site_root.as_deref())?;
        let created = prepare_data_dir(&config.data_dir)?;
        let instance = crate::jobs::random_hex(8)
            .map_err(|e| StartupError::Store(StoreError::Database(e.to_string())))?;
        let built = match serve_locks(&config, &instance) {
            Ok((locks, sole)) => match Self::build_on(
                listener,
                site,
                &config,
                &instance,
                sole,
                locks[0].previous.clone(),
            )
            .await
            {
                Ok(app) => Ok(Self {
                    _locks: locks,
                    ..app
                }),
                Err(e) => {
                    locks
                        .into_iter()
                        .for_each(crate::ops::data_dir::ServeLock::discard);
                    Err(e)
                }
            },
            Err(e) => Err(e),
        };
        if built.is_err() && created {
            // Only an empty dir goes: anything written there stays for the operator to see.
            let _ = std::fs::remove_dir(&config.data_dir);
        }
        built
    }

    async fn build_on(
        listener: TcpListener,
        site: crate::http::site::Site,
        config: &ServeConfig,
        instance: &str,
        sole: bool,
        predecessor: Option<String>,
    ) -> Result<Self, StartupError> {
        let store = Store::open(&config.database_url).await?;
        store.set_node_timeout(config.node_timeout);
        if store.accounts().count_enabled_admins().await? == 0 {
            let database = match store.backend() {
                crate::store::Backend::Sqlite => {
                    format!("--data-dir {}", config.data_dir.display())
                }
                crate::store::Backend::Postgres => "--database-url URL".to_string(),
            };
            tracing::warn!(
                "no admin account yet; create the first one (it asks for the password) with:\n    \
                 lanes user add --username NAME --admin --unix-user ACCOUNT {database}\n\
                 ACCOUNT is the Unix account the admin's own jobs run as"
            );
        }

        let telemetry::Opened {
            source,
            fallback_reason,
            processes,
            device_files,
            managed,
            driver,
        } = telemetry::open(&config.gpus, &config.node_name, &config.sim)?;
        let wall = Arc::new(crate::jobs::wall::Wall::set_up(
            config.isolation,
            &config.cgroup_parent,
            &device_files,
        )?);
        if wall.is_on() {
            tracing::info!("device wall: {}", wall.describe());
        } else {
            tracing::warn!(
                "device wall: {}; a job could reach cards it did not book by overriding \
                 CUDA_VISIBLE_DEVICES",
                wall.describe()
            );
        }
        let kind = source.kind();
        match (kind, fallback_reason) {
            (SourceKind::Simulated, Some(reason)) => tracing::warn!(
                "no usable NVIDIA driver ({reason}); serving a SIMULATED fleet of {} GPUs",
                source.inventory().len()
            ),
            (SourceKind::Simulated, None) => tracing::warn!(
                "serving a SIMULATED fleet of {} GPUs, as --gpus asked",
                source.inventory().len()
            ),
            (SourceKind::Nvml, _) => {
                tracing::info!("reading {} GPUs through NVML", source.inventory().len())
            }
            (SourceKind::None, _) => {
                tracing::info!("no GPUs here (--gpus none): serving the web for the pool")
            }
        }
        // Before anything is written under the node's name (its cards, its registration).
        claim_node(&store, config, kind, sole, predecessor.as_deref()).await?;
        let inventory = source.inventory();
        if managed.len() < inventory.len() {
            let left_out: Vec<String> = inventory
                .iter()
                .filter(|c| !managed.contains(&c.uuid))
                .map(|c| format!("GPU {} ({})", c.index, c.uuid))
                .collect();
            tracing::info!(
                "managing {} of {} GPUs; left out (shown as unmanaged): {}",
                managed.len(),
                inventory.len(),
                left_out.join(", ")
            );
        }
        store
            .inventory()
            .record_cards(&config.node_name, inventory, &managed, config.clock.now())
            .await?;
        let portal = store.settings().portal().await?;
        if portal.anonymous_dashboard {
            tracing::info!("the dashboard is open to anonymous viewers (an admin setting)");
        }

        let metrics = Arc::new(Metrics::new());
        for info in source.inventory() {
            metrics.register_gpu(info);
        }
        let hub = Arc::new(
            Hub::new(
                &config.node_name,
                kind,
                config.poll.interval,
                source.inventory(),
                metrics,
            )
            .with_unmanaged(&managed),
        );
        let poller = Poller::start(
            Sampler::new(source),
            hub.clone(),
            config.poll,
            config.clock.clone(),
        );

        match site.origin() {
            crate::http::site::Origin::Embedded => {
                tracing::info!("web pages: embedded in this binary ({})", site.pkg_dir())
            }
            crate::http::site::Origin::Directory(dir) => {
                tracing::info!("web pages: from {} ({})", dir.display(), site.pkg_dir())
            }
            crate::http::site::Origin::Missing => tracing::warn!(
                "web pages: this binary was built without them (LANES_SITE_DIR unset), so \
                 pages render but stay static; build with `make build` or pass --site-root"
            ),
        }
        // Leptos reads only names from these: every asset is served from `site`.
        let leptos_options = LeptosOptions::builder()
            .output_name("lanes")
            .site_root(match site.origin() {
                crate::http::site::Origin::Directory(dir) => dir.to_string_lossy().into_owned(),
                _ => String::new(),
            })
            .site_pkg_dir(site.pkg_dir())
            .site_addr(config.listen)
            .build();
        let shutdown = CancellationToken::new();
        let policy = Arc::new(std::sync::RwLock::new(store.enforcement().policy().await?));
        let portal = Arc::new(std::sync::RwLock::new(portal));
        let instance = instance.to_string();
        let displaced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let node = (config.node_name.clone(), instance.clone());
        let membership = crate::cluster::membership::Membership {
            displaced: displaced.clone(),
            store: store.clone(),
            hub: hub.clone(),
            registration: crate::store::NodeRegistration {
                name: config.node_name.clone(),
                address: config
                    .advertise
                    .clone()
                    .unwrap_or_else(|| listener_address(&listener, config.listen)),
                version: env!("CARGO_PKG_VERSION").into(),
                driver,
                gpu_source: kind,
                instance: instance.clone(),
            },
            timeout: config.node_timeout,
            policy: policy.clone(),
            portal: portal.clone(),
            clock: config.clock.clone(),
        };
        membership.join().await?;
        membership.start(shutdown.clone());
        crate::cluster::relay::start(
            store.clone(),
            hub.clone(),
            instance,
            config.clock.clone(),
            shutdown.clone(),
        )
        .await?;
        let leader = crate::cluster::leader::start(store.clone(), shutdown.clone());
        let own_url = format!(
            "http://{}",
            config
                .advertise
                .clone()
                .unwrap_or_else(|| listener_address(&listener, config.listen))
        );
        let notifier = Notifier::start(
            crate::notify::NotifyContext {
                store: store.clone(),
                policy: policy.clone(),
                retry: config.webhook_retry,
                own_url: own_url.clone(),
                keep_minutes: chrono::Duration::from_std(config.history.retention.minute)
                    .unwrap_or_default(),
                interval_s: config.poll.interval.as_secs_f64().max(1.0),
                clock: config.clock.clone(),
            },
            shutdown.clone(),
        );
        let enforcer = crate::runtime::tasks::Passes::default();
        Enforcer {
            store: store.clone(),
            hub: hub.clone(),
            processes: processes.clone(),
            notifier: notifier.clone(),
            policy: policy.clone(),
            node: config.node_name.clone(),
            managed: managed.clone(),
            wall: wall.clone(),
            passes: enforcer.clone(),
        }
        .start(shutdown.clone());
        let health = crate::runtime::tasks::Passes::default();
        crate::health::keeper::HealthKeeper {
            store: store.clone(),
            hub: hub.clone(),
            notifier: notifier.clone(),
            policy: policy.clone(),
            node: config.node_name.clone(),
            managed: managed.clone(),
            passes: health.clone(),
            clock: config.clock.clone(),
        }
        .start(shutdown.clone());
        let flushes = crate::runtime::tasks::Passes::default();
        let history = history_writer::start(
            store.clone(),
            hub.clone(),
            config.history,
            flushes.clone(),
            shutdown.clone(),
        );
        let runner = crate::jobs::runner::Runner::start(
            store.clone(),
            hub.clone(),
            processes.clone(),
            notifier.clone(),
            crate::jobs::runner::RunnerSettings {
                grace: config.job_grace,
                jobs_dir: config.data_dir.join("jobs"),
                notice_dir: config.notice_dir.clone(),
                log_limit: config.job_log_limit,
                keeper: config.keeper_exe.clone(),
                node: config.node_name.clone(),
                wall: wall.clone(),
                profile_timeout: config.profile_timeout,
                clock: config.clock.clone(),
                containers: Arc::new(crate::jobs::container::ContainerHost::discover(
                    &config.node_name,
                    config.containers.clone(),
                    &device_files,
                )),
            },
            shutdown.clone(),
        );
        if let Some(path) = config.shell_socket.clone() {
            let door = crate::jobs::shell::ShellDoor {
                store: store.clone(),
                hub: hub.clone(),
                node: config.node_name.clone(),
                wall: wall.clone(),
                jobs_dir: config.data_dir.join("jobs"),
                notice_dir: config.notice_dir.clone(),
                clock: config.clock.clone(),
            };
            // Shells are a convenience: a node that cannot offer them still serves.
            if let Err(e) = door.start(path.clone(), shutdown.clone()) {
                tracing::warn!(socket = %path.display(), error = %e, "lanes shell is off: cannot listen");
            }
        }
        if let Some(directory) = config.auth.directory.clone() {
            sync_directory(
                store.clone(),
                directory,
                config.clock.clone(),
                shutdown.clone(),
            );
        }
        // Followers of a job's log wake when it grows; without inotify (its limits reached)
        // they look every TAIL_POLL instead.
        let log_watch = match crate::jobs::log_watch::LogWatch::start(shutdown.clone()) {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch log files (inotify); followed logs are read every 250 ms");
                None
            }
        };
        if store.backend() == crate::store::Backend::Postgres {
            let logs = runner.clone();
            crate::jobs::shipper::start(
                store.clone(),
                config.node_name.clone(),
                Arc::new(move |dir: &str| logs.log_paths(dir)),
                log_watch.clone(),
                config.clock.clone(),
                shutdown.clone(),
            );
        }
        let queue = crate::queue::Queue::start(
            store.clone(),
            hub.clone(),
            config.queue_idle,
            leader.clone(),
            config.clock.clone(),
            shutdown.clone(),
        )
        .await?;
        let state = AppState {
            log_watch,
            leptos_options,
            site: Arc::new(site),
            hub,
            node: config.node_name.as_str().into(),
            source: kind,
            shutdown,
            store: store.clone(),
            auth: config.auth.clone(),
            metrics_token: config.metrics_token.as_deref().map(Arc::from),
            portal,
            runner,
            queue,
            policy,
            processes,
            history: config.history,
            clock: config.clock.clone(),
            has_accounts: Arc::default(),
            own_url: Arc::new(own_url),
            anonymous: Arc::default(),
        };
        Ok(Self {
            listener,
            state,
            poller,
            store,
            history,
            connections: config.connections,
            node,
            displaced,
            _locks: Vec::new(),
            notifier,
            flushes,
            enforcer,
            health,
            leading: leader,
        })
    }

    /// What tests drive and observe the running service by, instead of sleeping.
    pub fn hooks(&self) -> Hooks {
        Hooks {
            events: self.store.events().clone(),
            queue_passes: self.state.queue.passes(),
            queue: self.state.queue.requests(),
            runner_ticks: self.state.runner.ticks(),
            runner: self.state.runner.looks(),
            reminders: self.notifier.reminders(),
            history: self.flushes.clone(),
            enforcer: self.enforcer.clone(),
            health: self.health.clone(),
            deliverer: self.notifier.deliveries(),
            clock: self.state.clock.clone(),
            leading: self.leading.clone(),
            telemetry: self.state.hub.clone(),
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then lets connections finish, stops the poller and
    /// closes the database.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let token = self.state.shutdown.clone();
        let unlimited = self.state.auth.trusted_proxies.clone();
        let app = http::router(self.state);
        let signal = {
            let token = token.clone();
            async move {
                // Also when the service stops itself (another process took this node over).
                tokio::select! {
                    _ = shutdown => tracing::info!("shutting down"),
                    _ = token.cancelled() => {}
                }
                token.cancel();
            }
        };
        let limits = crate::http::serve::ConnectionLimits {
            max_connections: crate::http::serve::fit_connections(self.connections.max_connections),
            ..self.connections
        };
        let store = self.store.clone();
        let watch_token = token.clone();
        // Notices the database file vanishing even while nobody writes (logged once).
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => { let _ = store.check_file(); }
                    _ = watch_token.cancelled() => break,
                }
            }
        });
        let served = crate::http::serve::serve(self.listener, app, limits, unlimited, signal).await;
        // Connections that ignore the close get a moment, not forever.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokio::task::spawn_blocking(move || self.poller.stop())
            .await
            .ok();
        if tokio::time::timeout(Duration::from_secs(10), self.history)
            .await
            .is_err()
        {
            tracing::warn!("history: the last write took over 10 s; it was abandoned");
        }
        let displaced = self.displaced.load(std::sync::atomic::Ordering::SeqCst);
        if !displaced {
            // The next process under this name need not wait to see that this one is gone.
            let (name, instance) = &self.node;
            if let Err(e) = self.store.inventory().leave_node(name, instance).await {
                tracing::warn!(error = %e, "could not record that this node stopped");
            }
        }
        self.store.close().await;
        if displaced {
            return Err(std::io::Error::other(format!(
                "another process took node {} over; this one stopped serving",
                self.node.0
            )));
        }
        served
    }
}

/// Takes the "a server runs here" locks: the data dir's (job logs, keys) and, on SQLite, the
/// database file's (which may lie outside the data dir). Refused while another server holds
/// either. Says whether the SQLite database's was taken (then no other process serves it).
fn serve_locks(
    config: &ServeConfig,
    instance: &str,
) -> Result<(Vec<crate::ops::data_dir::ServeLock>, bool), StartupError> {
    use crate::ops::data_dir::ServeLock;
    let mut locks = vec![ServeLock::take(
        &config.data_dir.join("serve.lock"),
        format!("the data dir {}", config.data_dir.display()),
        "data dir",
        instance,
    )?];
    let mut sole = false;
    if let Ok(Some(db)) = crate::store::sqlite_file(&config.database_url) {
        let lock = PathBuf::from(format!("{}.serve-lock", db.display()));
        if db.parent().is_some_and(|dir| dir.is_dir()) {
            let what = format!("the database {}", db.display());
            match ServeLock::take(&lock, what, "database", instance) {
                Ok(taken) => {
                    locks.push(taken);
                    sole = true;
                }
                Err(e) => {
                    locks.into_iter().for_each(ServeLock::discard);
                    return Err(e.into());
                }
            }
        }
    }
    Ok((locks, sole))
}

/// Makes sure this process may serve its node's name: a portal without cards never takes the
/// name of a node with cards (it would empty that node's cards from the pool), and a name
/// another live process serves is refused unless `--take-over`. Live means still beating: a
/// fresh heartbeat may be a crashed process's last, so the row is watched for a little over
/// two heartbeats, unless the holder is `predecessor`: the process that held this data dir's
/// lock before this one took it, so certainly gone (a restart after a crash starts at once).
/// `sole` says this process holds the SQLite database's lock, so no other process serves it.
async fn claim_node(
    store: &Store,
    config: &ServeConfig,
    kind: SourceKind,
    sole: bool,
    predecessor: Option<&str>,
) -> Result<(), StartupError> {
    let name = &config.node_name;
    let Some(holder) = store.inventory().node_holder(name).await? else {
        return Ok(());
    };
    if kind == SourceKind::None && holder.has_cards {
        return Err(StartupError::NodeHasCards(name.clone()));
    }
    let sqlite = store.backend() == crate::store::Backend::Sqlite;
    let followed = predecessor.is_some_and(|p| p == holder.instance);
    if config.take_over || holder.heartbeat_ms <= 0 || (sqlite && sole) || followed {
        return Ok(());
    }
    let age_ms = |beat: i64| config.clock.now_ms() - beat;
    if age_ms(holder.heartbeat_ms) >= config.node_timeout.as_millis() as i64 {
        return Ok(());
    }
    let watch = crate::cluster::beat_interval(config.node_timeout) * 2 + Duration::from_millis(500);
    let until = tokio::time::Instant::now() + watch;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match store.inventory().node_holder(name).await? {
            Some(now) if now.heartbeat_ms > holder.heartbeat_ms => {
                return Err(StartupError::NodeInUse {
                    name: name.clone(),
                    ago_s: age_ms(now.heartbeat_ms).max(0) as f64 / 1000.0,
                });
            }
            Some(_) => {}
            None => return Ok(()),
        }
    }
    tracing::info!(
        node = name,
        "the process that served node {name} stopped beating; this one serves it now"
    );
    Ok(())
}

/// The address the listener got (the port the OS chose for `:0`).
fn listener_address(listener: &TcpListener, asked: SocketAddr) -> String {
    listener.local_addr().unwrap_or(asked).to_string()
}

/// Resolves on SIGINT or SIGTERM.
/// The directory sync: every --ldap-sync-interval, accounts the LDAP directory no longer has
/// (or has disabled) are disabled here. Woken by its own deadline and shutdown only.
fn sync_directory(
    store: Store,
    directory: Arc<crate::directory::Directory>,
    clock: crate::runtime::clock::Clock,
    shutdown: CancellationToken,
) {
    let Some(interval) = directory.ldap.as_ref().map(|l| l.sync_interval()) else {
        return;
    };
    let stop = shutdown.clone();
    crate::runtime::tasks::supervise("directory sync", shutdown, move || {
        let (store, directory, clock, stop) = (
            store.clone(),
            directory.clone(),
            clock.clone(),
            stop.clone(),
        );
        async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                match crate::usecases::directory::sync(&store, &directory, clock.now()).await {
                    Ok(report) if !report.disabled.is_empty() || !report.updated.is_empty() => {
                        tracing::info!(checked = report.checked, disabled = ?report.disabled, updated = ?report.updated, "directory sync");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "directory sync failed; nothing changed"),
                }
            }
        }
    });
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
