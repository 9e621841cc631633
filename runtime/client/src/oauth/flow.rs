//! The authorization-code leg: PKCE (S256), `state`, the authorization URL with the
//! `resource` indicator, the hook that takes the user (or a headless test agent) through the
//! authorization server, and the checks on the redirect that comes back: RFC 9207 `iss`
//! before anything else (a mismatched response is not acted on at all, not even its
//! `error`), then `state`, then the code.

use super::error::OAuthError;
use crate::auth::AuthError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use reqwest::header::LOCATION;
use sha2::{Digest, Sha256};
use std::fmt;
use toolyard_proto::BoxFuture;
use url::Url;

/// Takes the user through authorization: given the authorization URL, returns the redirect
/// URL the authorization server sent the user agent back to (carrying `code`, `state` and
/// perhaps `iss`). A desktop client opens a browser and listens on its loopback redirect
/// URI; a test or a trusted headless setup uses [`HeadlessRedirect`].
pub trait AuthorizationHandler: Send + Sync + 'static {
    /// Authorizes at `url` and returns the redirect.
    fn authorize(&self, url: Url) -> BoxFuture<Result<Url, AuthError>>;
}

/// An [`AuthorizationHandler`] without a user: GETs the authorization URL with redirects
/// disabled and returns the `Location` of the redirect. Fits authorization servers that
/// approve without interaction (test servers such as the MCP conformance suite's,
/// or pre-consented clients).
#[derive(Debug, Clone)]
pub struct HeadlessRedirect {
    http: reqwest::Client,
}

impl HeadlessRedirect {
    /// A handler with its own HTTP client (redirects off).
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        HeadlessRedirect { http }
    }

    /// A handler using `http`, which must not follow redirects.
    pub fn with_client(http: reqwest::Client) -> Self {
        HeadlessRedirect { http }
    }
}

impl Default for HeadlessRedirect {
    fn default() -> Self {
        Self::new()
    }
}

impl AuthorizationHandler for HeadlessRedirect {
    fn authorize(&self, url: Url) -> BoxFuture<Result<Url, AuthError>> {
        let http = self.http.clone();
        Box::pin(async move {
            let endpoint = format!("{}{}", url.origin().ascii_serialization(), url.path());
            let resp = http
                .get(url.clone())
                .timeout(super::net::TIMEOUT)
                .send()
                .await
                .map_err(|e| {
                    AuthError(format!(
                        "authorization request to {endpoint} failed: {}",
                        e.without_url()
                    ))
                })?;
            let status = resp.status();
            if !status.is_redirection() {
                return Err(AuthError(format!(
                    "authorization endpoint {endpoint} answered HTTP {} instead of a redirect",
                    status.as_u16()
                )));
            }
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    AuthError(format!(
                        "authorization endpoint {endpoint} redirected without a Location"
                    ))
                })?;
            url.join(location)
                .map_err(|e| AuthError(format!("unusable redirect Location: {e}")))
        })
    }
}

/// Random bytes, base64url without padding (PKCE verifier, `state`, `jti`).
pub(super) fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

/// A PKCE pair (RFC 7636): the verifier stays here, the S256 challenge goes out.
pub(super) struct Pkce {
    pub(super) verifier: String,
    pub(super) challenge: String,
}

impl Pkce {
    pub(super) fn new() -> Pkce {
        // 48 bytes -> 64 characters of the unreserved set, within 43..=128.
        let verifier = random_token(48);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Pkce {
            verifier,
            challenge,
        }
    }
}

impl fmt::Debug for Pkce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pkce")
            .field("challenge", &self.challenge)
            .finish_non_exhaustive()
    }
}

/// What goes into an authorization request.
pub(super) struct AuthorizationRequest<'a> {
    pub(super) endpoint: &'a str,
    pub(super) client_id: &'a str,
    pub(super) redirect_uri: &'a str,
    pub(super) scope: Option<&'a str>,
    pub(super) resource: &'a str,
    pub(super) code_challenge: &'a str,
    pub(super) state: &'a str,
}

impl AuthorizationRequest<'_> {
    /// The URL to send the user agent to (the endpoint's own query is kept).
    pub(super) fn url(&self) -> Result<Url, OAuthError> {
        let mut url = Url::parse(self.endpoint).map_err(|e| {
            OAuthError::Authorization(format!(
                "authorization endpoint {:?} is not a URL: {e}",
                self.endpoint
            ))
        })?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", self.client_id)
                .append_pair("redirect_uri", self.redirect_uri)
                .append_pair("code_challenge", self.code_challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", self.state);
            if let Some(scope) = self.scope {
                q.append_pair("scope", scope);
            }
            q.append_pair("resource", self.resource);
        }
        Ok(url)
    }
}

/// What the redirect must match.
pub(super) struct Expected<'a> {
    pub(super) redirect_uri: &'a str,
    pub(super) state: &'a str,
    /// The issuer recorded from validated metadata (`None`: fallback endpoints).
    pub(super) issuer: Option<&'a str>,
    /// The metadata's `authorization_response_iss_parameter_supported`.
    pub(super) iss_supported: bool,
}

/// Checks an authorization response and returns its code. Order matters: `iss` first (RFC
/// 9207 §2.4, and MCP: on mismatch the response, error included, is not acted on), then the
/// redirect target, then an `error`, then `state`, then the code.
pub(super) fn validate_redirect(
    redirect: &Url,
    expected: &Expected<'_>,
) -> Result<String, OAuthError> {
    let mut iss = None;
    let mut state = None;
    let mut code = None;
    let mut error = None;
    let mut description = None;
    for (k, v) in redirect.query_pairs() {
        match &*k {
            "iss" => iss = Some(v.into_owned()),
            "state" => state = Some(v.into_owned()),
            "code" => code = Some(v.into_owned()),
            "error" => error = Some(v.into_owned()),
            "error_description" => description = Some(v.into_owned()),
            _ => {}
        }
    }
    match (iss, expected.issuer) {
        // Simple string comparison (RFC 3986 §6.2.1), no normalization of any kind.
        (Some(found), Some(recorded)) if found != recorded => {
            return Err(OAuthError::IssMismatch {
                expected: recorded.to_owned(),
                found,
            })
        }
        (None, Some(recorded)) if expected.iss_supported => {
            return Err(OAuthError::IssMissing {
                issuer: recorded.to_owned(),
            })
        }
        (Some(_), None) => {
            tracing::debug!("iss in the authorization response, but no issuer was recorded")
        }
        _ => {}
    }
    let target = Url::parse(expected.redirect_uri).ok();
    let same_target =
        target.is_some_and(|t| t.origin() == redirect.origin() && t.path() == redirect.path());
    if !same_target {
        return Err(OAuthError::Authorization(format!(
            "the authorization server redirected to {}{}, not to the redirect URI",
            redirect.origin().ascii_serialization(),
            redirect.path()
        )));
    }
    if let Some(error) = error {
        return Err(OAuthError::AuthorizationDenied { error, description });
    }
    if state.as_deref() != Some(expected.state) {
        return Err(OAuthError::StateMismatch);
    }
    code.filter(|c| !c.is_empty())
        .ok_or_else(|| OAuthError::Authorization("the redirect carries no code".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected<'a>(issuer: Option<&'a str>, iss_supported: bool) -> Expected<'a> {
        Expected {
            redirect_uri: "http://127.0.0.1:9/callback",
            state: "s1",
            issuer,
            iss_supported,
        }
    }

    fn check(query: &str, issuer: Option<&str>, supported: bool) -> Result<String, OAuthError> {
        let url = Url::parse(&format!("http://127.0.0.1:9/callback?{query}")).unwrap();
        validate_redirect(&url, &expected(issuer, supported))
    }

    #[test]
    fn pkce_is_s256() {
        let p = Pkce::new();
        assert_eq!(p.verifier.len(), 64);
        assert_eq!(
            p.challenge,
            URL_SAFE_NO_PAD.encode(Sha256::digest(p.verifier.as_bytes()))
        );
        // RFC 7636 appendix B.
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(
            URL_SAFE_NO_PAD.encode(Sha256::digest(v.as_bytes())),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn iss_rules() {
        let iss = "https://as.example";
        assert_eq!(
            check(
                "code=c&state=s1&iss=https%3A%2F%2Fas.example",
                Some(iss),
                true
            )
            .unwrap(),
            "c"
        );
        assert_eq!(check("code=c&state=s1", Some(iss), false).unwrap(), "c");
        assert!(matches!(
            check("code=c&state=s1", Some(iss), true),
            Err(OAuthError::IssMissing { .. })
        ));
        assert!(matches!(
            check(
                "code=c&state=s1&iss=https%3A%2F%2Fevil.example",
                Some(iss),
                false
            ),
            Err(OAuthError::IssMismatch { .. })
        ));
        // No normalization: a trailing slash is another issuer.
        assert!(matches!(
            check(
                "code=c&state=s1&iss=https%3A%2F%2Fas.example%2F",
                Some(iss),
                true
            ),
            Err(OAuthError::IssMismatch { .. })
        ));
        // A mismatched iss hides the error.
        assert!(matches!(
            check("error=access_denied&state=s1&iss=x", Some(iss), true),
            Err(OAuthError::IssMismatch { .. })
        ));
        assert!(matches!(
            check(
                "error=access_denied&state=s1&iss=https%3A%2F%2Fas.example",
                Some(iss),
                true
            ),
            Err(OAuthError::AuthorizationDenied { .. })
        ));
        assert!(matches!(
            check("code=c&state=other", None, false),
            Err(OAuthError::StateMismatch)
        ));
        assert!(matches!(
            check("code=c", None, false),
            Err(OAuthError::StateMismatch)
        ));
        assert!(matches!(
            check("state=s1", None, false),
            Err(OAuthError::Authorization(_))
        ));
        let elsewhere = Url::parse("http://127.0.0.1:9/other?code=c&state=s1").unwrap();
        assert!(validate_redirect(&elsewhere, &expected(None, false)).is_err());
    }

    #[test]
    fn authorization_url_keeps_endpoint_query() {
        let url = AuthorizationRequest {
            endpoint: "https://as.example/authorize?tenant=a",
            client_id: "c",
            redirect_uri: "http://127.0.0.1:9/callback",
            scope: Some("a b"),
            resource: "https://mcp.example/mcp",
            code_challenge: "ch",
            state: "st",
        }
        .url()
        .unwrap();
        let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert!(q.contains(&("tenant".into(), "a".into())));
        assert!(q.contains(&("scope".into(), "a b".into())));
        assert!(q.contains(&("resource".into(), "https://mcp.example/mcp".into())));
        assert!(q.contains(&("code_challenge_method".into(), "S256".into())));
    }
}
