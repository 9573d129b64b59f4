//! A typed async client for the Lanes API: one method per operation of `docs/openapi.json`,
//! typed bodies and answers from `lanes-types`, and the API's error body (`error` code, `rule`,
//! `message`) as [`ApiError`]. The integration tests, the bench and the terminal client use it;
//! a test checks that every documented operation has a method here.

mod ws;

pub use reqwest;
pub use ws::{LogEvent, LogTail, Telemetry};

use lanes_types::account::{
    ApiToken, AuditRecord, CreateGroup, CreateUser, CreatedToken, Group, LanguageChoice,
    LoginRequest, NewToken, PasswordChange, PortalSettings, User, UserPatch, UserView,
};
use lanes_types::booking::{
    Booking, CreateBooking, CreateMaintenance, ExtendBooking, FreeSlot, GpuRef, MaintenanceBlock,
    QuotaUse, Quotas,
};
use lanes_types::enforcement::{Policy, Violation};
use lanes_types::history::HistoryAnswer;
use lanes_types::job::{CreateJob, Job};
use lanes_types::query::{
    AuditQuery, BookingQuery, HistoryQuery, InjectProcess, Injected, JobQuery, LogQuery,
    ReportQuery, SlotQuery, ViolationQuery,
};
use lanes_types::queue::{QueueSettings, QueueView, QueuedJob, Shares, SubmitJob};
use lanes_types::report::UsageReport;
use lanes_types::{GpuState, HealthReport};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The body of every error answer: a stable `error` code, the `rule` a refusal broke (422),
/// what held the cards (409), and a message for people.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "error")]
    pub code: String,
    #[serde(default)]
    pub rule: Option<String>,
    pub message: String,
    /// 409: the cards already held for part of the slot.
    #[serde(default)]
    pub gpus: Vec<GpuRef>,
    /// 409: the bookings that hold them.
    #[serde(default)]
    pub bookings: Vec<i64>,
    /// 409: the maintenance blocks that hold them.
    #[serde(default)]
    pub maintenance: Vec<i64>,
}

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
    pub fn rule(&self) -> Option<&str> {
        self.body().and_then(|b| b.rule.as_deref())
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
                detail: text,
            }),
        }
    }

    async fn json<T: DeserializeOwned>(request: RequestBuilder) -> Result<T> {
        let response = Self::send(request).await?;
        let status = response.status();
        let text = response.text().await?;
        serde_json::from_str(&text).map_err(|e| ClientError::Unexpected {
            status,
            detail: format!("{e}: {text}"),
        })
    }

    async fn text(request: RequestBuilder) -> Result<String> {
        Ok(Self::send(request).await?.text().await?)
    }

    async fn empty(request: RequestBuilder) -> Result<()> {
        Self::send(request).await.map(drop)
    }

    // ---- service ----

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<HealthReport> {
        Self::json(self.request(Method::GET, "/healthz")).await
    }

    /// `GET /metrics`: Prometheus text; `token` when the server requires one.
    pub async fn metrics(&self, token: Option<&str>) -> Result<String> {
        let request = self.request(Method::GET, "/metrics");
        Self::text(match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
        .await
    }

    /// `GET /api/v1/openapi.json`.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        Self::json(self.request(Method::GET, "/api/v1/openapi.json")).await
    }

    /// `GET /api/v1/gpus`.
    pub async fn gpus(&self) -> Result<Vec<GpuState>> {
        Self::json(self.request(Method::GET, "/api/v1/gpus")).await
    }

    /// `GET /api/v1/nodes`: every node of the pool.
    pub async fn nodes(&self) -> Result<Vec<lanes_types::NodeState>> {
        Self::json(self.request(Method::GET, "/api/v1/nodes")).await
    }

    // ---- accounts and sessions ----

    /// `POST /api/v1/auth/login`: on success, a client carrying the new session.
    pub async fn login(&self, username: &str, password: &str) -> Result<(Client, User)> {
        let request = self
            .request(Method::POST, "/api/v1/auth/login")
            .json(&LoginRequest {
                username: username.into(),
                password: password.into(),
            });
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
        Self::empty(self.request(Method::POST, "/api/v1/auth/logout")).await
    }

    /// `GET /api/v1/me`.
    pub async fn me(&self) -> Result<User> {
        Self::json(self.request(Method::GET, "/api/v1/me")).await
    }

    /// `POST /api/v1/me/password`.
    pub async fn change_password(&self, change: &PasswordChange) -> Result<()> {
        Self::empty(
            self.request(Method::POST, "/api/v1/me/password")
                .json(change),
        )
        .await
    }

    /// `PUT /api/v1/me/language`: `en` or `zh`, for pages, API messages and mail.
    pub async fn set_language(&self, choice: &LanguageChoice) -> Result<()> {
        Self::empty(
            self.request(Method::PUT, "/api/v1/me/language")
                .json(choice),
        )
        .await
    }

    /// `GET /api/v1/tokens`.
    pub async fn tokens(&self) -> Result<Vec<ApiToken>> {
        Self::json(self.request(Method::GET, "/api/v1/tokens")).await
    }

    /// `POST /api/v1/tokens`: the secret is in the answer, once.
    pub async fn create_token(&self, token: &NewToken) -> Result<CreatedToken> {
        Self::json(self.request(Method::POST, "/api/v1/tokens").json(token)).await
    }

    /// `DELETE /api/v1/tokens/{id}`.
    pub async fn revoke_token(&self, id: i64) -> Result<()> {
        Self::empty(self.request(Method::DELETE, &format!("/api/v1/tokens/{id}"))).await
    }

    /// `GET /api/v1/users`.
    pub async fn users(&self) -> Result<Vec<UserView>> {
        Self::json(self.request(Method::GET, "/api/v1/users")).await
    }

    /// `POST /api/v1/users`.
    pub async fn create_user(&self, user: &CreateUser) -> Result<UserView> {
        Self::json(self.request(Method::POST, "/api/v1/users").json(user)).await
    }

    /// `PATCH /api/v1/users/{id}`.
    pub async fn update_user(&self, id: i64, patch: &UserPatch) -> Result<UserView> {
        Self::json(
            self.request(Method::PATCH, &format!("/api/v1/users/{id}"))
                .json(patch),
        )
        .await
    }

    /// `GET /api/v1/groups`.
    pub async fn groups(&self) -> Result<Vec<Group>> {
        Self::json(self.request(Method::GET, "/api/v1/groups")).await
    }

    /// `POST /api/v1/groups`.
    pub async fn create_group(&self, group: &CreateGroup) -> Result<Group> {
        Self::json(self.request(Method::POST, "/api/v1/groups").json(group)).await
    }

    /// `GET /api/v1/audit`.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        Self::json(self.request(Method::GET, "/api/v1/audit").query(query)).await
    }

    /// `GET /api/v1/settings`.
    pub async fn settings(&self) -> Result<PortalSettings> {
        Self::json(self.request(Method::GET, "/api/v1/settings")).await
    }

    /// `PUT /api/v1/settings`.
    pub async fn save_settings(&self, settings: &PortalSettings) -> Result<PortalSettings> {
        Self::json(self.request(Method::PUT, "/api/v1/settings").json(settings)).await
    }

    // ---- bookings, quotas, maintenance ----

    /// `POST /api/v1/bookings`.
    pub async fn book(&self, booking: &CreateBooking) -> Result<Booking> {
        Self::json(self.request(Method::POST, "/api/v1/bookings").json(booking)).await
    }

    /// `GET /api/v1/bookings`.
    pub async fn bookings(&self, query: &BookingQuery) -> Result<Vec<Booking>> {
        Self::json(self.request(Method::GET, "/api/v1/bookings").query(query)).await
    }

    /// `GET /api/v1/bookings/{id}`.
    pub async fn booking(&self, id: i64) -> Result<Booking> {
        Self::json(self.request(Method::GET, &format!("/api/v1/bookings/{id}"))).await
    }

    /// `PATCH /api/v1/bookings/{id}`: a later end.
    pub async fn extend_booking(&self, id: i64, extend: &ExtendBooking) -> Result<Booking> {
        Self::json(
            self.request(Method::PATCH, &format!("/api/v1/bookings/{id}"))
                .json(extend),
        )
        .await
    }

    /// `POST /api/v1/bookings/{id}/reclaim`: takes back the cards the booking lends now.
    pub async fn reclaim_booking(&self, id: i64) -> Result<Booking> {
        Self::json(self.request(Method::POST, &format!("/api/v1/bookings/{id}/reclaim"))).await
    }

    /// `DELETE /api/v1/bookings/{id}`: cancels an upcoming booking, releases an active one.
    pub async fn withdraw_booking(&self, id: i64) -> Result<Booking> {
        Self::json(self.request(Method::DELETE, &format!("/api/v1/bookings/{id}"))).await
    }

    /// `GET /api/v1/slots`: the earliest windows where the cards asked for are free.
    pub async fn slots(&self, query: &SlotQuery) -> Result<Vec<FreeSlot>> {
        Self::json(self.request(Method::GET, "/api/v1/slots").query(query)).await
    }

    /// `GET /api/v1/me/quota`.
    pub async fn my_quota(&self) -> Result<QuotaUse> {
        Self::json(self.request(Method::GET, "/api/v1/me/quota")).await
    }

    /// `GET /api/v1/quotas`.
    pub async fn quotas(&self) -> Result<Quotas> {
        Self::json(self.request(Method::GET, "/api/v1/quotas")).await
    }

    /// `PUT /api/v1/quotas`.
    pub async fn save_quotas(&self, quotas: &Quotas) -> Result<Quotas> {
        Self::json(self.request(Method::PUT, "/api/v1/quotas").json(quotas)).await
    }

    /// `GET /api/v1/quotas/use`.
    pub async fn quota_use(&self) -> Result<Vec<QuotaUse>> {
        Self::json(self.request(Method::GET, "/api/v1/quotas/use")).await
    }

    /// `GET /api/v1/maintenance`.
    pub async fn maintenance(&self) -> Result<Vec<MaintenanceBlock>> {
        Self::json(self.request(Method::GET, "/api/v1/maintenance")).await
    }

    /// `POST /api/v1/maintenance`.
    pub async fn add_maintenance(&self, block: &CreateMaintenance) -> Result<MaintenanceBlock> {
        Self::json(
            self.request(Method::POST, "/api/v1/maintenance")
                .json(block),
        )
        .await
    }

    /// `DELETE /api/v1/maintenance/{id}`.
    pub async fn end_maintenance(&self, id: i64) -> Result<()> {
        Self::empty(self.request(Method::DELETE, &format!("/api/v1/maintenance/{id}"))).await
    }

    // ---- jobs ----

    /// `POST /api/v1/jobs`: a job on a booking's cards.
    pub async fn submit_job(&self, job: &CreateJob) -> Result<Job> {
        Self::json(self.request(Method::POST, "/api/v1/jobs").json(job)).await
    }

    /// `GET /api/v1/jobs`.
    pub async fn jobs(&self, query: &JobQuery) -> Result<Vec<Job>> {
        Self::json(self.request(Method::GET, "/api/v1/jobs").query(query)).await
    }

    /// `GET /api/v1/jobs/{id}`.
    pub async fn job(&self, id: i64) -> Result<Job> {
        Self::json(self.request(Method::GET, &format!("/api/v1/jobs/{id}"))).await
    }

    /// `DELETE /api/v1/jobs/{id}`.
    pub async fn cancel_job(&self, id: i64) -> Result<Job> {
        Self::json(self.request(Method::DELETE, &format!("/api/v1/jobs/{id}"))).await
    }

    /// `GET /api/v1/jobs/{id}/log`; `range` is an HTTP byte range (`bytes=100-`).
    pub async fn job_log(&self, id: i64, query: &LogQuery, range: Option<&str>) -> Result<LogPart> {
        let request = self
            .request(Method::GET, &format!("/api/v1/jobs/{id}/log"))
            .query(query);
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

    /// `GET /api/v1/jobs/{id}/log/ws`: the log as it is written, until the job is over.
    pub async fn follow_log(&self, id: i64, query: &LogQuery) -> Result<LogTail> {
        let query = serde_json::to_value(query)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(s) => Some(format!("{k}={s}")),
                serde_json::Value::Null => None,
                other => Some(format!("{k}={other}")),
            })
            .collect::<Vec<_>>()
            .join("&");
        let path = format!("/api/v1/jobs/{id}/log/ws?{query}");
        LogTail::connect(self, &path).await
    }

    // ---- enforcement ----

    /// `GET /api/v1/policy`.
    pub async fn policy(&self) -> Result<Policy> {
        Self::json(self.request(Method::GET, "/api/v1/policy")).await
    }

    /// `PUT /api/v1/policy`.
    pub async fn save_policy(&self, policy: &Policy) -> Result<Policy> {
        Self::json(self.request(Method::PUT, "/api/v1/policy").json(policy)).await
    }

    /// `GET /api/v1/me/notifications`: what the caller chose, and the lab's rules.
    pub async fn my_notifications(&self) -> Result<lanes_types::notify::NotifyPrefsView> {
        Self::json(self.request(Method::GET, "/api/v1/me/notifications")).await
    }

    /// `PUT /api/v1/me/notifications`.
    pub async fn save_my_notifications(
        &self,
        prefs: &lanes_types::notify::NotifyPrefs,
    ) -> Result<lanes_types::notify::NotifyPrefsView> {
        Self::json(
            self.request(Method::PUT, "/api/v1/me/notifications")
                .json(prefs),
        )
        .await
    }

    /// `POST /api/v1/me/notifications/test`: a test message to the caller's channels.
    pub async fn test_my_notifications(&self) -> Result<lanes_types::notify::TestSent> {
        Self::json(self.request(Method::POST, "/api/v1/me/notifications/test")).await
    }

    /// `GET /api/v1/notifications/settings` (admins).
    pub async fn notify_settings(&self) -> Result<lanes_types::notify::NotifySettings> {
        Self::json(self.request(Method::GET, "/api/v1/notifications/settings")).await
    }

    /// `PUT /api/v1/notifications/settings` (admins).
    pub async fn save_notify_settings(
        &self,
        settings: &lanes_types::notify::NotifySettings,
    ) -> Result<lanes_types::notify::NotifySettings> {
        Self::json(
            self.request(Method::PUT, "/api/v1/notifications/settings")
                .json(settings),
        )
        .await
    }

    /// `GET /api/v1/notifications/outbox` (admins): the newest messages, optionally of one
    /// status (`pending`, `sent`, `failed`, `suppressed`).
    pub async fn outbox(
        &self,
        status: Option<&str>,
    ) -> Result<Vec<lanes_types::notify::OutboxEntry>> {
        let mut request = self.request(Method::GET, "/api/v1/notifications/outbox");
        if let Some(status) = status {
            request = request.query(&[("status", status)]);
        }
        Self::json(request).await
    }

    /// `POST /api/v1/notifications/test` (admins): a test message to an address or a member.
    pub async fn notify_test(
        &self,
        request: &lanes_types::notify::TestSend,
    ) -> Result<lanes_types::notify::TestSent> {
        Self::json(
            self.request(Method::POST, "/api/v1/notifications/test")
                .json(request),
        )
        .await
    }

    /// `GET /api/v1/violations`.
    pub async fn violations(&self, query: &ViolationQuery) -> Result<Vec<Violation>> {
        Self::json(self.request(Method::GET, "/api/v1/violations").query(query)).await
    }

    /// `POST /api/v1/sim/processes`: a process on a simulated card (simulated fleets only).
    pub async fn inject_process(&self, process: &InjectProcess) -> Result<Injected> {
        Self::json(
            self.request(Method::POST, "/api/v1/sim/processes")
                .json(process),
        )
        .await
    }

    // ---- history and reports ----

    /// `GET /api/v1/history`.
    pub async fn history(&self, query: &HistoryQuery) -> Result<HistoryAnswer> {
        Self::json(self.request(Method::GET, "/api/v1/history").query(query)).await
    }

    /// `GET /api/v1/reports/usage`.
    pub async fn usage_report(&self, query: &ReportQuery) -> Result<UsageReport> {
        Self::json(
            self.request(Method::GET, "/api/v1/reports/usage")
                .query(query),
        )
        .await
    }

    /// `GET /api/v1/bookings/energy`: what each active booking's cards drew so far.
    pub async fn booking_energy(&self) -> Result<Vec<lanes_types::report::BookingEnergyNow>> {
        Self::json(self.request(Method::GET, "/api/v1/bookings/energy")).await
    }

    /// `GET /api/v1/reports/usage.csv`.
    pub async fn usage_csv(&self, query: &ReportQuery) -> Result<String> {
        Self::text(
            self.request(Method::GET, "/api/v1/reports/usage.csv")
                .query(query),
        )
        .await
    }

    // ---- queue ----

    /// `POST /api/v1/queue`.
    pub async fn enqueue(&self, job: &SubmitJob) -> Result<QueuedJob> {
        Self::json(self.request(Method::POST, "/api/v1/queue").json(job)).await
    }

    /// `GET /api/v1/queue`.
    pub async fn queue(&self) -> Result<QueueView> {
        Self::json(self.request(Method::GET, "/api/v1/queue")).await
    }

    /// `DELETE /api/v1/queue/{id}`.
    pub async fn dequeue(&self, id: i64) -> Result<QueuedJob> {
        Self::json(self.request(Method::DELETE, &format!("/api/v1/queue/{id}"))).await
    }

    /// `GET /api/v1/queue/settings`.
    pub async fn queue_settings(&self) -> Result<QueueSettings> {
        Self::json(self.request(Method::GET, "/api/v1/queue/settings")).await
    }

    /// `PUT /api/v1/queue/settings`.
    pub async fn save_queue_settings(&self, settings: &QueueSettings) -> Result<QueueSettings> {
        Self::json(
            self.request(Method::PUT, "/api/v1/queue/settings")
                .json(settings),
        )
        .await
    }

    /// `GET /api/v1/shares`.
    pub async fn shares(&self) -> Result<Shares> {
        Self::json(self.request(Method::GET, "/api/v1/shares")).await
    }

    /// `PUT /api/v1/shares`.
    pub async fn save_shares(&self, shares: &Shares) -> Result<Shares> {
        Self::json(self.request(Method::PUT, "/api/v1/shares").json(shares)).await
    }

    // ---- live ----

    /// `GET /api/v1/telemetry/ws`: the fleet snapshot, then its ticks.
    pub async fn telemetry(&self) -> Result<Telemetry> {
        Telemetry::connect(self, "/api/v1/telemetry/ws").await
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
