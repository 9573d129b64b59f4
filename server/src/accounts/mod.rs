//! Accounts: who may use Lanes, with which role, and which Unix account their jobs run as.
//! Validation here is plain Rust; storage is in `store`, HTTP in `http`.

pub mod password;
pub mod session;

pub use lanes_types::account::{Role, User, UserPatch};

/// Longest display name, email or group name accepted.
pub const MAX_TEXT: usize = 256;

/// What it takes to create an account; [`NewUser::validate`] before storing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUser {
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    pub unix_user: Option<String>,
    pub role: Role,
}

/// Checks an admin's change to an account before it is stored.
pub fn validate_patch(patch: &UserPatch) -> Result<(), InvalidAccount> {
    if patch
        .display_name
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_TEXT)
    {
        return Err(InvalidAccount::DisplayName);
    }
    if let Some(email) = patch.email.as_deref().filter(|e| !e.is_empty()) {
        check_email(email)?;
    }
    if let Some(unix) = patch.unix_user.as_deref().filter(|u| !u.is_empty()) {
        check_unix_user(unix)?;
    }
    Ok(())
}

/// Whether an e-mail address is acceptable: one `@` between a local part and a domain, no
/// spaces or control characters (which could smuggle headers into a mail), not too long.
pub fn check_email(email: &str) -> Result<(), InvalidAccount> {
    let well_formed = email.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty() && domain.contains('.') && !domain.contains('@')
    });
    if email.chars().count() > MAX_TEXT
        || !well_formed
        || email.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(InvalidAccount::Email);
    }
    Ok(())
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
            check_email(email)?;
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
