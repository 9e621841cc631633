//! The request's trace context on a connector's outbound HTTP requests, so that the API or
//! page a tool calls joins the caller's trace (issue 15: one trace from the client through
//! a gateway and NATS to a worker's tool and the HTTP call it makes).
//!
//! Why the task-local rather than the handler's `RequestContext`: the HTTP calls are made
//! deep inside each connector's client (retries, redirects, token refreshes), always on the
//! handler's own task, where [`toolyard::request_traceparent`] has the request's context: the
//! telemetry layer's server span when telemetry is on (so the outbound call is its child),
//! else what the caller sent. Only `traceparent` is carried: `tracestate` is optional in W3C
//! Trace Context, and the task-local holds the checked `traceparent` alone.

/// `builder` with the running request's `traceparent` header, when it has one.
pub(crate) fn with_trace_context(builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match toolyard::request_traceparent() {
        Some(tp) => builder.header("traceparent", tp.as_str()),
        None => builder,
    }
}
