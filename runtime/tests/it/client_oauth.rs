//! The MCP client's OAuth 2.1 client (`toolyard::client::oauth`) against a fake
//! authorization server and a fake protected resource written here with axum on 127.0.0.1:
//! each test drives the [`AuthProvider`] the way the HTTP transport does (a refusal, then
//! the header for the retry) and checks what reached the servers.
#![cfg(feature = "http")]

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use toolyard::client::oauth::{
    AuthorizationHandler, CrossAppAccess, Grant, HeadlessRedirect, LoopbackRedirect, OAuthClient,
    PreRegisteredClient, SigningKey,
};
use toolyard::client::StreamableHttpTransport;
use toolyard::client::{AuthChallenge, AuthProvider};
use toolyard::client::{ClientBuilder, ProtocolChoice};
use toolyard::http::{HttpConfig, JwksSource, OAuthConfig, Security};
use toolyard::proto::{ContentBlock, Implementation, ProtocolVersion};
use toolyard::{tool_fn, ServerBuilder};

type Params = HashMap<String, String>;

const EC_KEY: &str = include_str!("../data/oauth-ec.pem");
const RSA_KEY: &[u8] = include_bytes!("../data/oauth-rsa.pem");
const JWKS: &str = include_str!("../data/oauth-jwks.json");

async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    (listener, base)
}

fn spawn(listener: TcpListener, app: Router) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn form(body: &[u8]) -> Params {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Some((unescape(id), unescape(secret)))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---- the fake authorization server -------------------------------------------------------

#[derive(Debug, Clone)]
enum Event {
    /// A GET of a metadata candidate URL (served or not).
    Metadata(String),
    Register(Value),
    Authorize(Params),
    Token {
        params: Params,
        basic: Option<(String, String)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Iss {
    Correct,
    Omit,
    Wrong,
    TrailingSlash,
}

#[derive(Clone)]
struct AsConfig {
    /// The issuer's path (`""` or e.g. `/tenant1`); endpoints live under it.
    prefix: String,
    /// Where the metadata is served; `None`: RFC 8414 path insertion. `Some(vec![])`: no
    /// metadata at all.
    metadata_paths: Option<Vec<String>>,
    /// An `issuer` to publish instead of the real one.
    metadata_issuer: Option<String>,
    auth_methods: Vec<String>,
    scopes_supported: Option<Vec<String>>,
    cimd: bool,
    registration: bool,
    iss_supported: bool,
    iss: Iss,
    refresh_tokens: bool,
    expires_in: u64,
    registered_method: Option<String>,
    registered_secret: bool,
    /// Issue RS256 JWT access tokens (issuer = this server, `aud` = the `resource`).
    jwt_tokens: bool,
    client_id_prefix: String,
    /// Refuse every token request with a plain-text echo of the request body.
    echo_token_errors: bool,
    /// A `token_endpoint` to publish instead of the real one.
    token_endpoint: Option<String>,
}

impl Default for AsConfig {
    fn default() -> Self {
        AsConfig {
            prefix: String::new(),
            metadata_paths: None,
            metadata_issuer: None,
            auth_methods: vec!["none".into()],
            scopes_supported: None,
            cimd: false,
            registration: true,
            iss_supported: false,
            iss: Iss::Omit,
            refresh_tokens: false,
            expires_in: 3600,
            registered_method: None,
            registered_secret: true,
            jwt_tokens: false,
            client_id_prefix: "client-".into(),
            echo_token_errors: false,
            token_endpoint: None,
        }
    }
}

struct CodeGrant {
    challenge: String,
    scope: Option<String>,
    resource: Option<String>,
}

struct AsShared {
    cfg: AsConfig,
    base: String,
    issuer: String,
    log: Mutex<Vec<Event>>,
    codes: Mutex<HashMap<String, CodeGrant>>,
    refresh: Mutex<HashMap<String, Option<String>>>,
    n: AtomicUsize,
}

impl AsShared {
    fn push(&self, e: Event) {
        self.log.lock().unwrap().push(e);
    }
    fn next(&self) -> usize {
        self.n.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn metadata_paths(&self) -> Vec<String> {
        self.cfg.metadata_paths.clone().unwrap_or_else(|| {
            vec![format!(
                "/.well-known/oauth-authorization-server{}",
                self.cfg.prefix
            )]
        })
    }
    fn metadata(&self) -> Value {
        let c = &self.cfg;
        let at = |p: &str| format!("{}{}{p}", self.base, c.prefix);
        let mut doc = json!({
            "issuer": c.metadata_issuer.clone().unwrap_or_else(|| self.issuer.clone()),
            "authorization_endpoint": at("/authorize"),
            "token_endpoint": at("/token"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": c.auth_methods,
        });
        if c.registration {
            doc["registration_endpoint"] = json!(at("/register"));
        }
        if let Some(t) = &c.token_endpoint {
            doc["token_endpoint"] = json!(t);
        }
        if let Some(s) = &c.scopes_supported {
            doc["scopes_supported"] = json!(s);
        }
        if c.cimd {
            doc["client_id_metadata_document_supported"] = json!(true);
        }
        if c.iss_supported {
            doc["authorization_response_iss_parameter_supported"] = json!(true);
        }
        doc
    }
}

struct FakeAs {
    shared: Arc<AsShared>,
    task: JoinHandle<()>,
}

impl Drop for FakeAs {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeAs {
    fn issuer(&self) -> &str {
        &self.shared.issuer
    }
    fn base(&self) -> &str {
        &self.shared.base
    }
    fn events(&self) -> Vec<Event> {
        self.shared.log.lock().unwrap().clone()
    }
    fn authorizes(&self) -> Vec<Params> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Authorize(p) => Some(p),
                _ => None,
            })
            .collect()
    }
    fn tokens(&self) -> Vec<(Params, Option<(String, String)>)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Token { params, basic } => Some((params, basic)),
                _ => None,
            })
            .collect()
    }
    fn registrations(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Register(v) => Some(v),
                _ => None,
            })
            .collect()
    }
    fn metadata_gets(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Metadata(p) => Some(p),
                _ => None,
            })
            .collect()
    }
}

async fn start_as(cfg: AsConfig) -> FakeAs {
    let (listener, base) = bind().await;
    start_as_on(listener, base, cfg, Router::new()).await
}

/// Starts the authorization server on `listener`, merged with `extra` routes.
async fn start_as_on(listener: TcpListener, base: String, cfg: AsConfig, extra: Router) -> FakeAs {
    let shared = Arc::new(AsShared {
        issuer: format!("{base}{}", cfg.prefix),
        base,
        cfg: cfg.clone(),
        log: Mutex::new(Vec::new()),
        codes: Mutex::new(HashMap::new()),
        refresh: Mutex::new(HashMap::new()),
        n: AtomicUsize::new(0),
    });
    let p = &cfg.prefix;
    let mut app = Router::new()
        .route(&format!("{p}/authorize"), get(authorize))
        .route(&format!("{p}/token"), post(token));
    if cfg.registration {
        app = app.route(&format!("{p}/register"), post(register));
    }
    let app = app
        .fallback(metadata)
        .with_state(shared.clone())
        .merge(extra);
    let task = spawn(listener, app);
    FakeAs { shared, task }
}

async fn metadata(State(s): State<Arc<AsShared>>, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    let served = s.metadata_paths().contains(&path);
    s.push(Event::Metadata(path));
    if served {
        json_response(StatusCode::OK, s.metadata())
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

async fn authorize(State(s): State<Arc<AsShared>>, Query(q): Query<Params>) -> Response {
    s.push(Event::Authorize(q.clone()));
    let code = format!("code-{}", s.next());
    s.codes.lock().unwrap().insert(
        code.clone(),
        CodeGrant {
            challenge: q.get("code_challenge").cloned().unwrap_or_default(),
            scope: q.get("scope").cloned(),
            resource: q.get("resource").cloned(),
        },
    );
    let mut redirect = url::Url::parse(&q["redirect_uri"]).unwrap();
    {
        let mut pairs = redirect.query_pairs_mut();
        pairs.append_pair("code", &code);
        if let Some(state) = q.get("state") {
            pairs.append_pair("state", state);
        }
        match s.cfg.iss {
            Iss::Correct => {
                pairs.append_pair("iss", &s.issuer);
            }
            Iss::Wrong => {
                pairs.append_pair("iss", "https://evil.example.com");
            }
            Iss::TrailingSlash => {
                pairs.append_pair("iss", &format!("{}/", s.issuer));
            }
            Iss::Omit => {}
        }
    }
    (
        StatusCode::FOUND,
        [(header::LOCATION, redirect.to_string())],
    )
        .into_response()
}

fn oauth_error(error: &str) -> Response {
    json_response(StatusCode::BAD_REQUEST, json!({ "error": error }))
}

async fn token(State(s): State<Arc<AsShared>>, headers: HeaderMap, body: Bytes) -> Response {
    let params = form(&body);
    let basic = basic_credentials(&headers);
    s.push(Event::Token {
        params: params.clone(),
        basic,
    });
    if s.cfg.echo_token_errors {
        return (StatusCode::BAD_REQUEST, body).into_response();
    }
    let grant = params.get("grant_type").map(String::as_str).unwrap_or("");
    let (scope, refreshable) = match grant {
        "authorization_code" => {
            let Some(code) = params
                .get("code")
                .and_then(|c| s.codes.lock().unwrap().remove(c))
            else {
                return oauth_error("invalid_grant");
            };
            let verifier = params.get("code_verifier").cloned().unwrap_or_default();
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if computed != code.challenge || params.get("resource") != code.resource.as_ref() {
                return oauth_error("invalid_grant");
            }
            (code.scope, true)
        }
        "refresh_token" => {
            let known = params
                .get("refresh_token")
                .and_then(|r| s.refresh.lock().unwrap().remove(r));
            match known {
                Some(scope) => (scope, true),
                None => return oauth_error("invalid_grant"),
            }
        }
        "client_credentials" | "urn:ietf:params:oauth:grant-type:jwt-bearer" => {
            (params.get("scope").cloned(), false)
        }
        _ => return oauth_error("unsupported_grant_type"),
    };
    let n = s.next();
    let access_token = if s.cfg.jwt_tokens {
        let claims = json!({
            "iss": s.issuer,
            "aud": params.get("resource"),
            "sub": "alice",
            "scope": scope.clone().unwrap_or_default(),
            "iat": now(),
            "exp": now() + s.cfg.expires_in,
        });
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("test-rsa".into());
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_rsa_pem(RSA_KEY).unwrap(),
        )
        .unwrap()
    } else {
        format!("at-{}{n}", s.cfg.client_id_prefix)
    };
    let mut body = json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": s.cfg.expires_in,
    });
    if let Some(scope) = &scope {
        body["scope"] = json!(scope);
    }
    if s.cfg.refresh_tokens && refreshable {
        let rt = format!("rt-{n}");
        s.refresh.lock().unwrap().insert(rt.clone(), scope);
        body["refresh_token"] = json!(rt);
    }
    json_response(StatusCode::OK, body)
}

async fn register(State(s): State<Arc<AsShared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.push(Event::Register(request));
    let mut answer = json!({
        "client_id": format!("{}{}", s.cfg.client_id_prefix, s.next()),
        "client_name": "registered",
    });
    if s.cfg.registered_secret {
        answer["client_secret"] = json!("registered-secret");
    }
    if let Some(m) = &s.cfg.registered_method {
        answer["token_endpoint_auth_method"] = json!(m);
    }
    json_response(StatusCode::CREATED, answer)
}

// ---- the fake protected resource (only its metadata matters here) ------------------------

struct FakeRs {
    base: String,
    prm: Arc<Mutex<Value>>,
    gets: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for FakeRs {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRs {
    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
    fn prm_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.base)
    }
    /// A 401 challenge naming the resource metadata, with extra parameters.
    fn challenge(&self, extra: &str) -> AuthChallenge {
        let mut h = format!(r#"Bearer resource_metadata="{}""#, self.prm_url());
        if !extra.is_empty() {
            h.push_str(", ");
            h.push_str(extra);
        }
        AuthChallenge {
            status: 401,
            www_authenticate: Some(h),
            resource: self.url(),
        }
    }
    fn set_prm(&self, doc: Value) {
        *self.prm.lock().unwrap() = doc;
    }
    fn gets(&self) -> Vec<String> {
        self.gets.lock().unwrap().clone()
    }
}

/// A resource server serving `prm` (built from its base URL) at `prm_path`.
async fn start_rs(prm_path: Option<&str>, prm: impl FnOnce(&str) -> Value) -> FakeRs {
    let (listener, base) = bind().await;
    let doc = Arc::new(Mutex::new(prm(&base)));
    let gets = Arc::new(Mutex::new(Vec::new()));
    let path = prm_path.map(str::to_owned);
    let app = Router::new().fallback({
        let (doc, gets) = (doc.clone(), gets.clone());
        move |uri: Uri| {
            let (doc, gets, path) = (doc.clone(), gets.clone(), path.clone());
            async move {
                gets.lock().unwrap().push(uri.path().to_owned());
                if path.as_deref() == Some(uri.path()) {
                    json_response(StatusCode::OK, doc.lock().unwrap().clone())
                } else {
                    StatusCode::NOT_FOUND.into_response()
                }
            }
        }
    });
    let task = spawn(listener, app);
    FakeRs {
        base,
        prm: doc,
        gets,
        task,
    }
}

/// A resource server with path-based metadata naming `issuer`.
async fn rs_for(issuer: &str, scopes: Option<Vec<&str>>) -> FakeRs {
    let issuer = issuer.to_owned();
    start_rs(
        Some("/.well-known/oauth-protected-resource/mcp"),
        move |base| {
            let mut doc = json!({
                "resource": format!("{base}/mcp"),
                "authorization_servers": [issuer],
            });
            if let Some(s) = scopes {
                doc["scopes_supported"] = json!(s);
            }
            doc
        },
    )
    .await
}

fn insufficient_scope(rs: &FakeRs, scope: &str) -> AuthChallenge {
    AuthChallenge {
        status: 403,
        www_authenticate: Some(format!(
            r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="{}""#,
            rs.prm_url()
        )),
        resource: rs.url(),
    }
}

async fn header(client: &OAuthClient) -> Option<String> {
    client.authorization().await.unwrap()
}

fn scope_of(p: &Params) -> Option<&str> {
    p.get("scope").map(String::as_str)
}

// ---- tests -------------------------------------------------------------------------------

#[tokio::test]
async fn default_flow_discovers_registers_and_authorizes() {
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();

    assert_eq!(
        header(&client).await,
        None,
        "no token before the first refusal"
    );
    client.unauthorized(rs.challenge("")).await.unwrap();
    let token = header(&client).await.expect("a token after authorization");
    assert!(token.starts_with("Bearer at-"), "{token}");

    assert_eq!(rs.gets(), ["/.well-known/oauth-protected-resource/mcp"]);
    assert_eq!(
        auth.metadata_gets(),
        ["/.well-known/oauth-authorization-server"]
    );
    let reg = &auth.registrations()[0];
    assert_eq!(reg["application_type"], "native");
    assert_eq!(reg["token_endpoint_auth_method"], "none");
    assert_eq!(
        reg["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(
        reg["redirect_uris"],
        json!(["http://127.0.0.1:8976/callback"])
    );

    let a = &auth.authorizes()[0];
    assert_eq!(a["response_type"], "code");
    assert_eq!(a["code_challenge_method"], "S256");
    assert_eq!(a["resource"], rs.url());
    assert_eq!(a["client_id"], "client-1");
    assert!(a["state"].len() >= 32);
    assert_eq!(scope_of(a), None, "no scope anywhere: none requested");

    let (t, basic) = &auth.tokens()[0];
    assert_eq!(t["grant_type"], "authorization_code");
    assert_eq!(t["resource"], rs.url());
    assert_eq!(t["client_id"], "client-1");
    assert!(t.contains_key("code_verifier"));
    assert!(
        !t.contains_key("client_secret"),
        "the AS only takes public clients"
    );
    assert!(basic.is_none());

    let stored = client.tokens().await.unwrap().unwrap();
    assert_eq!(stored.issuer.as_deref(), Some(auth.issuer()));
    assert!(
        !format!("{stored:?}").contains("at-"),
        "Debug must redact tokens"
    );
}

#[tokio::test]
async fn well_known_probing_and_issuers_with_a_path() {
    // Metadata only at the root well-known URL, naming the server's origin as the resource;
    // the issuer has a path and publishes only OpenID configuration, appended.
    let auth = start_as(AsConfig {
        prefix: "/tenant1".into(),
        metadata_paths: Some(vec!["/tenant1/.well-known/openid-configuration".into()]),
        ..AsConfig::default()
    })
    .await;
    let issuer = auth.issuer().to_owned();
    let rs = start_rs(
        Some("/.well-known/oauth-protected-resource"),
        move |base| json!({ "resource": base, "authorization_servers": [issuer] }),
    )
    .await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client
        .unauthorized(AuthChallenge {
            status: 401,
            www_authenticate: Some(r#"Bearer error="invalid_token""#.into()),
            resource: rs.url(),
        })
        .await
        .unwrap();
    assert!(header(&client).await.is_some());
    assert_eq!(
        rs.gets(),
        [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource"
        ]
    );
    assert_eq!(
        auth.metadata_gets(),
        [
            "/.well-known/oauth-authorization-server/tenant1",
            "/.well-known/openid-configuration/tenant1",
            "/tenant1/.well-known/openid-configuration"
        ]
    );
    // The resource identifier goes out exactly as published (no "/" appended).
    assert_eq!(auth.authorizes()[0]["resource"], rs.base);
    assert_eq!(auth.tokens()[0].0["resource"], rs.base);
}

#[tokio::test]
async fn refuses_resource_metadata_for_another_server() {
    let auth = start_as(AsConfig::default()).await;
    let issuer = auth.issuer().to_owned();
    let rs = start_rs(Some("/.well-known/oauth-protected-resource/mcp"), move |_| {
        json!({ "resource": "https://evil.example.com/mcp", "authorization_servers": [issuer] })
    })
    .await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    let err = client.unauthorized(rs.challenge("")).await.unwrap_err();
    assert!(err.0.contains("evil.example.com"), "{}", err.0);
    assert!(
        auth.events().is_empty(),
        "nothing sent to the authorization server"
    );
    assert_eq!(header(&client).await, None);
}

#[tokio::test]
async fn refuses_metadata_naming_another_issuer() {
    let auth = start_as(AsConfig {
        metadata_issuer: Some("https://attacker.example.com".into()),
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    let err = client.unauthorized(rs.challenge("")).await.unwrap_err();
    assert!(err.0.contains("attacker.example.com"), "{}", err.0);
    assert!(auth.registrations().is_empty() && auth.authorizes().is_empty());
}

#[tokio::test]
async fn rfc9207_iss_checks() {
    // (advertised, what the redirect carries, accepted?)
    let cases = [
        (true, Iss::Correct, true),
        (false, Iss::Omit, true),
        (false, Iss::Correct, true),
        (true, Iss::Omit, false),
        (true, Iss::Wrong, false),
        (false, Iss::Wrong, false),
        (true, Iss::TrailingSlash, false),
    ];
    for (advertised, iss, accepted) in cases {
        let auth = start_as(AsConfig {
            iss_supported: advertised,
            iss,
            ..AsConfig::default()
        })
        .await;
        let rs = rs_for(auth.issuer(), None).await;
        let client = OAuthClient::builder(rs.url()).build().unwrap();
        let result = client.unauthorized(rs.challenge("")).await;
        assert_eq!(
            result.is_ok(),
            accepted,
            "advertised={advertised} iss={iss:?}: {result:?}"
        );
        assert_eq!(auth.authorizes().len(), 1);
        assert_eq!(
            auth.tokens().len(),
            usize::from(accepted),
            "a rejected response's code never reaches the token endpoint"
        );
    }
}

#[tokio::test]
async fn scope_selection_order() {
    // The challenge's scope wins over scopes_supported.
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), Some(vec!["a", "b"])).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client
        .unauthorized(rs.challenge(r#"scope="files:read""#))
        .await
        .unwrap();
    assert_eq!(scope_of(&auth.authorizes()[0]), Some("files:read"));

    // Without one, all of scopes_supported.
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), Some(vec!["a", "b"])).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert_eq!(scope_of(&auth.authorizes()[0]), Some("a b"));
}

#[tokio::test]
async fn offline_access_only_when_the_server_lists_it() {
    let auth = start_as(AsConfig {
        scopes_supported: Some(vec!["mcp:basic".into(), "offline_access".into()]),
        refresh_tokens: true,
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), Some(vec!["mcp:basic"])).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert_eq!(
        scope_of(&auth.authorizes()[0]),
        Some("mcp:basic offline_access")
    );
    assert!(client
        .tokens()
        .await
        .unwrap()
        .unwrap()
        .refresh_token
        .is_some());

    let auth = start_as(AsConfig {
        scopes_supported: Some(vec!["mcp:basic".into(), "mcp:read".into()]),
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), Some(vec!["mcp:basic", "mcp:read"])).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert_eq!(scope_of(&auth.authorizes()[0]), Some("mcp:basic mcp:read"));
}

#[tokio::test]
async fn step_up_unions_scopes_and_stops_at_the_retry_limit() {
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), Some(vec!["mcp:profile"])).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client
        .unauthorized(rs.challenge(r#"scope="mcp:basic""#))
        .await
        .unwrap();
    client
        .unauthorized(insufficient_scope(&rs, "mcp:write"))
        .await
        .unwrap();
    let scopes: Vec<_> = auth
        .authorizes()
        .iter()
        .map(|a| scope_of(a).unwrap_or("").to_owned())
        .collect();
    assert_eq!(scopes, ["mcp:basic", "mcp:basic mcp:write"]);
    assert_eq!(
        client.tokens().await.unwrap().unwrap().scope.as_deref(),
        Some("mcp:basic mcp:write")
    );

    // The server keeps refusing: two more tries for that scope set, then a final error.
    client
        .unauthorized(insufficient_scope(&rs, "mcp:write"))
        .await
        .unwrap();
    client
        .unauthorized(insufficient_scope(&rs, "mcp:basic mcp:write"))
        .await
        .unwrap();
    let err = client
        .unauthorized(insufficient_scope(&rs, "mcp:write"))
        .await
        .unwrap_err();
    assert!(err.0.contains("gave up after 3"), "{}", err.0);
    assert_eq!(auth.authorizes().len(), 4);

    // A 403 that is not about scope is final at once.
    let err = client
        .unauthorized(AuthChallenge {
            status: 403,
            www_authenticate: Some(r#"Bearer error="access_denied""#.into()),
            resource: rs.url(),
        })
        .await
        .unwrap_err();
    assert!(err.0.contains("forbids"), "{}", err.0);
}

#[tokio::test]
async fn token_endpoint_client_authentication_follows_the_server() {
    for method in ["client_secret_basic", "client_secret_post", "none"] {
        let auth = start_as(AsConfig {
            auth_methods: vec![method.into()],
            registered_method: Some(method.into()),
            registered_secret: method != "none",
            ..AsConfig::default()
        })
        .await;
        let rs = rs_for(auth.issuer(), None).await;
        let client = OAuthClient::builder(rs.url()).build().unwrap();
        client.unauthorized(rs.challenge("")).await.unwrap();
        assert_eq!(
            auth.registrations()[0]["token_endpoint_auth_method"],
            method
        );
        let (params, basic) = &auth.tokens()[0];
        match method {
            "client_secret_basic" => {
                assert_eq!(
                    basic.clone(),
                    Some(("client-1".to_owned(), "registered-secret".to_owned()))
                );
                assert!(!params.contains_key("client_secret"));
            }
            "client_secret_post" => {
                assert!(basic.is_none());
                assert_eq!(params["client_secret"], "registered-secret");
                assert_eq!(params["client_id"], "client-1");
            }
            _ => {
                assert!(basic.is_none());
                assert!(!params.contains_key("client_secret"));
                assert_eq!(params["client_id"], "client-1");
            }
        }
    }
}

#[tokio::test]
async fn pre_registered_client_and_client_metadata_documents() {
    // Pre-registered: no registration, the given credentials at the token endpoint.
    let auth = start_as(AsConfig {
        registration: false,
        auth_methods: vec!["client_secret_basic".into()],
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .pre_registered(PreRegisteredClient::new("pre", Some("pre-secret".into())))
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert!(auth.registrations().is_empty());
    assert_eq!(auth.authorizes()[0]["client_id"], "pre");
    assert_eq!(
        auth.tokens()[0].1,
        Some(("pre".to_owned(), "pre-secret".to_owned()))
    );

    // Bound to another issuer: refused.
    let client = OAuthClient::builder(rs.url())
        .pre_registered(PreRegisteredClient {
            issuer: Some("https://other.example".into()),
            ..PreRegisteredClient::new("pre", None)
        })
        .build()
        .unwrap();
    let err = client.unauthorized(rs.challenge("")).await.unwrap_err();
    assert!(err.0.contains("bound to issuer"), "{}", err.0);

    // A Client ID Metadata Document URL where the server supports them, DCR elsewhere.
    const CIMD: &str = "https://client.example/oauth/metadata.json";
    let auth = start_as(AsConfig {
        cimd: true,
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .client_metadata_url(CIMD)
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert!(auth.registrations().is_empty());
    assert_eq!(auth.authorizes()[0]["client_id"], CIMD);
    assert_eq!(auth.tokens()[0].0["client_id"], CIMD);
    let doc = client.client_metadata_document().unwrap();
    assert_eq!(doc["client_id"], CIMD);
    assert_eq!(
        doc["redirect_uris"],
        json!(["http://127.0.0.1:8976/callback"])
    );

    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .client_metadata_url(CIMD)
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert_eq!(auth.registrations().len(), 1);

    assert!(OAuthClient::builder(rs.url())
        .client_metadata_url("http://client.example/doc.json")
        .build()
        .is_err());
}

#[tokio::test]
async fn client_credentials_with_a_secret_or_a_signed_assertion() {
    let auth = start_as(AsConfig {
        auth_methods: vec!["client_secret_basic".into()],
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .grant(Grant::ClientCredentials)
        .pre_registered(PreRegisteredClient::new("svc", Some("svc-secret".into())))
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert!(header(&client).await.is_some());
    assert!(auth.authorizes().is_empty());
    let (params, basic) = &auth.tokens()[0];
    assert_eq!(params["grant_type"], "client_credentials");
    assert_eq!(params["resource"], rs.url());
    assert_eq!(
        basic.clone(),
        Some(("svc".to_owned(), "svc-secret".to_owned()))
    );

    // private_key_jwt: an ES256 assertion the server can check with the client's JWK.
    let auth = start_as(AsConfig {
        auth_methods: vec!["private_key_jwt".into()],
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .grant(Grant::ClientCredentials)
        .pre_registered(PreRegisteredClient::new("svc", None))
        .signing_key(
            SigningKey::from_pem(EC_KEY, Some("ES256"))
                .unwrap()
                .with_key_id("test-ec"),
        )
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    let (params, basic) = &auth.tokens()[0];
    assert!(basic.is_none());
    assert_eq!(
        params["client_assertion_type"],
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
    let jwks: JwkSet = serde_json::from_str(JWKS).unwrap();
    let key = DecodingKey::from_jwk(jwks.find("test-ec").unwrap()).unwrap();
    let mut v = Validation::new(Algorithm::ES256);
    v.set_audience(&[auth.issuer()]);
    v.set_issuer(&["svc"]);
    let claims = jsonwebtoken::decode::<Value>(&params["client_assertion"], &key, &v)
        .unwrap()
        .claims;
    assert_eq!(claims["sub"], "svc");
    assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));

    assert!(SigningKey::from_pem("not a key", None).is_err());
}

#[tokio::test]
async fn refreshes_before_expiry_and_on_a_401() {
    let auth = start_as(AsConfig {
        refresh_tokens: true,
        expires_in: 30,
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    let first = client.tokens().await.unwrap().unwrap();
    // 30 s left is inside the 60 s margin: the next header comes from a refresh.
    let refreshed = header(&client).await.unwrap();
    assert_ne!(refreshed, format!("Bearer {}", first.access_token));
    let (params, _) = auth.tokens().last().unwrap().clone();
    assert_eq!(params["grant_type"], "refresh_token");
    assert_eq!(params["refresh_token"], first.refresh_token.unwrap());
    assert_eq!(params["resource"], rs.url());

    let auth = start_as(AsConfig {
        refresh_tokens: true,
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    // The server rejects the token: a refresh first ...
    client
        .unauthorized(rs.challenge(r#"error="invalid_token""#))
        .await
        .unwrap();
    assert_eq!(auth.authorizes().len(), 1);
    assert_eq!(
        auth.tokens().last().unwrap().0["grant_type"],
        "refresh_token"
    );
    // ... and when the refreshed token is rejected right away, a new authorization.
    client
        .unauthorized(rs.challenge(r#"error="invalid_token""#))
        .await
        .unwrap();
    assert_eq!(auth.authorizes().len(), 2);
}

#[tokio::test]
async fn a_new_authorization_server_means_a_new_registration() {
    let as1 = start_as(AsConfig {
        client_id_prefix: "as1-".into(),
        ..AsConfig::default()
    })
    .await;
    let as2 = start_as(AsConfig {
        client_id_prefix: "as2-".into(),
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(as1.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    let old = header(&client).await.unwrap();

    rs.set_prm(json!({ "resource": rs.url(), "authorization_servers": [as2.issuer()] }));
    client
        .unauthorized(rs.challenge(r#"error="invalid_token""#))
        .await
        .unwrap();
    assert_ne!(header(&client).await.unwrap(), old);
    assert_eq!(as2.registrations().len(), 1);
    assert_eq!(as2.authorizes()[0]["client_id"], "as2-1");
    assert!(as2
        .tokens()
        .iter()
        .all(|(p, b)| !p.values().any(|v| v.starts_with("as1-")) && b.is_none()));
    assert_eq!(
        client.tokens().await.unwrap().unwrap().issuer.as_deref(),
        Some(as2.issuer())
    );
}

#[tokio::test]
async fn servers_of_the_2025_03_26_revision() {
    // No resource metadata; authorization server metadata at the MCP server's root, naming
    // endpoints under /oauth (and, as such servers did, an issuer that is not the root).
    let (listener, base) = bind().await;
    let auth = start_as_on(
        listener,
        base,
        AsConfig {
            prefix: "/oauth".into(),
            metadata_paths: Some(vec!["/.well-known/oauth-authorization-server".into()]),
            ..AsConfig::default()
        },
        Router::new(),
    )
    .await;
    let server = format!("{}/mcp", auth.base());
    let client = OAuthClient::builder(&server).build().unwrap();
    client
        .unauthorized(AuthChallenge {
            status: 401,
            www_authenticate: Some(r#"Bearer error="invalid_token""#.into()),
            resource: server.clone(),
        })
        .await
        .unwrap();
    assert!(header(&client).await.is_some());
    assert_eq!(auth.authorizes()[0]["resource"], server);
    assert_eq!(auth.registrations().len(), 1);

    // Nothing at all: /authorize, /token and /register at the server's origin.
    let auth = start_as(AsConfig {
        metadata_paths: Some(vec![]),
        ..AsConfig::default()
    })
    .await;
    let server = format!("{}/mcp", auth.base());
    let client = OAuthClient::builder(&server).build().unwrap();
    client
        .unauthorized(AuthChallenge {
            status: 401,
            www_authenticate: None,
            resource: server.clone(),
        })
        .await
        .unwrap();
    assert!(header(&client).await.is_some());
    assert_eq!(auth.registrations().len(), 1);
    assert_eq!(auth.authorizes().len(), 1);
    assert_eq!(auth.tokens().len(), 1);
}

#[tokio::test]
async fn cross_app_access_exchanges_the_id_token_then_uses_the_jwt_bearer_grant() {
    let idp_log: Arc<Mutex<Vec<Params>>> = Arc::default();
    let (listener, idp) = bind().await;
    let idp_app = Router::new().route(
        "/token",
        post({
            let log = idp_log.clone();
            move |body: Bytes| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(form(&body));
                    json_response(
                        StatusCode::OK,
                        json!({
                            "access_token": "id-jag-1",
                            "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                            "token_type": "N_A",
                        }),
                    )
                }
            }
        }),
    );
    let _idp = spawn(listener, idp_app);
    let auth = start_as(AsConfig {
        auth_methods: vec!["client_secret_basic".into()],
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .pre_registered(PreRegisteredClient::new("xaa", Some("xaa-secret".into())))
        .grant(Grant::CrossApp(CrossAppAccess {
            idp_token_endpoint: format!("{idp}/token"),
            id_token: "the-id-token".into(),
            idp_client_id: "idp-client".into(),
            idp_client_secret: None,
        }))
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert!(header(&client).await.is_some());

    let exchange = idp_log.lock().unwrap()[0].clone();
    assert_eq!(
        exchange["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(
        exchange["requested_token_type"],
        "urn:ietf:params:oauth:token-type:id-jag"
    );
    assert_eq!(exchange["subject_token"], "the-id-token");
    assert_eq!(
        exchange["subject_token_type"],
        "urn:ietf:params:oauth:token-type:id_token"
    );
    assert_eq!(exchange["audience"], auth.issuer());
    assert_eq!(exchange["resource"], rs.url());
    assert_eq!(exchange["client_id"], "idp-client");

    let (params, basic) = &auth.tokens()[0];
    assert_eq!(
        params["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert_eq!(params["assertion"], "id-jag-1");
    assert_eq!(
        basic.clone(),
        Some(("xaa".to_owned(), "xaa-secret".to_owned()))
    );
    assert!(auth.authorizes().is_empty());
}

#[tokio::test]
async fn concurrent_refusals_share_one_authorization() {
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    let (a, b) = tokio::join!(
        client.unauthorized(rs.challenge("")),
        client.unauthorized(rs.challenge(""))
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(auth.authorizes().len(), 1);
}

#[tokio::test]
async fn loopback_redirect_receives_the_browser() {
    let auth = start_as(AsConfig::default()).await;
    let rs = rs_for(auth.issuer(), None).await;
    let port = toolyard_testkit::free_port();
    // The "browser": follows the authorization URL to the AS, then its redirect to us, and
    // first knocks on another path (a favicon request) that must not end the wait.
    let browser = LoopbackRedirect::new(move |url| {
        let url = url.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let base = format!("http://127.0.0.1:{port}");
            let favicon = http
                .get(format!("{base}/favicon.ico"))
                .send()
                .await
                .unwrap();
            assert_eq!(favicon.status(), 404);
            let to_as = http.get(url).send().await.unwrap();
            let location = to_as.headers()["location"].to_str().unwrap().to_owned();
            let page = http.get(location).send().await.unwrap();
            assert_eq!(page.status(), 200);
        });
        Ok(())
    })
    .timeout(std::time::Duration::from_secs(10));
    let client = OAuthClient::builder(rs.url())
        .redirect_uri(format!("http://127.0.0.1:{port}/callback"))
        .authorization_handler(Arc::new(browser))
        .build()
        .unwrap();
    client.unauthorized(rs.challenge("")).await.unwrap();
    assert!(header(&client).await.is_some());
    assert_eq!(
        auth.authorizes()[0]["redirect_uri"],
        format!("http://127.0.0.1:{port}/callback")
    );

    // Nobody comes back: a timeout, not a hang.
    let patient = LoopbackRedirect::new(|_| Ok(())).timeout(std::time::Duration::from_millis(200));
    let url = url::Url::parse(&format!(
        "{}/authorize?redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Fcallback",
        auth.base()
    ))
    .unwrap();
    let err = patient.authorize(url).await.unwrap_err();
    assert!(err.0.contains("no authorization response"), "{}", err.0);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Message {
    message: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[tokio::test]
async fn end_to_end_through_the_http_transport_and_our_resource_server() {
    // The fake issues RS256 JWTs with the test key; our server checks them against the
    // test JWKS, wants mcp:read for everything and mcp:admin for the admin tool.
    let auth = start_as(AsConfig {
        jwt_tokens: true,
        ..AsConfig::default()
    })
    .await;
    let (listener, base) = bind().await;
    let server = ServerBuilder::new("oauth-e2e", "0")
        .try_tool(tool_fn("echo", "Echoes", |_c, a: Message| async move {
            Ok(a.message)
        }))
        .try_tool(tool_fn(
            "admin",
            "Needs mcp:admin",
            |c, _a: NoArgs| async move {
                Ok(format!("admin for {}", c.principal().unwrap_or("nobody")))
            },
        ))
        .start()
        .await
        .unwrap();
    let url = format!("{base}/mcp");
    let jwks =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/oauth-jwks.json");
    let mut oauth = OAuthConfig::new(&url, auth.issuer(), JwksSource::File(jwks));
    oauth.scopes_supported = vec!["mcp:read".into()];
    oauth.required_scopes = vec!["mcp:read".into()];
    oauth
        .tool_scopes
        .insert("admin".into(), vec!["mcp:admin".into()]);
    let config = HttpConfig {
        security: Security {
            oauth: Some(oauth),
            ..Security::loopback()
        },
        ..HttpConfig::default()
    };
    let _server = spawn(
        listener,
        toolyard::http::router(server, config).await.unwrap(),
    );

    let provider = OAuthClient::builder(&url).build().unwrap();
    let text = |r: &toolyard::proto::CallToolResult| match &r.content[0] {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("expected text, got {other:?}"),
    };
    for protocol in [
        ProtocolChoice::Auto,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let client = ClientBuilder::new(Implementation::new("oauth-e2e", "1"))
            .protocol(protocol)
            .connect(StreamableHttpTransport::new(&url).auth(Arc::new(provider.clone())))
            .await
            .unwrap();
        let r = client
            .call_tool("echo", json!({"message": "hello"}))
            .await
            .unwrap();
        assert_eq!(text(&r), "hello", "{protocol:?}");
        // 403 insufficient_scope: step-up to mcp:read + mcp:admin, then the call succeeds.
        let r = client.call_tool("admin", json!({})).await.unwrap();
        assert_eq!(text(&r), "admin for alice", "{protocol:?}");
        client.close().await;
    }
    let scopes: Vec<_> = auth
        .authorizes()
        .iter()
        .map(|a| scope_of(a).unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        scopes,
        ["mcp:read", "mcp:read mcp:admin"],
        "the second connection reuses the tokens"
    );
    assert!(auth.authorizes().iter().all(|a| a["resource"] == url));
}

#[tokio::test]
async fn headless_redirect_needs_a_redirect() {
    let (listener, base) = bind().await;
    let _task = spawn(
        listener,
        Router::new()
            .route("/ok", get(|| async { "a login page" }))
            .route(
                "/go",
                get(|| async {
                    (
                        StatusCode::FOUND,
                        [(header::LOCATION, "/callback?code=c&state=s")],
                    )
                }),
            ),
    );
    let handler = HeadlessRedirect::new();
    let err = handler
        .authorize(url::Url::parse(&format!("{base}/ok")).unwrap())
        .await
        .unwrap_err();
    assert!(err.0.contains("instead of a redirect"), "{}", err.0);
    let to = handler
        .authorize(url::Url::parse(&format!("{base}/go")).unwrap())
        .await
        .unwrap();
    assert_eq!(to.as_str(), format!("{base}/callback?code=c&state=s"));
}

#[tokio::test]
async fn credentials_never_go_over_plain_http_to_remote_hosts() {
    let auth = start_as(AsConfig {
        token_endpoint: Some("http://as.example/token".into()),
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url()).build().unwrap();
    let err = client.unauthorized(rs.challenge("")).await.unwrap_err();
    assert!(err.0.contains("plain http"), "{}", err.0);
    assert!(auth.registrations().is_empty() && auth.authorizes().is_empty());
}

#[tokio::test]
async fn errors_name_no_secrets() {
    let auth = start_as(AsConfig {
        auth_methods: vec!["client_secret_post".into()],
        registration: false,
        echo_token_errors: true,
        ..AsConfig::default()
    })
    .await;
    let rs = rs_for(auth.issuer(), None).await;
    let client = OAuthClient::builder(rs.url())
        .pre_registered(PreRegisteredClient::new("id", Some("super-secret".into())))
        .build()
        .unwrap();
    // The token endpoint echoes the request (secret, code, verifier) in its error.
    let err = client.unauthorized(rs.challenge("")).await.unwrap_err();
    let (params, _) = &auth.tokens()[0];
    assert!(err.0.contains("HTTP 400"), "{}", err.0);
    for secret in ["super-secret", &*params["code"], &*params["code_verifier"]] {
        assert!(!err.0.contains(secret), "{}", err.0);
    }
    assert!(!format!("{client:?}").contains("super-secret"));
}
