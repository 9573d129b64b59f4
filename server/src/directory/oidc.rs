//! OpenID Connect sign-in with the `openidconnect` crate: discovery, the authorization code
//! flow with PKCE, `state` and `nonce`, ID tokens checked against the provider's keys (fetched
//! again when it signs with a key not seen yet), issuer, audience and times within the
//! configured clock skew; and the device authorization grant for the terminal.

use super::config::{ConfigError, OidcConfig};
use super::person::{self, Person};
use chrono::{DateTime, Utc};
use lanes_types::account::AccountSource;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthenticationFlow, CoreClaimName, CoreClaimType, CoreClient,
    CoreClientAuthMethod, CoreDeviceAuthorizationResponse, CoreGenderClaim, CoreGrantType,
    CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm,
    CoreJwsSigningAlgorithm, CoreResponseMode, CoreResponseType, CoreSubjectIdentifierType,
    CoreTokenResponse,
};
use openidconnect::{
    AdditionalClaims, AdditionalProviderMetadata, AuthorizationCode, ClaimsVerificationError,
    ClientId, ClientSecret, CsrfToken, DeviceAuthorizationUrl, IdToken, IdTokenVerifier, IssuerUrl,
    Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, ProviderMetadata, RedirectUrl,
    Scope, SignatureVerificationError, TokenResponse, UserInfoClaims,
};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How long the provider's discovery document (and keys) are kept before being read again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Keys are read again for a key not seen yet at most this often.
const KEY_REFRESH_MIN: Duration = Duration::from_secs(10);
/// After the provider could not be reached, how long it is not asked again: a login page
/// shown during an outage answers at once instead of waiting on a timeout each time.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(30);
/// An ID token issued longer ago than this (plus the skew) is refused: the code was just
/// exchanged, so its token is fresh.
const MAX_TOKEN_AGE: chrono::Duration = chrono::Duration::minutes(10);
/// Longest a browser may take at the provider.
pub const BROWSER_FLOW_TTL: chrono::Duration = chrono::Duration::minutes(15);

/// The provider's discovery document, with the device endpoint that core OIDC does not name.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DeviceEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}
impl AdditionalProviderMetadata for DeviceEndpoint {}

type Metadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// Every claim beyond the standard ones (groups, a Unix account), kept as JSON.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct OtherClaims {
    #[serde(flatten)]
    claims: serde_json::Map<String, serde_json::Value>,
}
impl AdditionalClaims for OtherClaims {}

type FullIdToken = IdToken<
    OtherClaims,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;

#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the sign-in provider cannot be reached or answered oddly: {0}")]
    Unavailable(String),
    /// The provider's answer failed a check: a forged or replayed token, a wrong audience.
    #[error("the sign-in could not be verified: {0}")]
    Rejected(String),
    #[error("the sign-in provider does not offer the device authorization grant")]
    NoDeviceGrant,
    #[error("{0}")]
    Refused(person::Refusal),
}

/// What a browser's sign-in keeps between leaving for the provider and coming back (stored
/// by a hash of its `state`; never sent to the browser).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BrowserFlow {
    pub nonce: String,
    pub pkce_verifier: String,
    pub next: String,
    pub redirect_url: String,
}

/// A terminal's device sign-in under way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceFlow {
    pub details: CoreDeviceAuthorizationResponse,
    pub expires_at: DateTime<Utc>,
}

struct Cached {
    metadata: Metadata,
    fetched: Instant,
    /// When the keys were last read again for a key not seen yet.
    forced: Option<Instant>,
}

pub struct Provider {
    config: OidcConfig,
    issuer: IssuerUrl,
    http: reqwest::Client,
    cached: tokio::sync::Mutex<Option<Cached>>,
    /// When discovery last failed, and why.
    unreachable: std::sync::Mutex<Option<(Instant, String)>>,
}

impl Provider {
    pub fn new(config: OidcConfig) -> Result<Provider, ConfigError> {
        let issuer = IssuerUrl::new(config.issuer.clone())
            .map_err(|e| ConfigError::Invalid(format!("--oidc-issuer: {e}")))?;
        let http = reqwest::Client::builder()
            // Following redirects would let the provider's answers send us anywhere.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(Provider {
            config,
            issuer,
            http,
            cached: tokio::sync::Mutex::new(None),
            unreachable: std::sync::Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn configured_redirect(&self) -> Option<&str> {
        self.config.redirect_url.as_deref()
    }

    pub fn unix_from_ldap(&self) -> bool {
        self.config.unix_from_ldap
    }

    /// The discovery document: kept for an hour; `fresh` reads it (and the keys) again unless
    /// that was done a moment ago.
    async fn metadata(&self, fresh: bool) -> Result<Metadata, OidcError> {
        let mut cached = self.cached.lock().await;
        let mut forced = None;
        if let Some(c) = cached.as_ref() {
            forced = c.forced;
            let recently_forced = c.forced.is_some_and(|f| f.elapsed() < KEY_REFRESH_MIN);
            if c.fetched.elapsed() < METADATA_TTL && (!fresh || recently_forced) {
                return Ok(c.metadata.clone());
            }
        }
        if let Some(why) = self.recently_unreachable() {
            return Err(OidcError::Unavailable(why));
        }
        let discovered = Metadata::discover_async(self.issuer.clone(), &self.http).await;
        let failure = match &discovered {
            Ok(_) => None,
            Err(e) => Some((Instant::now(), chain(e))),
        };
        *self.unreachable.lock().unwrap_or_else(|p| p.into_inner()) = failure;
        let metadata = discovered.map_err(|e| OidcError::Unavailable(chain(&e)))?;
        *cached = Some(Cached {
            metadata: metadata.clone(),
            fetched: Instant::now(),
            forced: if fresh { Some(Instant::now()) } else { forced },
        });
        Ok(metadata)
    }

    /// Why discovery failed, if it did within [`RETRY_UNREACHABLE`].
    fn recently_unreachable(&self) -> Option<String> {
        let unreachable = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
        unreachable
            .as_ref()
            .filter(|(at, _)| at.elapsed() < RETRY_UNREACHABLE)
            .map(|(_, why)| why.clone())
    }

    pub async fn offers_device_grant(&self) -> bool {
        self.metadata(false).await.is_ok_and(|m| {
            m.additional_metadata()
                .device_authorization_endpoint
                .is_some()
        })
    }

    fn client(
        &self,
        metadata: Metadata,
    ) -> CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
    }

    /// Where to send the browser, and what to keep until it comes back.
    pub async fn start(
        &self,
        redirect_url: &str,
        next: &str,
    ) -> Result<(String, String, BrowserFlow), OidcError> {
        let metadata = self.metadata(false).await?;
        let redirect = RedirectUrl::new(redirect_url.to_string())
            .map_err(|e| OidcError::Unavailable(format!("redirect URL {redirect_url:?}: {e}")))?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let client = self.client(metadata).set_redirect_uri(redirect);
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok((
            url.to_string(),
            state.secret().clone(),
            BrowserFlow {
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
                next: next.to_string(),
                redirect_url: redirect_url.to_string(),
            },
        ))
    }

    /// Exchanges the code the provider sent back, checks the ID token, and says who signed in.
    pub async fn finish(
        &self,
        code: &str,
        flow: &BrowserFlow,
        now: DateTime<Utc>,
    ) -> Result<Person, OidcError> {
        let metadata = self.metadata(false).await?;
        let redirect = RedirectUrl::new(flow.redirect_url.clone())
            .map_err(|e| OidcError::Unavailable(e.to_string()))?;
        let client = self.client(metadata).set_redirect_uri(redirect);
        let tokens: CoreTokenResponse = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| OidcError::Unavailable(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(flow.pkce_verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| OidcError::Rejected(chain(&e)))?;
        self.person_of(&tokens, Some(&Nonce::new(flow.nonce.clone())), now)
            .await
    }

    /// Checks the ID token of a token response (against the keys, fetched again once if it
    /// names a key not seen yet), reads the user info, and maps both to a person.
    async fn person_of(
        &self,
        tokens: &CoreTokenResponse,
        nonce: Option<&Nonce>,
        now: DateTime<Utc>,
    ) -> Result<Person, OidcError> {
        let raw = tokens
            .id_token()
            .ok_or_else(|| OidcError::Rejected("the provider sent no ID token".into()))?
            .to_string();
        let token: FullIdToken = raw
            .parse()
            .map_err(|e| OidcError::Rejected(format!("unreadable ID token: {e}")))?;
        let metadata = self.metadata(false).await?;
        let claims = match self.verify(&token, &metadata, nonce, now) {
            Err(OidcError::Rejected(why)) if why == NO_MATCHING_KEY => {
                // The provider may have rotated its keys since they were read.
                let metadata = self.metadata(true).await?;
                self.verify(&token, &metadata, nonce, now)?
            }
            other => other?,
        };
        let mut all = claims;
        // Providers put profile claims in the user info rather than the ID token (the
        // standard's default for scope-requested claims); its subject must be the token's.
        let client = self.client(self.metadata(false).await?);
        let subject = all
            .get("sub")
            .and_then(|s| s.as_str())
            .map(|s| openidconnect::SubjectIdentifier::new(s.to_string()));
        if let Ok(request) = client.user_info(tokens.access_token().clone(), subject) {
            let info: UserInfoClaims<OtherClaims, CoreGenderClaim> = request
                .request_async(&self.http)
                .await
                .map_err(|e| OidcError::Rejected(format!("user info: {}", chain(&e))))?;
            if let Ok(serde_json::Value::Object(more)) = serde_json::to_value(&info) {
                for (k, v) in more {
                    all.entry(k).or_insert(v);
                }
            }
        }
        self.person_from_claims(&all)
    }

    /// The verified claims of an ID token as JSON.
    fn verify(
        &self,
        token: &FullIdToken,
        metadata: &Metadata,
        nonce: Option<&Nonce>,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, OidcError> {
        let verifier = verifier(
            &self.config,
            self.issuer.clone(),
            metadata.jwks().clone(),
            metadata
                .id_token_signing_alg_values_supported()
                .iter()
                .cloned(),
            now,
        );
        let claims = match nonce {
            Some(nonce) => token.claims(&verifier, nonce),
            // The device grant has no nonce: the token came straight from the token endpoint.
            None => token.claims(&verifier, |_: Option<&Nonce>| Ok(())),
        }
        .map_err(|e| OidcError::Rejected(verification_error(&e)))?;
        match serde_json::to_value(claims) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            _ => Err(OidcError::Rejected("unreadable claims".into())),
        }
    }

    /// The person the claims describe.
    fn person_from_claims(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Person, OidcError> {
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let subject = text("sub").ok_or_else(|| OidcError::Rejected("no subject".into()))?;
        let login = text(&self.config.username_claim).ok_or_else(|| {
            OidcError::Rejected(format!(
                "the provider sent no {:?} claim (--oidc-username-claim)",
                self.config.username_claim
            ))
        })?;
        let username = person::username(&login).map_err(OidcError::Refused)?;
        let groups = claims.get(&self.config.groups_claim).map(|v| match v {
            serde_json::Value::Array(items) => items
                .iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect(),
            serde_json::Value::String(one) => vec![one.clone()],
            _ => Vec::new(),
        });
        Ok(person::cleaned(Person {
            source: AccountSource::Oidc,
            external_id: format!("{}#{subject}", self.issuer.as_str()),
            display_name: text("name").unwrap_or_else(|| username.clone()),
            email: text("email").filter(|_| {
                // An address the provider has not verified is not taken as theirs.
                claims.get("email_verified").and_then(|v| v.as_bool()) != Some(false)
            }),
            unix_user: self.config.unix_user_claim.as_deref().and_then(text),
            username,
            groups,
        }))
    }

    /// Starts a terminal's device sign-in.
    pub async fn start_device(&self, now: DateTime<Utc>) -> Result<DeviceFlow, OidcError> {
        let metadata = self.metadata(false).await?;
        let endpoint = metadata
            .additional_metadata()
            .device_authorization_endpoint
            .clone()
            .ok_or(OidcError::NoDeviceGrant)?;
        let client = self.client(metadata).set_device_authorization_url(endpoint);
        let mut request = client.exchange_device_code();
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let details: CoreDeviceAuthorizationResponse = request
            .request_async(&self.http)
            .await
            .map_err(|e| OidcError::Unavailable(chain(&e)))?;
        let lifetime = chrono::Duration::from_std(details.expires_in())
            .unwrap_or(chrono::Duration::minutes(10))
            .min(chrono::Duration::minutes(30));
        Ok(DeviceFlow {
            details,
            expires_at: now + lifetime,
        })
    }

    /// Waits up to `wait` for the member to confirm the device code: the person when they
    /// have, `None` while they have not.
    pub async fn poll_device(
        &self,
        flow: &DeviceFlow,
        wait: Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Person>, OidcError> {
        let metadata = self.metadata(false).await?;
        let client = self.client(metadata);
        let left = (flow.expires_at - now).to_std().unwrap_or_default();
        if left.is_zero() {
            return Err(OidcError::Rejected("the code has expired".into()));
        }
        let answer = client
            .exchange_device_access_token(&flow.details)
            .map_err(|e| OidcError::Unavailable(e.to_string()))?
            .request_async(&self.http, tokio::time::sleep, Some(wait.min(left)))
            .await;
        let tokens: CoreTokenResponse = match answer {
            Ok(tokens) => tokens,
            Err(openidconnect::RequestTokenError::ServerResponse(e))
                if *e.error() == openidconnect::DeviceCodeErrorResponseType::ExpiredToken
                    && Utc::now() < flow.expires_at =>
            {
                return Ok(None);
            }
            Err(e) => return Err(OidcError::Rejected(chain(&e))),
        };
        self.person_of(&tokens, None, Utc::now()).await.map(Some)
    }
}

/// The verification error for a key the provider has and we do not know yet.
const NO_MATCHING_KEY: &str = "the token is signed with a key the provider does not list";

fn verification_error(e: &ClaimsVerificationError) -> String {
    match e {
        ClaimsVerificationError::SignatureVerification(
            SignatureVerificationError::NoMatchingKey,
        ) => NO_MATCHING_KEY.into(),
        other => other.to_string(),
    }
}

/// The checks an ID token must pass: signed by one of the provider's keys with an asymmetric
/// algorithm it advertises (never `none`, never a shared secret), for this client alone, by
/// this issuer, not expired and not issued in the future or long ago, beyond the clock skew.
pub fn verifier<'a>(
    config: &OidcConfig,
    issuer: IssuerUrl,
    keys: openidconnect::JsonWebKeySet<CoreJsonWebKey>,
    advertised: impl Iterator<Item = CoreJwsSigningAlgorithm>,
    now: DateTime<Utc>,
) -> IdTokenVerifier<'a, CoreJsonWebKey> {
    use CoreJwsSigningAlgorithm as A;
    let asymmetric = [
        A::RsaSsaPkcs1V15Sha256,
        A::RsaSsaPkcs1V15Sha384,
        A::RsaSsaPkcs1V15Sha512,
        A::RsaSsaPssSha256,
        A::RsaSsaPssSha384,
        A::RsaSsaPssSha512,
        A::EcdsaP256Sha256,
        A::EcdsaP384Sha384,
        A::EdDsa,
    ];
    let mut allowed: Vec<A> = advertised.filter(|a| asymmetric.contains(a)).collect();
    if allowed.is_empty() {
        allowed.push(A::RsaSsaPkcs1V15Sha256);
    }
    let skew = chrono::Duration::from_std(config.clock_skew).unwrap_or_default();
    IdTokenVerifier::new_public_client(ClientId::new(config.client_id.clone()), issuer, keys)
        .set_allowed_algs(allowed)
        // `exp` must be after this: now, less the skew the provider's clock may be behind.
        .set_time_fn(move || now - skew)
        .set_issue_time_verifier_fn(move |iat| {
            if iat > now + skew {
                Err(format!("issued in the future ({iat})"))
            } else if iat < now - MAX_TOKEN_AGE - skew {
                Err(format!("issued too long ago ({iat})"))
            } else {
                Ok(())
            }
        })
}

/// An error and its causes on one line (the crates' errors say little at the top).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    //! ID tokens made here with the crate's own signer (and test keys), checked by the same
    //! verifier a sign-in uses: each forgery the issue names is refused.
    use super::*;
    use openidconnect::core::{CoreIdToken, CoreIdTokenClaims, CoreRsaPrivateSigningKey};
    use openidconnect::{
        Audience, EmptyAdditionalClaims, JsonWebKeyId, PrivateSigningKey, StandardClaims,
        SubjectIdentifier,
    };

    const ISSUER: &str = "https://sso.lab.example/realms/lab";
    const CLIENT: &str = "lanes";

    fn key(pem: &str) -> CoreRsaPrivateSigningKey {
        CoreRsaPrivateSigningKey::from_pem(pem, Some(JsonWebKeyId::new("k1".into()))).unwrap()
    }

    fn key_a() -> CoreRsaPrivateSigningKey {
        key(include_str!("testdata/key-a.pem"))
    }

    fn key_b() -> CoreRsaPrivateSigningKey {
        key(include_str!("testdata/key-b.pem"))
    }

    fn config() -> OidcConfig {
        OidcConfig {
            issuer: ISSUER.into(),
            name: "Lab SSO".into(),
            client_id: CLIENT.into(),
            client_secret: None,
            redirect_url: None,
            scopes: vec![],
            username_claim: "preferred_username".into(),
            groups_claim: "groups".into(),
            unix_user_claim: None,
            unix_from_ldap: false,
            clock_skew: Duration::from_secs(60),
        }
    }

    struct Made {
        issuer: &'static str,
        audience: &'static str,
        issued: DateTime<Utc>,
        expires: DateTime<Utc>,
        nonce: &'static str,
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn good() -> Made {
        Made {
            issuer: ISSUER,
            audience: CLIENT,
            issued: now() - chrono::Duration::seconds(5),
            expires: now() + chrono::Duration::minutes(5),
            nonce: "n-0S6_WzA2Mj",
        }
    }

    fn signed(made: Made, signer: &CoreRsaPrivateSigningKey) -> String {
        let claims = CoreIdTokenClaims::new(
            IssuerUrl::new(made.issuer.into()).unwrap(),
            vec![Audience::new(made.audience.into())],
            made.expires,
            made.issued,
            StandardClaims::new(SubjectIdentifier::new("248289761001".into())),
            EmptyAdditionalClaims {},
        )
        .set_nonce(Some(Nonce::new(made.nonce.into())));
        CoreIdToken::new(
            claims,
            signer,
            CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
            None,
            None,
        )
        .unwrap()
        .to_string()
    }

    /// Checks `token` as a sign-in does, against key A's key set.
    fn check(token: &str) -> Result<(), String> {
        let token: FullIdToken = token.parse().map_err(|e| format!("unreadable: {e}"))?;
        let keys = openidconnect::JsonWebKeySet::new(vec![key_a().as_verification_key()]);
        let verifier = verifier(
            &config(),
            IssuerUrl::new(ISSUER.into()).unwrap(),
            keys,
            [CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256].into_iter(),
            now(),
        );
        token
            .claims(&verifier, &Nonce::new("n-0S6_WzA2Mj".into()))
            .map(|_| ())
            .map_err(|e| verification_error(&e))
    }

    #[test]
    fn a_token_signed_by_the_providers_key_for_this_client_passes() {
        check(&signed(good(), &key_a())).unwrap();
    }

    #[test]
    fn a_token_signed_by_another_key_is_refused() {
        let err = check(&signed(good(), &key_b())).unwrap_err();
        assert!(err.to_lowercase().contains("signature"), "{err}");
    }

    #[test]
    fn an_unsigned_token_alg_none_is_refused() {
        use base64::Engine;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let header = b64(serde_json::json!({"alg": "none", "typ": "JWT"}));
        let claims = b64(serde_json::json!({
            "iss": ISSUER, "aud": CLIENT, "sub": "248289761001", "nonce": "n-0S6_WzA2Mj",
            "iat": now().timestamp() - 5, "exp": now().timestamp() + 300,
        }));
        assert!(check(&format!("{header}.{claims}.")).is_err());
    }

    #[test]
    fn a_wrong_issuer_or_audience_is_refused() {
        let err = check(&signed(
            Made {
                issuer: "https://evil.example",
                ..good()
            },
            &key_a(),
        ))
        .unwrap_err();
        assert!(err.contains("issuer") || err.contains("Issuer"), "{err}");
        let err = check(&signed(
            Made {
                audience: "another-app",
                ..good()
            },
            &key_a(),
        ))
        .unwrap_err();
        assert!(err.to_lowercase().contains("audience"), "{err}");
    }

    #[test]
    fn times_are_checked_within_the_clock_skew_and_no_further() {
        let minutes = chrono::Duration::minutes;
        // Expired 30 s ago: within the 60 s skew.
        check(&signed(
            Made {
                expires: now() - chrono::Duration::seconds(30),
                ..good()
            },
            &key_a(),
        ))
        .unwrap();
        let err = check(&signed(
            Made {
                expires: now() - minutes(2),
                ..good()
            },
            &key_a(),
        ))
        .unwrap_err();
        assert!(err.to_lowercase().contains("expired"), "{err}");
        assert!(check(&signed(
            Made {
                issued: now() + minutes(5),
                ..good()
            },
            &key_a()
        ))
        .is_err());
        assert!(check(&signed(
            Made {
                issued: now() - minutes(30),
                ..good()
            },
            &key_a()
        ))
        .is_err());
    }

    #[test]
    fn a_token_for_another_sign_in_wrong_nonce_is_refused() {
        let err = check(&signed(
            Made {
                nonce: "another",
                ..good()
            },
            &key_a(),
        ))
        .unwrap_err();
        assert!(err.to_lowercase().contains("nonce"), "{err}");
    }
}
