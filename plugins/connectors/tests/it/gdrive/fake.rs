//! A fake Google Drive v3 and Google OAuth token endpoint, speaking the real wire format:
//!
//! - `POST /token`: the `refresh_token` grant (client id, secret and refresh token checked;
//!   a revoked token is `400 {"error":"invalid_grant",...}`) and the `jwt-bearer` grant (the
//!   assertion's RS256 signature verified with the test key's public half, its claims kept
//!   for the test to inspect); answers `{access_token, expires_in, token_type}`.
//! - `GET /drive/v3/files` with a subset of the `q` grammar (`fullText contains`, `name
//!   contains`, `mimeType =`, `'<id>' in parents`, `trashed =`, `and`/`or`/`not`/parentheses,
//!   `\'` and `\\` escapes), `pageSize`/`pageToken` pagination, `corpora`/`driveId`.
//! - `GET /drive/v3/files/{id}` (metadata), `?alt=media` (bytes, with `Range` → `206`),
//!   `GET /drive/v3/files/{id}/export?mimeType=` (with a size limit → `403
//!   exportSizeLimitExceeded`), `GET /drive/v3/changes/startPageToken`, `GET /drive/v3/changes`.
//!
//! Like the real API on a shared drive, a Drive request without `supportsAllDrives=true`
//! (and a list without `includeItemsFromAllDrives=true` and a `corpora`) is a 404. Errors
//! use Google's body: `{"error":{"code":..,"message":..,"errors":[{"reason":..}]}}`.
//! Faults (a status, a delay, a huge or malformed body) can be queued for the next Drive
//! requests.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The test key's public half (the private half is in [`TEST_KEY`]).
pub(crate) const TEST_PUBLIC_KEY: &str = include_str!("test_key.pub.pem");
/// A 2048-bit RSA key made for these tests only (PKCS#8).
pub(crate) const TEST_KEY: &str = include_str!("test_key.pem");

pub(crate) const CLIENT_ID: &str = "client-123.apps.googleusercontent.com";
pub(crate) const CLIENT_SECRET: &str = "client-secret-value";
pub(crate) const REFRESH_TOKEN: &str = "1//refresh-token-value";
pub(crate) const SA_EMAIL: &str = "reader@project.iam.gserviceaccount.com";

/// A file the fake holds.
#[derive(Clone, Debug)]
pub(crate) struct FakeFile {
    pub meta: Value,
    pub content: Vec<u8>,
    pub exports: HashMap<String, Vec<u8>>,
}

impl FakeFile {
    pub(crate) fn new(id: &str, name: &str, mime: &str) -> FakeFile {
        FakeFile {
            meta: json!({"id": id, "name": name, "mimeType": mime,
                "modifiedTime": "2026-01-02T03:04:05.000Z", "parents": ["root"], "trashed": false}),
            content: Vec::new(),
            exports: HashMap::new(),
        }
    }
    pub(crate) fn content(mut self, bytes: impl Into<Vec<u8>>) -> FakeFile {
        self.content = bytes.into();
        self.meta["size"] = json!(self.content.len().to_string());
        self
    }
    pub(crate) fn export(mut self, mime: &str, bytes: impl Into<Vec<u8>>) -> FakeFile {
        self.exports.insert(mime.to_owned(), bytes.into());
        self
    }
    pub(crate) fn parent(mut self, parent: &str) -> FakeFile {
        self.meta["parents"] = json!([parent]);
        self
    }
    pub(crate) fn drive(mut self, drive: &str) -> FakeFile {
        self.meta["driveId"] = json!(drive);
        self
    }
    pub(crate) fn shortcut_to(mut self, target: &str) -> FakeFile {
        self.meta["mimeType"] = json!("application/vnd.google-apps.shortcut");
        self.meta["shortcutDetails"] = json!({"targetId": target});
        self
    }
    fn id(&self) -> &str {
        self.meta["id"].as_str().unwrap_or_default()
    }
}

/// A fault for the next Drive request.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    Status(u16, Vec<(&'static str, String)>, Value),
    Slow(Duration),
    Huge(usize),
    Malformed,
}

/// One request the fake saw.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
    pub range: Option<String>,
}

#[derive(Default)]
pub(crate) struct FakeState {
    pub files: Vec<FakeFile>,
    pub tokens: HashSet<String>,
    pub issued: usize,
    pub token_requests: usize,
    pub revoked: bool,
    pub token_lifetime: u64,
    pub assertions: Vec<Value>,
    pub faults: VecDeque<Fault>,
    pub seen: Vec<Seen>,
    pub export_limit: usize,
    /// Change log: the file id of each change; a page token is an index into it.
    pub changes: Vec<String>,
    /// The URL the token endpoint is at (the JWT's expected audience).
    pub token_url: String,
}

#[derive(Clone, Default)]
pub(crate) struct Fake {
    pub state: Arc<Mutex<FakeState>>,
}

impl Fake {
    pub(crate) fn with(&self, f: impl FnOnce(&mut FakeState)) {
        f(&mut self.state.lock().unwrap());
    }
    pub(crate) fn add(&self, file: FakeFile) {
        self.with(|s| s.files.push(file));
    }
    pub(crate) fn fault(&self, fault: Fault) {
        self.with(|s| s.faults.push_back(fault));
    }
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
    pub(crate) fn token_requests(&self) -> usize {
        self.state.lock().unwrap().token_requests
    }
    /// Every access token issued so far stops working (as after a revocation).
    pub(crate) fn expire_tokens(&self) {
        self.with(|s| s.tokens.clear());
    }
}

/// Starts the fake; its base URL.
pub(crate) async fn start(fake: Fake) -> String {
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    fake.with(|s| {
        s.token_url = format!("{base}/token");
        s.export_limit = 10 * 1024 * 1024;
        s.token_lifetime = 3600;
    });
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    base
}

pub(crate) fn google_error(status: u16, reason: &str, message: &str) -> Response {
    json_reply(
        status,
        json!({"error": {"code": status, "message": message,
            "errors": [{"reason": reason, "domain": "global", "message": message}]}}),
    )
}

fn json_reply(status: u16, body: Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json; charset=UTF-8")],
        body.to_string(),
    )
        .into_response()
}

async fn answer(
    State(fake): State<Fake>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    if method == Method::POST && path == "/token" {
        return token(&fake, &body);
    }
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let fault = {
        let mut s = fake.state.lock().unwrap();
        s.seen.push(Seen {
            method: method.to_string(),
            path: path.clone(),
            query: query.clone(),
            range: range.clone(),
        });
        s.faults.pop_front()
    };
    match fault {
        Some(Fault::Status(status, headers, body)) => {
            let mut r = json_reply(status, body);
            for (k, v) in headers {
                r.headers_mut().insert(k, v.parse().unwrap());
            }
            return r;
        }
        Some(Fault::Slow(d)) => tokio::time::sleep(d).await,
        Some(Fault::Huge(n)) => {
            return (
                StatusCode::OK,
                [("content-type", "application/json")],
                format!("{{\"files\":[\"{}\"]}}", "x".repeat(n)),
            )
                .into_response()
        }
        Some(Fault::Malformed) => {
            return (
                StatusCode::OK,
                [("content-type", "application/json")],
                "{\"files\": [ {\"id\": ",
            )
                .into_response()
        }
        None => {}
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    if !fake.state.lock().unwrap().tokens.contains(&bearer) {
        return google_error(
            401,
            "authError",
            "Request had invalid authentication credentials.",
        );
    }
    // Like Drive on a shared drive: without the flags, the file is not there.
    if query.get("supportsAllDrives").map(String::as_str) != Some("true") {
        return google_error(
            404,
            "notFound",
            "File not found: (supportsAllDrives missing).",
        );
    }
    let s = fake.state.lock().unwrap();
    match path.strip_prefix("/drive/v3/").unwrap_or_default() {
        "files" => list(&s, &query),
        "changes/startPageToken" => json_reply(
            200,
            json!({"kind": "drive#startPageToken", "startPageToken": s.changes.len().to_string()}),
        ),
        "changes" => {
            if query.get("includeItemsFromAllDrives").map(String::as_str) != Some("true") {
                return google_error(400, "invalid", "includeItemsFromAllDrives missing");
            }
            let Some(from) = query.get("pageToken").and_then(|t| t.parse::<usize>().ok()) else {
                return google_error(400, "invalid", "Invalid Value");
            };
            let changes: Vec<Value> = s
                .changes
                .iter()
                .skip(from)
                .map(|id| json!({"kind": "drive#change", "changeType": "file", "fileId": id, "removed": false}))
                .collect();
            json_reply(
                200,
                json!({"kind": "drive#changeList", "changes": changes,
                "newStartPageToken": s.changes.len().to_string()}),
            )
        }
        rest => {
            let Some(rest) = rest.strip_prefix("files/") else {
                return google_error(404, "notFound", "Not Found");
            };
            let (id, export) = match rest.strip_suffix("/export") {
                Some(id) => (id, true),
                None => (rest, false),
            };
            let Some(file) = s.files.iter().find(|f| f.id() == id) else {
                return google_error(404, "notFound", &format!("File not found: {id}."));
            };
            if export {
                let mime = query.get("mimeType").cloned().unwrap_or_default();
                let Some(bytes) = file.exports.get(&mime) else {
                    return google_error(
                        400,
                        "badRequest",
                        "Export only supports Docs Editors files.",
                    );
                };
                if bytes.len() > s.export_limit {
                    return google_error(
                        403,
                        "exportSizeLimitExceeded",
                        "This file is too large to be exported.",
                    );
                }
                return (StatusCode::OK, [("content-type", mime)], bytes.clone()).into_response();
            }
            if query.get("alt").map(String::as_str) == Some("media") {
                if file.meta["mimeType"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("application/vnd.google-apps.")
                {
                    return google_error(403, "fileNotDownloadable", "Only files with binary content can be downloaded. Use Export with Docs Editors files.");
                }
                return media(file, range.as_deref());
            }
            json_reply(200, file.meta.clone())
        }
    }
}

fn media(file: &FakeFile, range: Option<&str>) -> Response {
    let mime = file.meta["mimeType"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let len = file.content.len();
    let Some(spec) = range.and_then(|r| r.strip_prefix("bytes=")) else {
        return (
            StatusCode::OK,
            [("content-type", mime)],
            file.content.clone(),
        )
            .into_response();
    };
    let (a, b) = spec.split_once('-').unwrap();
    let start: usize = a.parse().unwrap();
    let end: usize = b
        .parse::<usize>()
        .map(|e| e.min(len.saturating_sub(1)))
        .unwrap_or(len.saturating_sub(1));
    if start >= len {
        return google_error(
            416,
            "requestedRangeNotSatisfiable",
            "Request range not satisfiable",
        );
    }
    (
        StatusCode::PARTIAL_CONTENT,
        [
            ("content-type", mime),
            ("content-range", format!("bytes {start}-{end}/{len}")),
        ],
        file.content[start..=end].to_vec(),
    )
        .into_response()
}

fn list(s: &FakeState, query: &HashMap<String, String>) -> Response {
    if query.get("includeItemsFromAllDrives").map(String::as_str) != Some("true") {
        return google_error(404, "notFound", "shared drive items not included");
    }
    let drive = match query.get("corpora").map(String::as_str) {
        Some("allDrives") => None,
        Some("drive") => match query.get("driveId") {
            Some(d) => Some(d.clone()),
            None => return google_error(400, "invalid", "driveId required with corpora=drive"),
        },
        _ => return google_error(400, "invalid", "corpora missing"),
    };
    let q = query.get("q").cloned().unwrap_or_default();
    let expr = match Parser::new(&q).and_then(|mut p| p.parse()) {
        Ok(e) => e,
        Err(e) => return google_error(400, "invalid", &format!("Invalid Value: {e}")),
    };
    let matching: Vec<&FakeFile> = s
        .files
        .iter()
        .filter(|f| drive.as_deref().is_none_or(|d| f.meta["driveId"] == d))
        .filter(|f| expr.eval(f))
        .collect();
    let size: usize = query
        .get("pageSize")
        .and_then(|p| p.parse().ok())
        .unwrap_or(100);
    let from: usize = query
        .get("pageToken")
        .and_then(|p| p.strip_prefix("page-"))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let page: Vec<Value> = matching
        .iter()
        .skip(from)
        .take(size)
        .map(|f| f.meta.clone())
        .collect();
    let mut body = json!({"kind": "drive#fileList", "incompleteSearch": false, "files": page});
    if from + size < matching.len() {
        body["nextPageToken"] = json!(format!("page-{}", from + size));
    }
    json_reply(200, body)
}

fn token(fake: &Fake, body: &[u8]) -> Response {
    let form: HashMap<String, String> = serde_urlencoded_pairs(body);
    let mut s = fake.state.lock().unwrap();
    s.token_requests += 1;
    let oauth_error = |code: &str, description: &str| {
        json_reply(
            400,
            json!({"error": code, "error_description": description}),
        )
    };
    match form.get("grant_type").map(String::as_str) {
        Some("refresh_token") => {
            if form.get("client_id").map(String::as_str) != Some(CLIENT_ID)
                || form.get("client_secret").map(String::as_str) != Some(CLIENT_SECRET)
            {
                return json_reply(
                    401,
                    json!({"error": "invalid_client", "error_description": "Unauthorized"}),
                );
            }
            if s.revoked || form.get("refresh_token").map(String::as_str) != Some(REFRESH_TOKEN) {
                return oauth_error("invalid_grant", "Token has been expired or revoked.");
            }
        }
        Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
            let assertion = form.get("assertion").cloned().unwrap_or_default();
            let key = jsonwebtoken::DecodingKey::from_rsa_pem(TEST_PUBLIC_KEY.as_bytes()).unwrap();
            let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            validation.set_audience(&[s.token_url.clone()]);
            validation.set_required_spec_claims(&["exp", "aud", "iss"]);
            match jsonwebtoken::decode::<Value>(&assertion, &key, &validation) {
                Ok(data) => {
                    if data.claims["iss"] != SA_EMAIL {
                        return oauth_error("invalid_grant", "Invalid JWT Signature.");
                    }
                    s.assertions.push(data.claims);
                }
                Err(_) => return oauth_error("invalid_grant", "Invalid JWT Signature."),
            }
        }
        _ => return oauth_error("unsupported_grant_type", "Invalid grant_type"),
    }
    s.issued += 1;
    let token = format!("ya29.access-{}", s.issued);
    s.tokens.insert(token.clone());
    json_reply(
        200,
        json!({"access_token": token, "expires_in": s.token_lifetime, "token_type": "Bearer", "scope": "https://www.googleapis.com/auth/drive.readonly"}),
    )
}

/// `application/x-www-form-urlencoded` pairs.
fn serde_urlencoded_pairs(body: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

// ---- a subset of Drive's `q` grammar ----

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Open,
    Close,
    Word(String),
    Lit(String),
}

fn lex(q: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' => {
                chars.next();
            }
            '(' => {
                chars.next();
                out.push(Tok::Open);
            }
            ')' => {
                chars.next();
                out.push(Tok::Close);
            }
            '\'' => {
                chars.next();
                let mut lit = String::new();
                loop {
                    match chars.next() {
                        None => return Err("unterminated string".into()),
                        Some('\\') => match chars.next() {
                            Some(e @ ('\\' | '\'')) => lit.push(e),
                            _ => return Err("bad escape".into()),
                        },
                        Some('\'') => break,
                        Some(c) => lit.push(c),
                    }
                }
                out.push(Tok::Lit(lit));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ' ' || c == '(' || c == ')' || c == '\'' {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                out.push(Tok::Word(word));
            }
        }
    }
    Ok(out)
}

#[derive(Debug)]
enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Contains(String, String),
    Eq(String, String, bool),
    In(String, String),
}

impl Expr {
    fn eval(&self, f: &FakeFile) -> bool {
        let field = |name: &str| match &f.meta[name] {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            _ => String::new(),
        };
        match self {
            Expr::And(a, b) => a.eval(f) && b.eval(f),
            Expr::Or(a, b) => a.eval(f) || b.eval(f),
            Expr::Not(a) => !a.eval(f),
            Expr::Contains(name, v) if name == "fullText" => {
                field("name").contains(v.as_str())
                    || String::from_utf8_lossy(&f.content).contains(v.as_str())
                    || f.exports
                        .values()
                        .any(|e| String::from_utf8_lossy(e).contains(v.as_str()))
            }
            Expr::Contains(name, v) => field(name).contains(v.as_str()),
            Expr::Eq(name, v, equal) => (field(name) == *v) == *equal,
            Expr::In(v, name) => f.meta[name]
                .as_array()
                .is_some_and(|a| a.iter().any(|p| p == v.as_str())),
        }
    }
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn new(q: &str) -> Result<Parser, String> {
        Ok(Parser {
            toks: lex(q)?,
            at: 0,
        })
    }
    fn parse(&mut self) -> Result<Expr, String> {
        let e = self.or()?;
        if self.at != self.toks.len() {
            return Err(format!("unexpected {:?}", self.toks[self.at]));
        }
        Ok(e)
    }
    fn peek_word(&self, w: &str) -> bool {
        matches!(self.toks.get(self.at), Some(Tok::Word(x)) if x == w)
    }
    fn or(&mut self) -> Result<Expr, String> {
        let mut e = self.and()?;
        while self.peek_word("or") {
            self.at += 1;
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut e = self.unary()?;
        while self.peek_word("and") {
            self.at += 1;
            e = Expr::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }
    fn unary(&mut self) -> Result<Expr, String> {
        if self.peek_word("not") {
            self.at += 1;
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.toks.get(self.at) == Some(&Tok::Open) {
            self.at += 1;
            let e = self.or()?;
            if self.toks.get(self.at) != Some(&Tok::Close) {
                return Err("missing )".into());
            }
            self.at += 1;
            return Ok(e);
        }
        let toks: Vec<Tok> = self.toks.iter().skip(self.at).take(3).cloned().collect();
        self.at += 3;
        match toks.as_slice() {
            [Tok::Lit(v), Tok::Word(op), Tok::Word(field)] if op == "in" => {
                Ok(Expr::In(v.clone(), field.clone()))
            }
            [Tok::Word(field), Tok::Word(op), Tok::Lit(v)] if op == "contains" => {
                Ok(Expr::Contains(field.clone(), v.clone()))
            }
            [Tok::Word(field), Tok::Word(op), Tok::Lit(v)] if op == "=" || op == "!=" => {
                Ok(Expr::Eq(field.clone(), v.clone(), op == "="))
            }
            [Tok::Word(field), Tok::Word(op), Tok::Word(v)]
                if (op == "=" || op == "!=") && (v == "true" || v == "false") =>
            {
                Ok(Expr::Eq(field.clone(), v.clone(), op == "="))
            }
            other => Err(format!("cannot parse {other:?}")),
        }
    }
}
