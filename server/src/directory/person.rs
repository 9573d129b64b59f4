//! What the directory says a person is, and what Lanes does about it at a sign-in: make their
//! account, bring it up to date, or refuse, and why. Plain Rust, no I/O.

use crate::accounts::{check_email, check_group_name, check_unix_user, check_username, MAX_TEXT};
use lanes_types::account::{AccountSource, Role, User, UserPatch};

/// A person as their directory describes them, after a successful sign-in or a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    pub source: AccountSource,
    /// Who the directory says this is, for good: `ISSUER#SUBJECT` for OIDC, the entry's DN
    /// for LDAP.
    pub external_id: String,
    /// The Lanes username (already checked).
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    /// The Unix account the person's jobs run as, when the directory says.
    pub unix_user: Option<String>,
    /// The directory's groups, by plain name; `None` when it said nothing about groups (then
    /// the account's Lanes groups are left as they are).
    pub groups: Option<Vec<String>>,
}

/// An admin's rules for directory accounts (from the settings file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Members of this directory group are admins; others are members. Unset: roles are the
    /// admins' to give, as for local accounts.
    pub admin_group: Option<String>,
    /// Directory groups without a Lanes group of their name get one; otherwise only groups
    /// an admin made are filled.
    pub create_groups: bool,
    /// A first sign-in whose username is a local member's account takes that account over
    /// (a lab moving to its directory). Admin accounts are never taken over.
    pub adopt_local_accounts: bool,
}

/// Why a sign-in through the directory is refused, in words for the person.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the directory's name {0:?} cannot be a Lanes username (lowercase letters, digits, '.', '_' or '-', starting with a letter, at most 32)")]
    Username(String),
    #[error("the username {0:?} belongs to another Lanes account; an admin can let the directory take it over (--directory-adopt-local-accounts)")]
    UsernameTaken(String),
    #[error("your account waits for an admin's approval")]
    Pending,
    #[error("your account is disabled; ask an admin")]
    Disabled,
}

/// The plain name of a directory group: the first RDN's value of a DN
/// (`cn=gpu-lab,ou=groups,dc=x` → `gpu-lab`), the last part of a path (`/lab/gpu-lab`), the
/// name itself otherwise; lowercased. `None` when it cannot be a Lanes group name.
pub fn group_name(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let name =
        if raw.contains('=') && raw.contains(',') || raw.to_ascii_lowercase().starts_with("cn=") {
            let first = raw.split(',').next()?;
            first.split_once('=')?.1.trim()
        } else {
            raw.rsplit('/').next()?.trim()
        };
    let name = name.to_lowercase();
    check_group_name(&name).ok().map(|()| name)
}

/// The Lanes username for a directory's name: lowercased, and for an e-mail-like name
/// (Entra ID's `preferred_username`) its local part.
pub fn username(raw: &str) -> Result<String, Refusal> {
    let lowered = raw.trim().to_lowercase();
    let name = lowered.split('@').next().unwrap_or_default().to_string();
    check_username(&name)
        .map(|()| name)
        .map_err(|_| Refusal::Username(raw.chars().take(64).collect()))
}

/// Fills the person's optional fields only with values Lanes accepts: an unusable e-mail,
/// display name or Unix account from the directory is dropped (and the account keeps its
/// own), never stored.
pub fn cleaned(mut person: Person) -> Person {
    if person.display_name.trim().is_empty() || person.display_name.chars().count() > MAX_TEXT {
        person.display_name = person.username.clone();
    }
    person.email = person.email.filter(|e| check_email(e).is_ok());
    person.unix_user = person.unix_user.filter(|u| check_unix_user(u).is_ok());
    person.groups = person.groups.map(|groups| {
        let mut names: Vec<String> = groups.iter().filter_map(|g| group_name(g)).collect();
        names.sort();
        names.dedup();
        names
    });
    person
}

/// What a sign-in does to the accounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// A new account, enabled or waiting for approval.
    Create { role: Role, pending: bool },
    /// A local account becomes this directory account, then is brought up to date.
    Adopt { id: i64, patch: UserPatch },
    /// The account is brought up to date (an empty patch changes nothing).
    Update { id: i64, patch: UserPatch },
}

/// Decides a sign-in: `linked` is the account the directory's id already belongs to,
/// `same_name` the account (of any source) with the person's username; `lanes_groups` the
/// groups Lanes has. A disabled or pending account is refused (the directory does not enable
/// an account an admin disabled).
pub fn plan(
    person: &Person,
    linked: Option<&User>,
    same_name: Option<&User>,
    approve_new: bool,
    rules: &Rules,
) -> Result<Plan, Refusal> {
    if let Some(user) = linked {
        if user.pending {
            return Err(Refusal::Pending);
        }
        if !user.enabled {
            return Err(Refusal::Disabled);
        }
        return Ok(Plan::Update {
            id: user.id,
            patch: patch_for(person, Some(user), rules),
        });
    }
    match same_name {
        Some(user)
            if rules.adopt_local_accounts
                && user.source == AccountSource::Local
                && !user.is_admin() =>
        {
            if !user.enabled {
                return Err(Refusal::Disabled);
            }
            Ok(Plan::Adopt {
                id: user.id,
                patch: patch_for(person, Some(user), rules),
            })
        }
        Some(_) => Err(Refusal::UsernameTaken(person.username.clone())),
        None => Ok(Plan::Create {
            role: role_of(person, rules).unwrap_or(Role::User),
            pending: approve_new,
        }),
    }
}

/// The role the directory gives, when an admin group is configured and the person's groups
/// are known.
fn role_of(person: &Person, rules: &Rules) -> Option<Role> {
    let admins = group_name(rules.admin_group.as_deref()?)?;
    let groups = person.groups.as_ref()?;
    Some(if groups.contains(&admins) {
        Role::Admin
    } else {
        Role::User
    })
}

/// The changes that bring `user` up to what the directory says (only what differs).
pub fn patch_for(person: &Person, user: Option<&User>, rules: &Rules) -> UserPatch {
    let differs = |now: Option<&str>, wanted: &str| now != Some(wanted);
    let mut patch = UserPatch::default();
    if differs(user.map(|u| u.display_name.as_str()), &person.display_name) {
        patch.display_name = Some(person.display_name.clone());
    }
    if let Some(email) = &person.email {
        if differs(user.and_then(|u| u.email.as_deref()), email) {
            patch.email = Some(email.clone());
        }
    }
    if let Some(unix) = &person.unix_user {
        if differs(user.and_then(|u| u.unix_user.as_deref()), unix) {
            patch.unix_user = Some(unix.clone());
        }
    }
    if let Some(role) = role_of(person, rules) {
        if user.map(|u| u.role) != Some(role) {
            patch.role = Some(role);
        }
    }
    patch
}

/// The Lanes groups a directory account belongs in: its directory groups that Lanes has (or
/// all of them when groups are made as they are seen).
pub fn lanes_groups(person: &Person, existing: &[String], rules: &Rules) -> Option<Vec<String>> {
    let groups = person.groups.as_ref()?;
    Some(
        groups
            .iter()
            .filter(|g| rules.create_groups || existing.contains(g))
            .cloned()
            .collect(),
    )
}

/// Whether a patch changes anything.
pub fn is_empty(patch: &UserPatch) -> bool {
    patch == &UserPatch::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(groups: Option<&[&str]>) -> Person {
        cleaned(Person {
            source: AccountSource::Oidc,
            external_id: "https://idp#42".into(),
            username: "alice".into(),
            display_name: "Alice Liddell".into(),
            email: Some("alice@lab.example".into()),
            unix_user: Some("alice".into()),
            groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
        })
    }

    fn user(id: i64, source: AccountSource, role: Role) -> User {
        User {
            id,
            username: "alice".into(),
            display_name: "Alice Liddell".into(),
            email: Some("alice@lab.example".into()),
            unix_user: Some("alice".into()),
            role,
            enabled: true,
            source,
            pending: false,
        }
    }

    #[test]
    fn group_names_come_from_dns_paths_and_plain_names() {
        assert_eq!(
            group_name("cn=GPU-Lab,ou=groups,dc=lab,dc=example").as_deref(),
            Some("gpu-lab")
        );
        assert_eq!(
            group_name("CN=Vision,OU=Groups,DC=corp").as_deref(),
            Some("vision")
        );
        assert_eq!(group_name("/lab/nlp").as_deref(), Some("nlp"));
        assert_eq!(group_name("robotics").as_deref(), Some("robotics"));
        assert_eq!(group_name("has space"), None);
        assert_eq!(group_name(""), None);
    }

    #[test]
    fn usernames_are_lowercased_and_email_like_names_keep_their_local_part() {
        assert_eq!(username("Alice").unwrap(), "alice");
        assert_eq!(username("alice.l@uni.example").unwrap(), "alice.l");
        assert!(matches!(username("*)(uid=*"), Err(Refusal::Username(_))));
        assert!(matches!(username("1bob"), Err(Refusal::Username(_))));
    }

    #[test]
    fn unusable_values_from_the_directory_are_dropped_not_stored() {
        let p = cleaned(Person {
            email: Some("not an address".into()),
            unix_user: Some("root".into()),
            display_name: " ".into(),
            ..person(None)
        });
        assert_eq!(p.email, None);
        assert_eq!(p.unix_user, None);
        assert_eq!(p.display_name, "alice");
    }

    #[test]
    fn a_first_sign_in_makes_an_account_waiting_or_not_with_the_directory_role() {
        let rules = Rules {
            admin_group: Some("lanes-admins".into()),
            ..Rules::default()
        };
        let admin = person(Some(&["cn=lanes-admins,ou=groups,dc=x"]));
        assert_eq!(
            plan(&admin, None, None, true, &rules),
            Ok(Plan::Create {
                role: Role::Admin,
                pending: true
            })
        );
        assert_eq!(
            plan(&person(Some(&["gpu"])), None, None, false, &rules),
            Ok(Plan::Create {
                role: Role::User,
                pending: false
            })
        );
        // No groups said: a member, never an admin by default.
        assert_eq!(
            plan(&person(None), None, None, false, &rules),
            Ok(Plan::Create {
                role: Role::User,
                pending: false
            })
        );
    }

    #[test]
    fn another_account_of_the_same_name_is_never_taken_unless_the_admin_allows_it() {
        let local = user(7, AccountSource::Local, Role::User);
        let p = person(None);
        assert_eq!(
            plan(&p, None, Some(&local), false, &Rules::default()),
            Err(Refusal::UsernameTaken("alice".into()))
        );
        let adopt = Rules {
            adopt_local_accounts: true,
            ..Rules::default()
        };
        assert!(matches!(
            plan(&p, None, Some(&local), false, &adopt),
            Ok(Plan::Adopt { id: 7, .. })
        ));
        // The break-glass admin is never taken over, nor another directory's account.
        let admin = user(1, AccountSource::Local, Role::Admin);
        assert!(plan(&p, None, Some(&admin), false, &adopt).is_err());
        let ldap = user(8, AccountSource::Ldap, Role::User);
        assert!(plan(&p, None, Some(&ldap), false, &adopt).is_err());
    }

    #[test]
    fn a_linked_account_is_updated_with_what_changed_and_refused_while_disabled_or_pending() {
        let rules = Rules {
            admin_group: Some("lanes-admins".into()),
            ..Rules::default()
        };
        let mut linked = user(3, AccountSource::Oidc, Role::Admin);
        let p = Person {
            display_name: "Alice L.".into(),
            ..person(Some(&["gpu"]))
        };
        let Ok(Plan::Update { id: 3, patch }) = plan(&p, Some(&linked), None, false, &rules) else {
            panic!("an update")
        };
        assert_eq!(patch.display_name.as_deref(), Some("Alice L."));
        assert_eq!(patch.role, Some(Role::User), "left the admin group");
        assert_eq!(patch.email, None, "unchanged");
        linked.enabled = false;
        assert_eq!(
            plan(&p, Some(&linked), None, false, &rules),
            Err(Refusal::Disabled)
        );
        linked.pending = true;
        assert_eq!(
            plan(&p, Some(&linked), None, false, &rules),
            Err(Refusal::Pending)
        );
    }

    #[test]
    fn directory_groups_fill_only_lanes_groups_unless_groups_are_made_as_seen() {
        let p = person(Some(&["cn=gpu,ou=g,dc=x", "/staff", "gpu"]));
        let existing = vec!["gpu".to_string()];
        assert_eq!(
            lanes_groups(&p, &existing, &Rules::default()),
            Some(vec!["gpu".into()])
        );
        let create = Rules {
            create_groups: true,
            ..Rules::default()
        };
        assert_eq!(
            lanes_groups(&p, &existing, &create),
            Some(vec!["gpu".into(), "staff".into()])
        );
        assert_eq!(lanes_groups(&person(None), &existing, &create), None);
    }
}
