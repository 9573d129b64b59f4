//! Directory accounts against real servers: OpenLDAP (`slapd`) and an OpenID Connect provider
//! (`oidc-provider`), both started by each test. Sign-ins, what the account gets from the
//! directory, the terminal's sign-ins, and the attacks each must refuse.

use lanes_server::directory::{Directory, DirectoryArgs};
use lanes_tests::directory::{form_action, free_port, input_value, OidcProvider, Slapd};
use lanes_tests::TestApp;
use lanes_types::account::{AccountSource, NewDirectoryAccounts, PortalSettings, Role, User};
use reqwest::redirect::Policy;
use reqwest::StatusCode;

/// A portal that signs people in with `configure`'s directories, on `port`.
async fn portal(port: u16, configure: impl FnOnce(&mut DirectoryArgs)) -> TestApp {
    let mut args = DirectoryArgs {
        ldap_sync_interval: std::time::Duration::from_secs(3600),
        ..DirectoryArgs::default()
    };
    configure(&mut args);
    let directory = Directory::from_args(&args).expect("the directory settings are good");
    let redirect = args.oidc_redirect_url.clone();
    TestApp::spawn_configured(2, move |config| {
        config.listen = format!("127.0.0.1:{port}").parse().unwrap();
        config.auth.directory = directory;
        config.auth.oidc_redirect = redirect;
    })
    .await
}

/// The break-glass admin (a local account), signed in.
async fn admin(app: &TestApp) -> String {
    app.sign_up("root", Role::Admin).await
}

/// Lets a first sign-in through the directory make its account at once (the default waits
/// for an admin's approval).
async fn create_on_first_sign_in(app: &TestApp, admin: &str) {
    let settings = PortalSettings {
        new_directory_accounts: NewDirectoryAccounts::Create,
        ..PortalSettings::default()
    };
    let resp = app
        .call_as(
            admin,
            reqwest::Method::PUT,
            "/api/v1/settings",
            Some(serde_json::to_value(&settings).unwrap()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

async fn add_group(app: &TestApp, admin: &str, name: &str) {
    let resp = app
        .call_as(
            admin,
            reqwest::Method::POST,
            "/api/v1/groups",
            Some(serde_json::json!({ "name": name })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED, "{name}");
}

async fn password_login(app: &TestApp, username: &str, password: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(app.url("/api/v1/auth/login"))
        .json(&serde_json::json!({ "username": username, "password": password }))
        .send()
        .await
        .unwrap()
}

async fn groups_of(app: &TestApp, admin: &str, username: &str) -> Vec<String> {
    let users: Vec<serde_json::Value> = app
        .call_as(admin, reqwest::Method::GET, "/api/v1/users", None)
        .await
        .json()
        .await
        .unwrap();
    let user = users
        .iter()
        .find(|u| u["username"] == username)
        .unwrap_or_else(|| panic!("{username} has an account"));
    serde_json::from_value(user["groups"].clone()).unwrap()
}

fn ldap_portal_port() -> u16 {
    free_port()
}

#[tokio::test]
async fn ldap_members_sign_in_with_their_directory_password_and_get_their_unix_account_and_groups()
{
    let slapd = Slapd::start();
    let app = portal(ldap_portal_port(), |args| {
        slapd.args(args);
        args.directory_admin_group = Some("lanes-admins".into());
    })
    .await;
    let root = admin(&app).await;
    add_group(&app, &root, "gpu-users").await;

    // By default a first sign-in waits for an admin.
    let resp = password_login(&app, "ldapada", "ada-password-1").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("approval"),
        "{body}"
    );
    let users: Vec<User> = app
        .call_as(&root, reqwest::Method::GET, "/api/v1/users", None)
        .await
        .json()
        .await
        .unwrap();
    let ada = users.iter().find(|u| u.username == "ldapada").unwrap();
    assert!(ada.pending && !ada.enabled && ada.source == AccountSource::Ldap);
    let resp = app
        .call_as(
            &root,
            reqwest::Method::PATCH,
            &format!("/api/v1/users/{}", ada.id),
            Some(serde_json::json!({ "enabled": true })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);

    let resp = password_login(&app, "ldapada", "ada-password-1").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let ada: User = resp.json().await.unwrap();
    assert_eq!(
        ada.unix_user.as_deref(),
        Some("ldapada"),
        "from posixAccount"
    );
    assert_eq!(ada.display_name, "Ada Lovelace");
    assert_eq!(ada.email.as_deref(), Some("ada@lab.example"));
    assert_eq!(ada.role, Role::User);
    assert!(!ada.pending && ada.enabled);
    assert_eq!(
        groups_of(&app, &root, "ldapada").await,
        vec!["gpu-users"],
        "posixGroup memberUid"
    );

    // Her jobs run as the directory's Unix account, with no admin mapping anything.
    let uid = lanes_tests::ensure_unix_account("ldapada");
    let session = lanes_tests::Session {
        app: &app,
        cookie: app.login("ldapada", "ada-password-1").await,
    };
    let card = session.client().gpus().await.unwrap()[0].info.uuid.clone();
    let booking = session.book(&[card], 120).await;
    let job = session.submit(booking.id, &["id", "-u"]).await;
    let job = session.finished(job.id, 30).await;
    assert_eq!(session.log(job.id).await.trim(), uid.to_string(), "{job:?}");

    // Made at once when the admin says so; the groupOfNames admin group makes an admin.
    create_on_first_sign_in(&app, &root).await;
    let resp = password_login(&app, "ldapgrace", "grace-password-1").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let grace: User = resp.json().await.unwrap();
    assert_eq!(grace.role, Role::Admin, "member of cn=lanes-admins");
    assert_eq!(
        grace.display_name, "Grace Hopper",
        "cn when there is no displayName"
    );

    // The audit log says where each account came from.
    let audit: Vec<serde_json::Value> = app
        .call_as(&root, reqwest::Method::GET, "/api/v1/audit?limit=100", None)
        .await
        .json()
        .await
        .unwrap();
    assert!(audit.iter().any(|a| a["action"] == "user.create"
        && a["target"] == "ldapgrace"
        && a["detail"].as_str().unwrap().contains("ldap")));
}

#[tokio::test]
async fn ldap_refuses_wrong_and_empty_passwords_and_filter_injection_and_local_passwords_still_work(
) {
    let slapd = Slapd::start();
    let app = portal(ldap_portal_port(), |args| slapd.args(args)).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    for (username, password) in [
        ("ldapada", "wrong-password"),
        // An anonymous bind "succeeds" in LDAP: it must never count as a login.
        ("ldapada", ""),
        // Filter injection: the name is escaped, so it matches no one.
        ("*)(uid=*", "ada-password-1"),
        ("ldapada)(|(uid=*", "ada-password-1"),
        ("*", "ada-password-1"),
        ("nobody", "ada-password-1"),
    ] {
        let resp = password_login(&app, username, password).await;
        assert_eq!(
            resp.status(),
            StatusCode::UNAUTHORIZED,
            "{username:?} / {password:?}"
        );
    }
    // The break-glass admin is a local account and signs in as ever.
    let resp = password_login(&app, "root", "root passphrase").await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn ldaps_works_as_starttls_does_and_a_server_certificate_not_from_the_ca_is_refused() {
    let slapd = Slapd::start();
    let app = portal(ldap_portal_port(), |args| {
        slapd.args(args);
        args.ldap_url = Some(format!("ldaps://127.0.0.1:{}", slapd.tls_port));
        args.ldap_starttls = false;
    })
    .await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    assert_eq!(
        password_login(&app, "ldapada", "ada-password-1")
            .await
            .status(),
        StatusCode::OK
    );
    // Trusting another authority (the system's), the same server is refused: nothing is sent.
    let other = portal(ldap_portal_port(), |args| {
        slapd.args(args);
        args.ldap_ca_file = None;
    })
    .await;
    assert_eq!(
        password_login(&other, "ldapada", "ada-password-1")
            .await
            .status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_local_member_is_taken_over_by_the_directory_only_when_the_admin_allows_it() {
    let slapd = Slapd::start();
    let app = portal(ldap_portal_port(), |args| {
        slapd.args(args);
        args.directory_adopt_local_accounts = true;
    })
    .await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    let local = app
        .create_user("ldapada", "ldapada passphrase", Role::User)
        .await;
    // The directory's password signs in to the same account, which is the directory's now.
    let resp = password_login(&app, "ldapada", "ada-password-1").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let ada: User = resp.json().await.unwrap();
    assert_eq!((ada.id, ada.source), (local.id, AccountSource::Ldap));
    assert_eq!(ada.unix_user.as_deref(), Some("ldapada"));
    // Its old local password no longer does.
    assert_eq!(
        password_login(&app, "ldapada", "ldapada passphrase")
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    // The local admin is never taken over, whatever the directory has of the name.
    assert_eq!(
        password_login(&app, "root", "root passphrase")
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn someone_disabled_in_the_directory_is_refused_at_sign_in_and_disabled_by_the_sync() {
    let slapd = Slapd::start();
    let app = portal(ldap_portal_port(), |args| slapd.args(args)).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    for (name, password) in [
        ("ldaplinus", "linus-password-1"),
        ("ldapada", "ada-password-1"),
        ("ldapgrace", "grace-password-1"),
    ] {
        assert_eq!(
            password_login(&app, name, password).await.status(),
            StatusCode::OK
        );
    }
    // Both have a token for scripts.
    let linus = app.login("ldaplinus", "linus-password-1").await;
    let linus_token = app
        .client_with(&linus)
        .create_token(&lanes_types::account::NewToken {
            name: "script".into(),
        })
        .await
        .unwrap()
        .secret;
    let ada = app.login("ldapada", "ada-password-1").await;

    // The directory expires Linus's account (shadowExpire: day 1 of 1970) and removes Ada.
    slapd.modify("dn: uid=ldaplinus,ou=people,dc=lab,dc=example\nchangetype: modify\nadd: shadowExpire\nshadowExpire: 1\n");
    slapd.modify("dn: uid=ldapada,ou=people,dc=lab,dc=example\nchangetype: delete\n");
    assert_eq!(
        password_login(&app, "ldaplinus", "linus-password-1")
            .await
            .status(),
        StatusCode::UNAUTHORIZED,
        "refused at the next sign-in"
    );

    let report = app.client_with(&root).sync_directory().await.unwrap();
    let mut disabled = report.disabled.clone();
    disabled.sort();
    assert_eq!(disabled, vec!["ldapada", "ldaplinus"], "{report:?}");
    assert_eq!(report.checked, 3, "grace too, who stays");
    // Their sessions and tokens are gone with them.
    for cookie in [&linus, &ada] {
        let resp = app
            .call_as(cookie, reqwest::Method::GET, "/api/v1/me", None)
            .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let resp = reqwest::Client::new()
        .get(app.url("/api/v1/me"))
        .bearer_auth(&linus_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // A sync while the directory is down changes nothing.
    drop(slapd);
    // (Grace, still in the directory, keeps the sync looking.)
    let err = app.client_with(&root).sync_directory().await.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(503), "{err}");
    let resp = password_login(&app, "root", "root passphrase").await;
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "local accounts are untouched"
    );
}

/// A browser: cookies kept, redirects followed by hand so each hop is seen.
struct Browser {
    client: reqwest::Client,
    /// Every address visited, in order.
    visited: Vec<String>,
}

impl Browser {
    fn new() -> Browser {
        Browser::at(std::net::Ipv4Addr::LOCALHOST)
    }

    /// A browser on another loopback address (127.0.0.0/8 is all this host's): another client
    /// as the portal sees it.
    fn at(address: std::net::Ipv4Addr) -> Browser {
        Browser {
            client: reqwest::Client::builder()
                .cookie_store(true)
                .redirect(Policy::none())
                .local_address(std::net::IpAddr::V4(address))
                .build()
                .unwrap(),
            visited: Vec::new(),
        }
    }

    /// Follows redirects from `resp` (relative to `url`) to the page that answers.
    async fn follow(
        &mut self,
        mut url: String,
        mut resp: reqwest::Response,
    ) -> (String, reqwest::Response) {
        for _ in 0..20 {
            if !resp.status().is_redirection() {
                return (url, resp);
            }
            let location = resp.headers()["location"].to_str().unwrap().to_string();
            url = reqwest::Url::parse(&url)
                .unwrap()
                .join(&location)
                .unwrap()
                .to_string();
            self.visited.push(url.clone());
            resp = self.client.get(&url).send().await.unwrap();
        }
        panic!("too many redirects: {:?}", self.visited);
    }

    async fn get(&mut self, url: &str) -> (String, reqwest::Response) {
        self.visited.push(url.to_string());
        let resp = self.client.get(url).send().await.unwrap();
        self.follow(url.to_string(), resp).await
    }

    /// Types `login` and `password` into the provider's login page at `url` and submits it.
    async fn sign_in_at_provider(
        &mut self,
        url: &str,
        page: &str,
        login: &str,
        password: &str,
    ) -> (String, reqwest::Response) {
        let action = form_action(page).expect("the provider's login form");
        let target = reqwest::Url::parse(url)
            .unwrap()
            .join(&action)
            .unwrap()
            .to_string();
        let resp = self
            .client
            .post(&target)
            .form(&[("login", login), ("password", password)])
            .send()
            .await
            .unwrap();
        self.follow(target, resp).await
    }

    /// The whole sign-in: the login page's button, the provider's page, back to the portal.
    async fn sign_in(
        &mut self,
        app: &TestApp,
        next: &str,
        login: &str,
        password: &str,
    ) -> (String, reqwest::Response) {
        let (url, resp) = self
            .get(&app.url(&format!("/auth/oidc/start?next={next}")))
            .await;
        let page = resp.text().await.unwrap();
        assert!(
            page.contains("Test Lab sign-in"),
            "the provider's own login page: {page}"
        );
        self.sign_in_at_provider(&url, &page, login, password).await
    }

    async fn me(&self, app: &TestApp) -> reqwest::Response {
        self.client.get(app.url("/api/v1/me")).send().await.unwrap()
    }
}

/// A portal with the test provider (and `ldap` when given) on a port of its own.
async fn oidc_portal(
    ldap: Option<&Slapd>,
    unix_claim: bool,
) -> (TestApp, OidcProvider, tempfile::TempDir) {
    let port = free_port();
    let provider = OidcProvider::start(0, &format!("http://127.0.0.1:{port}/auth/oidc/callback"));
    let dir = tempfile::tempdir().unwrap();
    let app = portal(port, |args| {
        provider.args(args, dir.path());
        if unix_claim {
            args.oidc_unix_user_claim = Some("unix_user".into());
        }
        args.directory_admin_group = Some("lanes-admins".into());
        if let Some(slapd) = ldap {
            slapd.args(args);
            args.oidc_unix_from_ldap = true;
        }
    })
    .await;
    (app, provider, dir)
}

#[tokio::test]
async fn oidc_sign_in_through_the_providers_page_makes_the_account_from_its_claims() {
    let (app, _provider, _dir) = oidc_portal(None, true).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    add_group(&app, &root, "vision").await;

    // The login page offers the provider.
    let login = app.get_anonymous("/login").await.text().await.unwrap();
    assert!(login.contains("Sign in with Test Lab SSO"), "{login}");

    let mut browser = Browser::new();
    // A wrong password at the provider never reaches the portal.
    let (url, resp) = browser
        .get(&app.url("/auth/oidc/start?next=/calendar"))
        .await;
    let page = resp.text().await.unwrap();
    let (_, resp) = browser
        .sign_in_at_provider(&url, &page, "oidc-alice", "not-her-password")
        .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(browser.me(&app).await.status(), StatusCode::UNAUTHORIZED);

    let (landed, resp) = browser
        .sign_in(&app, "/calendar", "oidc-alice", "alice-sso-password-1")
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(landed, app.url("/calendar"), "where the member was going");
    let alice: User = browser.me(&app).await.json().await.unwrap();
    assert_eq!(
        alice.username, "oidc-alice",
        "preferred_username, lowercased"
    );
    assert_eq!(alice.display_name, "Alice Liddell");
    assert_eq!(alice.email.as_deref(), Some("alice@lab.example"));
    assert_eq!(
        alice.unix_user.as_deref(),
        Some("oidcalice"),
        "from the unix_user claim"
    );
    assert_eq!(alice.source, AccountSource::Oidc);
    assert_eq!(alice.role, Role::User);
    assert_eq!(
        groups_of(&app, &root, "oidc-alice").await,
        vec!["vision"],
        "/lab/vision, a Lanes group; gpu-users is not one"
    );

    // An e-mail-like name gives its local part; the admin group gives the role.
    let mut other = Browser::new();
    other
        .sign_in(&app, "/", "oidc-bob", "bob-sso-password-1")
        .await;
    let bob: User = other.me(&app).await.json().await.unwrap();
    assert_eq!((bob.username.as_str(), bob.role), ("oidc-bob", Role::Admin));

    // An SSO account has no password here.
    let resp = password_login(&app, "oidc-alice", "alice-sso-password-1").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("Test Lab SSO"),
        "{body}"
    );
}

#[tokio::test]
async fn oidc_refuses_replayed_callbacks_foreign_states_open_redirects_and_name_takeovers() {
    let (app, provider, _dir) = oidc_portal(None, false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;

    // An open redirect through the callback: `next` is only ever a path here.
    let mut browser = Browser::new();
    let (landed, _) = browser
        .sign_in(
            &app,
            "//evil.example/steal",
            "oidc-alice",
            "alice-sso-password-1",
        )
        .await;
    assert_eq!(landed, app.url("/"), "{:?}", browser.visited);
    let callback = browser
        .visited
        .iter()
        .find(|u| u.contains("/auth/oidc/callback"))
        .expect("the provider sent the browser back")
        .clone();
    assert!(callback.contains("code=") && callback.contains("state="));

    // The same callback again (a replayed code and state): refused, no new session.
    let mut replay = Browser::new();
    let (landed, _) = replay.get(&callback).await;
    assert!(landed.contains("/login?error=sso-expired"), "{landed}");
    assert_eq!(replay.me(&app).await.status(), StatusCode::UNAUTHORIZED);

    // A state this portal never gave out, and one started in another browser.
    let mut forged = Browser::new();
    let (landed, _) = forged
        .get(&app.url("/auth/oidc/callback?code=abc&state=not-ours"))
        .await;
    assert!(landed.contains("error=sso-expired"), "{landed}");
    let mut starter = Browser::new();
    let (url, resp) = starter.get(&app.url("/auth/oidc/start")).await;
    let page = resp.text().await.unwrap();
    // The victim's browser signs in at the provider but the callback is opened elsewhere.
    let action = form_action(&page).unwrap();
    let target = reqwest::Url::parse(&url).unwrap().join(&action).unwrap();
    let mut resp = starter
        .client
        .post(target.clone())
        .form(&[
            ("login", "oidc-alice"),
            ("password", "alice-sso-password-1"),
        ])
        .send()
        .await
        .unwrap();
    let mut at = target.to_string();
    let stolen = loop {
        let location = resp.headers()["location"].to_str().unwrap().to_string();
        at = reqwest::Url::parse(&at)
            .unwrap()
            .join(&location)
            .unwrap()
            .to_string();
        if at.contains("/auth/oidc/callback") {
            break at.clone();
        }
        resp = starter.client.get(&at).send().await.unwrap();
    };
    let mut attacker = Browser::new();
    let (landed, _) = attacker.get(&stolen).await;
    assert!(landed.contains("error=sso-expired"), "{landed}");
    assert_eq!(attacker.me(&app).await.status(), StatusCode::UNAUTHORIZED);

    // A provider account named like the local admin does not become the admin.
    let mut mallory = Browser::new();
    let (landed, _) = mallory
        .sign_in(&app, "/", "oidc-mallory", "mallory-sso-password-1")
        .await;
    assert!(landed.contains("/login?error=taken"), "{landed}");
    assert_eq!(mallory.me(&app).await.status(), StatusCode::UNAUTHORIZED);

    // Cancelled at the provider: back to the login page, said so.
    let mut cancel = Browser::new();
    let (landed, _) = cancel
        .get(&app.url("/auth/oidc/callback?error=access_denied&state=x"))
        .await;
    assert!(landed.contains("error=sso-cancelled"), "{landed}");
    drop(provider);
}

// Issue 68, item 10 ─ A callback link of someone else's never cancels a sign-in under way.
#[tokio::test]
async fn a_forged_callback_link_leaves_the_browsers_own_sign_in_under_way() {
    let (app, _provider, _dir) = oidc_portal(None, false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    let mut browser = Browser::new();
    let (url, resp) = browser
        .get(&app.url("/auth/oidc/start?next=/calendar"))
        .await;
    let page = resp.text().await.unwrap();
    // Meanwhile the member follows links someone sent: callbacks with states of theirs, one
    // a cancellation.
    for forged in [
        "/auth/oidc/callback?code=abc&state=forged",
        "/auth/oidc/callback?error=access_denied&state=forged",
        "/auth/oidc/callback?code=abc",
    ] {
        let (landed, _) = browser.get(&app.url(forged)).await;
        assert!(landed.contains("/login?error="), "{forged}: {landed}");
    }
    // Their own sign-in still finishes where they were going.
    let (landed, resp) = browser
        .sign_in_at_provider(&url, &page, "oidc-alice", "alice-sso-password-1")
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "{:?}", browser.visited);
    assert_eq!(landed, app.url("/calendar"));
    assert_eq!(browser.me(&app).await.status(), StatusCode::OK);
}

// Issue 68, item 5 ─ Anonymous sign-in starts are limited per address and keep little.
#[tokio::test]
async fn anonymous_sign_in_starts_are_limited_per_address_and_keep_only_a_short_next() {
    let (app, _provider, _dir) = oidc_portal(None, false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    let start = |browser: &Browser| {
        let url = app.url("/auth/oidc/start?next=/");
        let client = browser.client.clone();
        async move { client.get(url).send().await.unwrap() }
    };
    let flooder = Browser::at([127, 0, 0, 2].into());
    let mut limited = None;
    for n in 0..40 {
        let resp = start(&flooder).await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some((n, resp));
            break;
        }
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "start {n}");
    }
    let (n, resp) = limited.expect("the flood was limited");
    // Twenty at once, then one each 3 s (however long the machine took for these).
    assert!((20..=30).contains(&n), "limited after {n} starts");
    assert!(resp.headers().contains_key("retry-after"));
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "too_many_requests", "{body}");
    // The terminal's start is the same door from that address, and another address is not
    // touched by the flood.
    let from = |last: u8| {
        lanes_client::Client::with_http(
            app.url(""),
            reqwest::Client::builder()
                .local_address(std::net::IpAddr::V4([127, 0, 0, last].into()))
                .build()
                .unwrap(),
        )
    };
    let refused = from(2).start_device_sign_in().await.unwrap_err();
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(429), "{refused}");
    assert!(from(3).start_device_sign_in().await.is_ok());

    // A `next` of 6 KB is not kept: the sign-in goes to the dashboard.
    let long = format!("/calendar?q={}", "a".repeat(6000));
    let mut browser = Browser::at([127, 0, 0, 4].into());
    let (landed, _) = browser
        .sign_in(&app, &long, "oidc-alice", "alice-sso-password-1")
        .await;
    assert_eq!(landed, app.url("/"), "{:?}", browser.visited);
    let mut short = Browser::at([127, 0, 0, 5].into());
    let (landed, _) = short
        .sign_in(&app, "/calendar?q=a", "oidc-bob", "bob-sso-password-1")
        .await;
    assert_eq!(landed, app.url("/calendar?q=a"));
}

#[tokio::test]
async fn the_providers_new_signing_key_is_fetched_when_it_rotates() {
    let (app, provider, _dir) = oidc_portal(None, false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    let mut first = Browser::new();
    first
        .sign_in(&app, "/", "oidc-alice", "alice-sso-password-1")
        .await;
    assert_eq!(first.me(&app).await.status(), StatusCode::OK);
    // The same issuer, a new key: the portal reads the keys again and the sign-in works.
    let _provider = provider.restart_with_new_key();
    let mut second = Browser::new();
    let (landed, _) = second
        .sign_in(&app, "/", "oidc-alice", "alice-sso-password-1")
        .await;
    assert_eq!(landed, app.url("/"), "{:?}", second.visited);
    assert_eq!(second.me(&app).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn oidc_accounts_take_their_unix_account_from_ldap_and_members_can_be_held_to_the_directory()
{
    let slapd = Slapd::start();
    let (app, _provider, _dir) = oidc_portal(Some(&slapd), false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    add_group(&app, &root, "gpu-users").await;
    let mut browser = Browser::new();
    browser
        .sign_in(&app, "/", "ldapada", "ada-sso-password-1")
        .await;
    let ada: User = browser.me(&app).await.json().await.unwrap();
    assert_eq!(ada.source, AccountSource::Oidc);
    assert_eq!(
        ada.unix_user.as_deref(),
        Some("ldapada"),
        "posixAccount of the same name"
    );
    assert_eq!(groups_of(&app, &root, "ldapada").await, vec!["gpu-users"]);
    // Someone the provider knows but LDAP does not may not sign in.
    let mut alice = Browser::new();
    let (landed, _) = alice
        .sign_in(&app, "/", "oidc-alice", "alice-sso-password-1")
        .await;
    assert!(landed.contains("/login?error=invalid"), "{landed}");

    // Members through the directory only: a local member's password is refused, the admin's
    // (break-glass) is not.
    app.create_user("localmember", "localmember passphrase", Role::User)
        .await;
    let settings = PortalSettings {
        new_directory_accounts: NewDirectoryAccounts::Create,
        members_use_directory: true,
        ..PortalSettings::default()
    };
    app.call_as(
        &root,
        reqwest::Method::PUT,
        "/api/v1/settings",
        Some(serde_json::to_value(&settings).unwrap()),
    )
    .await;
    let resp = password_login(&app, "localmember", "localmember passphrase").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        password_login(&app, "root", "root passphrase")
            .await
            .status(),
        StatusCode::OK
    );
    // And LDAP passwords still sign LDAP people in.
    assert_eq!(
        password_login(&app, "ldapgrace", "grace-password-1")
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_terminal_signs_in_with_the_device_grant_or_a_one_time_code() {
    let (app, _provider, _dir) = oidc_portal(None, false).await;
    let root = admin(&app).await;
    create_on_first_sign_in(&app, &root).await;
    let methods = app.anonymous().auth_methods().await.unwrap();
    let oidc = methods.oidc.expect("the provider is offered");
    assert!(oidc.device, "oidc-provider offers the device grant");
    assert_eq!(oidc.name, "Test Lab SSO");

    // The device grant: the portal starts it, the member confirms in a browser.
    let anonymous = app.anonymous();
    let started = anonymous.start_device_sign_in().await.unwrap();
    let mut browser = Browser::new();
    // The provider's pages, as a member goes through them: the code, a confirmation, its
    // login page; each form is sent with its hidden fields.
    let (mut url, resp) = browser.get(&started.verification_uri).await;
    let mut page = resp.text().await.unwrap();
    for _ in 0..6 {
        let Some(action) = form_action(&page) else {
            break;
        };
        let target = reqwest::Url::parse(&url)
            .unwrap()
            .join(&action)
            .unwrap()
            .to_string();
        let fields: Vec<(&str, String)> = if page.contains("name=\"login\"") {
            vec![
                ("login", "oidc-alice".into()),
                ("password", "alice-sso-password-1".into()),
            ]
        } else {
            let mut fields = vec![("xsrf", input_value(&page, "xsrf").unwrap_or_default())];
            match input_value(&page, "user_code") {
                Some(code) => fields.push(("user_code", code)),
                None => fields.push(("user_code", started.user_code.clone())),
            }
            if page.contains("name=\"confirm\"") {
                fields.push(("confirm", "yes".into()));
            }
            fields
        };
        let resp = browser
            .client
            .post(&target)
            .form(&fields)
            .send()
            .await
            .unwrap();
        let (next_url, resp) = browser.follow(target, resp).await;
        url = next_url;
        page = resp.text().await.unwrap();
    }
    assert!(
        page.to_lowercase().contains("sign-in") || page.to_lowercase().contains("success"),
        "{url}: {page}"
    );
    let outcome = anonymous
        .poll_device_sign_in(&lanes_types::account::DevicePoll {
            handle: started.handle.clone(),
            token_name: "lanes CLI on test".into(),
        })
        .await
        .unwrap();
    let lanes_types::account::DeviceOutcome::Done { user, token } = outcome else {
        panic!("the member confirmed: {outcome:?}");
    };
    assert_eq!(user.username, "oidc-alice");
    let me = lanes_client::Client::with_http(app.url(""), reqwest::Client::new())
        .as_(lanes_client::Credentials::Token(token.secret.clone()))
        .me()
        .await
        .unwrap();
    assert_eq!(me.username, "oidc-alice");
    // The handle works once.
    assert!(anonymous
        .poll_device_sign_in(&lanes_types::account::DevicePoll {
            handle: started.handle,
            token_name: "again".into(),
        })
        .await
        .is_err());

    // A one-time code from the account page, for `lanes login --code`.
    let mut browser = Browser::new();
    browser
        .sign_in(&app, "/account", "oidc-alice", "alice-sso-password-1")
        .await;
    let code: lanes_types::account::TerminalCode = browser
        .client
        .post(app.url("/api/v1/me/terminal-code"))
        .header("origin", app.url(""))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = lanes_tests::run_cli_with_input(
        home.path(),
        &["login", &app.url(""), "--code"],
        &format!("{}\n", code.code.to_lowercase()),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("oidc-alice"), "{said}");
    // Used once: the same code again is refused, with exit status 1 and why.
    let again = lanes_tests::run_cli_with_input(
        home.path(),
        &["login", &app.url(""), "--code"],
        &format!("{}\n", code.code),
    )
    .await;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("wrong, used or expired"));
}
