//! Account use cases: logging in and out, changing one's password, API tokens, and the admin's
//! users and groups. Password work (argon2) runs off the async runtime, a few at a time.

pub use super::sessions::{create_token, start_session, LoggedIn, TOKEN_PREFIX};
use super::Said;
use super::UseCaseError;
use crate::accounts::session::{self, LockoutRules};
use crate::accounts::{check_group_name, password, validate_patch, NewUser, User, MAX_TEXT};
use crate::audit::AuditAction;
use crate::directory::Directory;
use crate::store::{AttemptStart, AuditEntry, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::{
    AccountSource, CreateGroup, Group, PasswordChange, PortalSettings, UserPatch, UserView,
};
use std::net::IpAddr;

/// Password hashing at once, at most this many (each argon2 run takes 19 MiB and a core for a
/// moment); the rest wait their turn a little, then are told the server is busy.
static PASSWORD_WORK: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores.clamp(2, 16))
    });

/// How long a password check waits for its turn before the server says it is busy.
const PASSWORD_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs password work (argon2) off the async runtime, bounded by [`PASSWORD_WORK`].
async fn password_work<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, UseCaseError> {
    let busy = || {
        UseCaseError::Busy("the server is busy checking passwords; try again in a moment".into())
    };
    let _permit = tokio::time::timeout(PASSWORD_QUEUE_WAIT, PASSWORD_WORK.acquire())
        .await
        .map_err(|_| busy())?
        .map_err(|_| busy())?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| UseCaseError::Internal(e.to_string()))
}

/// Checks the password policy, then hashes off the async runtime.
pub async fn hash_password(password: String) -> Result<String, UseCaseError> {
    password::check_policy(&password)?;
    Ok(password_work(move || password::hash(&password)).await??)
}

/// Checks a username and password, with lockout and audit, and starts a session. Shared by
/// the JSON API and the login form. A local account's password is checked here; with an LDAP
/// directory, anyone else's is the directory's to check (and the account follows what it
/// says). An account of the OIDC provider has no password here at all.
pub async fn log_in(
    store: &Store,
    directory: Option<&Directory>,
    settings: &PortalSettings,
    username: String,
    password_text: String,
    client: IpAddr,
    now: DateTime<Utc>,
) -> Result<LoggedIn, UseCaseError> {
    if username.chars().count() > MAX_TEXT {
        return Err(UseCaseError::BadRequest(format!(
            "username is longer than {MAX_TEXT} characters"
        )));
    }
    if password_text.len() > password::MAX_BYTES {
        return Err(UseCaseError::BadRequest(format!(
            "password is longer than {} bytes",
            password::MAX_BYTES
        )));
    }
    let address = client.to_string();
    let rules = LockoutRules::default();
    // Counted before the password is checked, atomically with the check of the limits: of
    // many concurrent guesses only as many as the limit get to be checked.
    let (attempt, address_failures) = match store
        .sessions()
        .begin_login_attempt(&username, &address, &rules, now)
        .await?
    {
        AttemptStart::Counted {
            id,
            address_failures,
            ..
        } => (id, address_failures),
        AttemptStart::Locked(wait) => {
            return Err(UseCaseError::Locked {
                retry_after_secs: wait.num_seconds().max(1) as u64,
            })
        }
    };
    let delay = rules.address_delay(address_failures);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let credentials = store.accounts().credentials(&username).await?;
    let ldap = directory.and_then(|d| d.ldap.as_ref());
    let source = credentials.as_ref().map(|(user, _)| user.source);
    // A local member's account the directory may take over (a lab moving to its directory):
    // the directory's password is tried first, the local one after.
    let adoptable = credentials.as_ref().is_some_and(|(user, _)| {
        user.source == AccountSource::Local
            && !user.is_admin()
            && directory.is_some_and(|d| d.rules.adopt_local_accounts)
    });
    let checked = match (source, ldap) {
        (Some(AccountSource::Oidc), _) => {
            store.sessions().end_login_attempt(attempt, None).await?;
            let name = directory
                .and_then(|d| d.oidc.as_ref())
                .map_or("the lab's sign-in provider".to_string(), |p| {
                    p.name().to_string()
                });
            return Err(UseCaseError::Forbidden(Said::SignInWith(name)));
        }
        (Some(AccountSource::Ldap) | None, Some(ldap)) => {
            ldap_check(ldap, &username, &password_text).await
        }
        (Some(AccountSource::Local), Some(ldap)) if adoptable => {
            match ldap_check(ldap, &username, &password_text).await {
                Ok(None) => local_check(credentials, password_text).await,
                other => other,
            }
        }
        _ => local_check(credentials, password_text).await,
    };
    let checked = match checked {
        Ok(checked) => checked,
        Err(e) => {
            // Not judged (busy, or the directory is down): it does not count against anyone.
            store.sessions().end_login_attempt(attempt, None).await?;
            return Err(e);
        }
    };
    let user = match checked {
        Some(Checked::Local(user)) => {
            if settings.members_use_directory && directory.is_some() && !user.is_admin() {
                store.sessions().end_login_attempt(attempt, None).await?;
                return Err(UseCaseError::Forbidden(Said::MembersUseDirectory));
            }
            Some(user)
        }
        Some(Checked::Directory(person)) => {
            let directory =
                directory.ok_or_else(|| UseCaseError::Internal("no directory".into()))?;
            match super::directory::account_for(store, directory, person, settings, now).await {
                Ok(user) => Some(user),
                Err(UseCaseError::InvalidCredentials) => None,
                Err(e) => {
                    store.sessions().end_login_attempt(attempt, None).await?;
                    return Err(e);
                }
            }
        }
        None => None,
    };
    store
        .sessions()
        .end_login_attempt(attempt, Some(user.is_some()))
        .await?;
    let Some(user) = user else {
        let failure =
            AuditEntry::new(None, AuditAction::AuthLoginFailed, username).from_addr(address);
        store.audit_log().record(&failure, now).await?;
        return Err(UseCaseError::InvalidCredentials);
    };
    let how = if user.source == AccountSource::Ldap {
        "ldap"
    } else {
        ""
    };
    start_session(store, user, how, Some(client), now).await
}

/// The LDAP directory's answer to a password: the person, `None` for a wrong one.
async fn ldap_check(
    ldap: &crate::directory::ldap::Ldap,
    username: &str,
    password: &str,
) -> Result<Option<Checked>, UseCaseError> {
    match ldap.authenticate(username, password).await {
        Ok(person) => Ok(Some(Checked::Directory(person))),
        Err(crate::directory::ldap::LdapError::InvalidCredentials) => Ok(None),
        Err(e) => Err(UseCaseError::from(e)),
    }
}

/// A local password checked against its argon2 hash (off the async runtime); the same work
/// for an unknown user, so timing does not tell who has an account.
async fn local_check(
    credentials: Option<(User, String)>,
    password_text: String,
) -> Result<Option<Checked>, UseCaseError> {
    password_work(move || match credentials {
        Some((user, hash)) if user.source == AccountSource::Local => {
            let matches = password::verify(&password_text, &hash);
            (matches && user.enabled).then_some(Checked::Local(user))
        }
        _ => {
            password::verify_dummy(&password_text);
            None
        }
    })
    .await
}

/// Whose password checked out: a local account, or a person the LDAP directory vouched for.
enum Checked {
    Local(User),
    Directory(crate::directory::Person),
}

/// Ends the session whose cookie carries `secret` (nothing when there is none).
pub async fn log_out(store: &Store, secret: Option<&str>) -> Result<(), UseCaseError> {
    if let Some(secret) = secret {
        store.sessions().end(&session::hash_secret(secret)).await?;
    }
    Ok(())
}

/// Changes `user`'s password after checking the current one; ends every session of theirs
/// (and their tokens unless they keep them).
pub async fn change_password(
    store: &Store,
    user: &User,
    change: PasswordChange,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    if user.source != AccountSource::Local {
        return Err(UseCaseError::Forbidden(
            "your password is the lab directory's: change it there".into(),
        ));
    }
    let (_, stored) = store
        .accounts()
        .credentials(&user.username)
        .await?
        .ok_or(UseCaseError::NotFound(Said::NoSuchUser))?;
    let current = change.current_password;
    if !password_work(move || password::verify(&current, &stored)).await? {
        return Err(UseCaseError::Forbidden(Said::WrongCurrentPassword));
    }
    let hash = hash_password(change.new_password).await?;
    let audit = AuditEntry::new(
        Some(user.id),
        AuditAction::UserPasswordChange,
        &user.username,
    );
    store
        .accounts()
        .change_password(user.id, &hash, !change.keep_tokens, &audit, now)
        .await?;
    Ok(())
}

/// Remembers the interface language `user` chose: `en` or `zh`.
pub async fn choose_language(
    store: &Store,
    user: &User,
    language: &str,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    if lanes_app::i18n::parse(language).map(lanes_app::i18n::code) != Some(language) {
        // What was sent is echoed only in part: a 100,000-character value is not a message.
        let shown: String = language.chars().take(16).collect();
        let more = if language.chars().count() > 16 {
            "…"
        } else {
            ""
        };
        return Err(UseCaseError::Unprocessable(
            format!("language must be \"en\" or \"zh\", not {shown:?}{more}").into(),
        ));
    }
    let audit =
        AuditEntry::new(Some(user.id), AuditAction::UserLanguage, &user.username).detail(language);
    store
        .accounts()
        .set_language(user.id, language, &audit, now)
        .await?;
    Ok(())
}

/// Creates an account. `actor` is the admin who asks, or `None` for the operator's
/// `lanes user add` on the server itself.
pub async fn create_user(
    store: &Store,
    actor: Option<&User>,
    new: NewUser,
    password: String,
    now: DateTime<Utc>,
) -> Result<UserView, UseCaseError> {
    if actor.is_some_and(|a| !a.is_admin()) {
        return Err(UseCaseError::Forbidden(Said::OnlyAdmins));
    }
    new.validate()?;
    let hash = hash_password(password).await?;
    let how = if actor.is_none() {
        " (lanes user add)"
    } else {
        ""
    };
    let entry = AuditEntry::new(actor.map(|a| a.id), AuditAction::UserCreate, &new.username)
        .detail(format!("role {}{how}", new.role));
    let user = store.accounts().create(&new, &hash, &entry, now).await?;
    Ok(UserView {
        user,
        groups: Vec::new(),
        unix_account_found: None,
    })
}

/// A change to an account (role, enabled, password, groups, names) by an admin, or by the
/// operator's `lanes user` on the server itself when `actor` is `None`.
pub async fn update_user(
    store: &Store,
    actor: Option<&User>,
    id: i64,
    patch: UserPatch,
    now: DateTime<Utc>,
) -> Result<UserView, UseCaseError> {
    if actor.is_some_and(|a| !a.is_admin()) {
        return Err(UseCaseError::Forbidden(Said::OnlyAdmins));
    }
    validate_patch(&patch)?;
    let hash = match patch.password.clone() {
        Some(password) => Some(hash_password(password).await?),
        None => None,
    };
    let mut changes = Vec::new();
    if let Some(role) = patch.role {
        changes.push(format!("role {role}"));
    }
    if let Some(enabled) = patch.enabled {
        changes.push(if enabled { "enabled" } else { "disabled" }.to_string());
    }
    if patch.password.is_some() {
        changes.push("password reset".into());
    }
    if let Some(groups) = &patch.groups {
        changes.push(format!("groups [{}]", groups.join(", ")));
    }
    if actor.is_none() {
        changes.push("(lanes user)".into());
    }
    let entry = AuditEntry::new(actor.map(|a| a.id), AuditAction::UserUpdate, id.to_string())
        .detail(changes.join("; "));
    let user = store
        .accounts()
        .update(id, &patch, hash.as_deref(), &entry, now)
        .await?
        .ok_or(UseCaseError::NotFound(Said::NoSuchUser))?;
    Ok(user_views(store, vec![user]).await?.remove(0))
}

/// Accounts with the groups each belongs to.
pub async fn user_views(store: &Store, users: Vec<User>) -> Result<Vec<UserView>, UseCaseError> {
    let memberships = store.accounts().memberships().await?;
    Ok(users
        .into_iter()
        .map(|user| UserView {
            groups: memberships
                .iter()
                .filter(|(id, _)| *id == user.id)
                .map(|(_, g)| g.clone())
                .collect(),
            user,
            unix_account_found: None,
        })
        .collect())
}

/// Creates a group (admins only).
pub async fn create_group(
    store: &Store,
    admin: &User,
    request: CreateGroup,
    now: DateTime<Utc>,
) -> Result<Group, UseCaseError> {
    check_group_name(&request.name)?;
    if request.description.chars().count() > MAX_TEXT {
        return Err(UseCaseError::Unprocessable(
            format!("description must be at most {MAX_TEXT} characters").into(),
        ));
    }
    let entry = AuditEntry::new(Some(admin.id), AuditAction::GroupCreate, &request.name);
    Ok(store
        .accounts()
        .create_group(&request.name, &request.description, &entry, now)
        .await?)
}

/// Revokes one of `user`'s own tokens.
pub async fn revoke_token(
    store: &Store,
    user: &User,
    id: i64,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    let entry = AuditEntry::new(Some(user.id), AuditAction::TokenRevoke, id.to_string());
    if store.tokens().revoke(user.id, id, &entry, now).await? {
        Ok(())
    } else {
        Err(UseCaseError::NotFound(Said::NoSuchToken))
    }
}
