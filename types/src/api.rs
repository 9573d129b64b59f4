//! Every operation of the API, declared once: its method, its path with typed parameters, what
//! it takes (a query or a JSON body) and what it answers. The server routes by these
//! (`Routes::endpoint`), the typed client calls through one generic `call`, the pages fetch
//! through `rest::call` and key their server-gathered data by them, and the OpenAPI check
//! proves that `docs/openapi.json` describes exactly [`ALL`].
//!
//! To add an operation: declare it here, give the server a handler with
//! `Routes::endpoint::<api::Name>(handler)`, describe it in `docs/openapi.json`, and add its
//! row to the authorization matrix (`tests/tests/authorization.rs`).

use crate::account::{
    ApiToken, AuditRecord, CreateGroup, CreateUser, CreatedToken, DeviceOutcome, DevicePoll,
    DeviceSignIn, DirectorySyncReport, EmailChange, EmailChangeAnswer, Group, LanguageChoice,
    LoginRequest, NewToken, PasswordChange, PortalSettings, RedeemTerminalCode, SignInMethods,
    TerminalCode, TerminalSignIn, User, UserPatch, UserView,
};
use crate::booking::{
    Booking, CreateBooking, CreateMaintenance, ExtendBooking, FreeSlot, GpuRef, MaintenanceBlock,
    QuotaUse, Quotas,
};
use crate::enforcement::{Policy, Violation};
use crate::health::{
    CardHealth, ClearHealth, HealthChange, HealthChangesQuery, InjectFault, MoveCard,
};
use crate::history::HistoryAnswer;
use crate::job::{CreateJob, Job};
use crate::notify::{
    ChannelAnswer, ChannelTest, NotifyPrefs, NotifyPrefsView, NotifySettings, OutboxEntry,
    TestSend, TestSent,
};
use crate::query::{
    AuditQuery, BookingQuery, HistoryQuery, InjectProcess, Injected, JobQuery, LogQuery,
    OutboxQuery, ReportQuery, SlotQuery, TelemetryQuery, ViolationQuery,
};
use crate::queue::{
    ForecastRequest, QueueForecast, QueueSettings, QueueView, QueuedJob, Shares, SubmitJob,
};
use crate::report::{BookingEnergyNow, UsageReport};
pub use crate::rule::Rule;
use crate::statement::{MyUsage, ProjectChoices, Statement, StatementQuery};
use crate::{GpuState, HealthReport, NodeState};
use serde::{Deserialize, Serialize};

/// The body of every error answer: a stable `error` code, the `rule` a refusal broke (422),
/// what held the cards (409), and a message for people in the caller's language.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "error")]
    pub code: String,
    /// 422: the rule the request broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    pub message: String,
    /// 409: the cards already held for part of the slot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuRef>,
    /// 409: the bookings that hold them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bookings: Vec<i64>,
    /// 409: the maintenance blocks that hold them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenance: Vec<i64>,
}

impl ErrorBody {
    /// An error with `code` and `message` and nothing else.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            ..Self::default()
        }
    }
}

/// The HTTP methods of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// How an operation's request travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Nothing but the path.
    Nothing,
    /// As the query string.
    Query,
    /// As a JSON body.
    Json,
}

/// What an operation answers on success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// A JSON body.
    Json,
    /// No body (204).
    Empty,
    /// Text (Prometheus, CSV, a log).
    Text,
    /// A websocket.
    Upgrade,
}

/// The parameters of a path: `()` for none, `i64` for one id.
pub trait PathParams {
    /// How many `{name}` placeholders the path has.
    const COUNT: usize;
    /// `template` with its placeholders filled in.
    fn fill(&self, template: &str) -> String;
}

impl PathParams for () {
    const COUNT: usize = 0;
    fn fill(&self, template: &str) -> String {
        template.to_owned()
    }
}

impl PathParams for i64 {
    const COUNT: usize = 1;
    fn fill(&self, template: &str) -> String {
        match (template.find('{'), template.find('}')) {
            (Some(open), Some(close)) if open < close => {
                format!("{}{self}{}", &template[..open], &template[close + 1..])
            }
            _ => template.to_owned(),
        }
    }
}

/// One operation of the API.
pub trait Endpoint {
    const METHOD: Method;
    /// As the router writes it, `{id}` for a parameter.
    const PATH: &'static str;
    const SENT: Sent;
    const ANSWERED: Answered;
    type Params: PathParams;
    /// The query or the JSON body (`()` when nothing is sent).
    type Request: Serialize;
    /// The JSON answer (`()` for none, `String` for text).
    type Answer;

    /// The path with `params` in it.
    fn path(params: &Self::Params) -> String {
        params.fill(Self::PATH)
    }

    /// The path with `params`, and `request` as the query string where the request is one.
    fn url(params: &Self::Params, request: &Self::Request) -> String {
        let path = Self::path(params);
        if Self::SENT != Sent::Query {
            return path;
        }
        match serde_urlencoded::to_string(request) {
            Ok(query) if !query.is_empty() => format!("{path}?{query}"),
            _ => path,
        }
    }
}

macro_rules! sent {
    (nothing) => {
        Sent::Nothing
    };
    (query) => {
        Sent::Query
    };
    (json) => {
        Sent::Json
    };
}

macro_rules! answered {
    (json) => {
        Answered::Json
    };
    (empty) => {
        Answered::Empty
    };
    (text) => {
        Answered::Text
    };
    (upgrade) => {
        Answered::Upgrade
    };
}

/// An operation as [`ALL`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    pub method: Method,
    pub path: &'static str,
    pub params: usize,
    pub name: &'static str,
}

macro_rules! endpoints {
    ($(
        $(#[$doc:meta])*
        $name:ident: $method:ident $path:literal ($params:ty) $sent:ident $request:ty => $answered:ident $answer:ty;
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug)]
            pub struct $name;
            impl Endpoint for $name {
                const METHOD: Method = Method::$method;
                const PATH: &'static str = $path;
                const SENT: Sent = sent!($sent);
                const ANSWERED: Answered = answered!($answered);
                type Params = $params;
                type Request = $request;
                type Answer = $answer;
            }
        )*
        /// Every operation, in the order declared.
        pub const ALL: &[Listed] = &[$(Listed {
            method: Method::$method,
            path: $path,
            params: <$params as PathParams>::COUNT,
            name: stringify!($name),
        }),*];
    };
}

endpoints! {
    // ---- service ----
    /// The server's health (public).
    Health: Get "/healthz" (()) nothing () => json HealthReport;
    /// Prometheus metrics (a bearer token when the server requires one).
    Metrics: Get "/metrics" (()) nothing () => text String;
    /// This description, as OpenAPI 3.
    OpenApi: Get "/api/v1/openapi.json" (()) nothing () => json serde_json::Value;
    Gpus: Get "/api/v1/gpus" (()) nothing () => json Vec<GpuState>;
    Nodes: Get "/api/v1/nodes" (()) nothing () => json Vec<NodeState>;
    /// The fleet snapshot, then its ticks; or, with `?only=changes` and a login, only which
    /// lists changed, as they change (pages follow them instead of asking on a timer).
    TelemetryWs: Get "/api/v1/telemetry/ws" (()) query TelemetryQuery => upgrade ();

    // ---- accounts and sessions ----
    Login: Post "/api/v1/auth/login" (()) json LoginRequest => json User;
    Logout: Post "/api/v1/auth/logout" (()) nothing () => empty ();
    Me: Get "/api/v1/me" (()) nothing () => json User;
    /// How people sign in here (public): the password form, the lab's LDAP, its OIDC provider.
    AuthMethods: Get "/api/v1/auth/methods" (()) nothing () => json SignInMethods;
    /// The terminal's sign-in through the OIDC provider's device authorization grant (public).
    StartDeviceSignIn: Post "/api/v1/auth/device" (()) nothing () => json DeviceSignIn;
    /// Whether the member confirmed the device code; when so, a new API token (public; the
    /// handle is the secret).
    PollDeviceSignIn: Post "/api/v1/auth/device/token" (()) json DevicePoll => json DeviceOutcome;
    /// A one-time code from the account page for an API token (public; the code is the secret).
    SignInWithTerminalCode: Post "/api/v1/auth/terminal-code" (()) json RedeemTerminalCode => json TerminalSignIn;
    /// A one-time code for `lanes login`, valid a few minutes.
    NewTerminalCode: Post "/api/v1/me/terminal-code" (()) nothing () => json TerminalCode;
    ChangePassword: Post "/api/v1/me/password" (()) json PasswordChange => empty ();
    SetLanguage: Put "/api/v1/me/language" (()) json LanguageChoice => empty ();
    /// A member's own e-mail address: a new one is confirmed by a link sent to it; empty removes it.
    ChangeEmail: Put "/api/v1/me/email" (()) json EmailChange => json EmailChangeAnswer;
    Tokens: Get "/api/v1/tokens" (()) nothing () => json Vec<ApiToken>;
    /// The secret is in the answer, once.
    CreateToken: Post "/api/v1/tokens" (()) json NewToken => json CreatedToken;
    RevokeToken: Delete "/api/v1/tokens/{id}" (i64) nothing () => empty ();
    Users: Get "/api/v1/users" (()) nothing () => json Vec<UserView>;
    AddUser: Post "/api/v1/users" (()) json CreateUser => json UserView;
    UpdateUser: Patch "/api/v1/users/{id}" (i64) json UserPatch => json UserView;
    /// Checks every directory account against the LDAP directory now (admins).
    SyncDirectory: Post "/api/v1/directory/sync" (()) nothing () => json DirectorySyncReport;
    Groups: Get "/api/v1/groups" (()) nothing () => json Vec<Group>;
    AddGroup: Post "/api/v1/groups" (()) json CreateGroup => json Group;
    Audit: Get "/api/v1/audit" (()) query AuditQuery => json Vec<AuditRecord>;
    Settings: Get "/api/v1/settings" (()) nothing () => json PortalSettings;
    SaveSettings: Put "/api/v1/settings" (()) json PortalSettings => json PortalSettings;

    // ---- bookings, quotas, maintenance ----
    Book: Post "/api/v1/bookings" (()) json CreateBooking => json Booking;
    Bookings: Get "/api/v1/bookings" (()) query BookingQuery => json Vec<Booking>;
    BookingById: Get "/api/v1/bookings/{id}" (i64) nothing () => json Booking;
    /// A later end.
    ExtendBookingById: Patch "/api/v1/bookings/{id}" (i64) json ExtendBooking => json Booking;
    /// Cancels an upcoming booking, releases an active one.
    WithdrawBooking: Delete "/api/v1/bookings/{id}" (i64) nothing () => json Booking;
    /// Takes back the cards the booking lends now.
    ReclaimBooking: Post "/api/v1/bookings/{id}/reclaim" (i64) nothing () => json Booking;
    /// The earliest windows where the cards asked for are free.
    Slots: Get "/api/v1/slots" (()) query SlotQuery => json Vec<FreeSlot>;
    MyQuota: Get "/api/v1/me/quota" (()) nothing () => json QuotaUse;
    QuotasNow: Get "/api/v1/quotas" (()) nothing () => json Quotas;
    SaveQuotas: Put "/api/v1/quotas" (()) json Quotas => json Quotas;
    QuotaUses: Get "/api/v1/quotas/use" (()) nothing () => json Vec<QuotaUse>;
    Maintenance: Get "/api/v1/maintenance" (()) nothing () => json Vec<MaintenanceBlock>;
    AddMaintenance: Post "/api/v1/maintenance" (()) json CreateMaintenance => json MaintenanceBlock;
    EndMaintenance: Delete "/api/v1/maintenance/{id}" (i64) nothing () => empty ();
    /// Moves one card of a booking to a free card of the same node (its owner or an admin).
    MoveBookingCard: Post "/api/v1/bookings/{id}/move" (i64) json MoveCard => json Booking;
    /// What each active booking's cards drew so far.
    BookingEnergy: Get "/api/v1/bookings/energy" (()) nothing () => json Vec<BookingEnergyNow>;

    // ---- jobs ----
    /// A job on a booking's cards.
    SubmitToBooking: Post "/api/v1/jobs" (()) json CreateJob => json Job;
    Jobs: Get "/api/v1/jobs" (()) query JobQuery => json Vec<Job>;
    JobById: Get "/api/v1/jobs/{id}" (i64) nothing () => json Job;
    CancelJob: Delete "/api/v1/jobs/{id}" (i64) nothing () => json Job;
    /// 206 with a byte range (`Range: bytes=100-`).
    JobLog: Get "/api/v1/jobs/{id}/log" (i64) query LogQuery => text String;
    /// The log as it is written, until the job is over.
    JobLogWs: Get "/api/v1/jobs/{id}/log/ws" (i64) query LogQuery => upgrade ();

    // ---- enforcement ----
    PolicyNow: Get "/api/v1/policy" (()) nothing () => json Policy;
    SavePolicy: Put "/api/v1/policy" (()) json Policy => json Policy;
    /// A test message to the lab's channel now (the form's values, or the saved ones), and
    /// what the service answered.
    TestLabChannel: Post "/api/v1/policy/channel-test" (()) json ChannelTest => json ChannelAnswer;
    Violations: Get "/api/v1/violations" (()) query ViolationQuery => json Vec<Violation>;
    /// A process on a simulated card (simulated fleets only).
    InjectSimProcess: Post "/api/v1/sim/processes" (()) json InjectProcess => json Injected;

    // ---- card health ----
    /// Every card's health: its level and why, its error counters, its drain.
    HealthOfCards: Get "/api/v1/health" (()) nothing () => json Vec<CardHealth>;
    /// Changes of the cards' health (one card's with `node` and `uuid`), newest first.
    HealthChanges: Get "/api/v1/health/changes" (()) query HealthChangesQuery => json Vec<HealthChange>;
    /// Puts a card back in service: healthy, its drain ended (admins; audited).
    ClearCardHealth: Post "/api/v1/health/clear" (()) json ClearHealth => empty ();
    /// A fault on a simulated card: an Xid, ECC errors, a pending remap, lost, a reset
    /// (admins; simulated fleets only).
    InjectSimFault: Post "/api/v1/sim/faults" (()) json InjectFault => empty ();

    // ---- history and reports ----
    History: Get "/api/v1/history" (()) query HistoryQuery => json HistoryAnswer;
    Usage: Get "/api/v1/reports/usage" (()) query ReportQuery => json UsageReport;
    UsageCsv: Get "/api/v1/reports/usage.csv" (()) query ReportQuery => text String;
    /// A month's statement per project, group and member (admins).
    Statements: Get "/api/v1/statements" (()) query StatementQuery => json Statement;
    /// One table of a month's statement as CSV: `projects`, `groups`, `users` or `jobs` (admins).
    StatementsCsv: Get "/api/v1/statements.csv" (()) query StatementQuery => text String;
    /// The projects a booking may name, and the caller's default.
    Projects: Get "/api/v1/projects" (()) nothing () => json ProjectChoices;
    /// The caller's month against their quota, and as much of others' as the admins show.
    MyUsageOfMonth: Get "/api/v1/me/usage" (()) query StatementQuery => json MyUsage;

    // ---- queue ----
    Enqueue: Post "/api/v1/queue" (()) json SubmitJob => json QueuedJob;
    Queue: Get "/api/v1/queue" (()) nothing () => json QueueView;
    /// When a job like this would likely start if queued now (p50, p90), and the earliest
    /// slot the caller could book instead.
    ForecastStart: Post "/api/v1/queue/forecast" (()) json ForecastRequest => json QueueForecast;
    Dequeue: Delete "/api/v1/queue/{id}" (i64) nothing () => json QueuedJob;
    QueueSettingsNow: Get "/api/v1/queue/settings" (()) nothing () => json QueueSettings;
    SaveQueueSettings: Put "/api/v1/queue/settings" (()) json QueueSettings => json QueueSettings;
    SharesNow: Get "/api/v1/shares" (()) nothing () => json Shares;
    SaveShares: Put "/api/v1/shares" (()) json Shares => json Shares;

    // ---- notifications ----
    /// What the caller chose, and the lab's rules.
    MyNotifications: Get "/api/v1/me/notifications" (()) nothing () => json NotifyPrefsView;
    SaveMyNotifications: Put "/api/v1/me/notifications" (()) json NotifyPrefs => json NotifyPrefsView;
    /// A test message to the caller's channels.
    TestMyNotifications: Post "/api/v1/me/notifications/test" (()) nothing () => json TestSent;
    /// A test message to the caller's own webhook now (the form's values, or the saved ones),
    /// and what the service answered.
    TestMyChannel: Post "/api/v1/me/notifications/channel-test" (()) json ChannelTest => json ChannelAnswer;
    NotifySettingsNow: Get "/api/v1/notifications/settings" (()) nothing () => json NotifySettings;
    SaveNotifySettings: Put "/api/v1/notifications/settings" (()) json NotifySettings => json NotifySettings;
    /// The newest messages, optionally of one status.
    Outbox: Get "/api/v1/notifications/outbox" (()) query OutboxQuery => json Vec<OutboxEntry>;
    /// A test message to an address or a member.
    NotifyTest: Post "/api/v1/notifications/test" (()) json TestSend => json TestSent;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_declared_once_with_as_many_parameters_as_its_path() {
        let mut seen = std::collections::HashSet::new();
        for op in ALL {
            assert!(
                seen.insert((op.method, op.path)),
                "{} {} declared twice",
                op.method.as_str(),
                op.path
            );
            assert_eq!(
                op.path.matches('{').count(),
                op.params,
                "{}: {} takes {} parameters",
                op.name,
                op.path,
                op.params
            );
        }
    }

    #[test]
    fn paths_and_urls_carry_their_parameters_and_queries() {
        assert_eq!(JobLog::path(&7), "/api/v1/jobs/7/log");
        assert_eq!(Gpus::path(&()), "/api/v1/gpus");
        let query = BookingQuery {
            include_cancelled: true,
            ..BookingQuery::default()
        };
        assert_eq!(
            Bookings::url(&(), &query),
            "/api/v1/bookings?include_cancelled=true"
        );
        assert_eq!(
            Bookings::url(&(), &BookingQuery::default()),
            "/api/v1/bookings"
        );
        // A JSON body never becomes a query.
        assert_eq!(
            UpdateUser::url(&3, &UserPatch::default()),
            "/api/v1/users/3"
        );
    }
}
