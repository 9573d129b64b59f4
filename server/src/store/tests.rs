//! Tests of the store against a real database (SQLite in a temporary file).

use super::open::postgres_too_old;
use super::*;

fn gpu(uuid: &str, index: u32) -> GpuInfo {
    GpuInfo {
        node: "n1".into(),
        uuid: uuid.into(),
        index,
        name: "H200".into(),
        pci_bus_id: format!("00000000:{index:02X}:00.0"),
        memory_total_bytes: 1 << 40,
    }
}

async fn temp_store() -> (Store, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "lanes-store-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("lanes.db").display());
    (Store::open(&url).await.unwrap(), dir)
}

/// This process's POSIX locks on the file at `path`, as /proc/locks lists them.
fn locks_held_here(path: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    let (major, minor) = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let pid = std::process::id().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| {
            l.contains(" POSIX ")
                && l.split_whitespace().any(|w| w == id)
                && l.split_whitespace().any(|w| w == pid)
        })
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .collect()
}

/// `/healthz` reads the header: that must not drop SQLite's locks (closing any descriptor
/// of the file drops every POSIX lock this process holds on it), or another process
/// checkpoints and deletes the live WAL.
#[tokio::test]
async fn a_health_check_keeps_sqlites_locks_on_the_database_file() {
    let (store, dir) = temp_store().await;
    let db = dir.join("lanes.db");
    // A read transaction held open, as a request in flight holds one.
    let mut reader = store.pool.begin().await.unwrap();
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM users")
        .fetch_one(&mut *reader)
        .await
        .unwrap();
    let before = locks_held_here(&db);
    assert!(
        !before.is_empty(),
        "SQLite holds a lock on the file while it reads"
    );
    for _ in 0..3 {
        store.health().await.unwrap();
    }
    assert_eq!(
        locks_held_here(&db),
        before,
        "the health check left the locks alone"
    );
    reader.rollback().await.unwrap();
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn inventory_is_recorded_once_per_card_and_updated_when_seen_again() {
    let (store, dir) = temp_store().await;
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    let t1 = DateTime::from_timestamp(1_700_000_600, 0).unwrap();
    store
        .inventory()
        .record("n1", &[gpu("GPU-a", 0), gpu("GPU-b", 1)], t0)
        .await
        .unwrap();
    // After a re-cabling the same card shows up at another index.
    store
        .inventory()
        .record("n1", &[gpu("GPU-b", 0)], t1)
        .await
        .unwrap();
    let known = store.inventory().known_gpus().await.unwrap();
    assert_eq!(known.len(), 2);
    let b = known.iter().find(|g| g.uuid == "GPU-b").unwrap();
    assert_eq!((b.index, b.first_seen, b.last_seen), (0, t0, t1));
    let a = known.iter().find(|g| g.uuid == "GPU-a").unwrap();
    assert_eq!(a.last_seen, t0);
    assert_eq!(a.memory_total_bytes, 1 << 40);
    // The card the node no longer lists is nobody's to book; the one it lists is.
    assert_eq!((a.managed, b.managed), (0, 1));
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_user_is_created_once_with_its_audit_line_and_a_duplicate_is_a_conflict() {
    let (store, dir) = temp_store().await;
    let new = NewUser {
        username: "ada".into(),
        display_name: "Ada".into(),
        email: None,
        unix_user: Some("ada".into()),
        role: Role::Admin,
    };
    let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada").detail("role admin");
    let now = Utc::now();
    let user = store
        .accounts()
        .create(&new, "$argon2id$x", &audit, now)
        .await
        .unwrap();
    assert_eq!(
        (user.username.as_str(), user.role, user.enabled),
        ("ada", Role::Admin, true)
    );
    assert_eq!(store.accounts().count_enabled_admins().await.unwrap(), 1);
    let again = store
        .accounts()
        .create(&new, "$argon2id$y", &audit, now)
        .await
        .unwrap_err();
    assert!(
        matches!(again, StoreError::Conflict(ref m) if m.contains("already exists")),
        "{again}"
    );
    // The failed attempt left no second audit line.
    let lines = store.audit_log().recent(10).await.unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (
            lines[0].action.as_str(),
            lines[0].target.as_str(),
            lines[0].actor.as_deref()
        ),
        ("user.create", "ada", None)
    );
    assert_eq!(lines[0].detail, "role admin");
    assert_eq!(
        store.accounts().by_username("ada").await.unwrap(),
        Some(user)
    );
    assert_eq!(store.accounts().by_username("bob").await.unwrap(), None);
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// A report's energy parts add up while the history writer adds to the minute it reads:
/// the booking's energy, the part per-process samples gave to processes, and the
/// processes' own totals come from one snapshot (each write adds as much to all three).
#[tokio::test]
async fn a_reports_energy_and_its_parts_are_read_from_one_snapshot_while_minutes_grow() {
    use crate::bookings::{CardChoice, NewBooking};
    use crate::history::usage::{ProcessKey, ProcessUse};
    use crate::store::usage::MinuteUse;
    let (store, dir) = temp_store().await;
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    store
        .inventory()
        .record("n1", &[gpu("GPU-a", 0)], t0)
        .await
        .unwrap();
    let new = NewUser {
        username: "ada".into(),
        display_name: "Ada".into(),
        email: None,
        unix_user: Some("ada".into()),
        role: Role::User,
    };
    let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada");
    let owner = store
        .accounts()
        .create(&new, "$argon2id$x", &audit, t0)
        .await
        .unwrap();
    let booking = NewBooking {
        project: None,
        owner,
        cards: CardChoice::Named(vec!["GPU-a".into()]),
        start: t0,
        end: t0 + chrono::Duration::hours(1),
        note: String::new(),
        enforce_quota: false,
        lend: false,
    };
    let audit = AuditEntry::new(None, AuditAction::BookingCreate, "booking");
    let booking = store.bookings().create(&booking, audit, t0).await.unwrap();
    let card = store.history().gpu_ids().await.unwrap()[&("n1".to_string(), "GPU-a".to_string())];
    let minute = t0.timestamp() + 120;
    let writes = 200;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..writes {
                let use_ = ProcessUse {
                    seconds: 1.0,
                    used_pct_s: 50.0,
                    sm_pct_s: 50.0,
                    mem_pct_s: 0.0,
                    energy_mj: 600_000.0,
                };
                let key = ProcessKey {
                    unix_user: "ada".into(),
                    job_id: 0,
                };
                let added = MinuteUse {
                    energy_mj: 600_000,
                    processes: [(key, use_)].into_iter().collect(),
                };
                store
                    .usage()
                    .add(&[((card, minute), added)].into_iter().collect())
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let (from, to) = (t0.timestamp(), t0.timestamp() + 3600);
    let mut reads = 0;
    loop {
        let done = writer.is_finished();
        let (energy, processes) = store.usage().energy_and_processes(from, to).await.unwrap();
        let whole = energy.get(&booking.id).copied().unwrap_or_default();
        let theirs: f64 = processes.iter().map(|p| p.energy_mj).sum();
        assert_eq!(whole.energy_mj, whole.attributed_mj, "read {reads}");
        assert_eq!(whole.attributed_mj, theirs, "read {reads}");
        reads += 1;
        if done {
            assert_eq!(whole.energy_mj, 600_000.0 * writes as f64);
            break;
        }
    }
    assert!(reads > 1);
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn deliveries_at_once_never_take_more_requests_than_the_hourly_limit() {
    let (store, dir) = temp_store().await;
    let new = NewUser {
        username: "ada".into(),
        display_name: "Ada".into(),
        email: None,
        unix_user: None,
        role: Role::User,
    };
    let audit = AuditEntry::new(None, AuditAction::UserCreate, "ada");
    let now = Utc::now();
    let ada = store
        .accounts()
        .create(&new, "$argon2id$x", &audit, now)
        .await
        .unwrap();
    let hour_ago = now - chrono::Duration::hours(1);
    // Eight deliveries at once against a limit of three: three go.
    let outbox = store.outbox();
    let claims = (0..8).map(|_| outbox.claim_attempt(ada.id, Some(3), hour_ago, now));
    let granted = futures::future::join_all(claims).await;
    let granted = granted.into_iter().filter(|c| *c.as_ref().unwrap()).count();
    assert_eq!(granted, 3);
    assert_eq!(
        store
            .outbox()
            .attempts_since(ada.id, hour_ago)
            .await
            .unwrap(),
        3
    );
    // Unlimited (a test message) is counted, never refused.
    assert!(store
        .outbox()
        .claim_attempt(ada.id, None, hour_ago, now)
        .await
        .unwrap());
    assert_eq!(
        store
            .outbox()
            .attempts_since(ada.id, hour_ago)
            .await
            .unwrap(),
        4
    );
    // An hour later the earlier ones no longer count.
    let later = now + chrono::Duration::hours(2);
    let since = later - chrono::Duration::hours(1);
    assert!(store
        .outbox()
        .claim_attempt(ada.id, Some(3), since, later)
        .await
        .unwrap());
    store.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_unknown_url_is_refused_with_a_clear_message() {
    let err = Store::open("mysql://localhost/lanes").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("expected sqlite://PATH or postgres://"),
        "{err}"
    );
}

#[test]
fn a_postgres_older_than_fourteen_is_refused_by_name() {
    assert_eq!(
        postgres_too_old("130012").as_deref(),
        Some("PostgreSQL 13.12 is too old: Lanes needs 14 or newer")
    );
    assert_eq!(
        postgres_too_old("90624").as_deref(),
        Some("PostgreSQL 9.6 is too old: Lanes needs 14 or newer")
    );
    assert_eq!(postgres_too_old("140000"), None);
    assert_eq!(postgres_too_old("170002"), None);
}

#[test]
fn a_url_shown_in_a_message_hides_its_password() {
    assert_eq!(
        redact("postgres://lanes:s3cret@db.lab:5432/lanes"),
        "postgres://lanes:***@db.lab:5432/lanes"
    );
    assert_eq!(redact("postgres://db.lab/lanes"), "postgres://db.lab/lanes");
    assert_eq!(
        redact("sqlite:///var/lib/lanes/lanes.db"),
        "sqlite:///var/lib/lanes/lanes.db"
    );
}

/// A user who books, for the writer's tests.
async fn booker(store: &Store, name: &str, now: DateTime<Utc>) -> lanes_types::account::User {
    let new = NewUser {
        username: name.into(),
        display_name: name.into(),
        email: None,
        unix_user: Some(name.into()),
        role: Role::User,
    };
    let audit = AuditEntry::new(None, AuditAction::UserCreate, name);
    store
        .accounts()
        .create(&new, "$argon2id$x", &audit, now)
        .await
        .unwrap()
}

fn booking_of(
    owner: &lanes_types::account::User,
    cards: crate::bookings::CardChoice,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
) -> crate::bookings::NewBooking {
    crate::bookings::NewBooking {
        owner: owner.clone(),
        cards,
        start,
        end,
        note: String::new(),
        enforce_quota: true,
        lend: false,
        project: None,
    }
}

/// Bookings handed to SQLite's writer together share a transaction: each one's checks see the
/// ones before it (one winner per card and slot, the quota counted across them), a refused one
/// leaves nothing behind, and every booking answered as made is in the database with its holds
/// and its audit line.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bookings_written_together_see_each_other_and_a_refusal_undoes_only_its_own() {
    use crate::bookings::CardChoice;
    use lanes_types::booking::{Quota, Quotas};
    let (store, dir) = temp_store().await;
    assert!(store.local_writer.is_some(), "a file database has a writer");
    let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    let cards: Vec<GpuInfo> = (0..4).map(|i| gpu(&format!("GPU-{i}"), i)).collect();
    store.inventory().record("n1", &cards, now).await.unwrap();
    let ada = booker(&store, "ada", now).await;
    let bob = booker(&store, "bob", now).await;
    // Bob may hold two upcoming bookings at most.
    let mut quotas = Quotas::default();
    quotas.users.insert(
        "bob".into(),
        Quota {
            max_upcoming: Some(2),
            ..Quota::default()
        },
    );
    let audit = AuditEntry::new(None, AuditAction::QuotaUpdate, "quotas");
    store.quotas().save(&quotas, &audit, now).await.unwrap();
    let hour = |h: i64| now + chrono::Duration::hours(h);
    let mut requests = Vec::new();
    // 32 for card 0 in one slot, 16 for any two cards in another (two fit), 8 of Bob's.
    for _ in 0..32 {
        requests.push(booking_of(
            &ada,
            CardChoice::Named(vec!["GPU-0".into()]),
            (hour(1), hour(2)),
        ));
    }
    for _ in 0..16 {
        requests.push(booking_of(&ada, CardChoice::Any(2), (hour(3), hour(4))));
    }
    for i in 0..8 {
        requests.push(booking_of(
            &bob,
            CardChoice::Named(vec!["GPU-3".into()]),
            (hour(10 + i), hour(11 + i)),
        ));
    }
    let answers = futures::future::join_all(requests.iter().map(|new| {
        let audit = AuditEntry::new(Some(new.owner.id), AuditAction::BookingCreate, "");
        let store = &store;
        async move { store.bookings().create(new, audit, now).await }
    }))
    .await;
    let made: Vec<&lanes_types::booking::Booking> =
        answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(matches!(refused, StoreError::Refused(_)), "{refused}");
    }
    let count = |owner: i64, start: DateTime<Utc>| {
        made.iter()
            .filter(|b| b.user_id == owner && b.start == start)
            .count()
    };
    assert_eq!(count(ada.id, hour(1)), 1, "one winner for card 0");
    assert_eq!(count(ada.id, hour(3)), 2, "two pairs of four cards");
    let bobs = made.iter().filter(|b| b.user_id == bob.id).count();
    assert_eq!(bobs, 2, "Bob's quota counted across the batch");
    // What was answered is what is stored: the bookings, their holds, their audit lines.
    let stored = store
        .bookings()
        .list(&BookingFilter::default(), now)
        .await
        .unwrap();
    let mut answered: Vec<_> = made.iter().map(|b| (b.id, b.gpus.clone())).collect();
    let mut listed: Vec<_> = stored.iter().map(|b| (b.id, b.gpus.clone())).collect();
    answered.sort();
    listed.sort();
    assert_eq!(answered, listed);
    let mut held: Vec<_> = stored
        .iter()
        .filter(|b| b.start == hour(3))
        .flat_map(|b| b.gpus.iter().map(|g| g.uuid.clone()))
        .collect();
    held.sort();
    assert_eq!(held, ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]);
    let audited: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM audit_log WHERE action = 'booking.create' AND target LIKE 'booking %'",
    )
    .fetch_one(&store.pool)
    .await
    .unwrap();
    assert_eq!(audited as usize, made.len());
    let holds: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM booking_gpus")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    assert_eq!(
        holds as usize,
        made.iter().map(|b| b.gpus.len()).sum::<usize>()
    );
    // Closed, the writer takes no more; a store opened again books through a new one.
    store.close().await;
    let late = store
        .bookings()
        .create(
            &requests[0],
            AuditEntry::new(None, AuditAction::BookingCreate, ""),
            now,
        )
        .await
        .unwrap_err();
    assert!(matches!(late, StoreError::Unavailable(_)), "{late}");
    let url = format!("sqlite://{}", dir.join("lanes.db").display());
    let again = Store::open(&url).await.unwrap();
    let next = booking_of(
        &ada,
        CardChoice::Named(vec!["GPU-0".into()]),
        (hour(5), hour(6)),
    );
    let audit = AuditEntry::new(None, AuditAction::BookingCreate, "");
    again.bookings().create(&next, audit, now).await.unwrap();
    again.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// A database file removed under the server: the writer refuses the booking (nothing is
/// written to a file nobody will open again), as the pool's writes do.
#[tokio::test]
async fn the_writer_refuses_bookings_once_the_database_file_is_gone() {
    use crate::bookings::CardChoice;
    let (store, dir) = temp_store().await;
    let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    store
        .inventory()
        .record("n1", &[gpu("GPU-0", 0)], now)
        .await
        .unwrap();
    let ada = booker(&store, "ada", now).await;
    let hour = |h: i64| now + chrono::Duration::hours(h);
    let first = booking_of(
        &ada,
        CardChoice::Named(vec!["GPU-0".into()]),
        (hour(1), hour(2)),
    );
    let audit = AuditEntry::new(None, AuditAction::BookingCreate, "");
    store
        .bookings()
        .create(&first, audit.clone(), now)
        .await
        .unwrap();
    std::fs::rename(dir.join("lanes.db"), dir.join("moved.db")).unwrap();
    let second = booking_of(
        &ada,
        CardChoice::Named(vec!["GPU-0".into()]),
        (hour(2), hour(3)),
    );
    let refused = store
        .bookings()
        .create(&second, audit, now)
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Unavailable(_)), "{refused}");
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// sqlx names an in-memory database `file:sqlx-in-memory-N`: that is no file (to watch, to
/// make private, or for the writer to open).
#[test]
fn an_in_memory_database_has_no_file() {
    assert_eq!(sqlite_file("sqlite::memory:"), Ok(None));
    assert_eq!(sqlite_file("sqlite://:memory:"), Ok(None));
    assert_eq!(
        sqlite_file("sqlite:///var/lib/lanes/lanes.db"),
        Ok(Some("/var/lib/lanes/lanes.db".into()))
    );
}

/// One statement read through the pool and through the writer's connection gives the same
/// rows: every kind of column, NULLs, `$N` bound out of order of appearance.
#[tokio::test]
async fn a_statement_reads_the_same_through_the_pool_and_the_writers_connection() {
    use super::conn::{Arg, Conn, Kind, Local};
    let (store, dir) = temp_store().await;
    let sql = "SELECT $2 + 1, $1, CAST($3 AS REAL) / 2, NULL, CAST(NULL AS TEXT), 'x' || $1
               UNION ALL SELECT 7, 'b', 0.25, 1, 'y', $4";
    let args = [
        Arg::Text(Some("a")),
        Arg::Int(Some(41)),
        Arg::Int(Some(3)),
        Arg::Text(None),
    ];
    let kinds = [
        Kind::Int,
        Kind::Text,
        Kind::Real,
        Kind::Int,
        Kind::Text,
        Kind::Text,
    ];
    let mut tx = store.pool.begin().await.unwrap();
    let pooled = tx.rows(sql, &args, &kinds).await.unwrap();
    tx.rollback().await.unwrap();
    let conn = rusqlite::Connection::open(dir.join("lanes.db")).unwrap();
    let local = super::conn::run_now(Local(&conn).rows(sql, &args, &kinds)).unwrap();
    assert_eq!(pooled, local);
    assert_eq!(pooled[0].int(0).unwrap(), 42);
    assert_eq!(pooled[0].text(1).unwrap(), "a");
    assert_eq!(pooled[0].opt_real(2).unwrap(), Some(1.5));
    assert_eq!(pooled[0].opt_int(3).unwrap(), None);
    assert_eq!(pooled[1].text(4).unwrap(), "y");
    assert!(
        pooled[0].text(0).is_err(),
        "an integer is not read as a text"
    );
    store.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}
