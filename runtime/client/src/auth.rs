//! How an HTTP client transport gets credentials: an [`AuthProvider`] supplies the
//! `Authorization` header and is told when the server refuses it, so one retry loop in the
//! transport serves static tokens and the full OAuth 2.1 client alike.

use toolyard_proto::BoxFuture;

/// A refusal from the MCP server: HTTP 401, or 403 with `insufficient_scope`.
#[derive(Debug, Clone)]
pub struct AuthChallenge {
    /// 401 or 403.
    pub status: u16,
    /// The `WWW-Authenticate` header, when the server sent one.
    pub www_authenticate: Option<String>,
    /// The MCP endpoint URL the request went to (the OAuth resource).
    pub resource: String,
}

/// Credentials could not be obtained.
#[derive(Debug, Clone, thiserror::Error)]
#[error("authorization failed: {0}")]
pub struct AuthError(pub String);

/// Supplies credentials to an HTTP transport.
pub trait AuthProvider: Send + Sync + 'static {
    /// The `Authorization` header value for the next request (e.g. `Bearer abc`), or `None`
    /// to send the request without one.
    fn authorization(&self) -> BoxFuture<Result<Option<String>, AuthError>>;

    /// The server refused the request. Obtain better credentials (discovery, registration,
    /// authorization, refresh, step-up) and return `Ok(())` for the transport to retry once
    /// more, or an error to give up. The transport retries a request at most a few times,
    /// and the provider keeps its own limit (e.g. on repeated `insufficient_scope`).
    fn unauthorized(&self, challenge: AuthChallenge) -> BoxFuture<Result<(), AuthError>>;
}

/// A fixed `Authorization` value (a static bearer token): a refusal is final.
#[derive(Debug, Clone)]
pub struct StaticToken(pub String);

impl AuthProvider for StaticToken {
    fn authorization(&self) -> BoxFuture<Result<Option<String>, AuthError>> {
        let value = format!("Bearer {}", self.0);
        Box::pin(async move { Ok(Some(value)) })
    }

    fn unauthorized(&self, challenge: AuthChallenge) -> BoxFuture<Result<(), AuthError>> {
        Box::pin(async move {
            Err(AuthError(format!(
                "the server refused the static token (HTTP {})",
                challenge.status
            )))
        })
    }
}
