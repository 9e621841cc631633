//! Access tokens for Drive, from one of three credentials: a user's OAuth refresh token
//! (the `refresh_token` grant), a service account's key (an RS256-signed JWT assertion, the
//! `jwt-bearer` grant, optionally impersonating a user by domain-wide delegation), or a
//! static access token.
//!
//! A token is cached until a minute before it expires. The cache is the Drive connector's
//! state, owned by its actor under a supervisor ([`DriveState`]): the call that finds the
//! token stale fetches a new one in its own task while concurrent calls wait for that one
//! refresh through the actor instead of each starting their own. A token Drive refused is dropped ([`Auth::invalidate`]) so that the next call gets a
//! fresh one. A revoked or expired refresh token (`invalid_grant`) becomes an error telling
//! the operator to re-authorise. No message here ever carries a token or a key.

use crate::actor::{Flight, StateError, Supervised};
use crate::http::{Api, ApiError};
use crate::Secret;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The scope a service account asks for: the connector only reads.
pub(crate) const SCOPE_READONLY: &str = "https://www.googleapis.com/auth/drive.readonly";

/// How long before its expiry a cached token is replaced.
const EARLY: Duration = Duration::from_secs(60);

/// What the connector signs in with.
pub(crate) enum Credential {
    /// A token used as is (it cannot be renewed).
    Static(Secret),
    /// A user's refresh token and the OAuth client it was issued to.
    Refresh {
        client_id: String,
        client_secret: Secret,
        refresh_token: Secret,
    },
    /// A service account's key.
    ServiceAccount(ServiceAccount),
}

impl Credential {
    /// The kind, for `Debug` output and messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Credential::Static(_) => "access_token",
            Credential::Refresh { .. } => "refresh_token",
            Credential::ServiceAccount(_) => "service_account_key",
        }
    }
}

/// A service account: its e-mail (the JWT's issuer), its signing key, and whom it acts as.
pub(crate) struct ServiceAccount {
    email: String,
    key_id: Option<String>,
    key: jsonwebtoken::EncodingKey,
    subject: Option<String>,
    scope: &'static str,
}

/// The parts of a service account's JSON key file this connector uses.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
}

impl ServiceAccount {
    /// Parses a JSON key file's text. Errors name what is missing, never the key.
    pub(crate) fn from_json(
        text: &str,
        subject: Option<String>,
        scope: &'static str,
    ) -> Result<ServiceAccount, String> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| {
            format!(
                "the service account key is not a JSON key file (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        if file.kind.as_deref().is_some_and(|k| k != "service_account") {
            return Err("the key file's `type` is not `service_account`".into());
        }
        let key =
            jsonwebtoken::EncodingKey::from_rsa_pem(file.private_key.as_bytes()).map_err(|_| {
                "the key file's `private_key` is not an RSA private key in PEM".to_owned()
            })?;
        Ok(ServiceAccount {
            email: file.client_email,
            key_id: file.private_key_id,
            key,
            subject,
            scope,
        })
    }

    /// The signed assertion for the token endpoint `audience`.
    fn assertion(&self, audience: &str) -> Result<String, AuthError> {
        #[derive(Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            sub: Option<&'a str>,
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let claims = Claims {
            iss: &self.email,
            scope: self.scope,
            aud: audience,
            iat: now,
            exp: now + 3600,
            sub: self.subject.as_deref(),
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid.clone_from(&self.key_id);
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| AuthError::Sign(sign_error(&e)))
    }
}

/// A short name for a signing failure (never the error's own text: it could in theory quote
/// key material).
fn sign_error(e: &jsonwebtoken::errors::Error) -> String {
    match e.kind() {
        jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_) => "the RSA key is invalid".into(),
        jsonwebtoken::errors::ErrorKind::InvalidKeyFormat => "the key's format is invalid".into(),
        _ => "signing failed".into(),
    }
}

/// Why no access token could be had. Each message is the tool error the caller sees.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum AuthError {
    /// The refresh token is revoked or expired: only a person can fix that.
    #[error("Google refused the refresh token ({detail}): it was revoked or has expired. Re-authorise: sign in again to get a new refresh token and update the connector's `refresh_token`")]
    RefreshRevoked { detail: String },
    /// The service account's assertion was refused.
    #[error("Google refused the service account's sign-in ({detail}): check that the key is still active, that this machine's clock is right, and (with `subject`) that domain-wide delegation grants the scope")]
    AssertionRefused { detail: String },
    /// The OAuth client's id or secret was refused.
    #[error("Google refused the OAuth client ({detail}): check `client_id` and `client_secret`")]
    ClientRefused { detail: String },
    /// The static token was refused; it cannot be renewed here.
    #[error("Google Drive refused the access token (HTTP 401): it has expired or was revoked; set a new `access_token`, or configure a `refresh_token` or `service_account_key` so tokens are renewed")]
    StaticRefused,
    /// The token endpoint could not be used.
    #[error("signing in to Google failed: {0}")]
    Endpoint(ApiError),
    /// The assertion could not be signed.
    #[error("cannot sign the service account's assertion: {0}")]
    Sign(String),
    /// The connector's state actor failed with this call.
    #[error(transparent)]
    State(#[from] StateError),
}

/// A token and when to stop using it.
#[derive(Clone)]
pub(crate) struct Cached {
    token: Secret,
    fresh_until: Instant,
}

/// Hands out access tokens for one credential.
pub(crate) struct Auth {
    credential: Credential,
    token_url: String,
    api: Api,
    state: Supervised<DriveState>,
}

/// The Drive connector's mutable state, owned by its actor: the access token.
pub(crate) struct DriveState {
    token: Flight<Cached, AuthError>,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct TokenReply {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The token endpoint's error body (RFC 6749 §5.2).
#[derive(Deserialize)]
struct TokenError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

impl Auth {
    /// Tokens for `credential` from `token_url`, fetched with `api`.
    pub(crate) fn new(credential: Credential, token_url: String, api: Api) -> Auth {
        Auth {
            credential,
            token_url,
            api,
            state: Supervised::new("gdrive", || DriveState {
                token: Flight::default(),
            }),
        }
    }

    /// The connector's state actor.
    pub(crate) fn state(&self) -> &Supervised<DriveState> {
        &self.state
    }

    /// The credential's kind.
    pub(crate) fn kind(&self) -> &'static str {
        self.credential.kind()
    }

    /// Whether a refused token can be replaced by a fresh one.
    pub(crate) fn renews(&self) -> bool {
        !matches!(self.credential, Credential::Static(_))
    }

    /// A token that is good for at least a minute (as far as its expiry says).
    pub(crate) async fn token(&self) -> Result<Secret, AuthError> {
        if let Credential::Static(token) = &self.credential {
            return Ok(token.clone());
        }
        let held = self
            .state
            .single_flight(
                |s: &mut DriveState| &mut s.token,
                |c: &Cached| Instant::now() < c.fresh_until,
                || async {
                    let (token, lifetime) = self.fetch().await?;
                    let margin = if lifetime > EARLY * 2 {
                        EARLY
                    } else {
                        lifetime / 2
                    };
                    Ok(Cached {
                        token,
                        fresh_until: Instant::now() + lifetime.saturating_sub(margin),
                    })
                },
            )
            .await?;
        Ok(held?.token)
    }

    /// Forgets `token` if it is the cached one (Drive refused it).
    pub(crate) async fn invalidate(&self, token: &Secret) -> Result<(), AuthError> {
        let refused = token.clone();
        self.state
            .call(move |s| s.token.forget_if(|c| c.token == refused))
            .await?;
        Ok(())
    }

    /// Asks the token endpoint for a new token.
    async fn fetch(&self) -> Result<(Secret, Duration), AuthError> {
        let form: Vec<(&str, String)> = match &self.credential {
            Credential::Static(token) => return Ok((token.clone(), Duration::from_secs(3600))),
            Credential::Refresh {
                client_id,
                client_secret,
                refresh_token,
            } => vec![
                ("grant_type", "refresh_token".into()),
                ("client_id", client_id.clone()),
                ("client_secret", client_secret.expose().to_owned()),
                ("refresh_token", refresh_token.expose().to_owned()),
            ],
            Credential::ServiceAccount(sa) => vec![
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:jwt-bearer".into(),
                ),
                ("assertion", sa.assertion(&self.token_url)?),
            ],
        };
        let reply = self
            .api
            .send(true, |c| c.post(&self.token_url).form(&form))
            .await
            .map_err(AuthError::Endpoint)?;
        if !reply.status.is_success() {
            let detail = match serde_json::from_slice::<TokenError>(&reply.body) {
                Ok(e) => match e.error_description {
                    Some(d) => format!("{}: {}", e.error, clean(&d)),
                    None => e.error,
                },
                Err(_) => {
                    return Err(AuthError::Endpoint(
                        reply
                            .error_for_status()
                            .err()
                            .unwrap_or(ApiError::Malformed {
                                service: "Google's token endpoint",
                                message: "an error without a body".into(),
                            }),
                    ))
                }
            };
            let code = detail.split(':').next().unwrap_or_default();
            let service_account = matches!(self.credential, Credential::ServiceAccount(_));
            return Err(match code {
                "invalid_grant" | "unauthorized_client" | "access_denied" if service_account => {
                    AuthError::AssertionRefused { detail }
                }
                "invalid_grant" => AuthError::RefreshRevoked { detail },
                "invalid_client" | "unauthorized_client" => AuthError::ClientRefused { detail },
                _ => AuthError::Endpoint(ApiError::Status {
                    service: "Google's token endpoint",
                    status: reply.status.as_u16(),
                    detail,
                }),
            });
        }
        let answer: TokenReply = reply.json().map_err(AuthError::Endpoint)?;
        if answer.access_token.is_empty() {
            return Err(AuthError::Endpoint(ApiError::Malformed {
                service: "Google's token endpoint",
                message: "no access_token in the answer".into(),
            }));
        }
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(3600).max(1));
        Ok((Secret::new(answer.access_token), lifetime))
    }
}

/// The service's words without control characters, cut to 200 characters.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_is_not_json_is_refused_without_quoting_it() {
        let e =
            ServiceAccount::from_json("-----BEGIN PRIVATE KEY----- secret", None, SCOPE_READONLY)
                .err()
                .unwrap();
        assert!(e.contains("not a JSON key file"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn a_key_file_with_a_bad_private_key_is_refused() {
        let text = r#"{"type":"service_account","client_email":"a@b","private_key":"nope"}"#;
        let e = ServiceAccount::from_json(text, None, SCOPE_READONLY)
            .err()
            .unwrap();
        assert!(e.contains("not an RSA private key"), "{e}");
        assert!(!e.contains("nope"), "{e}");
    }

    #[test]
    fn error_texts_lose_control_characters() {
        assert_eq!(clean("a\nb\u{1b}[31m"), "ab[31m");
    }
}
