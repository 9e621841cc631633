//! The OAuth 2.1 resource-server role of MCP authorization: Protected Resource Metadata
//! (RFC 9728), bearer JWT access tokens checked against the authorization server's JWKS
//! (signature, `iss`, `aud` per RFC 8707, `exp`/`nbf`), and scope checks answered with
//! RFC 6750 challenges (401 `invalid_token`, 403 `insufficient_scope`).
//!
//! A request that passes carries [`Principal`] (the token's `sub`) and [`AccessClaims`] in its
//! extensions, for the handlers behind.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use toolyard_proto::{jsonrpc, method};

/// The well-known path of Protected Resource Metadata (RFC 9728 §3).
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
/// A fetched JWKS is used this long before it is fetched again.
const JWKS_MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// At most one JWKS fetch per this interval (unknown `kid`s must not hammer the issuer).
const JWKS_COOLDOWN: Duration = Duration::from_secs(30);
/// A JWKS fetch taking longer fails.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// A JWKS document larger than this is refused.
const JWKS_MAX_BYTES: usize = 1024 * 1024;
/// Signature algorithms accepted; symmetric (HS*) ones never are.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Where the authorization server's signing keys (a JWK Set, RFC 7517) come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// A JWKS file, read once when the router is built.
    File(PathBuf),
    /// The issuer's `jwks_uri`: fetched on first use, again every 15 minutes and when a
    /// token names an unknown `kid` (at most once per 30 s). `https`, or `http` to a loopback
    /// host only.
    Url(String),
    /// A JWKS document given inline.
    Inline(Value),
}

/// The OAuth 2.1 resource-server settings of an MCP server (`Security::oauth`).
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The canonical URI of this MCP server (RFC 8707 resource indicator), e.g.
    /// `https://mcp.example.com/mcp`. Published as the metadata's `resource`, and the
    /// audience tokens must carry unless [`OAuthConfig::audience`] says otherwise.
    pub resource: String,
    /// Authorization servers' issuer URLs, published in the metadata (at least one).
    pub authorization_servers: Vec<String>,
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` every token must contain; `None`: [`OAuthConfig::resource`].
    pub audience: Option<String>,
    /// The issuer's signing keys.
    pub jwks: JwksSource,
    /// Scopes published in the metadata's `scopes_supported` (omitted when empty).
    pub scopes_supported: Vec<String>,
    /// Scopes every request needs (403 `insufficient_scope` otherwise).
    pub required_scopes: Vec<String>,
    /// Further scopes a `tools/call` of the named tool needs.
    pub tool_scopes: HashMap<String, Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
}

impl OAuthConfig {
    /// Tokens of `issuer` (also the one authorization server published) for `resource`,
    /// signed with keys from `jwks`; no scopes required; 60 s of leeway.
    pub fn new(resource: impl Into<String>, issuer: impl Into<String>, jwks: JwksSource) -> Self {
        let issuer = issuer.into();
        OAuthConfig {
            resource: resource.into(),
            authorization_servers: vec![issuer.clone()],
            issuer,
            audience: None,
            jwks,
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            tool_scopes: HashMap::new(),
            leeway_secs: 60,
        }
    }
}

/// The OAuth settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum OAuthConfigError {
    /// A setting is invalid.
    #[error("oauth: {0}")]
    Config(String),
    /// The JWKS file could not be read.
    #[error("oauth: cannot read JWKS file {path}: {source}")]
    JwksFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The JWKS holds no usable signing key.
    #[error("oauth: invalid JWKS: {0}")]
    Jwks(String),
}

/// Who the access token was issued to (its `sub`), in the extensions of every request that
/// passed OAuth.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub Arc<str>);

/// What a validated access token said, in the extensions of every request that passed OAuth.
#[derive(Debug, Clone)]
pub struct AccessClaims {
    /// `sub`.
    pub subject: Arc<str>,
    /// Granted scopes: `scope` (space-separated) and `scp` (array or string) together.
    pub scopes: Vec<String>,
    /// `client_id` (RFC 9068), or `azp`.
    pub client_id: Option<String>,
    /// `exp`, in seconds since the Unix epoch.
    pub expires_at: Option<u64>,
    /// Every claim of the token.
    pub claims: Arc<Map<String, Value>>,
}

/// One verification key of a JWKS.
struct Key {
    kid: Option<String>,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// The usable signing keys of a JWKS.
struct KeySet(Vec<Key>);

fn algorithm_named(name: &str) -> Option<Algorithm> {
    ALGORITHMS
        .into_iter()
        .find(|a| format!("{a:?}").eq_ignore_ascii_case(name))
}

impl KeySet {
    /// Reads a JWKS document, keeping the asymmetric signature keys it can use.
    fn parse(doc: &Value) -> Result<KeySet, String> {
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("a JWKS is an object with a `keys` array")?;
        let usable: Vec<Key> = keys.iter().filter_map(Self::key).collect();
        if usable.is_empty() {
            return Err("no usable signature key (RSA, EC P-256/P-384 or Ed25519)".into());
        }
        Ok(KeySet(usable))
    }

    fn key(jwk: &Value) -> Option<Key> {
        let field = |name: &str| jwk.get(name).and_then(Value::as_str);
        if field("use").is_some_and(|u| u != "sig") {
            return None;
        }
        if let Some(ops) = jwk.get("key_ops").and_then(Value::as_array) {
            if !ops.iter().any(|o| o == "verify") {
                return None;
            }
        }
        let (family, key): (Vec<Algorithm>, _) = match (field("kty")?, field("crv")) {
            ("RSA", _) => (
                ALGORITHMS[..6].to_vec(),
                DecodingKey::from_rsa_components(field("n")?, field("e")?),
            ),
            ("EC", Some("P-256")) => (
                vec![Algorithm::ES256],
                DecodingKey::from_ec_components(field("x")?, field("y")?),
            ),
            ("EC", Some("P-384")) => (
                vec![Algorithm::ES384],
                DecodingKey::from_ec_components(field("x")?, field("y")?),
            ),
            ("OKP", Some("Ed25519")) => (
                vec![Algorithm::EdDSA],
                DecodingKey::from_ed_components(field("x")?),
            ),
            _ => return None,
        };
        let key = key
            .inspect_err(|e| tracing::debug!(error = %e, "JWKS key skipped"))
            .ok()?;
        let algorithms = match field("alg") {
            None => family,
            Some(alg) => vec![algorithm_named(alg).filter(|a| family.contains(a))?],
        };
        Some(Key {
            kid: field("kid").map(str::to_owned),
            algorithms,
            key,
        })
    }

    /// The keys that may have signed a token with this header.
    fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<&Key> {
        self.0
            .iter()
            .filter(|k| kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
            .filter(|k| k.algorithms.contains(&alg))
            .collect()
    }
}

type HttpsClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Empty<Bytes>,
>;

#[derive(Clone)]
struct Cached {
    keys: Arc<KeySet>,
    at: Instant,
}

/// A JWKS fetched from the issuer, cached.
struct Remote {
    url: Uri,
    client: HttpsClient,
    cache: RwLock<Option<Cached>>,
    /// When the last fetch was tried; held while fetching, so one fetch runs at a time.
    last_attempt: tokio::sync::Mutex<Option<Instant>>,
}

impl Remote {
    fn new(url: &str) -> Result<Remote, OAuthConfigError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| OAuthConfigError::Config(format!("JWKS URL `{url}`: {e}")))?;
        let loopback = uri.host().is_some_and(is_loopback);
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if loopback => {}
            _ => {
                return Err(OAuthConfigError::Config(format!(
                    "JWKS URL `{url}` must be https (http only to a loopback host)"
                )))
            }
        }
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(JWKS_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| OAuthConfigError::Config(format!("TLS setup: {e}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https);
        Ok(Remote {
            url: uri,
            client,
            cache: RwLock::new(None),
            last_attempt: tokio::sync::Mutex::new(None),
        })
    }

    fn cached(&self) -> Option<Cached> {
        self.cache.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The cached keys while fresh, else a refetch (stale keys if it fails, and while
    /// another caller's fetch is under way).
    async fn keys(&self) -> Result<Arc<KeySet>, String> {
        match self.cached() {
            Some(c) if c.at.elapsed() < JWKS_MAX_AGE => Ok(c.keys),
            Some(c) if self.last_attempt.try_lock().is_err() => Ok(c.keys),
            c => self.refresh(c.map(|c| c.at)).await,
        }
    }

    /// Fetches the JWKS again unless another caller did since `seen` or the last attempt
    /// was under [`JWKS_COOLDOWN`] ago; returns the newest keys there are.
    async fn refresh(&self, seen: Option<Instant>) -> Result<Arc<KeySet>, String> {
        let mut last_attempt = self.last_attempt.lock().await;
        let current = self.cached();
        if let Some(c) = &current {
            if seen.is_none_or(|seen| c.at > seen) {
                return Ok(c.keys.clone());
            }
        }
        if last_attempt.is_some_and(|t| t.elapsed() < JWKS_COOLDOWN) {
            return current
                .map(|c| c.keys)
                .ok_or_else(|| "the issuer's signing keys are unavailable".to_owned());
        }
        *last_attempt = Some(Instant::now());
        match tokio::time::timeout(JWKS_TIMEOUT, self.fetch()).await {
            Ok(Ok(keys)) => {
                let keys = Arc::new(keys);
                *self.cache.write().unwrap_or_else(|p| p.into_inner()) = Some(Cached {
                    keys: keys.clone(),
                    at: Instant::now(),
                });
                Ok(keys)
            }
            outcome => {
                let why = match outcome {
                    Ok(Err(why)) => why,
                    _ => "timed out".to_owned(),
                };
                tracing::warn!(url = %self.url, %why, "fetching the JWKS failed");
                current.map(|c| c.keys).ok_or(why)
            }
        }
    }

    async fn fetch(&self) -> Result<KeySet, String> {
        use http_body_util::BodyExt;
        let request = axum::http::Request::get(self.url.clone())
            .header(header::ACCEPT, "application/json")
            .body(http_body_util::Empty::new())
            .map_err(|e| e.to_string())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), JWKS_MAX_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let doc: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        KeySet::parse(&doc)
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

enum Keys {
    Fixed(Arc<KeySet>),
    Remote(Box<Remote>),
}

/// Why a request is refused.
enum Refusal {
    /// No bearer token: a bare challenge.
    Missing,
    /// 400 `invalid_request`.
    BadRequest(&'static str),
    /// 401 `invalid_token`.
    Invalid(Cow<'static, str>),
    /// 403 `insufficient_scope`: the scopes the operation needs.
    Scope(Vec<String>),
    /// 503: the keys could not be had.
    Unavailable,
    /// 413.
    TooLarge,
}

/// A checked [`OAuthConfig`], ready to serve.
pub(crate) struct OAuth {
    config: OAuthConfig,
    audience: String,
    /// `resource_metadata` of the challenges.
    metadata_url: String,
    /// Where the metadata is served.
    metadata_paths: Vec<String>,
    metadata: Bytes,
    keys: Keys,
}

/// RFC 6749 §3.3 `scope-token`: visible ASCII but `"` and `\`.
fn valid_scope(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

fn http_url(what: &str, url: &str) -> Result<Uri, OAuthConfigError> {
    let uri: Uri = url
        .parse()
        .map_err(|e| OAuthConfigError::Config(format!("{what} `{url}` is not a URI: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(OAuthConfigError::Config(format!(
            "{what} `{url}` must be an absolute http(s) URI"
        )));
    }
    Ok(uri)
}

impl OAuth {
    /// Checks `config` and loads its keys (a JWKS URL is fetched on first use). `mcp_path`
    /// is the MCP endpoint's path, under which the metadata is served too.
    pub(crate) async fn new(
        config: &OAuthConfig,
        mcp_path: &str,
    ) -> Result<OAuth, OAuthConfigError> {
        let resource = http_url("resource", &config.resource)?;
        if config.resource.contains('#') {
            return Err(OAuthConfigError::Config(
                "resource must not have a fragment".into(),
            ));
        }
        if config.authorization_servers.is_empty() {
            return Err(OAuthConfigError::Config(
                "at least one authorization server is needed".into(),
            ));
        }
        for s in &config.authorization_servers {
            http_url("authorization server", s)?;
        }
        if config.issuer.is_empty() {
            return Err(OAuthConfigError::Config("issuer is empty".into()));
        }
        let scopes = config
            .scopes_supported
            .iter()
            .chain(&config.required_scopes)
            .chain(config.tool_scopes.values().flatten());
        for s in scopes {
            if !valid_scope(s) {
                return Err(OAuthConfigError::Config(format!("invalid scope `{s}`")));
            }
        }
        let keys = match &config.jwks {
            JwksSource::File(path) => {
                let bytes =
                    tokio::fs::read(path)
                        .await
                        .map_err(|source| OAuthConfigError::JwksFile {
                            path: path.clone(),
                            source,
                        })?;
                let doc: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| OAuthConfigError::Jwks(format!("{}: {e}", path.display())))?;
                Keys::Fixed(Arc::new(
                    KeySet::parse(&doc).map_err(OAuthConfigError::Jwks)?,
                ))
            }
            JwksSource::Inline(doc) => Keys::Fixed(Arc::new(
                KeySet::parse(doc).map_err(OAuthConfigError::Jwks)?,
            )),
            JwksSource::Url(url) => Keys::Remote(Box::new(Remote::new(url)?)),
        };
        // RFC 9728 §3.1: the well-known segment goes between the host and the resource's path.
        let origin = format!(
            "{}://{}",
            resource.scheme_str().unwrap_or("https"),
            resource.authority().map(|a| a.as_str()).unwrap_or("")
        );
        let resource_path = resource.path().trim_end_matches('/');
        let metadata_url = format!("{origin}{WELL_KNOWN}{resource_path}");
        let mut metadata_paths = vec![WELL_KNOWN.to_owned()];
        for suffix in [mcp_path.trim_end_matches('/'), resource_path] {
            let path = format!("{WELL_KNOWN}{suffix}");
            if !suffix.is_empty() && !metadata_paths.contains(&path) {
                metadata_paths.push(path);
            }
        }
        let mut doc = serde_json::json!({
            "resource": config.resource,
            "authorization_servers": config.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !config.scopes_supported.is_empty() {
            doc["scopes_supported"] = serde_json::json!(config.scopes_supported);
        }
        Ok(OAuth {
            audience: config
                .audience
                .clone()
                .unwrap_or_else(|| config.resource.clone()),
            config: config.clone(),
            metadata_url,
            metadata_paths,
            metadata: Bytes::from(doc.to_string()),
            keys,
        })
    }

    /// Serves the Protected Resource Metadata at its well-known paths.
    pub(crate) fn routes<S>(&self, mut router: axum::Router<S>) -> axum::Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        for path in &self.metadata_paths {
            let doc = self.metadata.clone();
            router = router.route(
                path,
                axum::routing::get(move || {
                    let doc = doc.clone();
                    async move {
                        (
                            [
                                (header::CONTENT_TYPE, "application/json"),
                                (header::CACHE_CONTROL, "max-age=3600"),
                            ],
                            doc,
                        )
                    }
                }),
            );
        }
        router
    }

    async fn keys(&self) -> Result<Arc<KeySet>, Refusal> {
        match &self.keys {
            Keys::Fixed(k) => Ok(k.clone()),
            Keys::Remote(r) => r.keys().await.map_err(|why| {
                tracing::warn!(%why, "no JWKS to check tokens with");
                Refusal::Unavailable
            }),
        }
    }

    /// Validates a bearer token: signature, `iss`, `aud`, `exp`, `nbf`, `sub`.
    async fn verify(&self, token: &str) -> Result<AccessClaims, Refusal> {
        let invalid = |why: &'static str| Refusal::Invalid(Cow::Borrowed(why));
        let head = jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed token"))?;
        if !ALGORITHMS.contains(&head.alg) {
            return Err(invalid("unsupported signature algorithm"));
        }
        if head.crit.is_some() {
            return Err(invalid("unsupported critical header parameters"));
        }
        let kid = head.kid.as_deref();
        let mut keys = self.keys().await?;
        if keys.candidates(kid, head.alg).is_empty() {
            if let Keys::Remote(remote) = &self.keys {
                // The issuer may have rotated its keys.
                let seen = remote.cached().map(|c| c.at);
                keys = remote
                    .refresh(seen)
                    .await
                    .map_err(|_| Refusal::Unavailable)?;
            }
        }
        let candidates = keys.candidates(kid, head.alg);
        if candidates.is_empty() {
            return Err(invalid("no signing key of the issuer matches the token"));
        }
        let mut validation = Validation::new(head.alg);
        validation.leeway = self.config.leeway_secs;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.audience]);
        let mut outcome = Err(invalid("invalid signature"));
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
                Ok(data) => {
                    outcome = Ok(data.claims);
                    break;
                }
                Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::InvalidSignature => {}
                Err(e) => {
                    outcome = Err(claim_error(e.kind()));
                    break;
                }
            }
        }
        let claims = outcome?;
        if claims.get("iss").and_then(Value::as_str) != Some(self.config.issuer.as_str()) {
            return Err(invalid("the token is from another issuer"));
        }
        let subject: Arc<str> = match claims.get("sub").and_then(Value::as_str) {
            Some(s) if !s.is_empty() => s.into(),
            _ => return Err(invalid("the token has no subject")),
        };
        let mut scopes: Vec<String> = Vec::new();
        let mut add = |s: &str| {
            if !scopes.iter().any(|have| have == s) {
                scopes.push(s.to_owned());
            }
        };
        if let Some(s) = claims.get("scope").and_then(Value::as_str) {
            s.split_whitespace().for_each(&mut add);
        }
        match claims.get("scp") {
            Some(Value::String(s)) => s.split_whitespace().for_each(&mut add),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(add),
            _ => {}
        }
        let client_id = ["client_id", "azp"]
            .iter()
            .find_map(|k| claims.get(*k).and_then(Value::as_str))
            .map(str::to_owned);
        Ok(AccessClaims {
            subject,
            scopes,
            client_id,
            expires_at: claims.get("exp").and_then(Value::as_u64),
            claims: Arc::new(claims),
        })
    }

    /// The scopes `have` lacks of those `needed`: `None` when nothing lacks, else every scope
    /// the operation needs (one challenge names them all).
    fn lacking(have: &[String], needed: &[&String]) -> Option<Vec<String>> {
        needed
            .iter()
            .any(|n| !have.contains(n))
            .then(|| needed.iter().map(|s| (*s).clone()).collect())
    }

    /// The scopes a request needs beyond `required_scopes`, by the tool a `tools/call` names.
    fn tool_scopes(&self, body: &[u8]) -> Result<Option<&Vec<String>>, Refusal> {
        #[derive(Deserialize)]
        struct Peek<'a> {
            #[serde(borrow, default)]
            method: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            params: Option<&'a serde_json::value::RawValue>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow, default)]
            name: Option<Cow<'a, str>>,
        }
        // What does not parse is no tool call: the MCP handler rejects it.
        let Ok(peek) = serde_json::from_slice::<Peek>(body) else {
            return Ok(None);
        };
        if peek.method.as_deref() != Some(method::TOOLS_CALL) {
            return Ok(None);
        }
        // Positional (non-object) params name no tool: the MCP handler refuses them (-32602).
        let Some(params) = peek
            .params
            .filter(|p| jsonrpc::not_an_object(p.get()).is_none())
        else {
            return Ok(None);
        };
        let params: Params = serde_json::from_str(params.get())
            .map_err(|_| Refusal::BadRequest("unreadable tools/call params"))?;
        Ok(params.name.and_then(|n| self.config.tool_scopes.get(&*n)))
    }

    async fn authorize(&self, request: Request, max_body_bytes: usize) -> Result<Request, Refusal> {
        let token = bearer_token(request.headers())?;
        let claims = self.verify(token).await?;
        let required: Vec<&String> = self.config.required_scopes.iter().collect();
        if let Some(scopes) = Self::lacking(&claims.scopes, &required) {
            return Err(Refusal::Scope(scopes));
        }
        let mut request = if !self.config.tool_scopes.is_empty() && request.method() == Method::POST
        {
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, max_body_bytes)
                .await
                .map_err(|_| Refusal::TooLarge)?;
            if let Some(extra) = self.tool_scopes(&bytes)? {
                let mut needed = required.clone();
                needed.extend(extra.iter().filter(|s| !required.contains(s)));
                if let Some(scopes) = Self::lacking(&claims.scopes, &needed) {
                    return Err(Refusal::Scope(scopes));
                }
            }
            Request::from_parts(parts, Body::from(bytes))
        } else {
            request
        };
        request
            .extensions_mut()
            .insert(Principal(claims.subject.clone()));
        request.extensions_mut().insert(claims);
        Ok(request)
    }

    fn refuse(&self, refusal: Refusal) -> Response {
        let rm = &self.metadata_url;
        let (status, challenge, error, description): (_, _, _, Cow<'static, str>) = match refusal
        {
            Refusal::Missing => {
                let mut c = format!("Bearer resource_metadata=\"{rm}\"");
                if !self.config.required_scopes.is_empty() {
                    c.push_str(&format!(
                        ", scope=\"{}\"",
                        self.config.required_scopes.join(" ")
                    ));
                }
                (
                    StatusCode::UNAUTHORIZED,
                    Some(c),
                    "unauthorized",
                    "an OAuth access token is needed (Authorization: Bearer)".into(),
                )
            }
            Refusal::BadRequest(why) => (
                StatusCode::BAD_REQUEST,
                Some(format!(
                    "Bearer error=\"invalid_request\", error_description=\"{why}\", resource_metadata=\"{rm}\""
                )),
                "invalid_request",
                why.into(),
            ),
            Refusal::Invalid(why) => (
                StatusCode::UNAUTHORIZED,
                Some(format!(
                    "Bearer error=\"invalid_token\", error_description=\"{why}\", resource_metadata=\"{rm}\""
                )),
                "invalid_token",
                why,
            ),
            Refusal::Scope(scopes) => {
                let scope = scopes.join(" ");
                (
                    StatusCode::FORBIDDEN,
                    Some(format!(
                        "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{rm}\", error_description=\"the access token lacks a needed scope\""
                    )),
                    "insufficient_scope",
                    format!("this request needs the scopes: {scope}").into(),
                )
            }
            Refusal::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "temporarily_unavailable",
                "the issuer's signing keys are unavailable; try again later".into(),
            ),
            Refusal::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                "invalid_request",
                "request body too large".into(),
            ),
        };
        let body = serde_json::json!({"error": error, "error_description": description});
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
        if let Some(value) = challenge.and_then(|c| HeaderValue::try_from(c).ok()) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// Maps a claims failure of `jsonwebtoken` to the `error_description` of the challenge.
fn claim_error(kind: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind as K;
    Refusal::Invalid(Cow::Borrowed(match kind {
        K::ExpiredSignature => "the token expired",
        K::ImmatureSignature => "the token is not valid yet",
        K::InvalidIssuer => "the token is from another issuer",
        K::InvalidAudience => "the token was not issued for this resource",
        K::MissingRequiredClaim(c) => match c.as_str() {
            "exp" => "the token has no expiry",
            "iss" => "the token has no issuer",
            "aud" => "the token has no audience",
            _ => "the token has no subject",
        },
        K::InvalidAlgorithm => "the signing key does not fit the token's algorithm",
        _ => "invalid token",
    }))
}

/// The bearer token of the `Authorization` header (RFC 6750 §2.1); never the query string.
fn bearer_token(headers: &HeaderMap) -> Result<&str, Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Refusal::Missing);
    };
    if values.next().is_some() {
        return Err(Refusal::BadRequest("more than one Authorization header"));
    }
    let value = value
        .to_str()
        .map_err(|_| Refusal::BadRequest("unreadable Authorization header"))?;
    let Some((scheme, token)) = value.split_once(' ') else {
        return Err(Refusal::Missing);
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Missing);
    }
    let token = token.trim();
    // b64token (RFC 6750 §2.1).
    let b64token = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b));
    if !b64token {
        return Err(Refusal::Invalid(Cow::Borrowed("malformed token")));
    }
    Ok(token)
}

/// The OAuth check of every request but the metadata's: on success the request goes on with
/// [`Principal`] and [`AccessClaims`] in its extensions.
pub(crate) async fn guard(
    auth: &OAuth,
    max_body_bytes: usize,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if auth.metadata_paths.iter().any(|p| p == path) {
        return next.run(request).await;
    }
    match auth.authorize(request, max_body_bytes).await {
        Ok(request) => next.run(request).await,
        Err(refusal) => auth.refuse(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JWKS: &str = include_str!("../../tests/data/oauth-jwks.json");

    fn config() -> OAuthConfig {
        let mut c = OAuthConfig::new(
            "https://mcp.example.com/mcp",
            "https://auth.example.com",
            JwksSource::Inline(serde_json::from_str(JWKS).unwrap()),
        );
        c.scopes_supported = vec!["mcp:read".into(), "mcp:admin".into()];
        c.required_scopes = vec!["mcp:read".into()];
        c.tool_scopes
            .insert("admin".into(), vec!["mcp:admin".into()]);
        c
    }

    #[tokio::test]
    async fn metadata_url_and_paths_follow_rfc_9728() {
        let auth = OAuth::new(&config(), "/mcp").await.unwrap();
        assert_eq!(
            auth.metadata_url,
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            auth.metadata_paths,
            [
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp"
            ]
        );
        let mut c = config();
        c.resource = "https://mcp.example.com".into();
        let auth = OAuth::new(&c, "/mcp").await.unwrap();
        assert_eq!(
            auth.metadata_url,
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        let doc: Value = serde_json::from_slice(&auth.metadata).unwrap();
        assert_eq!(
            doc["bearer_methods_supported"],
            serde_json::json!(["header"])
        );
        assert_eq!(doc["authorization_servers"][0], "https://auth.example.com");
    }

    #[tokio::test]
    async fn bad_settings_are_refused() {
        let mut c = config();
        c.resource = "mcp.example.com".into();
        assert!(OAuth::new(&c, "/mcp").await.is_err());
        let mut c = config();
        c.authorization_servers.clear();
        assert!(OAuth::new(&c, "/mcp").await.is_err());
        let mut c = config();
        c.required_scopes = vec!["a\"b".into()];
        assert!(OAuth::new(&c, "/mcp").await.is_err());
        let mut c = config();
        c.jwks = JwksSource::Url("http://auth.example.com/jwks".into());
        assert!(
            OAuth::new(&c, "/mcp").await.is_err(),
            "plain http off loopback"
        );
        c.jwks = JwksSource::Url("http://127.0.0.1:9/jwks".into());
        assert!(OAuth::new(&c, "/mcp").await.is_ok());
        let mut c = config();
        c.jwks = JwksSource::Inline(serde_json::json!({"keys":[{"kty":"oct","k":"c2VjcmV0"}]}));
        assert!(
            matches!(OAuth::new(&c, "/mcp").await, Err(OAuthConfigError::Jwks(_))),
            "symmetric keys are never used"
        );
    }

    #[test]
    fn jwks_keys_are_matched_by_kid_and_algorithm() {
        let keys = KeySet::parse(&serde_json::from_str(JWKS).unwrap()).unwrap();
        assert_eq!(keys.candidates(Some("test-rsa"), Algorithm::RS256).len(), 1);
        assert_eq!(keys.candidates(Some("test-rsa"), Algorithm::ES256).len(), 0);
        assert_eq!(keys.candidates(None, Algorithm::ES256).len(), 1);
        assert_eq!(keys.candidates(Some("nope"), Algorithm::RS256).len(), 0);
    }

    #[test]
    fn bearer_tokens_come_from_the_authorization_header_only() {
        let mut h = HeaderMap::new();
        assert!(matches!(bearer_token(&h), Err(Refusal::Missing)));
        h.insert(header::AUTHORIZATION, "Basic dXNlcjpwYXNz".parse().unwrap());
        assert!(matches!(bearer_token(&h), Err(Refusal::Missing)));
        h.insert(header::AUTHORIZATION, "bearer abc.def.ghi".parse().unwrap());
        assert_eq!(bearer_token(&h).ok(), Some("abc.def.ghi"));
        h.insert(header::AUTHORIZATION, "Bearer a\"b".parse().unwrap());
        assert!(matches!(bearer_token(&h), Err(Refusal::Invalid(_))));
        h.append(header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert!(matches!(bearer_token(&h), Err(Refusal::BadRequest(_))));
    }

    #[tokio::test]
    async fn tool_calls_are_peeked_for_their_tool() {
        let auth = OAuth::new(&config(), "/mcp").await.unwrap();
        let admin = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"admin"}}"#;
        assert!(auth.tool_scopes(admin).ok().flatten().is_some());
        let escaped =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"\u0061dmin"}}"#;
        assert!(auth.tool_scopes(escaped).ok().flatten().is_some());
        let other = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
        assert!(auth.tool_scopes(other).ok().flatten().is_none());
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(auth.tool_scopes(list).ok().flatten().is_none());
        let dup = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"admin"}}"#;
        assert!(matches!(auth.tool_scopes(dup), Err(Refusal::BadRequest(_))));
    }

    fn token(claims: &Value) -> String {
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(include_bytes!(
            "../../tests/data/oauth-rsa.pem"
        ))
        .unwrap();
        let mut header = jsonwebtoken::Header::new(Algorithm::RS256);
        header.kid = Some("test-rsa".into());
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }

    fn post(token: &str, body: &'static str) -> Request {
        Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::from(body))
            .unwrap()
    }

    #[tokio::test]
    async fn a_valid_token_puts_the_principal_and_claims_in_the_extensions() {
        let auth = OAuth::new(&config(), "/mcp").await.unwrap();
        let token = token(&serde_json::json!({
            "iss": "https://auth.example.com",
            "aud": "https://mcp.example.com/mcp",
            "sub": "alice",
            "azp": "client-1",
            "scope": "mcp:read extra",
            "exp": jsonwebtoken::get_current_timestamp() + 300,
        }));
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
        let Ok(request) = auth.authorize(post(&token, body), 1024).await else {
            panic!("refused");
        };
        assert_eq!(
            request.extensions().get::<Principal>(),
            Some(&Principal("alice".into()))
        );
        let claims = request.extensions().get::<AccessClaims>().unwrap();
        assert_eq!(claims.scopes, ["mcp:read", "extra"]);
        assert_eq!(claims.client_id.as_deref(), Some("client-1"));
        assert_eq!(claims.claims["sub"], "alice");
        // The body read for the tool check is handed on whole.
        let bytes = axum::body::to_bytes(request.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&bytes[..], body.as_bytes());
        // Past the body limit: 413, not a bypass.
        assert!(matches!(
            auth.authorize(post(&token, body), 16).await,
            Err(Refusal::TooLarge)
        ));
    }

    #[test]
    fn scope_challenges_name_every_needed_scope() {
        let (read, admin) = ("mcp:read".to_owned(), "mcp:admin".to_owned());
        let granted = std::slice::from_ref(&read);
        assert_eq!(OAuth::lacking(granted, &[&read]), None);
        assert_eq!(
            OAuth::lacking(granted, &[&read, &admin]),
            Some(vec![read.clone(), admin])
        );
    }
}
