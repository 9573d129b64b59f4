//! A typed async client for the Lanes API: one method per operation of `docs/openapi.json`,
//! typed bodies and answers from `lanes-types`, and the API's error body (`error` code, `rule`,
//! `message`) as [`ApiError`]. The integration tests, the bench and the terminal client use it;
//! a test checks that every documented operation has a method here.

mod ws;

pub use lanes_types::api::ErrorBody;
pub use reqwest;
pub use ws::{LogEvent, LogTail, Telemetry};

use lanes_types::account::{
    ApiToken, AuditRecord, CreateGroup, CreateUser, CreatedToken, DeviceOutcome, DevicePoll,
    DeviceSignIn, DirectorySyncReport, Group, LanguageChoice, LoginRequest, NewToken,
    PasswordChange, PortalSettings, RedeemTerminalCode, SignInMethods, TerminalCode,
    TerminalSignIn, User, UserPatch, UserView,
};
use lanes_types::api::{self, Answered, Endpoint, Sent};
use lanes_types::booking::{
    Booking, CreateBooking, CreateMaintenance, ExtendBooking, FreeSlot, MaintenanceBlock, QuotaUse,
    Quotas,
};
use lanes_types::enforcement::{Policy, Violation};
use lanes_types::health::{
    CardHealth, ClearHealth, HealthChange, HealthChangesQuery, InjectFault, MoveCard,
};
use lanes_types::history::HistoryAnswer;
use lanes_types::job::{CreateJob, Job};
use lanes_types::query::{
    AuditQuery, BookingQuery, HistoryQuery, InjectProcess, Injected, JobQuery, LogQuery,
    ReportQuery, SlotQuery, ViolationQuery,
};
use lanes_types::queue::{
    ForecastRequest, QueueForecast, QueueSettings, QueueView, QueuedJob, Shares, SubmitJob,
};
use lanes_types::report::UsageReport;
use lanes_types::{GpuState, HealthReport};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status and its error body.
    #[error("{status}: {}", body.message)]
    Api {
        status: StatusCode,
        body: Box<ErrorBody>,
        /// Seconds, from `Retry-After` (429 and 503).
        retry_after: Option<u64>,
    },
    /// The server answered something that is not what the API describes.
    #[error("unexpected answer ({status}): {detail}")]
    Unexpected { status: StatusCode, detail: String },
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach the server: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("websocket: {0}")]
    WebSocket(#[from] Box<tokio_tungstenite::tungstenite::Error>),
}

/// What to say of an answer that is not the API's: never a whole page (a web page may hold
/// the viewer's data, and fills the terminal), but what it is and its first words.
fn not_the_api(text: &str) -> String {
    let start = text
        .trim_start()
        .get(..15)
        .unwrap_or("")
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        return "a web page, not an answer of the Lanes API: is the portal's address right \
                (scheme, host and port, with no path, e.g. http://gpu1:3000)?"
            .into();
    }
    let first: String = text.chars().take(200).collect();
    if first.len() < text.len() {
        format!("{first}…")
    } else {
        first
    }
}

impl ClientError {
    /// The HTTP status of an answer (`None` when there was none).
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } | ClientError::Unexpected { status, .. } => {
                Some(*status)
            }
            ClientError::Transport(e) => e.status(),
            ClientError::WebSocket(_) => None,
        }
    }

    /// The error body of an API error.
    pub fn body(&self) -> Option<&ErrorBody> {
        match self {
            ClientError::Api { body, .. } => Some(body.as_ref()),
            _ => None,
        }
    }

    /// The `error` code of an API error.
    pub fn code(&self) -> Option<&str> {
        self.body().map(|b| b.code.as_str())
    }

    /// The broken `rule` of a refusal.
    pub fn rule(&self) -> Option<lanes_types::rule::Rule> {
        self.body().and_then(|b| b.rule)
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// How the client proves who it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    Anonymous,
    /// A session cookie's `name=value`, as `login` sets it.
    Session(String),
    /// An API token, sent as `Authorization: Bearer`.
    Token(String),
}

/// A client of one Lanes server. Cheap to clone; clones share connections.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    credentials: Credentials,
}

/// A part of a job's log: what was asked and what came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPart {
    /// 206 when a byte range was asked for and sent.
    pub status: StatusCode,
    pub text: String,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`, no trailing slash needed). It
    /// follows no redirect: a password or token goes only to the server it was meant for.
    pub fn new(base: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self::with_http(base, http)
    }

    /// As [`Client::new`], over a `reqwest::Client` the caller configured.
    pub fn with_http(base: impl Into<String>, http: reqwest::Client) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_string(),
            http,
            credentials: Credentials::Anonymous,
        }
    }

    /// The same server, as someone else.
    pub fn as_(&self, credentials: Credentials) -> Self {
        Self {
            credentials,
            ..self.clone()
        }
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.credentials {
            Credentials::Anonymous => request,
            Credentials::Session(cookie) => request.header("cookie", cookie),
            Credentials::Token(token) => request.bearer_auth(token),
        }
    }

    /// Sends, and turns an error status into [`ClientError::Api`].
    async fn send(request: RequestBuilder) -> Result<reqwest::Response> {
        let response = request.send().await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status.is_redirection() {
            // Never followed: credentials would go wherever the answer points.
            let to = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("elsewhere")
                .to_string();
            return Err(ClientError::Unexpected {
                status,
                detail: format!(
                    "the server sends this request to {to}; nothing was sent there (use that \
                     address if it is the portal)"
                ),
            });
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let text = response.text().await?;
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => Err(ClientError::Api {
                status,
                body: Box::new(body),
                retry_after,
            }),
            Err(_) => Err(ClientError::Unexpected {
                status,
                detail: not_the_api(&text),
            }),
        }
    }

    async fn text(request: RequestBuilder) -> Result<String> {
        Ok(Self::send(request).await?.text().await?)
    }

    /// The request of operation `E` (declared in `lanes_types::api`) with `params` in its path
    /// and `request` as its query or body, not yet sent.
    fn prepare<E: Endpoint>(&self, params: &E::Params, request: &E::Request) -> RequestBuilder {
        let method = match E::METHOD {
            api::Method::Get => Method::GET,
            api::Method::Post => Method::POST,
            api::Method::Put => Method::PUT,
            api::Method::Patch => Method::PATCH,
            api::Method::Delete => Method::DELETE,
        };
        let builder = self.request(method, &E::path(params));
        match E::SENT {
            Sent::Nothing => builder,
            Sent::Query => builder.query(request),
            Sent::Json => builder.json(request),
        }
    }

    /// Calls operation `E` and reads its answer: the one way every method below reaches the
    /// server.
    pub async fn call<E>(&self, params: E::Params, request: &E::Request) -> Result<E::Answer>
    where
        E: Endpoint,
        E::Answer: DeserializeOwned,
    {
        let response = Self::send(self.prepare::<E>(&params, request)).await?;
        let status = response.status();
        let answer = match E::ANSWERED {
            Answered::Json => {
                let text = response.text().await?;
                serde_json::from_str(&text).map_err(|e| format!("{e}: {}", not_the_api(&text)))
            }
            Answered::Empty => {
                serde_json::from_value(serde_json::Value::Null).map_err(|e| e.to_string())
            }
            Answered::Text => {
                serde_json::from_value(serde_json::Value::String(response.text().await?))
                    .map_err(|e| e.to_string())
            }
            Answered::Upgrade => Err("a websocket, not an answer".to_string()),
        };
        answer.map_err(|detail| ClientError::Unexpected { status, detail })
    }

    // ---- service ----

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<HealthReport> {
        self.call::<api::Health>((), &()).await
    }

    /// `GET /metrics`: Prometheus text; `token` when the server requires one.
    pub async fn metrics(&self, token: Option<&str>) -> Result<String> {
        let request = self.prepare::<api::Metrics>(&(), &());
        Self::text(match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
        .await
    }

    /// `GET /api/v1/openapi.json`.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        self.call::<api::OpenApi>((), &()).await
    }

    /// `GET /api/v1/gpus`.
    pub async fn gpus(&self) -> Result<Vec<GpuState>> {
        self.call::<api::Gpus>((), &()).await
    }

    /// `GET /api/v1/nodes`: every node of the pool.
    pub async fn nodes(&self) -> Result<Vec<lanes_types::NodeState>> {
        self.call::<api::Nodes>((), &()).await
    }

    // ---- accounts and sessions ----

    /// `POST /api/v1/auth/login`: on success, a client carrying the new session.
    pub async fn login(&self, username: &str, password: &str) -> Result<(Client, User)> {
        let request = self.prepare::<api::Login>(
            &(),
            &LoginRequest {
                username: username.into(),
                password: password.into(),
            },
        );
        let response = Self::send(request).await?;
        let status = response.status();
        let cookie = response
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("lanes_session="))
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
            .ok_or_else(|| ClientError::Unexpected {
                status,
                detail: "a login without a session cookie".into(),
            })?;
        let user = response.json().await?;
        Ok((self.as_(Credentials::Session(cookie)), user))
    }

    /// `POST /api/v1/auth/logout`.
    pub async fn logout(&self) -> Result<()> {
        self.call::<api::Logout>((), &()).await
    }

    /// `GET /api/v1/auth/methods`: how people sign in here (public).
    pub async fn auth_methods(&self) -> Result<SignInMethods> {
        self.call::<api::AuthMethods>((), &()).await
    }

    /// `POST /api/v1/auth/device`: a code to confirm at the OIDC provider (public).
    pub async fn start_device_sign_in(&self) -> Result<DeviceSignIn> {
        self.call::<api::StartDeviceSignIn>((), &()).await
    }

    /// `POST /api/v1/auth/device/token`: waits a while for the confirmation (public).
    pub async fn poll_device_sign_in(&self, poll: &DevicePoll) -> Result<DeviceOutcome> {
        self.call::<api::PollDeviceSignIn>((), poll).await
    }

    /// `POST /api/v1/auth/terminal-code`: a code from the account page for a token (public).
    pub async fn sign_in_with_terminal_code(
        &self,
        request: &RedeemTerminalCode,
    ) -> Result<TerminalSignIn> {
        self.call::<api::SignInWithTerminalCode>((), request).await
    }

    /// `POST /api/v1/me/terminal-code`: a one-time code for `lanes login`.
    pub async fn new_terminal_code(&self) -> Result<TerminalCode> {
        self.call::<api::NewTerminalCode>((), &()).await
    }

    /// `POST /api/v1/directory/sync`: checks directory accounts against LDAP now (admins).
    pub async fn sync_directory(&self) -> Result<DirectorySyncReport> {
        self.call::<api::SyncDirectory>((), &()).await
    }

    /// `GET /api/v1/me`.
    pub async fn me(&self) -> Result<User> {
        self.call::<api::Me>((), &()).await
    }

    /// `POST /api/v1/me/password`.
    pub async fn change_password(&self, change: &PasswordChange) -> Result<()> {
        self.call::<api::ChangePassword>((), change).await
    }

    /// `PUT /api/v1/me/language`: `en` or `zh`, for pages, API messages and mail.
    pub async fn set_language(&self, choice: &LanguageChoice) -> Result<()> {
        self.call::<api::SetLanguage>((), choice).await
    }

    /// `PUT /api/v1/me/email`: a new address is used once the link sent to it is opened.
    pub async fn change_email(
        &self,
        change: &lanes_types::account::EmailChange,
    ) -> Result<lanes_types::account::EmailChangeAnswer> {
        self.call::<api::ChangeEmail>((), change).await
    }

    /// `GET /api/v1/tokens`.
    pub async fn tokens(&self) -> Result<Vec<ApiToken>> {
        self.call::<api::Tokens>((), &()).await
    }

    /// `POST /api/v1/tokens`: the secret is in the answer, once.
    pub async fn create_token(&self, token: &NewToken) -> Result<CreatedToken> {
        self.call::<api::CreateToken>((), token).await
    }

    /// `DELETE /api/v1/tokens/{id}`.
    pub async fn revoke_token(&self, id: i64) -> Result<()> {
        self.call::<api::RevokeToken>(id, &()).await
    }

    /// `GET /api/v1/users`.
    pub async fn users(&self) -> Result<Vec<UserView>> {
        self.call::<api::Users>((), &()).await
    }

    /// `POST /api/v1/users`.
    pub async fn create_user(&self, user: &CreateUser) -> Result<UserView> {
        self.call::<api::AddUser>((), user).await
    }

    /// `PATCH /api/v1/users/{id}`.
    pub async fn update_user(&self, id: i64, patch: &UserPatch) -> Result<UserView> {
        self.call::<api::UpdateUser>(id, patch).await
    }

    /// `GET /api/v1/groups`.
    pub async fn groups(&self) -> Result<Vec<Group>> {
        self.call::<api::Groups>((), &()).await
    }

    /// `POST /api/v1/groups`.
    pub async fn create_group(&self, group: &CreateGroup) -> Result<Group> {
        self.call::<api::AddGroup>((), group).await
    }

    /// `GET /api/v1/audit`.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.call::<api::Audit>((), query).await
    }

    /// `GET /api/v1/settings`.
    pub async fn settings(&self) -> Result<PortalSettings> {
        self.call::<api::Settings>((), &()).await
    }

    /// `PUT /api/v1/settings`.
    pub async fn save_settings(&self, settings: &PortalSettings) -> Result<PortalSettings> {
        self.call::<api::SaveSettings>((), settings).await
    }

    // ---- bookings, quotas, maintenance ----

    /// `POST /api/v1/bookings`.
    pub async fn book(&self, booking: &CreateBooking) -> Result<Booking> {
        self.call::<api::Book>((), booking).await
    }

    /// `GET /api/v1/bookings`.
    pub async fn bookings(&self, query: &BookingQuery) -> Result<Vec<Booking>> {
        self.call::<api::Bookings>((), query).await
    }

    /// `GET /api/v1/bookings/{id}`.
    pub async fn booking(&self, id: i64) -> Result<Booking> {
        self.call::<api::BookingById>(id, &()).await
    }

    /// `PATCH /api/v1/bookings/{id}`: a later end.
    pub async fn extend_booking(&self, id: i64, extend: &ExtendBooking) -> Result<Booking> {
        self.call::<api::ExtendBookingById>(id, extend).await
    }

    /// `POST /api/v1/bookings/{id}/reclaim`: takes back the cards the booking lends now.
    pub async fn reclaim_booking(&self, id: i64) -> Result<Booking> {
        self.call::<api::ReclaimBooking>(id, &()).await
    }

    /// `DELETE /api/v1/bookings/{id}`: cancels an upcoming booking, releases an active one.
    pub async fn withdraw_booking(&self, id: i64) -> Result<Booking> {
        self.call::<api::WithdrawBooking>(id, &()).await
    }

    /// `GET /api/v1/slots`: the earliest windows where the cards asked for are free.
    pub async fn slots(&self, query: &SlotQuery) -> Result<Vec<FreeSlot>> {
        self.call::<api::Slots>((), query).await
    }

    /// `GET /api/v1/me/quota`.
    pub async fn my_quota(&self) -> Result<QuotaUse> {
        self.call::<api::MyQuota>((), &()).await
    }

    /// `GET /api/v1/quotas`.
    pub async fn quotas(&self) -> Result<Quotas> {
        self.call::<api::QuotasNow>((), &()).await
    }

    /// `PUT /api/v1/quotas`.
    pub async fn save_quotas(&self, quotas: &Quotas) -> Result<Quotas> {
        self.call::<api::SaveQuotas>((), quotas).await
    }

    /// `GET /api/v1/quotas/use`.
    pub async fn quota_use(&self) -> Result<Vec<QuotaUse>> {
        self.call::<api::QuotaUses>((), &()).await
    }

    /// `GET /api/v1/maintenance`.
    pub async fn maintenance(&self) -> Result<Vec<MaintenanceBlock>> {
        self.call::<api::Maintenance>((), &()).await
    }

    /// `POST /api/v1/maintenance`.
    pub async fn add_maintenance(&self, block: &CreateMaintenance) -> Result<MaintenanceBlock> {
        self.call::<api::AddMaintenance>((), block).await
    }

    /// `DELETE /api/v1/maintenance/{id}`.
    pub async fn end_maintenance(&self, id: i64) -> Result<()> {
        self.call::<api::EndMaintenance>(id, &()).await
    }

    /// `POST /api/v1/bookings/{id}/move`: one card of the booking for a free one of its node.
    pub async fn move_booking_card(&self, id: i64, request: &MoveCard) -> Result<Booking> {
        self.call::<api::MoveBookingCard>(id, request).await
    }

    // ---- card health ----

    /// `GET /api/v1/health`: every card's health, counters and drain.
    pub async fn health_of_cards(&self) -> Result<Vec<CardHealth>> {
        self.call::<api::HealthOfCards>((), &()).await
    }

    /// `GET /api/v1/health/changes`.
    pub async fn health_changes(&self, query: &HealthChangesQuery) -> Result<Vec<HealthChange>> {
        self.call::<api::HealthChanges>((), query).await
    }

    /// `POST /api/v1/health/clear`: a card back in service (admins).
    pub async fn clear_card_health(&self, request: &ClearHealth) -> Result<()> {
        self.call::<api::ClearCardHealth>((), request).await
    }

    /// `POST /api/v1/sim/faults`: a fault on a simulated card (admins; simulated fleets only).
    pub async fn inject_fault(&self, fault: &InjectFault) -> Result<()> {
        self.call::<api::InjectSimFault>((), fault).await
    }

    // ---- jobs ----

    /// `POST /api/v1/jobs`: a job on a booking's cards.
    pub async fn submit_job(&self, job: &CreateJob) -> Result<Job> {
        self.call::<api::SubmitToBooking>((), job).await
    }

    /// `GET /api/v1/jobs`.
    pub async fn jobs(&self, query: &JobQuery) -> Result<Vec<Job>> {
        self.call::<api::Jobs>((), query).await
    }

    /// `GET /api/v1/jobs/{id}`.
    pub async fn job(&self, id: i64) -> Result<Job> {
        self.call::<api::JobById>(id, &()).await
    }

    /// `DELETE /api/v1/jobs/{id}`.
    pub async fn cancel_job(&self, id: i64) -> Result<Job> {
        self.call::<api::CancelJob>(id, &()).await
    }

    /// `GET /api/v1/jobs/{id}/log`; `range` is an HTTP byte range (`bytes=100-`).
    pub async fn job_log(&self, id: i64, query: &LogQuery, range: Option<&str>) -> Result<LogPart> {
        let request = self.prepare::<api::JobLog>(&id, query);
        let request = match range {
            Some(range) => request.header(reqwest::header::RANGE, range),
            None => request,
        };
        let response = Self::send(request).await?;
        Ok(LogPart {
            status: response.status(),
            text: response.text().await?,
        })
    }

    /// Whether session `id` answers through the portal (`GET /sessions/{id}/api/status`, a
    /// Jupyter's own status): `false` while it starts (503), an error once it is over.
    pub async fn session_ready(&self, id: i64) -> Result<bool> {
        let path = format!("{}api/status", lanes_types::job::session_path(id));
        match Self::send(self.request(Method::GET, &path)).await {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(StatusCode::SERVICE_UNAVAILABLE) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /api/v1/jobs/{id}/log/ws`: the log as it is written, until the job is over.
    pub async fn follow_log(&self, id: i64, query: &LogQuery) -> Result<LogTail> {
        LogTail::connect(self, &api::JobLogWs::url(&id, query)).await
    }

    // ---- enforcement ----

    /// `GET /api/v1/policy`.
    pub async fn policy(&self) -> Result<Policy> {
        self.call::<api::PolicyNow>((), &()).await
    }

    /// `PUT /api/v1/policy`.
    pub async fn save_policy(&self, policy: &Policy) -> Result<Policy> {
        self.call::<api::SavePolicy>((), policy).await
    }

    /// `GET /api/v1/me/notifications`: what the caller chose, and the lab's rules.
    pub async fn my_notifications(&self) -> Result<lanes_types::notify::NotifyPrefsView> {
        self.call::<api::MyNotifications>((), &()).await
    }

    /// `PUT /api/v1/me/notifications`.
    pub async fn save_my_notifications(
        &self,
        prefs: &lanes_types::notify::NotifyPrefs,
    ) -> Result<lanes_types::notify::NotifyPrefsView> {
        self.call::<api::SaveMyNotifications>((), prefs).await
    }

    /// `POST /api/v1/me/notifications/test`: a test message to the caller's channels.
    pub async fn test_my_notifications(&self) -> Result<lanes_types::notify::TestSent> {
        self.call::<api::TestMyNotifications>((), &()).await
    }

    /// `POST /api/v1/me/notifications/channel-test`: a test to the caller's own webhook now,
    /// and the service's answer.
    pub async fn test_my_channel(
        &self,
        test: &lanes_types::notify::ChannelTest,
    ) -> Result<lanes_types::notify::ChannelAnswer> {
        self.call::<api::TestMyChannel>((), test).await
    }

    /// `POST /api/v1/policy/channel-test` (admins): a test to the lab's channel now.
    pub async fn test_lab_channel(
        &self,
        test: &lanes_types::notify::ChannelTest,
    ) -> Result<lanes_types::notify::ChannelAnswer> {
        self.call::<api::TestLabChannel>((), test).await
    }

    /// `GET /api/v1/notifications/settings` (admins).
    pub async fn notify_settings(&self) -> Result<lanes_types::notify::NotifySettings> {
        self.call::<api::NotifySettingsNow>((), &()).await
    }

    /// `PUT /api/v1/notifications/settings` (admins).
    pub async fn save_notify_settings(
        &self,
        settings: &lanes_types::notify::NotifySettings,
    ) -> Result<lanes_types::notify::NotifySettings> {
        self.call::<api::SaveNotifySettings>((), settings).await
    }

    /// `GET /api/v1/notifications/outbox` (admins): the newest messages, optionally of one
    /// status (`pending`, `sent`, `failed`, `suppressed`).
    pub async fn outbox(
        &self,
        status: Option<&str>,
    ) -> Result<Vec<lanes_types::notify::OutboxEntry>> {
        let query = lanes_types::query::OutboxQuery {
            status: status.map(str::to_string),
            limit: None,
        };
        self.call::<api::Outbox>((), &query).await
    }

    /// `POST /api/v1/notifications/test` (admins): a test message to an address or a member.
    pub async fn notify_test(
        &self,
        request: &lanes_types::notify::TestSend,
    ) -> Result<lanes_types::notify::TestSent> {
        self.call::<api::NotifyTest>((), request).await
    }

    /// `GET /api/v1/violations`.
    pub async fn violations(&self, query: &ViolationQuery) -> Result<Vec<Violation>> {
        self.call::<api::Violations>((), query).await
    }

    /// `POST /api/v1/sim/processes`: a process on a simulated card (simulated fleets only).
    pub async fn inject_process(&self, process: &InjectProcess) -> Result<Injected> {
        self.call::<api::InjectSimProcess>((), process).await
    }

    // ---- history and reports ----

    /// `GET /api/v1/history`.
    pub async fn history(&self, query: &HistoryQuery) -> Result<HistoryAnswer> {
        self.call::<api::History>((), query).await
    }

    /// `GET /api/v1/reports/usage`.
    pub async fn usage_report(&self, query: &ReportQuery) -> Result<UsageReport> {
        self.call::<api::Usage>((), query).await
    }

    /// `GET /api/v1/bookings/energy`: what each active booking's cards drew so far.
    pub async fn booking_energy(&self) -> Result<Vec<lanes_types::report::BookingEnergyNow>> {
        self.call::<api::BookingEnergy>((), &()).await
    }

    /// `GET /api/v1/reports/usage.csv`.
    pub async fn usage_csv(&self, query: &ReportQuery) -> Result<String> {
        self.call::<api::UsageCsv>((), query).await
    }

    /// `GET /api/v1/statements` (admins): a month's statement.
    pub async fn statement(
        &self,
        query: &lanes_types::statement::StatementQuery,
    ) -> Result<lanes_types::statement::Statement> {
        self.call::<api::Statements>((), query).await
    }

    /// `GET /api/v1/statements.csv` (admins): one table of a month's statement.
    pub async fn statement_csv(
        &self,
        query: &lanes_types::statement::StatementQuery,
    ) -> Result<String> {
        self.call::<api::StatementsCsv>((), query).await
    }

    /// `GET /api/v1/projects`: the projects a booking may name, and the caller's default.
    pub async fn projects(&self) -> Result<lanes_types::statement::ProjectChoices> {
        self.call::<api::Projects>((), &()).await
    }

    /// `GET /api/v1/me/usage`: the caller's month.
    pub async fn my_usage(
        &self,
        query: &lanes_types::statement::StatementQuery,
    ) -> Result<lanes_types::statement::MyUsage> {
        self.call::<api::MyUsageOfMonth>((), query).await
    }

    // ---- queue ----

    /// `POST /api/v1/queue`.
    pub async fn enqueue(&self, job: &SubmitJob) -> Result<QueuedJob> {
        self.call::<api::Enqueue>((), job).await
    }

    /// `GET /api/v1/queue`.
    pub async fn queue(&self) -> Result<QueueView> {
        self.call::<api::Queue>((), &()).await
    }

    /// `POST /api/v1/queue/forecast`: when a job like this would likely start if queued now.
    pub async fn forecast_start(&self, request: &ForecastRequest) -> Result<QueueForecast> {
        self.call::<api::ForecastStart>((), request).await
    }

    /// `DELETE /api/v1/queue/{id}`.
    pub async fn dequeue(&self, id: i64) -> Result<QueuedJob> {
        self.call::<api::Dequeue>(id, &()).await
    }

    /// `GET /api/v1/queue/settings`.
    pub async fn queue_settings(&self) -> Result<QueueSettings> {
        self.call::<api::QueueSettingsNow>((), &()).await
    }

    /// `PUT /api/v1/queue/settings`.
    pub async fn save_queue_settings(&self, settings: &QueueSettings) -> Result<QueueSettings> {
        self.call::<api::SaveQueueSettings>((), settings).await
    }

    /// `GET /api/v1/shares`.
    pub async fn shares(&self) -> Result<Shares> {
        self.call::<api::SharesNow>((), &()).await
    }

    /// `PUT /api/v1/shares`.
    pub async fn save_shares(&self, shares: &Shares) -> Result<Shares> {
        self.call::<api::SaveShares>((), shares).await
    }

    // ---- live ----

    /// `GET /api/v1/telemetry/ws`: the fleet snapshot, then its ticks.
    pub async fn telemetry(&self) -> Result<Telemetry> {
        Telemetry::connect(self, api::TelemetryWs::PATH).await
    }

    /// `GET /api/v1/telemetry/ws?only=changes`: which lists changed, as they change (a login
    /// is needed).
    pub async fn changes(&self) -> Result<Telemetry> {
        Telemetry::connect(self, &format!("{}?only=changes", api::TelemetryWs::PATH)).await
    }

    /// A websocket request to `path` with this client's credentials.
    fn ws_request(
        &self,
        path: &str,
    ) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!(
            "{}{path}",
            self.base
                .replacen("http://", "ws://", 1)
                .replacen("https://", "wss://", 1)
        );
        let mut request = url.into_client_request().map_err(Box::new)?;
        let header = match &self.credentials {
            Credentials::Anonymous => None,
            Credentials::Session(cookie) => Some(("cookie", cookie.clone())),
            Credentials::Token(token) => Some(("authorization", format!("Bearer {token}"))),
        };
        if let Some((name, value)) = header {
            let value = value.parse().map_err(|_| ClientError::Unexpected {
                status: StatusCode::BAD_REQUEST,
                detail: "credentials that are not a header value".into(),
            })?;
            request.headers_mut().insert(name, value);
        }
        Ok(request)
    }
}
