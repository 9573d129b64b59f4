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
    assert_refused(&out, "expected auto, nvml or sim:N");
    assert!(!data.exists());
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
fn a_postgres_url_is_refused_until_that_backend_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            "postgres://localhost/lanes",
        ],
        &tmp.path().join("data"),
    );
    assert_refused(&out, "expected sqlite://PATH");
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
