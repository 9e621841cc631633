//! The Streamable HTTP endpoint: POST for messages, GET for a legacy session's stream,
//! DELETE to end a legacy session.

use super::HttpState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolyard_actors::transport::{
    modern_gate, ConnectionHandle, Delivery, GateError, MessageSink, Sink,
};
use toolyard_proto::error::code;
use toolyard_proto::jsonrpc::{self, Incoming, Request};
use toolyard_proto::method::{self, NameField};
use toolyard_proto::{ErrorObject, ProtocolVersion, RequestId, RequestMeta};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// A sink that drops everything: the shared sessionless connection answers every request
/// on the request's own stream, never on the connection's.
pub(crate) struct NullSink;

impl MessageSink for NullSink {
    fn send(&self, _message: Vec<u8>) -> bool {
        true
    }
    fn is_closed(&self) -> bool {
        false
    }
}

/// A legacy session's connection-level sink: the standalone GET stream, when one is open.
#[derive(Default)]
pub(crate) struct SessionSink {
    slot: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    closed: std::sync::atomic::AtomicBool,
}

impl SessionSink {
    fn attach(&self, tx: mpsc::UnboundedSender<Vec<u8>>) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }
}

/// The [`MessageSink`] face of a shared [`SessionSink`].
pub(crate) struct SharedSessionSink(pub(crate) Arc<SessionSink>);

impl MessageSink for SharedSessionSink {
    fn send(&self, message: Vec<u8>) -> bool {
        if let Some(tx) = &*self.0.slot.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(message);
        }
        true
    }
    fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Relaxed)
    }
}

/// Events kept per response stream for `Last-Event-ID` resumption.
const REPLAY_EVENTS: usize = 256;
/// Response streams remembered per session.
const REPLAY_STREAMS: usize = 32;
/// The `retry` a priming event asks clients to wait before reconnecting (SEP-1699).
const RETRY: Duration = Duration::from_millis(1000);

/// One replayable event: its sequence number in its stream and its JSON text.
type ReplayEvent = (u64, Arc<str>);
/// What a stream attaching to a replay gets: the backlog, then live events (none if done).
type Attached = (
    Vec<ReplayEvent>,
    Option<mpsc::UnboundedReceiver<ReplayEvent>>,
);
/// A session's response streams, by id, oldest first, with the next id.
type StreamTable = (u64, std::collections::VecDeque<(u64, Arc<Mutex<Replay>>)>);

/// The events of one response stream of a legacy session, replayable after a disconnect.
#[derive(Default)]
pub(crate) struct Replay {
    events: std::collections::VecDeque<ReplayEvent>,
    next_seq: u64,
    live: Option<mpsc::UnboundedSender<ReplayEvent>>,
    done: bool,
}

impl Replay {
    /// Records an event and forwards it to the attached stream, if any.
    fn push(&mut self, data: Arc<str>) {
        self.next_seq += 1;
        let seq = self.next_seq;
        if self.events.len() == REPLAY_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((seq, data.clone()));
        if let Some(tx) = &self.live {
            if tx.send((seq, data)).is_err() {
                self.live = None;
            }
        }
    }

    /// Attaches a stream: what it missed after `after`, then live events.
    fn attach(&mut self, after: u64) -> Attached {
        let backlog = self
            .events
            .iter()
            .filter(|(seq, _)| *seq > after)
            .cloned()
            .collect();
        if self.done {
            return (backlog, None);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.live = Some(tx);
        (backlog, Some(rx))
    }
}

/// One legacy session.
pub(crate) struct Session {
    pub(crate) handle: ConnectionHandle,
    /// Who opened the session; requests by anyone else are answered as if it did not exist.
    pub(crate) principal: Option<Arc<str>>,
    sink: Arc<SessionSink>,
    last_seen: Mutex<Instant>,
    streams: Mutex<StreamTable>,
}

impl Session {
    pub(crate) fn new(
        handle: ConnectionHandle,
        sink: Arc<SessionSink>,
        principal: Option<Arc<str>>,
    ) -> Self {
        Session {
            handle,
            principal,
            sink,
            last_seen: Mutex::new(Instant::now()),
            streams: Mutex::new((0, Default::default())),
        }
    }
    fn open_stream(&self) -> (u64, Arc<Mutex<Replay>>) {
        let mut guard = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let (next, streams) = &mut *guard;
        *next += 1;
        if streams.len() == REPLAY_STREAMS {
            streams.pop_front();
        }
        let replay = Arc::new(Mutex::new(Replay::default()));
        streams.push_back((*next, replay.clone()));
        (*next, replay)
    }
    fn stream(&self, id: u64) -> Option<Arc<Mutex<Replay>>> {
        let guard = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .1
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, r)| r.clone())
    }
    fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
    fn close(&self) {
        self.sink.closed.store(true, Ordering::Relaxed);
        self.handle.close();
    }
}

/// Live legacy sessions by id.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<HashMap<String, Arc<Session>>>);

impl Sessions {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The session `id`, if it exists and belongs to `principal` (a session is bound to
    /// the caller that opened it, so a stolen session id is useless to anyone else).
    pub(crate) fn get(&self, id: &str, principal: &Option<Arc<str>>) -> Option<Arc<Session>> {
        self.table()
            .get(id)
            .filter(|s| &s.principal == principal)
            .cloned()
    }
    pub(crate) fn insert(&self, id: String, s: Arc<Session>) {
        self.table().insert(id, s);
    }
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.table().remove(id)
    }

    /// Removes the session `id` if it belongs to `principal`.
    pub(crate) fn remove_for(
        &self,
        id: &str,
        principal: &Option<Arc<str>>,
    ) -> Option<Arc<Session>> {
        let mut table = self.table();
        if table.get(id).is_some_and(|s| &s.principal == principal) {
            table.remove(id)
        } else {
            None
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }
}

pub(crate) fn new_session_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Closes idle sessions.
pub(crate) fn spawn_reaper(state: &Arc<HttpState>) {
    let weak = Arc::downgrade(state);
    let every = (state.config.session_idle_timeout / 4).max(Duration::from_secs(1));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(state) = weak.upgrade() else { return };
            let limit = state.config.session_idle_timeout;
            let expired: Vec<String> = state
                .sessions
                .table()
                .iter()
                .filter(|(_, s)| {
                    s.last_seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .elapsed()
                        > limit
                        || !s.handle.is_alive()
                })
                .map(|(k, _)| k.clone())
                .collect();
            for id in expired {
                if let Some(s) = state.sessions.remove(&id) {
                    tracing::debug!(session = %id, "idle session expired");
                    s.close();
                }
            }
        }
    });
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn json_error(status: StatusCode, id: Option<&RequestId>, error: ErrorObject) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        jsonrpc::error_bytes(id, &error),
    )
        .into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn accepts(headers: &HeaderMap, what: &str) -> bool {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(a) => a.split(',').any(|p| {
            let p = p.split(';').next().unwrap_or("").trim();
            p == what || p == "*/*" || (p == "application/*" && what.starts_with("application/"))
        }),
    }
}

pub(crate) async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    let body = serde_json::json!({
        "status": if state.closing.is_cancelled() { "shutting-down" } else { "ready" },
        "sessions": state.sessions.len(),
        "streams": state.counters.streams.load(Ordering::Relaxed),
        "inFlight": state.counters.in_flight.load(Ordering::Relaxed),
        "tasks": state.server.running_tasks(),
    });
    let status = if state.closing.is_cancelled() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[derive(Deserialize, Default)]
struct Head {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMeta>,
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    uri: Option<serde_json::Value>,
    /// Kept raw: parsed only for tools that mirror arguments into headers.
    #[serde(default)]
    arguments: Option<Box<serde_json::value::RawValue>>,
    #[serde(default, rename = "taskId")]
    task_id: Option<serde_json::Value>,
}

/// Decodes a header value: the `=?base64?...?=` sentinel form, or plain visible ASCII.
fn decode_header(raw: &axum::http::HeaderValue) -> Result<String, String> {
    let text = raw
        .to_str()
        .map_err(|_| "header value has characters outside visible ASCII".to_owned())?;
    if let Some(inner) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .map_err(|e| format!("invalid base64 in header value: {e}"))?;
        return String::from_utf8(bytes).map_err(|_| "base64 header value is not UTF-8".into());
    }
    if text
        .bytes()
        .any(|b| b != b'\t' && !(0x20..=0x7e).contains(&b))
    {
        return Err("header value has characters outside visible ASCII".into());
    }
    Ok(text.to_owned())
}

/// Whether a header's text stands for the body's value (numbers compare numerically).
fn same_value(header: &str, body: &serde_json::Value) -> bool {
    match body {
        serde_json::Value::String(s) => s == header,
        serde_json::Value::Bool(b) => header == if *b { "true" } else { "false" },
        serde_json::Value::Number(n) => match (n.as_f64(), header.trim().parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        _ => false,
    }
}

/// `Mcp-Param-*` headers of a tools/call must mirror the tool's `x-mcp-header` arguments.
// The error is a ready response, built once on the rare rejection path.
#[allow(clippy::result_large_err)]
fn check_param_headers(
    state: &HttpState,
    headers: &HeaderMap,
    req: &Request,
    tool: Option<&str>,
    arguments: Option<&serde_json::value::RawValue>,
) -> Result<(), Response> {
    let Some(def) = tool.and_then(|t| state.server.tool(t)) else {
        return Ok(());
    };
    if def.header_params().is_empty() {
        return Ok(());
    }
    let arguments: Option<serde_json::Value> =
        arguments.and_then(|raw| serde_json::from_str(raw.get()).ok());
    let arguments = arguments.as_ref();
    for p in def.header_params() {
        let header_name = format!("mcp-param-{}", p.header.to_ascii_lowercase());
        let path = p.path.join(".");
        let mut value = arguments;
        for key in &p.path {
            value = value.and_then(|v| v.get(key));
        }
        let value = value.filter(|v| !v.is_null());
        match (headers.get(&header_name), value) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(mismatch(
                    &req.id,
                    format!(
                        "Header mismatch: missing Mcp-Param-{} header for argument `{path}`",
                        p.header
                    ),
                ))
            }
            (Some(_), None) => {
                return Err(mismatch(
                    &req.id,
                    format!(
                    "Header mismatch: Mcp-Param-{} header present but argument `{path}` is absent",
                    p.header
                ),
                ))
            }
            (Some(raw), Some(body)) => {
                let decoded = decode_header(raw).map_err(|why| {
                    mismatch(
                        &req.id,
                        format!("Header mismatch: Mcp-Param-{}: {why}", p.header),
                    )
                })?;
                if !same_value(&decoded, body) {
                    return Err(mismatch(
                        &req.id,
                        format!("Header mismatch: Mcp-Param-{} header value '{decoded}' does not match argument `{path}`", p.header),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn has_protocol_meta(req: &Request) -> bool {
    jsonrpc::params::<Head>(req.params.as_deref())
        .ok()
        .and_then(|h| h.meta)
        .is_some_and(|m| m.protocol_version.is_some())
}

fn mismatch(id: &RequestId, message: String) -> Response {
    json_error(
        StatusCode::BAD_REQUEST,
        Some(id),
        ErrorObject::new(code::HEADER_MISMATCH, message),
    )
}

/// The HTTP-level checks of a modern request: `_meta`, version, and the SEP-2243 headers.
#[allow(clippy::result_large_err)]
fn check_modern(
    state: &HttpState,
    headers: &HeaderMap,
    req: &Request,
) -> Result<RequestMeta, Response> {
    let head: Head = jsonrpc::params(req.params.as_deref())
        .map_err(|e| json_error(StatusCode::BAD_REQUEST, Some(&req.id), e))?;
    let meta = head.meta.unwrap_or_default();
    let Some(version) = meta.protocol_version.as_deref() else {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            Some(&req.id),
            ErrorObject::invalid_params(format!(
                "Bad Request: no Mcp-Session-Id, and `_meta` lacks `{}` (protocol 2026-07-28)",
                toolyard_proto::meta::PROTOCOL_VERSION
            )),
        ));
    };
    if let Some(h) = header_str(headers, VERSION_HEADER) {
        if h != version {
            return Err(mismatch(
                &req.id,
                format!("Header mismatch: MCP-Protocol-Version header '{h}' does not match _meta version '{version}'"),
            ));
        }
    }
    match modern_gate(&req.method, version, &meta) {
        // A removed method is answered by the server after the header checks (404).
        Ok(_) | Err(GateError::RemovedInModern { .. }) => {}
        Err(e) => {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                Some(&req.id),
                e.to_error(),
            ))
        }
    }
    match header_str(headers, METHOD_HEADER) {
        None => {
            return Err(mismatch(
                &req.id,
                "Header mismatch: missing Mcp-Method header".into(),
            ))
        }
        Some(m) if m != req.method => {
            return Err(mismatch(
                &req.id,
                format!(
                    "Header mismatch: Mcp-Method header value '{m}' does not match body value '{}'",
                    req.method
                ),
            ))
        }
        _ => {}
    }
    let named = method::client_request(&req.method)
        .and_then(|spec| spec.mcp_name)
        .map(|field| match field {
            NameField::Name => head.name.clone(),
            NameField::Uri => head.uri.clone(),
            NameField::TaskId => head.task_id.clone(),
        });
    if let Some(body) = named {
        let body = body.as_ref().and_then(|v| v.as_str());
        let header = match headers.get(NAME_HEADER) {
            None => {
                return Err(mismatch(
                    &req.id,
                    "Header mismatch: missing Mcp-Name header".into(),
                ))
            }
            Some(raw) => decode_header(raw)
                .map_err(|why| mismatch(&req.id, format!("Header mismatch: Mcp-Name: {why}")))?,
        };
        if let Some(b) = body {
            if header != b {
                return Err(mismatch(
                    &req.id,
                    format!("Header mismatch: Mcp-Name header value '{header}' does not match body value '{b}'"),
                ));
            }
        }
    }
    if req.method == method::TOOLS_CALL {
        check_param_headers(
            state,
            headers,
            req,
            head.name.as_ref().and_then(|v| v.as_str()),
            head.arguments.as_deref(),
        )?;
    }
    Ok(meta)
}

/// The authenticated caller the OAuth layer put in the request, if any.
pub(crate) type Caller = Option<axum::Extension<super::auth::Principal>>;

pub(crate) fn principal_of(caller: Caller) -> Option<Arc<str>> {
    caller.map(|axum::Extension(p)| p.0)
}

pub(crate) async fn post(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let principal = principal_of(caller);
    let content_type = header_str(&headers, "content-type").unwrap_or("");
    if !content_type.starts_with("application/json") {
        return json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorObject::invalid_request(
                "Unsupported Media Type: Content-Type must be application/json",
            ),
        );
    }
    let accept_json = accepts(&headers, "application/json");
    let accept_sse = accepts(&headers, "text/event-stream");
    if !accept_json && !accept_sse {
        return json_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorObject::invalid_request(
                "Not Acceptable: Accept must include application/json and text/event-stream",
            ),
        );
    }
    let message = match jsonrpc::parse(&body) {
        Ok(m) => m,
        Err(r) => return json_error(StatusCode::BAD_REQUEST, r.id.as_ref(), r.error),
    };
    let session_id = header_str(&headers, SESSION_HEADER).map(str::to_owned);

    if let Incoming::Request(req) = &message {
        // A modern request named `initialize` is a removed method, not a new session.
        if req.method == method::INITIALIZE && session_id.is_none() && !has_protocol_meta(req) {
            return initialize(state, message, accept_json, principal).await;
        }
    }
    if let Some(id) = session_id {
        let Some(session) = state.sessions.get(&id, &principal) else {
            return json_error(
                StatusCode::NOT_FOUND,
                None,
                ErrorObject::invalid_request(
                    "Session not found: it expired or was deleted; initialize again",
                ),
            );
        };
        if let Some(v) = header_str(&headers, VERSION_HEADER) {
            if ProtocolVersion::parse(v).is_none_or(|v| !v.is_legacy()) {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    None,
                    ErrorObject::invalid_request(format!(
                        "Bad Request: unsupported MCP-Protocol-Version header '{v}'"
                    )),
                );
            }
        }
        session.touch();
        return match message {
            Incoming::Request(req) => {
                let handle = session.handle.clone();
                respond(
                    &state,
                    &handle,
                    req,
                    true,
                    false,
                    accept_json,
                    None,
                    Some(session),
                    None,
                    None,
                )
                .await
            }
            other => {
                session.handle.deliver(other, None);
                StatusCode::ACCEPTED.into_response()
            }
        };
    }
    match message {
        Incoming::Request(req) => {
            let meta = match check_modern(&state, &headers, &req) {
                Ok(meta) => meta,
                Err(r) => return r,
            };
            // Only a listen stream needs the (shared) connection's listener table; every
            // other modern request is served without an actor hop.
            let direct = (req.method != method::SUBSCRIPTIONS_LISTEN).then_some(meta);
            respond(
                &state,
                &state.stateless,
                req,
                false,
                true,
                accept_json,
                None,
                None,
                principal,
                direct,
            )
            .await
        }
        // Modern notifications (e.g. a cancellation) and stray responses need no session:
        // cancelling a modern request is closing its response stream.
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

async fn initialize(
    state: Arc<HttpState>,
    message: Incoming,
    accept_json: bool,
    principal: Option<Arc<str>>,
) -> Response {
    if state.sessions.len() >= state.config.max_sessions {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            ErrorObject::internal("too many live sessions; try again later"),
        );
    }
    let Incoming::Request(req) = message else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = new_session_id();
    let sink = Arc::new(SessionSink::default());
    let handle = match state
        .server
        .connect_as(
            Sink::new(SharedSessionSink(sink.clone())),
            Some(id.clone().into()),
            principal.clone(),
        )
        .await
    {
        Ok(h) => h,
        Err(e) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(&req.id),
                ErrorObject::internal(e.to_string()),
            )
        }
    };
    let session = Arc::new(Session::new(handle.clone(), sink, principal));
    state.sessions.insert(id.clone(), session.clone());
    respond(
        &state,
        &handle,
        req,
        true,
        false,
        accept_json,
        Some(id),
        Some(session),
        None,
        None,
    )
    .await
}

/// Our serializer writes `{"jsonrpc":"2.0","id":<id>,"result"` / `,"error"` for the answer
/// of a request: recognizing it needs no parse.
fn is_answer(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.starts_with(prefix)
        && (bytes[prefix.len()..].starts_with(b"\"result\"")
            || bytes[prefix.len()..].starts_with(b"\"error\""))
}

fn status_of_error(bytes: &[u8]) -> StatusCode {
    #[derive(Deserialize)]
    struct E {
        error: Option<ErrorObject>,
    }
    match serde_json::from_slice::<E>(bytes)
        .ok()
        .and_then(|e| e.error)
        .map(|e| e.code)
    {
        Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY
            | code::UNSUPPORTED_PROTOCOL_VERSION
            | code::HEADER_MISMATCH
            | code::INVALID_REQUEST
            | code::PARSE_ERROR,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// Cancels the request when its response stream is dropped before the answer was sent.
struct StreamGuard {
    cancel: CancellationToken,
    state: Arc<HttpState>,
    answered: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.answered {
            self.cancel.cancel();
        }
        self.state.counters.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

struct InFlight(Arc<HttpState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Hands a request to a connection and answers with JSON when the first thing produced is
/// the answer, or with an SSE stream that ends with the answer otherwise.
#[allow(clippy::too_many_arguments)]
async fn respond(
    state: &Arc<HttpState>,
    handle: &ConnectionHandle,
    req: Request,
    track: bool,
    modern: bool,
    accept_json: bool,
    session_id: Option<String>,
    session: Option<Arc<Session>>,
    principal: Option<Arc<str>>,
    direct: Option<RequestMeta>,
) -> Response {
    state.counters.in_flight.fetch_add(1, Ordering::Relaxed);
    let in_flight = InFlight(state.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let mut prefix = Vec::with_capacity(32);
    prefix.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let _ = serde_json::to_writer(&mut prefix, &req.id);
    prefix.push(b',');
    let delivery = Delivery {
        sink: Sink::channel(tx),
        cancel: cancel.clone(),
        track,
        principal,
    };
    let id = req.id.clone();
    // In-flight calls may finish during a graceful shutdown; a listen stream never
    // finishes, so it is the one thing shutdown ends.
    let closing = if req.method == method::SUBSCRIPTIONS_LISTEN {
        state.closing.clone()
    } else {
        CancellationToken::new()
    };
    if let Some(meta) = direct {
        state.server.serve_stateless(req, meta, delivery);
    } else if !handle.deliver_request(req, delivery) {
        return json_error(
            StatusCode::NOT_FOUND,
            Some(&id),
            ErrorObject::invalid_request("Session not found: the session has ended"),
        );
    }
    let guard = |answered| StreamGuard {
        cancel: cancel.clone(),
        state: state.clone(),
        answered,
    };
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let mut early = guard(false);
    let first = tokio::select! {
        m = rx.recv() => m,
        _ = closing.cancelled() => None,
    };
    let Some(first) = first else {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            Some(&id),
            ErrorObject::internal("the server is shutting down"),
        );
    };
    let mut response = if is_answer(&first, &prefix) && accept_json {
        early.answered = true;
        drop(early);
        drop(in_flight);
        let status = if modern {
            status_of_error(&first)
        } else {
            StatusCode::OK
        };
        (status, [(header::CONTENT_TYPE, "application/json")], first).into_response()
    } else if let Some(session) = session {
        // Legacy: the call outlives a broken stream; the client resumes it with GET and
        // Last-Event-ID.
        early.answered = true;
        drop(early);
        resumable(state, &session, first, rx, prefix, in_flight)
    } else {
        early.answered = is_answer(&first, &prefix);
        let done = early.answered;
        let stream = futures_util::stream::unfold(
            (
                Some(first),
                rx,
                early,
                done,
                prefix,
                closing,
                Some(in_flight),
            ),
            |(pending, mut rx, mut guard, done, prefix, closing, in_flight)| async move {
                if let Some(bytes) = pending {
                    let event = Event::default()
                        .event("message")
                        .data(String::from_utf8_lossy(&bytes));
                    return Some((
                        Ok::<_, Infallible>(event),
                        (None, rx, guard, done, prefix, closing, in_flight),
                    ));
                }
                if done {
                    return None;
                }
                let next = tokio::select! {
                    m = rx.recv() => m,
                    _ = closing.cancelled() => None,
                };
                let bytes = next?;
                let answered = is_answer(&bytes, &prefix);
                if answered {
                    guard.answered = true;
                }
                let event = Event::default()
                    .event("message")
                    .data(String::from_utf8_lossy(&bytes));
                Some((
                    Ok(event),
                    (None, rx, guard, answered, prefix, closing, in_flight),
                ))
            },
        );
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
            .into_response()
    };
    if let Some(sid) = session_id {
        if let Ok(v) = HeaderValue::from_str(&sid) {
            response.headers_mut().insert(SESSION_HEADER, v);
        }
    }
    response
}

/// Pumps a legacy request's messages into its replay buffer and answers with a stream of
/// them: a priming event (id, empty data, `retry`), then every message with an event id.
fn resumable(
    state: &Arc<HttpState>,
    session: &Arc<Session>,
    first: Vec<u8>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    prefix: Vec<u8>,
    in_flight: InFlight,
) -> Response {
    let (stream_id, replay) = session.open_stream();
    let attached = replay.lock().unwrap_or_else(|p| p.into_inner()).attach(0);
    let pump = replay;
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let mut next = Some(first);
        while let Some(bytes) = next.take() {
            let answered = is_answer(&bytes, &prefix);
            {
                let mut r = pump.lock().unwrap_or_else(|p| p.into_inner());
                r.push(String::from_utf8_lossy(&bytes).into());
                if answered {
                    r.done = true;
                    r.live = None;
                    return;
                }
            }
            next = rx.recv().await;
        }
        let mut r = pump.lock().unwrap_or_else(|p| p.into_inner());
        r.done = true;
        r.live = None;
    });
    replay_stream(state, stream_id, attached, true)
}

fn replay_stream(
    state: &Arc<HttpState>,
    stream_id: u64,
    (backlog, live): Attached,
    priming: bool,
) -> Response {
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let counted = StreamGuard {
        cancel: CancellationToken::new(),
        state: state.clone(),
        answered: true,
    };
    let event = move |seq: u64, data: &str| {
        Event::default()
            .event("message")
            .id(format!("{stream_id}-{seq}"))
            .data(data)
    };
    let head: Vec<Event> = priming
        .then(|| {
            Event::default()
                .id(format!("{stream_id}-0"))
                .retry(RETRY)
                .data("")
        })
        .into_iter()
        .chain(backlog.iter().map(|(seq, d)| event(*seq, d)))
        .collect();
    use futures_util::StreamExt;
    let head = futures_util::stream::iter(head.into_iter().map(Ok::<_, Infallible>));
    let tail = futures_util::stream::unfold((live, counted), move |(mut live, g)| async move {
        let (seq, data) = live.as_mut()?.recv().await?;
        Some((Ok(event(seq, &data)), (live, g)))
    });
    Sse::new(head.chain(tail))
        .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
        .into_response()
}

pub(crate) async fn get(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let principal = principal_of(caller);
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "GET needs an Mcp-Session-Id (legacy sessions); 2026-07-28 uses subscriptions/listen",
        )
            .into_response();
    };
    if !accepts(&headers, "text/event-stream") {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    }
    let Some(session) = state.sessions.get(id, &principal) else {
        return json_error(
            StatusCode::NOT_FOUND,
            None,
            ErrorObject::invalid_request("Session not found"),
        );
    };
    session.touch();
    if let Some(last) = header_str(&headers, "last-event-id") {
        let parsed = last
            .split_once('-')
            .and_then(|(s, q)| Some((s.parse::<u64>().ok()?, q.parse::<u64>().ok()?)));
        let Some((stream_id, seq)) = parsed else {
            return (StatusCode::BAD_REQUEST, "malformed Last-Event-ID").into_response();
        };
        let Some(replay) = session.stream(stream_id) else {
            return (StatusCode::NOT_FOUND, "that stream is no longer available").into_response();
        };
        let attached = replay.lock().unwrap_or_else(|p| p.into_inner()).attach(seq);
        return replay_stream(&state, stream_id, attached, false);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    session.sink.attach(tx);
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let counted = StreamGuard {
        cancel: CancellationToken::new(),
        state: state.clone(),
        answered: true,
    };
    let closing = state.closing.clone();
    let stream =
        futures_util::stream::unfold((rx, counted, closing), |(mut rx, g, closing)| async move {
            let next = tokio::select! {
                m = rx.recv() => m,
                _ = closing.cancelled() => None,
            };
            let bytes = next?;
            let event = Event::default()
                .event("message")
                .data(String::from_utf8_lossy(&bytes));
            Some((Ok::<_, Infallible>(event), (rx, g, closing)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
        .into_response()
}

pub(crate) async fn delete(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let principal = principal_of(caller);
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    };
    match state.sessions.remove_for(id, &principal) {
        Some(s) => {
            s.close();
            StatusCode::OK.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
