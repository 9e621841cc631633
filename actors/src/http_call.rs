//! The observability seam for the HTTP calls a handler makes (the built-in connectors' fetch,
//! web search, GitHub, Slack and Google Drive clients): an [`HttpCallObserver`] sees each
//! call and how it ended, and may give it a trace context of its own (an HTTP CLIENT span's),
//! which the call then carries as its `traceparent`/`tracestate` headers instead of the
//! request's.
//!
//! It lives in the core, free of any HTTP client type, so that the crates making the calls
//! and the telemetry plugin observing them need not know each other; and process-wide
//! ([`set_http_call_observer`]), as the client's `set_default_observer` is, because the
//! connectors' clients are built deep inside their handlers.

use std::sync::{Arc, OnceLock};

/// What an observer learns of an outgoing HTTP call.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingHttpCall<'a> {
    /// The HTTP method, as sent (`GET`).
    pub method: &'a str,
    /// The URL, as sent: it may carry credentials in its user info or query, which an
    /// observer that records it must redact.
    pub url: &'a str,
    /// The running request's `traceparent` (the parent of a new span).
    pub traceparent: Option<&'a str>,
    /// The running request's `tracestate`.
    pub tracestate: Option<&'a str>,
}

/// How an outgoing HTTP call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpCallOutcome<'a> {
    /// An answer with this status (a redirect, a 4xx and a 5xx included).
    Status(u16),
    /// No answer: a short kind (`timeout`, `connect`, `request`, ...).
    Failed(&'a str),
}

/// Sees every HTTP call a handler makes through a client that reports to it.
pub trait HttpCallObserver: Send + Sync + 'static {
    /// Called before the call is sent; the returned value (if any) is finished with the
    /// outcome.
    fn start(&self, call: &OutgoingHttpCall<'_>) -> Option<Box<dyn ObservedHttpCall>>;
}

/// One observed HTTP call.
pub trait ObservedHttpCall: Send + 'static {
    /// The `traceparent` and `tracestate` the call carries instead of the request's.
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        None
    }
    /// Called once with the outcome.
    fn finish(self: Box<Self>, outcome: HttpCallOutcome<'_>);
}

static OBSERVER: OnceLock<Arc<dyn HttpCallObserver>> = OnceLock::new();

/// Sets the observer of every HTTP call made from now on. Only the first call takes effect
/// (it returns `false` for the others).
pub fn set_http_call_observer(observer: Arc<dyn HttpCallObserver>) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// The observer set with [`set_http_call_observer`], if any.
pub fn http_call_observer() -> Option<&'static Arc<dyn HttpCallObserver>> {
    OBSERVER.get()
}
