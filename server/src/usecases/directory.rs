//! Directory use cases: a person the lab's directory vouched for gets their account (made,
//! taken over or brought up to date by [`crate::directory::person::plan`]); browser, terminal
//! and one-time-code sign-ins; and the sync that disables whoever the directory dropped.

use super::sessions::{create_token, start_session, LoggedIn};
use super::{Said, UseCaseError};
use crate::accounts::session;
use crate::accounts::NewUser;
use crate::audit::AuditAction;
use crate::directory::ldap::LdapError;
use crate::directory::oidc::{BrowserFlow, DeviceFlow, OidcError, BROWSER_FLOW_TTL};
use crate::directory::person::{self, Plan, Refusal};
use crate::directory::{Directory, Person};
use crate::store::{AuditEntry, FlowKind, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::{
    AccountSource, DeviceOutcome, DeviceSignIn, DirectorySyncReport, NewToken, PortalSettings,
    TerminalCode, TerminalSignIn, User, UserPatch,
};
use std::net::IpAddr;

/// How long a one-time terminal code lives.
const TERMINAL_CODE_TTL: chrono::Duration = chrono::Duration::minutes(5);
/// How long one poll of a device sign-in waits for the member before answering "pending".
const DEVICE_POLL_WAIT: std::time::Duration = std::time::Duration::from_secs(20);
/// Letters of terminal codes: no 0/O, 1/I/L, so a code read aloud or retyped survives.
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

impl From<Refusal> for UseCaseError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Pending => UseCaseError::Forbidden(Said::AccountPending),
            Refusal::Disabled => UseCaseError::InvalidCredentials,
            Refusal::UsernameTaken(name) => UseCaseError::Forbidden(Said::UsernameTaken(name)),
            other => UseCaseError::Forbidden(other.to_string().into()),
        }
    }
}

impl From<OidcError> for UseCaseError {
    fn from(e: OidcError) -> Self {
        match e {
            OidcError::Refused(r) => r.into(),
            OidcError::Unavailable(m) => {
                tracing::warn!(error = %m, "OIDC provider unavailable");
                UseCaseError::Busy("the sign-in provider cannot be reached; try again later".into())
            }
            OidcError::Rejected(m) => {
                tracing::warn!(error = %m, "OIDC sign-in rejected");
                UseCaseError::Forbidden("the sign-in could not be verified; start again".into())
            }
            OidcError::NoDeviceGrant => UseCaseError::NotFound(e.to_string().into()),
        }
    }
}

impl From<LdapError> for UseCaseError {
    fn from(e: LdapError) -> Self {
        match e {
            LdapError::InvalidCredentials => UseCaseError::InvalidCredentials,
            LdapError::Unavailable(m) => {
                tracing::warn!(error = %m, "LDAP directory unavailable");
                UseCaseError::Busy("the lab's directory cannot be reached; try again later".into())
            }
        }
    }
}

fn directory_of(directory: Option<&Directory>) -> Result<&Directory, UseCaseError> {
    directory.ok_or_else(|| UseCaseError::NotFound("this portal has no directory sign-in".into()))
}

fn provider_of(
    directory: Option<&Directory>,
) -> Result<&crate::directory::oidc::Provider, UseCaseError> {
    directory_of(directory)?
        .oidc
        .as_ref()
        .ok_or_else(|| UseCaseError::NotFound("this portal has no OpenID Connect sign-in".into()))
}

/// The account of a person the directory vouched for, made or brought up to date; refused
/// while it waits for approval or is disabled here.
pub async fn account_for(
    store: &Store,
    directory: &Directory,
    mut person: Person,
    settings: &PortalSettings,
    now: DateTime<Utc>,
) -> Result<User, UseCaseError> {
    if person.source == AccountSource::Oidc {
        if let (Some(ldap), Some(provider)) = (&directory.ldap, &directory.oidc) {
            if provider.unix_from_ldap() {
                // The Unix account (and groups) are the LDAP directory's; someone it no longer
                // has may not sign in through the provider either.
                let Some(found) = ldap.lookup(&person.username).await? else {
                    tracing::info!(
                        username = person.username,
                        "OIDC sign-in refused: not in the LDAP directory"
                    );
                    return Err(UseCaseError::InvalidCredentials);
                };
                person.unix_user = found.unix_user.or(person.unix_user);
                person.groups = match (person.groups, found.groups) {
                    (Some(mut a), Some(b)) => {
                        a.extend(b);
                        a.sort();
                        a.dedup();
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
            }
        }
    }
    let rules = &directory.rules;
    let linked = store
        .directory()
        .by_external_id(person.source, &person.external_id)
        .await?;
    let same_name = match &linked {
        Some(_) => None,
        None => store.accounts().by_username(&person.username).await?,
    };
    let approve =
        settings.new_directory_accounts == lanes_types::account::NewDirectoryAccounts::Approve;
    let plan = person::plan(&person, linked.as_ref(), same_name.as_ref(), approve, rules)?;
    let source = person.source.as_str();
    let (id, mut patch) = match plan {
        Plan::Create { role, pending } => {
            let new = NewUser {
                username: person.username.clone(),
                display_name: person.display_name.clone(),
                email: person.email.clone(),
                unix_user: person.unix_user.clone(),
                role,
            };
            let wait = if pending { "; waits for approval" } else { "" };
            let audit = AuditEntry::new(None, AuditAction::UserCreate, &new.username)
                .detail(format!("role {role}; first sign-in through {source}{wait}"));
            let user = store
                .directory()
                .create(
                    &new,
                    person.source,
                    &person.external_id,
                    pending,
                    &audit,
                    now,
                )
                .await?;
            (user.id, UserPatch::default())
        }
        Plan::Adopt { id, patch } => {
            let audit = AuditEntry::new(None, AuditAction::UserDirectorySync, id.to_string())
                .detail(format!(
                    "local account {} now signs in through {source}",
                    person.username
                ));
            store
                .directory()
                .adopt(id, person.source, &person.external_id, &audit, now)
                .await?;
            (id, patch)
        }
        Plan::Update { id, patch } => (id, patch),
    };
    let tables = GroupTables::read(store).await?;
    if let Some(groups) = tables.change(store, id, &person, rules, now).await? {
        patch.groups = Some(groups);
    }
    if !person::is_empty(&patch) {
        let audit = AuditEntry::new(None, AuditAction::UserDirectorySync, id.to_string())
            .detail(describe(&patch, source));
        store
            .accounts()
            .update(id, &patch, None, &audit, now)
            .await?;
    }
    let user = store
        .accounts()
        .get(id)
        .await?
        .ok_or(UseCaseError::NotFound(Said::NoSuchUser))?;
    if user.pending {
        return Err(Refusal::Pending.into());
    }
    if !user.enabled {
        return Err(Refusal::Disabled.into());
    }
    Ok(user)
}

/// What groups and memberships Lanes has, read once for a sign-in or a whole sync pass (a
/// pass changes only each account's own memberships, which it has read before).
struct GroupTables {
    known: Vec<String>,
    memberships: Vec<(i64, String)>,
}

impl GroupTables {
    async fn read(store: &Store) -> Result<GroupTables, UseCaseError> {
        Ok(GroupTables {
            known: store
                .accounts()
                .groups()
                .await?
                .into_iter()
                .map(|g| g.name)
                .collect(),
            memberships: store.accounts().memberships().await?,
        })
    }

    /// The Lanes groups the directory puts `user_id` in (those of `person`'s groups Lanes
    /// has, or makes), when they differ from the groups the account is in now.
    async fn change(
        &self,
        store: &Store,
        user_id: i64,
        person: &Person,
        rules: &person::Rules,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<String>>, UseCaseError> {
        let Some(groups) = person::lanes_groups(person, &self.known, rules) else {
            return Ok(None);
        };
        if rules.create_groups {
            store.directory().ensure_groups(&groups, None, now).await?;
        }
        let mut now_in: Vec<&String> = self
            .memberships
            .iter()
            .filter(|(user, _)| *user == user_id)
            .map(|(_, g)| g)
            .collect();
        now_in.sort();
        Ok((now_in != groups.iter().collect::<Vec<_>>()).then_some(groups))
    }
}

/// The audit detail of a directory's change.
fn describe(patch: &UserPatch, source: &str) -> String {
    let mut said = vec![format!("from {source}")];
    if let Some(name) = &patch.display_name {
        said.push(format!("name {name:?}"));
    }
    if let Some(email) = &patch.email {
        said.push(format!("e-mail {email}"));
    }
    if let Some(unix) = &patch.unix_user {
        said.push(format!("Unix account {unix}"));
    }
    if let Some(role) = patch.role {
        said.push(format!("role {role}"));
    }
    if let Some(groups) = &patch.groups {
        said.push(format!("groups [{}]", groups.join(", ")));
    }
    if patch.enabled == Some(false) {
        said.push("disabled: the directory no longer has it".into());
    }
    said.join("; ")
}

/// Where a browser goes to sign in through the provider; the flow is kept (by a hash of its
/// `state`) until it comes back. `state` is returned for the browser's cookie too, which binds
/// the sign-in to the browser that started it.
pub async fn start_browser_sign_in(
    store: &Store,
    directory: Option<&Directory>,
    redirect_url: &str,
    next: &str,
    now: DateTime<Utc>,
) -> Result<(String, String), UseCaseError> {
    let provider = provider_of(directory)?;
    let (url, state, flow) = provider.start(redirect_url, next).await?;
    let detail = serde_json::to_string(&flow).map_err(|e| UseCaseError::Internal(e.to_string()))?;
    store
        .directory()
        .put_flow(
            &session::hash_secret(&state),
            FlowKind::Browser,
            &detail,
            now + BROWSER_FLOW_TTL,
            now,
        )
        .await?;
    Ok((url, state))
}

/// What a browser brings back from the provider.
pub struct ProviderAnswer<'a> {
    /// The `state` in the callback's query.
    pub state: &'a str,
    /// The `state` in the browser's cookie, set when it left.
    pub cookie_state: Option<&'a str>,
    pub code: &'a str,
}

/// A browser back from the provider: its `state` must be one this portal gave out, still
/// unused and unexpired, and the browser's own (`cookie_state`); then the code is exchanged
/// and the ID token checked. Starts a session; returns it and where to go.
pub async fn finish_browser_sign_in(
    store: &Store,
    directory: Option<&Directory>,
    settings: &PortalSettings,
    back: ProviderAnswer<'_>,
    client: IpAddr,
    now: DateTime<Utc>,
) -> Result<(LoggedIn, String), UseCaseError> {
    let ProviderAnswer {
        state,
        cookie_state,
        code,
    } = back;
    let directory = directory_of(directory)?;
    let provider = provider_of(Some(directory))?;
    // Another browser's callback (or a forged one) must not use up this browser's sign-in.
    if cookie_state != Some(state) {
        return Err(UseCaseError::BadRequest(
            "this sign-in was started in another browser; start again here".into(),
        ));
    }
    // Taken before anything else, so the same state never works twice.
    let flow = store
        .directory()
        .take_flow(&session::hash_secret(state), FlowKind::Browser, now)
        .await?;
    let Some(flow) = flow else {
        return Err(UseCaseError::BadRequest(
            "this sign-in was used already or has expired; start again".into(),
        ));
    };
    let flow: BrowserFlow =
        serde_json::from_str(&flow).map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let person = provider.finish(code, &flow, now).await?;
    let user = account_for(store, directory, person, settings, now).await?;
    let logged_in = start_session(store, user, "oidc", Some(client), now).await?;
    Ok((logged_in, flow.next))
}

/// Starts a terminal's sign-in with the provider's device grant.
pub async fn start_device_sign_in(
    store: &Store,
    directory: Option<&Directory>,
    now: DateTime<Utc>,
) -> Result<DeviceSignIn, UseCaseError> {
    let provider = provider_of(directory)?;
    let flow = provider.start_device(now).await?;
    let (handle, handle_hash) =
        session::new_secret().map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let detail = serde_json::to_string(&flow).map_err(|e| UseCaseError::Internal(e.to_string()))?;
    store
        .directory()
        .put_flow(
            &handle_hash,
            FlowKind::Device,
            &detail,
            flow.expires_at,
            now,
        )
        .await?;
    Ok(DeviceSignIn {
        handle,
        user_code: flow.details.user_code().secret().clone(),
        verification_uri: flow.details.verification_uri().to_string(),
        verification_uri_complete: flow
            .details
            .verification_uri_complete()
            .map(|u| u.secret().clone()),
        expires_in: (flow.expires_at - now).num_seconds().max(0) as u64,
    })
}

/// Waits a while for the member to confirm a device sign-in; when they have, their account
/// and a new API token.
pub async fn poll_device_sign_in(
    store: &Store,
    directory: Option<&Directory>,
    settings: &PortalSettings,
    handle: &str,
    token_name: String,
    now: DateTime<Utc>,
) -> Result<DeviceOutcome, UseCaseError> {
    let directory = directory_of(directory)?;
    let provider = provider_of(Some(directory))?;
    let key = session::hash_secret(handle);
    let Some(detail) = store.directory().flow(&key, FlowKind::Device, now).await? else {
        return Err(UseCaseError::NotFound(
            "no such sign-in, or it has expired; run lanes login again".into(),
        ));
    };
    let flow: DeviceFlow =
        serde_json::from_str(&detail).map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let Some(person) = provider.poll_device(&flow, DEVICE_POLL_WAIT, now).await? else {
        return Ok(DeviceOutcome::Pending);
    };
    // Once: a second poll racing this one finds nothing.
    if store
        .directory()
        .take_flow(&key, FlowKind::Device, now)
        .await?
        .is_none()
    {
        return Err(UseCaseError::NotFound(
            "this sign-in was finished already".into(),
        ));
    }
    let now = Utc::now();
    let user = account_for(store, directory, person, settings, now).await?;
    let token = create_token(store, &user, NewToken { name: token_name }, now).await?;
    Ok(DeviceOutcome::Done { user, token })
}

/// A one-time code for `lanes login`, for the member signed in on the account page.
pub async fn new_terminal_code(
    store: &Store,
    user: &User,
    now: DateTime<Utc>,
) -> Result<TerminalCode, UseCaseError> {
    let mut bytes = [0u8; 10];
    getrandom::fill(&mut bytes).map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let letters: String = bytes
        .iter()
        .map(|b| CODE_ALPHABET[*b as usize % CODE_ALPHABET.len()] as char)
        .collect();
    let code = format!("{}-{}", &letters[..5], &letters[5..]);
    let expires_at = now + TERMINAL_CODE_TTL;
    let audit = AuditEntry::new(Some(user.id), AuditAction::AuthTerminalCode, &user.username);
    store
        .directory()
        .put_terminal_code(
            &session::hash_secret(&normalize_code(&code)),
            user.id,
            expires_at,
            &audit,
            now,
        )
        .await?;
    Ok(TerminalCode { code, expires_at })
}

/// A code as typed, in the one form it is stored by: capitals, no dashes or spaces.
fn normalize_code(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// Exchanges a one-time code for an API token. Guesses count as failed logins of the address,
/// which lock that address alone ([`session::LockoutRules::terminal_codes`]).
pub async fn redeem_terminal_code(
    store: &Store,
    code: &str,
    token_name: String,
    client: IpAddr,
    now: DateTime<Utc>,
) -> Result<TerminalSignIn, UseCaseError> {
    if code.len() > 64 {
        return Err(UseCaseError::BadRequest(
            "that is not a terminal code".into(),
        ));
    }
    let address = client.to_string();
    let rules = session::LockoutRules::terminal_codes();
    let attempt = match store
        .sessions()
        .begin_login_attempt("(terminal code)", &address, &rules, now)
        .await?
    {
        crate::store::AttemptStart::Counted {
            id,
            account_failures,
            ..
        } => {
            let delay = rules.everyone_delay(account_failures);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            id
        }
        crate::store::AttemptStart::Locked(wait) => {
            return Err(UseCaseError::Locked {
                retry_after_secs: wait.num_seconds().max(1) as u64,
            })
        }
    };
    let user = store
        .directory()
        .take_terminal_code(&session::hash_secret(&normalize_code(code)), now)
        .await?;
    store
        .sessions()
        .end_login_attempt(attempt, Some(user.is_some()))
        .await?;
    let Some(user) = user else {
        return Err(UseCaseError::Forbidden(
            "that code is wrong, used or expired; make a new one on your account page".into(),
        ));
    };
    let audit = AuditEntry::new(Some(user.id), AuditAction::AuthLogin, &user.username)
        .detail("terminal code")
        .from_addr(address);
    store.audit_log().record(&audit, now).await?;
    let token = create_token(store, &user, NewToken { name: token_name }, now).await?;
    Ok(TerminalSignIn { user, token })
}

/// Checks every LDAP account (and OIDC accounts whose Unix account is LDAP's) against the
/// directory: whoever it no longer has, or has disabled, is disabled here (sessions ended,
/// tokens revoked); the others are brought up to date. An unreachable directory stops the
/// pass before it changes anything.
pub async fn sync(
    store: &Store,
    directory: &Directory,
    now: DateTime<Utc>,
) -> Result<DirectorySyncReport, UseCaseError> {
    let Some(ldap) = &directory.ldap else {
        return Err(UseCaseError::NotFound(
            "this portal has no LDAP directory".into(),
        ));
    };
    let mut accounts = store.directory().accounts_of(AccountSource::Ldap).await?;
    if directory.oidc.as_ref().is_some_and(|p| p.unix_from_ldap()) {
        accounts.extend(store.directory().accounts_of(AccountSource::Oidc).await?);
    }
    accounts.retain(|user| user.enabled);
    let usernames: Vec<String> = accounts.iter().map(|u| u.username.clone()).collect();
    // Every answer before any change: an outage part-way changes nothing.
    let found = ldap.lookup_all(&usernames).await?;
    let tables = GroupTables::read(store).await?;
    let mut report = DirectorySyncReport::default();
    for (user, found) in accounts.into_iter().zip(found) {
        report.checked += 1;
        match found {
            None => {
                let patch = UserPatch {
                    enabled: Some(false),
                    ..UserPatch::default()
                };
                let audit =
                    AuditEntry::new(None, AuditAction::UserDirectorySync, user.id.to_string())
                        .detail(describe(&patch, "ldap"));
                match store
                    .accounts()
                    .update(user.id, &patch, None, &audit, now)
                    .await
                {
                    Ok(_) => report.disabled.push(user.username.clone()),
                    Err(e) => {
                        tracing::warn!(username = user.username, error = %e, "directory sync could not disable an account");
                    }
                }
            }
            Some(person) if user.source == AccountSource::Ldap => {
                let mut patch = person::patch_for(&person, Some(&user), &directory.rules);
                if let Some(groups) = tables
                    .change(store, user.id, &person, &directory.rules, now)
                    .await?
                {
                    patch.groups = Some(groups);
                }
                if !person::is_empty(&patch) {
                    let audit =
                        AuditEntry::new(None, AuditAction::UserDirectorySync, user.id.to_string())
                            .detail(describe(&patch, "ldap"));
                    if store
                        .accounts()
                        .update(user.id, &patch, None, &audit, now)
                        .await
                        .is_ok()
                    {
                        report.updated.push(user.username.clone());
                    }
                }
            }
            Some(_) => {}
        }
    }
    Ok(report)
}
