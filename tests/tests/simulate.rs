//! `lanes simulate` as a user runs it: a table on standard output, the JSON and the plot where
//! asked, the same figures every run; bad input is one line on standard error and exit status 2,
//! with nothing written.

use lanes_tests::lanes_bin;
use std::path::Path;
use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(lanes_bin())
        .arg("simulate")
        .args(args)
        .output()
        .expect("lanes runs")
}

/// A small trace of two groups: a wide job that holds up narrow ones under fifo.
fn trace(dir: &Path) -> String {
    let path = dir.join("t.csv");
    let mut text = String::from("job_id,submit_s,gpus,duration_s,group\n");
    text.push_str("0,0,2,1000,a\n1,10,4,1000,b\n");
    for i in 0..20 {
        text.push_str(&format!(
            "{},{},1,{},{}\n",
            i + 2,
            20 + i * 30,
            100 + i * 7,
            ["a", "b"][i % 2]
        ));
    }
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_replay_prints_a_row_per_policy_and_load_and_writes_json_and_svg() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = trace(tmp.path());
    let (json, svg) = (tmp.path().join("out.json"), tmp.path().join("out.svg"));
    let args = [
        "--trace",
        &trace,
        "--gpus",
        "4",
        "--policy",
        "all",
        "--load",
        "0.5,0.9",
        "--estimate",
        "noisy",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ];
    let out = simulate(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("22 jobs (0 larger than 4 cards left out)"),
        "{stdout}"
    );
    for policy in ["fifo", "backfill", "fairshare", "las", "static"] {
        assert_eq!(
            stdout.matches(&format!("| {policy} |")).count(),
            2,
            "{stdout}"
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["runs"].as_array().unwrap().len(), 10);
    let fifo = &report["runs"][0];
    assert_eq!(fifo["policy"], "fifo");
    assert!(fifo["utilization"].as_f64().unwrap() > 0.0);
    let backfill = &report["runs"][1];
    assert!(backfill["mean_delay_s"].as_f64() <= fifo["mean_delay_s"].as_f64());
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(picture.matches("<polyline").count(), 10);
    // The same seed gives the same figures.
    let again = simulate(&args);
    let table = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(table(&out), table(&again));
}

#[test]
fn bad_input_is_one_line_and_exit_status_two() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = trace(tmp.path());
    let json = tmp.path().join("never.json");
    let bad_csv = tmp.path().join("bad.csv");
    std::fs::write(
        &bad_csv,
        "job_id,submit_s,gpus,duration_s,group\n0,soon,1,10,a\n",
    )
    .unwrap();
    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec!["--trace", "/no/such.csv", "--gpus", "4"],
            "cannot read /no/such.csv",
        ),
        (
            vec!["--trace", bad_csv.to_str().unwrap(), "--gpus", "4"],
            "line 2: submit_s",
        ),
        (
            vec!["--trace", &trace, "--gpus", "4", "--policy", "lifo"],
            "unknown policy \"lifo\"",
        ),
        (
            vec!["--trace", &trace, "--gpus", "4", "--load=0"],
            "--load must be above 0",
        ),
        (
            vec!["--trace", &trace, "--gpus", "4", "--estimate", "wild"],
            "unknown estimate",
        ),
    ];
    for (mut args, says) in cases {
        args.extend(["--json", json.to_str().unwrap()]);
        let out = simulate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!json.exists());
    }
}
