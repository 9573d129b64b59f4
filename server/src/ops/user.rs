//! `lanes user ...`: account management straight against the database, for operators and
//! scripts, with no server running.

use crate::accounts::{password, NewUser, Role, User};
use crate::ops::cli::{DbArgs, UserAddArgs, UserListArgs, UserNameArgs};
use crate::ops::data_dir::{prepare_data_dir, resolve_db, DataDirError};
use crate::store::{Store, StoreError};
use crate::usecases::{accounts, UseCaseError};
use lanes_types::account::UserPatch;
use std::io::BufRead;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Bad input or configuration: exit status 2.
    #[error("{0}")]
    Invalid(String),
    /// Something failed while running: exit status 1.
    #[error("{0}")]
    Failed(String),
}

impl CommandError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Invalid(_) => 2,
            CommandError::Failed(_) => 1,
        }
    }
}

impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Database(_) => CommandError::Failed(e.to_string()),
            _ => CommandError::Invalid(e.to_string()),
        }
    }
}

impl From<UseCaseError> for CommandError {
    fn from(e: UseCaseError) -> Self {
        match e {
            UseCaseError::Store(e) => e.into(),
            UseCaseError::Internal(_) | UseCaseError::Busy(_) => {
                CommandError::Failed(e.to_string())
            }
            _ => CommandError::Invalid(e.to_string()),
        }
    }
}

impl From<DataDirError> for CommandError {
    fn from(e: DataDirError) -> Self {
        CommandError::Invalid(e.to_string())
    }
}

/// Reads the password from the first line of `input` (a trailing newline is not part of it).
pub fn read_password(input: impl BufRead) -> Result<String, CommandError> {
    let mut line = String::new();
    input
        .take(password::MAX_BYTES as u64 + 2)
        .read_line(&mut line)
        .map_err(|e| {
            CommandError::Invalid(format!("cannot read the password from standard input: {e}"))
        })?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    password::check_policy(password).map_err(|e| CommandError::Invalid(e.to_string()))?;
    Ok(password.to_string())
}

/// Creates the account `args` describes with the given password.
pub async fn add_user(args: UserAddArgs, password: String) -> Result<User, CommandError> {
    let new = NewUser {
        display_name: args.display_name.unwrap_or_else(|| args.username.clone()),
        username: args.username,
        email: args.email,
        unix_user: args.unix_user,
        role: if args.admin { Role::Admin } else { Role::User },
    };
    new.validate()
        .map_err(|e| CommandError::Invalid(e.to_string()))?;
    let (data_dir, url) = resolve_db(args.db)?;
    prepare_data_dir(&data_dir)?;
    let store = Store::open(&url).await?;
    let created = accounts::create_user(&store, None, new, password, chrono::Utc::now()).await;
    store.close().await;
    Ok(created?.user)
}

/// What an operator should know about where `user`'s jobs will run: nowhere without a Unix
/// account, and not on this host while it has no such account (a portal without cards may
/// rightly lack it; the GPU nodes need it).
pub fn unix_account_notes(user: &User) -> Vec<String> {
    match &user.unix_user {
        None => vec![format!(
            "{} has no Unix account, so their jobs cannot start; give them one with \
             --unix-user ACCOUNT (or later on the admin page)",
            user.username
        )],
        Some(account) => match nix::unistd::User::from_name(account) {
            Ok(Some(_)) => Vec::new(),
            _ => vec![format!(
                "this host has no Unix account {account:?}: {}'s jobs cannot start on it until \
                 the account exists (adduser {account})",
                user.username
            )],
        },
    }
}

/// The accounts, one line each (or as JSON): name, role, Unix account, e-mail, whether they
/// may sign in.
pub async fn list_users(args: UserListArgs) -> Result<String, CommandError> {
    let store = open(args.db).await?;
    let users = store.accounts().list().await;
    store.close().await;
    let users = users?;
    if args.json {
        return serde_json::to_string_pretty(&users)
            .map(|text| text + "\n")
            .map_err(|e| CommandError::Failed(e.to_string()));
    }
    if users.is_empty() {
        return Ok("no accounts yet; create the first admin with:\n    \
                   lanes user add --username NAME --admin --unix-user ACCOUNT\n"
            .into());
    }
    let rows: Vec<[String; 5]> = users
        .iter()
        .map(|u| {
            [
                u.username.clone(),
                u.role.to_string(),
                u.unix_user.clone().unwrap_or_else(|| "-".into()),
                u.email.clone().unwrap_or_else(|| "-".into()),
                if u.enabled { "yes" } else { "no (disabled)" }.into(),
            ]
        })
        .collect();
    let head = ["USERNAME", "ROLE", "UNIX ACCOUNT", "E-MAIL", "MAY SIGN IN"];
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for row in &rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    Ok(out)
}

/// Sets a new password for `args.username` (its sessions end, its tokens are revoked).
pub async fn set_password(args: UserNameArgs, password: String) -> Result<String, CommandError> {
    password::check_policy(&password).map_err(|e| CommandError::Invalid(e.to_string()))?;
    let patch = UserPatch {
        password: Some(password),
        ..Default::default()
    };
    let username = args.username.clone();
    change(args, patch).await?;
    Ok(format!(
        "new password set for {username:?}; their sessions ended and their tokens were revoked\n"
    ))
}

/// Lets `args.username` sign in again, or stops them (`enabled` false: their sessions end and
/// their tokens are revoked).
pub async fn set_enabled(args: UserNameArgs, enabled: bool) -> Result<String, CommandError> {
    let patch = UserPatch {
        enabled: Some(enabled),
        ..Default::default()
    };
    let username = args.username.clone();
    change(args, patch).await?;
    Ok(if enabled {
        format!("{username:?} may sign in again\n")
    } else {
        format!("{username:?} is disabled; their sessions ended and their tokens were revoked\n")
    })
}

async fn open(db: DbArgs) -> Result<Store, CommandError> {
    let (data_dir, url) = resolve_db(db)?;
    prepare_data_dir(&data_dir)?;
    Ok(Store::open(&url).await?)
}

async fn change(args: UserNameArgs, patch: UserPatch) -> Result<(), CommandError> {
    let store = open(args.db).await?;
    let changed = async {
        let user = store
            .accounts()
            .by_username(&args.username)
            .await?
            .ok_or_else(|| {
                CommandError::Invalid(format!(
                    "no account {:?} (lanes user list shows them)",
                    args.username
                ))
            })?;
        accounts::update_user(&store, None, user.id, patch, chrono::Utc::now()).await?;
        Ok::<_, CommandError>(())
    }
    .await;
    store.close().await;
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_the_first_line_without_its_line_ending() {
        assert_eq!(
            read_password(&b"long enough pw\n"[..]).unwrap(),
            "long enough pw"
        );
        assert_eq!(
            read_password(&b"long enough pw\r\nsecond"[..]).unwrap(),
            "long enough pw"
        );
        assert_eq!(
            read_password(&b"no newline at all"[..]).unwrap(),
            "no newline at all"
        );
    }

    #[test]
    fn a_short_empty_or_huge_password_is_invalid_input() {
        for input in [&b"short\n"[..], &b""[..], &[b'x'; 5000][..]] {
            let err = read_password(input).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{err}");
        }
    }
}
