//! Jobs run the way the same command would in the user's login shell on the node: their
//! profile's PATH and variables, their home, the argv exactly as given, and the device mask on
//! top of everything. When a job cannot start, it says why in one line. CI runs as root; the
//! test makes a Unix account with a home, a shell and a profile.

use lanes_server::accounts::Role;
use lanes_tests::{cards, ensure_login_account, Session, TestApp};
use lanes_types::job::{CreateJob, DefaultEnvironment, EnvironmentBase, Job, JobState};
use std::collections::BTreeMap;

const ACCOUNT: &str = "lanes-test-login";

/// The profile puts a tool directory on PATH, exports a variable, talks on stderr, and tries
/// to widen the device mask (it must not manage).
const PROFILE: &str = r#"PATH="$HOME/tools/bin:$PATH"
export LAB_DATASET=/data/imagenet
CUDA_VISIBLE_DEVICES=0,1,2,3; export CUDA_VISIBLE_DEVICES
echo "profile of $USER was read" >&2
"#;

const TOOL: &str = r#"#!/bin/sh
echo "user=$(id -un) pwd=$(pwd) home=$HOME shell=$SHELL"
echo "LAB_DATASET=$LAB_DATASET"
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
printf '<%s>' "$@"; echo
"#;

/// A member whose Unix account logs in with bash and the profile above; `None` without root.
async fn member(app: &TestApp) -> Option<Session<'_>> {
    let files = [
        (".profile", PROFILE, false),
        ("tools/bin/labtool", TOOL, true),
        ("notes.txt", "not a program\n", false),
    ];
    ensure_login_account(ACCOUNT, "/bin/bash", &files)?;
    Some(Session {
        app,
        cookie: app.sign_up(ACCOUNT, Role::User).await,
    })
}

/// Runs `request` and waits for it to end.
async fn run(member: &Session<'_>, request: CreateJob) -> Job {
    let job = member.client().submit_job(&request).await.unwrap();
    member.finished(job.id, 30).await
}

#[tokio::test]
async fn a_job_runs_in_its_users_login_environment_with_the_argv_as_typed_and_the_mask_on_top() {
    let app = TestApp::spawn(2).await;
    let Some(ada) = member(&app).await else {
        eprintln!("skipped: needs root to make a Unix account with a login profile");
        return;
    };
    let card = cards(&app).await[1].info.uuid.clone();
    let booking = ada.book(std::slice::from_ref(&card), 120).await;
    // Typed as in a shell: the tool by name, an argument with a space, a literal "$HOME" that
    // no shell may expand.
    let request = Session::job_request(booking.id, &["labtool", "two words", "$HOME"]);
    let done = run(&ada, request.clone()).await;
    assert_eq!(done.state, JobState::Exited, "{done:?}");
    assert_eq!(done.exit_code, Some(0), "{done:?}");
    assert_eq!(
        done.environment.as_deref(),
        Some("the login environment of lanes-test-login (/bin/bash -l)")
    );
    let out = ada.log(done.id).await;
    let home = format!("/home/{ACCOUNT}");
    assert!(
        out.contains(&format!(
            "user={ACCOUNT} pwd={home} home={home} shell=/bin/bash"
        )),
        "{out}"
    );
    assert!(out.contains("LAB_DATASET=/data/imagenet"), "{out}");
    assert!(
        out.contains(&format!("CUDA_VISIBLE_DEVICES={card}\n")),
        "the profile cannot widen the mask: {out}"
    );
    assert!(out.contains("<two words><$HOME>"), "argv unchanged: {out}");
    let err = ada.stderr(done.id).await;
    assert!(
        err.contains(&format!("profile of {ACCOUNT} was read")),
        "{err}"
    );
    assert!(
        err.contains("lanes: environment: the login environment of lanes-test-login"),
        "the header says which environment: {err}"
    );

    // The client's own environment replaces the profile's (a terminal client sends it).
    let given = CreateJob {
        environment: Some(EnvironmentBase::Given(BTreeMap::from([(
            "PATH".to_string(),
            format!("{home}/tools/bin:/usr/bin:/bin"),
        )]))),
        ..request.clone()
    };
    let done = run(&ada, given).await;
    assert_eq!(done.exit_code, Some(0), "{done:?}");
    let out = ada.log(done.id).await;
    assert!(out.contains("LAB_DATASET=\n"), "no profile ran: {out}");
    assert!(out.contains(&format!("home={home}")), "{out}");
    let refused = CreateJob {
        environment: Some(EnvironmentBase::Given(BTreeMap::from([(
            "CUDA_VISIBLE_DEVICES".to_string(),
            "0,1".to_string(),
        )]))),
        ..request.clone()
    };
    let status = lanes_tests::refused(ada.client().submit_job(&refused).await);
    assert_eq!(
        status, 422,
        "a given environment cannot set the mask either"
    );

    // An admin may make jobs start clean: the profile's tool is then not found, and the job
    // says so in one line.
    let boss = app.client_with(&app.sign_up("boss", Role::Admin).await);
    let mut settings = boss.settings().await.unwrap();
    settings.job_environment = DefaultEnvironment::Clean;
    boss.save_settings(&settings).await.unwrap();
    let done = run(&ada, request).await;
    assert_eq!(done.state, JobState::Failed, "{done:?}");
    assert_eq!(
        done.message,
        "labtool: not found on the PATH of a clean environment (the admin's setting) \
         (PATH=/usr/local/bin:/usr/bin:/bin)"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_job_that_cannot_start_says_why_in_one_line() {
    let app = TestApp::spawn(1).await;
    let Some(ada) = member(&app).await else {
        eprintln!("skipped: needs root to make a Unix account with a login profile");
        return;
    };
    let card = cards(&app).await[0].info.uuid.clone();
    let booking = ada.book(&[card], 120).await;
    let missing = Session::job_request(booking.id, &["python3-not-installed", "train.py"]);
    let done = run(&ada, missing).await;
    assert_eq!(done.state, JobState::Failed);
    assert!(
        done.message.starts_with(
            "python3-not-installed: not found on the PATH of the login environment of \
             lanes-test-login (/bin/bash -l) (PATH=/home/lanes-test-login/tools/bin:"
        ),
        "{}",
        done.message
    );
    let err = ada.stderr(done.id).await;
    assert!(
        err.contains("lanes: the job did not start: python3-not-installed: not found"),
        "{err}"
    );

    let elsewhere = CreateJob {
        cwd: Some("/no/such/dir".into()),
        ..Session::job_request(booking.id, &["labtool"])
    };
    let done = run(&ada, elsewhere).await;
    assert_eq!(done.state, JobState::Failed);
    assert_eq!(
        done.message,
        "cannot enter /no/such/dir as lanes-test-login: no such file or directory"
    );

    // A file that is not a program: refused, and said so.
    let notes = format!("/home/{ACCOUNT}/notes.txt");
    let not_runnable = Session::job_request(booking.id, &[notes.as_str()]);
    let done = run(&ada, not_runnable).await;
    assert_eq!(done.state, JobState::Failed);
    assert_eq!(
        done.message,
        format!("{notes}: lanes-test-login may not run it (permission denied)")
    );
    app.stop().await;
}

/// A command is looked up on the job's PATH as the job's user: a directory the user cannot
/// search says nothing of what it holds. Looked up as root, a program in another's 0700
/// directory was "may not run it" and a missing one "not found".
#[tokio::test]
async fn a_directory_the_member_cannot_search_hides_what_it_holds() {
    use std::os::unix::fs::PermissionsExt;
    let app = TestApp::spawn(1).await;
    let Some(ada) = member(&app).await else {
        eprintln!("skipped: needs root to make a Unix account with a login profile");
        return;
    };
    let private = tempfile::tempdir().unwrap();
    let tool = private.path().join("their-tool");
    std::fs::write(&tool, "#!/bin/sh\necho secret\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let card = cards(&app).await[0].info.uuid.clone();
    let booking = ada.book(&[card], 120).await;
    let path = private.path().display().to_string();
    let mut messages = Vec::new();
    for program in ["their-tool", "no-such-tool"] {
        let request = CreateJob {
            env: Some(BTreeMap::from([("PATH".to_string(), path.clone())])),
            ..Session::job_request(booking.id, &[program])
        };
        let done = run(&ada, request).await;
        assert_eq!(done.state, JobState::Failed, "{done:?}");
        messages.push(done.message.replace(program, "PROGRAM"));
    }
    assert_eq!(
        messages[0], messages[1],
        "the two answers tell the programs apart"
    );
    app.stop().await;
}
