//! The token endpoint: client authentication (`client_secret_basic`, `client_secret_post`,
//! `none`, `private_key_jwt` per RFC 7523 §2.2) and the grants MCP clients use
//! (authorization code, refresh token, client credentials, JWT bearer), plus the RFC 8693
//! token exchange at an identity provider for the cross-app access extension.

use super::error::OAuthError;
use super::flow::random_token;
use super::net::{oauth_error, post_form};
use super::store::StoredTokens;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Client, StatusCode};
use serde::Deserialize;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The `client_assertion_type` of RFC 7523 client authentication.
const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// A client assertion is valid this long.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(300);

/// A private key for `private_key_jwt` client authentication.
#[derive(Clone)]
pub struct SigningKey {
    key: Arc<EncodingKey>,
    alg: Algorithm,
    kid: Option<String>,
}

impl SigningKey {
    /// A key from PEM (PKCS#8 EC or RSA, or PKCS#1 RSA). `algorithm` is a JWS name such as
    /// `ES256` or `RS256`; without one, EC keys sign with ES256 and RSA keys with RS256.
    pub fn from_pem(pem: &str, algorithm: Option<&str>) -> Result<SigningKey, OAuthError> {
        let bad = |e: &dyn fmt::Display| OAuthError::Config(format!("private key: {e}"));
        let alg = match algorithm {
            Some(a) => Some(Algorithm::from_str(a).map_err(|e| bad(&e))?),
            None => None,
        };
        let (key, alg) = match alg {
            Some(alg @ (Algorithm::ES256 | Algorithm::ES384)) => (
                EncodingKey::from_ec_pem(pem.as_bytes()).map_err(|e| bad(&e))?,
                alg,
            ),
            Some(
                alg @ (Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512),
            ) => (
                EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| bad(&e))?,
                alg,
            ),
            Some(Algorithm::EdDSA) => (
                EncodingKey::from_ed_pem(pem.as_bytes()).map_err(|e| bad(&e))?,
                Algorithm::EdDSA,
            ),
            Some(other) => {
                return Err(OAuthError::Config(format!(
                    "private key: {other:?} is not an asymmetric signing algorithm"
                )))
            }
            None => match EncodingKey::from_ec_pem(pem.as_bytes()) {
                Ok(k) => (k, Algorithm::ES256),
                Err(_) => (
                    EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| bad(&e))?,
                    Algorithm::RS256,
                ),
            },
        };
        Ok(SigningKey {
            key: Arc::new(key),
            alg,
            kid: None,
        })
    }

    /// Names the key in the assertion's header (`kid`), for servers holding several keys.
    pub fn with_key_id(mut self, kid: impl Into<String>) -> Self {
        self.kid = Some(kid.into());
        self
    }

    /// The JWS algorithm name (`ES256`, ...).
    pub fn algorithm(&self) -> String {
        format!("{:?}", self.alg)
    }

    /// A client assertion (RFC 7523 §3): `iss` = `sub` = the client, `aud` = the
    /// authorization server, short-lived, with a fresh `jti`.
    fn assertion(&self, client_id: &str, audience: &str) -> Result<String, OAuthError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = serde_json::json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME.as_secs(),
            "jti": random_token(16),
        });
        let mut header = Header::new(self.alg);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| OAuthError::Signing(e.to_string()))
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// How the client authenticates at the token endpoint.
#[derive(Clone)]
pub(super) enum ClientAuth {
    /// A public client: `client_id` in the body.
    None { client_id: String },
    /// HTTP Basic with the secret.
    SecretBasic { client_id: String, secret: String },
    /// The secret in the body.
    SecretPost { client_id: String, secret: String },
    /// A signed assertion (RFC 7523).
    PrivateKeyJwt { client_id: String, key: SigningKey },
}

impl ClientAuth {
    pub(super) fn client_id(&self) -> &str {
        match self {
            ClientAuth::None { client_id }
            | ClientAuth::SecretBasic { client_id, .. }
            | ClientAuth::SecretPost { client_id, .. }
            | ClientAuth::PrivateKeyJwt { client_id, .. } => client_id,
        }
    }

    pub(super) fn method(&self) -> &'static str {
        match self {
            ClientAuth::None { .. } => "none",
            ClientAuth::SecretBasic { .. } => "client_secret_basic",
            ClientAuth::SecretPost { .. } => "client_secret_post",
            ClientAuth::PrivateKeyJwt { .. } => "private_key_jwt",
        }
    }
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientAuth")
            .field("method", &self.method())
            .field("client_id", &self.client_id())
            .finish_non_exhaustive()
    }
}

/// A successful token response (RFC 6749 §5.1).
#[derive(Deserialize)]
pub(super) struct TokenResponse {
    pub(super) access_token: String,
    #[serde(default)]
    pub(super) token_type: Option<String>,
    #[serde(default)]
    pub(super) expires_in: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) refresh_token: Option<String>,
    #[serde(default)]
    pub(super) scope: Option<String>,
    #[serde(default)]
    pub(super) issued_token_type: Option<String>,
}

impl TokenResponse {
    fn expires_in(&self) -> Option<Duration> {
        match &self.expires_in {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(Duration::from_secs),
            Some(serde_json::Value::String(s)) => s.parse().ok().map(Duration::from_secs),
            _ => None,
        }
    }

    /// The tokens to store. `requested_scope` stands in for an absent `scope` (RFC 6749
    /// §5.1: the granted scope equals the requested one then); `previous_refresh` for an
    /// absent refresh token after a refresh.
    pub(super) fn into_stored(
        self,
        issuer: Option<String>,
        requested_scope: Option<&str>,
        previous_refresh: Option<String>,
    ) -> StoredTokens {
        let expires_at = self.expires_in().map(|d| SystemTime::now() + d);
        StoredTokens {
            access_token: self.access_token,
            refresh_token: self.refresh_token.or(previous_refresh),
            expires_at,
            scope: self.scope.or_else(|| requested_scope.map(str::to_owned)),
            issuer,
        }
    }
}

impl fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenResponse")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A token endpoint request: the grant's parameters plus client authentication. `audience`
/// is the `aud` of a `private_key_jwt` assertion (the issuer, else the endpoint).
pub(super) async fn request(
    http: &Client,
    endpoint: &str,
    mut params: Vec<(&'static str, String)>,
    auth: &ClientAuth,
    audience: &str,
) -> Result<TokenResponse, OAuthError> {
    let grant = params
        .iter()
        .find(|(k, _)| *k == "grant_type")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut basic = None;
    match auth {
        ClientAuth::None { client_id } => params.push(("client_id", client_id.clone())),
        ClientAuth::SecretBasic { client_id, secret } => basic = Some((client_id, secret)),
        ClientAuth::SecretPost { client_id, secret } => {
            params.push(("client_id", client_id.clone()));
            params.push(("client_secret", secret.clone()));
        }
        ClientAuth::PrivateKeyJwt { client_id, key } => {
            params.push(("client_id", client_id.clone()));
            params.push(("client_assertion_type", JWT_BEARER_ASSERTION.to_owned()));
            params.push(("client_assertion", key.assertion(client_id, audience)?));
        }
    }
    let pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let answer = post_form(
        http,
        endpoint,
        &pairs,
        basic.map(|(id, s)| (id.as_str(), s.as_str())),
    )
    .await?;
    if answer.status != StatusCode::OK {
        let (error, description) = oauth_error(&answer.body);
        return Err(OAuthError::TokenRefused {
            endpoint: endpoint.to_owned(),
            grant,
            status: answer.status.as_u16(),
            error,
            description,
        });
    }
    let invalid = |message: String| OAuthError::InvalidTokenResponse {
        endpoint: endpoint.to_owned(),
        message,
    };
    let response: TokenResponse = serde_json::from_slice(&answer.body)
        .map_err(|e| invalid(format!("not a token response: {e}")))?;
    if response.access_token.is_empty() {
        return Err(invalid("empty access_token".to_owned()));
    }
    Ok(response)
}

/// Checks that a response to a grant for the MCP server carries a bearer token.
pub(super) fn require_bearer(endpoint: &str, response: &TokenResponse) -> Result<(), OAuthError> {
    match response.token_type.as_deref() {
        None => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("bearer") => Ok(()),
        Some(t) => Err(OAuthError::InvalidTokenResponse {
            endpoint: endpoint.to_owned(),
            message: format!("token_type {t:?} is not supported (only Bearer)"),
        }),
    }
}

/// Whether a refused token request means the grant (refresh token, code) itself is dead.
pub(super) fn is_invalid_grant(e: &OAuthError) -> bool {
    matches!(e, OAuthError::TokenRefused { error, .. } if error == "invalid_grant")
}
