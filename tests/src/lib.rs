//! Helpers for end-to-end tests: the real server, in-process, on a random port with a fresh
//! data dir, a fresh database and a simulated fleet; and the path of the built `lanes` binary
//! for CLI tests.
//!
//! The database is SQLite in the data dir, or, when `LANES_TEST_POSTGRES` names a PostgreSQL
//! server (`postgres://postgres@127.0.0.1:5432`), a database made on it for the one test and
//! dropped after (kept with `LANES_TEST_KEEP_DB=1`, to look at after a failure): `make test`
//! runs the whole suite once each way.

pub mod directory;

use chrono::Utc;
use lanes_server::accounts::{NewUser, Role, User};
use lanes_server::ops::serve::{Application, ServeConfig};
use lanes_server::store::{AuditEntry, Store};
use lanes_server::telemetry::poller::PollSettings;
use lanes_server::telemetry::{GpuSelection, SimOptions};
use lanes_types::booking::{Booking, CreateBooking};
use lanes_types::job::{CreateJob, Job};
use lanes_types::GpuState;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::oneshot;

/// The PostgreSQL server the suite runs against, if it was asked to.
pub fn postgres_server() -> Option<String> {
    std::env::var("LANES_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
}

/// Whether this run of the suite is the PostgreSQL one.
pub fn on_postgres() -> bool {
    postgres_server().is_some()
}

/// True (and says so) when a test is about SQLite's file alone and this is the PostgreSQL run:
/// the SQLite run covers it.
pub fn sqlite_only(what: &str) -> bool {
    let skip = on_postgres();
    if skip {
        eprintln!("SQLite only, covered by the SQLite run: {what}");
    }
    skip
}

/// A database for one test: SQLite in `dir`, or a fresh PostgreSQL database dropped with this.
pub struct TestDb {
    pub url: String,
    /// The server's URL and the database's name, on PostgreSQL.
    postgres: Option<(String, String)>,
}

impl TestDb {
    pub async fn fresh(dir: &std::path::Path) -> Self {
        let Some(server) = postgres_server() else {
            return Self {
                url: format!("sqlite://{}", dir.join("lanes.db").display()),
                postgres: None,
            };
        };
        let name = format!(
            "lanes_test_{}",
            lanes_server::jobs::random_hex(8).expect("randomness")
        );
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&server)
            .await
            .expect("the test PostgreSQL server answers");
        sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("a test database is created");
        let _ = conn.close().await;
        Self {
            url: database_on(&server, &name),
            postgres: Some((server, name)),
        }
    }
}

/// The URL of database `name` on the server at `server` (whose URL may name another).
pub fn database_on(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (server, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{name}{query}", &base[..host_end])
}

impl Drop for TestDb {
    /// Drops the test's PostgreSQL database (connections still open are ended with it).
    fn drop(&mut self) {
        let Some((server, name)) = self.postgres.take() else {
            return;
        };
        if std::env::var_os("LANES_TEST_KEEP_DB").is_some() {
            eprintln!("kept the test database {name}");
            return;
        }
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&server).await.ok()?;
                sqlx::Executor::execute(
                    &mut conn,
                    format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
                )
                .await
                .ok()?;
                conn.close().await.ok()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(()))) {
            eprintln!("could not drop a test database");
        }
    }
}

/// A running server. Dropping it without [`TestApp::stop`] leaves the server to die with the
/// test's runtime.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The database the server uses (declared before the data dir: dropped first).
    pub db: TestDb,
    pub data_dir: tempfile::TempDir,
    /// The database the server uses (the test's own unless the test moved it).
    database_url: String,
    pub client: reqwest::Client,
    viewer: tokio::sync::OnceCell<String>,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The running service's event bus and pass counters.
    pub hooks: lanes_server::ops::serve::Hooks,
    /// The cgroup its jobs' cgroups go under, made for this server alone.
    pub cgroup_parent: CgroupParent,
    /// Where its jobs' notice files go: outside the data dir (which only the server may
    /// enter), passable by the test's job users.
    pub notice_dir: tempfile::TempDir,
}

/// A cgroup parent of one test server (`/lanes-test-<random>`), removed with it in every
/// hierarchy once its jobs' cgroups are gone.
pub struct CgroupParent(pub String);

impl Default for CgroupParent {
    /// A parent of a random name, its own.
    fn default() -> Self {
        Self::new()
    }
}

impl CgroupParent {
    pub fn new() -> Self {
        let suffix = lanes_server::jobs::random_hex(6).expect("randomness");
        Self(format!("/lanes-test-{suffix}"))
    }

    /// The directories it has, in each cgroup hierarchy mounted under /sys/fs/cgroup.
    pub fn dirs(&self) -> Vec<PathBuf> {
        let name = self.0.trim_start_matches('/');
        let mut dirs = vec![PathBuf::from("/sys/fs/cgroup").join(name)];
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            dirs.extend(entries.flatten().map(|e| e.path().join(name)));
        }
        dirs.into_iter().filter(|d| d.is_dir()).collect()
    }
}

impl Drop for CgroupParent {
    /// Kills what a test left running in its jobs' cgroups (a test may end before its jobs
    /// do) and removes them, then the parent.
    fn drop(&mut self) {
        for dir in self.dirs() {
            let jobs: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect()
                })
                .unwrap_or_default();
            for job in jobs {
                for _ in 0..50 {
                    let procs =
                        std::fs::read_to_string(job.join("cgroup.procs")).unwrap_or_default();
                    if procs.trim().is_empty() {
                        break;
                    }
                    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = std::fs::remove_dir(&job);
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Asks `probe` again every 20 ms until it gives a value, for up to `limit`; then fails, saying
/// `what` did not happen. The one way tests wait for something they cannot be told about.
pub async fn wait_until<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Poll interval of test servers: fast, so tests see several ticks quickly.
pub const TEST_POLL: Duration = Duration::from_millis(50);

impl TestApp {
    pub async fn spawn(gpus: u32) -> Self {
        Self::spawn_with(gpus, None).await
    }

    /// A server whose simulated card `faulty_gpu` fails every reading.
    pub async fn spawn_with(gpus: u32, faulty_gpu: Option<u32>) -> Self {
        Self::spawn_configured(gpus, |config| config.sim.faulty_gpu = faulty_gpu).await
    }

    /// A server with `gpus` simulated cards and the test configuration as `adjust` leaves it.
    pub async fn spawn_configured(gpus: u32, adjust: impl FnOnce(&mut ServeConfig)) -> Self {
        let data_dir = tempfile::tempdir().expect("a temporary data dir");
        let db = TestDb::fresh(data_dir.path()).await;
        let cgroup_parent = CgroupParent::new();
        let notice_dir = tempfile::Builder::new()
            .prefix("lanes-notices-")
            .tempdir_in("/tmp")
            .expect("a notice dir");
        std::fs::set_permissions(
            notice_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("the notice dir passable");
        let config = ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            database_url: db.url.clone(),
            data_dir: data_dir.path().to_path_buf(),
            gpus: GpuSelection::simulated(gpus),
            poll: PollSettings {
                interval: TEST_POLL,
                process_interval: TEST_POLL * 2,
            },
            node_name: "testnode".into(),
            node_timeout: lanes_server::store::DEFAULT_NODE_TIMEOUT,
            advertise: None,
            site_root: None,
            sim: SimOptions {
                seed: 42,
                faulty_gpu: None,
                hot_gpu: None,
                background: true,
                device_files: Vec::new(),
                device_holders: false,
            },
            auth: Default::default(),
            metrics_token: None,
            job_grace: Duration::from_secs(1),
            notice_dir: notice_dir.path().to_path_buf(),
            // A test that knocks names a socket of its own.
            shell_socket: None,
            history: lanes_server::history::HistorySettings {
                flush_every: Duration::from_millis(200),
                ..Default::default()
            },
            webhook_retry: lanes_server::notify::Retry {
                attempts: 3,
                first_backoff: Duration::from_millis(200),
                timeout: Duration::from_secs(2),
            },
            job_log_limit: 1 << 30,
            keeper_exe: lanes_bin(),
            connections: Default::default(),
            queue_idle: lanes_server::queue::IDLE,
            isolation: lanes_server::jobs::wall::Isolation::Cgroup,
            cgroup_parent: cgroup_parent.0.clone(),
            profile_timeout: Duration::from_secs(10),
            containers: Default::default(),
            take_over: false,
            // Moved forward by tests that need time to pass (`app.hooks.clock.advance`).
            clock: lanes_server::runtime::clock::Clock::adjustable(),
        };
        let mut config = config;
        adjust(&mut config);
        let database_url = config.database_url.clone();
        let app = Application::build(config).await.expect("the server starts");
        let addr = app.local_addr();
        let hooks = app.hooks();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            db,
            data_dir,
            database_url,
            client: reqwest::Client::new(),
            viewer: tokio::sync::OnceCell::new(),
            stop: Some(stop),
            served,
            hooks,
            cgroup_parent,
            notice_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The typed client of this server, signed in as nobody.
    pub fn anonymous(&self) -> lanes_client::Client {
        lanes_client::Client::with_http(format!("http://{}", self.addr), self.client.clone())
    }

    /// The typed client of this server, carrying session `cookie`.
    pub fn client_with(&self, cookie: &str) -> lanes_client::Client {
        self.anonymous()
            .as_(lanes_client::Credentials::Session(cookie.to_string()))
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    /// GET as an ordinary logged-in user (created on first use).
    pub async fn get(&self, path: &str) -> reqwest::Response {
        let cookie = self.viewer_cookie().await;
        self.client
            .get(self.url(path))
            .header("cookie", cookie)
            .send()
            .await
            .expect("the server answers")
    }

    /// A request as the holder of session `cookie`, with `body` as JSON when given.
    pub async fn call_as(
        &self,
        cookie: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .request(method, self.url(path))
            .header("cookie", cookie);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("the server answers")
    }

    /// GET with no credentials.
    pub async fn get_anonymous(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the server answers")
    }

    /// The session cookie of user `viewer`, created and logged in on first use.
    pub async fn viewer_cookie(&self) -> String {
        self.viewer
            .get_or_init(|| async {
                self.create_user("viewer", "viewer passphrase", Role::User)
                    .await;
                self.login("viewer", "viewer passphrase").await
            })
            .await
            .clone()
    }

    /// A websocket request to `path` carrying the viewer's session.
    pub async fn ws_request(
        &self,
        path: &str,
    ) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        self.ws_request_as(path, &self.viewer_cookie().await)
    }

    /// A websocket request to `path` carrying session `cookie`.
    pub fn ws_request_as(
        &self,
        path: &str,
        cookie: &str,
    ) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = self
            .ws_url(path)
            .into_client_request()
            .expect("a websocket URL");
        request
            .headers_mut()
            .insert("cookie", cookie.parse().expect("a header value"));
        request
    }

    /// Creates an account straight in the database, as `lanes user add` does.
    pub async fn create_user(&self, username: &str, password: &str, role: Role) -> User {
        add_user(&self.database_url(), username, password, role).await
    }

    /// Creates `name` with the password "`name` passphrase" and returns a session cookie.
    pub async fn sign_up(&self, name: &str, role: Role) -> String {
        let password = format!("{name} passphrase");
        self.create_user(name, &password, role).await;
        self.login(name, &password).await
    }

    pub fn database_url(&self) -> String {
        self.database_url.clone()
    }

    /// Logs in and returns the session cookie (`name=value`).
    pub async fn login(&self, username: &str, password: &str) -> String {
        let resp = self
            .client
            .post(self.url("/api/v1/auth/login"))
            .json(&serde_json::json!({ "username": username, "password": password }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "login as {username}");
        session_cookie(&resp).expect("a session cookie")
    }

    /// Makes an API token for the holder of session `cookie`; the answer (with its `secret`).
    pub async fn create_token(&self, cookie: &str, name: &str) -> Value {
        let resp = self
            .client
            .post(self.url("/api/v1/tokens"))
            .header("cookie", cookie)
            .json(&json!({ "name": name }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        resp.json().await.unwrap()
    }

    /// `GET /api/v1/me` with a bearer token.
    pub async fn me_with_token(&self, token: &str) -> reqwest::Response {
        self.client
            .get(self.url("/api/v1/me"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// Shuts the server down gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.served)
            .await
            .expect("the server stops within 10 s")
            .expect("the server task did not panic")
            .expect("the server ran without error");
    }
}

/// The terminal client run with `args` and `input` on its standard input, with its settings
/// under `home` (off the async runtime, so a server in this test keeps answering).
pub async fn run_cli_with_input(
    home: &std::path::Path,
    args: &[&str],
    input: &str,
) -> std::process::Output {
    let (home, args, input) = (
        home.to_path_buf(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        input.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(lanes_bin());
        command
            .args(&args)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env_remove("LANES_URL")
            .env_remove("LANES_TOKEN");
        run_with_input(command, &input)
    })
    .await
    .expect("the client ran")
}

/// What the built `lanes` binary printed and how it exited, run with `args`.
pub fn run_lanes(args: &[&str]) -> std::process::Output {
    std::process::Command::new(lanes_bin())
        .args(args)
        .output()
        .expect("lanes runs")
}

/// A `lanes serve` process of the built binary on a free port, killed when dropped.
pub struct ServerProcess {
    pub child: std::process::Child,
    pub base: String,
}

impl ServerProcess {
    /// Starts `lanes serve` on `data` and database `url` (simulated cards without background
    /// load, fast polls) with `extra` arguments, and waits until it answers.
    pub async fn start(data: &std::path::Path, url: &str, extra: &[&str]) -> Self {
        Self::start_on(directory::free_port(), data, url, extra).await
    }

    /// [`Self::start`] on `port` (one a provider was told of before).
    pub async fn start_on(port: u16, data: &std::path::Path, url: &str, extra: &[&str]) -> Self {
        let child = std::process::Command::new(lanes_bin())
            .args(["serve", "--sim-background", "false"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--data-dir", data.to_str().unwrap()])
            .args(["--database-url", url])
            .args(["--poll-interval", "100ms", "--job-grace", "1s"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("lanes serve starts");
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        wait_until(Duration::from_secs(15), "the server comes up", || async {
            reqwest::get(format!("{}/healthz", server.base))
                .await
                .is_ok_and(|r| r.status().is_success())
                .then_some(())
        })
        .await;
        server
    }

    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates an account (its Unix account of the same name) straight in the database at `url`,
/// as `lanes user add` does.
pub async fn add_user(url: &str, username: &str, password: &str, role: Role) -> User {
    let store = Store::open(url).await.expect("the test database opens");
    let hash = lanes_server::accounts::password::hash(password).expect("hashing works");
    let new = NewUser {
        username: username.into(),
        display_name: username.into(),
        email: None,
        unix_user: Some(username.into()),
        role,
    };
    let audit = AuditEntry::new(None, lanes_server::audit::AuditAction::UserCreate, username)
        .detail("test");
    let user = store
        .accounts()
        .create(&new, &hash, &audit, chrono::Utc::now())
        .await
        .expect("the user is created");
    store.close().await;
    user
}

/// Runs tmux on a socket of its own (never the user's server); its standard output.
pub fn tmux(socket: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .expect("tmux runs (apt install tmux)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes the Unix account `name` (a system account without a home) if this test runs as root
/// and it does not exist yet; jobs of the Lanes user of that name then run as it. Returns the
/// uid jobs will run as: the account's as root, else the test's own (single-user mode).
pub fn ensure_unix_account(name: &str) -> u32 {
    use nix::unistd::{Uid, User};
    if !Uid::effective().is_root() {
        return Uid::effective().as_raw();
    }
    if User::from_name(name)
        .expect("the account database")
        .is_none()
    {
        let made = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status()
            .expect("useradd runs");
        // The SQLite and PostgreSQL suites run side by side: the other may have made it.
        assert!(
            made.success() || User::from_name(name).is_ok_and(|u| u.is_some()),
            "useradd {name}"
        );
    }
    User::from_name(name)
        .expect("the account database")
        .expect("the account exists")
        .uid
        .as_raw()
}

/// A Unix account people log into: a home, `shell`, and `files` (path under the home, text,
/// executable?) written into the home as the account's own. Needs root; `None` without it.
pub fn ensure_login_account(
    name: &str,
    shell: &str,
    files: &[(&str, &str, bool)],
) -> Option<(u32, PathBuf)> {
    use nix::unistd::{Uid, User};
    use std::os::unix::fs::PermissionsExt;
    if !Uid::effective().is_root() {
        return None;
    }
    if User::from_name(name)
        .expect("the account database")
        .is_none()
    {
        let made = std::process::Command::new("useradd")
            .args(["--create-home", "--shell", shell, name])
            .status()
            .expect("useradd runs");
        // The SQLite and PostgreSQL suites run side by side: the other may have made it.
        assert!(
            made.success() || User::from_name(name).is_ok_and(|u| u.is_some()),
            "useradd {name}"
        );
    }
    let user = User::from_name(name)
        .expect("the account database")
        .expect("the account exists");
    for (path, text, executable) in files {
        let file = user.dir.join(path);
        let parent = file.parent().expect("a file in the home");
        std::fs::create_dir_all(parent).expect("the directory is made");
        std::fs::write(&file, text).expect("the file is written");
        let mode = if *executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut dir = file.as_path();
        while dir != user.dir {
            nix::unistd::chown(dir, Some(user.uid), Some(user.gid)).expect("chown");
            dir = dir.parent().expect("inside the home");
        }
    }
    Some((user.uid.as_raw(), user.dir))
}

/// The `name=value` part of the session cookie a response sets.
pub fn session_cookie(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("lanes_session="))
        .and_then(|v| v.split(';').next())
        .map(str::to_string)
}

/// The `lanes` binary of this build (`make test` builds it before the tests run).
pub fn lanes_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/lanes
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("lanes"))
        .expect("a target dir");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p lanes-server --bin lanes` first (make test does)",
        bin.display()
    );
    bin
}

/// A logged-in user of a test server, with the calls job and enforcement tests make.
pub struct Session<'a> {
    pub app: &'a TestApp,
    pub cookie: String,
}

impl Session<'_> {
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, String) {
        let response = self.app.call_as(&self.cookie, method, path, body).await;
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The typed client, as this session's user.
    pub fn client(&self) -> lanes_client::Client {
        self.app.client_with(&self.cookie)
    }

    /// Books `cards` from now for `seconds`.
    pub async fn book(&self, cards: &[String], seconds: i64) -> Booking {
        let start = self.app.hooks.clock.now();
        let request = booking_of(cards, start, start + chrono::Duration::seconds(seconds));
        self.client()
            .book(&request)
            .await
            .expect("the booking is made")
    }

    /// Runs `argv` on booking `booking`'s cards.
    pub async fn submit(&self, booking: i64, argv: &[&str]) -> Job {
        self.client()
            .submit_job(&Self::job_request(booking, argv))
            .await
            .expect("the job is submitted")
    }

    pub async fn job(&self, id: i64) -> Job {
        self.client().job(id).await.expect("the job is there")
    }

    /// The job's whole standard output so far.
    pub async fn log(&self, id: i64) -> String {
        self.client()
            .job_log(id, &lanes_types::query::LogQuery::default(), None)
            .await
            .expect("the log is readable")
            .text
    }

    /// The job's whole standard error so far (Lanes' header lines first).
    pub async fn stderr(&self, id: i64) -> String {
        let query = lanes_types::query::LogQuery {
            stream: Some("stderr".into()),
            tail: None,
        };
        self.client()
            .job_log(id, &query, None)
            .await
            .expect("the log is readable")
            .text
    }

    /// A job for booking `booking`, as the API takes it.
    pub fn job_request(booking: i64, argv: &[&str]) -> CreateJob {
        CreateJob {
            container: None,
            booking_id: booking,
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: None,
            env: None,
            environment: None,
            name: None,
            notice: None,
            session: None,
        }
    }

    /// Waits (up to `seconds`) until the job is over.
    pub async fn finished(&self, id: i64, seconds: u64) -> Job {
        wait_until(
            Duration::from_secs(seconds),
            &format!("job {id} finishes"),
            || async { Some(self.job(id).await).filter(|job| job.state.is_over()) },
        )
        .await
    }
}

/// A queue job of `argv` on `gpus` cards for up to `limit_s` seconds, as the API takes it.
pub fn queue_job(gpus: u32, limit_s: i64, argv: &[&str]) -> lanes_types::queue::SubmitJob {
    lanes_types::queue::SubmitJob {
        project: None,
        container: None,
        gpus,
        time_limit_s: Some(limit_s),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: None,
        env: None,
        environment: None,
        min_memory_bytes: None,
        name: None,
        preemptible: false,
        notice: None,
    }
}

/// A booking of `cards` from `start` to `end`, as the API takes it.
pub fn booking_of(
    cards: &[String],
    start: chrono::DateTime<Utc>,
    end: chrono::DateTime<Utc>,
) -> CreateBooking {
    CreateBooking {
        project: None,
        gpus: Some(cards.to_vec()),
        count: None,
        start,
        end,
        note: String::new(),
        user: None,
        lend: None,
    }
}

/// The server's cards in PCI bus order.
pub async fn cards(app: &TestApp) -> Vec<GpuState> {
    let viewer = app.client_with(&app.viewer_cookie().await);
    let mut gpus = viewer.gpus().await.expect("the cards");
    gpus.sort_by(|a, b| a.info.pci_bus_id.cmp(&b.info.pci_bus_id));
    gpus
}

/// The status and error body of a call the server refused; panics when it answered yes or
/// something that is not an API error.
pub fn refusal<T: std::fmt::Debug>(
    result: lanes_client::Result<T>,
) -> (u16, lanes_client::ErrorBody) {
    match result {
        Err(lanes_client::ClientError::Api { status, body, .. }) => (status.as_u16(), *body),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The status of a call the server refused (see [`refusal`]).
pub fn refused<T: std::fmt::Debug>(result: lanes_client::Result<T>) -> u16 {
    refusal(result).0
}

impl TestApp {
    /// Logs in through the typed client; the client carries the session.
    pub async fn sign_in(&self, username: &str, password: &str) -> lanes_client::Client {
        self.anonymous()
            .login(username, password)
            .await
            .unwrap_or_else(|e| panic!("login as {username}: {e}"))
            .0
    }
}

/// A child process that is killed and reaped when dropped, so a failing assertion never leaves
/// a server running behind the test.
/// `lanes ARGS…` run to its end with `stdin` piped in, and no database URL from the
/// environment (the data dir the arguments name is the one used).
pub fn lanes_with_input(args: &[&str], stdin: &str) -> std::process::Output {
    let mut command = std::process::Command::new(lanes_bin());
    command.args(args).env_remove("LANES_DATABASE_URL");
    run_with_input(command, stdin)
}

/// Runs `command` to its end with `stdin` piped in and its output captured.
fn run_with_input(mut command: std::process::Command, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("lanes runs");
    // A command that refuses early may not read its input: a closed pipe is no failure here.
    let _ = child
        .stdin
        .take()
        .expect("piped")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("lanes ends")
}

pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where Debian keeps PostgreSQL's server programs.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server of one test's own (a fresh cluster with password logins), for what
/// cannot be done to the shared one: a wrong password, the server stopped and started.
/// Needs root (to run it as `postgres`) and Debian's server binaries; stopped when dropped.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    pub port: u16,
    pub password: String,
    /// `listen_addresses` and further `-c` settings it starts with.
    listen: String,
    settings: Vec<String>,
}

impl PrivatePostgres {
    /// Starts one on 127.0.0.1, or says why not (and the test passes it by).
    pub fn start() -> Option<Self> {
        Self::start_with("127.0.0.1", &[], &[])
    }

    /// Starts one listening on `listen` (comma-separated addresses), taking password logins
    /// from the networks `clients` too, with further `settings` (`name=value`).
    pub fn start_with(listen: &str, clients: &[&str], settings: &[&str]) -> Option<Self> {
        let postgres = nix::unistd::User::from_name("postgres").ok().flatten();
        let (true, Some(postgres)) = (
            nix::unistd::geteuid().is_root() && std::path::Path::new(PG_BIN).is_dir(),
            postgres,
        ) else {
            eprintln!("no root or no PostgreSQL server binaries: a private PostgreSQL is skipped");
            return None;
        };
        let dir = tempfile::tempdir().ok()?;
        let chown = |p: &std::path::Path| {
            nix::unistd::chown(p, Some(postgres.uid), Some(postgres.gid)).expect("chown")
        };
        chown(dir.path());
        let password = format!("pw-{}", lanes_server::jobs::random_hex(8).ok()?);
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{password}\n")).ok()?;
        chown(&pwfile);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let server = Self {
            dir,
            port,
            password,
            listen: listen.to_string(),
            settings: settings.iter().map(|s| s.to_string()).collect(),
        };
        let data = server.data();
        let ok = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/initdb")])
            .args([
                "-D",
                data.to_str()?,
                "-U",
                "postgres",
                "--auth=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "initdb of a private PostgreSQL");
        let hba = data.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).ok()?;
        for net in clients {
            rules.push_str(&format!("host all all {net} scram-sha-256\n"));
        }
        std::fs::write(&hba, rules).ok()?;
        server.up();
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/pg_ctl")])
            .args(["-D", self.data().to_str().unwrap_or_default(), "-w"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts (again) the server, and waits until it takes connections.
    pub fn up(&self) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses={} -c fsync=off",
            self.port,
            self.dir.path().display(),
            self.listen
        );
        for setting in &self.settings {
            options.push_str(&format!(" -c {setting}"));
        }
        assert!(
            self.pg_ctl(&["-o", &options, "-l", "/dev/null", "start"]),
            "the private PostgreSQL starts"
        );
    }

    /// Stops the server (fast: open connections are ended).
    pub fn down(&self) {
        assert!(
            self.pg_ctl(&["-m", "fast", "stop"]),
            "the private PostgreSQL stops"
        );
    }

    /// The URL of database `name` with the right password (`postgres` always exists).
    pub fn url(&self, name: &str) -> String {
        self.url_at("127.0.0.1", name)
    }

    /// The same, through address `host`.
    pub fn url_at(&self, host: &str, name: &str) -> String {
        format!(
            "postgres://postgres:{}@{host}:{}/{name}",
            self.password, self.port
        )
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}
