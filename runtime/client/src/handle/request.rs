//! Request plumbing: [`RequestOptions`], notifications, and one request from the typed
//! call down to the wire: the cache, the modern input rounds, the -32022 retry, headers
//! (`x-mcp-header` arguments included), timeouts that progress extends, and cancellation
//! when the caller gives up.

use super::client::{lock, Client};
use super::meta::{ModernMeta, OurMeta, RawCall, WithMeta};
use super::ops::cursor_params;
use crate::actor::ClientMsg;
use crate::cache::cacheable;
use crate::error::ClientError;
use crate::observe::{OutgoingRequest, RequestOutcome};
use crate::pending::Deadline;
use crate::transport::{OutboundKind, OutboundMessage, TransportError, TransportLink};
use futures_util::StreamExt;
use ractor::ActorRef;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use toolyard_proto::headers::{header_value, tool_header_params};
use toolyard_proto::{
    InputRequest, InputRequiredResult, ListToolsResult, ProgressNotificationParams,
    ProtocolVersion, RequestId, Tool,
};

/// Options of one request.
#[derive(Clone, Default)]
pub struct RequestOptions {
    /// Overrides the client's request timeout.
    pub timeout: Option<Duration>,
    /// Called with each progress notification of this request.
    pub on_progress: Option<crate::handlers::ProgressCallback>,
    /// Extra `_meta` members (e.g. `traceparent`).
    pub meta: Option<Map<String, Value>>,
    /// Answers the server's questions for this request instead of the client's handlers.
    pub questions: Option<crate::handlers::Questions>,
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
    pub fn questions(mut self, questions: crate::handlers::Questions) -> Self {
        self.questions = Some(questions);
        self
    }

    /// Adds a member to the request's `_meta` (e.g. the caller's `traceparent`, `tracestate`
    /// and `baggage`, which a gateway passes on; an observer's span context replaces the
    /// first two).
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.meta
            .get_or_insert_with(Map::new)
            .insert(key.into(), value.into());
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

/// The caller's own `_meta` in a request's params, if it is an object.
fn caller_meta(params: &Map<String, Value>) -> Option<&Map<String, Value>> {
    match params.get("_meta") {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// A `_meta` member's text as the request carries it: the request options' member wins
/// over the caller's, as on the wire.
fn meta_text<'a>(
    opts: &'a RequestOptions,
    caller: Option<&'a Map<String, Value>>,
    key: &str,
) -> Option<&'a str> {
    opts.meta
        .as_ref()
        .and_then(|m| m.get(key))
        .or_else(|| caller.and_then(|m| m.get(key)))
        .and_then(Value::as_str)
}

/// The W3C trace context and baggage a request's HTTP headers carry.
struct TraceHeaders<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
    baggage: Option<&'a str>,
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
    /// Sends a notification.
    // Async although it only queues the message: the public API keeps room for transports
    // whose send must wait (back-pressure) without a breaking change.
    #[allow(clippy::unused_async)]
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
        if self.is_closed() {
            return Err(ClientError::Closed);
        }
        // Written by the caller itself, like requests, so a notification and the request
        // sent after it reach the wire in that order.
        self.inner.link.send(OutboundMessage {
            body,
            kind: OutboundKind::Notification {
                method: method.into(),
                headers,
            },
        });
        Ok(())
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
        params: Map<String, Value>,
        opts: &RequestOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        self.request_raw_with(method, params, None, opts).await
    }

    /// [`request_raw`](Self::request_raw) with a `tools/call`'s name and arguments held apart
    /// from `params` (the byte-level forwarding path: the arguments are written into the
    /// request as the JSON text they are, and no map is built for the name).
    pub(crate) async fn request_raw_with(
        &self,
        method: &str,
        mut params: Map<String, Value>,
        call: Option<&RawCall<'_>>,
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
            // Boxed, as `round_trip_once` is in `round_trip_retried`: each async layer here
            // would otherwise carry the one below it twice.
            let raw =
                match Box::pin(self.round_trip_args(method, &params, call, opts, Era::Negotiated))
                    .await
                {
                    Err(ClientError::Transport(TransportError::SessionExpired))
                        if !self.is_modern() =>
                    {
                        // The rare paths are boxed: this future is allocated whole for every
                        // request, and what only they hold would make every one larger.
                        Box::pin(self.reinitialize()).await?;
                        Box::pin(self.round_trip_args(method, &params, call, opts, Era::Negotiated))
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
                        Box::pin(self.relearn_tools(opts)).await?;
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
                let responses =
                    Box::pin(self.answer_inputs(ask.input_requests.unwrap_or_default(), opts))
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

    /// [`round_trip_once`](Self::round_trip_once), sent again once when a modern server
    /// refuses the version with -32022 but lists 2026-07-28 as supported (the versioning
    /// page: retry with a mutually supported version).
    pub(super) async fn round_trip(
        &self,
        method: &str,
        params: &Map<String, Value>,
        opts: &RequestOptions,
        era: Era,
    ) -> Result<Box<RawValue>, ClientError> {
        self.round_trip_args(method, params, None, opts, era).await
    }

    /// [`round_trip`](Self::round_trip) with a raw call's name and arguments written after
    /// `params`.
    async fn round_trip_args(
        &self,
        method: &str,
        params: &Map<String, Value>,
        call: Option<&RawCall<'_>>,
        opts: &RequestOptions,
        era: Era,
    ) -> Result<Box<RawValue>, ClientError> {
        let Some(observer) = &self.inner.observer else {
            return self
                .round_trip_retried(method, params, call, opts, era, None)
                .await;
        };
        let caller = caller_meta(params);
        let text = |key: &str| meta_text(opts, caller, key);
        let target = match (call, method) {
            (Some(c), _) => Some(c.name),
            (None, "tools/call" | "prompts/get") => params.get("name").and_then(Value::as_str),
            (None, "resources/read" | "resources/subscribe" | "resources/unsubscribe") => {
                params.get("uri").and_then(Value::as_str)
            }
            _ => None,
        };
        let session = self.inner.session.load();
        let observed = observer.start(&OutgoingRequest {
            method,
            target,
            traceparent: text("traceparent"),
            tracestate: text("tracestate"),
            server: session
                .as_ref()
                .as_ref()
                .and_then(|s| s.server_info.as_ref())
                .map(|i| i.name.as_str()),
        });
        let Some(observed) = observed else {
            return self
                .round_trip_retried(method, params, call, opts, era, None)
                .await;
        };
        let trace = observed.trace_context();
        let answer = self
            .round_trip_retried(method, params, call, opts, era, trace.as_ref())
            .await;
        observed.finish(match &answer {
            Ok(raw) if method == "tools/call" && tool_failed(raw) => RequestOutcome::ToolError,
            Ok(_) => RequestOutcome::Ok,
            Err(ClientError::Rpc(e)) => RequestOutcome::Rpc(e.code),
            Err(ClientError::MethodNotFound(_)) => {
                RequestOutcome::Rpc(toolyard_proto::error::code::METHOD_NOT_FOUND)
            }
            Err(e) => RequestOutcome::Failed(e.kind()),
        });
        answer
    }

    async fn round_trip_retried(
        &self,
        method: &str,
        params: &Map<String, Value>,
        call: Option<&RawCall<'_>>,
        opts: &RequestOptions,
        era: Era,
        trace: Option<&(String, Option<String>)>,
    ) -> Result<Box<RawValue>, ClientError> {
        // Boxed: every caller's future (`round_trip_args`, `request_raw_with`, a gateway's
        // forwarded call) would otherwise hold this one's state two and three times over,
        // past the 1 KiB above which glibc's malloc consolidates its fast bins per request;
        // two small allocations cost less than that one large one.
        match Box::pin(self.round_trip_once(method, params, call, opts, era, trace)).await {
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
                self.round_trip_once(method, params, call, opts, era, trace)
                    .await
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
        call: Option<&RawCall<'_>>,
        opts: &RequestOptions,
        era: Era,
        trace: Option<&(String, Option<String>)>,
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
            caller: caller_meta(params),
            extra: opts.meta.as_ref(),
            progress_token: &id,
            trace: trace.map(|(parent, state)| (parent.as_str(), state.as_deref())),
            modern: modern.then_some(ModernMeta {
                identity: &inner.modern_identity,
                log_level,
            }),
        };
        let headers = if inner.link.carries_headers() {
            // The trace context the request carries in `_meta` goes into the headers too:
            // the observer's span's, else what the caller (or the options) put there.
            let text = |key: &str| meta_text(opts, meta.caller, key);
            let context = TraceHeaders {
                traceparent: trace
                    .map(|(parent, _)| parent.as_str())
                    .or_else(|| text("traceparent")),
                tracestate: match trace {
                    Some((_, state)) => state.as_deref(),
                    None => text("traceparent").and(text("tracestate")),
                },
                baggage: text("baggage"),
            };
            self.request_headers(method, params, call, &context, modern, era)
        } else {
            Vec::new()
        };
        let body = super::meta::request_body(
            &id,
            method,
            &WithMeta {
                params,
                call,
                meta: &meta,
            },
        )
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let (reply_tx, mut reply_rx) = oneshot::channel();
        // Progress extends the timeout. A caller with a progress callback gets each
        // notification through a channel; one without gets none (two allocations of every
        // request) and asks the table when its timeout fires.
        let (progress_tx, mut progress_rx) = match opts.on_progress {
            Some(_) => {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        // Registered, then written by this task: no hop through the client actor (the
        // reader hands the answer straight back; `pending.rs`).
        // The protocol's own method names are static: no copy for either holder.
        let method_name = toolyard_proto::method::client_request(method).map_or_else(
            || std::borrow::Cow::Owned(method.to_owned()),
            |spec| std::borrow::Cow::Borrowed(spec.name),
        );
        inner.pending.insert(
            id.clone(),
            method_name.clone(),
            reply_tx,
            progress_tx,
            opts.questions.clone(),
            Deadline::from_now(
                opts.timeout.unwrap_or(inner.request_timeout),
                inner.max_request_timeout,
            ),
        )?;
        inner.link.send(OutboundMessage {
            body,
            kind: OutboundKind::Request {
                id: id.clone(),
                method: method_name,
                headers,
            },
        });
        let mut guard = CancelOnDrop {
            actor: inner.actor.clone(),
            id: Some(id),
            reason: "the caller stopped waiting",
        };
        // The table's sweeper answers a request that times out (`pending.rs`).
        let answer = match (&opts.on_progress, &mut progress_rx) {
            (Some(f), Some(rx)) => {
                let answer = loop {
                    tokio::select! {
                        answer = &mut reply_rx => break answer,
                        Some(progress) = rx.next() => f(&progress),
                    }
                };
                // The reader queues progress before it passes on the answer, but `select!`
                // may see both ready and pick the answer: deliver what is queued first.
                while let Ok(progress) = rx.try_recv() {
                    f(&progress);
                }
                answer
            }
            _ => (&mut reply_rx).await,
        };
        match answer {
            // Timed out: the guard tells the server, which may still be working on it.
            Ok(Err(timeout @ ClientError::Timeout { .. })) => {
                guard.reason = "timed out";
                Err(timeout)
            }
            Ok(answer) => {
                guard.id = None;
                answer
            }
            Err(_) => {
                guard.id = None;
                Err(ClientError::Closed)
            }
        }
    }

    /// The HTTP headers of a request: its trace context, and on a modern connection the
    /// version, method, name and `x-mcp-header` arguments (on a legacy one, what the server
    /// asked to see again).
    fn request_headers(
        &self,
        method: &str,
        params: &Map<String, Value>,
        call: Option<&RawCall<'_>>,
        trace: &TraceHeaders<'_>,
        modern: bool,
        era: Era,
    ) -> Vec<(String, String)> {
        let inner = &self.inner;
        let mut headers = Vec::new();
        // A caller's text that is no plain header value stays in `_meta` only: as a header
        // it would fail the whole request.
        let plain =
            |v: &&str| !v.is_empty() && v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        if let Some(parent) = trace.traceparent.filter(plain) {
            headers.push(("traceparent".to_owned(), parent.to_owned()));
            if let Some(state) = trace.tracestate.filter(plain) {
                headers.push(("tracestate".to_owned(), state.to_owned()));
            }
        }
        if let Some(baggage) = trace.baggage.filter(plain) {
            headers.push(("baggage".to_owned(), baggage.to_owned()));
        }
        if modern {
            headers.push((
                "MCP-Protocol-Version".to_owned(),
                ProtocolVersion::V2026_07_28.as_str().to_owned(),
            ));
            headers.push(("Mcp-Method".to_owned(), method.to_owned()));
            let name = match (call, method) {
                (Some(c), _) => Some(c.name),
                (None, "tools/call" | "prompts/get") => params.get("name").and_then(Value::as_str),
                (None, "resources/read") => params.get("uri").and_then(Value::as_str),
                _ => None,
            };
            if let Some(name) = name {
                headers.push(("Mcp-Name".to_owned(), header_value(name)));
            }
            if method == "tools/call" {
                self.param_headers(params, call, &mut headers);
            }
        } else if era == Era::Negotiated {
            headers.extend(inner.response_headers.load().iter().cloned());
        }
        headers
    }

    fn param_headers(
        &self,
        params: &Map<String, Value>,
        call: Option<&RawCall<'_>>,
        headers: &mut Vec<(String, String)>,
    ) {
        let name = match call {
            Some(c) => c.name,
            None => match params.get("name") {
                Some(Value::String(name)) => name,
                _ => return,
            },
        };
        let Some(list) = lock(&self.inner.tool_headers).get(name).cloned() else {
            return;
        };
        // Raw arguments are parsed only for a tool that mirrors some into headers.
        let parsed: Option<Value> = call.and_then(|c| serde_json::from_str(c.arguments.get()).ok());
        let args = parsed.as_ref().or_else(|| params.get("arguments"));
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
    pub(super) fn learn_tools(&self, tools: &mut Vec<Tool>) {
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

    pub(super) async fn typed<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Map<String, Value>,
        opts: &RequestOptions,
    ) -> Result<T, ClientError> {
        let raw = self.request_raw(method, params, opts).await?;
        parse_result(method, &raw)
    }
}

/// Which generation's `_meta` and headers a request carries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// Modern, whatever was negotiated (the probe).
    Modern,
    /// Legacy, before a version is negotiated (`initialize`).
    Handshake,
    /// What the handshake chose.
    Negotiated,
}

pub(super) fn to_value<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub(super) fn parse_result<T: DeserializeOwned>(
    method: &str,
    raw: &RawValue,
) -> Result<T, ClientError> {
    serde_json::from_str(raw.get()).map_err(|e| {
        ClientError::Protocol(format!("`{method}` returned an unreadable result: {e}"))
    })
}

/// Whether a `tools/call` answer is a tool error (`isError: true`); read only when a request
/// observer wants the outcome.
fn tool_failed(raw: &RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    serde_json::from_str::<Head>(raw.get()).is_ok_and(|h| h.is_error)
}
