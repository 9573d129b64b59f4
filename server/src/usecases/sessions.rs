//! Sessions and API tokens as a sign-in ends with them, whichever way the person signed in
//! (a password here, the LDAP directory, the OIDC provider, a one-time code).

use super::UseCaseError;
use crate::accounts::session;
use crate::accounts::User;
use crate::accounts::MAX_TEXT;
use crate::audit::AuditAction;
use crate::store::{AuditEntry, Store};
use chrono::{DateTime, Utc};
use lanes_types::account::{ApiToken, CreatedToken, NewToken};
use std::net::IpAddr;

/// Prefix of every API token, so that secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "lanes_";

/// A session just started: its owner and the secret for the cookie (shown once, stored hashed).
pub struct LoggedIn {
    pub user: User,
    pub secret: String,
}

/// Starts a session for `user`, audited as a login (`how`: the directory that vouched, if any).
pub async fn start_session(
    store: &Store,
    user: User,
    how: &str,
    client: Option<IpAddr>,
    now: DateTime<Utc>,
) -> Result<LoggedIn, UseCaseError> {
    let (secret, id_hash) =
        session::new_secret().map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let mut audit = AuditEntry::new(Some(user.id), AuditAction::AuthLogin, &user.username);
    if !how.is_empty() {
        audit = audit.detail(how);
    }
    if let Some(client) = client {
        audit = audit.from_addr(client.to_string());
    }
    store
        .sessions()
        .start(user.id, &id_hash, &audit, now)
        .await?;
    Ok(LoggedIn { user, secret })
}

/// Creates an API token for `user`; its secret is in the answer and nowhere else.
pub async fn create_token(
    store: &Store,
    user: &User,
    request: NewToken,
    now: DateTime<Utc>,
) -> Result<CreatedToken, UseCaseError> {
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > MAX_TEXT {
        return Err(UseCaseError::BadRequest(format!(
            "token name must be 1 to {MAX_TEXT} characters"
        )));
    }
    let (random, _) = session::new_secret().map_err(|e| UseCaseError::Internal(e.to_string()))?;
    let secret = format!("{TOKEN_PREFIX}{random}");
    let entry = AuditEntry::new(Some(user.id), AuditAction::TokenCreate, name);
    let token: ApiToken = store
        .tokens()
        .create(user.id, name, &session::hash_secret(&secret), &entry, now)
        .await?;
    Ok(CreatedToken { token, secret })
}
