//! Jobs in containers, with real rootless Podman (Debian's, with runc: crun refuses this hybrid
//! cgroup host), on simulated cards that stand for harmless character devices a member may
//! open: card 0 is `/dev/fuse`, card 1 `/dev/net/tun`. The simulated driver lists a real
//! process on a card while it holds the card's device file open, as NVML lists a CUDA process,
//! so attribution is read from the host exactly as for a real card.
//!
//! The image is made offline: a root file system of Debian's static busybox, imported into
//! each member's own image store (`podman import`), as no registry is reachable.
//!
//! Needs root, Podman, newuidmap and busybox (`make test` installs them); without them each
//! test says it is skipped and why.

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_login_account, wait_until, Session, TestApp};
use lanes_types::container::{ContainerFailure, ContainerSpec};
use lanes_types::enforcement::{Policy, WatchdogMode};
use lanes_types::job::{JobNote, JobState};
use lanes_types::query::ViolationQuery;
use lanes_types::ProcessLane;
use std::process::Command;
use std::time::Duration;

const MEMBER: &str = "lanes-ctr-ada";
const OTHER: &str = "lanes-ctr-bob";
const IMAGE: &str = "localhost/lanes-test:1";
const CARDS: [&str; 2] = ["/dev/fuse", "/dev/net/tun"];

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("they need root (cgroups, other accounts)".into());
    }
    for (program, package) in [
        ("/usr/bin/podman", "podman"),
        ("/usr/bin/newuidmap", "uidmap"),
        ("/bin/busybox", "busybox-static"),
    ] {
        if !std::path::Path::new(program).exists() {
            return Some(format!("{program} is missing (Debian's {package})"));
        }
    }
    CARDS
        .iter()
        .find(|c| !std::path::Path::new(c).exists())
        .map(|c| format!("{c} is missing"))
}

/// Runs `script` with `sh -c` as `account`, from its home, in a login environment.
fn as_account(account: &str, script: &str) -> std::process::Output {
    Command::new("runuser")
        .args(["-l", account, "-c", script])
        .output()
        .expect("runuser runs")
}

/// A member with a home, a subordinate id range and the test image in their own store.
fn member(account: &str) -> u32 {
    let (uid, _) = ensure_login_account(account, "/bin/sh", &[]).expect("root makes accounts");
    for file in ["/etc/subuid", "/etc/subgid"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if !text.lines().any(|l| l.starts_with(&format!("{account}:"))) {
            let start = 400_000 + (uid % 1000) * 65_536;
            let mut text = text;
            text.push_str(&format!("{account}:{start}:65536\n"));
            std::fs::write(file, text).expect("the subordinate id file is written");
        }
    }
    let have = as_account(account, &format!("podman image exists {IMAGE}"));
    if !have.status.success() {
        let root = tempfile::tempdir().expect("a root file system's directory");
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
        for tool in ["sh", "echo", "cat", "ls", "id", "sleep", "true"] {
            std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
        }
        let tar = root.path().join("rootfs.tar");
        let made = Command::new("tar")
            .args(["-C", &root.path().to_string_lossy(), "-cf"])
            .arg(&tar)
            .arg("bin")
            .status()
            .unwrap();
        assert!(made.success());
        std::fs::set_permissions(
            root.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::set_permissions(&tar, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let imported = as_account(account, &format!("podman import {} {IMAGE}", tar.display()));
        assert!(
            imported.status.success(),
            "podman import: {}",
            String::from_utf8_lossy(&imported.stderr)
        );
    }
    uid
}

/// Podman as Lanes runs it on this host: with runc and no cgroup manager of its own on a
/// hybrid cgroup v1 host (crun refuses those).
fn podman() -> &'static str {
    if lanes_server::jobs::wall::unified_hierarchy() {
        "podman --cgroup-manager=cgroupfs"
    } else {
        "podman --runtime /usr/bin/runc --cgroup-manager=cgroupfs"
    }
}

fn container(image: &str) -> ContainerSpec {
    ContainerSpec {
        image: image.into(),
        runtime: None,
        volumes: vec![],
        options: vec![],
    }
}

async fn app() -> TestApp {
    TestApp::spawn_configured(2, |config| {
        config.sim.background = false;
        config.sim.device_files = CARDS.iter().map(Into::into).collect();
        config.sim.device_holders = true;
    })
    .await
}

/// The member signed in, the cards, and their booking of card 0 for ten minutes.
async fn booked(
    app: &TestApp,
) -> (
    Session<'_>,
    Vec<lanes_types::GpuState>,
    lanes_types::booking::Booking,
) {
    let ada = Session {
        app,
        cookie: app.sign_up(MEMBER, Role::User).await,
    };
    let gpus = cards(app).await;
    let booking = ada.book(&[gpus[0].info.uuid.clone()], 600).await;
    (ada, gpus, booking)
}

/// A member's container job: it runs as their own uid, sees exactly the booked card's device
/// file and the mask, its process on the card is theirs and the job's (named with its
/// container and image), and at the slot's end it is stopped with nothing left: no process,
/// no cgroup, no container in their store.
#[tokio::test]
async fn a_container_job_runs_as_its_member_on_exactly_its_cards_and_leaves_nothing() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let uid = member(MEMBER);
    let app = app().await;
    let (ada, gpus, booking) = booked(&app).await;
    let mut request = Session::job_request(
        booking.id,
        &[
            "sh",
            "-c",
            "echo uid=$(id -u); ls /dev; echo mask=$CUDA_VISIBLE_DEVICES; \
             exec 3</dev/fuse; echo holding; trap 'echo stopping; exit 0' TERM; \
             while true; do sleep 1; done",
        ],
    );
    request.container = Some(container(IMAGE));
    let job = ada.client().submit_job(&request).await.expect("submitted");
    assert_eq!(
        job.container.as_ref().map(|c| c.image.as_str()),
        Some(IMAGE)
    );
    let out = wait_until(
        Duration::from_secs(60),
        "the container says it holds its card",
        || async {
            let out = ada.log(job.id).await;
            out.contains("holding").then_some(out)
        },
    )
    .await;
    assert!(out.contains(&format!("uid={uid}\n")), "{out}");
    assert!(
        out.contains(&format!("mask={}\n", gpus[0].info.uuid)),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l == "fuse"),
        "its card's device file: {out}"
    );
    assert!(
        !out.lines().any(|l| l == "net" || l == "tun"),
        "no other card's: {out}"
    );
    let stderr = ada.stderr(job.id).await;
    assert!(
        stderr.contains(&format!(
            "lanes: container: {IMAGE} with podman as {MEMBER}"
        )),
        "{stderr}"
    );

    // Its process on card 0 is the member's, the job's, and named with its container.
    let seen = wait_until(
        Duration::from_secs(20),
        "the container's process is on its card",
        || async {
            app.hooks.enforcer.run().await;
            let gpus = cards(&app).await;
            gpus[0]
                .processes
                .iter()
                .find(|p| p.container.is_some() && p.lane == Some(ProcessLane::Job { id: job.id }))
                .cloned()
        },
    )
    .await;
    assert_eq!(seen.user.as_deref(), Some(MEMBER), "{seen:?}");
    assert_eq!(seen.lane, Some(ProcessLane::Job { id: job.id }), "{seen:?}");
    let named = seen.container.expect("a container");
    assert_eq!(named.runtime, "podman");
    assert_eq!(named.image.as_deref(), Some(IMAGE));
    let name = named.name.expect("a name");
    assert!(
        name.starts_with(&format!("lanes-job-{}-", job.id)),
        "{name}"
    );

    // The slot ends: the container is stopped, then its cgroup, and nothing of it remains.
    let clock = &app.hooks.clock;
    clock.advance(booking.end - clock.now() + chrono::Duration::milliseconds(10));
    app.hooks.runner.run().await;
    let done = ada.finished(job.id, 60).await;
    assert_ne!(done.state, JobState::Running, "{done:?}");
    let left = wait_until(
        Duration::from_secs(60),
        "the job's cgroup is gone",
        || async {
            app.hooks.runner.run().await;
            let parents = app.cgroup_parent.dirs();
            parents
                .iter()
                .all(|p| {
                    std::fs::read_dir(p)
                        .map(|d| d.flatten().all(|e| !e.path().is_dir()))
                        .unwrap_or(true)
                })
                .then_some(())
        },
    )
    .await;
    let () = left;
    // By its own name: the other backend's suite may run a job of the same id meanwhile.
    let listed = as_account(MEMBER, "podman ps --all --format '{{.Names}}'");
    let names = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !names.lines().any(|n| n == name),
        "no container of the job is left in the member's store: {names}"
    );
    app.stop().await;
}

/// What a member cannot do with a container: an image that is an option, options that would
/// widen its rights or reach other cards, another member's home as a volume, its own
/// `podman run` reaching another card from inside its booking. Each is refused with words
/// that say why, and nothing runs.
#[tokio::test]
async fn containers_that_would_escape_their_lane_are_refused_and_nothing_starts() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    member(MEMBER);
    let (_, other_home) = ensure_login_account(OTHER, "/bin/sh", &[]).expect("root");
    let app = app().await;
    let (ada, _, booking) = booked(&app).await;
    let with = |spec: ContainerSpec| {
        let mut request = Session::job_request(booking.id, &["true"]);
        request.container = Some(spec);
        request
    };
    for (spec, says) in [
        (container("--privileged"), "is not an image"),
        (container("alpine; rm -rf ~"), "is not an image"),
        (
            ContainerSpec {
                options: vec!["--privileged".into()],
                ..container(IMAGE)
            },
            "--privileged is not allowed",
        ),
        (
            ContainerSpec {
                options: vec!["--device=/dev/net/tun".into()],
                ..container(IMAGE)
            },
            "exactly the booked cards",
        ),
        (
            ContainerSpec {
                options: vec!["--pid=host".into()],
                ..container(IMAGE)
            },
            "its own processes",
        ),
    ] {
        let refused = lanes_tests::refusal(ada.client().submit_job(&with(spec)).await);
        assert_eq!(refused.0, 422, "{refused:?}");
        assert!(refused.1.message.contains(says), "{says}: {refused:?}");
    }
    assert!(ada
        .client()
        .jobs(&Default::default())
        .await
        .unwrap()
        .is_empty());

    // Another member's home as a volume: the node refuses it before anything starts.
    let theirs = ContainerSpec {
        volumes: vec![format!("{}:/data:ro", other_home.display())],
        ..container(IMAGE)
    };
    let job = ada.client().submit_job(&with(theirs)).await.unwrap();
    let done = ada.finished(job.id, 30).await;
    assert_eq!(done.state, JobState::Failed, "{done:?}");
    assert!(
        matches!(&done.note, Some(JobNote::Container { failure: ContainerFailure::Volume { why, .. } }) if why.contains(&format!("is not {MEMBER}'s"))),
        "{done:?}"
    );
    assert_eq!(done.pid, None, "nothing started: {done:?}");

    // An image the member's store lacks: said in their words.
    let job = ada
        .client()
        .submit_job(&with(container("localhost/nowhere:1")))
        .await
        .unwrap();
    let done = ada.finished(job.id, 60).await;
    assert!(
        matches!(
            &done.note,
            Some(JobNote::Container {
                failure: ContainerFailure::ImageMissing { .. }
            })
        ),
        "{done:?}"
    );
    assert!(
        done.message
            .contains("is not in lanes-ctr-ada's image store"),
        "{done:?}"
    );

    // Its own podman, inside its booking, asking for the other card: the wall holds.
    let script = format!(
        "{} run --rm --pull=never --device /dev/net/tun {IMAGE} \
         sh -c 'exec 3</dev/net/tun && echo REACHED'; echo rc=$?",
        podman()
    );
    let sneak = ada.submit(booking.id, &["sh", "-c", &script]).await;
    let done = ada.finished(sneak.id, 60).await;
    let out = ada.log(sneak.id).await;
    assert!(!out.contains("REACHED"), "{out}");
    assert!(out.contains("rc=") && !out.contains("rc=0"), "{out}");
    app.stop().await;
    let _ = done;
}

/// A container another user started outside Lanes on a card they did not book is theirs in
/// the watchdog's eyes (the owner of its user namespace), named with its container and image,
/// never the runtime's root.
#[tokio::test]
async fn a_container_started_outside_lanes_is_reported_as_its_users_unbooked_use() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    member(OTHER);
    let app = app().await;
    let boss = Session {
        app: &app,
        cookie: app.sign_up("boss", Role::Admin).await,
    };
    boss.client()
        .save_policy(&Policy {
            watchdog: WatchdogMode::Warn,
            ..Policy::default()
        })
        .await
        .unwrap();
    let name = format!("outside-{}", std::process::id());
    let started = as_account(
        OTHER,
        &format!(
            "{} run -d --rm --pull=never --name {name} --device /dev/net/tun {IMAGE} \
             sh -c 'exec 3</dev/net/tun; sleep 120'",
            podman()
        ),
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let found = wait_until(
        Duration::from_secs(30),
        "the outsider's container is a violation",
        || async {
            app.hooks.enforcer.run().await;
            boss.client()
                .violations(&ViolationQuery::default())
                .await
                .ok()?
                .into_iter()
                // Other tests' containers may hold these device files at the same moment.
                .find(|v| {
                    v.container
                        .as_ref()
                        .is_some_and(|c| c.name.as_deref() == Some(name.as_str()))
                })
        },
    )
    .await;
    as_account(OTHER, &format!("podman rm --force --time 0 {name}"));
    assert_eq!(found.unix_user.as_deref(), Some(OTHER), "{found:?}");
    let seen = found.container.expect("its container");
    assert_eq!(seen.name.as_deref(), Some(name.as_str()));
    assert_eq!(seen.image.as_deref(), Some(IMAGE));
    assert_eq!(found.gpu_uuid, cards(&app).await[1].info.uuid);
    app.stop().await;
}
