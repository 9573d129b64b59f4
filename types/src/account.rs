//! Wire types of accounts and access, shared by the REST API (which serializes them) and the
//! browser pages (which read and send them), so the two cannot drift apart.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Where the account signs in: its own password here, or the lab's directory (whose
    /// sign-ins also keep its names, Unix account, groups and role up to date).
    #[serde(default)]
    pub source: AccountSource,
    /// A directory account made at its first sign-in that waits for an admin to enable it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// Where an account signs in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountSource {
    /// A password kept by Lanes (the first admin, break-glass accounts, labs without a directory).
    #[default]
    Local,
    /// The lab's OpenID Connect provider.
    Oidc,
    /// The lab's LDAP directory (or Active Directory).
    Ldap,
}

impl AccountSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountSource::Local => "local",
            AccountSource::Oidc => "oidc",
            AccountSource::Ldap => "ldap",
        }
    }
}

impl FromStr for AccountSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(AccountSource::Local),
            "oidc" => Ok(AccountSource::Oidc),
            "ldap" => Ok(AccountSource::Ldap),
            other => Err(format!("unknown account source {other:?}")),
        }
    }
}

/// How people sign in to this portal: `GET /api/v1/auth/methods`, public, read by the login
/// page and `lanes login` before anyone types anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignInMethods {
    /// The username and password form: local accounts, and LDAP accounts when a directory is
    /// configured (their password is checked by the directory, never kept here).
    pub password: bool,
    /// Passwords are checked by the lab's LDAP directory.
    #[serde(default)]
    pub ldap: bool,
    /// The lab's OpenID Connect provider, when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcMethod>,
}

/// The OpenID Connect provider as the login page and the terminal client show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OidcMethod {
    /// Shown as "Sign in with NAME".
    pub name: String,
    /// Where the browser starts signing in (`/auth/oidc/start`).
    pub start: String,
    /// The provider offers the device authorization grant, so `lanes login` shows a code to
    /// confirm in a browser; otherwise it asks for a one-time code from the account page.
    pub device: bool,
}

/// Answer of `POST /api/v1/auth/device`: what the member confirms in a browser.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSignIn {
    /// The handle `lanes login` polls with (a secret: it becomes a token).
    pub handle: String,
    /// The code to type at the provider's page.
    pub user_code: String,
    pub verification_uri: String,
    /// The page with the code already filled in, when the provider gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_uri_complete: Option<String>,
    /// Seconds until the code expires.
    pub expires_in: u64,
}

/// Body of `POST /api/v1/auth/device/token`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevicePoll {
    pub handle: String,
    /// The name of the API token made when the member has confirmed.
    pub token_name: String,
}

/// Answer of `POST /api/v1/auth/device/token`: still waiting, or the new token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum DeviceOutcome {
    /// The member has not confirmed yet: ask again.
    Pending,
    /// Confirmed: the member's account and a new API token for the terminal.
    Done { user: User, token: CreatedToken },
}

/// What a directory sync did (`POST /api/v1/directory/sync`, and the periodic sync's log).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectorySyncReport {
    /// Accounts looked up in the directory.
    pub checked: u32,
    /// Usernames disabled because the directory no longer has them (or has them disabled).
    pub disabled: Vec<String>,
    /// Usernames whose names, Unix account, groups or role changed.
    pub updated: Vec<String>,
}

/// A one-time code for the terminal (`POST /api/v1/me/terminal-code`), shown on the account
/// page for `lanes login` to exchange once for a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalCode {
    pub code: String,
    pub expires_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/auth/terminal-code`: a code from the account page for a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedeemTerminalCode {
    pub code: String,
    pub token_name: String,
}

/// Answer of redeeming a terminal code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSignIn {
    pub user: User,
    pub token: CreatedToken,
}

impl User {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// An account as admins see it, with its groups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    #[serde(flatten)]
    pub user: User,
    pub groups: Vec<String>,
    /// Whether the portal's own host has the account's Unix account: `false` warns that jobs
    /// cannot start there until it exists. Absent where the portal runs no jobs (its nodes may
    /// have accounts it lacks) or the account has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_account_found: Option<bool>,
}

/// Body of `POST /api/v1/users`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    pub username: String,
    pub display_name: Option<String>,
    pub email: Option<String>,
    pub unix_user: Option<String>,
    #[serde(default = "default_role")]
    pub role: Role,
    pub password: String,
}

fn default_role() -> Role {
    Role::User
}

/// Body of `PATCH /api/v1/users/{id}`: absent fields stay as they are. For `email` and
/// `unix_user`, an empty string clears the value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix_user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// A new password (a reset): ends the user's sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The complete set of groups, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// With a new password: keep the user's API tokens (by default a reset revokes them, as
    /// it ends their sessions). Disabling a user always revokes them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_tokens: bool,
}

impl UserPatch {
    /// Whether the change must end the user's sessions (disabled, or a new password).
    pub fn ends_sessions(&self) -> bool {
        self.enabled == Some(false) || self.password.is_some()
    }

    /// Whether the change must revoke the user's API tokens: disabled, or a new password
    /// unless kept on purpose.
    pub fn revokes_tokens(&self) -> bool {
        self.enabled == Some(false) || (self.password.is_some() && !self.keep_tokens)
    }
}

/// A group and its members' usernames.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub members: Vec<String>,
}

/// Body of `POST /api/v1/groups`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateGroup {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

/// An API token as its owner sees it in a list (never the token itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    pub id: i64,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Body of `POST /api/v1/tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    pub name: String,
}

/// The answer to a token create: the only time the secret is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: ApiToken,
    pub secret: String,
}

/// Body of `POST /api/v1/auth/login`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
}

/// Body of `POST /api/v1/me/password`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub current_password: String,
    pub new_password: String,
    /// Keep one's API tokens (by default a new password revokes them: a leaked password may
    /// have been used to make one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_tokens: bool,
}

/// Body of `PUT /api/v1/me/language`: the interface's language for this account (`en` or
/// `zh`), which pages, API messages and the messages Lanes sends then use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageChoice {
    pub language: String,
}

/// One line of the audit log, as admins read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Username of who acted; `None` for the operator's command line or an anonymous caller.
    pub actor: Option<String>,
    /// What happened, as a dotted code: `user.create`, `auth.login`, `auth.login_failed`...
    pub action: String,
    pub target: String,
    pub detail: String,
    pub remote_addr: Option<String>,
}

/// Portal-wide settings admins change at run time (`GET|PUT /api/v1/settings`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortalSettings {
    /// Anyone may watch the dashboard without logging in; process owners and commands stay
    /// hidden from them.
    pub anonymous_dashboard: bool,
    /// How far ahead any booking may end, in days, whatever the quotas say (1 to 3,650).
    #[serde(default = "default_booking_horizon_days")]
    pub booking_horizon_days: u32,
    /// What jobs' environments start from when their request does not say: the user's login
    /// environment (their profile's PATH, venv, conda) or a clean one.
    #[serde(default)]
    pub job_environment: crate::job::DefaultEnvironment,
    /// What a kWh costs, for reports (in the lab's currency); `None`: reports show no cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_price_per_kwh: Option<f64>,
    /// The grid's carbon intensity, grams of CO2 equivalent per kWh, for reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carbon_g_per_kwh: Option<f64>,
    /// New bookings allow lending their idle cards to preemptible queue jobs unless their
    /// holder says otherwise.
    #[serde(default)]
    pub lend_idle_by_default: bool,
    /// What a person's first sign-in through the lab's directory does: make their account at
    /// once, or make it waiting for an admin to enable it (the default).
    #[serde(default)]
    pub new_directory_accounts: NewDirectoryAccounts,
    /// Members (not admins) must sign in through the directory: local passwords of members
    /// are refused, while admins keep theirs for when the directory is down.
    #[serde(default)]
    pub members_use_directory: bool,
    /// Admins may open members' notebooks (`/sessions/ID/`); off by default: a notebook runs
    /// its owner's code as them.
    #[serde(default)]
    pub admins_open_sessions: bool,
    /// Projects bookings may carry, for the monthly statements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<crate::statement::Project>,
    /// Each group's default project: what a member's booking carries when it names none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub group_projects: std::collections::BTreeMap<String, String>,
    /// What a booked GPU-hour costs, for statements (in the lab's currency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    /// What members see of others' usage (their own only, unless admins choose more).
    #[serde(default)]
    pub usage_visibility: crate::statement::UsageVisibility,
}

/// What a first sign-in through the directory does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NewDirectoryAccounts {
    /// The account is made and may be used at once.
    Create,
    /// The account is made disabled and waits for an admin's approval.
    #[default]
    Approve,
}

/// The booking horizon when an admin set none: a year.
pub fn default_booking_horizon_days() -> u32 {
    365
}

/// Most days the booking horizon may be set to.
pub const MAX_BOOKING_HORIZON_DAYS: u32 = 3650;

impl Default for PortalSettings {
    fn default() -> Self {
        Self {
            anonymous_dashboard: false,
            booking_horizon_days: default_booking_horizon_days(),
            job_environment: Default::default(),
            energy_price_per_kwh: None,
            carbon_g_per_kwh: None,
            lend_idle_by_default: false,
            new_directory_accounts: NewDirectoryAccounts::default(),
            members_use_directory: false,
            admins_open_sessions: false,
            projects: Vec::new(),
            group_projects: Default::default(),
            gpu_hour_price: None,
            usage_visibility: Default::default(),
        }
    }
}

impl PortalSettings {
    /// The rates statements are priced at.
    pub fn rates(&self) -> crate::statement::Rates {
        crate::statement::Rates {
            gpu_hour_price: self.gpu_hour_price,
            energy_price_per_kwh: self.energy_price_per_kwh,
            carbon_g_per_kwh: self.carbon_g_per_kwh,
        }
    }

    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_BOOKING_HORIZON_DAYS).contains(&self.booking_horizon_days) {
            return Err(format!(
                "booking_horizon_days must be from 1 to {MAX_BOOKING_HORIZON_DAYS}"
            ));
        }
        let within = |value: Option<f64>, max: f64| {
            value.is_none_or(|v| v.is_finite() && (0.0..=max).contains(&v))
        };
        if !within(self.energy_price_per_kwh, 1000.0) {
            return Err("energy_price_per_kwh must be from 0 to 1000".into());
        }
        if !within(self.carbon_g_per_kwh, 5000.0) {
            return Err("carbon_g_per_kwh must be from 0 to 5000 (g CO2e per kWh)".into());
        }
        if !within(self.gpu_hour_price, 100_000.0) {
            return Err("gpu_hour_price must be from 0 to 100000".into());
        }
        if self.projects.len() > 500 {
            return Err("at most 500 projects".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for project in &self.projects {
            if let Some(problem) = crate::statement::Project::name_problem(&project.name) {
                return Err(problem);
            }
            if project.description.chars().count() > 500 {
                return Err(format!(
                    "the description of {:?} is over 500 characters",
                    project.name
                ));
            }
            if !seen.insert(project.name.as_str()) {
                return Err(format!("project {:?} is named twice", project.name));
            }
        }
        for (group, project) in &self.group_projects {
            if !seen.contains(project.as_str()) {
                return Err(format!(
                    "group {group:?}'s default project {project:?} is not one of the projects"
                ));
            }
        }
        Ok(())
    }
}

/// Body of `PUT /api/v1/me/email`: a member's own address. A new one is used once the member
/// opens the link sent to it; `null` or empty removes the address at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailChange {
    pub email: Option<String>,
}

/// Answer of `PUT /api/v1/me/email`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailChangeAnswer {
    /// The address messages go to now.
    pub email: Option<String>,
    /// Where a confirmation link was sent (the address in use changes when it is opened).
    pub confirm_sent_to: Option<String>,
}
