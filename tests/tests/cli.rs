//! Bad input to `lanes serve`: one line naming the problem, exit status 2, nothing written.

use lanes_tests::lanes_bin;
use std::path::Path;
use std::process::{Command, Output};

fn serve(args: &[&str], data_dir: &Path) -> Output {
    Command::new(lanes_bin())
        .arg("serve")
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .args(args)
        .env("LANES_GPUS", "sim:1")
        // Never the default port: both backends' suites run these side by side, and a start
        // refused for a busy port is not refused for what the test is about.
        .env("LANES_LISTEN", "127.0.0.1:0")
        .env_remove("LANES_DATABASE_URL")
        .env("RUST_LOG", "off")
        .output()
        .expect("lanes runs")
}

fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

#[test]
fn an_unknown_gpu_source_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = serve(&["--gpus", "tpu:8"], &data);
    assert_refused(&out, "expected auto, nvml, nvml:CARDS");
    assert!(!data.exists());
}

#[test]
fn a_portal_without_cards_on_sqlite_is_refused_as_a_single_node_store() {
    if lanes_tests::on_postgres() {
        return; // about SQLite itself
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = serve(&["--gpus", "none"], &data);
    assert_refused(&out, "SQLite keeps one node");
    assert!(!data.exists(), "nothing is left behind");
}

#[test]
fn a_card_list_naming_a_card_the_host_lacks_is_refused_with_the_cards_it_has() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(&["--gpus", "sim:2:5"], &tmp.path().join("data"));
    assert_refused(&out, "--gpus names card 5, but this host has 0 (GPU-");
}

#[test]
fn an_unusable_listen_address_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(&["--listen", "not-an-address"], &tmp.path().join("data"));
    assert_refused(&out, "--listen");
    assert!(!tmp.path().join("data").exists());
}

#[test]
fn a_port_in_use_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let data = tmp.path().join("data");
    let out = serve(&["--listen", &addr], &data);
    assert_refused(&out, &format!("cannot listen on {addr}"));
    assert!(!data.exists());
}

#[test]
fn a_data_dir_that_cannot_be_created_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // A path below a regular file can never become a directory, even for root.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = serve(&["--listen", "127.0.0.1:0"], &file.join("data"));
    assert_refused(&out, "data dir");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn a_database_file_that_cannot_be_opened_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // A directory where the database file should be.
    let db = tmp.path().join("db-is-a-dir");
    std::fs::create_dir(&db).unwrap();
    let url = format!("sqlite://{}", db.display());
    let out = serve(&["--listen", "127.0.0.1:0", "--database-url", &url], &data);
    assert_refused(&out, "cannot open database");
    assert_eq!(std::fs::read_dir(&db).unwrap().count(), 0);
    assert!(
        !data.exists(),
        "the data dir made for this run is removed again"
    );
}

#[test]
fn a_database_url_of_another_kind_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            "mysql://localhost/lanes",
        ],
        &tmp.path().join("data"),
    );
    assert_refused(&out, "expected sqlite://PATH or postgres://");
}

#[test]
fn an_unreachable_postgres_server_is_refused_in_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let url = "postgres://lanes:hunter2hunter2@127.0.0.1:1/lanes";
    let out = serve(
        &["--listen", "127.0.0.1:0", "--database-url", url],
        &tmp.path().join("data"),
    );
    assert_refused(
        &out,
        "cannot open database postgres://lanes:***@127.0.0.1:1/lanes",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("hunter2"), "the password leaked: {stderr}");
}

#[test]
fn a_missing_postgres_database_is_refused_in_one_line() {
    let Some(server) = lanes_tests::postgres_server() else {
        return; // the PostgreSQL run covers it
    };
    let tmp = tempfile::tempdir().unwrap();
    let url = lanes_tests::database_on(&server, "lanes_no_such_database");
    let out = serve(
        &["--listen", "127.0.0.1:0", "--database-url", &url],
        &tmp.path().join("data"),
    );
    assert_refused(&out, "lanes_no_such_database");
    assert_refused(&out, "does not exist");
}

#[test]
fn doctor_without_a_driver_says_so_plainly() {
    if Path::new("/proc/driver/nvidia").exists() {
        return; // a real driver is present; the device-machine run covers doctor there
    }
    let out = Command::new(lanes_bin()).arg("doctor").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("NVIDIA driver: not found"), "{stdout}");
}

fn user_add(args: &[&str], data_dir: &Path, stdin: &str) -> Output {
    let data = data_dir.to_str().unwrap();
    lanes_tests::lanes_with_input(
        &[&["user", "add", "--data-dir", data], args].concat(),
        stdin,
    )
}

#[tokio::test]
async fn user_add_creates_the_first_admin_without_a_server_and_refuses_a_duplicate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let args = [
        "--username",
        "ada",
        "--admin",
        "--unix-user",
        "ada",
        "--password-stdin",
    ];
    let out = user_add(&args, &data, "a long passphrase\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#"created admin "ada""#));

    let again = user_add(&args, &data, "another passphrase\n");
    assert_refused(&again, r#"a user named "ada" already exists"#);

    let url = format!("sqlite://{}", data.join("lanes.db").display());
    let store = lanes_server::store::Store::open(&url).await.unwrap();
    let ada = store.accounts().by_username("ada").await.unwrap().unwrap();
    assert_eq!(ada.role, lanes_server::accounts::Role::Admin);
    assert_eq!(ada.unix_user.as_deref(), Some("ada"));
    let audit = store.audit_log().recent(10).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].action, "user.create");
    store.close().await;
}

#[test]
fn user_add_refuses_bad_input_before_touching_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["--username", "ada", "--password-stdin"],
            "short\n",
            "at least 10 characters",
        ),
        (
            &["--username", "Ada!", "--password-stdin"],
            "long enough pw\n",
            "username must be",
        ),
        (
            &[
                "--username",
                "ada",
                "--unix-user",
                "root",
                "--password-stdin",
            ],
            "long enough pw\n",
            "may not run as root",
        ),
        (
            &["--username", "ada"],
            "long enough pw\n",
            "--password-stdin",
        ),
    ];
    for (args, stdin, needle) in cases {
        assert_refused(&user_add(args, &data, stdin), needle);
    }
    assert!(!data.exists(), "nothing was written");
}

#[tokio::test]
async fn db_status_lists_pending_migrations_and_db_migrate_applies_them() {
    let tmp = tempfile::tempdir().unwrap();
    let db = lanes_tests::TestDb::fresh(tmp.path()).await;
    let data = tmp.path().join("data");
    let args = |verb: &'static str| {
        vec![
            "db".to_string(),
            verb.to_string(),
            "--data-dir".to_string(),
            data.display().to_string(),
            "--database-url".to_string(),
            db.url.clone(),
        ]
    };
    let run = |verb: &'static str| {
        let args = args(verb);
        lanes_tests::run_lanes(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let before = run("status");
    let text = String::from_utf8_lossy(&before.stdout).to_string();
    if lanes_tests::on_postgres() {
        // An empty PostgreSQL database: every migration is still to come.
        assert!(before.status.success(), "{before:?}");
        assert!(
            text.contains("pending") && !text.contains("applied"),
            "{text}"
        );
        assert!(
            text.ends_with("`lanes db migrate` (or `lanes serve`) applies them\n"),
            "{text}"
        );
    } else {
        // No SQLite file yet: status says so and makes none.
        assert_refused(&before, "there is no database at");
        assert!(!tmp.path().join("lanes.db").exists());
    }
    let migrated = run("migrate");
    assert!(migrated.status.success(), "{migrated:?}");
    let after = run("status");
    let text = String::from_utf8_lossy(&after.stdout).to_string();
    assert!(
        text.contains("applied") && !text.contains("pending"),
        "{text}"
    );
    assert!(text.ends_with("up to date\n"), "{text}");
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_lanes_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let db = lanes_tests::TestDb::fresh(tmp.path()).await;
    let store = lanes_server::store::Store::open(&db.url).await.unwrap();
    store.close().await;
    // What a later release's migration leaves in the bookkeeping table.
    let insert = "INSERT INTO _sqlx_migrations
        (version, description, installed_on, success, checksum, execution_time)
        VALUES (99990101000000, 'from the future', CURRENT_TIMESTAMP, TRUE, X'00', 0)";
    use sqlx::Connection;
    match lanes_tests::postgres_server() {
        Some(_) => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query(&insert.replace("X'00'", "'\\x00'::bytea"))
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
        None => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query(insert).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        }
    }
    let out = serve(
        &["--listen", "127.0.0.1:0", "--database-url", &db.url],
        &tmp.path().join("data"),
    );
    assert_refused(&out, "upgraded by a newer Lanes");
}

/// A settings file holding `text`, in `dir`.
fn settings_file(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("lanes.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_settings_file_with_an_unknown_key_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = settings_file(tmp.path(), "poll_intervall = \"2s\"\n");
    let out = serve(&["--config", file.to_str().unwrap()], &data);
    assert_refused(
        &out,
        "unknown key: poll_intervall (did you mean poll_interval?)",
    );
    assert!(!data.exists());
    let file = settings_file(tmp.path(), "poll_interval = \"5ms\"\n");
    let out = serve(&["--config", file.to_str().unwrap()], &data);
    assert_refused(&out, "poll_interval: ");
    assert!(!data.exists());
}

#[test]
fn config_check_says_where_each_setting_came_from_and_hides_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let file = settings_file(
        tmp.path(),
        "listen = \"127.0.0.1:4100\"\nmetrics_token = \"s3cret-token\"\n\
         database_url = \"postgres://lanes:hunter2@db/lanes\"\ntrusted_proxies = [\"10.0.0.1\"]\n",
    );
    let out = Command::new(lanes_bin())
        .args(["config", "check", "--config", file.to_str().unwrap()])
        .env("LANES_POLL_INTERVAL", "2s")
        .env_remove("LANES_LISTEN")
        .env_remove("LANES_DATABASE_URL")
        .env_remove("LANES_METRICS_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in\n{stdout}"))
            .to_string()
    };
    let from_file = format!("# file {}", file.display());
    assert!(line("listen").contains("\"127.0.0.1:4100\""));
    assert!(line("listen").ends_with(&from_file), "{}", line("listen"));
    assert!(line("poll_interval").ends_with("# environment LANES_POLL_INTERVAL"));
    assert!(line("process_interval").ends_with("# default"));
    assert!(line("trusted_proxies").starts_with("trusted_proxies = [\"10.0.0.1\"]"));
    assert!(line("database_url").contains("postgres://lanes:****@db/lanes"));
    assert!(line("metrics_token").contains("\"****\""));
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("s3cret"),
        "{stdout}"
    );
}

#[test]
fn the_settings_file_tells_user_add_where_the_database_is() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("from-file");
    let file = settings_file(
        tmp.path(),
        &format!("data_dir = {:?}\n", data.display().to_string()),
    );
    let out = Command::new(lanes_bin())
        .args(["user", "add", "--username", "ada", "--password-stdin"])
        .args(["--config", file.to_str().unwrap()])
        .env_remove("LANES_DATA_DIR")
        .env_remove("LANES_DATABASE_URL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"a long enough passphrase\n")?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(data.join("lanes.db").exists());
}

#[test]
fn a_site_root_that_is_no_folder_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let missing = tmp.path().join("no-site");
    let out = serve(&["--site-root", missing.to_str().unwrap()], &data);
    assert_refused(&out, "not a directory");
    assert!(!data.exists(), "nothing is left behind");
}
