//! What can go wrong while obtaining credentials, one variant per failure a user would want
//! to tell apart (a misconfigured server, a hostile metadata document, a refused grant).
//! Messages never carry tokens, secrets, authorization codes or PKCE verifiers.

use crate::auth::AuthError;

/// An OAuth client failure. Converted into the transport-facing [`AuthError`] at the
/// [`AuthProvider`](crate::auth::AuthProvider) boundary.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// The client was configured wrongly (bad URL, unreadable key, missing credentials).
    #[error("OAuth client configuration: {0}")]
    Config(String),
    /// An HTTP exchange with a metadata, registration, authorization or token endpoint
    /// failed below the OAuth layer (connection, TLS, timeout, oversized body).
    #[error("HTTP request to {url} failed: {message}")]
    Http {
        /// The endpoint (never a URL carrying a code or token).
        url: String,
        /// What failed.
        message: String,
    },
    /// No usable Protected Resource Metadata and no legacy fallback applied.
    #[error("protected resource metadata: {0}")]
    ResourceMetadata(String),
    /// The Protected Resource Metadata names a different resource than the MCP server the
    /// client talks to (RFC 9728 §3.3): following it could leak tokens to another server.
    #[error("protected resource metadata is for {published:?}, not for the MCP server {server:?}")]
    ResourceMismatch {
        /// The MCP server URL the client was configured with.
        server: String,
        /// The `resource` the metadata published.
        published: String,
    },
    /// No authorization server metadata could be found for the issuer.
    #[error("authorization server metadata for {issuer}: {message}")]
    AuthorizationServerMetadata {
        /// The issuer the metadata was looked up for.
        issuer: String,
        /// Why no usable document was found.
        message: String,
    },
    /// An authorization server metadata document names another issuer than the one it was
    /// fetched for (RFC 8414 §3.3); its endpoints are not used.
    #[error(
        "authorization server metadata fetched for issuer {expected:?} claims issuer {found:?}"
    )]
    MetadataIssuerMismatch {
        /// The issuer the well-known URL was built from.
        expected: String,
        /// The `issuer` inside the document.
        found: String,
    },
    /// An authorization server endpoint is plain `http` on a host other than loopback
    /// (see `OAuthClientBuilder::allow_insecure_http`).
    #[error("refusing to send credentials over plain http to {0}")]
    InsecureEndpoint(String),
    /// The authorization server does not advertise PKCE with S256, which MCP requires.
    #[error("authorization server {0} does not support PKCE with S256")]
    PkceUnsupported(String),
    /// No client identity: no pre-registered client, no Client ID Metadata Document support,
    /// no registration endpoint.
    #[error("no way to obtain a client_id at {0}: configure a pre-registered client or a client metadata document URL")]
    NoClientIdentity(String),
    /// Dynamic client registration was refused or answered badly.
    #[error("client registration at {endpoint} failed: {message}")]
    Registration {
        /// The registration endpoint.
        endpoint: String,
        /// The server's error, or what was wrong with its answer.
        message: String,
    },
    /// The pre-registered client belongs to another authorization server than the one the
    /// MCP server now names.
    #[error("the pre-registered client is bound to issuer {bound:?}, but the server now uses {current:?}")]
    PreRegisteredIssuerMismatch {
        /// The issuer the credentials were configured for.
        bound: String,
        /// The issuer the Protected Resource Metadata names.
        current: String,
    },
    /// The authorization step (user agent, browser or headless redirect) failed.
    #[error("authorization: {0}")]
    Authorization(String),
    /// The authorization server redirected back with an OAuth error.
    #[error("authorization denied: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    AuthorizationDenied {
        /// The `error` code.
        error: String,
        /// The `error_description`, if any.
        description: Option<String>,
    },
    /// The redirect's `state` is missing or is not the one sent (CSRF protection).
    #[error("authorization response state does not match the request")]
    StateMismatch,
    /// The server advertises `authorization_response_iss_parameter_supported` but the
    /// redirect carries no `iss` (RFC 9207 §2.4).
    #[error(
        "authorization response lacks the iss parameter the authorization server {issuer} promises"
    )]
    IssMissing {
        /// The recorded issuer.
        issuer: String,
    },
    /// The redirect's `iss` is not the recorded issuer (RFC 9207: a mix-up attack, or a
    /// misconfigured server); the code is not sent to any token endpoint.
    #[error("authorization response iss {found:?} is not the issuer {expected:?}")]
    IssMismatch {
        /// The recorded issuer.
        expected: String,
        /// The `iss` received.
        found: String,
    },
    /// The token endpoint refused the request.
    #[error("token endpoint {endpoint} refused the {grant} grant: HTTP {status} {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    TokenRefused {
        /// The token endpoint.
        endpoint: String,
        /// The grant type asked for.
        grant: String,
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code (or a summary of a non-OAuth answer).
        error: String,
        /// The `error_description`, if any.
        description: Option<String>,
    },
    /// The token endpoint answered 200 with something that is not a usable token response.
    #[error("invalid token response from {endpoint}: {message}")]
    InvalidTokenResponse {
        /// The token endpoint.
        endpoint: String,
        /// What was wrong.
        message: String,
    },
    /// The server keeps refusing the credentials for the same scopes: re-authorizing again
    /// would loop (the MCP step-up retry limit).
    #[error("gave up after {attempts} authorizations for scope {scope:?} within {window_secs}s")]
    RetryLimit {
        /// The scope set asked for (space-separated, may be empty).
        scope: String,
        /// Authorizations already made for it.
        attempts: u32,
        /// The window the attempts were counted in.
        window_secs: u64,
    },
    /// The server answered 403 for a reason other than `insufficient_scope`: new tokens
    /// would not help.
    #[error("the MCP server forbids the request (HTTP 403{})", error.as_deref().map(|e| format!(", {e}")).unwrap_or_default())]
    Forbidden {
        /// The `error` of the challenge, if any.
        error: Option<String>,
    },
    /// A token store failed.
    #[error("token store: {0}")]
    Store(String),
    /// Signing a JWT (client assertion) failed.
    #[error("signing a client assertion: {0}")]
    Signing(String),
}

impl From<OAuthError> for AuthError {
    fn from(e: OAuthError) -> Self {
        AuthError(e.to_string())
    }
}
