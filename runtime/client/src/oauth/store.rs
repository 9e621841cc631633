//! Where tokens and client registrations live between requests and, with a persistent
//! implementation, between runs. Keyed by the MCP server URL so one store can serve many
//! servers; each entry remembers the authorization server (`issuer`) that issued it, so a
//! server that moves to another authorization server never gets the old credentials
//! (MCP: credentials are bound to the issuer that issued them).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use toolyard_proto::BoxFuture;

/// Tokens obtained for one MCP server.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredTokens {
    /// The access token (sent as `Authorization: Bearer ...`).
    pub access_token: String,
    /// The refresh token, when the authorization server issued one.
    pub refresh_token: Option<String>,
    /// When the access token expires (from `expires_in`), if the server said.
    pub expires_at: Option<SystemTime>,
    /// The scope granted (the response's `scope`, else the scope requested), space-separated.
    pub scope: Option<String>,
    /// The issuer of the authorization server that issued the tokens; `None` for the
    /// 2025-03-26 fallback endpoints, which have no metadata.
    pub issuer: Option<String>,
}

impl StoredTokens {
    /// Whether the access token expires within `margin` (or already has).
    pub fn expires_within(&self, margin: Duration) -> bool {
        match self.expires_at {
            Some(at) => at
                .duration_since(SystemTime::now())
                .map(|left| left <= margin)
                .unwrap_or(true),
            None => false,
        }
    }
}

impl fmt::Debug for StoredTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredTokens")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// A client identity obtained from an authorization server (dynamic client registration,
/// RFC 7591), bound to that server's issuer.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientRegistration {
    /// The issuer that registered the client; the registration is used with it only.
    pub issuer: Option<String>,
    /// The `client_id`.
    pub client_id: String,
    /// The `client_secret`, for confidential registrations.
    pub client_secret: Option<String>,
    /// The token endpoint authentication method the server registered
    /// (`client_secret_basic`, `client_secret_post`, `none`, ...).
    pub token_endpoint_auth_method: Option<String>,
    /// When the secret expires (`client_secret_expires_at`, 0 or absent: never).
    pub client_secret_expires_at: Option<SystemTime>,
}

impl ClientRegistration {
    /// Whether the registration is still usable (its secret has not expired).
    pub fn is_current(&self) -> bool {
        self.client_secret_expires_at
            .is_none_or(|at| at > SystemTime::now())
    }
}

impl fmt::Debug for ClientRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRegistration")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "token_endpoint_auth_method",
                &self.token_endpoint_auth_method,
            )
            .field("client_secret_expires_at", &self.client_secret_expires_at)
            .finish()
    }
}

/// A token store failed (I/O, keychain, database).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// Persists tokens and client registrations, keyed by the MCP server URL.
///
/// Implementations must keep the values confidential (OAuth 2.1 §4.3.1): file stores should
/// restrict permissions, and nothing should be logged.
pub trait TokenStore: Send + Sync + 'static {
    /// The tokens stored for `server`.
    fn tokens(&self, server: &str) -> BoxFuture<Result<Option<StoredTokens>, StoreError>>;
    /// Stores (`Some`) or forgets (`None`) the tokens for `server`.
    fn set_tokens(
        &self,
        server: &str,
        tokens: Option<StoredTokens>,
    ) -> BoxFuture<Result<(), StoreError>>;
    /// The client registration stored for `server`.
    fn registration(
        &self,
        server: &str,
    ) -> BoxFuture<Result<Option<ClientRegistration>, StoreError>>;
    /// Stores (`Some`) or forgets (`None`) the client registration for `server`.
    fn set_registration(
        &self,
        server: &str,
        registration: Option<ClientRegistration>,
    ) -> BoxFuture<Result<(), StoreError>>;
}

/// A [`TokenStore`] in process memory: tokens last as long as the process.
#[derive(Default)]
pub struct InMemoryTokenStore {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    tokens: Option<StoredTokens>,
    registration: Option<ClientRegistration>,
}

impl InMemoryTokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, server: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        f(entries.entry(server.to_owned()).or_default())
    }
}

impl fmt::Debug for InMemoryTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.entries.lock().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("InMemoryTokenStore")
            .field("servers", &n)
            .finish()
    }
}

impl TokenStore for InMemoryTokenStore {
    fn tokens(&self, server: &str) -> BoxFuture<Result<Option<StoredTokens>, StoreError>> {
        let tokens = self.with(server, |e| e.tokens.clone());
        Box::pin(async move { Ok(tokens) })
    }

    fn set_tokens(
        &self,
        server: &str,
        tokens: Option<StoredTokens>,
    ) -> BoxFuture<Result<(), StoreError>> {
        self.with(server, |e| e.tokens = tokens);
        Box::pin(async { Ok(()) })
    }

    fn registration(
        &self,
        server: &str,
    ) -> BoxFuture<Result<Option<ClientRegistration>, StoreError>> {
        let registration = self.with(server, |e| e.registration.clone());
        Box::pin(async move { Ok(registration) })
    }

    fn set_registration(
        &self,
        server: &str,
        registration: Option<ClientRegistration>,
    ) -> BoxFuture<Result<(), StoreError>> {
        self.with(server, |e| e.registration = registration);
        Box::pin(async { Ok(()) })
    }
}
