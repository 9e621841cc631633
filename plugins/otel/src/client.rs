//! The client side: a CLIENT span and `mcp.client.operation.duration` around every request
//! a Toolyard client sends (the CLI, the gateway's upstream calls, NATS forwarding, the
//! agent), installed per client or process-wide
//! ([`set_default_observer`](toolyard_client::set_default_observer)).

use crate::points::{DurationPoints, Side};
use crate::propagation::{parent_context, traceparent_of};
use crate::semconv::{self, span_name, target_attribute};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::metrics::Meter;
use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use std::sync::Arc;
use toolyard::Moment;
use toolyard_client::{ObservedRequest, OutgoingRequest, RequestObserver, RequestOutcome};

/// Observes every request a client sends (see the module docs).
pub struct ClientObserver {
    tracer: BoxedTracer,
    /// False when no traces are exported (metrics only): no span is built at all.
    spans: bool,
    duration: Arc<DurationPoints>,
}

impl std::fmt::Debug for ClientObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientObserver")
    }
}

impl ClientObserver {
    /// An observer over the global tracer and meter providers.
    pub fn global() -> Self {
        Self::new(
            opentelemetry::global::tracer(crate::SCOPE),
            &opentelemetry::global::meter(crate::SCOPE),
        )
    }

    /// An observer over a tracer and a meter of your own.
    pub fn new(tracer: BoxedTracer, meter: &Meter) -> Self {
        ClientObserver {
            tracer,
            spans: true,
            duration: Arc::new(DurationPoints::new(
                semconv::duration_histogram(
                    meter,
                    semconv::CLIENT_DURATION,
                    "Duration of MCP requests as seen by the client",
                ),
                Side::Client,
            )),
        }
    }

    /// Records durations only, building no span (when no traces are exported); the request
    /// then carries its caller's trace context as it would without an observer.
    #[must_use]
    pub fn without_spans(mut self) -> Self {
        self.spans = false;
        self
    }
}

impl RequestObserver for ClientObserver {
    fn start(&self, request: &OutgoingRequest<'_>) -> Option<Box<dyn ObservedRequest>> {
        let method = request.method;
        let tool = request.target.filter(|_| method == "tools/call");
        if !self.spans {
            return Some(Box::new(ClientSpan {
                span: None,
                trace: None,
                duration: self.duration.clone(),
                method: method.into(),
                tool: tool.map(Into::into),
                started: Moment::now(),
            }));
        }
        let parent = parent_context(request.traceparent, request.tracestate);
        let mut attributes = vec![KeyValue::new(semconv::MCP_METHOD_NAME, method.to_owned())];
        if let (Some(key), Some(t)) = (target_attribute(method), request.target) {
            attributes.push(KeyValue::new(key, t.to_owned()));
        }
        if method == "tools/call" {
            attributes.push(KeyValue::new(
                semconv::GEN_AI_OPERATION_NAME,
                "execute_tool",
            ));
        }
        if let Some(server) = request.server {
            attributes.push(KeyValue::new(semconv::SERVER_ADDRESS, server.to_owned()));
        }
        let span = self
            .tracer
            .span_builder(span_name(method, request.target))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        Some(Box::new(ClientSpan {
            span: Some(span),
            trace: traceparent_of(&cx),
            duration: self.duration.clone(),
            method: method.into(),
            tool: tool.map(Into::into),
            started: Moment::now(),
        }))
    }
}

struct ClientSpan {
    /// `None` when the observer builds no spans (metrics only).
    span: Option<BoxedSpan>,
    trace: Option<(String, Option<String>)>,
    duration: Arc<DurationPoints>,
    method: Box<str>,
    tool: Option<Box<str>>,
    started: Moment,
}

impl ObservedRequest for ClientSpan {
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        self.trace.clone()
    }

    fn answered_by(&mut self, instance: &str) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new(
                semconv::TOOLYARD_ANSWERED_BY,
                instance.to_owned(),
            ));
        }
    }

    fn finish(self: Box<Self>, outcome: RequestOutcome<'_>) {
        let ClientSpan {
            span,
            duration,
            method,
            tool,
            started,
            ..
        } = *self;
        duration.record_client(
            started.elapsed().as_secs_f64(),
            &method,
            tool.as_deref(),
            &outcome,
        );
        let Some(mut span) = span else { return };
        match outcome {
            RequestOutcome::Ok => {}
            RequestOutcome::ToolError => {
                span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, semconv::TOOL_ERROR));
                span.set_status(Status::error("the tool reported an error"));
            }
            RequestOutcome::Rpc(code) => {
                let text = code.to_string();
                span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, text.clone()));
                span.set_attribute(KeyValue::new(
                    semconv::RPC_RESPONSE_STATUS_CODE,
                    text.clone(),
                ));
                // For the client every error answer is a failed operation, its own fault
                // included.
                span.set_status(Status::error(format!("JSON-RPC error {text}")));
            }
            RequestOutcome::Failed(kind) => {
                span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, kind.to_owned()));
                span.set_status(Status::error(kind.to_owned()));
            }
        }
        span.end();
    }
}
