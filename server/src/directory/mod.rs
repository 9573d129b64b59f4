//! The lab's directory: signing in through its OpenID Connect provider or its LDAP server, and
//! what the directory says a person is (names, Unix account, groups, whether an admin). The
//! protocols are the well-kept crates' (`openidconnect`, `ldap3`); what is decided on their
//! answers is plain Rust in [`person`], and what is stored is the use cases' (`usecases::directory`).

pub mod config;
pub mod ldap;
pub mod oidc;
pub mod person;

pub use config::DirectoryArgs;
pub use person::Person;

use lanes_types::account::{OidcMethod, SignInMethods};
use std::sync::Arc;

/// The directories this portal signs people in through (either, both, or none).
pub struct Directory {
    pub oidc: Option<oidc::Provider>,
    pub ldap: Option<ldap::Ldap>,
    pub rules: person::Rules,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No secrets: only which directories there are.
        f.debug_struct("Directory")
            .field("oidc", &self.oidc.as_ref().map(|p| p.name().to_string()))
            .field("ldap", &self.ldap.is_some())
            .finish()
    }
}

impl Directory {
    /// Builds the directories the settings name; `None` when there are none. Reads the secret
    /// files and environment variables; contacts nothing (the OIDC provider is discovered at
    /// the first sign-in, so the portal starts while it is down).
    pub fn from_args(args: &DirectoryArgs) -> Result<Option<Arc<Directory>>, config::ConfigError> {
        let oidc = args.oidc()?.map(oidc::Provider::new).transpose()?;
        let ldap = args.ldap()?.map(ldap::Ldap::new);
        if oidc.is_none() && ldap.is_none() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Directory {
            oidc,
            ldap,
            rules: args.rules(),
        })))
    }

    /// How people sign in, as the login page and `lanes login` show it.
    pub async fn methods(&self) -> SignInMethods {
        let oidc = match &self.oidc {
            Some(provider) => Some(OidcMethod {
                name: provider.name().to_string(),
                start: "/auth/oidc/start".into(),
                device: provider.offers_device_grant().await,
            }),
            None => None,
        };
        SignInMethods {
            password: true,
            ldap: self.ldap.is_some(),
            oidc,
        }
    }
}

/// The methods of a portal with no directory: its own passwords only.
pub fn local_methods() -> SignInMethods {
    SignInMethods {
        password: true,
        ldap: false,
        oidc: None,
    }
}
