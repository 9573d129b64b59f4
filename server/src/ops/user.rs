//! `lanes user ...`: account management straight against the database, for operators and
//! scripts, with no server running.

use crate::accounts::{password, NewUser, Role, User};
use crate::ops::cli::UserAddArgs;
use crate::ops::data_dir::{prepare_data_dir, resolve_db, DataDirError};
use crate::store::{Store, StoreError};
use crate::usecases::{accounts, UseCaseError};
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
