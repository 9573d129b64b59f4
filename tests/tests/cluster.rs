//! Several nodes, one pool, as real separate hosts on one machine: three nodes (`sim:4` each)
//! and a portal without cards, each in a network namespace of its own linked to the host by a
//! veth pair, on a PostgreSQL this test starts on the host side. Addresses exist only in the
//! namespaces the test made; everything is removed when it ends. Needs root, `ip` and
//! Debian's PostgreSQL server binaries; runs in the SQLite run (it brings its own database).

use chrono::{Duration as Span, Utc};
use lanes_client::Client;
use lanes_client::LogEvent;
use lanes_server::accounts::Role;
use lanes_tests::{ensure_unix_account, lanes_bin, on_postgres, wait_until, PrivatePostgres};
use lanes_types::booking::{Booking, CreateBooking};
use lanes_types::job::{CreateJob, Job, JobState};
use lanes_types::query::LogQuery;
use lanes_types::queue::SubmitJob;
use lanes_types::{GpuState, NodeState, NodeStatus};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A host of the test: a namespace, its veth pair, and the `lanes serve` inside.
struct Host {
    name: String,
    netns: String,
    /// The host side of the veth pair (down: the host is cut off).
    veth: String,
    /// Its address inside the namespace.
    addr: String,
    child: Option<Child>,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip runs");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl Host {
    /// Namespace `lanes-<tag>-<name>`, host side 10.<net>.<i>.1, node side 10.<net>.<i>.2.
    fn new(tag: &str, net: u8, i: u8, name: &str) -> Self {
        let netns = format!("lanes-{tag}-{name}");
        let veth = format!("lv{tag}{i}");
        let peer = format!("lp{tag}{i}");
        ip(&["netns", "add", &netns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &netns]);
        ip(&["addr", "add", &format!("10.{net}.{i}.1/24"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&["addr", "add", &format!("10.{net}.{i}.2/24"), "dev", &peer]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["link", "set", "lo", "up"]);
        Self {
            name: name.into(),
            netns,
            veth,
            addr: format!("10.{net}.{i}.2"),
            child: None,
        }
    }

    fn base(&self) -> String {
        format!("http://{}:3000", self.addr)
    }

    /// Starts `lanes serve` as node `name` inside the namespace, on the database at `url`.
    async fn serve(&mut self, data: &std::path::Path, url: &str, gpus: &str) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .arg(lanes_bin())
            .args(["serve", "--sim-background", "false", "--isolation", "none"])
            .args(["--listen", &format!("{}:3000", self.addr)])
            .args(["--data-dir", data.to_str().unwrap()])
            .args(["--database-url", url])
            .args(["--gpus", gpus, "--node-name", &self.name])
            .args(["--node-timeout", "3s", "--poll-interval", "200ms"])
            .args(["--job-grace", "1s"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lanes serve starts");
        self.child = Some(child);
        let health = format!("{}/healthz", self.base());
        wait_until(Duration::from_secs(20), "the node comes up", || async {
            reqwest::get(&health)
                .await
                .is_ok_and(|r| r.status().is_success())
                .then_some(())
        })
        .await;
    }

    fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Cuts the host off the network, or links it again.
    fn link(&self, up: bool) {
        ip(&["link", "set", &self.veth, if up { "up" } else { "down" }]);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill_9();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

fn can_run() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let ip = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !(root && ip) {
        eprintln!("needs root and iproute2: the network-namespace cluster is skipped");
    }
    if on_postgres() {
        eprintln!("the cluster test brings its own PostgreSQL: it runs in the SQLite run");
        return false;
    }
    root && ip
}

async fn nodes(client: &Client) -> Vec<NodeState> {
    client.nodes().await.unwrap_or_default()
}

async fn status_of(client: &Client, node: &str) -> Option<NodeStatus> {
    nodes(client)
        .await
        .into_iter()
        .find(|n| n.name == node)
        .map(|n| n.status)
}

async fn wait_job(client: &Client, id: i64, what: &str, done: impl Fn(&Job) -> bool) -> Job {
    wait_until(Duration::from_secs(30), what, || async {
        client.job(id).await.ok().filter(|j| done(j))
    })
    .await
}

fn cards_of(gpus: &[GpuState], node: &str) -> Vec<String> {
    let mut cards: Vec<&GpuState> = gpus.iter().filter(|g| g.info.node == node).collect();
    cards.sort_by_key(|g| g.info.index);
    cards.into_iter().map(|g| g.info.uuid.clone()).collect()
}

/// The node of a booking's cards (all on one).
fn node_of(booking: &Booking) -> String {
    let node = booking.gpus[0].node.clone();
    assert!(booking.gpus.iter().all(|g| g.node == node), "{booking:?}");
    node
}

/// A queue job of `gpus` cards that sleeps a second.
fn sleeper(gpus: u32, name: &str) -> SubmitJob {
    SubmitJob {
        project: None,
        name: Some(name.into()),
        ..lanes_tests::queue_job(gpus, 60, &["sleep", "1"])
    }
}

fn processes_with(marker: &str) -> usize {
    let out = Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_and_a_portal_in_their_own_namespaces_make_one_pool_that_survives_a_partition_and_a_dead_leader(
) {
    if !can_run() {
        return;
    }
    let tag = format!("{:04x}", std::process::id() % 0x10000);
    let net = 100 + (std::process::id() % 100) as u8;
    // The portal first: it takes the queue's lead, which the test later kills.
    let mut portal = Host::new(&tag, net, 1, "portal");
    let mut a = Host::new(&tag, net, 2, "a");
    let mut b = Host::new(&tag, net, 3, "b");
    let mut c = Host::new(&tag, net, 4, "c");
    let listen: Vec<String> = (1..=4).map(|i| format!("10.{net}.{i}.1")).collect();
    let clients = format!("10.{net}.0.0/16");
    // Keepalives: a server notices a cut-off client within seconds (docs/multi-node.md).
    let Some(pg) = PrivatePostgres::start_with(
        &format!("127.0.0.1,{}", listen.join(",")),
        &[&clients],
        &[
            "tcp_keepalives_idle=1",
            "tcp_keepalives_interval=1",
            "tcp_keepalives_count=2",
        ],
    ) else {
        return;
    };
    let url_from = |host: usize| pg.url_at(&format!("10.{net}.{host}.1"), "postgres");
    let member = "clustermember";
    let password = "clustermember passphrase";
    ensure_unix_account(member);
    lanes_tests::add_user(&pg.url("postgres"), member, password, Role::User).await;
    let tmp = tempfile::tempdir().unwrap();
    portal
        .serve(&tmp.path().join("portal"), &url_from(1), "none")
        .await;
    for (i, host) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
        let data = tmp.path().join(&host.name);
        host.serve(&data, &url_from(i + 2), "sim:4").await;
    }
    let (via_portal, _) = Client::new(portal.base())
        .login(member, password)
        .await
        .unwrap();
    let via_a = Client::new(a.base()).as_(via_portal.credentials().clone());

    // Every portal shows the whole pool: four nodes up, twelve cards.
    wait_until(Duration::from_secs(15), "four nodes up", || async {
        let up = nodes(&via_portal).await;
        (up.len() == 4 && up.iter().all(|n| n.status == NodeStatus::Up)).then_some(())
    })
    .await;
    let gpus = wait_until(Duration::from_secs(15), "twelve cards", || async {
        via_portal.gpus().await.ok().filter(|g| g.len() == 12)
    })
    .await;
    wait_until(
        Duration::from_secs(15),
        "node a shows twelve cards",
        || async { via_a.gpus().await.ok().filter(|g| g.len() == 12) },
    )
    .await;

    // A job booked on node C through the portal runs on C, under C's mask, and its log is
    // read and followed through the portal.
    let now = Utc::now();
    let on_c = cards_of(&gpus, "c");
    let booking = via_portal
        .book(&CreateBooking {
            project: None,
            gpus: Some(on_c[..2].to_vec()),
            count: None,
            start: now,
            end: now + Span::minutes(10),
            note: "on c".into(),
            user: None,
            lend: None,
        })
        .await
        .unwrap();
    let job = via_portal
        .submit_job(&CreateJob {
            container: None,
            booking_id: booking.id,
            argv: [
                "sh",
                "-c",
                "echo mask=$CUDA_VISIBLE_DEVICES; sleep 2; echo done",
            ]
            .map(String::from)
            .to_vec(),
            cwd: None,
            env: None,
            environment: None,
            name: Some("on-c".into()),
            notice: None,
            session: None,
        })
        .await
        .unwrap();
    let mut tail = via_portal
        .follow_log(job.id, &LogQuery::default())
        .await
        .unwrap();
    let followed = tokio::time::timeout(Duration::from_secs(30), async {
        let mut text = String::new();
        while let Some(Ok(event)) = tail.next().await {
            match event {
                LogEvent::Output(part) => text.push_str(&part),
                LogEvent::Closed { .. } => break,
            }
        }
        text
    })
    .await
    .expect("the live log through the portal ends with the job");
    let job = wait_job(&via_portal, job.id, "the job on c ends", |j| {
        j.state.is_over()
    })
    .await;
    assert_eq!(job.state, JobState::Exited, "{job:?}");
    let log = via_portal
        .job_log(job.id, &LogQuery::default(), None)
        .await
        .unwrap()
        .text;
    let stderr = LogQuery {
        stream: Some("stderr".into()),
        tail: None,
    };
    let header = via_portal
        .job_log(job.id, &stderr, None)
        .await
        .unwrap()
        .text;
    assert!(header.contains("on node c"), "{header}");
    let mask_line = log.lines().find(|l| l.starts_with("mask=")).unwrap();
    let mut mask: Vec<&str> = mask_line["mask=".len()..].split(',').collect();
    mask.sort_unstable();
    let mut booked: Vec<&str> = on_c[..2].iter().map(String::as_str).collect();
    booked.sort_unstable();
    assert_eq!(mask, booked, "{log}");
    assert!(
        followed.contains("mask=") && followed.contains("done"),
        "{followed}"
    );

    // A job on node B, then B is cut off: the portals see it unreachable within the timeout.
    let on_b = cards_of(&gpus, "b");
    let slot_end = Utc::now() + Span::seconds(10);
    let on_b_booking = via_portal
        .book(&CreateBooking {
            project: None,
            gpus: Some(vec![on_b[0].clone()]),
            count: None,
            start: Utc::now(),
            end: slot_end,
            note: "on b".into(),
            user: None,
            lend: None,
        })
        .await
        .unwrap();
    let marker = format!("sleep 61.{}", std::process::id());
    let on_b_job = via_portal
        .submit_job(&CreateJob {
            container: None,
            booking_id: on_b_booking.id,
            argv: ["sh", "-c", &format!("echo started; {marker}")]
                .map(String::from)
                .to_vec(),
            cwd: None,
            env: None,
            environment: None,
            name: Some("on-b".into()),
            notice: None,
            session: None,
        })
        .await
        .unwrap();
    wait_job(&via_portal, on_b_job.id, "the job on b runs", |j| {
        j.state == JobState::Running
    })
    .await;
    b.link(false);
    let cut = std::time::Instant::now();
    wait_until(Duration::from_secs(10), "b unreachable", || async {
        (status_of(&via_portal, "b").await == Some(NodeStatus::Unreachable)).then_some(())
    })
    .await;
    let noticed = cut.elapsed();
    assert!(
        noticed < Duration::from_secs(8),
        "noticed after {noticed:?}"
    );
    // Its booking stands; any-N and the queue leave its cards alone.
    let standing = via_portal.booking(on_b_booking.id).await.unwrap();
    assert_eq!(
        standing.state,
        lanes_types::booking::BookingState::Active,
        "{standing:?}"
    );
    for _ in 0..2 {
        let any = via_portal
            .book(&CreateBooking {
                project: None,
                gpus: None,
                count: Some(2),
                start: Utc::now() + Span::hours(1),
                end: Utc::now() + Span::hours(2),
                note: "any two".into(),
                user: None,
                lend: None,
            })
            .await
            .unwrap();
        assert_ne!(
            node_of(&any),
            "b",
            "any-N chose the unreachable node: {any:?}"
        );
    }
    // A job runs on one node: a booking across nodes takes none, and says why.
    let on_a = cards_of(&gpus, "a");
    let across = via_portal
        .book(&CreateBooking {
            project: None,
            gpus: Some(vec![on_a[3].clone(), on_c[3].clone()]),
            count: None,
            start: Utc::now() + Span::hours(3),
            end: Utc::now() + Span::hours(4),
            note: "across".into(),
            user: None,
            lend: None,
        })
        .await
        .unwrap();
    let refused = via_portal
        .submit_job(&CreateJob {
            container: None,
            booking_id: across.id,
            argv: ["true"].map(String::from).to_vec(),
            cwd: None,
            env: None,
            environment: None,
            name: None,
            notice: None,
            session: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.status().map(|s| s.as_u16()),
        Some(422),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("on 2 nodes (a, c)"),
        "{refused}"
    );
    let queued = via_portal.enqueue(&sleeper(3, "three")).await.unwrap();
    let started = wait_until(Duration::from_secs(20), "the queue job starts", || async {
        let job = via_portal.job(queued.id).await.ok()?;
        via_portal.booking(job.booking_id?).await.ok()
    })
    .await;
    assert_ne!(
        node_of(&started),
        "b",
        "the queue used the unreachable node"
    );
    // Cut off, B's runner still stops its job at the end of its slot.
    wait_until(
        Duration::from_secs(25),
        "b's job stops at its slot's end",
        || async { (processes_with(&marker) == 0).then_some(()) },
    )
    .await;
    assert!(Utc::now() < slot_end + Span::seconds(8), "stopped late");

    // Healed: B is back, and the job's end is recorded as it happened, once.
    b.link(true);
    wait_until(Duration::from_secs(15), "b is back", || async {
        (status_of(&via_portal, "b").await == Some(NodeStatus::Up)).then_some(())
    })
    .await;
    let ended = wait_job(&via_portal, on_b_job.id, "b's job end recorded", |j| {
        j.state.is_over()
    })
    .await;
    assert_ne!(ended.state, JobState::Lost, "{ended:?}");
    let ended_at = ended.ended_at.unwrap();
    // At the slot's end, give or take the runner's wait for the database that is gone.
    assert!(ended_at <= slot_end + Span::seconds(6), "{ended:?}");
    // Its log, copied by b once it can reach the database again, shows one start.
    let header = format!("job {} of", on_b_job.id);
    let b_log = wait_until(
        Duration::from_secs(10),
        "b's log reaches the portal",
        || async {
            let log = via_portal
                .job_log(on_b_job.id, &stderr, None)
                .await
                .ok()?
                .text;
            log.contains(&header).then_some(log)
        },
    )
    .await;
    assert_eq!(b_log.matches(&header).count(), 1, "started twice? {b_log}");

    // The queue's leader (the portal) dies: another instance leads within seconds, and the
    // waiting job starts once.
    portal.kill_9();
    let later = via_a
        .enqueue(&sleeper(1, "after the leader"))
        .await
        .unwrap();
    let done = wait_job(
        &via_a,
        later.id,
        "the job queued after the leader died ends",
        |j| j.state.is_over(),
    )
    .await;
    assert_eq!(done.state, JobState::Exited, "{done:?}");
    let header = format!("job {} of", later.id);
    let log = wait_until(Duration::from_secs(10), "its log", || async {
        let log = via_a.job_log(later.id, &stderr, None).await.ok()?.text;
        log.contains(&header).then_some(log)
    })
    .await;
    assert_eq!(log.matches(&header).count(), 1, "started twice? {log}");
    drop(pg);
}
