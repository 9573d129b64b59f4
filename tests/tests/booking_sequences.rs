//! Property test of the booking store itself (real SQL, real transactions): any sequence of
//! create / cancel / release / extend, with time moving on, never leaves two live bookings
//! overlapping on a card and never puts a user over a quota.

use chrono::{DateTime, Duration, DurationRound, Utc};
use lanes_server::accounts::{NewUser, Role, User};
use lanes_server::bookings::{CardChoice, NewBooking};
use lanes_server::store::{AuditEntry, BookingFilter, Store};
use lanes_tests::TestDb;
use lanes_types::booking::{Booking, BookingState, Quota, Quotas};
use lanes_types::GpuInfo;
use proptest::prelude::*;

const CARDS: usize = 3;
const MAX_GPUS: u32 = 2;
const WEEK_HOURS: f64 = 30.0;

#[derive(Clone, Debug)]
enum Op {
    /// A user books named cards (by bit mask) or any N, `start` hours from now for `len` hours.
    Create {
        user: usize,
        cards: u8,
        any: bool,
        start: i64,
        len: i64,
    },
    Cancel {
        pick: usize,
    },
    Release {
        pick: usize,
    },
    Extend {
        pick: usize,
        by: i64,
    },
    /// Time moves on.
    Wait {
        hours: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 1..8u8, any::<bool>(), 0..60i64, 1..30i64)
            .prop_map(|(user, cards, any, start, len)| Op::Create { user, cards, any, start, len }),
        1 => (0..64usize).prop_map(|pick| Op::Cancel { pick }),
        1 => (0..64usize).prop_map(|pick| Op::Release { pick }),
        2 => (0..64usize, 1..20i64).prop_map(|(pick, by)| Op::Extend { pick, by }),
        2 => (1..12i64).prop_map(|hours| Op::Wait { hours }),
    ]
}

async fn setup(db: &TestDb, base: DateTime<Utc>) -> (Store, Vec<User>, Vec<String>) {
    let store = Store::open(&db.url).await.unwrap();
    let gpus: Vec<GpuInfo> = (0..CARDS)
        .map(|i| GpuInfo {
            node: "n1".into(),
            uuid: format!("GPU-{i}"),
            index: i as u32,
            name: "sim".into(),
            pci_bus_id: format!("00000000:0{i}:00.0"),
            memory_total_bytes: 1 << 30,
        })
        .collect();
    store.inventory().record("n1", &gpus, base).await.unwrap();
    let mut users = Vec::new();
    for name in ["ada", "bob"] {
        let new = NewUser {
            username: name.into(),
            display_name: name.into(),
            email: None,
            unix_user: Some(name.into()),
            role: Role::User,
        };
        let audit = AuditEntry::new(None, lanes_server::audit::AuditAction::UserCreate, name);
        users.push(
            store
                .accounts()
                .create(&new, "x", &audit, base)
                .await
                .unwrap(),
        );
    }
    let quotas = Quotas {
        default: Quota {
            max_gpus: Some(MAX_GPUS),
            gpu_hours_per_week: Some(WEEK_HOURS),
            ..Quota::default()
        },
        ..Quotas::default()
    };
    let audit = AuditEntry::new(
        None,
        lanes_server::audit::AuditAction::QuotaUpdate,
        "quotas",
    );
    store.quotas().save(&quotas, &audit, base).await.unwrap();
    (store, users, gpus.into_iter().map(|g| g.uuid).collect())
}

/// Checks the invariants over every whole hour (all times in the test are whole hours).
fn check(bookings: &[Booking], base: DateTime<Utc>) -> Result<(), String> {
    let counted: Vec<&Booking> = bookings
        .iter()
        .filter(|b| b.state != BookingState::Cancelled)
        .collect();
    for (i, a) in counted.iter().enumerate() {
        for b in &counted[i + 1..] {
            let shared = a.gpus.iter().any(|g| b.gpus.contains(g));
            if shared && a.start < b.end && b.start < a.end {
                return Err(format!("bookings {} and {} overlap on a card", a.id, b.id));
            }
        }
    }
    let hour = |h: i64| base + Duration::hours(h);
    for user in counted
        .iter()
        .map(|b| b.user_id)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let mine: Vec<&&Booking> = counted.iter().filter(|b| b.user_id == user).collect();
        for h in -10..400 {
            let held: usize = mine
                .iter()
                .filter(|b| b.start <= hour(h) && hour(h) < b.end)
                .map(|b| b.gpus.len())
                .sum();
            if held > MAX_GPUS as usize {
                return Err(format!("user {user} holds {held} cards at hour {h}"));
            }
            let (from, to) = (hour(h), hour(h + 7 * 24));
            let used: f64 = mine
                .iter()
                .map(|b| {
                    let (s, e) = (b.start.max(from), b.end.min(to));
                    if e > s {
                        (e - s).num_minutes() as f64 / 60.0 * b.gpus.len() as f64
                    } else {
                        0.0
                    }
                })
                .sum();
            if used > WEEK_HOURS + 1e-6 {
                return Err(format!(
                    "user {user} uses {used} GPU-hours in the week from hour {h}"
                ));
            }
        }
    }
    Ok(())
}

async fn run(ops: Vec<Op>) -> Result<usize, String> {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path()).await;
    let base = Utc::now().duration_trunc(Duration::hours(1)).unwrap() + Duration::hours(1);
    let (store, users, uuids) = setup(&db, base).await;
    let mut now = base;
    let mut made: Vec<i64> = Vec::new();
    for op in ops {
        let audit = AuditEntry::new(None, lanes_server::audit::AuditAction::BookingCreate, "");
        match op {
            Op::Create {
                user,
                cards,
                any,
                start,
                len,
            } => {
                let named: Vec<String> = (0..CARDS)
                    .filter(|i| cards & (1 << i) != 0)
                    .map(|i| uuids[i].clone())
                    .collect();
                let new = NewBooking {
                    project: None,
                    owner: users[user].clone(),
                    cards: if any {
                        CardChoice::Any(named.len() as u32)
                    } else {
                        CardChoice::Named(named)
                    },
                    start: now + Duration::hours(start),
                    end: now + Duration::hours(start + len),
                    note: String::new(),
                    enforce_quota: true,
                    lend: false,
                };
                if let Ok(b) = store.bookings().create(&new, audit, now).await {
                    made.push(b.id);
                }
            }
            Op::Cancel { pick } | Op::Release { pick } if !made.is_empty() => {
                let _ = store
                    .bookings()
                    .withdraw(made[pick % made.len()], audit, now)
                    .await;
            }
            Op::Extend { pick, by } if !made.is_empty() => {
                let id = made[pick % made.len()];
                if let Ok(Some(b)) = store.bookings().get(id, now).await {
                    let _ = store
                        .bookings()
                        .extend(id, b.end + Duration::hours(by), true, audit, now)
                        .await;
                }
            }
            Op::Wait { hours } => now += Duration::hours(hours),
            _ => {}
        }
    }
    let filter = BookingFilter {
        include_cancelled: true,
        ..BookingFilter::default()
    };
    let all = store.bookings().list(&filter, now).await.unwrap();
    store.close().await;
    check(&all, base).map(|()| all.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_operations_overlaps_or_exceeds_a_quota(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let result = runtime.block_on(run(ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

#[test]
fn the_invariant_check_catches_an_overlap() {
    // The checker itself must be able to fail, or the property above proves nothing.
    let base = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let booking = |id, from, to| Booking {
        id,
        user_id: id,
        username: "u".into(),
        display_name: "u".into(),
        gpus: vec![lanes_types::booking::GpuRef {
            node: "n1".into(),
            uuid: "GPU-0".into(),
        }],
        start: base + Duration::hours(from),
        end: base + Duration::hours(to),
        state: BookingState::Upcoming,
        created_at: base,
        ..Default::default()
    };
    assert!(check(&[booking(1, 0, 2), booking(2, 2, 4)], base).is_ok());
    assert!(check(&[booking(1, 0, 3), booking(2, 2, 4)], base).is_err());
    assert!(
        check(&[booking(1, 0, 31)], base).is_err(),
        "31 GPU-hours in a week"
    );
}
