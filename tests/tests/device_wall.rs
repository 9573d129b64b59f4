//! The device wall: a job sits in a cgroup that admits only its booked cards' device files,
//! and everything in that cgroup ends with the job, wherever it moved its session. The
//! simulated cards stand for harmless character devices here (`/dev/null`, `/dev/zero`,
//! `/dev/full`, `/dev/urandom`). CI runs as root on cgroup v1 with a cgroup2 hierarchy beside
//! it, so both kinds of wall are tried; without root the wall is off (its own test says so).

use lanes_server::accounts::Role;
use lanes_server::jobs::wall::{Isolation, Wall};
use lanes_tests::{cards, ensure_unix_account, wait_until, Session, TestApp};
use lanes_types::job::JobState;
use std::collections::BTreeMap;
use std::time::Duration;

const ACCOUNT: &str = "lanes-test-job";
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom"];

/// Opens each card's device file and says whether it could.
const PROBE: &str = "for d in /dev/null /dev/zero /dev/full /dev/urandom; do \
    if (exec 3<$d) 2>/dev/null; then echo \"$d open\"; else echo \"$d refused\"; fi; done";

/// Leaves its session twice over (setsid, then a background child of a shell that exits) with
/// a sleeper that ignores SIGTERM, says who is who, and waits, ignoring SIGTERM itself.
const ESCAPE: &str = "setsid sh -c 'trap \"\" TERM; sleep 600 & echo escaped=$!'; \
    echo main=$$; trap '' TERM; while :; do sleep 0.1; done";

fn running_as_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Whether `pid` still runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

fn session_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit(')').next().unwrap();
    rest.split_whitespace().nth(4).unwrap().parse().unwrap()
}

async fn walled_jobs_stay_on_their_cards_and_end_whole(isolation: Isolation) {
    if !running_as_root() {
        eprintln!("skipped: the device wall needs root");
        return;
    }
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn_configured(4, |config| {
        config.isolation = isolation;
        config.sim.device_files = DEVICES.iter().map(Into::into).collect();
    })
    .await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 600).await;
    let probe = ada.submit(booking.id, &["/bin/sh", "-c", PROBE]).await;
    let escape = ada.submit(booking.id, &["/bin/sh", "-c", ESCAPE]).await;

    // Its own card's device opens; the other three cards' are refused.
    let done = ada.finished(probe.id, 15).await;
    assert_eq!(done.exit_code, Some(0), "{done:?}");
    assert_eq!(
        ada.log(probe.id).await,
        "/dev/null open\n/dev/zero refused\n/dev/full refused\n/dev/urandom refused\n"
    );
    let wall = done.device_wall.unwrap_or_default();
    let expected = match isolation {
        Isolation::CgroupV2 => "cgroup v2 with an eBPF device program",
        _ => "cgroup v1 devices controller",
    };
    assert!(wall.starts_with(expected), "{wall}");

    // The sleeper left the job's session, yet its cgroup still says whose it is.
    let out = wait_until(
        Duration::from_secs(10),
        "the job reports its pids",
        || async {
            let out = ada.log(escape.id).await;
            out.contains("main=").then_some(out)
        },
    )
    .await;
    let pid_of = |name: &str| -> u32 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {out}"))
    };
    let (main, escaped) = (pid_of("main"), pid_of("escaped"));
    assert_ne!(
        session_of(escaped),
        main,
        "the sleeper left the job's session"
    );
    let same = Wall::set_up(isolation, &app.cgroup_parent.0, &BTreeMap::new()).unwrap();
    let cgroup = same
        .cgroup_of(escaped)
        .expect("the sleeper is in a job cgroup");
    let running = ada.job(escape.id).await;
    assert!(
        running
            .device_wall
            .as_deref()
            .is_some_and(|w| w.ends_with(&format!("(its cgroup: {cgroup})"))),
        "attributed to its job by cgroup: {cgroup} vs {running:?}"
    );

    // At the slot's end both go (they ignore SIGTERM: the cgroup is killed after the grace),
    // and the job's cgroup is gone from every hierarchy, its CPU time recorded.
    let clock = &app.hooks.clock;
    clock.advance(booking.end - clock.now() + chrono::Duration::milliseconds(10));
    app.hooks.runner.run().await;
    clock.advance(chrono::Duration::seconds(2));
    app.hooks.runner.run().await;
    let done = ada.finished(escape.id, 20).await;
    assert_eq!(
        (done.state, done.signal),
        (JobState::Killed, Some(9)),
        "{done:?}"
    );
    wait_until(
        Duration::from_secs(10),
        "the escaped sleeper is killed",
        || async { (!alive(escaped)).then_some(()) },
    )
    .await;
    let parents = app.cgroup_parent.dirs();
    assert!(!parents.is_empty());
    let no_job_cgroups = || {
        parents.iter().all(|p| {
            std::fs::read_dir(p)
                .unwrap()
                .flatten()
                .all(|e| !e.path().is_dir())
        })
    };
    let recorded = wait_until(
        Duration::from_secs(10),
        "the cgroups are removed",
        || async {
            let job = ada.job(escape.id).await;
            (no_job_cgroups() && job.cpu_time_ms.is_some()).then_some(job)
        },
    )
    .await;
    assert!(recorded.cpu_time_ms.is_some(), "{recorded:?}");
    app.stop().await;
}

#[tokio::test]
async fn on_cgroup_v1_a_job_opens_only_its_cards_and_nothing_of_it_outlives_the_slot() {
    walled_jobs_stay_on_their_cards_and_end_whole(Isolation::CgroupV1).await;
}

#[tokio::test]
async fn on_cgroup_v2_a_job_opens_only_its_cards_and_nothing_of_it_outlives_the_slot() {
    walled_jobs_stay_on_their_cards_and_end_whole(Isolation::CgroupV2).await;
}

#[tokio::test]
async fn without_the_wall_jobs_run_on_the_mask_alone_and_say_so() {
    ensure_unix_account(ACCOUNT);
    let app = TestApp::spawn_configured(2, |config| config.isolation = Isolation::None).await;
    let ada = Session {
        app: &app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    };
    let gpus = cards(&app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 60).await;
    let job = ada.submit(booking.id, &["/bin/true"]).await;
    let done = ada.finished(job.id, 15).await;
    assert_eq!(
        done.device_wall.as_deref(),
        Some("off, device mask only (--isolation none)")
    );
    let err = ada.stderr(job.id).await;
    assert!(
        err.contains("lanes: device wall: off, device mask only (--isolation none)"),
        "{err}"
    );
    app.stop().await;
}
