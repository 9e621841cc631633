//! The middleware seam: a [`Layer`] sees every request before it is handled and its outcome
//! after, so observability, authorization and rate limits are added without touching handlers.
//!
//! A layer is not a future wrapper: handlers run in their own tasks and answer by message, so a
//! layer gets a start hook (which may reject the request) and a [`Completion`] that is finished
//! exactly once with the outcome, whichever task produces it.

use crate::context::Parent;
use crate::moment::Moment;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use toolyard_proto::{ErrorObject, ProtocolVersion, RequestId};

/// What a layer learns about a request.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// JSON-RPC method.
    pub method: Arc<str>,
    /// The tool, prompt or resource the request targets, when it has one.
    pub target: Option<Arc<str>>,
    /// JSON-RPC id.
    pub id: RequestId,
    /// The caller's protocol revision, when known.
    pub protocol_version: Option<ProtocolVersion>,
    /// The legacy session the request belongs to, if any.
    pub session_id: Option<Arc<str>>,
    /// The authenticated principal, if the transport established one.
    pub principal: Option<Arc<str>>,
    /// Where the request came from, when the transport knows (HTTP, stdio).
    pub peer: Option<Arc<Peer>>,
    /// W3C `traceparent` from the request's `_meta`.
    pub traceparent: Option<Arc<str>>,
    /// W3C `tracestate` from the request's `_meta`.
    pub tracestate: Option<Arc<str>>,
    /// The W3C headers of the transport's own request (HTTP, NATS), when it had any: a
    /// tracing layer links its `traceparent` (and parents on it when `_meta` carries none).
    pub transport_trace: Option<Arc<TransportTrace>>,
    /// A `tools/call`'s `arguments` as the caller sent them (JSON text), only when a layer
    /// asked for payloads ([`Layer::captures_payloads`]): otherwise nobody pays the copy.
    pub arguments: Option<Arc<str>>,
    /// When the request was accepted.
    pub started: Moment,
}

/// The W3C trace headers (`traceparent`, `tracestate`, `baggage`) of a transport's own
/// request (an HTTP request's, a NATS message's), as they came: what `_meta` does not
/// carry, the request takes from here (`_meta` wins: SEP-414).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportTrace {
    /// `traceparent`.
    pub traceparent: Option<Arc<str>>,
    /// `tracestate`.
    pub tracestate: Option<Arc<str>>,
    /// `baggage`.
    pub baggage: Option<Arc<str>>,
}

impl TransportTrace {
    /// The headers named, or `None` when there are none (the usual case: nothing is
    /// allocated).
    pub fn of(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Option<Arc<TransportTrace>> {
        if traceparent.is_none() && baggage.is_none() {
            return None;
        }
        Some(Arc::new(TransportTrace {
            traceparent: traceparent.map(Arc::from),
            tracestate: traceparent.and(tracestate).map(Arc::from),
            baggage: baggage.map(Arc::from),
        }))
    }
}

/// Where a connection or request comes from: what telemetry reports as `network.transport`,
/// `network.protocol.name`, `client.address` and, for a message bus, the `messaging.*`
/// attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// `tcp` (HTTP, NATS), `pipe` (stdio), `inproc` (in memory): the OpenTelemetry
    /// `network.transport` values.
    pub transport: &'static str,
    /// `http`, `nats`: `network.protocol.name`, when the transport has an application
    /// protocol under MCP.
    pub protocol: Option<&'static str>,
    /// The remote address, for a socket.
    pub address: Option<SocketAddr>,
    /// Where the request was taken from, for a message bus.
    pub messaging: Option<Messaging>,
}

/// A request taken from a message bus: `messaging.system`, `messaging.destination.name`
/// (the subscription's subject template: one value per worker, not per tool) and
/// `messaging.consumer.group.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Messaging {
    /// `nats`.
    pub system: &'static str,
    /// The subject (template) subscribed to.
    pub destination: Arc<str>,
    /// The queue group or durable consumer, when there is one.
    pub consumer_group: Option<Arc<str>>,
}

impl Peer {
    /// A client on the other end of our stdin/stdout.
    pub fn pipe() -> Peer {
        Peer {
            transport: "pipe",
            protocol: None,
            address: None,
            messaging: None,
        }
    }

    /// A client connected over HTTP from `address`.
    pub fn http(address: SocketAddr) -> Peer {
        Peer {
            transport: "tcp",
            protocol: Some("http"),
            address: Some(address),
            messaging: None,
        }
    }

    /// A client in the same process (the in-memory transport).
    pub fn inproc() -> Peer {
        Peer {
            transport: "inproc",
            protocol: None,
            address: None,
            messaging: None,
        }
    }

    /// A request taken from a NATS subscription to `destination` (in `consumer_group`).
    pub fn nats(destination: impl Into<Arc<str>>, consumer_group: Option<Arc<str>>) -> Peer {
        Peer {
            transport: "tcp",
            protocol: Some("nats"),
            address: None,
            messaging: Some(Messaging {
                system: "nats",
                destination: destination.into(),
                consumer_group,
            }),
        }
    }
}

/// A legacy session that ended (a stdio connection or an HTTP session after `initialize`):
/// what [`Layer::session_ended`] learns. Modern (2026-07-28) requests have no session.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The HTTP session id; none for stdio and in-memory connections.
    pub session_id: Option<Arc<str>>,
    /// The negotiated revision.
    pub protocol_version: ProtocolVersion,
    /// Where the client was, when the transport knew.
    pub peer: Option<Arc<Peer>>,
    /// When `initialize` was answered.
    pub started: Instant,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A complete result.
    Ok,
    /// A tool result with `isError: true`.
    ToolError,
    /// An `InputRequiredResult` (modern multi-round-trip).
    InputRequired,
    /// A JSON-RPC error with this code.
    Error(i32),
    /// Cancelled by the client or by the connection closing; no response was sent.
    Cancelled,
}

/// A span's W3C context in its binary parts, as a layer hands it to the request's handler
/// ([`Completion::span_context`]): written out as a `traceparent` only when something reads
/// it (an onward call, a log line), where most handlers never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    /// The trace id's bytes.
    pub trace_id: [u8; 16],
    /// The span id's bytes.
    pub span_id: [u8; 8],
    /// The W3C trace flags (`0x01`: sampled).
    pub flags: u8,
}

/// Finishes a layer's view of one request.
pub trait Completion: Send + 'static {
    /// Called once with the outcome.
    fn finish(self: Box<Self>, info: &RequestInfo, outcome: &Outcome);

    /// The W3C trace context (`traceparent`, `tracestate`) the request's handler runs under,
    /// when this layer opened a span for it: what the handler's own outgoing calls carry
    /// ([`RequestContext::traceparent`](crate::RequestContext::traceparent)), so they are
    /// children of that span. The innermost layer that answers wins.
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        None
    }

    /// [`trace_context`](Completion::trace_context) in binary parts (and the `tracestate`),
    /// taken before it when a layer gives both: the `traceparent` text is then written only
    /// if the handler's request reads it.
    fn span_context(&self) -> Option<(SpanIds, Option<String>)> {
        None
    }

    /// Called instead of [`finish`](Completion::finish), with the JSON-RPC response about to
    /// be sent, when the layer [`captures payloads`](Layer::captures_payloads). The response
    /// is sent after this returns, so keep it quick.
    fn finish_with_response(
        self: Box<Self>,
        info: &RequestInfo,
        outcome: &Outcome,
        response: &[u8],
    ) {
        let _ = response;
        self.finish(info, outcome);
    }
}

/// How a layer wants to hear the outcome of a request it started.
pub enum Observe {
    /// Not at all.
    Nothing,
    /// Through [`Layer::finish`]: for a layer that keeps nothing per request (a duration
    /// histogram reads all it needs off the [`RequestInfo`]), so nothing is allocated for it.
    Outcome,
    /// Through this completion, which carries what the layer keeps per request (a span).
    Completion(Box<dyn Completion>),
}

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Observe::Nothing => "Nothing",
            Observe::Outcome => "Outcome",
            Observe::Completion(_) => "Completion",
        })
    }
}

/// A middleware layer.
pub trait Layer: Send + Sync + 'static {
    /// Called before the request is dispatched. `Err` rejects it with that JSON-RPC error;
    /// otherwise the layer says how it wants to hear the outcome ([`Observe`]).
    fn start(&self, info: &RequestInfo) -> Result<Observe, ErrorObject>;

    /// The outcome of a request whose [`start`](Layer::start) answered [`Observe::Outcome`].
    fn finish(&self, info: &RequestInfo, outcome: &Outcome) {
        let _ = (info, outcome);
    }

    /// True when this layer looks at requests of `method` (the default: all). A request no
    /// layer looks at is not described at all: no [`RequestInfo`] is built for it (a
    /// gateway's listing guard, say, then costs its forwarded calls nothing).
    fn observes(&self, method: &str) -> bool {
        let _ = method;
        true
    }

    /// True when this layer wants the requests' payloads: [`RequestInfo::arguments`] filled
    /// in, and the response handed to [`Completion::finish_with_response`]. Asked once, when
    /// the server is built; off by default because it costs a copy of each.
    fn captures_payloads(&self) -> bool {
        false
    }

    /// Called once when a legacy session ends (its connection stopped).
    fn session_ended(&self, info: &SessionInfo) {
        let _ = info;
    }
}

/// The layers of a server, outermost first.
#[derive(Clone, Default)]
pub struct Layers {
    stack: Arc<[Arc<dyn Layer>]>,
    captures: bool,
}

impl Layers {
    /// Builds a stack from layers, outermost first.
    pub fn new(layers: Vec<Arc<dyn Layer>>) -> Self {
        let captures = layers.iter().any(|l| l.captures_payloads());
        if !layers.is_empty() {
            // The clock calibrates on its first reading: here, not in the first request.
            Moment::now();
        }
        Layers {
            stack: layers.into(),
            captures,
        }
    }
    /// Tells every layer that a legacy session ended.
    pub(crate) fn session_ended(&self, info: &SessionInfo) {
        for layer in self.stack.iter() {
            layer.session_ended(info);
        }
    }
    /// True when some layer wants the requests' payloads.
    pub(crate) fn captures(&self) -> bool {
        self.captures
    }
    /// True when no layer is installed (the request path then skips all of this).
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }
    /// True when some layer looks at requests of `method`.
    pub(crate) fn observe(&self, method: &str) -> bool {
        self.stack.iter().any(|l| l.observes(method))
    }
    /// Runs every layer's start hook; on rejection finishes the already started ones.
    pub(crate) fn start(&self, info: &RequestInfo) -> Result<Started, ErrorObject> {
        let mut done = Started::new();
        for layer in self.stack.iter() {
            if !layer.observes(&info.method) {
                continue;
            }
            match layer.start(info) {
                Ok(Observe::Nothing) => {}
                Ok(Observe::Outcome) => done.push(Finisher::Layer(layer.clone())),
                Ok(Observe::Completion(c)) => done.push(Finisher::Completion(c)),
                Err(e) => {
                    let outcome = Outcome::Error(e.code);
                    for f in done.into_iter().rev() {
                        f.finish(info, &outcome);
                    }
                    return Err(e);
                }
            }
        }
        Ok(done)
    }
}

/// What finishes one layer's view of a request.
pub(crate) enum Finisher {
    /// The layer itself ([`Observe::Outcome`]).
    Layer(Arc<dyn Layer>),
    /// Its completion ([`Observe::Completion`]).
    Completion(Box<dyn Completion>),
}

impl Finisher {
    fn finish(self, info: &RequestInfo, outcome: &Outcome) {
        match self {
            Finisher::Layer(l) => l.finish(info, outcome),
            Finisher::Completion(c) => c.finish(info, outcome),
        }
    }

    fn finish_with_response(self, info: &RequestInfo, outcome: &Outcome, response: &[u8]) {
        match self {
            Finisher::Layer(l) => l.finish(info, outcome),
            Finisher::Completion(c) => c.finish_with_response(info, outcome, response),
        }
    }

    /// The trace context a completion's span gives the handler.
    pub(crate) fn handler_trace(&self) -> Option<(Parent, Option<String>)> {
        match self {
            Finisher::Layer(_) => None,
            Finisher::Completion(c) => match c.span_context() {
                Some((ids, state)) => Some((Parent::span(ids), state)),
                None => c
                    .trace_context()
                    .map(|(parent, state)| (Parent::Text(parent), state)),
            },
        }
    }
}

/// The layers a request started, outermost first: inline for up to two layers, so
/// observing a request allocates no list.
pub(crate) type Started = smallvec::SmallVec<[Finisher; 2]>;

/// The started layers of one request, finished when the request ends.
pub(crate) struct Watch {
    pub(crate) info: RequestInfo,
    pub(crate) completions: Started,
    /// The layers want the response ([`Layer::captures_payloads`]).
    pub(crate) captures: bool,
}

impl Watch {
    pub(crate) fn finish(self, outcome: &Outcome) {
        for c in self.completions.into_iter().rev() {
            c.finish(&self.info, outcome);
        }
    }

    pub(crate) fn finish_with_response(self, outcome: &Outcome, response: &[u8]) {
        for c in self.completions.into_iter().rev() {
            c.finish_with_response(&self.info, outcome, response);
        }
    }
}
