//! Finding the authorization server of an MCP server: the `WWW-Authenticate` challenge
//! (RFC 6750 / RFC 9728 §5.1), Protected Resource Metadata (RFC 9728) at the challenge's URL
//! or the well-known URLs, then Authorization Server Metadata (RFC 8414 and OpenID Connect
//! Discovery, with the path-insertion variants in the order MCP prescribes). Servers of the
//! 2025-03-26 revision have no resource metadata: their metadata sits at the server's root,
//! or nothing does and fixed endpoints at the server's origin are used.
//!
//! Two checks protect the tokens: a resource metadata document must describe this MCP server
//! (else a hostile server could send the client to an authorization server for another
//! resource), and an authorization server metadata document must carry the issuer it was
//! fetched for (RFC 8414 §3.3), which is then recorded for the RFC 9207 `iss` check.

use super::error::OAuthError;
use super::net::{get_json, Fetched};
use reqwest::Client;
use serde::{Deserialize, Serialize};
use url::Url;

/// One challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// The auth scheme (`Bearer`, `DPoP`, ...), as sent.
    pub scheme: String,
    /// The auth parameters, names lowercased, values unquoted.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The value of parameter `name` (lowercase).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a `WWW-Authenticate` value into its challenges (RFC 9110 §11.6.1): schemes
/// followed by comma-separated `name=value` or `name="quoted value"` parameters. Tolerant of
/// odd spacing; a `token68` credential is skipped.
pub fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
    let bytes = header.as_bytes();
    let mut i = 0;
    let mut out: Vec<Challenge> = Vec::new();
    let is_sep = |c: u8| c == b',' || c.is_ascii_whitespace();
    while i < bytes.len() {
        while i < bytes.len() && is_sep(bytes[i]) {
            i += 1;
        }
        let start = i;
        while i < bytes.len() && !is_sep(bytes[i]) && bytes[i] != b'=' {
            i += 1;
        }
        if start == i {
            // A stray '=': skip it.
            i += 1;
            continue;
        }
        let token = &header[start..i];
        let mut j = i;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b'=' {
            // name=value, or a token68 ending in '='s.
            let mut k = j;
            while k < bytes.len() && bytes[k] == b'=' {
                k += 1;
            }
            let mut v = k;
            while v < bytes.len() && bytes[v] == b' ' {
                v += 1;
            }
            if k - j > 1 || v >= bytes.len() || bytes[v] == b',' {
                i = v; // token68
                continue;
            }
            let (value, next) = if bytes[v] == b'"' {
                let mut value = String::new();
                let mut p = v + 1;
                let mut chars = header[p..].char_indices();
                let mut end = header.len();
                while let Some((off, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        '"' => {
                            end = p + off + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                p = end;
                (value, p)
            } else {
                let mut p = v;
                while p < bytes.len() && bytes[p] != b',' && !bytes[p].is_ascii_whitespace() {
                    p += 1;
                }
                (header[v..p].to_owned(), p)
            };
            if let Some(ch) = out.last_mut() {
                ch.params.push((token.to_ascii_lowercase(), value));
            }
            i = next;
        } else {
            out.push(Challenge {
                scheme: token.to_owned(),
                params: Vec::new(),
            });
        }
    }
    out
}

/// The `Bearer` challenge of a `WWW-Authenticate` value (an empty one if there is none).
pub fn bearer_challenge(header: Option<&str>) -> Challenge {
    header
        .map(parse_www_authenticate)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .unwrap_or_default()
}

/// OAuth 2.0 Protected Resource Metadata (RFC 9728 §2), the fields a client uses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtectedResourceMetadata {
    /// The resource identifier; sent verbatim as the `resource` parameter.
    pub resource: String,
    /// Issuers of the authorization servers that protect the resource.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes needed for basic use.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// OAuth 2.0 Authorization Server Metadata (RFC 8414 §2) / OpenID Provider Metadata, the
/// fields a client uses.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuthorizationServerMetadata {
    /// The issuer identifier.
    pub issuer: String,
    /// Where the user agent is sent to authorize.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where codes, refresh tokens and other grants are exchanged for tokens.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// Dynamic client registration (RFC 7591).
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// Scopes the server knows (`offline_access` among them means refresh tokens on request).
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// Grant types the server supports.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    /// PKCE methods; MCP needs `S256`.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Token endpoint client authentication methods.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Algorithms accepted for `private_key_jwt` assertions.
    #[serde(default)]
    pub token_endpoint_auth_signing_alg_values_supported: Option<Vec<String>>,
    /// Whether an HTTPS URL may be used as `client_id` (Client ID Metadata Documents).
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// Whether authorization responses carry `iss` (RFC 9207).
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

impl AuthorizationServerMetadata {
    /// Whether `scope` is listed in `scopes_supported`.
    pub fn supports_scope(&self, scope: &str) -> bool {
        self.scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == scope))
    }

    /// Whether `method` is an accepted token endpoint authentication method. Absent list:
    /// RFC 8414's default, `client_secret_basic`.
    pub fn supports_auth_method(&self, method: &str) -> bool {
        match &self.token_endpoint_auth_methods_supported {
            Some(list) => list.iter().any(|m| m == method),
            None => method == "client_secret_basic",
        }
    }
}

/// Everything discovery found out about where to get tokens for one MCP server.
#[derive(Debug, Clone)]
pub(super) struct Discovery {
    /// The `resource` parameter: the resource metadata's `resource`, verbatim, or the
    /// canonical server URL when there is no resource metadata.
    pub(super) resource: String,
    /// The resource metadata, when the server has one.
    pub(super) prm: Option<ProtectedResourceMetadata>,
    /// The authorization server's metadata (synthesized for the fallback endpoints).
    pub(super) metadata: AuthorizationServerMetadata,
    /// The issuer recorded for binding credentials and for the RFC 9207 check; `None` only
    /// for the 2025-03-26 fallback endpoints.
    pub(super) issuer: Option<String>,
}

impl Discovery {
    /// Scopes to ask for without a challenge scope: the resource metadata's
    /// `scopes_supported`, if any.
    pub(super) fn default_scopes(&self) -> Option<Vec<String>> {
        self.prm.as_ref().and_then(|p| p.scopes_supported.clone())
    }
}

/// The canonical URI of an MCP server (RFC 8707): the URL without fragment, and without the
/// trailing slash of an empty path.
pub(super) fn canonical_resource(server: &Url) -> String {
    let mut u = server.clone();
    u.set_fragment(None);
    let s = u.to_string();
    if u.path() == "/" && u.query().is_none() {
        s.trim_end_matches('/').to_owned()
    } else {
        s
    }
}

fn origin(u: &Url) -> String {
    u.origin().ascii_serialization()
}

/// The path of `u` without its trailing slash ("" for the root).
fn trimmed_path(u: &Url) -> &str {
    u.path().trim_end_matches('/')
}

/// Whether credentials may be sent to `url`: `https`, or `http` to a loopback host.
pub(super) fn secure_enough(url: &str) -> bool {
    let Ok(u) = Url::parse(url) else {
        return false;
    };
    match u.scheme() {
        "https" => true,
        "http" => match u.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// Whether a resource metadata `resource` may stand for the MCP server at `server`: the same
/// origin, and a path equal to or a parent (on a segment boundary) of the server's.
pub(super) fn resource_matches(server: &Url, published: &str) -> bool {
    let Ok(p) = Url::parse(published) else {
        return false;
    };
    if p.fragment().is_some() || p.origin() != server.origin() {
        return false;
    }
    let (sp, pp) = (trimmed_path(server), trimmed_path(&p));
    sp == pp || (sp.starts_with(pp) && sp.as_bytes().get(pp.len()) == Some(&b'/'))
}

/// The well-known resource metadata URLs to probe for `server`, in order: path-inserted,
/// then the root.
pub(super) fn prm_candidates(server: &Url) -> Vec<String> {
    const WK: &str = "/.well-known/oauth-protected-resource";
    let o = origin(server);
    let path = trimmed_path(server);
    let mut out = Vec::with_capacity(2);
    if !path.is_empty() {
        out.push(format!("{o}{WK}{path}"));
    }
    out.push(format!("{o}{WK}"));
    out
}

/// The metadata URLs to try for `issuer`, in the MCP order: for an issuer with a path,
/// RFC 8414 path insertion, OIDC path insertion, OIDC path appending; without a path, RFC
/// 8414 then OIDC.
pub(super) fn as_metadata_candidates(issuer: &Url) -> Vec<String> {
    const OAUTH: &str = "/.well-known/oauth-authorization-server";
    const OIDC: &str = "/.well-known/openid-configuration";
    let o = origin(issuer);
    let path = trimmed_path(issuer);
    if path.is_empty() {
        vec![format!("{o}{OAUTH}"), format!("{o}{OIDC}")]
    } else {
        vec![
            format!("{o}{OAUTH}{path}"),
            format!("{o}{OIDC}{path}"),
            format!("{o}{path}{OIDC}"),
        ]
    }
}

/// Fetches the resource metadata: from the challenge's `resource_metadata` URL first, then
/// the well-known URLs. `Ok(None)`: the server has none (a 2025-03-26 server). A document
/// for another resource is an error, not a reason to look further.
pub(super) async fn fetch_prm(
    http: &Client,
    server: &Url,
    from_challenge: Option<&str>,
) -> Result<Option<ProtectedResourceMetadata>, OAuthError> {
    let mut candidates = Vec::new();
    if let Some(u) = from_challenge {
        match Url::parse(u) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                candidates.push(u.to_owned())
            }
            _ => tracing::debug!(url = u, "ignoring an unusable resource_metadata URL"),
        }
    }
    for c in prm_candidates(server) {
        if !candidates.contains(&c) {
            candidates.push(c);
        }
    }
    let (mut last_error, mut answered) = (None, false);
    for url in candidates {
        match get_json::<ProtectedResourceMetadata>(http, &url).await {
            Ok(Fetched::Found(prm)) => {
                if !resource_matches(server, &prm.resource) {
                    return Err(OAuthError::ResourceMismatch {
                        server: server.to_string(),
                        published: prm.resource,
                    });
                }
                tracing::debug!(url, resource = prm.resource, "protected resource metadata");
                return Ok(Some(prm));
            }
            Ok(Fetched::Missing(why)) => {
                answered = true;
                tracing::debug!(url, why, "no protected resource metadata here")
            }
            Err(e) => {
                tracing::debug!(url, error = %e, "fetching protected resource metadata");
                last_error = Some(e);
            }
        }
    }
    match last_error {
        // No candidate answered at all: the server is unreachable rather than a 2025-03-26
        // server without metadata.
        Some(e) if !answered => Err(e),
        _ => Ok(None),
    }
}

/// Fetches and validates the metadata of the authorization server `issuer`: the first
/// candidate URL that answers with a document wins, and that document must name `issuer`
/// exactly.
pub(super) async fn fetch_as_metadata(
    http: &Client,
    issuer: &str,
) -> Result<AuthorizationServerMetadata, OAuthError> {
    let url = Url::parse(issuer).map_err(|e| OAuthError::AuthorizationServerMetadata {
        issuer: issuer.to_owned(),
        message: format!("not a URL: {e}"),
    })?;
    let mut tried = Vec::new();
    for candidate in as_metadata_candidates(&url) {
        match get_json::<AuthorizationServerMetadata>(http, &candidate).await? {
            Fetched::Found(doc) => {
                if doc.issuer != issuer {
                    return Err(OAuthError::MetadataIssuerMismatch {
                        expected: issuer.to_owned(),
                        found: doc.issuer,
                    });
                }
                tracing::debug!(url = candidate, issuer, "authorization server metadata");
                return Ok(doc);
            }
            Fetched::Missing(why) => tried.push(format!("{candidate}: {why}")),
        }
    }
    Err(OAuthError::AuthorizationServerMetadata {
        issuer: issuer.to_owned(),
        message: format!("no metadata document ({})", tried.join("; ")),
    })
}

/// Discovery for a server without resource metadata (MCP 2025-03-26): metadata at the
/// server's origin, else the default endpoints `/authorize`, `/token` and `/register` there.
/// The 2025-03-26 revision did not validate the issuer, and servers of that era put their
/// endpoints under another path than the metadata, so the issuer is recorded as published.
pub(super) async fn legacy_discovery(http: &Client, server: &Url) -> Result<Discovery, OAuthError> {
    let base = origin(server);
    let resource = canonical_resource(server);
    for candidate in [
        format!("{base}/.well-known/oauth-authorization-server"),
        format!("{base}/.well-known/openid-configuration"),
    ] {
        if let Fetched::Found(doc) =
            get_json::<AuthorizationServerMetadata>(http, &candidate).await?
        {
            tracing::debug!(url = candidate, "2025-03-26 authorization server metadata");
            let issuer = Some(doc.issuer.clone()).filter(|s| !s.is_empty());
            return Ok(Discovery {
                resource,
                prm: None,
                metadata: doc,
                issuer,
            });
        }
    }
    tracing::debug!(base, "no metadata: using the 2025-03-26 default endpoints");
    Ok(Discovery {
        resource,
        prm: None,
        metadata: AuthorizationServerMetadata {
            issuer: String::new(),
            authorization_endpoint: Some(format!("{base}/authorize")),
            token_endpoint: Some(format!("{base}/token")),
            registration_endpoint: Some(format!("{base}/register")),
            code_challenge_methods_supported: Some(vec!["S256".to_owned()]),
            ..Default::default()
        },
        issuer: None,
    })
}

/// The whole discovery: resource metadata (from the challenge or well-known URLs), then the
/// metadata of its first authorization server that has usable metadata; without resource
/// metadata, the 2025-03-26 rules.
pub(super) async fn discover(
    http: &Client,
    server: &Url,
    challenge: &Challenge,
) -> Result<Discovery, OAuthError> {
    let Some(prm) = fetch_prm(http, server, challenge.param("resource_metadata")).await? else {
        return legacy_discovery(http, server).await;
    };
    if prm.authorization_servers.is_empty() {
        return Err(OAuthError::ResourceMetadata(format!(
            "{} names no authorization server",
            prm.resource
        )));
    }
    let mut first_error = None;
    for issuer in &prm.authorization_servers {
        match fetch_as_metadata(http, issuer).await {
            Ok(metadata) => {
                return Ok(Discovery {
                    resource: prm.resource.clone(),
                    issuer: Some(metadata.issuer.clone()),
                    metadata,
                    prm: Some(prm),
                })
            }
            Err(e) => {
                tracing::debug!(issuer, error = %e, "authorization server not usable");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("at least one authorization server was tried"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_challenges() {
        let h = r#"Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x/.well-known/oauth-protected-resource/mcp", error_description="say \"hi\"""#;
        let c = bearer_challenge(Some(h));
        assert_eq!(c.param("error"), Some("insufficient_scope"));
        assert_eq!(c.param("scope"), Some("a b"));
        assert_eq!(
            c.param("resource_metadata"),
            Some("https://x/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.param("error_description"), Some(r#"say "hi""#));

        let many = parse_www_authenticate(
            r#"Basic realm="x", DPoP algs="ES256", Bearer realm=api,scope=read"#,
        );
        assert_eq!(many.len(), 3);
        assert_eq!(many[2].param("realm"), Some("api"));
        assert_eq!(many[2].param("scope"), Some("read"));
        assert_eq!(bearer_challenge(Some("Basic abc==")).scheme, "");
        assert_eq!(
            parse_www_authenticate("Negotiate abc==, Bearer scope=\"x\"")[1].param("scope"),
            Some("x")
        );
        assert_eq!(bearer_challenge(Some("bearer")).scheme, "bearer");
    }

    #[test]
    fn well_known_urls() {
        let s = Url::parse("https://h.example:8443/a/mcp/").unwrap();
        assert_eq!(
            prm_candidates(&s),
            [
                "https://h.example:8443/.well-known/oauth-protected-resource/a/mcp",
                "https://h.example:8443/.well-known/oauth-protected-resource"
            ]
        );
        let root = Url::parse("https://h.example").unwrap();
        assert_eq!(
            prm_candidates(&root),
            ["https://h.example/.well-known/oauth-protected-resource"]
        );
        assert_eq!(
            as_metadata_candidates(&Url::parse("https://a.example/tenant1").unwrap()),
            [
                "https://a.example/.well-known/oauth-authorization-server/tenant1",
                "https://a.example/.well-known/openid-configuration/tenant1",
                "https://a.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            as_metadata_candidates(&Url::parse("https://a.example/").unwrap()),
            [
                "https://a.example/.well-known/oauth-authorization-server",
                "https://a.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn resource_matching() {
        let s = Url::parse("http://localhost:3000/mcp").unwrap();
        assert!(resource_matches(&s, "http://localhost:3000/mcp"));
        assert!(resource_matches(&s, "http://localhost:3000"));
        assert!(resource_matches(&s, "http://LOCALHOST:3000/"));
        assert!(!resource_matches(&s, "http://localhost:3000/mc"));
        assert!(!resource_matches(&s, "http://localhost:3001/mcp"));
        assert!(!resource_matches(&s, "https://evil.example.com/mcp"));
        assert!(!resource_matches(&s, "http://localhost:3000/mcp/other"));
        assert!(!resource_matches(&s, "not a url"));
        assert!(secure_enough("https://as.example/token"));
        assert!(secure_enough("http://localhost:9/token"));
        assert!(secure_enough("http://127.0.0.1/token"));
        assert!(secure_enough("http://[::1]:8/token"));
        assert!(!secure_enough("http://as.example/token"));
        assert!(!secure_enough("ftp://as.example/token"));
        assert_eq!(
            canonical_resource(&Url::parse("https://x.example/").unwrap()),
            "https://x.example"
        );
        assert_eq!(
            canonical_resource(&Url::parse("https://x.example/mcp#f").unwrap()),
            "https://x.example/mcp"
        );
    }
}
