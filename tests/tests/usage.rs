//! Per-process use and energy against the real server on a simulated node (background jobs
//! off): two users' processes share one card, the dashboard shows each one's SM share, the
//! report splits the card's hours by those shares (not by who booked it), and the booking's
//! energy shows in the report, so far on the dashboard, and on `/metrics`.

use lanes_server::accounts::Role;
use lanes_tests::{booking_of, cards, wait_until, Session, TestApp};
use lanes_types::account::{PortalSettings, UserPatch};
use lanes_types::query::{InjectProcess, ReportQuery};
use std::time::Duration;

#[tokio::test]
async fn two_users_on_one_card_are_charged_by_their_sm_share_and_the_booking_by_its_energy() {
    let app = TestApp::spawn_configured(2, |config| config.sim.background = false).await;
    let admin = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    let admin_client = admin.client();
    // ada's account is ada; bo's is bob.
    for (name, unix) in [("ada", "ada"), ("bo", "bob")] {
        let user = app.create_user(name, "a passphrase", Role::User).await;
        admin_client
            .update_user(
                user.id,
                &UserPatch {
                    unix_user: Some(unix.into()),
                    ..Default::default()
                },
            )
            .await
            .expect("the account is set");
    }
    admin_client
        .save_settings(&PortalSettings {
            energy_price_per_kwh: Some(0.5),
            carbon_g_per_kwh: Some(300.0),
            ..Default::default()
        })
        .await
        .expect("the admin sets a price and a carbon intensity");
    let card = cards(&app).await[0].info.uuid.clone();
    // ada books the card; bo's process runs on it too.
    // On a whole second, as the report's period is.
    let start = chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp(), 0).unwrap();
    let mut request = booking_of(
        std::slice::from_ref(&card),
        start,
        start + chrono::Duration::hours(1),
    );
    request.user = Some("ada".into());
    let booking = admin_client.book(&request).await.expect("booked for ada");
    for (user, pct) in [("ada", 30), ("bob", 60)] {
        admin_client
            .inject_process(&InjectProcess {
                utilization_pct: pct,
                ..InjectProcess::new(&card, user)
            })
            .await
            .expect("injected");
    }
    // The dashboard's rows carry each process's SM share; together they make the card's load.
    wait_until(Duration::from_secs(10), "per-process SM shares", || async {
        let gpu = cards(&app).await.remove(0);
        let util = gpu.sample.as_ref()?.utilization_gpu_pct;
        let sm: Vec<u32> = gpu.processes.iter().filter_map(|p| p.sm_pct).collect();
        (sm.len() == 2 && util >= 80 && sm.iter().sum::<u32>().abs_diff(util) <= 2).then_some(())
    })
    .await;
    // The shares are judged on a few seconds of both processes' readings: the minutes of use
    // are written on request (the writer's flush), until bo's count three seconds at 60 %.
    let report = wait_until(
        Duration::from_secs(15),
        "a report with three seconds of both users",
        || async {
            app.hooks.history.run().await;
            // From the booking's start: a minute cut by the period or the slot counts for the
            // same part of it in both.
            let report = admin_client
                .usage_report(&ReportQuery {
                    from: Some(booking.start),
                    to: Some(chrono::Utc::now() + chrono::Duration::minutes(1)),
                    ..Default::default()
                })
                .await
                .expect("the report");
            let bo = report.users.iter().find(|u| u.name == "bo")?;
            (bo.gpu_hours_used * 3600.0 >= 3.0 * 0.6 && report.per_process).then_some(report)
        },
    )
    .await;
    let row = |name: &str| {
        report
            .users
            .iter()
            .find(|u| u.name == name)
            .unwrap()
            .clone()
    };
    let (ada, bo) = (row("ada"), row("bo"));
    // bo booked nothing, yet holds two thirds of the card's use: 60 of the 90 % asked.
    assert_eq!(bo.gpu_hours_booked, 0.0);
    let share = bo.gpu_hours_used / (ada.gpu_hours_used + bo.gpu_hours_used);
    assert!(
        (share - 2.0 / 3.0).abs() < 0.05,
        "bo's share {share}: {ada:?} {bo:?}"
    );
    assert!(bo.gpu_hours_used_card_level == 0.0);
    // The booking's energy: a card near 600 W for a few seconds is a few Wh.
    let b = report
        .bookings
        .iter()
        .find(|b| b.booking_id == booking.id)
        .unwrap();
    assert!(b.energy_kwh > 1e-4 && b.energy_kwh < 0.05, "{b:?}");
    assert!((b.cost.unwrap() - b.energy_kwh * 0.5).abs() < 1e-12);
    assert!((b.co2e_kg.unwrap() - b.energy_kwh * 0.3).abs() < 1e-12);
    // Split by the same shares, and all of it someone's: the processes' part to them, the
    // rest (the idle draw before they started) to ada, who booked the card.
    let energy_share = bo.energy_kwh / (ada.energy_kwh + bo.energy_kwh);
    assert!((energy_share - 2.0 / 3.0).abs() < 0.05, "{ada:?} {bo:?}");
    assert!(
        (ada.energy_kwh + bo.energy_kwh - b.energy_kwh).abs() < b.energy_kwh * 0.01,
        "{ada:?} {bo:?} {b:?}"
    );
    let accounts: Vec<&str> = report
        .unix_users
        .iter()
        .map(|u| u.unix_user.as_str())
        .collect();
    assert_eq!(accounts, ["ada", "bob"]);
    assert_eq!(report.unix_users[1].username.as_deref(), Some("bo"));
    // CSV: the same rows.
    let csv = admin_client
        .usage_csv(&ReportQuery {
            from: Some(start - chrono::Duration::minutes(1)),
            to: Some(chrono::Utc::now() + chrono::Duration::minutes(1)),
            table: Some("unix_users".into()),
        })
        .await
        .unwrap();
    assert!(csv.starts_with("unix_user,user,gpu_hours_used,"), "{csv}");
    assert!(csv.contains("\r\nbob,bo,"), "{csv}");

    // A member sees their own rows only.
    let ada_session = app.login("ada", "a passphrase").await;
    let mine = app
        .client_with(&ada_session)
        .usage_report(&ReportQuery {
            from: Some(start - chrono::Duration::minutes(1)),
            to: Some(chrono::Utc::now() + chrono::Duration::minutes(1)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(mine.users.len(), 1);
    assert_eq!(mine.unix_users.len(), 1);

    // So far, for the dashboard: the active booking's energy, growing.
    let so_far = |list: Vec<lanes_types::report::BookingEnergyNow>| {
        list.into_iter()
            .find(|e| e.booking_id == booking.id)
            .map(|e| e.energy_kwh)
            .unwrap()
    };
    let first = so_far(
        app.client_with(&ada_session)
            .booking_energy()
            .await
            .unwrap(),
    );
    assert!(first > 0.0);
    wait_until(
        Duration::from_secs(10),
        "the booking's energy to grow",
        || async {
            let now = so_far(
                app.client_with(&ada_session)
                    .booking_energy()
                    .await
                    .unwrap(),
            );
            (now > first).then_some(())
        },
    )
    .await;
    // And the card's counter on /metrics.
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("lanes_gpu_energy_joules_total{") && l.contains(&card)),
        "{metrics}"
    );
    app.stop().await;
}
