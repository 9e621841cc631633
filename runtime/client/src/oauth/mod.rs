//! The MCP client's OAuth 2.1 client (MCP authorization, revisions 2025-03-26 to
//! 2026-07-28), plugged into the HTTP transports as an
//! [`AuthProvider`]: the transport asks it for the `Authorization` header and tells it about
//! every 401/403; it does whatever obtains better credentials and says whether to retry.
//!
//! What it does, in the order a first connection meets it:
//! - **Discovery**: the `WWW-Authenticate` challenge's `resource_metadata`, else the
//!   well-known Protected Resource Metadata URLs (path-inserted, then root); the metadata
//!   must describe this server. Then the authorization server's metadata (RFC 8414 or OpenID
//!   Connect, path-insertion variants in the MCP order), whose `issuer` must be the one it
//!   was fetched for. Servers without resource metadata (2025-03-26) get metadata at their
//!   root or the fixed `/authorize`, `/token`, `/register` endpoints.
//! - **Client identity**: a pre-registered client, else a Client ID Metadata Document URL
//!   when the authorization server supports them, else dynamic client registration; the
//!   registration is stored bound to its issuer and never shown to another one.
//! - **Grant**: authorization code with PKCE S256, `state`, the `resource` indicator (RFC
//!   8707) and the RFC 9207 `iss` check, through an [`AuthorizationHandler`] (the user's
//!   browser and a loopback listener, [`LoopbackRedirect`], or [`HeadlessRedirect`] where no
//!   user is involved); or client credentials; or cross-app access (SEP-990: an ID
//!   token exchanged at the enterprise IdP for an ID-JAG, then a JWT bearer grant).
//! - **Scopes**: the challenge's `scope`, else the resource metadata's `scopes_supported`,
//!   else none; `offline_access` only when the authorization server lists it. A 403
//!   `insufficient_scope` re-authorizes with the union of what was asked before and what
//!   the challenge names, at most a few times per scope set (then the refusal is final).
//! - **Lifetime**: tokens are refreshed shortly before they expire and on a 401 when a
//!   refresh token exists; when the resource metadata names another authorization server
//!   the old tokens and registration are dropped.
//!
//! Tokens, secrets, codes and verifiers are never logged and never appear in errors.

mod discovery;
mod error;
mod flow;
mod loopback;
mod net;
mod store;
mod token;

pub use discovery::{
    bearer_challenge, parse_www_authenticate, AuthorizationServerMetadata, Challenge,
    ProtectedResourceMetadata,
};
pub use error::OAuthError;
pub use flow::{AuthorizationHandler, HeadlessRedirect};
pub use loopback::LoopbackRedirect;
pub use store::{ClientRegistration, InMemoryTokenStore, StoreError, StoredTokens, TokenStore};
pub use token::SigningKey;

use crate::auth::{AuthChallenge, AuthError, AuthProvider};
use discovery::Discovery;
use flow::{AuthorizationRequest, Expected, Pkce};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use token::{ClientAuth, TokenResponse};
use toolyard_proto::BoxFuture;
use url::Url;

const GRANT_AUTHORIZATION_CODE: &str = "authorization_code";
const GRANT_REFRESH_TOKEN: &str = "refresh_token";
const GRANT_CLIENT_CREDENTIALS: &str = "client_credentials";
const GRANT_JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const GRANT_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const TOKEN_TYPE_ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";
const TOKEN_TYPE_ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
const OFFLINE_ACCESS: &str = "offline_access";
/// A 401 this soon after a refresh is not answered with another refresh.
const REFRESH_COOLDOWN: Duration = Duration::from_secs(10);
/// After a failed renewal of expiring tokens, requests go out with the old token for this
/// long before renewal is tried again (an unreachable authorization server must not slow
/// every request down by a timeout).
const RENEW_BACKOFF: Duration = Duration::from_secs(30);

/// A client registered with the authorization server out of band.
#[derive(Clone)]
pub struct PreRegisteredClient {
    /// The `client_id`.
    pub client_id: String,
    /// The `client_secret` of a confidential client.
    pub client_secret: Option<String>,
    /// The issuer the client is registered with. When set, the client refuses to use the
    /// credentials with another authorization server (MCP: credentials are bound to their
    /// issuer); when `None`, they are used with whichever server the MCP server names.
    pub issuer: Option<String>,
}

impl PreRegisteredClient {
    /// A client with an id and perhaps a secret, for any issuer.
    pub fn new(client_id: impl Into<String>, client_secret: Option<String>) -> Self {
        PreRegisteredClient {
            client_id: client_id.into(),
            client_secret,
            issuer: None,
        }
    }
}

impl fmt::Debug for PreRegisteredClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreRegisteredClient")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// Cross-app access (SEP-990, enterprise-managed authorization): the user's ID token from
/// the enterprise identity provider is exchanged there (RFC 8693) for an Identity Assertion
/// JWT Authorization Grant, which the MCP server's authorization server takes in a JWT
/// bearer grant (RFC 7523). Needs a [`PreRegisteredClient`] at the authorization server.
#[derive(Clone)]
pub struct CrossAppAccess {
    /// The identity provider's token endpoint.
    pub idp_token_endpoint: String,
    /// The user's ID token, issued by the identity provider to this client.
    pub id_token: String,
    /// This client's id at the identity provider.
    pub idp_client_id: String,
    /// This client's secret at the identity provider (HTTP Basic), if it has one.
    pub idp_client_secret: Option<String>,
}

impl fmt::Debug for CrossAppAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrossAppAccess")
            .field("idp_token_endpoint", &self.idp_token_endpoint)
            .field("idp_client_id", &self.idp_client_id)
            .finish_non_exhaustive()
    }
}

/// How tokens are obtained.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Grant {
    /// Authorization code with PKCE, on behalf of a user, through the
    /// [`AuthorizationHandler`].
    #[default]
    AuthorizationCode,
    /// Client credentials: the client acts on its own behalf (needs a
    /// [`PreRegisteredClient`] with a secret, or a [`SigningKey`] for `private_key_jwt`).
    ClientCredentials,
    /// Cross-app access (SEP-990).
    CrossApp(CrossAppAccess),
    /// A JWT bearer grant (RFC 7523 §2.1) with an assertion the client already holds, such
    /// as a workload identity token (workload identity federation, SEP-1933).
    JwtBearer(JwtAssertion),
}

/// An assertion for [`Grant::JwtBearer`] (a JWT; never logged).
#[derive(Clone)]
pub struct JwtAssertion(pub String);

impl fmt::Debug for JwtAssertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JwtAssertion(<redacted>)")
    }
}

/// Builds an [`OAuthClient`].
pub struct OAuthClientBuilder {
    server_url: String,
    client_name: String,
    redirect_uri: String,
    application_type: String,
    pre_registered: Option<PreRegisteredClient>,
    client_metadata_url: Option<String>,
    signing_key: Option<SigningKey>,
    grant: Grant,
    handler: Option<Arc<dyn AuthorizationHandler>>,
    store: Option<Arc<dyn TokenStore>>,
    http: Option<reqwest::Client>,
    offline_access: bool,
    max_attempts: u32,
    attempt_window: Duration,
    refresh_margin: Duration,
    allow_http: bool,
}

impl OAuthClientBuilder {
    /// The name shown to the user by the authorization server (`client_name`).
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The redirect URI registered and sent in authorization requests (default
    /// `http://127.0.0.1:8976/callback`). The [`AuthorizationHandler`] must receive the
    /// redirect there.
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> Self {
        self.redirect_uri = uri.into();
        self
    }

    /// The `application_type` sent in dynamic client registration: `native` (default, for
    /// desktop apps, CLIs and loopback redirects) or `web`.
    pub fn application_type(mut self, kind: impl Into<String>) -> Self {
        self.application_type = kind.into();
        self
    }

    /// Uses a client registered out of band (tried before anything else).
    pub fn pre_registered(mut self, client: PreRegisteredClient) -> Self {
        self.pre_registered = Some(client);
        self
    }

    /// The HTTPS URL of this client's Client ID Metadata Document, used as `client_id` with
    /// authorization servers that advertise `client_id_metadata_document_supported`. The
    /// document must be served there ([`OAuthClient::client_metadata_document`] builds it).
    pub fn client_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// A private key for `private_key_jwt` token endpoint authentication, used when the
    /// authorization server accepts that method.
    pub fn signing_key(mut self, key: SigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// How tokens are obtained (default: authorization code).
    pub fn grant(mut self, grant: Grant) -> Self {
        self.grant = grant;
        self
    }

    /// Who takes the user through authorization. The default, [`HeadlessRedirect`], only
    /// works with authorization servers that approve without a user; desktop and CLI
    /// clients want [`LoopbackRedirect::system_browser`].
    pub fn authorization_handler(mut self, handler: Arc<dyn AuthorizationHandler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Where tokens and registrations are kept (default: an [`InMemoryTokenStore`]).
    pub fn token_store(mut self, store: Arc<dyn TokenStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The HTTP client for metadata, registration and token requests. It should not follow
    /// redirects (the default one does not): a redirected token request would carry
    /// credentials to wherever the redirect points.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Whether to ask for `offline_access` (a refresh token) when the authorization server
    /// lists it in `scopes_supported` (default true).
    pub fn offline_access(mut self, on: bool) -> Self {
        self.offline_access = on;
        self
    }

    /// At most `max` authorizations for the same scope set within `window` (default 3 in 5
    /// minutes); past that a refusal is final (step-up loops end).
    pub fn retry_limit(mut self, max: u32, window: Duration) -> Self {
        self.max_attempts = max.max(1);
        self.attempt_window = window;
        self
    }

    /// Allows authorization server endpoints over plain `http` on hosts other than loopback
    /// (default: refused, as OAuth 2.1 requires TLS; loopback hosts are always allowed).
    pub fn allow_insecure_http(mut self, allow: bool) -> Self {
        self.allow_http = allow;
        self
    }

    /// Renews tokens this long before they expire (default 60 s).
    pub fn refresh_margin(mut self, margin: Duration) -> Self {
        self.refresh_margin = margin;
        self
    }

    /// The client.
    pub fn build(self) -> Result<OAuthClient, OAuthError> {
        let server = Url::parse(&self.server_url).map_err(|e| {
            OAuthError::Config(format!("MCP server URL {:?}: {e}", self.server_url))
        })?;
        if !matches!(server.scheme(), "http" | "https") {
            return Err(OAuthError::Config(format!(
                "MCP server URL {} is not http(s)",
                self.server_url
            )));
        }
        Url::parse(&self.redirect_uri).map_err(|e| {
            OAuthError::Config(format!("redirect URI {:?}: {e}", self.redirect_uri))
        })?;
        if let Some(cimd) = &self.client_metadata_url {
            let ok = Url::parse(cimd)
                .map(|u| u.scheme() == "https" && u.path() != "/" && !u.path().is_empty())
                .unwrap_or(false);
            if !ok {
                return Err(OAuthError::Config(format!(
                    "client metadata document URL {cimd:?} must be https with a path"
                )));
            }
        }
        if matches!(self.grant, Grant::CrossApp(_)) && self.pre_registered.is_none() {
            return Err(OAuthError::Config(
                "cross-app access needs a pre-registered client at the authorization server"
                    .to_owned(),
            ));
        }
        let http = match self.http {
            Some(h) => h,
            None => reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| OAuthError::Config(format!("HTTP client: {e}")))?,
        };
        Ok(OAuthClient {
            inner: Arc::new(Inner {
                server_key: self.server_url,
                server,
                client_name: self.client_name,
                redirect_uri: self.redirect_uri,
                application_type: self.application_type,
                pre_registered: self.pre_registered,
                client_metadata_url: self.client_metadata_url,
                signing_key: self.signing_key,
                grant: self.grant,
                handler: self
                    .handler
                    .unwrap_or_else(|| Arc::new(HeadlessRedirect::new())),
                store: self
                    .store
                    .unwrap_or_else(|| Arc::new(InMemoryTokenStore::new())),
                http,
                offline_access: self.offline_access,
                max_attempts: self.max_attempts,
                attempt_window: self.attempt_window,
                refresh_margin: self.refresh_margin,
                allow_http: self.allow_http,
                flow: tokio::sync::Mutex::new(FlowState::default()),
                generation: AtomicU64::new(0),
            }),
        })
    }
}

impl fmt::Debug for OAuthClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClientBuilder")
            .field("server_url", &self.server_url)
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

/// An OAuth 2.1 client for one MCP server, usable as the [`AuthProvider`] of an HTTP
/// transport. Cheap to clone; clones share tokens and state.
#[derive(Clone)]
pub struct OAuthClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("server", &self.inner.server_key)
            .field("grant", &self.inner.grant)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// The MCP server URL as configured: the token store key.
    server_key: String,
    server: Url,
    client_name: String,
    redirect_uri: String,
    application_type: String,
    pre_registered: Option<PreRegisteredClient>,
    client_metadata_url: Option<String>,
    signing_key: Option<SigningKey>,
    grant: Grant,
    handler: Arc<dyn AuthorizationHandler>,
    store: Arc<dyn TokenStore>,
    http: reqwest::Client,
    offline_access: bool,
    max_attempts: u32,
    attempt_window: Duration,
    refresh_margin: Duration,
    allow_http: bool,
    /// Held while credentials are being obtained: one flow at a time.
    flow: tokio::sync::Mutex<FlowState>,
    /// Bumped whenever new tokens are stored; a refusal that waited for another flow to
    /// finish just retries.
    generation: AtomicU64,
}

#[derive(Default)]
struct FlowState {
    /// The last discovery, for renewals outside a challenge.
    discovery: Option<Arc<Discovery>>,
    /// The scopes last asked for, and the issuer they were asked from.
    scopes: Option<(Option<String>, Vec<String>)>,
    /// Recent authorizations per (issuer, scope set).
    attempts: HashMap<String, VecDeque<Instant>>,
    /// When a 401 was last answered with a refresh.
    refreshed_at: Option<Instant>,
    /// When renewing expiring tokens last failed.
    renew_failed_at: Option<Instant>,
}

impl OAuthClient {
    /// A builder for the MCP server at `server_url` (the Streamable HTTP endpoint).
    pub fn builder(server_url: impl Into<String>) -> OAuthClientBuilder {
        OAuthClientBuilder {
            server_url: server_url.into(),
            client_name: "Toolyard MCP client".to_owned(),
            redirect_uri: "http://127.0.0.1:8976/callback".to_owned(),
            application_type: "native".to_owned(),
            pre_registered: None,
            client_metadata_url: None,
            signing_key: None,
            grant: Grant::AuthorizationCode,
            handler: None,
            store: None,
            http: None,
            offline_access: true,
            max_attempts: 3,
            attempt_window: Duration::from_secs(300),
            refresh_margin: Duration::from_secs(60),
            allow_http: false,
        }
    }

    /// The Client ID Metadata Document to serve at the configured
    /// [`client_metadata_url`](OAuthClientBuilder::client_metadata_url), if there is one.
    pub fn client_metadata_document(&self) -> Option<Value> {
        let i = &self.inner;
        let url = i.client_metadata_url.as_ref()?;
        let mut doc = json!({
            "client_id": url,
            "client_name": i.client_name,
            "redirect_uris": [i.redirect_uri],
            "grant_types": i.registration_grant_types(),
            "response_types": ["code"],
            "token_endpoint_auth_method": if i.signing_key.is_some() { "private_key_jwt" } else { "none" },
        });
        if matches!(i.grant, Grant::ClientCredentials) {
            doc["response_types"] = json!([]);
        }
        Some(doc)
    }

    /// Obtains credentials now, without waiting for the server to refuse a request
    /// (discovery from the well-known URLs, then the configured grant).
    pub async fn authorize(&self) -> Result<(), OAuthError> {
        self.inner
            .challenge(AuthChallenge {
                status: 401,
                www_authenticate: None,
                resource: self.inner.server_key.clone(),
            })
            .await
    }

    /// Forgets the tokens of this server (the client registration is kept).
    pub async fn sign_out(&self) -> Result<(), OAuthError> {
        let _flow = self.inner.flow.lock().await;
        self.inner.set_tokens(None).await
    }

    /// The tokens currently held.
    pub async fn tokens(&self) -> Result<Option<StoredTokens>, OAuthError> {
        self.inner.tokens().await
    }
}

impl AuthProvider for OAuthClient {
    fn authorization(&self) -> BoxFuture<Result<Option<String>, AuthError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let tokens = inner.current_tokens().await.map_err(AuthError::from)?;
            Ok(tokens.map(|t| format!("Bearer {}", t.access_token)))
        })
    }

    fn unauthorized(&self, challenge: AuthChallenge) -> BoxFuture<Result<(), AuthError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            inner.challenge(challenge).await.map_err(|e| {
                tracing::warn!(server = %inner.server_key, error = %e, "OAuth: no new credentials");
                AuthError::from(e)
            })
        })
    }
}

fn split_scopes(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in s.split_ascii_whitespace() {
        if !out.iter().any(|x| x == s) {
            out.push(s.to_owned());
        }
    }
    out
}

fn union(into: &mut Vec<String>, more: impl IntoIterator<Item = String>) {
    for s in more {
        if !into.contains(&s) {
            into.push(s);
        }
    }
}

impl Inner {
    async fn tokens(&self) -> Result<Option<StoredTokens>, OAuthError> {
        self.store
            .tokens(&self.server_key)
            .await
            .map_err(|e| OAuthError::Store(e.0))
    }

    async fn set_tokens(&self, tokens: Option<StoredTokens>) -> Result<(), OAuthError> {
        self.store
            .set_tokens(&self.server_key, tokens)
            .await
            .map_err(|e| OAuthError::Store(e.0))
    }

    async fn store_new_tokens(&self, tokens: StoredTokens) -> Result<(), OAuthError> {
        self.set_tokens(Some(tokens)).await?;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn registration_grant_types(&self) -> Vec<&'static str> {
        match self.grant {
            Grant::AuthorizationCode => vec![GRANT_AUTHORIZATION_CODE, GRANT_REFRESH_TOKEN],
            Grant::ClientCredentials => vec![GRANT_CLIENT_CREDENTIALS],
            Grant::CrossApp(_) | Grant::JwtBearer(_) => vec![GRANT_JWT_BEARER],
        }
    }

    /// The tokens to send, renewed first when they are about to expire. A failed renewal
    /// is not an error here: the old token goes out and the server's 401 starts a flow.
    async fn current_tokens(&self) -> Result<Option<StoredTokens>, OAuthError> {
        let Some(tokens) = self.tokens().await? else {
            return Ok(None);
        };
        if !tokens.expires_within(self.refresh_margin) {
            return Ok(Some(tokens));
        }
        let mut st = self.flow.lock().await;
        // Another task may have renewed them while this one waited.
        let Some(tokens) = self.tokens().await? else {
            return Ok(None);
        };
        if !tokens.expires_within(self.refresh_margin)
            || st
                .renew_failed_at
                .is_some_and(|t| t.elapsed() < RENEW_BACKOFF)
        {
            return Ok(Some(tokens));
        }
        match self.renew(&mut st, &tokens).await {
            Ok(Some(new)) => Ok(Some(new)),
            Ok(None) => Ok(Some(tokens)),
            Err(e) => {
                tracing::debug!(server = %self.server_key, error = %e, "OAuth: renewal failed");
                st.renew_failed_at = Some(Instant::now());
                if token::is_invalid_grant(&e) {
                    self.set_tokens(None).await?;
                    return Ok(None);
                }
                Ok(Some(tokens))
            }
        }
    }

    /// Renews expiring tokens without user interaction: a refresh, or a new grant for
    /// the non-interactive grants. `Ok(None)`: nothing to renew with.
    async fn renew(
        &self,
        st: &mut FlowState,
        tokens: &StoredTokens,
    ) -> Result<Option<StoredTokens>, OAuthError> {
        let interactive = matches!(self.grant, Grant::AuthorizationCode);
        if tokens.refresh_token.is_none() && interactive {
            return Ok(None);
        }
        let disc = match &st.discovery {
            Some(d) => d.clone(),
            None => {
                let d = Arc::new(
                    discovery::discover(&self.http, &self.server, &Challenge::default()).await?,
                );
                self.check_transport_security(&d)?;
                st.discovery = Some(d.clone());
                d
            }
        };
        if disc.issuer != tokens.issuer {
            return Ok(None);
        }
        let new = if tokens.refresh_token.is_some() {
            self.refresh(&disc, tokens).await?
        } else {
            let scope = tokens.scope.clone();
            self.grant_tokens(&disc, scope.as_deref()).await?
        };
        self.store_new_tokens(new.clone()).await?;
        Ok(Some(new))
    }

    /// Answers a refusal of the MCP server.
    async fn challenge(&self, challenge: AuthChallenge) -> Result<(), OAuthError> {
        let seen = self.generation.load(Ordering::Acquire);
        let bearer = bearer_challenge(challenge.www_authenticate.as_deref());
        let step_up = match challenge.status {
            401 => false,
            403 if bearer.param("error") == Some("insufficient_scope") => true,
            403 => {
                return Err(OAuthError::Forbidden {
                    error: bearer.param("error").map(str::to_owned),
                })
            }
            other => {
                return Err(OAuthError::Authorization(format!(
                    "HTTP {other} is not an authorization challenge"
                )))
            }
        };
        let mut st = self.flow.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            // New tokens arrived while this refusal waited for the flow: try them.
            return Ok(());
        }
        let disc = Arc::new(discovery::discover(&self.http, &self.server, &bearer).await?);
        self.check_transport_security(&disc)?;
        st.discovery = Some(disc.clone());

        let mut tokens = self.tokens().await?;
        if tokens.as_ref().is_some_and(|t| t.issuer != disc.issuer) {
            tracing::info!(server = %self.server_key, issuer = ?disc.issuer,
                "OAuth: the server moved to another authorization server; dropping its tokens");
            self.set_tokens(None).await?;
            tokens = None;
        }
        if st
            .scopes
            .as_ref()
            .is_some_and(|(iss, _)| *iss != disc.issuer)
        {
            st.scopes = None;
        }

        if !step_up {
            let cooling = st
                .refreshed_at
                .is_some_and(|t| t.elapsed() < REFRESH_COOLDOWN);
            if let Some(t) = tokens.as_ref().filter(|t| t.refresh_token.is_some()) {
                if !cooling {
                    match self.refresh(&disc, t).await {
                        Ok(new) => {
                            st.refreshed_at = Some(Instant::now());
                            self.store_new_tokens(new).await?;
                            return Ok(());
                        }
                        Err(e) => {
                            tracing::debug!(server = %self.server_key, error = %e,
                                "OAuth: refresh failed; authorizing again");
                        }
                    }
                }
            }
        }

        // Scope selection: the challenge's scope is authoritative for this request; without
        // one, the resource metadata's scopes_supported; plus whatever was asked for before
        // from this authorization server, so permissions are not lost.
        let wanted = match bearer.param("scope") {
            Some(s) => split_scopes(s),
            None => disc.default_scopes().unwrap_or_default(),
        };
        let mut scopes = st
            .scopes
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        union(&mut scopes, wanted);
        scopes.retain(|s| s != OFFLINE_ACCESS);

        self.count_attempt(&mut st, &disc, &scopes)?;
        let scope = (!scopes.is_empty()).then(|| scopes.join(" "));
        let new = self.grant_tokens(&disc, scope.as_deref()).await?;
        st.scopes = Some((disc.issuer.clone(), scopes));
        self.store_new_tokens(new).await?;
        Ok(())
    }

    /// Refuses authorization server endpoints over plain http to non-loopback hosts (codes,
    /// secrets and tokens would cross the network in the clear), unless allowed.
    fn check_transport_security(&self, disc: &Discovery) -> Result<(), OAuthError> {
        if self.allow_http {
            return Ok(());
        }
        let m = &disc.metadata;
        let endpoints = [
            disc.issuer.as_deref(),
            m.authorization_endpoint.as_deref(),
            m.token_endpoint.as_deref(),
            m.registration_endpoint.as_deref(),
        ];
        let xaa = match &self.grant {
            Grant::CrossApp(x) => Some(x.idp_token_endpoint.as_str()),
            _ => None,
        };
        for url in endpoints.into_iter().chain([xaa]).flatten() {
            if !discovery::secure_enough(url) {
                return Err(OAuthError::InsecureEndpoint(url.to_owned()));
            }
        }
        Ok(())
    }

    /// Counts one authorization for this scope set; past the limit, refuses.
    fn count_attempt(
        &self,
        st: &mut FlowState,
        disc: &Discovery,
        scopes: &[String],
    ) -> Result<(), OAuthError> {
        let mut sorted = scopes.to_vec();
        sorted.sort();
        let scope = sorted.join(" ");
        let key = format!("{}\n{scope}", disc.issuer.as_deref().unwrap_or(""));
        let now = Instant::now();
        let window = self.attempt_window;
        st.attempts.retain(|_, times| {
            times.retain(|t| now.duration_since(*t) < window);
            !times.is_empty()
        });
        let times = st.attempts.entry(key).or_default();
        if times.len() as u32 >= self.max_attempts {
            return Err(OAuthError::RetryLimit {
                scope,
                attempts: times.len() as u32,
                window_secs: window.as_secs(),
            });
        }
        times.push_back(now);
        Ok(())
    }

    /// Obtains tokens with the configured grant.
    async fn grant_tokens(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
    ) -> Result<StoredTokens, OAuthError> {
        match &self.grant {
            Grant::AuthorizationCode => self.authorization_code(disc, scope).await,
            Grant::ClientCredentials => self.client_credentials(disc, scope).await,
            Grant::CrossApp(xaa) => self.cross_app(disc, scope, xaa).await,
            Grant::JwtBearer(assertion) => self.jwt_bearer(disc, scope, assertion.0.clone()).await,
        }
    }

    fn token_endpoint<'a>(&self, disc: &'a Discovery) -> Result<&'a str, OAuthError> {
        disc.metadata.token_endpoint.as_deref().ok_or_else(|| {
            OAuthError::AuthorizationServerMetadata {
                issuer: disc.issuer.clone().unwrap_or_default(),
                message: "no token_endpoint".to_owned(),
            }
        })
    }

    /// The `aud` of client assertions: the issuer, else the token endpoint.
    fn audience<'a>(&self, disc: &'a Discovery, endpoint: &'a str) -> &'a str {
        disc.issuer.as_deref().unwrap_or(endpoint)
    }

    /// How to authenticate a client with an id, an optional secret and perhaps a method the
    /// authorization server registered, given what it supports.
    fn client_auth_for(
        &self,
        disc: &Discovery,
        client_id: &str,
        secret: Option<&str>,
        registered: Option<&str>,
    ) -> ClientAuth {
        let meta = &disc.metadata;
        let client_id = client_id.to_owned();
        if let Some(key) = &self.signing_key {
            let jwt = match registered {
                Some(m) => m == "private_key_jwt",
                None => meta.supports_auth_method("private_key_jwt"),
            };
            if jwt {
                return ClientAuth::PrivateKeyJwt {
                    client_id,
                    key: key.clone(),
                };
            }
        }
        let Some(secret) = secret.map(str::to_owned) else {
            return ClientAuth::None { client_id };
        };
        match registered {
            Some("client_secret_basic") => ClientAuth::SecretBasic { client_id, secret },
            Some("client_secret_post") => ClientAuth::SecretPost { client_id, secret },
            Some("none") => ClientAuth::None { client_id },
            _ if meta.supports_auth_method("client_secret_basic") => {
                ClientAuth::SecretBasic { client_id, secret }
            }
            _ if meta.supports_auth_method("client_secret_post") => {
                ClientAuth::SecretPost { client_id, secret }
            }
            _ if meta.supports_auth_method("none") => ClientAuth::None { client_id },
            _ => ClientAuth::SecretBasic { client_id, secret },
        }
    }

    /// The client identity to use with this authorization server: pre-registered, else a
    /// Client ID Metadata Document, else a stored registration for this issuer, else a new
    /// dynamic registration. The second value says whether it came from the store (and
    /// may be dropped if the server no longer knows it).
    async fn client_identity(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
    ) -> Result<(ClientAuth, bool), OAuthError> {
        if let Some(pre) = &self.pre_registered {
            if let (Some(bound), Some(current)) = (&pre.issuer, &disc.issuer) {
                if bound != current {
                    return Err(OAuthError::PreRegisteredIssuerMismatch {
                        bound: bound.clone(),
                        current: current.clone(),
                    });
                }
            }
            let auth =
                self.client_auth_for(disc, &pre.client_id, pre.client_secret.as_deref(), None);
            return Ok((auth, false));
        }
        if let Some(url) = &self.client_metadata_url {
            if disc.metadata.client_id_metadata_document_supported {
                return Ok((self.client_auth_for(disc, url, None, None), false));
            }
        }
        let stored = self
            .store
            .registration(&self.server_key)
            .await
            .map_err(|e| OAuthError::Store(e.0))?;
        if let Some(reg) = stored.filter(|r| r.issuer == disc.issuer && r.is_current()) {
            let auth = self.client_auth_for(
                disc,
                &reg.client_id,
                reg.client_secret.as_deref(),
                reg.token_endpoint_auth_method.as_deref(),
            );
            return Ok((auth, true));
        }
        let reg = self.register(disc, scope).await?;
        let auth = self.client_auth_for(
            disc,
            &reg.client_id,
            reg.client_secret.as_deref(),
            reg.token_endpoint_auth_method.as_deref(),
        );
        self.store
            .set_registration(&self.server_key, Some(reg))
            .await
            .map_err(|e| OAuthError::Store(e.0))?;
        Ok((auth, true))
    }

    /// Dynamic client registration (RFC 7591).
    async fn register(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
    ) -> Result<ClientRegistration, OAuthError> {
        let endpoint = disc
            .metadata
            .registration_endpoint
            .as_deref()
            .ok_or_else(|| {
                OAuthError::NoClientIdentity(
                    disc.issuer
                        .clone()
                        .unwrap_or_else(|| self.server_key.clone()),
                )
            })?;
        let meta = &disc.metadata;
        let method = match &meta.token_endpoint_auth_methods_supported {
            None => "none",
            Some(list) => ["none", "client_secret_basic", "client_secret_post"]
                .into_iter()
                .find(|m| list.iter().any(|x| x == m))
                .unwrap_or("client_secret_basic"),
        };
        let mut body = json!({
            "client_name": self.client_name,
            "redirect_uris": [self.redirect_uri],
            "grant_types": self.registration_grant_types(),
            "token_endpoint_auth_method": method,
            "application_type": self.application_type,
        });
        if matches!(self.grant, Grant::AuthorizationCode) {
            body["response_types"] = json!(["code"]);
        }
        if let Some(scope) = scope {
            body["scope"] = json!(scope);
        }
        let answer = net::post_json(&self.http, endpoint, &body).await?;
        let fail = |message: String| OAuthError::Registration {
            endpoint: endpoint.to_owned(),
            message,
        };
        if !answer.status.is_success() {
            let (error, description) = net::oauth_error(&answer.body);
            return Err(fail(format!(
                "HTTP {} {error}{}",
                answer.status.as_u16(),
                description.map(|d| format!(" ({d})")).unwrap_or_default()
            )));
        }
        #[derive(serde::Deserialize)]
        struct Registered {
            client_id: String,
            #[serde(default)]
            client_secret: Option<String>,
            #[serde(default)]
            token_endpoint_auth_method: Option<String>,
            #[serde(default)]
            client_secret_expires_at: Option<u64>,
        }
        let r: Registered = serde_json::from_slice(&answer.body)
            .map_err(|e| fail(format!("not a registration response: {e}")))?;
        if r.client_id.is_empty() {
            return Err(fail("empty client_id".to_owned()));
        }
        tracing::debug!(endpoint, client_id = r.client_id, "OAuth: registered");
        Ok(ClientRegistration {
            issuer: disc.issuer.clone(),
            client_id: r.client_id,
            client_secret: r.client_secret.filter(|s| !s.is_empty()),
            token_endpoint_auth_method: r.token_endpoint_auth_method,
            client_secret_expires_at: r
                .client_secret_expires_at
                .filter(|&t| t > 0)
                .map(|t| std::time::UNIX_EPOCH + Duration::from_secs(t)),
        })
    }

    /// Drops a stored registration the authorization server rejected, so the next attempt
    /// registers again.
    async fn forget_rejected_registration(&self, e: &OAuthError, from_store: bool) {
        let rejected =
            matches!(e, OAuthError::TokenRefused { error, .. } if error == "invalid_client");
        if rejected && from_store {
            if let Err(e) = self.store.set_registration(&self.server_key, None).await {
                tracing::debug!(error = %e, "OAuth: could not drop the registration");
            }
        }
    }

    /// The authorization code grant with PKCE through the authorization handler.
    async fn authorization_code(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
    ) -> Result<StoredTokens, OAuthError> {
        let meta = &disc.metadata;
        let issuer_label = disc
            .issuer
            .clone()
            .unwrap_or_else(|| self.server_key.clone());
        let authorization_endpoint = meta.authorization_endpoint.as_deref().ok_or_else(|| {
            OAuthError::AuthorizationServerMetadata {
                issuer: issuer_label.clone(),
                message: "no authorization_endpoint".to_owned(),
            }
        })?;
        let token_endpoint = self.token_endpoint(disc)?;
        let s256 = meta
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|x| x == "S256"));
        if !s256 {
            return Err(OAuthError::PkceUnsupported(issuer_label));
        }
        let scope = match scope {
            Some(s) if self.offline_access && meta.supports_scope(OFFLINE_ACCESS) => {
                Some(format!("{s} {OFFLINE_ACCESS}"))
            }
            other => other.map(str::to_owned),
        };
        let (auth, from_store) = self.client_identity(disc, scope.as_deref()).await?;
        let pkce = Pkce::new();
        let state = flow::random_token(32);
        let url = AuthorizationRequest {
            endpoint: authorization_endpoint,
            client_id: auth.client_id(),
            redirect_uri: &self.redirect_uri,
            scope: scope.as_deref(),
            resource: &disc.resource,
            code_challenge: &pkce.challenge,
            state: &state,
        }
        .url()?;
        tracing::debug!(server = %self.server_key, endpoint = authorization_endpoint,
            scope = scope.as_deref().unwrap_or(""), "OAuth: authorizing");
        let redirect = self
            .handler
            .authorize(url)
            .await
            .map_err(|e| OAuthError::Authorization(e.0))?;
        let code = flow::validate_redirect(
            &redirect,
            &Expected {
                redirect_uri: &self.redirect_uri,
                state: &state,
                issuer: disc.issuer.as_deref(),
                iss_supported: meta.authorization_response_iss_parameter_supported,
            },
        )?;
        let params = vec![
            ("grant_type", GRANT_AUTHORIZATION_CODE.to_owned()),
            ("code", code),
            ("redirect_uri", self.redirect_uri.clone()),
            ("code_verifier", pkce.verifier),
            ("resource", disc.resource.clone()),
        ];
        let response = match token::request(
            &self.http,
            token_endpoint,
            params,
            &auth,
            self.audience(disc, token_endpoint),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                self.forget_rejected_registration(&e, from_store).await;
                return Err(e);
            }
        };
        token::require_bearer(token_endpoint, &response)?;
        Ok(response.into_stored(disc.issuer.clone(), scope.as_deref(), None))
    }

    /// The refresh token grant.
    async fn refresh(
        &self,
        disc: &Discovery,
        tokens: &StoredTokens,
    ) -> Result<StoredTokens, OAuthError> {
        let Some(refresh_token) = tokens.refresh_token.clone() else {
            return Err(OAuthError::Authorization("no refresh token".to_owned()));
        };
        let token_endpoint = self.token_endpoint(disc)?;
        let (auth, from_store) = self.client_identity(disc, None).await?;
        let params = vec![
            ("grant_type", GRANT_REFRESH_TOKEN.to_owned()),
            ("refresh_token", refresh_token.clone()),
            ("resource", disc.resource.clone()),
        ];
        let response = token::request(
            &self.http,
            token_endpoint,
            params,
            &auth,
            self.audience(disc, token_endpoint),
        )
        .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                self.forget_rejected_registration(&e, from_store).await;
                if token::is_invalid_grant(&e) {
                    self.set_tokens(None).await?;
                }
                return Err(e);
            }
        };
        token::require_bearer(token_endpoint, &response)?;
        tracing::debug!(server = %self.server_key, "OAuth: refreshed");
        Ok(response.into_stored(
            disc.issuer.clone(),
            tokens.scope.as_deref(),
            Some(refresh_token),
        ))
    }

    /// The client credentials grant.
    async fn client_credentials(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
    ) -> Result<StoredTokens, OAuthError> {
        let token_endpoint = self.token_endpoint(disc)?;
        let (auth, _) = self.client_identity(disc, scope).await?;
        let mut params = vec![
            ("grant_type", GRANT_CLIENT_CREDENTIALS.to_owned()),
            ("resource", disc.resource.clone()),
        ];
        if let Some(scope) = scope {
            params.push(("scope", scope.to_owned()));
        }
        let response = token::request(
            &self.http,
            token_endpoint,
            params,
            &auth,
            self.audience(disc, token_endpoint),
        )
        .await?;
        token::require_bearer(token_endpoint, &response)?;
        Ok(response.into_stored(disc.issuer.clone(), scope, None))
    }

    /// Cross-app access: ID token -> ID-JAG at the identity provider, then the JWT bearer
    /// grant at the authorization server.
    async fn cross_app(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
        xaa: &CrossAppAccess,
    ) -> Result<StoredTokens, OAuthError> {
        let issuer = disc.issuer.clone().ok_or_else(|| {
            OAuthError::ResourceMetadata(
                "cross-app access needs an authorization server with metadata".to_owned(),
            )
        })?;
        let idp_auth = match &xaa.idp_client_secret {
            Some(secret) => ClientAuth::SecretBasic {
                client_id: xaa.idp_client_id.clone(),
                secret: secret.clone(),
            },
            None => ClientAuth::None {
                client_id: xaa.idp_client_id.clone(),
            },
        };
        let mut params = vec![
            ("grant_type", GRANT_TOKEN_EXCHANGE.to_owned()),
            ("requested_token_type", TOKEN_TYPE_ID_JAG.to_owned()),
            ("audience", issuer.clone()),
            ("resource", disc.resource.clone()),
            ("subject_token", xaa.id_token.clone()),
            ("subject_token_type", TOKEN_TYPE_ID_TOKEN.to_owned()),
        ];
        if let Some(scope) = scope {
            params.push(("scope", scope.to_owned()));
        }
        let exchanged: TokenResponse = token::request(
            &self.http,
            &xaa.idp_token_endpoint,
            params,
            &idp_auth,
            &xaa.idp_token_endpoint,
        )
        .await?;
        if let Some(t) = exchanged.issued_token_type.as_deref() {
            if t != TOKEN_TYPE_ID_JAG {
                return Err(OAuthError::InvalidTokenResponse {
                    endpoint: xaa.idp_token_endpoint.clone(),
                    message: format!("issued_token_type {t:?}, not an ID-JAG"),
                });
            }
        }
        self.jwt_bearer(disc, scope, exchanged.access_token).await
    }

    /// The JWT bearer grant (RFC 7523 §2.1).
    async fn jwt_bearer(
        &self,
        disc: &Discovery,
        scope: Option<&str>,
        assertion: String,
    ) -> Result<StoredTokens, OAuthError> {
        let token_endpoint = self.token_endpoint(disc)?;
        let (auth, _) = self.client_identity(disc, scope).await?;
        let mut params = vec![
            ("grant_type", GRANT_JWT_BEARER.to_owned()),
            ("assertion", assertion),
            ("resource", disc.resource.clone()),
        ];
        if let Some(scope) = scope {
            params.push(("scope", scope.to_owned()));
        }
        let audience = self.audience(disc, token_endpoint);
        let response = token::request(&self.http, token_endpoint, params, &auth, audience).await?;
        token::require_bearer(token_endpoint, &response)?;
        Ok(response.into_stored(disc.issuer.clone(), scope, None))
    }
}
