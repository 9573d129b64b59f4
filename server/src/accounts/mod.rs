//! Accounts: who may use Lanes, with which role, and which Unix account their jobs run as.
//! Validation here is plain Rust; storage is in `store`, HTTP in `http`.

pub mod commands;
pub mod password;
pub mod session;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest display name, email or group name accepted.
pub const MAX_TEXT: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "user" => Ok(Role::User),
            other => Err(format!("unknown role {other:?}: expected admin or user")),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored account, without its password hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    pub unix_user: Option<String>,
    pub role: Role,
    pub enabled: bool,
}

/// What it takes to create an account; [`NewUser::validate`] before storing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUser {
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    pub unix_user: Option<String>,
    pub role: Role,
}

/// Changes an admin makes to an account; absent fields stay as they are. For `email` and
/// `unix_user`, an empty string clears the value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserPatch {
    pub display_name: Option<String>,
    pub email: Option<String>,
    pub unix_user: Option<String>,
    pub role: Option<Role>,
    pub enabled: Option<bool>,
    /// A new password (a reset): ends the user's sessions.
    pub password: Option<String>,
    /// The complete set of groups, by name.
    pub groups: Option<Vec<String>>,
}

impl UserPatch {
    pub fn validate(&self) -> Result<(), InvalidAccount> {
        if self
            .display_name
            .as_ref()
            .is_some_and(|d| d.chars().count() > MAX_TEXT)
        {
            return Err(InvalidAccount::DisplayName);
        }
        if let Some(email) = self.email.as_deref().filter(|e| !e.is_empty()) {
            if email.chars().count() > MAX_TEXT || !email.contains('@') {
                return Err(InvalidAccount::Email);
            }
        }
        if let Some(unix) = self.unix_user.as_deref().filter(|u| !u.is_empty()) {
            check_unix_user(unix)?;
        }
        Ok(())
    }

    /// Whether the change must end the user's sessions (disabled, or a new password).
    pub fn ends_sessions(&self) -> bool {
        self.enabled == Some(false) || self.password.is_some()
    }
}

/// Whether a group name is acceptable: like a username, so it is safe in paths and logs.
pub fn check_group_name(name: &str) -> Result<(), InvalidAccount> {
    check_username(name).map_err(|_| InvalidAccount::GroupName)
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAccount {
    #[error("group name must be 1 to 32 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter")]
    GroupName,
    #[error("username must be 1 to 32 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter")]
    Username,
    #[error("display name must be at most {MAX_TEXT} characters")]
    DisplayName,
    #[error("email must be at most {MAX_TEXT} characters and contain '@'")]
    Email,
    #[error("Unix account must be a valid user name (lowercase letters, digits, '_' or '-', at most 32 characters, not starting with '-')")]
    UnixUser,
    #[error("jobs may not run as root: give a Unix account other than root")]
    RootUnixUser,
}

/// A Lanes username: short and shell-safe, since it shows up in paths and logs.
pub fn check_username(name: &str) -> Result<(), InvalidAccount> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if first_ok && rest_ok && name.len() <= 32 {
        Ok(())
    } else {
        Err(InvalidAccount::Username)
    }
}

/// A Unix account name as `useradd` accepts it (the portable subset), never root.
pub fn check_unix_user(name: &str) -> Result<(), InvalidAccount> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
    if !valid {
        return Err(InvalidAccount::UnixUser);
    }
    if name == "root" {
        return Err(InvalidAccount::RootUnixUser);
    }
    Ok(())
}

impl NewUser {
    pub fn validate(&self) -> Result<(), InvalidAccount> {
        check_username(&self.username)?;
        if self.display_name.chars().count() > MAX_TEXT {
            return Err(InvalidAccount::DisplayName);
        }
        if let Some(email) = &self.email {
            if email.chars().count() > MAX_TEXT || !email.contains('@') {
                return Err(InvalidAccount::Email);
            }
        }
        if let Some(unix) = &self.unix_user {
            check_unix_user(unix)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(username: &str) -> NewUser {
        NewUser {
            username: username.into(),
            display_name: "Ada".into(),
            email: None,
            unix_user: Some("ada".into()),
            role: Role::User,
        }
    }

    #[test]
    fn usernames_are_short_lowercase_and_start_with_a_letter() {
        for ok in ["ada", "a", "ada.l", "ada_l-2", &"a".repeat(32)] {
            assert_eq!(check_username(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Ada",
            "1ada",
            "ada l",
            "ada/..",
            "_ada",
            &"a".repeat(33),
            "ådå",
        ] {
            assert_eq!(check_username(bad), Err(InvalidAccount::Username), "{bad}");
        }
    }

    #[test]
    fn unix_accounts_follow_useradd_and_are_never_root() {
        assert_eq!(check_unix_user("ada_l-2"), Ok(()));
        assert_eq!(check_unix_user("root"), Err(InvalidAccount::RootUnixUser));
        for bad in ["", "-ada", "Ada", "ada lovelace", "ada;rm", &"a".repeat(33)] {
            assert_eq!(check_unix_user(bad), Err(InvalidAccount::UnixUser), "{bad}");
        }
    }

    #[test]
    fn a_new_user_is_checked_field_by_field() {
        assert_eq!(user("ada").validate(), Ok(()));
        let mut u = user("ada");
        u.email = Some("not-an-address".into());
        assert_eq!(u.validate(), Err(InvalidAccount::Email));
        let mut u = user("ada");
        u.display_name = "x".repeat(257);
        assert_eq!(u.validate(), Err(InvalidAccount::DisplayName));
        let mut u = user("ada");
        u.unix_user = Some("root".into());
        assert_eq!(u.validate(), Err(InvalidAccount::RootUnixUser));
    }

    #[test]
    fn roles_parse_and_print() {
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert_eq!(Role::User.to_string(), "user");
        assert!("root".parse::<Role>().is_err());
    }
}
