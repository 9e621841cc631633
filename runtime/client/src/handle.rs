//! The [`Client`] handle and its [`ClientBuilder`]: the handshake that picks the generation,
//! the per-request `_meta` and headers, timeouts that progress extends, cancellation when
//! the caller gives up, and the multi-round-trip loop of the modern generation.

use super::actor::{ClientActor, ClientMsg};
use super::cache::{cacheable, ResponseCache};
use super::error::ClientError;
use super::handlers::{ElicitHandler, Handlers, Notice, RootsHandler, SampleHandler};
use super::transport::{
    EventSink, LateLink, OutboundKind, OutboundMessage, Transport, TransportError, TransportLink,
};
use arc_swap::ArcSwap;
use ractor::{Actor, ActorRef};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use toolyard_proto::headers::HeaderParam;
use toolyard_proto::headers::{header_value, tool_header_params};
use toolyard_proto::{
    meta, CallToolResult, ClientCapabilities, CompleteRequestParams, CompleteResult,
    DiscoverResult, GetPromptResult, Implementation, InitializeResult, InputRequest,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, LoggingLevel, ProgressNotificationParams, Prompt, ProtocolVersion,
    ReadResourceResult, RequestId, Resource, ResourceTemplate, ServerCapabilities,
    SubscriptionFilter, Tool,
};

/// Which protocol generation to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolChoice {
    /// Probe with `server/discover`; fall back to `initialize` when the server is legacy.
    #[default]
    Auto,
    /// Speak 2026-07-28 only.
    Modern,
    /// `initialize` with this revision, without probing.
    Legacy(ProtocolVersion),
}

/// What the client learned about the server in the handshake.
#[derive(Debug, Clone)]
pub struct ServerSession {
    /// The revision in use.
    pub protocol_version: ProtocolVersion,
    /// Who the server is (`serverInfo`; on a modern server, from discover's `_meta`).
    pub server_info: Option<Implementation>,
    /// What the server offers.
    pub capabilities: ServerCapabilities,
    /// How to use the server.
    pub instructions: Option<String>,
}

/// Options of one request.
#[derive(Clone, Default)]
pub struct RequestOptions {
    /// Overrides the client's request timeout.
    pub timeout: Option<Duration>,
    /// Called with each progress notification of this request.
    pub on_progress: Option<super::handlers::ProgressCallback>,
    /// Extra `_meta` members (e.g. `traceparent`).
    pub meta: Option<Map<String, Value>>,
    /// Answers the server's questions for this request instead of the client's handlers.
    pub questions: Option<super::handlers::Questions>,
}

impl std::fmt::Debug for RequestOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestOptions")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RequestOptions {
    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Has `questions` answer what the server asks while this request is in flight.
    pub fn questions(mut self, questions: super::handlers::Questions) -> Self {
        self.questions = Some(questions);
        self
    }

    /// Sets the progress callback.
    pub fn on_progress(
        mut self,
        f: impl Fn(&ProgressNotificationParams) + Send + Sync + 'static,
    ) -> Self {
        self.on_progress = Some(Arc::new(f));
        self
    }
}

/// Builds a [`Client`]: identity, generation, timeouts and the handlers for what servers ask.
pub struct ClientBuilder {
    info: Implementation,
    protocol: ProtocolChoice,
    request_timeout: Duration,
    max_request_timeout: Duration,
    handshake_timeout: Duration,
    probe_timeout: Duration,
    max_input_rounds: usize,
    cache: bool,
    capabilities: ClientCapabilities,
    handlers: Handlers,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("info", &self.info)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// A client that introduces itself as `info`.
    pub fn new(info: Implementation) -> Self {
        Self {
            info,
            protocol: ProtocolChoice::Auto,
            request_timeout: Duration::from_secs(30),
            max_request_timeout: Duration::from_secs(600),
            handshake_timeout: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(5),
            max_input_rounds: 8,
            cache: true,
            capabilities: ClientCapabilities::default(),
            handlers: Handlers::default(),
        }
    }

    /// Chooses the generation (default: probe, then fall back).
    pub fn protocol(mut self, protocol: ProtocolChoice) -> Self {
        self.protocol = protocol;
        self
    }

    /// How long a request may wait for its answer (default 30 s); each progress
    /// notification restarts the wait.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest a request may take however much progress it reports (default 10 min).
    pub fn max_request_timeout(mut self, timeout: Duration) -> Self {
        self.max_request_timeout = timeout;
        self
    }

    /// How long the handshake may take (default 30 s): a server that is not ready by then
    /// fails `connect`.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long to wait for an answer to the `server/discover` probe before deciding the
    /// server is legacy (default 5 s).
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// How many input rounds one modern request may take (default 8).
    pub fn max_input_rounds(mut self, rounds: usize) -> Self {
        self.max_input_rounds = rounds;
        self
    }

    /// Turns the response cache off (it honours `ttlMs` when on, the default).
    pub fn cache(mut self, on: bool) -> Self {
        self.cache = on;
        self
    }

    /// Extra capabilities to declare (e.g. `extensions`); the handlers add theirs.
    pub fn capabilities(mut self, capabilities: ClientCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Answers elicitation (declares the `elicitation` capability).
    pub fn on_elicit(mut self, handler: ElicitHandler) -> Self {
        self.handlers.elicit = Some(handler);
        self
    }

    /// Answers sampling (declares the `sampling` capability).
    pub fn on_sample(mut self, handler: SampleHandler) -> Self {
        self.handlers.sample = Some(handler);
        self
    }

    /// Answers `roots/list` (declares the `roots` capability).
    pub fn on_roots(mut self, handler: RootsHandler) -> Self {
        self.handlers.roots = Some(handler);
        self
    }

    /// Called with every progress notification.
    pub fn on_progress(
        mut self,
        f: impl Fn(&ProgressNotificationParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.on_progress = Some(Arc::new(f));
        self
    }

    /// Called with every log message the server sends.
    pub fn on_log(
        mut self,
        f: impl Fn(&toolyard_proto::LoggingMessageNotificationParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.on_log = Some(Arc::new(f));
        self
    }

    /// Called with every notification the server sends.
    pub fn on_notification(mut self, f: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.handlers.on_notification = Some(Arc::new(f));
        self
    }

    /// Starts the transport, the client actor and the handshake.
    pub async fn connect(self, transport: impl Transport) -> Result<Client, ClientError> {
        self.connect_boxed(Box::new(transport)).await
    }

    /// [`connect`](Self::connect) for a boxed transport.
    pub async fn connect_boxed(self, transport: Box<dyn Transport>) -> Result<Client, ClientError> {
        let (notices, _) = broadcast::channel(256);
        let response_headers = Arc::new(ArcSwap::from_pointee(Vec::new()));
        let cache = Arc::new(Mutex::new(ResponseCache::default()));
        let mut handlers = self.handlers.clone();
        // The cache forgets what a change notification makes stale, before user callbacks run.
        let user_hook = handlers.on_notification.take();
        let cache_hook = cache.clone();
        handlers.on_notification = Some(Arc::new(move |n: &Notice| {
            lock(&cache_hook).invalidate(&n.method, &n.params);
            if let Some(f) = &user_hook {
                f(n);
            }
        }));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let actor = ClientActor {
            closed: closed.clone(),
            handlers,
            notices: notices.clone(),
            response_headers: response_headers.clone(),
            name: self.info.name.clone(),
        };
        // The actor first: the transport reports straight into its mailbox.
        let link = Arc::new(LateLink::default());
        let (actor_ref, _) = Actor::spawn(None, actor, link.clone() as Arc<dyn TransportLink>)
            .await
            .map_err(|e| {
                ClientError::Initialization(format!("could not start the client actor: {e}"))
            })?;
        let started = tokio::time::timeout(
            self.handshake_timeout,
            transport.start(EventSink::actor(actor_ref.clone())),
        )
        .await
        .map_err(|_| ClientError::Initialization("the transport did not start in time".into()))
        .and_then(|started| started.map_err(ClientError::from));
        match started {
            Ok(started) => link.set(started),
            Err(e) => {
                actor_ref.stop(None);
                return Err(e);
            }
        }
        let mut capabilities = self.capabilities.clone();
        let declared = self.handlers.capabilities();
        capabilities.elicitation = capabilities.elicitation.or(declared.elicitation);
        capabilities.sampling = capabilities.sampling.or(declared.sampling);
        capabilities.roots = capabilities.roots.or(declared.roots);
        let client = Client {
            inner: Arc::new(Inner {
                actor: actor_ref,
                closed,
                next_id: AtomicI64::new(0),
                modern_identity: ModernIdentity::of(&capabilities, &self.info),
                info: self.info,
                capabilities,
                handlers: self.handlers,
                session: ArcSwap::from_pointee(None),
                protocol: self.protocol,
                request_timeout: self.request_timeout,
                max_request_timeout: self.max_request_timeout,
                handshake_timeout: self.handshake_timeout,
                probe_timeout: self.probe_timeout,
                max_input_rounds: self.max_input_rounds,
                use_cache: self.cache,
                cache,
                tool_headers: Mutex::new(HashMap::new()),
                response_headers,
                log_level: Mutex::new(None),
                reinit: tokio::sync::Mutex::new(()),
                notices,
            }),
        };
        match client.handshake().await {
            Ok(()) => Ok(client),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }
}

struct Inner {
    actor: ActorRef<ClientMsg>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    next_id: AtomicI64,
    /// `capabilities` and `info` as JSON, serialized once: every modern request carries both.
    modern_identity: ModernIdentity,
    info: Implementation,
    capabilities: ClientCapabilities,
    handlers: Handlers,
    session: ArcSwap<Option<ServerSession>>,
    protocol: ProtocolChoice,
    request_timeout: Duration,
    max_request_timeout: Duration,
    handshake_timeout: Duration,
    probe_timeout: Duration,
    max_input_rounds: usize,
    use_cache: bool,
    cache: Arc<Mutex<ResponseCache>>,
    /// `x-mcp-header` arguments per tool, learned from listings.
    tool_headers: Mutex<HashMap<String, Arc<[HeaderParam]>>>,
    response_headers: Arc<ArcSwap<Vec<(String, String)>>>,
    /// Modern: the log level every request asks for.
    log_level: Mutex<Option<LoggingLevel>>,
    /// One re-initialization at a time after a legacy session expired.
    reinit: tokio::sync::Mutex<()>,
    notices: broadcast::Sender<Notice>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: close the connection (stops the server process).
        let (done, _) = oneshot::channel();
        let _ = self.actor.cast(ClientMsg::Close(done));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection to one MCP server. Cheap to clone; every clone shares the connection, which
/// closes when the last clone is dropped or [`close`](Client::close) is called.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client", &self.inner.info.name)
            .field("session", &self.inner.session.load())
            .finish()
    }
}

/// Tells the actor a request was given up on, unless disarmed (the answer arrived).
struct CancelOnDrop {
    actor: ActorRef<ClientMsg>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.actor.cast(ClientMsg::Cancel {
                id,
                reason: self.reason.to_owned(),
            });
        }
    }
}

#[derive(Deserialize, Default)]
struct ResultHead {
    #[serde(rename = "resultType", default)]
    result_type: Option<String>,
    #[serde(rename = "ttlMs", default)]
    ttl_ms: Option<u64>,
}

impl Client {
    /// What the handshake learned; `None` only before it completed.
    pub fn session(&self) -> Option<ServerSession> {
        self.inner.session.load().as_ref().clone()
    }

    /// The revision in use.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.inner
            .session
            .load()
            .as_ref()
            .as_ref()
            .map(|s| s.protocol_version)
    }

    /// True when speaking the stateless 2026-07-28 generation.
    pub fn is_modern(&self) -> bool {
        self.protocol_version().is_some_and(|v| !v.is_legacy())
    }

    /// True once the connection is gone (the server exited, the transport failed, or
    /// [`close`](Self::close) was called); every request then fails at once.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The capabilities this client declares.
    pub fn capabilities(&self) -> &ClientCapabilities {
        &self.inner.capabilities
    }

    /// Every notification the server sends from now on (progress, logs, changes).
    pub fn notifications(&self) -> broadcast::Receiver<Notice> {
        self.inner.notices.subscribe()
    }

    async fn handshake(&self) -> Result<(), ClientError> {
        match self.inner.protocol {
            ProtocolChoice::Legacy(v) => self.initialize(v).await,
            ProtocolChoice::Modern => match self.discover().await {
                Ok(_) => Ok(()),
                Err(e) => Err(ClientError::Initialization(format!(
                    "the server does not speak 2026-07-28: {e}"
                ))),
            },
            ProtocolChoice::Auto => match self.probe().await {
                Probe::Modern => Ok(()),
                Probe::Legacy(v) => match self.initialize(v).await {
                    // A modern server whose answer to the probe came too late (a slow
                    // start) refuses `initialize` with -32022: it is modern after all.
                    Err(ClientError::Rpc(e))
                        if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
                    {
                        self.discover().await.map(drop).map_err(|d| {
                            ClientError::Initialization(format!(
                                "the server refused initialize ({}) and server/discover ({d})",
                                e.message
                            ))
                        })
                    }
                    other => other,
                },
                Probe::Failed(e) => Err(e),
            },
        }
    }

    /// `server/discover` with the probe timeout; tells the generation apart as the
    /// versioning page says: a modern answer or a modern error means modern, any other
    /// error (or silence) means legacy.
    async fn probe(&self) -> Probe {
        let opts = RequestOptions::default().timeout(self.inner.probe_timeout);
        match self.discover_with(opts).await {
            Ok(_) => Probe::Modern,
            Err(ClientError::Rpc(e))
                if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
            {
                let supported: Vec<String> = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("supported"))
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default();
                match supported
                    .iter()
                    .filter_map(|v| ProtocolVersion::parse(v))
                    .filter(|v| v.is_legacy())
                    .max()
                {
                    Some(v) => Probe::Legacy(v),
                    None => Probe::Failed(ClientError::Initialization(format!(
                        "no protocol version in common (the server supports {supported:?})"
                    ))),
                }
            }
            Err(ClientError::Transport(
                e @ (TransportError::Exited(_)
                | TransportError::Closed
                | TransportError::Malformed(_)),
            )) => Probe::Failed(ClientError::Transport(e)),
            Err(ClientError::Auth(e)) => Probe::Failed(ClientError::Auth(e)),
            Err(ClientError::Transport(TransportError::Io(e))) => {
                Probe::Failed(ClientError::Transport(TransportError::Io(e)))
            }
            Err(ClientError::Closed) => Probe::Failed(ClientError::Closed),
            Err(_) => Probe::Legacy(ProtocolVersion::LATEST_LEGACY),
        }
    }

    /// `server/discover` (modern): what the server supports. Switches this client to the
    /// modern generation.
    pub async fn discover(&self) -> Result<DiscoverResult, ClientError> {
        self.discover_with(RequestOptions::default().timeout(self.inner.handshake_timeout))
            .await
    }

    async fn discover_with(&self, opts: RequestOptions) -> Result<DiscoverResult, ClientError> {
        let raw = self
            .round_trip("server/discover", &Map::new(), &opts, Era::Modern)
            .await?;
        let result: DiscoverResult = parse_result("server/discover", &raw)?;
        if !result
            .supported_versions
            .iter()
            .any(|v| v == ProtocolVersion::V2026_07_28.as_str())
        {
            return Err(ClientError::Initialization(format!(
                "the server supports {:?}, not 2026-07-28",
                result.supported_versions
            )));
        }
        let server_info = result
            .meta
            .as_ref()
            .and_then(|m| m.get(meta::SERVER_INFO))
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        self.inner.session.store(Arc::new(Some(ServerSession {
            protocol_version: ProtocolVersion::V2026_07_28,
            server_info,
            capabilities: result.capabilities.clone(),
            instructions: result.instructions.clone(),
        })));
        self.inner.response_headers.store(Arc::new(vec![(
            "MCP-Protocol-Version".into(),
            ProtocolVersion::V2026_07_28.as_str().into(),
        )]));
        Ok(result)
    }

    async fn initialize(&self, version: ProtocolVersion) -> Result<(), ClientError> {
        let mut params = Map::new();
        params.insert("protocolVersion".into(), version.as_str().into());
        params.insert("capabilities".into(), to_value(&self.inner.capabilities));
        params.insert("clientInfo".into(), to_value(&self.inner.info));
        let opts = RequestOptions::default().timeout(self.inner.handshake_timeout);
        let raw = self
            .round_trip("initialize", &params, &opts, Era::Handshake)
            .await
            .map_err(|e| match e {
                e @ (ClientError::Transport(_) | ClientError::Auth(_) | ClientError::Closed) => e,
                ClientError::Rpc(e)
                    if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    ClientError::Rpc(e)
                }
                other => ClientError::Initialization(other.to_string()),
            })?;
        let result: InitializeResult = parse_result("initialize", &raw)?;
        let negotiated = ProtocolVersion::parse(&result.protocol_version)
            .filter(|v| v.is_legacy())
            .ok_or_else(|| {
                ClientError::Initialization(format!(
                    "the server chose protocol version {:?}, which this client does not speak",
                    result.protocol_version
                ))
            })?;
        self.inner.session.store(Arc::new(Some(ServerSession {
            protocol_version: negotiated,
            server_info: Some(result.server_info),
            capabilities: result.capabilities,
            instructions: result.instructions,
        })));
        self.inner.response_headers.store(Arc::new(vec![(
            "MCP-Protocol-Version".into(),
            negotiated.as_str().into(),
        )]));
        self.notify("notifications/initialized", Map::new()).await
    }

    /// Sends a notification.
    pub async fn notify(
        &self,
        method: &str,
        params: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let body = toolyard_proto::jsonrpc::notification_bytes(method, &params)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut headers = self.inner.response_headers.load().as_ref().clone();
        if self.is_modern() {
            headers.push(("Mcp-Method".into(), method.into()));
        }
        self.inner
            .actor
            .cast(ClientMsg::Notify(OutboundMessage {
                body,
                kind: OutboundKind::Notification {
                    method: method.into(),
                    headers,
                },
            }))
            .map_err(|_| ClientError::Closed)
    }

    /// Tells the server the roots changed (`notifications/roots/list_changed`).
    pub async fn notify_roots_changed(&self) -> Result<(), ClientError> {
        self.notify("notifications/roots/list_changed", Map::new())
            .await
    }

    /// Sends any request (custom methods included) and returns its raw result; in the
    /// modern generation input requests are answered and the request retried.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let params = match params {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => {
                return Err(ClientError::Protocol(format!(
                    "params must be an object, not {other}"
                )))
            }
        };
        let raw = self
            .request_raw(method, params, &RequestOptions::default())
            .await?;
        parse_result(method, &raw)
    }

    /// One logical request: the cache, the modern input rounds, legacy re-initialization.
    pub(crate) async fn request_raw(
        &self,
        method: &str,
        mut params: Map<String, Value>,
        opts: &RequestOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let cache_key = (self.inner.use_cache && cacheable(method))
            .then(|| Value::Object(params.clone()).to_string());
        if let Some(key) = &cache_key {
            if let Some(hit) = lock(&self.inner.cache).get(method, key) {
                return Ok(hit);
            }
        }
        let mut rounds = 0;
        let mut header_retry = true;
        loop {
            let raw = match self
                .round_trip(method, &params, opts, Era::Negotiated)
                .await
            {
                Err(ClientError::Transport(TransportError::SessionExpired))
                    if !self.is_modern() =>
                {
                    self.reinitialize().await?;
                    self.round_trip(method, &params, opts, Era::Negotiated)
                        .await?
                }
                Err(ClientError::Rpc(e))
                    if header_retry
                        && method == "tools/call"
                        && e.code == toolyard_proto::error::code::HEADER_MISMATCH =>
                {
                    // We may not know the tool's `x-mcp-header` arguments yet: learn them
                    // and try once more.
                    header_retry = false;
                    self.relearn_tools(opts).await?;
                    continue;
                }
                other => other?,
            };
            // The head matters for a cacheable result (`ttlMs`) or an input round; any other
            // result (a tool call's, above all) is read once, by its typed parse.
            let head: ResultHead = if cache_key.is_some() || raw.get().contains("input_required") {
                serde_json::from_str(raw.get()).map_err(|e| {
                    ClientError::Protocol(format!("`{method}` returned an unreadable result: {e}"))
                })?
            } else {
                ResultHead::default()
            };
            if head.result_type.as_deref() == Some("input_required") {
                rounds += 1;
                if rounds > self.inner.max_input_rounds {
                    return Err(ClientError::TooManyRounds(self.inner.max_input_rounds));
                }
                let ask: InputRequiredResult = parse_result(method, &raw)?;
                let responses = self
                    .answer_inputs(ask.input_requests.unwrap_or_default(), opts)
                    .await?;
                params.insert("inputResponses".into(), Value::Object(responses));
                match ask.request_state {
                    Some(state) => params.insert("requestState".into(), Value::String(state)),
                    None => params.remove("requestState"),
                };
                continue;
            }
            if let (Some(key), Some(ttl)) = (cache_key, head.ttl_ms) {
                lock(&self.inner.cache).put(method, key, Duration::from_millis(ttl), raw.clone());
            }
            return Ok(raw);
        }
    }

    async fn answer_inputs(
        &self,
        requests: toolyard_proto::InputRequests,
        opts: &RequestOptions,
    ) -> Result<Map<String, Value>, ClientError> {
        let mut answers = Map::new();
        for (key, request) in requests {
            let method = request.method();
            let params = match request {
                InputRequest::Elicit(p) => to_value(&p),
                InputRequest::CreateMessage(p) => to_value(&p),
                InputRequest::ListRoots(p) => p.map(|p| to_value(&p)).unwrap_or(Value::Null),
            };
            let answer = match &opts.questions {
                Some(q) => (q.handler)(method, params),
                None => self.inner.handlers.answer(method, params),
            };
            let answer = answer.await.map_err(|e| {
                ClientError::Protocol(format!(
                    "the server asked for `{method}`, which this client cannot answer: {}",
                    e.message
                ))
            })?;
            answers.insert(key, answer);
        }
        Ok(answers)
    }

    async fn reinitialize(&self) -> Result<(), ClientError> {
        let _one_at_a_time = self.inner.reinit.lock().await;
        let version = self
            .protocol_version()
            .filter(|v| v.is_legacy())
            .unwrap_or(ProtocolVersion::LATEST_LEGACY);
        tracing::info!(client = %self.inner.info.name, "the server forgot our session; initializing again");
        lock(&self.inner.cache).clear();
        self.initialize(version).await
    }

    /// [`round_trip_once`](Self::round_trip_once), sent again once when a modern server
    /// refuses the version with -32022 but lists 2026-07-28 as supported (the versioning
    /// page: retry with a mutually supported version).
    async fn round_trip(
        &self,
        method: &str,
        params: &Map<String, Value>,
        opts: &RequestOptions,
        era: Era,
    ) -> Result<Box<RawValue>, ClientError> {
        match self.round_trip_once(method, params, opts, era).await {
            Err(ClientError::Rpc(e))
                if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION
                    && era != Era::Handshake
                    && e.data
                        .as_ref()
                        .and_then(|d| d.get("supported"))
                        .and_then(Value::as_array)
                        .is_some_and(|s| {
                            s.iter()
                                .any(|v| v.as_str() == Some(ProtocolVersion::V2026_07_28.as_str()))
                        }) =>
            {
                self.round_trip_once(method, params, opts, era).await
            }
            other => other,
        }
    }

    /// Sends one JSON-RPC request and waits for its answer, with the timeout that progress
    /// extends up to the hard maximum. Dropping the future cancels the request.
    async fn round_trip_once(
        &self,
        method: &str,
        params: &Map<String, Value>,
        opts: &RequestOptions,
        era: Era,
    ) -> Result<Box<RawValue>, ClientError> {
        let inner = &self.inner;
        let id = RequestId::Number(inner.next_id.fetch_add(1, Ordering::Relaxed));
        let modern = match era {
            Era::Modern => true,
            Era::Handshake => false,
            Era::Negotiated => self.is_modern(),
        };
        let log_level = if modern {
            *lock(&inner.log_level)
        } else {
            None
        };
        let meta = OurMeta {
            caller: match params.get("_meta") {
                Some(Value::Object(m)) => Some(m),
                _ => None,
            },
            extra: opts.meta.as_ref(),
            progress_token: &id,
            modern: modern.then_some(ModernMeta {
                identity: &inner.modern_identity,
                log_level,
            }),
        };
        let mut headers = Vec::new();
        if modern {
            headers.push((
                "MCP-Protocol-Version".to_owned(),
                ProtocolVersion::V2026_07_28.as_str().to_owned(),
            ));
            headers.push(("Mcp-Method".to_owned(), method.to_owned()));
            let name = match method {
                "tools/call" | "prompts/get" => params.get("name"),
                "resources/read" => params.get("uri"),
                _ => None,
            };
            if let Some(Value::String(name)) = name {
                headers.push(("Mcp-Name".to_owned(), header_value(name)));
            }
            if method == "tools/call" {
                self.param_headers(params, &mut headers);
            }
        } else if era == Era::Negotiated {
            headers.extend(inner.response_headers.load().iter().cloned());
        }
        let body = toolyard_proto::jsonrpc::request_bytes(
            &id,
            method,
            &WithMeta {
                params,
                meta: &meta,
            },
        )
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let (reply_tx, mut reply_rx) = oneshot::channel();
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
        inner
            .actor
            .cast(ClientMsg::Request {
                id: id.clone(),
                method: method.to_owned(),
                message: OutboundMessage {
                    body,
                    kind: OutboundKind::Request {
                        id: id.clone(),
                        method: method.to_owned(),
                        headers,
                    },
                },
                reply: reply_tx,
                progress: Some(progress_tx),
                questions: opts.questions.clone(),
            })
            .map_err(|_| ClientError::Closed)?;
        let mut guard = CancelOnDrop {
            actor: inner.actor.clone(),
            id: Some(id),
            reason: "the caller stopped waiting",
        };
        let timeout = opts.timeout.unwrap_or(inner.request_timeout);
        let started = Instant::now();
        let hard = started + inner.max_request_timeout.max(timeout);
        let mut deadline = (started + timeout).min(hard);
        loop {
            tokio::select! {
                answer = &mut reply_rx => {
                    guard.id = None;
                    // The actor queues progress before it passes on the answer, but `select!`
                    // may see both ready and pick the answer: deliver what is queued first.
                    if let Some(f) = &opts.on_progress {
                        while let Ok(progress) = progress_rx.try_recv() {
                            f(&progress);
                        }
                    }
                    return answer.map_err(|_| ClientError::Closed)?;
                }
                Some(progress) = progress_rx.recv() => {
                    if let Some(f) = &opts.on_progress {
                        f(&progress);
                    }
                    deadline = (Instant::now() + timeout).min(hard);
                }
                () = tokio::time::sleep_until(deadline) => {
                    guard.reason = "timed out";
                    return Err(ClientError::Timeout { method: method.to_owned(), after: started.elapsed() });
                }
            }
        }
    }

    fn param_headers(&self, params: &Map<String, Value>, headers: &mut Vec<(String, String)>) {
        let Some(Value::String(name)) = params.get("name") else {
            return;
        };
        let Some(list) = lock(&self.inner.tool_headers).get(name).cloned() else {
            return;
        };
        let args = params.get("arguments");
        for p in list.iter() {
            let mut value = args;
            for key in &p.path {
                value = value.and_then(|v| v.get(key));
            }
            let text = match value {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            headers.push((format!("Mcp-Param-{}", p.header), header_value(&text)));
        }
    }

    /// Lists every tool straight through `round_trip` (not through the cache or the input
    /// rounds, which may be what asked for this) to learn their `x-mcp-header` arguments.
    async fn relearn_tools(&self, opts: &RequestOptions) -> Result<(), ClientError> {
        let mut cursor = None;
        for _ in 0..1000 {
            let raw = self
                .round_trip("tools/list", &cursor_params(cursor), opts, Era::Negotiated)
                .await?;
            let mut page: ListToolsResult = parse_result("tools/list", &raw)?;
            self.learn_tools(&mut page.tools);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        Ok(())
    }

    /// Remembers each tool's `x-mcp-header` arguments, and drops the tools whose
    /// annotations are invalid (they cannot be called faithfully).
    fn learn_tools(&self, tools: &mut Vec<Tool>) {
        let mut map = lock(&self.inner.tool_headers);
        tools.retain(|tool| match tool_header_params(&tool.input_schema) {
            Ok(params) if params.is_empty() => {
                map.remove(&tool.name);
                true
            }
            Ok(params) => {
                map.insert(tool.name.clone(), params.into());
                true
            }
            Err(why) => {
                tracing::warn!(tool = %tool.name, %why, "excluding a tool with an invalid x-mcp-header annotation");
                map.remove(&tool.name);
                false
            }
        });
    }

    async fn typed<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Map<String, Value>,
        opts: &RequestOptions,
    ) -> Result<T, ClientError> {
        let raw = self.request_raw(method, params, opts).await?;
        parse_result(method, &raw)
    }

    /// `tools/list`, one page.
    pub async fn list_tools(&self, cursor: Option<String>) -> Result<ListToolsResult, ClientError> {
        let mut result: ListToolsResult = self
            .typed(
                "tools/list",
                cursor_params(cursor),
                &RequestOptions::default(),
            )
            .await?;
        self.learn_tools(&mut result.tools);
        Ok(result)
    }

    /// Every tool, following cursors.
    pub async fn list_all_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.all_pages(
            "tools/list",
            |cursor| self.list_tools(cursor),
            |p: ListToolsResult| (p.tools, p.next_cursor),
        )
        .await
    }

    /// `tools/call`. A tool's failure is a result with `isError: true`, not an `Err`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ClientError> {
        self.call_tool_with(name, arguments, &RequestOptions::default())
            .await
    }

    /// `tools/call` with options (timeout, progress callback, `_meta`).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        opts: &RequestOptions,
    ) -> Result<CallToolResult, ClientError> {
        let mut params = Map::new();
        params.insert("name".into(), name.into());
        match arguments {
            Value::Null => {}
            args @ Value::Object(_) => {
                params.insert("arguments".into(), args);
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "tool arguments must be an object, not {other}"
                )))
            }
        }
        self.typed("tools/call", params, opts).await
    }

    /// `tools/call`, with a tool's `isError` result turned into [`ClientError::ToolCall`].
    pub async fn call_tool_ok(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ClientError> {
        let result = self.call_tool(name, arguments).await?;
        if result.failed() {
            let message = result
                .content
                .iter()
                .filter_map(|c| match c {
                    toolyard_proto::ContentBlock::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(ClientError::ToolCall {
                name: name.to_owned(),
                message,
            });
        }
        Ok(result)
    }

    /// `resources/list`, one page.
    pub async fn list_resources(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourcesResult, ClientError> {
        self.typed(
            "resources/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource, following cursors.
    pub async fn list_all_resources(&self) -> Result<Vec<Resource>, ClientError> {
        self.all_pages(
            "resources/list",
            |cursor| self.list_resources(cursor),
            |p: ListResourcesResult| (p.resources, p.next_cursor),
        )
        .await
    }

    /// `resources/templates/list`, one page.
    pub async fn list_resource_templates(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourceTemplatesResult, ClientError> {
        self.typed(
            "resources/templates/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource template, following cursors.
    pub async fn list_all_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ClientError> {
        self.all_pages(
            "resources/templates/list",
            |cursor| self.list_resource_templates(cursor),
            |p: ListResourceTemplatesResult| (p.resource_templates, p.next_cursor),
        )
        .await
    }

    /// `resources/read`.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ClientError> {
        self.read_resource_with(uri, &RequestOptions::default())
            .await
    }

    /// `resources/read` with options (timeout, progress, who answers the server's
    /// questions).
    pub async fn read_resource_with(
        &self,
        uri: &str,
        opts: &RequestOptions,
    ) -> Result<ReadResourceResult, ClientError> {
        let mut params = Map::new();
        params.insert("uri".into(), uri.into());
        self.typed("resources/read", params, opts).await
    }

    /// `prompts/list`, one page.
    pub async fn list_prompts(
        &self,
        cursor: Option<String>,
    ) -> Result<ListPromptsResult, ClientError> {
        self.typed(
            "prompts/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every prompt, following cursors.
    pub async fn list_all_prompts(&self) -> Result<Vec<Prompt>, ClientError> {
        self.all_pages(
            "prompts/list",
            |cursor| self.list_prompts(cursor),
            |p: ListPromptsResult| (p.prompts, p.next_cursor),
        )
        .await
    }

    /// Follows a listing's cursors to the end; a cursor the server repeats is an error
    /// (it would loop forever).
    async fn all_pages<P, T, Fut>(
        &self,
        method: &str,
        page: impl Fn(Option<String>) -> Fut,
        split: impl Fn(P) -> (Vec<T>, Option<String>),
    ) -> Result<Vec<T>, ClientError>
    where
        Fut: std::future::Future<Output = Result<P, ClientError>>,
    {
        let mut all = Vec::new();
        let mut cursor = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let (items, next) = split(page(cursor).await?);
            all.extend(items);
            match next {
                Some(c) if seen.insert(c.clone()) => cursor = Some(c),
                Some(c) => {
                    return Err(ClientError::Protocol(format!(
                        "{method} repeated the cursor {c:?}"
                    )))
                }
                None => return Ok(all),
            }
        }
    }

    /// `prompts/get`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<GetPromptResult, ClientError> {
        self.get_prompt_with(name, arguments, &RequestOptions::default())
            .await
    }

    /// `prompts/get` with options.
    pub async fn get_prompt_with(
        &self,
        name: &str,
        arguments: Value,
        opts: &RequestOptions,
    ) -> Result<GetPromptResult, ClientError> {
        let mut params = Map::new();
        params.insert("name".into(), name.into());
        if !arguments.is_null() {
            params.insert("arguments".into(), arguments);
        }
        self.typed("prompts/get", params, opts).await
    }

    /// `completion/complete`.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, ClientError> {
        let Value::Object(params) = to_value(&params) else {
            return Err(ClientError::Protocol(
                "unserializable completion params".into(),
            ));
        };
        self.typed("completion/complete", params, &RequestOptions::default())
            .await
    }

    /// `ping` (legacy; a modern server has none, so this sends `server/discover`).
    pub async fn ping(&self) -> Result<(), ClientError> {
        if self.is_modern() {
            self.round_trip(
                "server/discover",
                &Map::new(),
                &RequestOptions::default(),
                Era::Modern,
            )
            .await
            .map(drop)
        } else {
            self.round_trip(
                "ping",
                &Map::new(),
                &RequestOptions::default(),
                Era::Negotiated,
            )
            .await
            .map(drop)
        }
    }

    /// Asks for log messages at `level` and above: `logging/setLevel` (legacy), or the
    /// `logLevel` `_meta` key on every later request (modern).
    pub async fn set_log_level(&self, level: LoggingLevel) -> Result<(), ClientError> {
        if self.is_modern() {
            *lock(&self.inner.log_level) = Some(level);
            return Ok(());
        }
        let mut params = Map::new();
        params.insert("level".into(), to_value(&level));
        self.round_trip(
            "logging/setLevel",
            &params,
            &RequestOptions::default(),
            Era::Negotiated,
        )
        .await
        .map(drop)
    }

    /// Subscribes to change notifications: `subscriptions/listen` (modern, a long-lived
    /// request; dropping the [`Subscription`] ends it) or `resources/subscribe` per resource
    /// (legacy, whose list-changed notifications need no request). Notifications arrive on
    /// the returned subscription and on [`notifications`](Self::notifications).
    pub async fn subscribe(&self, filter: SubscriptionFilter) -> Result<Subscription, ClientError> {
        let receiver = self.notifications();
        if self.is_modern() {
            let mut params = Map::new();
            params.insert("notifications".into(), to_value(&filter));
            let client = self.clone();
            let mut acks = self.notifications();
            let listen = tokio::spawn(async move {
                let opts = RequestOptions::default().timeout(Duration::from_secs(365 * 24 * 3600));
                client
                    .round_trip("subscriptions/listen", &params, &opts, Era::Negotiated)
                    .await
            });
            // The server acknowledges before anything else on the stream.
            let acked = tokio::time::timeout(self.inner.request_timeout, async {
                loop {
                    match acks.recv().await {
                        Ok(n) if n.method == "notifications/subscriptions/acknowledged" => {
                            return Ok(())
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => {
                            return Err(ClientError::Closed)
                        }
                    }
                }
            });
            tokio::select! {
                r = acked => match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => { listen.abort(); return Err(e) }
                    Err(_) => { listen.abort(); return Err(ClientError::Timeout { method: "subscriptions/listen".into(), after: self.inner.request_timeout }) }
                },
            }
            return Ok(Subscription {
                receiver,
                listen: Some(listen.abort_handle()),
                legacy: None,
            });
        }
        let uris = filter.resource_subscriptions.unwrap_or_default();
        for uri in &uris {
            let mut params = Map::new();
            params.insert("uri".into(), uri.as_str().into());
            self.round_trip(
                "resources/subscribe",
                &params,
                &RequestOptions::default(),
                Era::Negotiated,
            )
            .await?;
        }
        Ok(Subscription {
            receiver,
            listen: None,
            legacy: Some((self.clone(), uris)),
        })
    }

    /// Closes the connection: fails what is pending with [`ClientError::Closed`], then
    /// closes the transport (for a process: stdin, SIGTERM, SIGKILL).
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.inner.actor.cast(ClientMsg::Close(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

enum Probe {
    Modern,
    Legacy(ProtocolVersion),
    Failed(ClientError),
}

/// A request's params with our `_meta` in place of the caller's, serialized without
/// copying the params (tool arguments can be large).
struct WithMeta<'a> {
    params: &'a Map<String, Value>,
    meta: &'a OurMeta<'a>,
}

impl serde::Serialize for WithMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.params {
            if k != "_meta" {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry("_meta", self.meta)?;
        map.end()
    }
}

/// A request's `_meta`: the caller's members, then the request options' (which win), then
/// ours (which win over both): the progress token, and in the modern generation the
/// protocol version, capabilities, client info and log level. Written straight to the
/// wire, without building a map per request.
struct OurMeta<'a> {
    caller: Option<&'a Map<String, Value>>,
    extra: Option<&'a Map<String, Value>>,
    progress_token: &'a RequestId,
    modern: Option<ModernMeta<'a>>,
}

struct ModernMeta<'a> {
    identity: &'a ModernIdentity,
    log_level: Option<LoggingLevel>,
}

/// The client's capabilities and identity, serialized once per client.
struct ModernIdentity {
    capabilities: Box<RawValue>,
    info: Box<RawValue>,
}

impl ModernIdentity {
    fn of(capabilities: &ClientCapabilities, info: &Implementation) -> Self {
        // Serializing these plain structs cannot fail; `null` would be the fallback.
        let raw =
            |v: serde_json::Result<String>| v.and_then(RawValue::from_string).unwrap_or_default();
        ModernIdentity {
            capabilities: raw(serde_json::to_string(capabilities)),
            info: raw(serde_json::to_string(info)),
        }
    }
}

impl OurMeta<'_> {
    fn is_ours(&self, key: &str) -> bool {
        key == "progressToken"
            || (self.modern.is_some()
                && matches!(
                    key,
                    meta::PROTOCOL_VERSION
                        | meta::CLIENT_CAPABILITIES
                        | meta::CLIENT_INFO
                        | meta::LOG_LEVEL
                ))
    }
}

impl serde::Serialize for OurMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        let extra_has = |k: &str| self.extra.is_some_and(|e| e.contains_key(k));
        for (k, v) in self.caller.into_iter().flatten() {
            if !self.is_ours(k) && !extra_has(k) {
                map.serialize_entry(k, v)?;
            }
        }
        for (k, v) in self.extra.into_iter().flatten() {
            if !self.is_ours(k) {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry("progressToken", self.progress_token)?;
        if let Some(m) = &self.modern {
            map.serialize_entry(
                meta::PROTOCOL_VERSION,
                ProtocolVersion::V2026_07_28.as_str(),
            )?;
            map.serialize_entry(meta::CLIENT_CAPABILITIES, &*m.identity.capabilities)?;
            map.serialize_entry(meta::CLIENT_INFO, &*m.identity.info)?;
            if let Some(level) = &m.log_level {
                map.serialize_entry(meta::LOG_LEVEL, level)?;
            }
        }
        map.end()
    }
}

/// Which generation's `_meta` and headers a request carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Era {
    /// Modern, whatever was negotiated (the probe).
    Modern,
    /// Legacy, before a version is negotiated (`initialize`).
    Handshake,
    /// What the handshake chose.
    Negotiated,
}

/// A live subscription: its notifications, and the request that keeps it open.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Notice>,
    listen: Option<tokio::task::AbortHandle>,
    legacy: Option<(Client, Vec<String>)>,
}

impl Subscription {
    /// The next notification from the server; `None` once the client is closed.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            match self.receiver.recv().await {
                Ok(n) => return Some(n),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(listen) = self.listen.take() {
            listen.abort();
        }
        if let Some((client, uris)) = self.legacy.take() {
            if uris.is_empty() || tokio::runtime::Handle::try_current().is_err() {
                return;
            }
            tokio::spawn(async move {
                for uri in uris {
                    let mut params = Map::new();
                    params.insert("uri".into(), uri.into());
                    let _ = client
                        .round_trip(
                            "resources/unsubscribe",
                            &params,
                            &RequestOptions::default(),
                            Era::Negotiated,
                        )
                        .await;
                }
            });
        }
    }
}

fn cursor_params(cursor: Option<String>) -> Map<String, Value> {
    let mut params = Map::new();
    if let Some(c) = cursor {
        params.insert("cursor".into(), c.into());
    }
    params
}

fn to_value<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn parse_result<T: DeserializeOwned>(method: &str, raw: &RawValue) -> Result<T, ClientError> {
    serde_json::from_str(raw.get()).map_err(|e| {
        ClientError::Protocol(format!("`{method}` returned an unreadable result: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn our_meta_members_win_and_no_key_is_written_twice() {
        let caller = obj(serde_json::json!({ "a": 1, "x": "caller", "progressToken": "theirs" }));
        let extra = obj(serde_json::json!({ "x": "extra", "traceparent": "00-1-2-01" }));
        let params = obj(serde_json::json!({ "name": "echo", "_meta": caller.clone() }));
        let id = RequestId::Number(7);
        let identity = ModernIdentity::of(
            &ClientCapabilities::default(),
            &Implementation::new("t", "1"),
        );
        let meta = OurMeta {
            caller: Some(&caller),
            extra: Some(&extra),
            progress_token: &id,
            modern: Some(ModernMeta {
                identity: &identity,
                log_level: None,
            }),
        };
        let text = serde_json::to_string(&WithMeta {
            params: &params,
            meta: &meta,
        })
        .unwrap_or_default();
        assert_eq!(text.matches("\"x\"").count(), 1, "{text}");
        assert_eq!(text.matches("progressToken").count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        let m = &v["_meta"];
        assert_eq!(v["name"], "echo");
        assert_eq!(m["a"], 1);
        assert_eq!(m["x"], "extra");
        assert_eq!(m["traceparent"], "00-1-2-01");
        assert_eq!(m["progressToken"], 7);
        assert_eq!(m[meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(m[meta::CLIENT_INFO]["name"], "t");
        assert!(m[meta::CLIENT_CAPABILITIES].is_object(), "{text}");
        assert!(m.get(meta::LOG_LEVEL).is_none());
    }
}
