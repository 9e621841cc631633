//! The client's observability seam: a [`RequestObserver`] sees every request the client
//! sends and its outcome, and may give the request a trace context of its own (a CLIENT
//! span's), which the request then carries in `_meta` (`traceparent`, `tracestate`,
//! replacing the caller's) and, over HTTP, as headers.
//!
//! One observer per process is the usual need (the gateway's upstream clients, NATS
//! forwarding, the CLI and the agent all build clients of their own), so besides
//! [`ClientBuilder::observe`](crate::ClientBuilder::observe) there is a process-wide default,
//! [`set_default_observer`], that every later client picks up, as `tracing` does with its
//! global dispatcher.

use std::sync::{Arc, OnceLock};

/// What an observer learns of an outgoing request.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingRequest<'a> {
    /// JSON-RPC method.
    pub method: &'a str,
    /// The tool or prompt name, or the resource URI, when the request names one.
    pub target: Option<&'a str>,
    /// The `traceparent` the caller put in `_meta` (the parent of a new span).
    pub traceparent: Option<&'a str>,
    /// The `tracestate` the caller put in `_meta`.
    pub tracestate: Option<&'a str>,
    /// The server's name from its `serverInfo`, once known.
    pub server: Option<&'a str>,
}

/// How an outgoing request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome<'a> {
    /// A result.
    Ok,
    /// A tool result with `isError: true`.
    ToolError,
    /// A JSON-RPC error with this code.
    Rpc(i32),
    /// No answer: timed out, cancelled, or the connection failed (a short kind, e.g.
    /// `timeout`, `transport`, `closed`).
    Failed(&'a str),
}

/// Sees every request a client sends.
pub trait RequestObserver: Send + Sync + 'static {
    /// Called before the request is sent; the returned span (if any) is finished with the
    /// outcome.
    fn start(&self, request: &OutgoingRequest<'_>) -> Option<Box<dyn ObservedRequest>>;
}

/// One observed request.
pub trait ObservedRequest: Send + 'static {
    /// The W3C `traceparent` and `tracestate` the request carries instead of the caller's.
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        None
    }
    /// Which instance answered, when the transport names one (the NATS bridge's worker,
    /// from its terminal frame's `Mcp-Worker`): called at most once, before
    /// [`finish`](ObservedRequest::finish), so a span can say which of many workers served it.
    fn answered_by(&mut self, _instance: &str) {}
    /// Called once with the outcome.
    fn finish(self: Box<Self>, outcome: RequestOutcome<'_>);
}

static DEFAULT: OnceLock<Arc<dyn RequestObserver>> = OnceLock::new();

/// Sets the observer every client built after this call uses unless its builder sets one.
/// Only the first call takes effect (it returns `false` for the others).
pub fn set_default_observer(observer: Arc<dyn RequestObserver>) -> bool {
    DEFAULT.set(observer).is_ok()
}

/// The process-wide default observer, if one was set: for transports that send MCP requests
/// without a [`Client`](crate::Client) (the NATS bridge's forwarding) to be observed alike.
pub fn default_observer() -> Option<Arc<dyn RequestObserver>> {
    DEFAULT.get().cloned()
}
