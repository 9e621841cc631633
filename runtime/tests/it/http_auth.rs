//! OAuth 2.1 resource server over Streamable HTTP: a real server on 127.0.0.1 built with
//! `toolyard::http::router`, spoken to with raw HTTP/1.1, tokens signed here with the test
//! keys under `tests/data` (public halves in `oauth-jwks.json`).
#![cfg(feature = "http")]

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolyard::http::{HttpConfig, JwksSource, OAuthConfig, Security};
use toolyard::{tool_fn, ServerBuilder};

const ISSUER: &str = "https://auth.example.test";
const RSA_KEY: &[u8] = include_bytes!("../data/oauth-rsa.pem");
const EC_KEY: &[u8] = include_bytes!("../data/oauth-ec.pem");
const EC_OTHER_KEY: &[u8] = include_bytes!("../data/oauth-ec-other.pem");

fn data(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[derive(Deserialize, JsonSchema)]
struct Message {
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

struct TestServer {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server with `echo` and `admin` tools; `admin` needs `mcp:admin` on top of `mcp:read`.
async fn start(jwks: Option<JwksSource>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = ServerBuilder::new("auth-test", "0")
        .try_tool(tool_fn("echo", "Echoes", |_c, a: Message| async move {
            Ok(a.message)
        }))
        .try_tool(tool_fn(
            "admin",
            "Needs mcp:admin",
            |c, _a: NoArgs| async move {
                Ok(format!(
                    "admin for {}",
                    c.principal().unwrap_or("an unknown principal")
                ))
            },
        ))
        .tool(vault())
        .start()
        .await
        .unwrap();
    let mut oauth = OAuthConfig::new(
        format!("http://127.0.0.1:{port}/mcp"),
        ISSUER,
        jwks.unwrap_or_else(|| JwksSource::File(data("oauth-jwks.json"))),
    );
    oauth.scopes_supported = vec!["mcp:read".into(), "mcp:admin".into()];
    oauth.required_scopes = vec!["mcp:read".into()];
    oauth
        .tool_scopes
        .insert("admin".into(), vec!["mcp:admin".into()]);
    oauth.leeway_secs = 5;
    let config = HttpConfig {
        security: Security {
            oauth: Some(oauth),
            ..Security::loopback()
        },
        ..HttpConfig::default()
    };
    let app = toolyard::http::router(server, config).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TestServer { port, task }
}

/// alice's `vault`, whose `region` argument HTTP callers mirror into `Mcp-Param-Region`.
fn vault() -> toolyard::ToolDef {
    let tool: toolyard::proto::Tool = serde_json::from_value(json!({
        "name": "vault", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}}))
    .unwrap();
    toolyard::ToolDef::new(
        tool,
        Arc::new(|_ctx, _args| {
            Box::pin(async { Ok(toolyard::proto::CallToolResult::text("opened")) })
        }),
    )
    .unwrap()
    .for_audience(toolyard::Audience::principals(["alice"]))
}

/// The claims of a good token for server `port`; tests spoil one at a time.
fn claims(port: u16) -> Value {
    json!({
        "iss": ISSUER,
        "aud": format!("http://127.0.0.1:{port}/mcp"),
        "sub": "alice",
        "client_id": "test-client",
        "scope": "mcp:read",
        "iat": now(),
        "exp": now() + 300,
    })
}

fn sign(claims: &Value, alg: Algorithm, kid: &str, pem: &[u8]) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(pem).unwrap(),
        _ => EncodingKey::from_ec_pem(pem).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn rsa(claims: &Value) -> String {
    sign(claims, Algorithm::RS256, "test-rsa", RSA_KEY)
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn challenge(&self) -> &str {
        self.header("www-authenticate")
            .unwrap_or_else(|| panic!("no WWW-Authenticate on a {}", self.status))
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 exchange over a fresh connection (`Connection: close`).
async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let exchange = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = body.unwrap_or_default();
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("no answer within 10 s");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

/// A legacy (2025-11-25) `initialize` POST with `token`, if any.
async fn initialize(port: u16, token: Option<&str>) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let body = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"auth-test","version":"0"}}});
    request(port, "POST", "/mcp", &headers, Some(&body.to_string())).await
}

/// A modern (2026-07-28, sessionless) `tools/call` of `tool` with `token`.
async fn call(port: u16, token: &str, tool: &str, arguments: Value) -> Resp {
    let auth = format!("Bearer {token}");
    let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{}},
        "name":tool,"arguments":arguments}});
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
        ("Authorization", auth.as_str()),
    ];
    request(port, "POST", "/mcp", &headers, Some(&body.to_string())).await
}

fn metadata_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp")
}

#[tokio::test]
async fn no_token_gets_401_with_resource_metadata() {
    let s = start(None).await;
    let r = initialize(s.port, None).await;
    assert_eq!(r.status, 401);
    let challenge = r.challenge();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains(&format!("resource_metadata=\"{}\"", metadata_url(s.port))),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp:read\""), "{challenge}");
    assert!(
        !challenge.contains("error="),
        "no error code without a token"
    );
    // Every MCP endpoint is protected; a non-Bearer scheme counts as no token.
    let basic = [("Authorization", "Basic dXNlcjpwYXNz")];
    for (method, path, headers) in [
        ("GET", "/sse", &[][..]),
        ("POST", "/messages?sessionId=x", &[][..]),
        ("GET", "/mcp", &[][..]),
        ("POST", "/mcp", &basic[..]),
    ] {
        let r = request(s.port, method, path, headers, None).await;
        assert_eq!(r.status, 401, "{method} {path}");
        assert!(r.challenge().contains("resource_metadata="));
    }
    // Health checks stay open.
    assert_eq!(
        request(s.port, "GET", "/healthz", &[], None).await.status,
        200
    );
}

#[tokio::test]
async fn protected_resource_metadata_at_both_well_known_paths() {
    let s = start(None).await;
    let root = request(
        s.port,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        None,
    )
    .await;
    let suffixed = request(
        s.port,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        &[],
        None,
    )
    .await;
    for r in [&root, &suffixed] {
        assert_eq!(r.status, 200);
        assert!(r
            .header("content-type")
            .unwrap()
            .starts_with("application/json"));
        assert_eq!(
            r.json(),
            json!({
                "resource": format!("http://127.0.0.1:{}/mcp", s.port),
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp:read", "mcp:admin"],
                "bearer_methods_supported": ["header"],
            })
        );
    }
    // The URL a 401 names is one of them.
    let r = initialize(s.port, None).await;
    let challenge = r.challenge();
    let url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let path = url.split_once(&format!(":{}", s.port)).unwrap().1;
    assert_eq!(request(s.port, "GET", path, &[], None).await.status, 200);
}

#[tokio::test]
async fn valid_tokens_initialize_and_call_tools() {
    let s = start(None).await;
    for token in [
        rsa(&claims(s.port)),
        sign(&claims(s.port), Algorithm::ES256, "test-ec", EC_KEY),
    ] {
        let r = initialize(s.port, Some(&token)).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
        assert!(r.header("mcp-session-id").is_some());
    }
    // `aud` may be an array that contains the resource.
    let mut c = claims(s.port);
    c["aud"] = json!([
        "https://other.example",
        format!("http://127.0.0.1:{}/mcp", s.port)
    ]);
    let r = call(s.port, &rsa(&c), "echo", json!({"message":"hi"})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["result"]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn bad_tokens_get_401_invalid_token() {
    let s = start(None).await;
    let port = s.port;
    let spoil = |key: &str, value: Value| {
        let mut c = claims(port);
        c[key] = value;
        rsa(&c)
    };
    let hs256 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(port),
        &EncodingKey::from_secret(b"a shared secret is never accepted"),
    )
    .unwrap();
    let mut no_sub = claims(port);
    no_sub.as_object_mut().unwrap().remove("sub");
    let cases = [
        ("wrong issuer", spoil("iss", json!("https://evil.example"))),
        (
            "wrong audience",
            spoil("aud", json!("https://other.example/mcp")),
        ),
        ("expired", spoil("exp", json!(now() - 60))),
        ("not valid yet", spoil("nbf", json!(now() + 600))),
        (
            "bad signature",
            sign(&claims(port), Algorithm::ES256, "test-ec", EC_OTHER_KEY),
        ),
        (
            "unknown kid",
            sign(&claims(port), Algorithm::RS256, "who-knows", RSA_KEY),
        ),
        ("symmetric algorithm", hs256),
        ("no subject", rsa(&no_sub)),
        ("garbage", "not-a-jwt".to_owned()),
    ];
    for (what, token) in cases {
        let r = initialize(port, Some(&token)).await;
        assert_eq!(r.status, 401, "{what}");
        let challenge = r.challenge();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert!(
            challenge.contains(&format!("resource_metadata=\"{}\"", metadata_url(port))),
            "{what}: {challenge}"
        );
        assert_eq!(r.json()["error"], "invalid_token", "{what}");
    }
    // A tampered payload fails the signature too.
    let good = rsa(&claims(port));
    let parts: Vec<&str> = good.split('.').collect();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut forged = claims(port);
    forged["sub"] = json!("mallory");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64.encode(forged.to_string()),
        parts[2]
    );
    let r = initialize(port, Some(&tampered)).await;
    assert_eq!(r.status, 401);
    assert!(r.challenge().contains("invalid_token"));
    // Within the leeway, a just-expired token still passes.
    let r = initialize(port, Some(&spoil("exp", json!(now() - 1)))).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn missing_scope_gets_403_insufficient_scope() {
    let s = start(None).await;
    let mut c = claims(s.port);
    c["scope"] = json!("profile");
    let r = initialize(s.port, Some(&rsa(&c))).await;
    assert_eq!(r.status, 403);
    let challenge = r.challenge();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp:read\""), "{challenge}");
    assert!(
        challenge.contains(&format!("resource_metadata=\"{}\"", metadata_url(s.port))),
        "{challenge}"
    );
    // `scp` (an array) grants scopes as well as `scope`.
    let mut c = claims(s.port);
    c.as_object_mut().unwrap().remove("scope");
    c["scp"] = json!(["mcp:read"]);
    assert_eq!(initialize(s.port, Some(&rsa(&c))).await.status, 200);
}

#[tokio::test]
async fn per_tool_scopes() {
    let s = start(None).await;
    let reader = rsa(&claims(s.port));
    let r = call(s.port, &reader, "echo", json!({"message":"ok"})).await;
    assert_eq!(r.status, 200);
    let r = call(s.port, &reader, "admin", json!({})).await;
    assert_eq!(r.status, 403);
    let challenge = r.challenge();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:read mcp:admin\""),
        "{challenge}"
    );
    // Legacy sessions are checked per request too.
    let init = initialize(s.port, Some(&reader)).await;
    let session = init.header("mcp-session-id").unwrap().to_owned();
    let bearer = format!("Bearer {reader}");
    let body = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"admin","arguments":{}}});
    let r = request(
        s.port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &session),
            ("Authorization", &bearer),
        ],
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(r.status, 403);
    // With the scope, the call goes through.
    let mut c = claims(s.port);
    c["scope"] = json!("mcp:read mcp:admin");
    let r = call(s.port, &rsa(&c), "admin", json!({})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The tool sees who called it: the token's subject.
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "admin for alice",
        "the principal reaches the tool"
    );
}

#[tokio::test]
async fn jwks_from_file_inline_and_url() {
    // File: the default of `start`.
    let s = start(Some(JwksSource::File(data("oauth-jwks.json")))).await;
    assert_eq!(
        initialize(s.port, Some(&rsa(&claims(s.port)))).await.status,
        200
    );
    // Inline.
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(data("oauth-jwks.json")).unwrap()).unwrap();
    let s = start(Some(JwksSource::Inline(doc))).await;
    assert_eq!(
        initialize(s.port, Some(&rsa(&claims(s.port)))).await.status,
        200
    );
    // URL: an issuer on loopback serving the JWKS, fetched once and cached.
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    let jwks = std::fs::read_to_string(data("oauth-jwks.json")).unwrap();
    let issuer = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let jwks = jwks.clone();
            async move { ([("content-type", "application/json")], jwks) }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer_port = listener.local_addr().unwrap().port();
    let issuer_task = tokio::spawn(async move {
        let _ = axum::serve(listener, issuer).await;
    });
    let s = start(Some(JwksSource::Url(format!(
        "http://127.0.0.1:{issuer_port}/jwks.json"
    ))))
    .await;
    assert_eq!(fetches.load(Ordering::SeqCst), 0, "fetched on first use");
    let token = rsa(&claims(s.port));
    for _ in 0..3 {
        assert_eq!(initialize(s.port, Some(&token)).await.status, 200);
    }
    let ec = sign(&claims(s.port), Algorithm::ES256, "test-ec", EC_KEY);
    assert_eq!(initialize(s.port, Some(&ec)).await.status, 200);
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    issuer_task.abort();
}

#[tokio::test]
async fn unusable_settings_fail_the_router() {
    let server = ServerBuilder::new("auth-test", "0").start().await.unwrap();
    let config = |jwks| HttpConfig {
        security: Security {
            oauth: Some(OAuthConfig::new("http://127.0.0.1:1/mcp", ISSUER, jwks)),
            ..Security::loopback()
        },
        ..HttpConfig::default()
    };
    let missing = config(JwksSource::File(data("no-such-jwks.json")));
    let err = toolyard::http::router(server.clone(), missing)
        .await
        .expect_err("a missing JWKS file is an error");
    assert!(matches!(err, toolyard::BuildError::OAuth(_)), "{err}");
    let remote = config(JwksSource::Url("http://issuer.example/jwks".into()));
    assert!(toolyard::http::router(server, remote).await.is_err());
}

/// A tool for alice alone is, to bob's bearer, an unknown tool over HTTP too: its call is not
/// refused for the `Mcp-Param-Region` header it lacks (a header mismatch would tell bob the
/// tool is there), and alice's call with the header is served.
#[tokio::test]
async fn a_tool_for_another_principal_is_unknown_whatever_its_header_params() {
    let server = start(None).await;
    let mut bob = claims(server.port);
    bob["sub"] = "bob".into();
    let hidden = call(server.port, &rsa(&bob), "vault", json!({"region": "eu"})).await;
    let unknown = call(server.port, &rsa(&bob), "nonesuch", json!({"region": "eu"})).await;
    assert_eq!(hidden.status, unknown.status);
    assert_eq!(hidden.json()["error"]["code"], -32602, "{}", hidden.json());
    assert_eq!(hidden.json()["error"]["message"], "Unknown tool: vault");
    // alice without the header: the tool is hers, so the mismatch is hers to hear of.
    let alice = rsa(&claims(server.port));
    let mismatch = call(server.port, &alice, "vault", json!({"region": "eu"})).await;
    assert_eq!(mismatch.status, 400, "{}", mismatch.json());
    assert!(mismatch.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("Mcp-Param-Region")));
}
