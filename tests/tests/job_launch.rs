//! Starting a job's process for real: under the booked device mask, as the booking user's Unix
//! account, in a session of its own, with nothing of the server's environment. CI runs as root,
//! so the test makes its own Unix account; as another user, the server can only run jobs as
//! itself, and the test checks that instead.

use lanes_server::jobs::launch::{identity, spawn, Identity, Launch, LaunchError};
use lanes_server::jobs::mask::{fixed_environment, DeviceMask, JobFacts};
use lanes_tests::ensure_unix_account;
use lanes_types::booking::GpuRef;
use lanes_types::GpuInfo;
use std::collections::BTreeMap;

const ACCOUNT: &str = "lanes-test-job";

fn running_as_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn inventory() -> Vec<GpuInfo> {
    (0..4)
        .map(|i| GpuInfo {
            node: "n1".into(),
            uuid: format!("GPU-0000000{i}-1111-2222-3333-44444444444{i}"),
            index: i,
            name: "sim".into(),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
            memory_total_bytes: 1 << 30,
        })
        .collect()
}

/// A log's text once its keeper wrote everything (it finishes a moment after the job).
fn settled(path: &std::path::Path) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = std::fs::read_to_string(path).unwrap_or_default();
        if !now.is_empty() && now == last {
            return now;
        }
        last = now;
    }
    last
}

#[test]
fn a_job_sees_exactly_its_cards_runs_as_its_user_in_its_own_session_and_inherits_nothing() {
    let who = if running_as_root() {
        ensure_unix_account(ACCOUNT);
        identity("ada", Some(ACCOUNT)).expect("the account resolves")
    } else {
        let me = identity("ada", None).expect("single-user mode");
        assert!(matches!(me, Identity::SingleUser { .. }));
        me
    };
    let inv = inventory();
    let booked: Vec<GpuRef> = [&inv[3], &inv[1]]
        .iter()
        .map(|g| GpuRef {
            node: "n1".into(),
            uuid: g.uuid.clone(),
        })
        .collect();
    let mask = DeviceMask::for_cards(&booked, "n1", &inv).unwrap();
    let facts = JobFacts {
        job_id: 42,
        booking_end: chrono::Utc::now() + chrono::Duration::hours(1),
        notice_file: "/run/lanes/notices/42-x/notice.json".into(),
        restart_count: 0,
    };
    let extra = BTreeMap::from([("EXPERIMENT".to_string(), "baseline".to_string())]);

    let dir = tempfile::tempdir().unwrap();
    // The job may write in its working directory as its own user.
    if let Identity::Account { uid, gid, .. } = &who {
        nix::unistd::chown(dir.path(), Some((*uid).into()), Some((*gid).into())).unwrap();
    }
    let logs = tempfile::tempdir().unwrap();
    let (out, err) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let argv: Vec<String> = [
        "/bin/sh",
        "-c",
        "id -u; cut -d' ' -f6 /proc/$$/stat; echo $$; env; echo to-stderr >&2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // A secret in the server's environment must not reach the job.
    std::env::set_var("LANES_TEST_SERVER_SECRET", "hunter2");
    let mut spawned = spawn(&Launch {
        cwd: dir.path().to_path_buf(),
        base_by_admin: true,
        extra,
        fixed: fixed_environment(&mask, &facts),
        header: vec!["job 42".into()],
        ..Launch::clean(
            argv,
            who.clone(),
            logs.path().to_path_buf(),
            lanes_tests::lanes_bin(),
        )
    })
    .expect("the job starts");
    assert_eq!(
        spawned.environment.to_string(),
        "a clean environment (the admin's setting)"
    );
    assert!(spawned.child.wait().unwrap().success());
    for keeper in &mut spawned.keepers {
        assert!(keeper.wait().unwrap().success(), "a log keeper failed");
    }

    let log = settled(&out);
    let mut lines = log.lines();
    let uid: u32 = lines.next().unwrap().parse().unwrap();
    let session: u32 = lines.next().unwrap().parse().unwrap();
    let pid: u32 = lines.next().unwrap().parse().unwrap();
    match &who {
        Identity::Account { uid: expected, .. } => {
            assert_eq!(uid, *expected);
            assert_ne!(uid, 0, "never root");
        }
        Identity::SingleUser { .. } => assert_eq!(uid, nix::unistd::Uid::effective().as_raw()),
    }
    assert_eq!(session, pid, "the job leads a session of its own");
    let vars: BTreeMap<&str, &str> = lines.filter_map(|l| l.split_once('=')).collect();
    let expected_mask = format!("{},{}", inv[1].uuid, inv[3].uuid);
    assert_eq!(
        vars["CUDA_VISIBLE_DEVICES"], expected_mask,
        "booked cards in bus order"
    );
    assert_eq!(vars["NVIDIA_VISIBLE_DEVICES"], expected_mask);
    assert_eq!(vars["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(vars["LANES_JOB_ID"], "42");
    assert_eq!(vars["EXPERIMENT"], "baseline");
    assert!(
        !vars.contains_key("LANES_TEST_SERVER_SECRET"),
        "nothing inherited"
    );
    assert_eq!(
        settled(&err),
        "lanes: job 42\nlanes: environment: a clean environment (the admin's setting)\nto-stderr\n",
        "the header says what the job got, then the job's own output"
    );
    assert_eq!(vars["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(vars["USER"], who.name());
    assert_eq!(vars["HOME"], who.home());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "logs are the server's to show");
}

#[test]
fn root_missing_and_unset_accounts_are_refused_with_a_reason() {
    if !running_as_root() {
        // Without root every job runs as the server's user; there is nothing to refuse.
        assert!(matches!(
            identity("ada", Some("root")),
            Ok(Identity::SingleUser { .. })
        ));
        return;
    }
    assert!(matches!(
        identity("ada", Some("root")),
        Err(LaunchError::RootAccount(_))
    ));
    assert!(matches!(
        identity("ada", Some("no-such-account-here")),
        Err(LaunchError::UnknownAccount(_))
    ));
    let unset = identity("ada", None).unwrap_err();
    assert!(
        unset.to_string().contains("ada has no Unix account"),
        "{unset}"
    );
    let nobody = Identity::SingleUser {
        name: "x".into(),
        home: "/".into(),
        shell: "/bin/sh".into(),
    };
    let empty = spawn(&Launch::clean(
        Vec::new(),
        nobody,
        "/nonexistent".into(),
        lanes_tests::lanes_bin(),
    ));
    assert!(matches!(empty, Err(LaunchError::EmptyCommand)));
}
