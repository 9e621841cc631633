//! The gateway side: the workers' tools, discovered from the catalog bucket and exposed
//! through a Toolyard [`Server`] as `{server}__{tool}` (configurable), over every transport
//! and both generations. A call publishes a 2026-07-28 `tools/call` to the worker subject
//! with a reply inbox and reads the frames: progress and log messages go to the caller as
//! they come, the `end` frame is the answer. Workers appearing, changing their tools and
//! going away change the server's tool registry, which notifies `tools/list_changed`.

use crate::catalog::{self, CatalogEntry};
use crate::error::NatsError;
use crate::wire::{self, Frame};
use async_nats::jetstream::kv::{Entry, Operation};
use async_nats::{Client, HeaderMap, Message, StatusCode};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolyard::{HandlerError, RequestContext, Server, ToolArgs, ToolDef};
use toolyard_client::{OutgoingRequest, RequestOutcome};
use toolyard_proto::{
    CallToolResult, ErrorObject, InputRequest, InputRequiredResult, InputResponses, LoggingLevel,
    Tool,
};

/// How the gateway side exposes and calls the workers' tools.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The subject prefix (default `mcp.v1`).
    pub prefix: String,
    /// Between a worker's server name and a tool's name (default `__`); `None` exposes the
    /// tools under their own names.
    pub separator: Option<String>,
    /// A call fails with -32010 when no frame (not even a keepalive) came for this long.
    pub inactivity: Duration,
    /// The budget a call announces to the worker (`Mcp-Timeout-Ms`).
    pub call_timeout: Duration,
}

impl Default for RemoteConfig {
    fn default() -> RemoteConfig {
        RemoteConfig {
            prefix: wire::DEFAULT_PREFIX.to_owned(),
            separator: Some("__".to_owned()),
            inactivity: Duration::from_secs(60),
            call_timeout: Duration::from_secs(300),
        }
    }
}

impl RemoteConfig {
    fn expose(&self, server: &str, tool: &str) -> String {
        match &self.separator {
            Some(sep) => format!("{server}{sep}{tool}"),
            None => tool.to_owned(),
        }
    }
}

/// The workers' tools in a server, kept in step with the catalog; dropped, it stops
/// following the catalog (the tools stay until [`RemoteTools::shutdown`]).
#[derive(Debug)]
pub struct RemoteTools {
    inner: Arc<Inner>,
    watcher: tokio::task::JoinHandle<()>,
    connection: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    server: Server,
    client: Client,
    config: RemoteConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Catalog entries by key, with their revisions.
    entries: HashMap<String, (u64, CatalogEntry)>,
    /// What is installed in the server: exposed name -> (worker server, upstream tool).
    installed: BTreeMap<String, (String, Tool)>,
    /// Worker names with at least one instance in the catalog.
    servers: std::collections::BTreeSet<String>,
}

impl RemoteTools {
    /// Starts following the catalog and exposing the workers' tools through `server`.
    pub async fn start(
        server: Server,
        client: Client,
        config: RemoteConfig,
    ) -> Result<RemoteTools, NatsError> {
        let js = async_nats::jetstream::new(client.clone());
        let store = catalog::bucket(&js, catalog::HEARTBEAT).await?;
        let mut watch = store
            .watch_all()
            .await
            .map_err(|e| NatsError::Bus(format!("watching the catalog: {e}")))?;
        let inner = Arc::new(Inner {
            server,
            client,
            config,
            state: Mutex::default(),
        });
        // What the bucket holds now, before returning, so the first listing has it (the
        // watch delivers these again; applying an entry twice changes nothing).
        if let Ok(mut keys) = store.keys().await {
            while let Some(Ok(key)) = keys.next().await {
                if let Ok(Some(entry)) = store.entry(key).await {
                    inner.apply(&entry);
                }
            }
        }
        let following = inner.clone();
        let watcher = tokio::spawn(async move {
            while let Some(entry) = watch.next().await {
                match entry {
                    Ok(entry) => following.apply(&entry),
                    Err(e) => tracing::warn!(error = %e, "catalog watch"),
                }
            }
            tracing::warn!("the catalog watch ended");
        });
        let connection = tokio::spawn(watch_connection(inner.server.clone(), inner.client.clone()));
        Ok(RemoteTools {
            inner,
            watcher,
            connection,
        })
    }

    /// The exposed names of the tools installed now.
    pub fn tools(&self) -> Vec<String> {
        self.inner.state().installed.keys().cloned().collect()
    }

    /// Stops following the catalog and removes the workers' tools from the server.
    pub fn shutdown(self) {
        self.watcher.abort();
        self.connection.abort();
        let names: Vec<String> = self.inner.state().installed.keys().cloned().collect();
        if !names.is_empty() {
            self.inner.server.remove_tools(names);
        }
    }
}

impl Drop for RemoteTools {
    fn drop(&mut self) {
        self.watcher.abort();
        self.connection.abort();
    }
}

/// The bus connection as a required component of the server's lifecycle: a gateway whose
/// NATS connection is down cannot reach any worker, so it is not ready (`/readyz` 503) until
/// the client reconnects. Polled: async-nats reports connection events only to a callback
/// set before connecting, and the connection may be shared with other users.
async fn watch_connection(server: Server, client: Client) {
    use async_nats::connection::State as Conn;
    let lifecycle = server.lifecycle();
    let mut up = true;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let now = matches!(client.connection_state(), Conn::Connected);
        if now == up {
            continue;
        }
        up = now;
        lifecycle.publish(if up {
            toolyard::LifecycleEvent::ComponentUp {
                kind: "nats",
                name: "bus".to_owned(),
            }
        } else {
            toolyard::LifecycleEvent::ComponentDown {
                kind: "nats",
                name: "bus".to_owned(),
                reason: "disconnected from the NATS server; reconnecting".to_owned(),
                required: true,
            }
        });
    }
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One catalog change: the entry is recorded (or dropped), then the server's tools are
    /// made to match every live entry.
    fn apply(self: &Arc<Self>, entry: &Entry) {
        let mut state = self.state();
        match entry.operation {
            Operation::Put => match serde_json::from_slice::<CatalogEntry>(&entry.value) {
                Ok(parsed) => {
                    state
                        .entries
                        .insert(entry.key.clone(), (entry.revision, parsed));
                }
                Err(e) => {
                    tracing::warn!(key = %entry.key, error = %e, "an unreadable catalog entry: ignored");
                    return;
                }
            },
            Operation::Delete | Operation::Purge => {
                state.entries.remove(&entry.key);
            }
        }
        // Per worker server, the newest entry wins (replicas normally agree).
        let mut newest: BTreeMap<&str, &(u64, CatalogEntry)> = BTreeMap::new();
        for e in state.entries.values() {
            let slot = newest.entry(e.1.server.as_str()).or_insert(e);
            if e.0 > slot.0 {
                *slot = e;
            }
        }
        let servers: std::collections::BTreeSet<String> =
            newest.keys().map(|s| (*s).to_owned()).collect();
        let mut wanted: BTreeMap<String, (String, Tool)> = BTreeMap::new();
        for (server, (_, e)) in newest {
            for tool in &e.tools {
                wanted.insert(
                    self.config.expose(server, &tool.name),
                    (server.to_owned(), tool.clone()),
                );
            }
        }
        let gone: Vec<String> = state
            .installed
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        let changed: Vec<ToolDef> = wanted
            .iter()
            .filter(|(k, v)| state.installed.get(*k) != Some(v))
            .filter_map(|(exposed, (server, tool))| {
                let mut def_tool = tool.clone();
                def_tool.name = exposed.clone();
                // A tool that says calling it again is harmless may be re-issued once when its
                // stream is lost (its worker died or stalled); no other tool ever is.
                let retry_safe = tool.annotations.as_ref().is_some_and(|a| {
                    a.read_only_hint == Some(true) || a.idempotent_hint == Some(true)
                });
                let f = forward(self.clone(), server.clone(), tool.name.clone(), retry_safe);
                match ToolDef::new(def_tool, f) {
                    // The worker checks the arguments against its own schema.
                    Ok(def) => Some(def.without_validation()),
                    Err(e) => {
                        tracing::warn!(tool = %exposed, error = %e, "a worker's tool skipped");
                        None
                    }
                }
            })
            .collect();
        state.installed = wanted;
        // Worker names that appeared or left: lifecycle events for embedders and /readyz.
        let lifecycle = self.server.lifecycle();
        for name in servers.difference(&state.servers) {
            lifecycle.publish(toolyard::LifecycleEvent::ComponentUp {
                kind: "worker",
                name: name.clone(),
            });
        }
        for name in state.servers.difference(&servers) {
            lifecycle.publish(toolyard::LifecycleEvent::ComponentDown {
                kind: "worker",
                name: name.clone(),
                reason: "no instance in the catalog".to_owned(),
                required: false,
            });
        }
        state.servers = servers;
        drop(state);
        if !gone.is_empty() {
            self.server.remove_tools(gone);
        }
        if !changed.is_empty() {
            self.server.add_tools(changed);
        }
    }
}

fn forward(inner: Arc<Inner>, server: String, tool: String, retry_safe: bool) -> toolyard::ToolFn {
    Arc::new(move |ctx: RequestContext, args: ToolArgs| {
        let inner = inner.clone();
        let server = server.clone();
        let tool = tool.clone();
        Box::pin(
            async move { call(&inner, &server, &tool, &ctx, args.into_value(), retry_safe).await },
        )
    })
}

/// The `_meta` a forwarded call carries: the modern version, the caller's capabilities, and
/// its progress token and log level when it asked for them.
fn meta_for(ctx: &RequestContext, trace: Option<&Trace>) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert(
        toolyard_proto::meta::PROTOCOL_VERSION.into(),
        json!("2026-07-28"),
    );
    meta.insert(
        toolyard_proto::meta::CLIENT_CAPABILITIES.into(),
        serde_json::to_value(ctx.client_capabilities()).unwrap_or_else(|_| json!({})),
    );
    if ctx.wants_progress() {
        meta.insert("progressToken".into(), json!("nats"));
    }
    if let Some((parent, state)) = trace {
        meta.insert(toolyard_proto::meta::TRACEPARENT.into(), json!(parent));
        if let Some(state) = state {
            meta.insert(toolyard_proto::meta::TRACESTATE.into(), json!(state));
        }
    }
    if let Some(level) = ctx.log_level() {
        if let Ok(level) = serde_json::to_value(level) {
            meta.insert(toolyard_proto::meta::LOG_LEVEL.into(), level);
        }
    }
    Value::Object(meta)
}

fn bus_error(code: i32, message: impl Into<String>) -> HandlerError {
    HandlerError::Protocol(ErrorObject::new(code, message.into()))
}

/// One forwarded `tools/call`, to its terminal frame. No-responders (nothing was delivered)
/// is retried once after a short wait: a worker may be restarting.
async fn call(
    inner: &Inner,
    server: &str,
    tool: &str,
    ctx: &RequestContext,
    arguments: Value,
    retry_safe: bool,
) -> Result<CallToolResult, HandlerError> {
    // Observed as a client request (a CLIENT span when telemetry is on), whose context the
    // worker then receives instead of ours.
    let observed = toolyard_client::default_observer().and_then(|o| {
        o.start(&OutgoingRequest {
            method: "tools/call",
            target: Some(tool),
            traceparent: ctx.traceparent(),
            tracestate: ctx.tracestate(),
            server: Some(server),
        })
    });
    let trace: Option<Trace> = observed
        .as_ref()
        .and_then(|o| o.trace_context())
        .or_else(|| {
            ctx.traceparent()
                .map(|p| (p.to_owned(), ctx.tracestate().map(str::to_owned)))
        });
    let answer = call_traced(
        inner,
        server,
        tool,
        ctx,
        arguments,
        trace.as_ref(),
        retry_safe,
    )
    .await;
    if let Some(o) = observed {
        o.finish(match &answer {
            Ok(r) if r.failed() => RequestOutcome::ToolError,
            Ok(_) => RequestOutcome::Ok,
            Err(HandlerError::Protocol(e)) => RequestOutcome::Rpc(e.code),
            Err(_) => RequestOutcome::Failed("nats"),
        });
    }
    answer
}

/// A W3C `traceparent` and its `tracestate`.
type Trace = (String, Option<String>);

/// The most input rounds one forwarded call may take.
const MAX_ROUNDS: usize = 16;

/// A forwarded call, round by round: when the worker answers `input_required` (its tool
/// elicits, samples or lists roots), the gateway asks its own caller the same questions
/// ([`RequestContext::gather`]: a legacy caller is asked there and then; a 2026-07-28 caller
/// gets an `input_required` of the gateway's own and retries, which replays the rounds with
/// its answers) and retries the worker with `inputResponses` and the worker's `requestState`
/// (sealed by the workers' shared secret, so the retry may land on any of them).
async fn call_traced(
    inner: &Inner,
    server: &str,
    tool: &str,
    ctx: &RequestContext,
    arguments: Value,
    trace: Option<&Trace>,
    retry_safe: bool,
) -> Result<CallToolResult, HandlerError> {
    let mut input_responses: Option<InputResponses> = None;
    let mut request_state: Option<String> = None;
    for round in 0..MAX_ROUNDS {
        let mut params = json!({
            "name": tool, "arguments": arguments, "_meta": meta_for(ctx, trace)});
        if let Some(responses) = input_responses.take() {
            params["inputResponses"] = Value::Object(responses);
        }
        if let Some(state) = request_state.take() {
            params["requestState"] = Value::String(state);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
            .to_string();
        match call_round(inner, server, tool, ctx, trace, &body, retry_safe).await? {
            Answer::Complete(result) => return Ok(result),
            Answer::InputRequired(needed) => {
                // Keys carry the round, so a worker asking under the same key twice is two
                // questions to our caller (a modern caller's answers are kept by key).
                let asks: Vec<(String, InputRequest)> = needed
                    .input_requests
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(key, request)| (format!("{round}:{key}"), request))
                    .collect();
                let prefix = format!("{round}:");
                let answers = ctx.gather(asks).await?;
                input_responses = Some(
                    answers
                        .into_iter()
                        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_owned(), v)))
                        .collect(),
                );
                request_state = needed.request_state;
            }
        }
    }
    Err(HandlerError::failed(format!(
        "`{server}` asked for input more than {MAX_ROUNDS} times in one call"
    )))
}

/// One round of a forwarded call. No-responders (nothing was delivered) is retried once
/// after a short wait: a worker may be restarting.
async fn call_round(
    inner: &Inner,
    server: &str,
    tool: &str,
    ctx: &RequestContext,
    trace: Option<&Trace>,
    body: &str,
    retry_safe: bool,
) -> Result<Answer, HandlerError> {
    let subject = wire::request_subject(&inner.config.prefix, server, "tools/call", Some(tool));
    let mut retried = false;
    let mut reissued = false;
    loop {
        match call_once(inner, &subject, server, tool, ctx, trace, body.as_bytes()).await {
            Ok(result) => return Ok(result),
            Err(Outcome::NoResponders) if !retried => {
                retried = true;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(Outcome::NoResponders) => {
                return Err(bus_error(
                    wire::NO_RESPONDERS,
                    format!("no worker serves `{server}` on the bus (no responders)"),
                ))
            }
            Err(Outcome::Failed(HandlerError::Protocol(e)))
                if retry_safe
                    && !reissued
                    && e.code == wire::STREAM_LOST
                    && !ctx.cancellation().is_cancelled() =>
            {
                reissued = true;
                tracing::info!(target: "toolyard::nats", %server, %tool, error = %e.message, "stream lost: re-issuing a retry-safe call once");
            }
            Err(Outcome::Failed(e)) => return Err(e),
            Err(Outcome::Cancelled) => return Err(HandlerError::failed("cancelled")),
        }
    }
}

enum Outcome {
    NoResponders,
    /// Our caller cancelled: the worker is told (`CancelOnDrop`).
    Cancelled,
    Failed(HandlerError),
}

impl From<HandlerError> for Outcome {
    fn from(e: HandlerError) -> Outcome {
        Outcome::Failed(e)
    }
}

async fn call_once(
    inner: &Inner,
    subject: &str,
    server: &str,
    tool: &str,
    ctx: &RequestContext,
    trace: Option<&Trace>,
    body: &[u8],
) -> Result<Answer, Outcome> {
    // A reply subscription of its own per call: one call's flood of frames can then never
    // fill the buffer another call's answer arrives in (a shared `{prefix}.*` subscription
    // did that, and measured no faster: the time went to the worker's timer, since fixed).
    let inbox = inner.client.new_inbox();
    let mut frames = inner.client.subscribe(inbox.clone()).await.map_err(|e| {
        bus_error(
            wire::STREAM_LOST,
            format!("cannot subscribe for the answer: {e}"),
        )
    })?;
    let mut headers = HeaderMap::new();
    headers.insert(wire::WIRE, "1");
    headers.insert(wire::METHOD, "tools/call");
    headers.insert(wire::NAME, tool);
    headers.insert(wire::PROTOCOL_VERSION, "2026-07-28");
    // An answer over max_payload comes back as a claim (`claims`), fetched below.
    headers.insert(wire::ACCEPT_CLAIM, "1");
    // The trace context rides the headers too (NATS 2.11+ traces messages that carry it).
    if let Some((parent, state)) = trace {
        headers.insert(wire::TRACEPARENT, parent.as_str());
        if let Some(state) = state {
            headers.insert(wire::TRACESTATE, state.as_str());
        }
    }
    headers.insert(
        wire::TIMEOUT_MS,
        inner.config.call_timeout.as_millis().to_string().as_str(),
    );
    // Watched before the publish: the server's refusal may come back at once.
    let mut denied = crate::denied::watch(subject);
    let published = inner
        .client
        .publish_with_reply_and_headers(
            subject.to_owned(),
            inbox.clone(),
            headers,
            body.to_vec().into(),
        )
        .await;
    if let Err(e) = published {
        let code = if e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded {
            wire::PAYLOAD_TOO_LARGE
        } else {
            wire::STREAM_LOST
        };
        return Err(bus_error(code, format!("publishing the call to `{server}`: {e}")).into());
    }
    let mut expected_seq = 0u64;
    // A cancelled caller's call is dropped mid-await: the guard tells the worker then.
    let mut guard = CancelOnDrop {
        client: inner.client.clone(),
        control: Some(wire::control_subject(&inbox)),
    };
    let outcome = loop {
        let next = tokio::select! {
            m = tokio::time::timeout(inner.config.inactivity, frames.next()) => m,
            () = ctx.cancellation().cancelled() => break Err(Outcome::Cancelled),
            Ok(message) = &mut denied.refused => {
                break Err(bus_error(
                    wire::PERMISSION_DENIED,
                    format!("the bus refused the call to `{server}`: {message}"),
                )
                .into())
            }
        };
        let message = match next {
            Err(_) => {
                break Err(bus_error(
                    wire::STREAM_LOST,
                    format!(
                        "no frame from `{server}` for {:?}: the worker is gone or stalled; re-issue the call",
                        inner.config.inactivity
                    ),
                )
                .into())
            }
            Ok(None) => break Err(bus_error(wire::STREAM_LOST, "the answer stream closed").into()),
            Ok(Some(m)) => m,
        };
        if message.status == Some(StatusCode::NO_RESPONDERS) {
            break Err(Outcome::NoResponders);
        }
        let seq = frame_header(&message, wire::SEQ).and_then(|s| s.parse::<u64>().ok());
        if let Some(seq) = seq {
            if seq != expected_seq {
                break Err(bus_error(
                    wire::STREAM_LOST,
                    format!("frame {expected_seq} of the answer was lost (got {seq}): re-issue the call"),
                )
                .into());
            }
            expected_seq += 1;
        }
        match frame_header(&message, wire::FRAME).and_then(Frame::parse) {
            Some(Frame::Ka) => {}
            Some(Frame::Msg) => relay(ctx, &message.payload),
            Some(Frame::End) if frame_header(&message, wire::CLAIM).is_some() => {
                let name = frame_header(&message, wire::CLAIM).unwrap_or_default();
                break match crate::claims::take(&inner.client, name).await {
                    Ok(body) => answer(&body).map_err(Outcome::from),
                    Err(e) => Err(bus_error(
                        wire::PAYLOAD_TOO_LARGE,
                        format!("the answer was too large for the bus and its claim could not be read: {e}"),
                    )
                    .into()),
                };
            }
            Some(Frame::End) if message.payload.is_empty() => {
                break Err(HandlerError::failed("the call was cancelled").into())
            }
            Some(Frame::End | Frame::Err) => break answer(&message.payload).map_err(Outcome::from),
            None => {
                break Err(
                    bus_error(wire::STREAM_LOST, "a reply without an Mcp-Frame header").into(),
                )
            }
        }
    };
    // Cancelled, or we gave up on the stream (a lost frame, silence): tell the worker to
    // stop, so it neither works nor keeps sending for nobody. Answered: nothing to cancel.
    let gave_up = matches!(
        &outcome,
        Err(Outcome::Cancelled)
            | Err(Outcome::Failed(HandlerError::Protocol(ErrorObject {
                code: wire::STREAM_LOST,
                ..
            })))
    );
    if !gave_up {
        guard.control = None;
    }
    drop(guard);
    let _ = frames.unsubscribe().await;
    outcome
}

/// Sends `notifications/cancelled` for request 1 to the worker's control subject when a call
/// ends without its answer: the caller cancelled, or the call's future was dropped.
struct CancelOnDrop {
    client: Client,
    control: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(control) = self.control.take() else {
            return;
        };
        let client = self.client.clone();
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 1, "reason": "the caller cancelled"},
        })
        .to_string();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.publish(control, cancel.into()).await;
            });
        }
    }
}

fn frame_header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(async_nats::HeaderValue::as_str)
}

/// A `msg` frame: the worker's progress and log messages, to our caller.
fn relay(ctx: &RequestContext, payload: &[u8]) {
    #[derive(Deserialize)]
    struct Note {
        method: String,
        #[serde(default)]
        params: Value,
    }
    let Ok(note) = serde_json::from_slice::<Note>(payload) else {
        return;
    };
    match note.method.as_str() {
        "notifications/progress" => {
            if let Some(progress) = note.params["progress"].as_f64() {
                ctx.progress(
                    progress,
                    note.params["total"].as_f64(),
                    note.params["message"].as_str(),
                );
            }
        }
        "notifications/message" => {
            let level = serde_json::from_value::<LoggingLevel>(note.params["level"].clone())
                .unwrap_or(LoggingLevel::Info);
            ctx.log(level, note.params["logger"].as_str(), &note.params["data"]);
        }
        _ => {}
    }
}

/// What a round of a forwarded call ended with.
enum Answer {
    /// The tool's result.
    Complete(CallToolResult),
    /// The worker needs input from the caller first.
    InputRequired(InputRequiredResult),
}

/// The `end` (or `err`) frame's JSON-RPC response as the call's outcome.
fn answer(payload: &[u8]) -> Result<Answer, HandlerError> {
    #[derive(Deserialize)]
    struct Response {
        result: Option<Box<serde_json::value::RawValue>>,
        error: Option<ErrorObject>,
    }
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "resultType")]
        result_type: Option<String>,
    }
    let malformed = || {
        bus_error(
            wire::STREAM_LOST,
            "the worker's answer is not a JSON-RPC response",
        )
    };
    match serde_json::from_slice::<Response>(payload) {
        Ok(Response {
            result: Some(raw), ..
        }) => {
            let kind: Kind = serde_json::from_str(raw.get()).map_err(|_| malformed())?;
            if kind.result_type.as_deref() == Some("input_required") {
                let needed: InputRequiredResult =
                    serde_json::from_str(raw.get()).map_err(|_| malformed())?;
                return Ok(Answer::InputRequired(needed));
            }
            let mut result: CallToolResult =
                serde_json::from_str(raw.get()).map_err(|_| malformed())?;
            result.result_type = None;
            Ok(Answer::Complete(result))
        }
        Ok(Response {
            error: Some(error), ..
        }) => Err(HandlerError::Protocol(error)),
        _ => Err(bus_error(
            wire::STREAM_LOST,
            "the worker's answer is not a JSON-RPC response",
        )),
    }
}
