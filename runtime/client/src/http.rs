//! The Streamable HTTP client transport. How it works is documented on
//! [`StreamableHttpTransport`], where users of the crate see it.

use super::auth::{AuthChallenge, AuthProvider};
use super::sse::{SseParser, SseTransport, DEFAULT_ENDPOINT_TIMEOUT};
use crate::{
    EventSink, OutboundKind, OutboundMessage, Transport, TransportError, TransportEvent,
    TransportLink,
};
use reqwest::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, OnceCell};
use tokio::task::AbortHandle;
use toolyard_proto::BoxFuture;
use toolyard_proto::RequestId;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";
/// Auth retries (after `AuthProvider::unauthorized` said yes) per request.
const MAX_AUTH_RETRIES: u32 = 3;
/// Resumption attempts in a row without receiving anything before a request fails.
const MAX_RESUME_ATTEMPTS: u32 = 3;
/// Reconnects in a row of the standalone GET stream that yield nothing before we stop.
const MAX_LISTEN_FAILURES: u32 = 8;
/// The wait before reconnecting when the server named no `retry`.
const DEFAULT_RETRY: Duration = Duration::from_millis(1000);
/// How long requests wait for the standalone GET stream to be answered after
/// `notifications/initialized` before going ahead anyway.
const LISTEN_GATE_WAIT: Duration = Duration::from_secs(2);
/// How long `close` waits for the DELETE of the session.
const DELETE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of an error body goes into [`TransportError::Http`].
const ERROR_BODY_BYTES: usize = 512;
/// The default for [`StreamableHttpTransport::max_message_bytes`].
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The default for [`StreamableHttpTransport::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client transport over Streamable HTTP.
///
/// # How it works
///
/// The Streamable HTTP client transport (both generations): every message is one POST to the
/// MCP endpoint, and the answer comes back on that POST, as JSON or as an SSE stream.
///
/// Why it is shaped this way:
/// - **A task and a stream per request.** Each send runs in its own task, so a slow tool call
///   never holds up a `ping` behind it, and the response stream of a request belongs to that
///   request alone. Cancelling a request ([`TransportLink::cancel`]) aborts its task, which
///   drops the connection: closing the stream is how a modern (2026-07-28) server learns that
///   nobody wants the answer any more. (A legacy server keeps running the call; the client
///   sends `notifications/cancelled` for those.)
/// - **Resumption.** A stream that breaks before its request was answered is picked up again
///   with `GET` and `Last-Event-ID`, after the `retry` the server asked for (1 s when it
///   named none), a few times at most; a stream without any event id cannot be resumed and
///   fails the request.
/// - **Sessions (legacy).** The `Mcp-Session-Id` of a response is kept and sent on every later
///   message (an `initialize` answer replaces it). A 404 while we hold one means the server
///   forgot the session: the id is dropped and the request fails with
///   [`TransportError::SessionExpired`], so the client initializes again and retries. After
///   `notifications/initialized` the standalone GET stream carries server-initiated messages;
///   [`close`](TransportLink::close) ends the session with DELETE.
/// - **Errors stay per request.** A refused connection or an HTTP error fails the one request
///   ([`TransportEvent::RequestFailed`]); the next one may well work, so nothing here closes
///   the transport except `close`. A non-2xx answer whose body is the JSON-RPC error of the
///   request (the modern generation answers 400/404 with one) is delivered as that message.
/// - **Auth** comes from an [`AuthProvider`]: 401/403 asks it for better credentials and
///   retries, a few times per request.
///
/// This transport parses no MCP beyond the `id` of messages on a request's stream (to know
/// when the request has been answered).
///
/// # Finding the transport by itself ([`auto`](Self::auto))
///
/// A URL a user gives may be a Streamable HTTP endpoint (`/mcp`) or the SSE endpoint of the
/// deprecated 2024-11-05 HTTP+SSE transport (`/sse`). With [`auto`](Self::auto) (or
/// [`sse_fallback(true)`](Self::sse_fallback)) the transport follows the spec's
/// backwards-compatibility procedure: messages are POSTed as usual until the server has
/// answered one; when a POST is refused with 400, 404 or 405 and its body is not the JSON-RPC
/// answer to the request (a modern server answers unknown methods, unsupported versions and
/// header mismatches that way, and those are answers), the transport GETs the same URL with
/// `Accept: text/event-stream`. If that opens an SSE stream whose first event is `endpoint`,
/// it is an HTTP+SSE server: the refused message is sent again over an [`SseTransport`] on
/// that stream, and so is everything after it (`cancel` and `close` go there too). Nothing
/// depends on which request comes first: the legacy `initialize`, a modern
/// `server/discover` or any other. If the GET fails as well, the message fails with
/// [`TransportError::NoHttpTransport`], which names both attempts, and the next message tries
/// both again; once a POST has been answered the server speaks Streamable HTTP and nothing
/// falls back any more. The fallback's GET waits for the `endpoint` event at most
/// [`sse_endpoint_timeout`](Self::sse_endpoint_timeout) (default
/// [`DEFAULT_ENDPOINT_TIMEOUT`]).
///
/// ```no_run
/// # use std::sync::Arc;
/// use toolyard_client::StaticToken;
/// use toolyard_client::StreamableHttpTransport;
///
/// let transport = StreamableHttpTransport::new("http://127.0.0.1:8080/mcp")
///     .header("X-Tenant", "acme")
///     .auth(Arc::new(StaticToken("s3cret".into())));
/// // Streamable HTTP or HTTP+SSE, whichever the server at this URL speaks.
/// let either = StreamableHttpTransport::auto("http://127.0.0.1:8080/sse");
/// ```
pub struct StreamableHttpTransport {
    url: String,
    config: HttpOptions,
    /// Fall back to HTTP+SSE when the POST is refused.
    sse_fallback: bool,
    /// How long the fallback waits for the `endpoint` event.
    endpoint_timeout: Duration,
}

/// What both HTTP transports are configured with.
#[derive(Clone)]
pub(crate) struct HttpOptions {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) auth: Option<Arc<dyn AuthProvider>>,
    pub(crate) client: Option<reqwest::Client>,
    pub(crate) max_message_bytes: usize,
    pub(crate) connect_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            headers: Vec::new(),
            auth: None,
            client: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl std::fmt::Debug for StreamableHttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamableHttpTransport")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl StreamableHttpTransport {
    /// A transport to the MCP endpoint at `url` (e.g. `http://127.0.0.1:8080/mcp`), Streamable
    /// HTTP only.
    pub fn new(url: impl Into<String>) -> Self {
        StreamableHttpTransport {
            url: url.into(),
            config: HttpOptions::default(),
            sse_fallback: false,
            endpoint_timeout: DEFAULT_ENDPOINT_TIMEOUT,
        }
    }

    /// A transport to whichever HTTP transport the server at `url` speaks: Streamable HTTP,
    /// or the 2024-11-05 HTTP+SSE transport when the POST is refused and a GET of the same
    /// URL opens its SSE stream (see "Finding the transport by itself" above).
    pub fn auto(url: impl Into<String>) -> Self {
        Self::new(url).sse_fallback(true)
    }

    /// Whether a refused POST (400, 404 or 405 without a JSON-RPC answer) before the server
    /// has answered any makes the transport try HTTP+SSE at the same URL. Default `false`
    /// for [`new`](Self::new), `true` for [`auto`](Self::auto).
    pub fn sse_fallback(mut self, on: bool) -> Self {
        self.sse_fallback = on;
        self
    }

    /// How long the fallback to HTTP+SSE waits for the SSE stream and its `endpoint` event.
    /// Default [`DEFAULT_ENDPOINT_TIMEOUT`].
    pub fn sse_endpoint_timeout(mut self, timeout: Duration) -> Self {
        self.endpoint_timeout = timeout;
        self
    }

    /// Sends this header on every HTTP request (an API key, a tenant id, ...).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.headers.push((name.into(), value.into()));
        self
    }

    /// Where the `Authorization` header comes from, and who is told about 401/403.
    pub fn auth(mut self, provider: Arc<dyn AuthProvider>) -> Self {
        self.config.auth = Some(provider);
        self
    }

    /// Uses this HTTP client (proxies, TLS roots, ...) instead of building one; then
    /// [`connect_timeout`](Self::connect_timeout) is the client's own business.
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.config.client = Some(client);
        self
    }

    /// The largest message (a JSON body or one SSE event) accepted; a bigger one fails its
    /// request as malformed. Default [`DEFAULT_MAX_MESSAGE_BYTES`].
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.config.max_message_bytes = bytes;
        self
    }

    /// How long establishing a connection may take. Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }
}

impl Transport for StreamableHttpTransport {
    fn start(
        self: Box<Self>,
        events: EventSink,
    ) -> BoxFuture<Result<Arc<dyn TransportLink>, TransportError>> {
        Box::pin(async move {
            let options = self.sse_fallback.then(|| self.config.clone());
            let base = HttpBase::new(&self.url, self.config)?;
            let fallback = options.map(|options| Fallback {
                // One HTTP client for both transports.
                options: HttpOptions {
                    client: Some(base.client.clone()),
                    ..options
                },
                endpoint_timeout: self.endpoint_timeout,
                streamable: AtomicBool::new(false),
                sse: OnceCell::new(),
            });
            let inner = Arc::new(Inner {
                base,
                events,
                runtime: tokio::runtime::Handle::current(),
                state: Mutex::new(State::default()),
                fallback,
            });
            Ok(Arc::new(HttpLink(inner)) as Arc<dyn TransportLink>)
        })
    }
}

/// The HTTP plumbing both transports share: the client, custom headers and the auth loop.
pub(crate) struct HttpBase {
    pub(crate) client: reqwest::Client,
    pub(crate) url: url::Url,
    headers: Vec<(HeaderName, HeaderValue)>,
    auth: Option<Arc<dyn AuthProvider>>,
    pub(crate) max_message_bytes: usize,
}

impl HttpBase {
    pub(crate) fn new(url: &str, options: HttpOptions) -> Result<HttpBase, TransportError> {
        let url = url::Url::parse(url)
            .map_err(|e| TransportError::Io(format!("invalid URL {url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TransportError::Io(format!(
                "not an HTTP URL: {url} (use http:// or https://)"
            )));
        }
        let headers = options
            .headers
            .iter()
            .map(|(k, v)| {
                let name = HeaderName::try_from(k.as_str())
                    .map_err(|_| TransportError::Io(format!("invalid header name {k:?}")))?;
                let value = HeaderValue::try_from(v.as_str())
                    .map_err(|_| TransportError::Io(format!("invalid value for header {k}")))?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, TransportError>>()?;
        let client = match options.client {
            Some(c) => c,
            None => reqwest::Client::builder()
                .connect_timeout(options.connect_timeout)
                .build()
                .map_err(|e| TransportError::Io(format!("building the HTTP client: {e}")))?,
        };
        Ok(HttpBase {
            client,
            url,
            headers,
            auth: options.auth,
            max_message_bytes: options.max_message_bytes,
        })
    }

    /// A request to `url` with the custom headers and the current `Authorization`.
    async fn build(
        &self,
        method: Method,
        url: &url::Url,
    ) -> Result<RequestBuilder, TransportError> {
        let mut rb = self.client.request(method, url.clone());
        for (k, v) in &self.headers {
            rb = rb.header(k.clone(), v.clone());
        }
        if let Some(auth) = &self.auth {
            if let Some(value) = auth
                .authorization()
                .await
                .map_err(|e| TransportError::Auth(e.0))?
            {
                rb = rb.header(AUTHORIZATION, value);
            }
        }
        Ok(rb)
    }

    /// Sends a request built by `make`, and on 401/403 asks the [`AuthProvider`] for better
    /// credentials and sends it again (at most `max_auth_retries` times). Returns the first
    /// answer that is not a refusal.
    pub(crate) async fn exchange(
        &self,
        method: Method,
        url: &url::Url,
        max_auth_retries: u32,
        make: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Response, TransportError> {
        let mut retries = 0;
        loop {
            let rb = make(self.build(method.clone(), url).await?);
            let resp = rb.send().await.map_err(io_error)?;
            let status = resp.status();
            if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
                return Ok(resp);
            }
            let www_authenticate = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let Some(auth) = &self.auth else {
                let body = error_body(resp, ERROR_BODY_BYTES).await;
                return Err(TransportError::Auth(format!(
                    "HTTP {} and no credentials configured: {body}",
                    status.as_u16()
                )));
            };
            if retries >= max_auth_retries {
                return Err(TransportError::Auth(format!(
                    "HTTP {} after {retries} new credentials",
                    status.as_u16()
                )));
            }
            retries += 1;
            drop(resp);
            auth.unauthorized(AuthChallenge {
                status: status.as_u16(),
                www_authenticate,
                resource: self.url.to_string(),
            })
            .await
            .map_err(|e| TransportError::Auth(e.0))?;
        }
    }
}

/// A reqwest error as a transport error, with its causes (reqwest's own message is terse).
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn io_error(e: reqwest::Error) -> TransportError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    TransportError::Io(message)
}

/// Reads a whole body, failing when it exceeds `max` bytes.
pub(crate) async fn read_body(resp: &mut Response, max: usize) -> Result<Vec<u8>, TransportError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(io_error)? {
        if body.len() + chunk.len() > max {
            return Err(TransportError::Malformed(format!(
                "a message exceeds the {max}-byte limit"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error body, as text, for [`TransportError::Http`].
pub(crate) async fn error_body(mut resp: Response, max: usize) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= max {
            break;
        }
    }
    truncate(&body, max)
}

fn truncate(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(max)]);
    text.trim_end_matches('\u{FFFD}').trim().to_owned()
}

pub(crate) fn content_type(resp: &Response) -> String {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Just enough of a JSON-RPC message to know whether it answers a request.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    method: Option<IgnoredAny>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl Peek {
    /// The id of the request this message answers, if it is an answer.
    fn answer_to(bytes: &[u8]) -> Option<RequestId> {
        let p: Peek = serde_json::from_slice(bytes).ok()?;
        if p.method.is_some() || (p.result.is_none() && p.error.is_none()) {
            return None;
        }
        p.id
    }
}

/// Reports the message(s) in `bytes` (a JSON array is a batch: one event per element);
/// returns whether one of them answers `until`.
pub(crate) fn deliver(events: &EventSink, bytes: Vec<u8>, until: Option<&RequestId>) -> bool {
    let is_batch = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if is_batch {
        if let Ok(items) = serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(&bytes) {
            let mut answered = false;
            for item in items {
                let one = item.get().as_bytes().to_vec();
                answered |= until.is_some() && Peek::answer_to(&one).as_ref() == until;
                let _ = events.send(on_stream_of(one, until));
            }
            return answered;
        }
    }
    let answered = until.is_some() && Peek::answer_to(&bytes).as_ref() == until;
    let _ = events.send(on_stream_of(bytes, until));
    answered
}

/// A message, tied to the request whose response stream carried it (the client gives a
/// server request found there to that request's own question handlers).
fn on_stream_of(message: Vec<u8>, request: Option<&RequestId>) -> TransportEvent {
    match request {
        Some(request) => TransportEvent::Related {
            message,
            request: request.clone(),
        },
        None => TransportEvent::Message(message),
    }
}

/// Reads SSE events off `resp`, reporting each message event, until the stream ends or
/// `until` is answered: returns (answered, whether anything arrived). An oversized event is
/// an error; a broken connection just ends the stream.
pub(crate) async fn pump(
    events: &EventSink,
    resp: &mut Response,
    parser: &mut SseParser,
    until: Option<&RequestId>,
) -> Result<(bool, bool), TransportError> {
    let mut received = false;
    let mut batch = Vec::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok((false, received)),
            Err(e) => {
                tracing::debug!(error = %io_error(e), "SSE stream broke");
                return Ok((false, received));
            }
        };
        received = true;
        parser
            .feed(&chunk, &mut batch)
            .map_err(TransportError::Malformed)?;
        for event in batch.drain(..) {
            if event.event.is_empty() || event.event == "message" {
                if event.data.is_empty() {
                    continue;
                }
                if deliver(events, event.data, until) {
                    return Ok((true, received));
                }
            }
        }
    }
}

/// The started transport.
struct Inner {
    base: HttpBase,
    events: EventSink,
    runtime: tokio::runtime::Handle,
    state: Mutex<State>,
    /// The fallback to HTTP+SSE ([`StreamableHttpTransport::auto`]), if on.
    fallback: Option<Fallback>,
}

/// What the fallback to HTTP+SSE needs and found.
struct Fallback {
    /// For the [`SseTransport`] (sharing our HTTP client).
    options: HttpOptions,
    endpoint_timeout: Duration,
    /// A POST has been answered: the server speaks Streamable HTTP, nothing falls back.
    streamable: AtomicBool,
    /// The HTTP+SSE connection, once a GET found one: every message goes there from then on.
    sse: OnceCell<Arc<dyn TransportLink>>,
}

impl Fallback {
    /// Whether a POST refused with `status` is a reason to try HTTP+SSE: the statuses the
    /// spec names (a server without a POST handler at this URL), before any POST worked.
    fn applies(&self, status: u16) -> bool {
        matches!(status, 400 | 404 | 405) && !self.streamable.load(Ordering::Acquire)
    }
}

#[derive(Default)]
struct State {
    session: Option<String>,
    /// The last `MCP-Protocol-Version` the client put on a message (for GETs and DELETE).
    protocol_version: Option<String>,
    /// Running requests: id -> (task number, task).
    requests: HashMap<RequestId, (u64, AbortHandle)>,
    /// Notifications and responses on their way.
    background: Vec<AbortHandle>,
    /// The standalone GET stream.
    listen: Option<AbortHandle>,
    /// Open until the standalone GET stream has its answer (or failed): requests wait for
    /// it, because a server may send its requests to us on that stream only and drop them
    /// while it is not there yet (the TypeScript SDK does).
    listen_gate: Option<watch::Receiver<bool>>,
    next_task: u64,
    closed: bool,
}

struct HttpLink(Arc<Inner>);

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, event: TransportEvent) {
        let _ = self.events.send(event);
    }

    fn session(&self) -> Option<String> {
        self.state().session.clone()
    }

    fn protocol_version(&self) -> Option<String> {
        self.state().protocol_version.clone()
    }

    /// Keeps the session id of a response: the first one wins, an `initialize` answer
    /// replaces it.
    fn store_session(&self, resp: &Response, initialize: bool) {
        let Some(sid) = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        let mut state = self.state();
        if initialize || state.session.is_none() {
            if state.session.as_deref() != Some(sid) {
                if let Some(old) = state.listen.take() {
                    old.abort();
                }
            }
            state.session = Some(sid.to_owned());
        }
    }

    /// The server no longer knows `sent`: forget it (unless a newer session replaced it).
    fn expire_session(&self, sent: &str) {
        let mut state = self.state();
        if state.session.as_deref() == Some(sent) {
            state.session = None;
            if let Some(old) = state.listen.take() {
                old.abort();
            }
        }
    }

    /// One POST of one message, in its own task. `gate` holds it until the standalone GET
    /// stream is up; `opened` is the gate to open once that stream answers (for
    /// `notifications/initialized`).
    async fn run_post(
        self: Arc<Self>,
        message: OutboundMessage,
        gate: Option<watch::Receiver<bool>>,
        opened: Option<watch::Sender<bool>>,
    ) {
        if let Some(mut gate) = gate {
            let _ = tokio::time::timeout(LISTEN_GATE_WAIT, gate.wait_for(|up| *up)).await;
        }
        let (id, method) = match &message.kind {
            OutboundKind::Request { id, method, .. } => (Some(id.clone()), Some(method.clone())),
            OutboundKind::Notification { method, .. } => {
                (None, Some(std::borrow::Cow::Owned(method.clone())))
            }
            OutboundKind::Response { .. } => (None, None),
        };
        let (id, method) = (id.as_ref(), method.as_deref());
        let mut result = self
            .post(&message.body, id, method, headers_of(&message.kind))
            .await;
        if let Some(fallback) = &self.fallback {
            let refused = match &result {
                Ok(()) => {
                    fallback.streamable.store(true, Ordering::Release);
                    false
                }
                Err(TransportError::Http { status, .. }) => fallback.applies(*status),
                Err(_) => false,
            };
            if refused {
                match self.open_sse(fallback).await {
                    Ok(link) => {
                        // The refused message goes again, over HTTP+SSE.
                        link.send(message);
                        return;
                    }
                    Err(sse) => {
                        if let Err(streamable) = result {
                            result = Err(TransportError::NoHttpTransport {
                                url: self.base.url.to_string(),
                                streamable: Box::new(streamable),
                                sse: Box::new(sse),
                            });
                        }
                    }
                }
            }
        }
        match result {
            Ok(()) => {
                if method == Some("notifications/initialized") {
                    self.start_listen(opened);
                }
            }
            Err(error) => match id {
                Some(id) => self.emit(TransportEvent::RequestFailed {
                    id: id.clone(),
                    error,
                }),
                None => tracing::warn!(
                    method = method.unwrap_or("(response)"),
                    %error,
                    "an MCP message could not be delivered"
                ),
            },
        }
    }

    /// The HTTP+SSE connection at our URL: the one already open, or a new one (one attempt
    /// at a time; a failed attempt leaves the next message free to try again).
    async fn open_sse(
        &self,
        fallback: &Fallback,
    ) -> Result<Arc<dyn TransportLink>, TransportError> {
        let link = fallback
            .sse
            .get_or_try_init(|| async {
                let transport = SseTransport::fallback(
                    self.base.url.as_str(),
                    fallback.options.clone(),
                    fallback.endpoint_timeout,
                );
                let link = Box::new(transport).start(self.events.clone()).await?;
                tracing::info!(
                    url = %self.base.url,
                    "the POST was refused and a GET opened an HTTP+SSE stream: using the 2024-11-05 HTTP+SSE transport"
                );
                Ok::<_, TransportError>(link)
            })
            .await?
            .clone();
        if self.state().closed {
            // Closed while the stream was being opened.
            link.close().await;
            return Err(TransportError::Closed);
        }
        Ok(link)
    }

    /// The HTTP+SSE connection the fallback found, if it did.
    fn sse(&self) -> Option<&Arc<dyn TransportLink>> {
        self.fallback.as_ref().and_then(|f| f.sse.get())
    }

    async fn post(
        &self,
        body: &[u8],
        id: Option<&RequestId>,
        method: Option<&str>,
        headers: &[(String, String)],
    ) -> Result<(), TransportError> {
        let initialize = method == Some("initialize") && id.is_some();
        let session = if initialize { None } else { self.session() };
        let mut resp = self
            .base
            .exchange(Method::POST, &self.base.url, MAX_AUTH_RETRIES, |mut rb| {
                rb = rb
                    .header(CONTENT_TYPE, "application/json")
                    .header(ACCEPT, "application/json, text/event-stream");
                for (k, v) in headers {
                    rb = rb.header(k.as_str(), v.as_str());
                }
                if let Some(sid) = &session {
                    rb = rb.header(SESSION_HEADER, sid.as_str());
                }
                rb.body(body.to_vec())
            })
            .await?;
        let status = resp.status();
        if status.is_success() {
            self.store_session(&resp, initialize);
            if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
                return Ok(());
            }
            let kind = content_type(&resp);
            if kind.starts_with("text/event-stream") {
                return self.read_stream(resp, id, session).await;
            }
            let body = read_body(&mut resp, self.base.max_message_bytes).await?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            if kind.starts_with("application/json") || kind.is_empty() {
                deliver(&self.events, body, id);
                return Ok(());
            }
            return Err(TransportError::Malformed(format!(
                "unexpected Content-Type {kind:?} (HTTP {})",
                status.as_u16()
            )));
        }
        if status == StatusCode::NOT_FOUND {
            if let Some(sent) = &session {
                self.expire_session(sent);
                return Err(TransportError::SessionExpired);
            }
        }
        let body = read_body(&mut resp, self.base.max_message_bytes)
            .await
            .unwrap_or_default();
        if let Some(id) = id {
            if Peek::answer_to(&body).as_ref() == Some(id) {
                self.emit(TransportEvent::Message(body));
                return Ok(());
            }
        }
        Err(TransportError::Http {
            status: status.as_u16(),
            body: truncate(&body, ERROR_BODY_BYTES),
        })
    }

    /// Reads a request's SSE stream until its answer arrives, resuming a broken stream with
    /// `Last-Event-ID`.
    async fn read_stream(
        &self,
        mut resp: Response,
        id: Option<&RequestId>,
        session: Option<String>,
    ) -> Result<(), TransportError> {
        let mut parser = SseParser::new(self.base.max_message_bytes);
        let mut attempts = 0;
        loop {
            let (answered, received) = pump(&self.events, &mut resp, &mut parser, id).await?;
            if answered {
                return Ok(());
            }
            // A stream for a notification or a response: nothing to wait for.
            let Some(_) = id else { return Ok(()) };
            let Some(last) = parser.last_event_id().map(str::to_owned) else {
                return Err(TransportError::Io(
                    "stream closed before the response".into(),
                ));
            };
            if received {
                attempts = 0;
            }
            resp = self
                .resume(&mut parser, &mut attempts, &last, &session)
                .await?;
        }
    }

    /// Reconnects to a broken stream with `Last-Event-ID`: waits `retry`, then GETs, until
    /// a stream is open or the attempts are spent.
    async fn resume(
        &self,
        parser: &mut SseParser,
        attempts: &mut u32,
        last: &str,
        session: &Option<String>,
    ) -> Result<Response, TransportError> {
        loop {
            *attempts += 1;
            if *attempts > MAX_RESUME_ATTEMPTS {
                return Err(TransportError::Io(format!(
                    "stream closed before the response; {MAX_RESUME_ATTEMPTS} attempts to resume it failed"
                )));
            }
            tokio::time::sleep(parser.retry().unwrap_or(DEFAULT_RETRY)).await;
            let version = self.protocol_version();
            let next = self
                .base
                .exchange(Method::GET, &self.base.url, MAX_AUTH_RETRIES, |mut rb| {
                    rb = rb
                        .header(ACCEPT, "text/event-stream")
                        .header(LAST_EVENT_ID, last);
                    if let Some(sid) = session {
                        rb = rb.header(SESSION_HEADER, sid.as_str());
                    }
                    if let Some(v) = &version {
                        rb = rb.header(VERSION_HEADER, v.as_str());
                    }
                    rb
                })
                .await;
            match next {
                Ok(r) if r.status().is_success() => {
                    let kind = content_type(&r);
                    if !kind.starts_with("text/event-stream") {
                        return Err(TransportError::Malformed(format!(
                            "resuming a stream got Content-Type {kind:?}"
                        )));
                    }
                    parser.reconnected();
                    return Ok(r);
                }
                Ok(r) if r.status().is_server_error() => {
                    tracing::debug!(status = r.status().as_u16(), "resuming a stream failed");
                }
                Ok(r) => {
                    let status = r.status().as_u16();
                    return Err(TransportError::Http {
                        status,
                        body: error_body(r, ERROR_BODY_BYTES).await,
                    });
                }
                Err(e @ TransportError::Auth(_)) => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "resuming a stream failed");
                    if *attempts >= MAX_RESUME_ATTEMPTS {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Opens the standalone GET stream of the current session (replacing an older one);
    /// `opened` is told once the stream has its first answer.
    fn start_listen(self: &Arc<Self>, opened: Option<watch::Sender<bool>>) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        let Some(session) = state.session.clone() else {
            return;
        };
        if let Some(old) = state.listen.take() {
            old.abort();
        }
        let task = self.runtime.spawn(self.clone().listen(session, opened));
        state.listen = Some(task.abort_handle());
    }

    /// The standalone GET stream: server requests and notifications outside any request,
    /// reconnected (with `Last-Event-ID` when the server gave ids) until the server says it
    /// has none (405), forgets the session, or keeps failing.
    async fn listen(self: Arc<Self>, session: String, mut opened: Option<watch::Sender<bool>>) {
        let mut parser = SseParser::new(self.base.max_message_bytes);
        let mut failures = 0u32;
        loop {
            if self.events.is_closed() || self.session().as_deref() != Some(session.as_str()) {
                return;
            }
            let last = parser.last_event_id().map(str::to_owned);
            let version = self.protocol_version();
            let resp = self
                .base
                .exchange(Method::GET, &self.base.url, MAX_AUTH_RETRIES, |mut rb| {
                    rb = rb
                        .header(ACCEPT, "text/event-stream")
                        .header(SESSION_HEADER, session.as_str());
                    if let Some(v) = &version {
                        rb = rb.header(VERSION_HEADER, v.as_str());
                    }
                    if let Some(l) = &last {
                        rb = rb.header(LAST_EVENT_ID, l.as_str());
                    }
                    rb
                })
                .await;
            if let Some(gate) = opened.take() {
                let _ = gate.send(true);
            }
            match resp {
                Ok(mut r) if r.status().is_success() => {
                    parser.reconnected();
                    match pump(&self.events, &mut r, &mut parser, None).await {
                        Ok((_, true)) => failures = 0,
                        Ok((_, false)) => failures += 1,
                        Err(e) => {
                            tracing::warn!(error = %e, "the standalone GET stream sent a bad event");
                            failures += 1;
                        }
                    }
                }
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!("the server offers no standalone GET stream");
                    return;
                }
                Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                    tracing::debug!("the session of the GET stream is gone");
                    return;
                }
                Ok(r) => {
                    tracing::debug!(status = r.status().as_u16(), "the GET stream was refused");
                    failures += 1;
                }
                Err(e @ TransportError::Auth(_)) => {
                    tracing::warn!(error = %e, "the standalone GET stream was refused");
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the standalone GET stream failed");
                    failures += 1;
                }
            }
            if failures > MAX_LISTEN_FAILURES {
                tracing::warn!("giving up on the standalone GET stream");
                return;
            }
            let base = parser.retry().unwrap_or(DEFAULT_RETRY);
            let backoff = base
                .saturating_mul(1 << failures.saturating_sub(1).min(5))
                .min(Duration::from_secs(30));
            tokio::time::sleep(backoff).await;
        }
    }

    /// Queues `message` in a task of its own (or hands it to the HTTP+SSE connection the
    /// fallback found).
    fn spawn(self: &Arc<Self>, message: OutboundMessage) {
        if let Some(sse) = self.sse() {
            sse.send(message);
            return;
        }
        let mut state = self.state();
        if let Some(version) = headers_of(&message.kind)
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
        {
            state.protocol_version = Some(version.1.clone());
        }
        if state.closed {
            drop(state);
            if let OutboundKind::Request { id, .. } = message.kind {
                self.emit(TransportEvent::RequestFailed {
                    id,
                    error: TransportError::Closed,
                });
            }
            return;
        }
        let gate = state.listen_gate.clone().filter(|g| !*g.borrow());
        let opened = match &message.kind {
            OutboundKind::Notification { method, .. } if method == "notifications/initialized" => {
                let (tx, rx) = watch::channel(false);
                state.listen_gate = Some(rx);
                Some(tx)
            }
            _ => None,
        };
        match &message.kind {
            OutboundKind::Request { id, .. } => {
                let id = id.clone();
                state.next_task += 1;
                let seq = state.next_task;
                let me = self.clone();
                let key = id.clone();
                // The lock is held until the task is registered, so its own removal (which
                // takes the lock) cannot run before.
                let task = self.runtime.spawn(async move {
                    me.clone().run_post(message, gate, None).await;
                    let mut state = me.state();
                    if state.requests.get(&key).is_some_and(|(s, _)| *s == seq) {
                        state.requests.remove(&key);
                    }
                });
                if let Some((_, old)) = state.requests.insert(id, (seq, task.abort_handle())) {
                    // A reused id: the older request is not wanted any more.
                    old.abort();
                }
            }
            _ => {
                state.background.retain(|t| !t.is_finished());
                let task = self
                    .runtime
                    .spawn(self.clone().run_post(message, None, opened));
                state.background.push(task.abort_handle());
            }
        }
    }
}

fn headers_of(kind: &OutboundKind) -> &[(String, String)] {
    match kind {
        OutboundKind::Request { headers, .. }
        | OutboundKind::Notification { headers, .. }
        | OutboundKind::Response { headers } => headers,
    }
}

impl TransportLink for HttpLink {
    fn send(&self, message: OutboundMessage) {
        self.0.spawn(message);
    }

    fn cancel(&self, id: &RequestId) {
        if let Some((_, task)) = self.0.state().requests.remove(id) {
            task.abort();
        }
        if let Some(sse) = self.0.sse() {
            sse.cancel(id);
        }
    }

    fn close(&self) -> BoxFuture<()> {
        let inner = self.0.clone();
        Box::pin(async move {
            let (session, version) = {
                let mut state = inner.state();
                if state.closed {
                    return;
                }
                state.closed = true;
                for (_, (_, task)) in state.requests.drain() {
                    task.abort();
                }
                for task in state.background.drain(..) {
                    task.abort();
                }
                if let Some(task) = state.listen.take() {
                    task.abort();
                }
                (state.session.take(), state.protocol_version.clone())
            };
            if let Some(sse) = inner.sse() {
                // Over HTTP+SSE: that connection ends, and reports the end itself.
                sse.close().await;
                return;
            }
            if let Some(sid) = session {
                let delete = inner
                    .base
                    .exchange(Method::DELETE, &inner.base.url, 1, |mut rb| {
                        rb = rb.header(SESSION_HEADER, sid.as_str());
                        if let Some(v) = &version {
                            rb = rb.header(VERSION_HEADER, v.as_str());
                        }
                        rb
                    });
                match tokio::time::timeout(DELETE_TIMEOUT, delete).await {
                    Ok(Ok(r)) if r.status().is_success() => {}
                    Ok(Ok(r)) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {}
                    Ok(Ok(r)) => {
                        tracing::debug!(status = r.status().as_u16(), "DELETE of the session")
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "DELETE of the session failed"),
                    Err(_) => tracing::debug!("DELETE of the session timed out"),
                }
            }
            inner.emit(TransportEvent::Closed(TransportError::Closed));
        })
    }
}
