//! The directory's settings: `lanes serve` flags (and so `lanes.toml` keys and `LANES_*`
//! variables). Secrets come from a file or the environment, never from a flag, which anyone on
//! the host could read in the process list.

use super::person::Rules;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, Default, Args)]
pub struct DirectoryArgs {
    /// The lab's OpenID Connect provider (its issuer URL, as its discovery document says it,
    /// e.g. https://sso.lab.example/realms/lab): the login page offers "Sign in with NAME".
    #[arg(long, env = "LANES_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The provider's name on the login page [default: the issuer's host].
    #[arg(long, env = "LANES_OIDC_NAME")]
    pub oidc_name: Option<String>,
    /// This portal's client id at the provider.
    #[arg(long, env = "LANES_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// A file holding the client secret (or set LANES_OIDC_CLIENT_SECRET); none: a public
    /// client, which PKCE protects.
    #[arg(long, env = "LANES_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The address the provider sends people back to, as registered there
    /// [default: http://ADVERTISE/auth/oidc/callback].
    #[arg(long, env = "LANES_OIDC_REDIRECT_URL")]
    pub oidc_redirect_url: Option<String>,
    /// Scopes asked for besides `openid`; comma-separated.
    #[arg(
        long,
        env = "LANES_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "profile,email"
    )]
    pub oidc_scopes: Vec<String>,
    /// The claim that gives the Lanes username (lowercased; an e-mail-like value gives its
    /// local part).
    #[arg(
        long,
        env = "LANES_OIDC_USERNAME_CLAIM",
        default_value = "preferred_username"
    )]
    pub oidc_username_claim: String,
    /// The claim with the person's groups (names, paths or DNs).
    #[arg(long, env = "LANES_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// A claim that names the person's Unix account [default: none; see --oidc-unix-from-ldap].
    #[arg(long, env = "LANES_OIDC_UNIX_USER_CLAIM")]
    pub oidc_unix_user_claim: Option<String>,
    /// OIDC accounts take their Unix account (and groups) from the LDAP directory, found by
    /// username.
    #[arg(long, env = "LANES_OIDC_UNIX_FROM_LDAP")]
    pub oidc_unix_from_ldap: bool,
    /// How far the provider's clock may be from this host's when checking a token's times.
    #[arg(long, env = "LANES_OIDC_CLOCK_SKEW", default_value = "60s", value_parser = humantime::parse_duration)]
    pub oidc_clock_skew: Duration,
    /// The LDAP server: ldap://HOST[:PORT] (with --ldap-starttls) or ldaps://HOST[:PORT].
    #[arg(long, env = "LANES_LDAP_URL")]
    pub ldap_url: Option<String>,
    /// Upgrade an ldap:// connection with StartTLS before anything is sent.
    #[arg(long, env = "LANES_LDAP_STARTTLS")]
    pub ldap_starttls: bool,
    /// The certificate authority (PEM) that signed the LDAP server's certificate [default: the
    /// system's].
    #[arg(long, env = "LANES_LDAP_CA_FILE")]
    pub ldap_ca_file: Option<PathBuf>,
    /// The service account that searches for people, e.g. cn=lanes,ou=services,dc=lab,dc=example.
    #[arg(long, env = "LANES_LDAP_BIND_DN")]
    pub ldap_bind_dn: Option<String>,
    /// A file holding the service account's password (or set LANES_LDAP_BIND_PASSWORD).
    #[arg(long, env = "LANES_LDAP_BIND_PASSWORD_FILE")]
    pub ldap_bind_password_file: Option<PathBuf>,
    /// Where people are, e.g. ou=people,dc=lab,dc=example.
    #[arg(long, env = "LANES_LDAP_USER_BASE")]
    pub ldap_user_base: Option<String>,
    /// Who may sign in; `{username}` is replaced, escaped. Active Directory:
    /// (&(objectClass=user)(sAMAccountName={username})(!(userAccountControl:1.2.840.113556.1.4.803:=2)))
    #[arg(
        long,
        env = "LANES_LDAP_USER_FILTER",
        default_value = "(&(objectClass=posixAccount)(uid={username}))"
    )]
    pub ldap_user_filter: String,
    /// The attribute that holds the login name.
    #[arg(long, env = "LANES_LDAP_USERNAME_ATTRIBUTE", default_value = "uid")]
    pub ldap_username_attribute: String,
    /// Where groups are [default: --ldap-user-base's parent].
    #[arg(long, env = "LANES_LDAP_GROUP_BASE")]
    pub ldap_group_base: Option<String>,
    /// A person's groups besides their `memberOf`; `{username}` and `{dn}` are replaced,
    /// escaped; empty: `memberOf` only.
    #[arg(
        long,
        env = "LANES_LDAP_GROUP_FILTER",
        default_value = "(|(&(objectClass=posixGroup)(memberUid={username}))(&(objectClass=groupOfNames)(member={dn})))"
    )]
    pub ldap_group_filter: String,
    /// How often accounts from the directory are checked against it: whoever it no longer has
    /// (or has disabled) is disabled here, their sessions ended and tokens revoked.
    #[arg(long, env = "LANES_LDAP_SYNC_INTERVAL", default_value = "15m", value_parser = humantime::parse_duration)]
    pub ldap_sync_interval: Duration,
    /// Members of this directory group are admins here, others members.
    #[arg(long, env = "LANES_DIRECTORY_ADMIN_GROUP")]
    pub directory_admin_group: Option<String>,
    /// Make a Lanes group for every directory group a person signs in with (otherwise only
    /// groups an admin made are filled from the directory).
    #[arg(long, env = "LANES_DIRECTORY_CREATE_GROUPS")]
    pub directory_create_groups: bool,
    /// A directory sign-in whose username is a local member's account takes that account over.
    #[arg(long, env = "LANES_DIRECTORY_ADOPT_LOCAL_ACCOUNTS")]
    pub directory_adopt_local_accounts: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Missing(String),
    #[error("cannot read {path}: {source}")]
    Secret {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The OpenID Connect settings, complete.
#[derive(Clone, Debug)]
pub struct OidcConfig {
    pub issuer: String,
    pub name: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// `None`: derived from the address the portal is reached at.
    pub redirect_url: Option<String>,
    pub scopes: Vec<String>,
    pub username_claim: String,
    pub groups_claim: String,
    pub unix_user_claim: Option<String>,
    pub unix_from_ldap: bool,
    pub clock_skew: Duration,
}

/// The LDAP settings, complete.
#[derive(Clone, Debug)]
pub struct LdapConfig {
    pub url: String,
    pub starttls: bool,
    pub ca_file: Option<PathBuf>,
    pub bind_dn: String,
    pub bind_password: String,
    pub user_base: String,
    pub user_filter: String,
    pub username_attribute: String,
    pub group_base: String,
    pub group_filter: String,
    pub sync_interval: Duration,
}

/// A secret from its file (first line) or the variable; `None` when neither is set.
fn secret(file: Option<&PathBuf>, variable: &str) -> Result<Option<String>, ConfigError> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Secret {
            path: path.clone(),
            source,
        })?;
        return Ok(Some(text.lines().next().unwrap_or_default().to_string()));
    }
    Ok(std::env::var(variable).ok().filter(|v| !v.is_empty()))
}

impl DirectoryArgs {
    pub fn rules(&self) -> Rules {
        Rules {
            admin_group: self.directory_admin_group.clone(),
            create_groups: self.directory_create_groups,
            adopt_local_accounts: self.directory_adopt_local_accounts,
        }
    }

    pub fn oidc(&self) -> Result<Option<OidcConfig>, ConfigError> {
        let Some(issuer) = self.oidc_issuer.clone() else {
            return Ok(None);
        };
        let client_id = self
            .oidc_client_id
            .clone()
            .ok_or_else(|| ConfigError::Missing("--oidc-issuer needs --oidc-client-id".into()))?;
        let name = match &self.oidc_name {
            Some(name) => name.clone(),
            None => reqwest::Url::parse(&issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_else(|| issuer.clone()),
        };
        if self.oidc_unix_from_ldap && self.ldap_url.is_none() {
            return Err(ConfigError::Missing(
                "--oidc-unix-from-ldap needs --ldap-url".into(),
            ));
        }
        Ok(Some(OidcConfig {
            issuer,
            name,
            client_id,
            client_secret: secret(
                self.oidc_client_secret_file.as_ref(),
                "LANES_OIDC_CLIENT_SECRET",
            )?,
            redirect_url: self.oidc_redirect_url.clone(),
            scopes: self
                .oidc_scopes
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s != "openid")
                .collect(),
            username_claim: self.oidc_username_claim.clone(),
            groups_claim: self.oidc_groups_claim.clone(),
            unix_user_claim: self.oidc_unix_user_claim.clone(),
            unix_from_ldap: self.oidc_unix_from_ldap,
            clock_skew: self.oidc_clock_skew,
        }))
    }

    pub fn ldap(&self) -> Result<Option<LdapConfig>, ConfigError> {
        let Some(url) = self.ldap_url.clone() else {
            return Ok(None);
        };
        if !(url.starts_with("ldap://") || url.starts_with("ldaps://")) {
            return Err(ConfigError::Invalid(format!(
                "--ldap-url must start with ldap:// or ldaps://, not {url:?}"
            )));
        }
        if self.ldap_starttls && url.starts_with("ldaps://") {
            return Err(ConfigError::Invalid(
                "--ldap-starttls is for ldap:// URLs; ldaps:// is TLS already".into(),
            ));
        }
        let bind_dn = self.ldap_bind_dn.clone().ok_or_else(|| {
            ConfigError::Missing("--ldap-url needs --ldap-bind-dn (the service account)".into())
        })?;
        let bind_password = secret(
            self.ldap_bind_password_file.as_ref(),
            "LANES_LDAP_BIND_PASSWORD",
        )?
        .ok_or_else(|| {
            ConfigError::Missing(
                "--ldap-bind-dn needs --ldap-bind-password-file or LANES_LDAP_BIND_PASSWORD".into(),
            )
        })?;
        let user_base = self
            .ldap_user_base
            .clone()
            .ok_or_else(|| ConfigError::Missing("--ldap-url needs --ldap-user-base".into()))?;
        if !self.ldap_user_filter.contains("{username}") {
            return Err(ConfigError::Invalid(
                "--ldap-user-filter must contain {username}".into(),
            ));
        }
        let group_base = self.ldap_group_base.clone().unwrap_or_else(|| {
            user_base
                .split_once(',')
                .map_or(user_base.clone(), |(_, parent)| parent.to_string())
        });
        Ok(Some(LdapConfig {
            url,
            starttls: self.ldap_starttls,
            ca_file: self.ldap_ca_file.clone(),
            bind_dn,
            bind_password,
            user_base,
            user_filter: self.ldap_user_filter.clone(),
            username_attribute: self.ldap_username_attribute.clone(),
            group_base,
            group_filter: self.ldap_group_filter.clone(),
            sync_interval: self.ldap_sync_interval,
        }))
    }
}
