//! [`RequestContext`]: what a running handler knows about its request and can do with it.
//!
//! User code is written once for both protocol generations. `ctx.elicit(..)`,
//! `ctx.sample(..)` and `ctx.list_roots()` send a server-to-client request and await the reply
//! on a legacy connection; on a modern (2026-07-28) request they return the answer carried by
//! the retry's `inputResponses`, or end this round with [`InputError::InputRequired`] so the
//! runtime can answer with an `InputRequiredResult` (the handler is re-run on the retry).

use crate::middleware::SpanIds;
use crate::outbound::Outbound;
use crate::request_trace::Traceparent;
use crate::sink::Sink;
use crate::tasks::TaskLink;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use toolyard_proto::{
    jsonrpc, ClientCapabilities, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ErrorObject, Implementation, InputRequest, InputRequests,
    InputResponses, ListRootsResult, LoggingLevel, ProgressToken, ProtocolVersion, RequestId,
};

/// Why asking the client for input did not produce an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InputError {
    /// Modern generation: the answer is not in this round; the runtime ends the round with an
    /// `InputRequiredResult`. Propagate it with `?`.
    #[error("input required from the client")]
    InputRequired,
    /// The caller did not declare the capability the request needs (-32021).
    #[error("the client lacks the `{0}` capability")]
    MissingCapability(&'static str),
    /// The client did not answer in time.
    #[error("the client did not answer in time")]
    Timeout,
    /// The request was cancelled or the connection closed.
    #[error("the request was cancelled")]
    Cancelled,
    /// The client answered with an error.
    #[error("the client answered with an error: {0}")]
    Client(ErrorObject),
    /// The client's answer had the wrong shape.
    #[error("the client's answer is malformed: {0}")]
    Malformed(String),
}

/// Legacy log level of a connection: 0 = unset (the default level applies), else level + 1.
#[derive(Debug, Default)]
pub(crate) struct LogLevelCell(AtomicU8);

impl LogLevelCell {
    pub(crate) fn set(&self, level: LoggingLevel) {
        self.0.store(level as u8 + 1, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> Option<LoggingLevel> {
        let levels = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => levels.get(n as usize - 1).copied(),
        }
    }
}

/// Who is calling: capabilities and identity, per legacy session or per modern request.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The caller's declared capabilities.
    pub capabilities: ClientCapabilities,
    /// The caller's identity, if given.
    pub info: Option<Implementation>,
    /// The authenticated principal, if the transport established one.
    pub principal: Option<Arc<str>>,
    /// Where the caller is, when the transport knows.
    pub peer: Option<Arc<crate::middleware::Peer>>,
    /// What the request does about a task its call may become. Never set from the wire.
    pub task_role: TaskRole,
}

/// What a request does about a task its `tools/call` may become: make it here (the
/// default), or leave it to whoever holds the task elsewhere, as a NATS worker does for a
/// gateway's durable tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TaskRole {
    /// This server makes the task, when it has a task store and the caller asks for one.
    #[default]
    Own,
    /// The request runs the body of a task held elsewhere (a durable NATS job, whose record
    /// and questions its worker keeps): it gets no task of its own, whatever its tool's task
    /// support, and `start_task` does nothing
    /// ([`Server::serve_task_body`](crate::Server::serve_task_body)).
    Body,
    /// The caller makes the task: when the tool, declared with
    /// [`ToolDef::with_deferred_task`](crate::ToolDef::with_deferred_task), calls
    /// `start_task`, its handler is stopped and the request answers
    /// `{"resultType": "task_handoff"}` ([`TASK_HANDOFF`](crate::TASK_HANDOFF)); the caller
    /// creates the task and runs the call again as its body with the same answers
    /// ([`Server::serve_handing_off_task`](crate::Server::serve_handing_off_task)). A tool
    /// that ends without calling `start_task` answers as usual.
    HandOff,
}

/// The `resultType` of a request served with [`TaskRole::HandOff`] whose tool started its
/// task: the caller is to make the task. Toolyard's own, never sent to an MCP client.
pub const TASK_HANDOFF: &str = "task_handoff";

/// What every legacy request of one connection shares (one `Arc` per request).
pub(crate) struct LegacyConn {
    /// Server-to-client requests and their pending replies.
    pub(crate) outbound: Outbound,
    /// The level set by `logging/setLevel`.
    pub(crate) log_level: LogLevelCell,
    /// The connection's own sink (over HTTP: the session's standalone stream), where a
    /// task's messages go once the request that created it has been answered.
    pub(crate) sink: Sink,
    /// Cancelled when the connection closes.
    pub(crate) closing: CancellationToken,
    /// Who the connection's 2025-11-25 tasks belong to (see `crate::tasks`).
    pub(crate) task_owner: String,
    /// See [`RequestContext::roots_generation`].
    pub(crate) roots_generation: AtomicU64,
}

/// The source of roots generations: unique in the process.
static ROOTS_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A roots generation no connection has had.
pub(crate) fn next_roots_generation() -> u64 {
    ROOTS_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// How a request reaches its peer: the generation decides how input is gathered.
pub(crate) enum Channel {
    /// Session-based: server-to-client requests over the connection.
    Legacy { conn: Arc<LegacyConn> },
    /// Stateless: input comes from `inputResponses` on retries.
    Modern {
        log_level: Option<LoggingLevel>,
        round: Mutex<Round>,
    },
}

/// The modern generation's per-round input bookkeeping.
#[derive(Default)]
pub(crate) struct Round {
    /// Answers received so far (from earlier rounds' state and this retry).
    pub(crate) responses: InputResponses,
    /// What this round asks for.
    pub(crate) requests: InputRequests,
    /// The handler's state as it came in.
    pub(crate) state_in: Option<serde_json::Value>,
    /// The handler's state to carry to the next round.
    pub(crate) state_out: Option<serde_json::Value>,
}

/// The W3C trace context a request's handler runs under (`_meta.traceparent` / `tracestate`,
/// or a telemetry layer's span), and the `baggage` the request came with.
#[derive(Debug)]
pub(crate) struct TraceContext {
    pub(crate) parent: Option<Parent>,
    pub(crate) tracestate: Option<String>,
    pub(crate) baggage: Option<String>,
}

impl TraceContext {
    /// The `traceparent` text (a layer's span's written now, the first time it is read).
    pub(crate) fn traceparent(&self) -> Option<&str> {
        self.parent.as_ref().map(Parent::text)
    }
}

/// A request's `traceparent`: as it came, or a layer's span in its binary parts, written as
/// text only when read (most handlers never do: ~400 instructions of every traced request).
#[derive(Debug)]
pub(crate) enum Parent {
    Text(String),
    Span {
        ids: SpanIds,
        text: std::sync::OnceLock<Traceparent>,
    },
}

impl Parent {
    pub(crate) fn span(ids: SpanIds) -> Parent {
        Parent::Span {
            ids,
            text: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn text(&self) -> &str {
        match self {
            Parent::Text(text) => text,
            Parent::Span { ids, text } => text.get_or_init(|| Traceparent::of(ids)).as_str(),
        }
    }

    /// The head a log line carries: a caller's text checked for its shape, a span's as it is.
    pub(crate) fn checked(&self) -> Option<Traceparent> {
        match self {
            Parent::Text(text) => Traceparent::checked(text),
            Parent::Span { ids, .. } => Some(Traceparent::of(ids)),
        }
    }
}

pub(crate) struct ContextInner {
    pub(crate) id: RequestId,
    /// Behind a pointer: most requests carry none; shared with the handler's task-local
    /// (`crate::request_trace`).
    pub(crate) trace: Option<Arc<TraceContext>>,
    pub(crate) version: ProtocolVersion,
    pub(crate) caller: Arc<Caller>,
    pub(crate) cancel: CancellationToken,
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) sink: Sink,
    pub(crate) channel: Channel,
    pub(crate) session_id: Option<Arc<str>>,
    /// Set only on `tools/call`s that may run as a task (see `crate::tasks`).
    pub(crate) task: Option<Arc<TaskLink>>,
}

/// The context of one request, cheap to clone.
#[derive(Clone)]
pub struct RequestContext {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext")
            .field("id", &self.inner.id)
            .field("version", &self.inner.version)
            .finish()
    }
}

impl RequestContext {
    /// The JSON-RPC id of the request.
    pub fn request_id(&self) -> &RequestId {
        &self.inner.id
    }
    /// The caller's protocol revision.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.inner.version
    }
    /// True for the stateless 2026-07-28 generation.
    pub fn is_modern(&self) -> bool {
        matches!(self.inner.channel, Channel::Modern { .. })
    }
    /// What the request does about a task its call may become ([`Caller::task_role`]).
    pub(crate) fn task_role(&self) -> TaskRole {
        self.inner.caller.task_role
    }

    /// The caller's capabilities.
    pub fn client_capabilities(&self) -> &ClientCapabilities {
        &self.inner.caller.capabilities
    }
    /// The caller's identity, if it sent one.
    pub fn client_info(&self) -> Option<&Implementation> {
        self.inner.caller.info.as_ref()
    }
    /// The W3C `traceparent` the request carried in `_meta` (HTTP and NATS transports copy
    /// their headers there), for a tool that calls onward to pass it on.
    pub fn traceparent(&self) -> Option<&str> {
        self.inner
            .trace
            .as_deref()
            .and_then(TraceContext::traceparent)
    }

    /// The W3C `tracestate` that came with [`RequestContext::traceparent`].
    pub fn tracestate(&self) -> Option<&str> {
        self.inner
            .trace
            .as_deref()
            .filter(|t| t.parent.is_some())
            .and_then(|t| t.tracestate.as_deref())
    }

    /// The W3C `baggage` the request carried (`_meta.baggage`, else the transport's
    /// `baggage` header), for what the handler calls onward to pass on unchanged.
    pub fn baggage(&self) -> Option<&str> {
        self.inner
            .trace
            .as_deref()
            .and_then(|t| t.baggage.as_deref())
    }

    /// Who called, when the transport authenticated the caller.
    pub fn principal(&self) -> Option<&str> {
        self.inner.caller.principal.as_deref()
    }

    /// [`RequestContext::principal`], shared (a listing takes it to its actor).
    pub(crate) fn principal_shared(&self) -> Option<Arc<str>> {
        self.inner.caller.principal.clone()
    }
    /// Where the request came from: equal for the requests of one legacy session or of
    /// one stdio or in-memory connection, distinct for each stateless request over HTTP.
    /// Two requests with one peer id reach the same answerer with their questions
    /// (elicitation, sampling, roots); a gateway relies on that.
    pub fn peer_id(&self) -> u64 {
        match &self.inner.channel {
            Channel::Legacy { conn } => Arc::as_ptr(conn) as usize as u64,
            Channel::Modern { .. } => self.inner.sink.identity(),
        }
    }
    /// Names the client's current list of roots (legacy generations): unique in the process
    /// to this connection, and renewed by each `notifications/roots/list_changed`, so a
    /// server may cache what `roots/list` answered under it and ask again once it changes.
    /// `None` for a 2026-07-28 request (roots are a legacy-era feature).
    pub fn roots_generation(&self) -> Option<u64> {
        match &self.inner.channel {
            Channel::Legacy { conn } => Some(conn.roots_generation.load(Ordering::Relaxed)),
            Channel::Modern { .. } => None,
        }
    }
    /// The legacy session id, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.inner.session_id.as_deref()
    }
    /// The cancellation token: cancelled by `notifications/cancelled` or when the connection
    /// or response stream closes.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }
    /// True once the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }
    /// Completes when the request is cancelled.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// Whether the caller asked for progress (sent a `progressToken`): work that would only
    /// produce progress, such as relaying it from elsewhere, can be skipped otherwise.
    pub fn wants_progress(&self) -> bool {
        self.inner.progress_token.is_some()
    }

    /// Reports progress, when the caller asked for it with a `progressToken`.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.inner.progress_token else {
            return;
        };
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            progress_token: &'a ProgressToken,
            progress: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            total: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        let p = P {
            progress_token: token,
            progress,
            total,
            message,
        };
        if let Ok(bytes) = jsonrpc::notification_bytes("notifications/progress", &p) {
            self.inner.sink.send(bytes);
        }
    }

    /// The lowest level the caller wants logs at, or `None` when it wants none.
    pub fn log_level(&self) -> Option<LoggingLevel> {
        match &self.inner.channel {
            // A legacy client that never called logging/setLevel gets info and above.
            Channel::Legacy { conn } => Some(conn.log_level.get().unwrap_or(LoggingLevel::Info)),
            // Modern: only when this request's `_meta` asked for a level.
            Channel::Modern { log_level, .. } => *log_level,
        }
    }

    /// Sends a `notifications/message` log entry to the caller, if its level admits it.
    pub fn log(&self, level: LoggingLevel, logger: Option<&str>, data: impl Serialize) {
        match self.log_level() {
            Some(min) if level >= min => {}
            _ => return,
        }
        #[derive(Serialize)]
        struct L<'a, D> {
            level: LoggingLevel,
            #[serde(skip_serializing_if = "Option::is_none")]
            logger: Option<&'a str>,
            data: D,
        }
        if let Ok(bytes) = jsonrpc::notification_bytes(
            "notifications/message",
            &L {
                level,
                logger,
                data,
            },
        ) {
            self.inner.sink.send(bytes);
        }
    }

    /// Asks the user for input through the client (elicitation). `key` names this question
    /// across modern rounds; it must be unique within the request.
    pub async fn elicit(
        &self,
        key: &str,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, InputError> {
        if self.client_capabilities().elicitation.is_none() {
            return Err(InputError::MissingCapability("elicitation"));
        }
        self.ask(key, "elicitation/create", InputRequest::Elicit(params))
            .await
    }

    /// Asks the client to sample from a model.
    pub async fn sample(
        &self,
        key: &str,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, InputError> {
        if self.client_capabilities().sampling.is_none() {
            return Err(InputError::MissingCapability("sampling"));
        }
        self.ask(
            key,
            "sampling/createMessage",
            InputRequest::CreateMessage(params),
        )
        .await
    }

    /// Asks the client for its roots.
    pub async fn list_roots(&self) -> Result<ListRootsResult, InputError> {
        if self.client_capabilities().roots.is_none() {
            return Err(InputError::MissingCapability("roots"));
        }
        self.ask(
            "roots",
            "roots/list",
            InputRequest::ListRoots(Default::default()),
        )
        .await
    }

    /// Asks for several inputs at once (a modern round then carries all of them). Each key's
    /// answer is in the returned map, as JSON.
    pub async fn gather(
        &self,
        requests: Vec<(String, InputRequest)>,
    ) -> Result<InputResponses, InputError> {
        for (_, r) in &requests {
            let caps = self.client_capabilities();
            match r {
                InputRequest::Elicit(_) if caps.elicitation.is_none() => {
                    return Err(InputError::MissingCapability("elicitation"))
                }
                InputRequest::CreateMessage(_) if caps.sampling.is_none() => {
                    return Err(InputError::MissingCapability("sampling"))
                }
                InputRequest::ListRoots(_) if caps.roots.is_none() => {
                    return Err(InputError::MissingCapability("roots"))
                }
                _ => {}
            }
        }
        match &self.inner.channel {
            Channel::Legacy { .. } => {
                let mut out = InputResponses::new();
                for (key, r) in requests {
                    let method = match &r {
                        InputRequest::Elicit(_) => "elicitation/create",
                        InputRequest::CreateMessage(_) => "sampling/createMessage",
                        InputRequest::ListRoots(_) => "roots/list",
                    };
                    let v: serde_json::Value = self.ask(&key, method, r).await?;
                    out.insert(key, v);
                }
                Ok(out)
            }
            Channel::Modern { round, .. } => {
                let missing: Vec<_> = {
                    let round = round.lock().unwrap_or_else(|p| p.into_inner());
                    requests
                        .iter()
                        .filter(|(k, _)| !round.responses.contains_key(k))
                        .cloned()
                        .collect()
                };
                if !missing.is_empty() {
                    match self.task_run() {
                        // A running task asks through `tasks/get` and waits for `tasks/update`.
                        Some(run) => {
                            let answers = run.ask(missing, &self.inner.cancel).await?;
                            round
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .responses
                                .extend(answers);
                        }
                        None => {
                            let mut round = round.lock().unwrap_or_else(|p| p.into_inner());
                            round.requests.extend(missing);
                            return Err(InputError::InputRequired);
                        }
                    }
                }
                let round = round.lock().unwrap_or_else(|p| p.into_inner());
                Ok(requests
                    .into_iter()
                    .filter_map(|(k, _)| round.responses.get(&k).cloned().map(|v| (k, v)))
                    .collect())
            }
        }
    }

    async fn ask<T: DeserializeOwned>(
        &self,
        key: &str,
        method: &str,
        request: InputRequest,
    ) -> Result<T, InputError> {
        match &self.inner.channel {
            Channel::Legacy { conn } => {
                let mut params = request_params(&request);
                let run = self.task_run();
                if let (Some(run), serde_json::Value::Object(p)) = (run, &mut params) {
                    // 2025-11-25: a task's requests carry its id, and the task shows
                    // `input_required` while the client has not answered.
                    p.insert(
                        "_meta".into(),
                        serde_json::json!({
                            toolyard_proto::meta::RELATED_TASK: {"taskId": run.id()}
                        }),
                    );
                }
                let waiting = run.map(|r| r.waiting());
                if let Some(w) = &waiting {
                    w.begin().await;
                }
                let raw = conn
                    .outbound
                    .request(&self.inner.sink, method, &params, &self.inner.cancel)
                    .await;
                if let Some(w) = waiting {
                    w.end().await;
                }
                serde_json::from_str(raw?.get()).map_err(|e| InputError::Malformed(e.to_string()))
            }
            Channel::Modern { round, .. } => {
                {
                    let mut round = round.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(answer) = round.responses.get(key) {
                        return T::deserialize(answer)
                            .map_err(|e| InputError::Malformed(e.to_string()));
                    }
                    if self.task_run().is_none() {
                        round.requests.insert(key.to_owned(), request);
                        return Err(InputError::InputRequired);
                    }
                }
                let Some(run) = self.task_run() else {
                    return Err(InputError::InputRequired);
                };
                let mut answers = run
                    .ask(vec![(key.to_owned(), request)], &self.inner.cancel)
                    .await?;
                let answer = answers
                    .remove(key)
                    .ok_or_else(|| InputError::Malformed(format!("no answer for `{key}`")))?;
                let parsed =
                    T::deserialize(&answer).map_err(|e| InputError::Malformed(e.to_string()));
                round
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .responses
                    .insert(key.to_owned(), answer);
                parsed
            }
        }
    }

    /// The running task this request became, if it became one.
    fn task_run(&self) -> Option<&Arc<crate::tasks::TaskRun>> {
        self.inner.task.as_ref().and_then(|l| l.run())
    }

    /// The id of the task this call runs as (tasks extension or 2025-11-25 tasks), once it
    /// runs as one.
    pub fn task_id(&self) -> Option<&str> {
        self.task_run().map(|r| r.id())
    }

    /// For a tool declared with [`crate::ToolDef::with_deferred_task`]: turns this call into a
    /// task now. The caller gets its `CreateTaskResult` and the handler continues in the
    /// background; from then on `elicit` / `sample` / `list_roots` ask through the task
    /// (`input_required` on `tasks/get`, answered by `tasks/update`) instead of ending the
    /// round. Everything the handler asked for before (multi-round-trip) stays answered.
    ///
    /// A no-op when the call cannot become a task (the caller did not declare the tasks
    /// extension, no task store is configured, the tool is not deferred) or already is one:
    /// the handler then simply continues as an ordinary request.
    pub async fn start_task(&self) {
        if let Some(link) = &self.inner.task {
            link.start().await;
        }
    }

    /// Whether [`start_task`](Self::start_task) would turn this call into a task now: its
    /// tool defers its task, the call may become one, and it is not one yet. A forwarding
    /// tool asks before it tells its upstream to hand the task back (a NATS gateway).
    pub fn can_start_task(&self) -> bool {
        self.inner.task.as_ref().is_some_and(|l| l.can_start())
    }

    /// A copy of this context for a call that may run as a task: its own cancellation
    /// token (the task outlives the request) and, for legacy calls, the connection's sink.
    pub(crate) fn fork_for_task(
        &self,
        cancel: CancellationToken,
        link: Arc<TaskLink>,
    ) -> RequestContext {
        let inner = &self.inner;
        let (channel, sink) = match &inner.channel {
            Channel::Legacy { conn } => (Channel::Legacy { conn: conn.clone() }, conn.sink.clone()),
            Channel::Modern { log_level, round } => (
                Channel::Modern {
                    log_level: *log_level,
                    round: Mutex::new(std::mem::take(
                        &mut *round.lock().unwrap_or_else(|p| p.into_inner()),
                    )),
                },
                inner.sink.clone(),
            ),
        };
        RequestContext {
            inner: Arc::new(ContextInner {
                id: inner.id.clone(),
                version: inner.version,
                caller: inner.caller.clone(),
                cancel,
                trace: inner.trace.clone(),
                progress_token: inner.progress_token.clone(),
                sink,
                channel,
                session_id: inner.session_id.clone(),
                task: Some(link),
            }),
        }
    }

    /// Legacy: the connection-wide state, for tasks.
    pub(crate) fn legacy_conn(&self) -> Option<&Arc<LegacyConn>> {
        match &self.inner.channel {
            Channel::Legacy { conn } => Some(conn),
            Channel::Modern { .. } => None,
        }
    }

    /// The state this handler kept from the previous round (modern generation), if any.
    pub fn state<T: DeserializeOwned>(&self) -> Option<T> {
        match &self.inner.channel {
            Channel::Modern { round, .. } => {
                let round = round.lock().unwrap_or_else(|p| p.into_inner());
                round
                    .state_out
                    .as_ref()
                    .or(round.state_in.as_ref())
                    .and_then(|v| T::deserialize(v).ok())
            }
            Channel::Legacy { .. } => None,
        }
    }

    /// Keeps `state` for the next round (modern generation); it travels sealed in
    /// `requestState`. A no-op for legacy requests, whose handler is never re-run.
    pub fn set_state<T: Serialize>(&self, state: &T) {
        if let Channel::Modern { round, .. } = &self.inner.channel {
            if let Ok(v) = serde_json::to_value(state) {
                round.lock().unwrap_or_else(|p| p.into_inner()).state_out = Some(v);
            }
        }
    }

    /// Modern: takes what this round asked for and the state to carry, if it asked anything.
    pub(crate) fn take_round(
        &self,
    ) -> Option<(InputRequests, InputResponses, Option<serde_json::Value>)> {
        match &self.inner.channel {
            Channel::Modern { round, .. } => {
                let mut round = round.lock().unwrap_or_else(|p| p.into_inner());
                let state = round.state_out.take().or_else(|| round.state_in.clone());
                Some((
                    std::mem::take(&mut round.requests),
                    round.responses.clone(),
                    state,
                ))
            }
            Channel::Legacy { .. } => None,
        }
    }
}

fn request_params(request: &InputRequest) -> serde_json::Value {
    match request {
        InputRequest::Elicit(p) => serde_json::to_value(p),
        InputRequest::CreateMessage(p) => serde_json::to_value(p),
        InputRequest::ListRoots(p) => serde_json::to_value(p),
    }
    .ok()
    .filter(|v| !v.is_null())
    // Absent params go out as `{}`: some clients reject `"params": null`.
    .unwrap_or_else(|| serde_json::Value::Object(Default::default()))
}
