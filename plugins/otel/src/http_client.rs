//! The HTTP calls a handler makes (the built-in connectors' fetch, search and API clients):
//! an HTTP CLIENT span per call, a child of the request's server span, and the HTTP
//! conventions' `http.client.request.duration`, through the core's
//! [`HttpCallObserver`](toolyard::HttpCallObserver) seam.
//!
//! The span follows the stable HTTP client conventions: named after the method (no URL
//! template is known for an arbitrary page), `http.request.method` (`_OTHER` with
//! `http.request.method_original` for a method outside the standard set), `url.full`,
//! `server.address`, `server.port`, `http.response.status_code`, and for a status of 400 or
//! more or a call with no answer, `error.type` and an error status. The call carries this
//! span's context, so the page or API it reaches parents on it.
//!
//! `url.full` is redacted as the conventions ask: user info becomes `REDACTED:REDACTED`, and
//! every query value becomes `REDACTED` (a tool's URL is the caller's to choose, and an API
//! key in a query string is common; which keys are secret cannot be known in general).

use crate::propagation::{parent_context, trace_headers};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};
use opentelemetry::KeyValue;
use toolyard::Moment;
use toolyard::{HttpCallObserver, HttpCallOutcome, ObservedHttpCall, OutgoingHttpCall};

const HTTP_REQUEST_METHOD: &str = "http.request.method";
const HTTP_REQUEST_METHOD_ORIGINAL: &str = "http.request.method_original";
const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
const URL_FULL: &str = "url.full";
const SERVER_PORT: &str = "server.port";
const CLIENT_REQUEST_DURATION: &str = "http.client.request.duration";

/// The HTTP conventions' boundaries for request durations, in seconds.
const DURATION_BOUNDARIES: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Observes every HTTP call a handler makes (see the module docs).
pub struct HttpClientObserver {
    tracer: BoxedTracer,
    /// False when no traces are exported (metrics only): no span is built.
    spans: bool,
    duration: Histogram<f64>,
}

impl std::fmt::Debug for HttpClientObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClientObserver")
    }
}

impl HttpClientObserver {
    /// An observer over the global tracer and meter providers.
    pub fn global() -> Self {
        Self::new(
            opentelemetry::global::tracer(crate::SCOPE),
            &opentelemetry::global::meter(crate::SCOPE),
        )
    }

    /// An observer over a tracer and a meter of your own.
    pub fn new(tracer: BoxedTracer, meter: &Meter) -> Self {
        HttpClientObserver {
            tracer,
            spans: true,
            duration: meter
                .f64_histogram(CLIENT_REQUEST_DURATION)
                .with_unit("s")
                .with_description("Duration of HTTP client requests")
                .with_boundaries(DURATION_BOUNDARIES.to_vec())
                .build(),
        }
    }

    /// Records durations only, building no span; the call then carries the request's own
    /// trace context.
    #[must_use]
    pub fn without_spans(mut self) -> Self {
        self.spans = false;
        self
    }
}

impl HttpCallObserver for HttpClientObserver {
    fn start(&self, call: &OutgoingHttpCall<'_>) -> Option<Box<dyn ObservedHttpCall>> {
        let url = reqwest::Url::parse(call.url).ok();
        let mut attributes = method_attributes(call.method);
        if let Some(host) = url.as_ref().and_then(|u| u.host_str()) {
            attributes.push(KeyValue::new(
                crate::semconv::SERVER_ADDRESS,
                host.to_owned(),
            ));
        }
        if let Some(port) = url.as_ref().and_then(|u| u.port_or_known_default()) {
            attributes.push(KeyValue::new(SERVER_PORT, i64::from(port)));
        }
        let span = self.spans.then(|| {
            let mut span_attributes = attributes.clone();
            if let Some(u) = &url {
                span_attributes.push(KeyValue::new(URL_FULL, redacted(u)));
            }
            let name = match call.method {
                m if standard_method(m) => m.to_owned(),
                _ => "HTTP".to_owned(),
            };
            self.tracer
                .span_builder(name)
                .with_kind(SpanKind::Client)
                .with_attributes(span_attributes)
                .start_with_context(
                    &self.tracer,
                    &parent_context(call.traceparent, call.tracestate),
                )
        });
        let trace = span.as_ref().and_then(|s| trace_headers(s.span_context()));
        Some(Box::new(HttpClientSpan {
            span,
            trace,
            duration: self.duration.clone(),
            attributes,
            started: Moment::now(),
        }))
    }
}

struct HttpClientSpan {
    /// `None` when the observer builds no spans (metrics only).
    span: Option<BoxedSpan>,
    trace: Option<(String, Option<String>)>,
    duration: Histogram<f64>,
    /// The metric's attributes (the span's, less `url.full`).
    attributes: Vec<KeyValue>,
    started: Moment,
}

impl ObservedHttpCall for HttpClientSpan {
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        self.trace.clone()
    }

    fn finish(self: Box<Self>, outcome: HttpCallOutcome<'_>) {
        let HttpClientSpan {
            span,
            duration,
            mut attributes,
            started,
            ..
        } = *self;
        let mut ended = Vec::with_capacity(2);
        let error = match outcome {
            HttpCallOutcome::Status(code) => {
                ended.push(KeyValue::new(HTTP_RESPONSE_STATUS_CODE, i64::from(code)));
                (code >= 400).then(|| code.to_string())
            }
            HttpCallOutcome::Failed(kind) => Some(kind.to_owned()),
        };
        if let Some(kind) = &error {
            ended.push(KeyValue::new(crate::semconv::ERROR_TYPE, kind.clone()));
        }
        attributes.extend(ended.iter().cloned());
        duration.record(started.elapsed().as_secs_f64(), &attributes);
        let Some(mut span) = span else { return };
        span.set_attributes(ended);
        if let Some(kind) = error {
            span.set_status(Status::error(kind));
        }
        span.end();
    }
}

fn standard_method(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE" | "PATCH"
    )
}

/// `http.request.method`, and the method as sent when it is not a standard one.
fn method_attributes(method: &str) -> Vec<KeyValue> {
    if standard_method(method) {
        vec![KeyValue::new(HTTP_REQUEST_METHOD, method.to_owned())]
    } else {
        vec![
            KeyValue::new(HTTP_REQUEST_METHOD, "_OTHER"),
            KeyValue::new(HTTP_REQUEST_METHOD_ORIGINAL, method.to_owned()),
        ]
    }
}

/// The URL with its user info and query values redacted (see the module docs).
fn redacted(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        // Only a URL that cannot be a base refuses these, and such a URL has no user info.
        let _ = url.set_username("REDACTED");
        let _ = url.set_password(Some("REDACTED"));
    }
    if url.query().is_some() {
        let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(keys.iter().map(|k| (k, "REDACTED")));
    }
    url.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_user_info_and_query_values_are_redacted_and_the_rest_kept() {
        let url = |s: &str| reqwest::Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(
            redacted(&url(
                "https://user:pw@api.example.com:8443/a/b?key=s3cret&q=x#top"
            )),
            "https://REDACTED:REDACTED@api.example.com:8443/a/b?key=REDACTED&q=REDACTED#top"
        );
        assert_eq!(
            redacted(&url("http://example.com/page")),
            "http://example.com/page"
        );
    }

    #[test]
    fn a_method_outside_the_standard_set_is_other_with_the_original_kept() {
        assert_eq!(
            method_attributes("GET"),
            vec![KeyValue::new(HTTP_REQUEST_METHOD, "GET")]
        );
        assert_eq!(
            method_attributes("PROPFIND"),
            vec![
                KeyValue::new(HTTP_REQUEST_METHOD, "_OTHER"),
                KeyValue::new(HTTP_REQUEST_METHOD_ORIGINAL, "PROPFIND"),
            ]
        );
    }
}
