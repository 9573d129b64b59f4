//! LDAP sign-in and lookups (OpenLDAP, Active Directory): the service account finds the
//! person with an escaped filter, then a second connection binds as them with their password.
//! `posixAccount` gives the Unix account, `memberOf` and group searches the groups.

use super::config::LdapConfig;
use super::person::{self, Person};
use lanes_types::account::AccountSource;
use ldap3::{ldap_escape, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};
use std::sync::Arc;
use std::time::Duration;

/// How long connecting (and TLS) may take before the directory counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one operation may take.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// LDAP's "invalid credentials" result code.
const INVALID_CREDENTIALS: u32 = 49;

#[derive(Debug, thiserror::Error)]
pub enum LdapError {
    /// Wrong password, no such person, or one the directory disabled: told apart only in logs.
    #[error("wrong username or password")]
    InvalidCredentials,
    #[error("the LDAP directory cannot be reached: {0}")]
    Unavailable(String),
}

impl From<ldap3::LdapError> for LdapError {
    fn from(e: ldap3::LdapError) -> Self {
        LdapError::Unavailable(e.to_string())
    }
}

pub struct Ldap {
    config: LdapConfig,
}

/// Attributes read of a person's entry.
const PERSON_ATTRIBUTES: [&str; 9] = [
    "cn",
    "displayName",
    "mail",
    "uid",
    "uidNumber",
    "memberOf",
    "shadowExpire",
    "userAccountControl",
    "objectClass",
];

impl Ldap {
    pub fn new(config: LdapConfig) -> Ldap {
        Ldap { config }
    }

    pub fn sync_interval(&self) -> Duration {
        self.config.sync_interval
    }

    fn settings(&self) -> Result<LdapConnSettings, LdapError> {
        let mut settings = LdapConnSettings::new()
            .set_conn_timeout(CONNECT_TIMEOUT)
            .set_starttls(self.config.starttls);
        if let Some(path) = &self.config.ca_file {
            settings = settings.set_config(Arc::new(tls_config(path)?));
        }
        Ok(settings)
    }

    /// A connection, bound as `dn` with `password` (the caller checks the result).
    async fn connect(&self) -> Result<ldap3::Ldap, LdapError> {
        let (conn, ldap) = LdapConnAsync::with_settings(self.settings()?, &self.config.url).await?;
        ldap3::drive!(conn);
        Ok(ldap)
    }

    /// A connection bound as the service account.
    async fn service(&self) -> Result<ldap3::Ldap, LdapError> {
        let mut ldap = self.connect().await?;
        ldap.with_timeout(OPERATION_TIMEOUT)
            .simple_bind(&self.config.bind_dn, &self.config.bind_password)
            .await?
            .success()
            .map_err(|e| LdapError::Unavailable(format!("the service account cannot bind: {e}")))?;
        Ok(ldap)
    }

    /// Checks `username`'s `password` with the directory, and says who they are. An empty
    /// password is refused before anything is sent: LDAP takes a bind with a name and no
    /// password as an anonymous one that "succeeds".
    pub async fn authenticate(&self, username: &str, password: &str) -> Result<Person, LdapError> {
        if password.is_empty() || password.len() > crate::accounts::password::MAX_BYTES {
            return Err(LdapError::InvalidCredentials);
        }
        let mut service = self.service().await?;
        let Some(entry) = self.find(&mut service, username).await? else {
            tracing::info!(
                username,
                "LDAP sign-in: no such person (or not allowed by the filter)"
            );
            return Err(LdapError::InvalidCredentials);
        };
        if let Some(why) = disabled(&entry, chrono::Utc::now()) {
            tracing::info!(
                username,
                why,
                "LDAP sign-in refused: disabled in the directory"
            );
            return Err(LdapError::InvalidCredentials);
        }
        let mut own = self.connect().await?;
        let bound = own
            .with_timeout(OPERATION_TIMEOUT)
            .simple_bind(&entry.dn, password)
            .await?;
        let _ = own.unbind().await;
        match bound.rc {
            0 => {}
            INVALID_CREDENTIALS => return Err(LdapError::InvalidCredentials),
            rc => {
                return Err(LdapError::Unavailable(format!(
                    "the bind was answered with code {rc}: {}",
                    bound.text
                )))
            }
        }
        let person = self.person(&mut service, entry).await;
        let _ = service.unbind().await;
        person
    }

    /// What the directory says of `username` now: `None` when it has no such person, or has
    /// them disabled (for OIDC accounts' Unix accounts).
    pub async fn lookup(&self, username: &str) -> Result<Option<Person>, LdapError> {
        Ok(self
            .lookup_all(&[username.to_string()])
            .await?
            .pop()
            .flatten())
    }

    /// [`Ldap::lookup`] of each of `usernames`, in order, over one service connection (the
    /// sync asks for every directory account at once).
    pub async fn lookup_all(&self, usernames: &[String]) -> Result<Vec<Option<Person>>, LdapError> {
        let mut service = self.service().await?;
        let mut found = Vec::with_capacity(usernames.len());
        for username in usernames {
            found.push(match self.find(&mut service, username).await? {
                Some(entry) if disabled(&entry, chrono::Utc::now()).is_none() => {
                    Some(self.person(&mut service, entry).await?)
                }
                _ => None,
            });
        }
        let _ = service.unbind().await;
        Ok(found)
    }

    /// The one entry the user filter finds for `username` (escaped, so a name cannot widen
    /// the filter). More than one is a directory the filter does not fit: refused.
    async fn find(
        &self,
        service: &mut ldap3::Ldap,
        username: &str,
    ) -> Result<Option<SearchEntry>, LdapError> {
        let filter = self
            .config
            .user_filter
            .replace("{username}", &ldap_escape(username));
        let (entries, _) = service
            .with_timeout(OPERATION_TIMEOUT)
            .search(
                &self.config.user_base,
                Scope::Subtree,
                &filter,
                PERSON_ATTRIBUTES.to_vec(),
            )
            .await?
            .success()?;
        if entries.len() > 1 {
            tracing::warn!(
                username,
                count = entries.len(),
                "LDAP: the user filter finds several entries; refused"
            );
            return Ok(None);
        }
        Ok(entries.into_iter().next().map(SearchEntry::construct))
    }

    /// The person an entry describes, with their groups.
    async fn person(
        &self,
        service: &mut ldap3::Ldap,
        entry: SearchEntry,
    ) -> Result<Person, LdapError> {
        let first = |name: &str| {
            entry
                .attrs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.first().cloned())
        };
        let login = first(&self.config.username_attribute).unwrap_or_default();
        let username = person::username(&login).map_err(|_| LdapError::InvalidCredentials)?;
        let posix = first("uidNumber").is_some();
        let mut groups: Vec<String> = entry
            .attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("memberOf"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if !self.config.group_filter.is_empty() {
            let filter = self
                .config
                .group_filter
                .replace("{username}", &ldap_escape(&login))
                .replace("{dn}", &ldap_escape(&entry.dn));
            let (found, _) = service
                .with_timeout(OPERATION_TIMEOUT)
                .search(&self.config.group_base, Scope::Subtree, &filter, vec!["cn"])
                .await?
                .success()?;
            groups.extend(found.into_iter().map(|g| SearchEntry::construct(g).dn));
        }
        Ok(person::cleaned(Person {
            source: AccountSource::Ldap,
            external_id: entry.dn.clone(),
            display_name: first("displayName")
                .or_else(|| first("cn"))
                .unwrap_or_else(|| username.clone()),
            email: first("mail"),
            unix_user: if posix { first("uid") } else { None },
            username,
            groups: Some(groups),
        }))
    }
}

/// Why the directory has an entry disabled, if it does: Active Directory's ACCOUNTDISABLE
/// bit, or a `shadowExpire` day that has come (as `sssd` reads them).
fn disabled(entry: &SearchEntry, now: chrono::DateTime<chrono::Utc>) -> Option<&'static str> {
    let value = |name: &str| {
        entry
            .attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.first())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if value("userAccountControl").is_some_and(|flags| flags & 2 != 0) {
        return Some("userAccountControl has ACCOUNTDISABLE");
    }
    let today = now.timestamp().div_euclid(86_400);
    if value("shadowExpire").is_some_and(|day| day >= 0 && day <= today) {
        return Some("shadowExpire has passed");
    }
    None
}

/// TLS that trusts the certificate authority in `path` (PEM).
fn tls_config(path: &std::path::Path) -> Result<rustls::ClientConfig, LdapError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| LdapError::Unavailable(format!("cannot read {}: {e}", path.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| LdapError::Unavailable(format!("{}: {e}", path.display())))?;
        roots
            .add(cert)
            .map_err(|e| LdapError::Unavailable(format!("{}: {e}", path.display())))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LdapError::Unavailable(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn entry(attrs: &[(&str, &str)]) -> SearchEntry {
        SearchEntry {
            dn: "uid=alice,ou=people,dc=lab".into(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
                .collect::<HashMap<_, _>>(),
            bin_attrs: HashMap::new(),
        }
    }

    #[test]
    fn active_directory_disabled_and_expired_shadow_accounts_are_disabled() {
        let now = chrono::DateTime::from_timestamp(100 * 86_400 + 5, 0).unwrap();
        assert!(disabled(&entry(&[("userAccountControl", "514")]), now).is_some());
        assert!(disabled(&entry(&[("userAccountControl", "512")]), now).is_none());
        assert!(disabled(&entry(&[("shadowExpire", "100")]), now).is_some());
        assert!(disabled(&entry(&[("shadowExpire", "101")]), now).is_none());
        assert!(disabled(&entry(&[("shadowExpire", "-1")]), now).is_none());
        assert!(disabled(&entry(&[]), now).is_none());
    }
}
