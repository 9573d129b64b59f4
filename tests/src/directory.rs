//! Real directory servers for the tests: Debian's `slapd` with the LDIF fixture in
//! `tests/directory/`, and npm's `oidc-provider` (`tests/browser/oidc/provider.mjs`). Each test
//! starts its own on a free loopback port; they stop when dropped.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository's root (this crate is `tests/`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An OpenLDAP server with the lab fixture, offering StartTLS with a certificate of its own.
pub struct Slapd {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
    /// Where it speaks LDAPS (TLS from the first byte).
    pub tls_port: u16,
}

/// The service account and its password in the fixture.
pub const LDAP_SERVICE_DN: &str = "cn=lanes,ou=services,dc=lab,dc=example";
pub const LDAP_SERVICE_PASSWORD: &str = "service-secret-1";

impl Slapd {
    pub fn start() -> Slapd {
        let dir = tempfile::tempdir().expect("a directory for slapd");
        let path = dir.path();
        std::fs::create_dir(path.join("db")).unwrap();
        let conf = std::fs::read_to_string(repo().join("tests/directory/slapd.conf"))
            .unwrap()
            .replace("DIR", &path.display().to_string());
        std::fs::write(path.join("slapd.conf"), conf).unwrap();
        // A certificate authority of the test's own, and slapd's certificate signed by it (a
        // self-signed certificate would be a CA used as an end entity, which TLS refuses).
        let openssl = |args: &[&str]| {
            let made = Command::new("openssl")
                .current_dir(path)
                .args(args)
                .stderr(Stdio::null())
                .status()
                .expect("openssl runs");
            assert!(made.success(), "openssl {args:?}");
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=Test Lab CA",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca.pem",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "cert.csr",
        ]);
        std::fs::write(
            path.join("ext.cnf"),
            "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "cert.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "cert.pem",
        ]);
        let loaded = Command::new("slapadd")
            .arg("-f")
            .arg(path.join("slapd.conf"))
            .arg("-l")
            .arg(repo().join("tests/directory/people.ldif"))
            .output()
            .expect("slapadd runs (make tools-test installs slapd)");
        assert!(
            loaded.status.success(),
            "slapadd: {}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        let (port, tls_port) = (free_port(), free_port());
        let child = Command::new("slapd")
            .arg("-f")
            .arg(path.join("slapd.conf"))
            .arg("-h")
            .arg(format!(
                "ldap://127.0.0.1:{port}/ ldaps://127.0.0.1:{tls_port}/"
            ))
            // In the foreground, quiet: the test owns it.
            .args(["-d", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("slapd starts");
        wait_for_port(port, "slapd");
        wait_for_port(tls_port, "slapd (LDAPS)");
        Slapd {
            child,
            dir,
            port,
            tls_port,
        }
    }

    pub fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    /// The authority that signed slapd's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Changes the directory as its administrator (LDIF of changes).
    pub fn modify(&self, ldif: &str) {
        use std::io::Write;
        let mut child = Command::new("ldapmodify")
            .args([
                "-x",
                "-H",
                &self.url(),
                "-D",
                "cn=admin,dc=lab,dc=example",
                "-w",
                "admin-secret-1",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ldapmodify runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(ldif.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "ldapmodify: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The settings of a portal that signs people in with this directory over StartTLS.
    pub fn args(&self, args: &mut lanes_server::directory::DirectoryArgs) {
        args.ldap_url = Some(self.url());
        args.ldap_starttls = true;
        args.ldap_ca_file = Some(self.ca_file());
        args.ldap_bind_dn = Some(LDAP_SERVICE_DN.into());
        let secret = self.dir.path().join("bind-password");
        std::fs::write(&secret, format!("{LDAP_SERVICE_PASSWORD}\n")).unwrap();
        args.ldap_bind_password_file = Some(secret);
        args.ldap_user_base = Some("ou=people,dc=lab,dc=example".into());
        args.ldap_user_filter = "(&(objectClass=posixAccount)(uid={username}))".into();
        args.ldap_username_attribute = "uid".into();
        args.ldap_group_filter = "(|(&(objectClass=posixGroup)(memberUid={username}))(&(objectClass=groupOfNames)(member={dn})))".into();
        args.ldap_sync_interval = Duration::from_secs(3600);
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client this portal is at the test provider.
pub const OIDC_CLIENT_ID: &str = "lanes";
pub const OIDC_CLIENT_SECRET: &str = "lanes-client-secret-1";

/// npm's `oidc-provider`, with a password-checking login page and the device grant.
pub struct OidcProvider {
    child: Child,
    pub issuer: String,
    pub port: u16,
    redirect: String,
}

impl OidcProvider {
    /// A provider on `port` (0: any) that sends browsers back to `redirect`.
    pub fn start(port: u16, redirect: &str) -> OidcProvider {
        let script = repo().join("tests/browser/oidc/provider.mjs");
        let mut child = Command::new("node")
            .arg(&script)
            .args(["--port", &port.to_string(), "--redirect", redirect])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs (make tools-test installs oidc-provider)");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("the provider says where it listens");
        // The provider writes notes later (its default pages say so): read them, or its writes
        // to a closed pipe end it.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let issuer = line
            .trim()
            .strip_prefix("issuer=")
            .unwrap_or_else(|| panic!("the provider did not start: {line:?}"))
            .to_string();
        let port = issuer.rsplit(':').next().unwrap().parse().unwrap();
        OidcProvider {
            child,
            issuer,
            port,
            redirect: redirect.to_string(),
        }
    }

    /// Stops this provider and starts another on the same address with a new signing key.
    pub fn restart_with_new_key(mut self) -> OidcProvider {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(Instant::now() < deadline, "the provider did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        OidcProvider::start(self.port, &self.redirect)
    }

    /// The settings of a portal that signs people in with this provider.
    pub fn args(&self, args: &mut lanes_server::directory::DirectoryArgs, dir: &Path) {
        args.oidc_issuer = Some(self.issuer.clone());
        args.oidc_name = Some("Test Lab SSO".into());
        args.oidc_client_id = Some(OIDC_CLIENT_ID.into());
        let secret = dir.join("oidc-client-secret");
        std::fs::write(&secret, OIDC_CLIENT_SECRET).unwrap();
        args.oidc_client_secret_file = Some(secret);
        args.oidc_redirect_url = Some(self.redirect.clone());
        args.oidc_scopes = vec![
            "profile".into(),
            "email".into(),
            "groups".into(),
            "unix".into(),
        ];
        args.oidc_username_claim = "preferred_username".into();
        args.oidc_groups_claim = "groups".into();
        args.oidc_clock_skew = Duration::from_secs(60);
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `name` in the first `<input>` of `html` that has it (forms of the provider).
pub fn input_value(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\""))?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    let tag = &html[start..end];
    let value = tag.split("value=\"").nth(1)?;
    Some(value[..value.find('"')?].to_string())
}

/// The `action` of the first form of `html`.
pub fn form_action(html: &str) -> Option<String> {
    let at = html.find("<form")?;
    let tag = &html[at..at + html[at..].find('>')?];
    let value = tag.split("action=\"").nth(1)?;
    Some(value[..value.find('"')?].to_string())
}
