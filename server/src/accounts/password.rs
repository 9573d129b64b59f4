//! Password policy and argon2id hashing. Hashing is slow on purpose (tens of milliseconds), so
//! async callers run these functions with `spawn_blocking`.

use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Algorithm, Argon2, Params, Version};
use std::sync::OnceLock;

/// Shortest password accepted, in characters.
pub const MIN_CHARS: usize = 10;
/// Longest password accepted, in bytes: bounds the work an attacker can make us do.
pub const MAX_BYTES: usize = 1024;

/// The stored "hash" of an account with no password here (its directory checks who it is):
/// not a PHC string, so [`verify`] never matches it.
pub const NO_PASSWORD: &str = "!directory";

/// OWASP's minimum for argon2id: 19 MiB of memory, 2 iterations, 1 lane.
const MEMORY_KIB: u32 = 19 * 1024;
const ITERATIONS: u32 = 2;
const LANES: u32 = 1;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("the password is too short: use at least {MIN_CHARS} characters")]
    TooShort,
    #[error("the password is too long: use at most {MAX_BYTES} bytes")]
    TooLong,
    #[error("could not hash the password: {0}")]
    Hash(String),
}

/// Checks a new password against the policy.
pub fn check_policy(password: &str) -> Result<(), PasswordError> {
    if password.len() > MAX_BYTES {
        return Err(PasswordError::TooLong);
    }
    if password.chars().count() < MIN_CHARS {
        return Err(PasswordError::TooShort);
    }
    Ok(())
}

fn hasher() -> Argon2<'static> {
    let params = Params::new(MEMORY_KIB, ITERATIONS, LANES, None)
        .expect("the OWASP parameters are valid argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes a password that passed [`check_policy`] into a PHC string with a random salt.
pub fn hash(password: &str) -> Result<String, PasswordError> {
    hasher()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Whether `password` matches the stored PHC string. A malformed hash never matches.
pub fn verify(password: &str, phc: &str) -> bool {
    if password.len() > MAX_BYTES {
        return false;
    }
    PasswordHash::new(phc)
        .map(|parsed| {
            hasher()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Does the work of one [`verify`] against a hash no password matches, so that a login for an
/// unknown user costs as much as one for a known user.
pub fn verify_dummy(password: &str) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let phc = DUMMY.get_or_init(|| hash("lanes-dummy-password-never-used").unwrap_or_default());
    let _ = verify(password, phc);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_wants_ten_characters_and_at_most_a_kibibyte() {
        assert_eq!(check_policy("short"), Err(PasswordError::TooShort));
        assert_eq!(check_policy("123456789"), Err(PasswordError::TooShort));
        assert_eq!(check_policy("1234567890"), Ok(()));
        // Characters, not bytes: ten two-byte characters are enough.
        assert_eq!(check_policy("éééééééééé"), Ok(()));
        assert_eq!(check_policy(&"x".repeat(1025)), Err(PasswordError::TooLong));
        assert!(PasswordError::TooShort.to_string().contains("at least 10"));
    }

    #[test]
    fn a_hash_is_argon2id_with_the_owasp_parameters_and_verifies_only_its_password() {
        let phc = hash("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify("correct horse battery", &phc));
        assert!(!verify("correct horse batterY", &phc));
        assert!(!verify("correct horse battery", "not a hash"));
        assert!(!verify("", NO_PASSWORD) && !verify("!directory", NO_PASSWORD));
        assert_ne!(phc, hash("correct horse battery").unwrap(), "salted");
    }
}
