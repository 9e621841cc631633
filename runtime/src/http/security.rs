//! Request checks before any MCP processing: DNS-rebinding protection (Host and Origin
//! allow-lists, 403) and static bearer tokens (401 with `WWW-Authenticate`), or OAuth access
//! tokens (see [`super::auth`]).

use super::HttpState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Who may talk to the server.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Allowed `Host` names (without port). Empty: any host.
    pub allowed_hosts: Vec<String>,
    /// Allowed `Origin` values (scheme://host, any port), checked when the header is present.
    /// Empty: any origin.
    pub allowed_origins: Vec<String>,
    /// Static bearer tokens; when non-empty every MCP request needs one.
    pub bearer_tokens: Vec<String>,
    /// OAuth 2.1 resource server: every MCP request needs an access token (a JWT) of the
    /// configured issuer for this resource. When set, `bearer_tokens` is not used.
    pub oauth: Option<super::OAuthConfig>,
    /// Cross-origin browser access; `None` sends no CORS headers.
    pub cors: Option<Cors>,
}

/// CORS settings for browser clients.
#[derive(Debug, Clone)]
pub struct Cors {
    /// Origins allowed to call (scheme://host[:port], exact), or `"*"` for any origin.
    pub allow_origins: Vec<String>,
    /// How long browsers may cache a preflight answer.
    pub max_age: std::time::Duration,
}

impl Cors {
    fn allows(&self, origin: &str) -> bool {
        self.allow_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    }
}

/// Request headers an MCP client sends.
const CORS_ALLOW_HEADERS: &str = "content-type, accept, authorization, mcp-session-id, \
mcp-protocol-version, mcp-method, mcp-name, last-event-id";
/// Response headers a browser client must be able to read.
const CORS_EXPOSE_HEADERS: &str = "mcp-session-id, www-authenticate";

fn cors_headers(resp: &mut Response, origin: &str) {
    let h = resp.headers_mut();
    if let Ok(v) = origin.parse() {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, axum::http::HeaderValue::from_static("Origin"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        axum::http::HeaderValue::from_static(CORS_EXPOSE_HEADERS),
    );
}

impl Security {
    /// Loopback only: what a server bound to 127.0.0.1 should accept.
    pub fn loopback() -> Self {
        Security {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            allowed_origins: vec![
                "http://localhost".into(),
                "http://127.0.0.1".into(),
                "http://[::1]".into(),
                "https://localhost".into(),
                "https://127.0.0.1".into(),
                "https://[::1]".into(),
            ],
            bearer_tokens: Vec::new(),
            oauth: None,
            cors: None,
        }
    }

    /// No Host/Origin restriction (for servers behind a proxy that checks them).
    pub fn open() -> Self {
        Security::default()
    }

    /// Adds CORS for these origins (`"*"` for any).
    pub fn with_cors(mut self, origins: Vec<String>) -> Self {
        self.cors = Some(Cors {
            allow_origins: origins,
            max_age: std::time::Duration::from_secs(600),
        });
        self
    }
}

/// `host[:port]` without the port.
fn strip_port(hostport: &str) -> &str {
    if let Some(rest) = hostport.strip_prefix('[') {
        return match rest.find(']') {
            Some(i) => &hostport[..i + 2],
            None => hostport,
        };
    }
    hostport
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(hostport)
}

fn host_ok(sec: &Security, headers: &HeaderMap) -> bool {
    if sec.allowed_hosts.is_empty() {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let host = strip_port(host);
    sec.allowed_hosts
        .iter()
        .any(|a| a.eq_ignore_ascii_case(host))
}

fn origin_ok(sec: &Security, headers: &HeaderMap) -> bool {
    if sec.allowed_origins.is_empty() {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok()) else {
        return true;
    };
    if sec.cors.as_ref().is_some_and(|c| c.allows(origin)) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let candidate = format!("{scheme}://{}", strip_port(rest));
    sec.allowed_origins
        .iter()
        .any(|a| a.eq_ignore_ascii_case(&candidate))
}

fn forbidden(why: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":why}})
            .to_string(),
    )
        .into_response()
}

pub(crate) async fn check(
    State(state): State<Arc<HttpState>>,
    request: Request,
    next: Next,
) -> Response {
    let sec = &state.config.security;
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(request).await;
    }
    let headers = request.headers();
    if !host_ok(sec, headers) {
        return forbidden("Forbidden: Host not allowed");
    }
    if !origin_ok(sec, headers) {
        return forbidden("Forbidden: Origin not allowed");
    }
    let cors_origin = sec.cors.as_ref().and_then(|c| {
        headers
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .filter(|o| c.allows(o))
            .map(str::to_owned)
    });
    if let (Some(origin), Some(cors)) = (&cors_origin, &sec.cors) {
        if request.method() == axum::http::Method::OPTIONS {
            // A preflight: answered here, before authentication, as browsers send no
            // credentials with it.
            let mut resp = StatusCode::NO_CONTENT.into_response();
            cors_headers(&mut resp, origin);
            let h = resp.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                axum::http::HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
            );
            let requested = headers
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .and_then(|v| v.to_str().ok())
                .map(|r| format!("{CORS_ALLOW_HEADERS}, {r}"))
                .unwrap_or_else(|| CORS_ALLOW_HEADERS.to_owned());
            if let Ok(v) = requested.parse() {
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
            }
            if let Ok(v) = cors.max_age.as_secs().to_string().parse() {
                h.insert(header::ACCESS_CONTROL_MAX_AGE, v);
            }
            return resp;
        }
    }
    let mut resp = guarded(&state, request, next).await;
    if let Some(origin) = &cors_origin {
        cors_headers(&mut resp, origin);
    }
    resp
}

async fn guarded(state: &Arc<HttpState>, request: Request, next: Next) -> Response {
    let sec = &state.config.security;
    let headers = request.headers();
    if let Some(auth) = &state.auth {
        return super::auth::guard(auth, state.config.max_body_bytes, request, next).await;
    }
    if !sec.bearer_tokens.is_empty() {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        if !token.is_some_and(|t| sec.bearer_tokens.iter().any(|k| k == t)) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or invalid bearer token",
            )
                .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_from_hosts_and_ipv6_literals() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("example.com"), "example.com");
    }

    #[test]
    fn loopback_rejects_evil_hosts_and_origins() {
        let sec = Security::loopback();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "evil.example.com".parse().unwrap());
        assert!(!host_ok(&sec, &h));
        h.insert(header::HOST, "127.0.0.1:3000".parse().unwrap());
        assert!(host_ok(&sec, &h));
        h.insert(header::ORIGIN, "http://evil.example.com".parse().unwrap());
        assert!(!origin_ok(&sec, &h));
        h.insert(header::ORIGIN, "http://localhost:5173".parse().unwrap());
        assert!(origin_ok(&sec, &h));
    }
}
