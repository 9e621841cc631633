//! The request's trace context (and baggage) on a connector's outbound HTTP calls, so that
//! the API or page a tool calls joins the caller's trace (issue 15: one trace from the
//! client through a gateway and NATS to a worker's tool and the HTTP call it makes), and
//! each call observed
//! by the process's [`toolyard::HttpCallObserver`] (the telemetry plugin's: an HTTP CLIENT
//! span and `http.client.request.duration`).
//!
//! Why the task-local rather than the handler's `RequestContext`: the HTTP calls are made
//! deep inside each connector's client (retries, redirects, token refreshes), always on the
//! handler's own task, where [`toolyard::request_traceparent`] has the request's context: the
//! telemetry layer's server span when telemetry is on, else what the caller sent. Each
//! attempt (a retry, a redirect's next hop) is a call of its own, as HTTP's conventions
//! count them.

use reqwest::header::HeaderValue;
use toolyard::{HttpCallOutcome, OutgoingHttpCall};

/// Sends what `builder` built, carrying the running request's trace context (or the
/// observer's span's, when an observer is set) and reporting the outcome to the observer.
pub(crate) async fn send(builder: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    let (client, request) = builder.build_split();
    let mut request = request?;
    let traceparent = toolyard::request_traceparent();
    let tracestate = toolyard::request_tracestate();
    let observed = toolyard::http_call_observer().and_then(|observer| {
        observer.start(&OutgoingHttpCall {
            method: request.method().as_str(),
            url: request.url().as_str(),
            traceparent: traceparent.as_ref().map(|tp| tp.as_str()),
            tracestate: tracestate.as_deref(),
        })
    });
    let (parent, state) = match observed.as_ref().and_then(|o| o.trace_context()) {
        Some((tp, ts)) => (Some(tp), ts),
        None => (traceparent.map(|tp| tp.as_str().to_owned()), tracestate),
    };
    let headers = request.headers_mut();
    // The `traceparent` is checked or the SDK's, but a caller's `tracestate` and `baggage`
    // are free text: a value that is not a valid header value is left off rather than
    // failing the call.
    let baggage = toolyard::request_baggage();
    for (name, value) in [
        ("traceparent", parent),
        ("tracestate", state),
        ("baggage", baggage),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::try_from(v).ok()) {
            headers.insert(name, value);
        }
    }
    let answer = client.execute(request).await;
    if let Some(observed) = observed {
        observed.finish(match &answer {
            Ok(response) => HttpCallOutcome::Status(response.status().as_u16()),
            Err(e) => HttpCallOutcome::Failed(failure_kind(e)),
        });
    }
    answer
}

/// The `error.type` of a call that got no answer.
fn failure_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_redirect() {
        "redirect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    }
}
