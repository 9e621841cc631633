//! The credentials GitHub requests carry: a token as configured (a PAT), or a GitHub App's
//! installation token. For an App, an RS256 JWT signed with the App's private key (`iss` =
//! the App id, valid ten minutes) is exchanged at
//! `POST {base}/app/installations/{id}/access_tokens` for an installation token, which is
//! kept until a minute before its `expires_at` and then replaced. The token is the GitHub
//! connector's state ([`super::client::GithubState`]), held by its actor: the exchange runs
//! in the task of the call that found the token stale, and concurrent calls wait for that
//! one exchange through the actor instead of each starting one.

use super::client::GithubState;
use crate::actor::Supervised;
use crate::http::{Api, ApiError};
use crate::Secret;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard::HandlerError;

/// How long before its expiry an installation token is replaced.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// What requests authenticate with.
pub(crate) enum Credentials {
    /// A token used as it is.
    Token(Secret),
    /// A GitHub App installation.
    App(App),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Token(_) => f.write_str("Token(<secret>)"),
            Credentials::App(app) => f
                .debug_struct("App")
                .field("app_id", &app.app_id)
                .field("installation_id", &app.installation_id)
                .finish_non_exhaustive(),
        }
    }
}

/// A GitHub App installation and its current token.
pub(crate) struct App {
    app_id: u64,
    installation_id: u64,
    key: EncodingKey,
}

/// An installation token and when it stops working.
#[derive(Clone)]
pub(crate) struct Installation {
    token: Secret,
    expires_at: SystemTime,
}

#[derive(Serialize)]
struct Claims {
    iat: u64,
    exp: u64,
    iss: String,
}

#[derive(Deserialize)]
struct AccessToken {
    token: String,
    #[serde(default)]
    expires_at: Option<String>,
}

impl App {
    /// An App from its id, installation and PEM private key (refused here when it is not
    /// an RSA key, so a bad key fails at start-up, not at the first call).
    pub(crate) fn new(app_id: u64, installation_id: u64, pem: &Secret) -> Result<App, String> {
        let key = EncodingKey::from_rsa_pem(pem.expose().as_bytes())
            .map_err(|_| "`private_key` is not an RSA private key in PEM".to_owned())?;
        Ok(App {
            app_id,
            installation_id,
            key,
        })
    }

    /// The JWT that authenticates as the App itself: issued a minute in the past (clock
    /// drift, as GitHub advises), valid for nine minutes after now.
    fn jwt(&self) -> Result<String, ApiError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = Claims {
            iat: now.saturating_sub(60),
            exp: now + 9 * 60,
            iss: self.app_id.to_string(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key).map_err(|e| {
            ApiError::Malformed {
                service: "GitHub",
                message: format!("cannot sign the App's JWT ({})", e.kind_name()),
            }
        })
    }

    /// A valid installation token: the one the state holds, or one this call exchanges
    /// while concurrent calls wait for it.
    async fn token(
        &self,
        api: &Api,
        base: &str,
        state: &Supervised<GithubState>,
    ) -> Result<Secret, HandlerError> {
        let held = state
            .single_flight(
                |s: &mut GithubState| &mut s.token,
                |i: &Installation| SystemTime::now() + REFRESH_MARGIN < i.expires_at,
                || self.exchange(api, base),
            )
            .await?;
        Ok(held?.token)
    }

    /// Exchanges the App's JWT for a new installation token.
    async fn exchange(&self, api: &Api, base: &str) -> Result<Installation, ApiError> {
        let jwt = self.jwt()?;
        let url = format!(
            "{base}/app/installations/{}/access_tokens",
            self.installation_id
        );
        let reply = api
            .send(false, |c| {
                c.post(&url)
                    .bearer_auth(&jwt)
                    .header("accept", "application/vnd.github+json")
                    .header("x-github-api-version", super::client::API_VERSION)
            })
            .await?
            .error_for_status()
            .map_err(|e| match e {
                ApiError::Unauthorized {
                    service, status, ..
                }
                | ApiError::Status {
                    service,
                    status: status @ (403 | 404),
                    ..
                } => ApiError::Unauthorized {
                    service,
                    status,
                    detail: "the GitHub App's installation token could not be obtained (check app_id, installation_id and private_key)".to_owned(),
                },
                other => other,
            })?;
        let answer: AccessToken = reply.json()?;
        let now = SystemTime::now();
        let expires_at = answer
            .expires_at
            .as_deref()
            .and_then(parse_rfc3339)
            .unwrap_or(now + Duration::from_secs(50 * 60))
            .min(now + Duration::from_secs(60 * 60));
        Ok(Installation {
            token: Secret::new(answer.token),
            expires_at,
        })
    }
}

trait KindName {
    fn kind_name(&self) -> &'static str;
}

impl KindName for jsonwebtoken::errors::Error {
    /// The error's kind without any key material (its Display is safe too, but short).
    fn kind_name(&self) -> &'static str {
        use jsonwebtoken::errors::ErrorKind as K;
        match self.kind() {
            K::InvalidRsaKey(_) | K::InvalidKeyFormat => "invalid RSA key",
            K::InvalidAlgorithm => "invalid algorithm",
            _ => "signing failed",
        }
    }
}

impl Credentials {
    /// The bearer token for the next request.
    pub(crate) async fn bearer(
        &self,
        api: &Api,
        base: &str,
        state: &Supervised<GithubState>,
    ) -> Result<Secret, HandlerError> {
        match self {
            Credentials::Token(t) => Ok(t.clone()),
            Credentials::App(app) => app.token(api, base, state).await,
        }
    }

    /// After a 401 to `token`: an App drops that token (GitHub refused it: revoked, or the
    /// clock is off) so the next call exchanges a new one; a newer one another call already
    /// got stays. Returns whether a retry can help.
    pub(crate) async fn refused(
        &self,
        token: &Secret,
        state: &Supervised<GithubState>,
    ) -> Result<bool, HandlerError> {
        match self {
            Credentials::Token(_) => Ok(false),
            Credentials::App(_) => {
                let refused = token.clone();
                state
                    .call(move |s| {
                        s.token
                            .forget_if(|held| held.token.expose() == refused.expose());
                    })
                    .await?;
                Ok(true)
            }
        }
    }
}

/// `2016-07-11T22:14:10Z` (what GitHub sends; fractions and offsets are accepted too).
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh = rest.get(1..3)?.parse::<i64>().ok()?;
            let om = rest.get(4..6)?.parse::<i64>().ok()?;
            sign * (oh * 3600 + om * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_timestamps_parse_to_the_right_instant() {
        let t = parse_rfc3339("2016-07-11T22:14:10Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_468_275_250
        );
        let t = parse_rfc3339("2016-07-12T00:14:10.123+02:00").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_468_275_250
        );
        assert!(parse_rfc3339("yesterday").is_none());
    }

    #[test]
    fn a_key_that_is_not_rsa_pem_is_refused_without_echoing_it() {
        let e = App::new(1, 2, &Secret::new("not a key")).err().unwrap();
        assert!(!e.contains("not a key"), "{e}");
    }

    #[test]
    fn credentials_print_no_secret() {
        let c = Credentials::Token(Secret::new("ghp_verysecret"));
        assert!(!format!("{c:?}").contains("verysecret"));
    }
}
