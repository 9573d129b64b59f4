//! `lanes backup` and `lanes restore`: a consistent copy of a serving SQLite database taken
//! under write load, and put back in place of a lost one.

use lanes_server::accounts::Role;
use lanes_tests::{run_lanes, sqlite_only, TestApp};
use lanes_types::booking::Booking;
use lanes_types::query::BookingQuery;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_write_load_restores_to_a_consistent_database() {
    if sqlite_only("lanes backup of the SQLite file") {
        return;
    }
    let app = TestApp::spawn(4).await;
    let member = app.client_with(&app.sign_up("ada", Role::User).await);
    let cards: Vec<String> = lanes_tests::cards(&app)
        .await
        .into_iter()
        .map(|g| g.info.uuid)
        .collect();
    // Bookings, one after another, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, member, cards) = (stop.clone(), member.clone(), cards.clone());
        tokio::spawn(async move {
            let base = chrono::Utc::now() + chrono::Duration::days(1);
            let mut made: Vec<Booking> = Vec::new();
            let mut i = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let start = base + chrono::Duration::minutes(i);
                let card = cards[(i % 4) as usize].clone();
                let request =
                    lanes_tests::booking_of(&[card], start, start + chrono::Duration::minutes(1));
                made.push(member.book(&request).await.expect("booked"));
                i += 1;
            }
            made
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("lanes-backup.db");
    let url = app.database_url();
    let out = run_lanes(&[
        "backup",
        "--database-url",
        &url,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let made = writer.await.unwrap();
    app.stop().await;
    // A backup never overwrites.
    let again = run_lanes(&[
        "backup",
        "--database-url",
        &url,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));

    // Restored into a new data dir and served.
    let data = tmp.path().join("restored");
    let out = run_lanes(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = run_lanes(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an existing database needs --replace"
    );
    let restored_url = format!("sqlite://{}", data.join("lanes.db").display());
    let (dir, on) = (data.clone(), restored_url.clone());
    let restored = TestApp::spawn_configured(4, move |c| {
        c.data_dir = dir;
        c.database_url = on;
    })
    .await;
    let (again, _) = restored
        .anonymous()
        .login("ada", "ada passphrase")
        .await
        .expect("the old password works on the restored database");
    let back = again.bookings(&BookingQuery::default()).await.unwrap();
    // One snapshot: the bookings made before some moment, each whole, none after it.
    assert!(
        !back.is_empty() && back.len() < made.len(),
        "{} of {}",
        back.len(),
        made.len()
    );
    let prefix: Vec<(i64, &Vec<_>)> = made[..back.len()].iter().map(|b| (b.id, &b.gpus)).collect();
    assert_eq!(
        back.iter().map(|b| (b.id, &b.gpus)).collect::<Vec<_>>(),
        prefix
    );
    restored.stop().await;
    // Each booking has its audit line, and no line names a booking that is not there.
    let store = lanes_server::store::Store::open(&restored_url)
        .await
        .unwrap();
    let lines = store.recent_audit(100_000).await.unwrap();
    assert!(
        lines
            .iter()
            .any(|a| a.action == "database.restore" && a.detail.contains("lanes-backup.db")),
        "the restore is audited"
    );
    let mut audited: Vec<String> = lines
        .into_iter()
        .filter(|a| a.action == "booking.create")
        .map(|a| a.target)
        .collect();
    audited.sort();
    let mut want: Vec<String> = back.iter().map(|b| format!("booking {}", b.id)).collect();
    want.sort();
    assert_eq!(audited, want);
    store.close().await;

    // Not a Lanes database: refused, and nothing is replaced.
    let junk = tmp.path().join("junk.db");
    std::fs::write(&junk, b"not a database").unwrap();
    let out = run_lanes(&[
        "restore",
        "--from",
        junk.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--replace",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(data.join("lanes.db").exists());
}
