//! The server side: one [`Layer`] that gives every request a SERVER span and a
//! `mcp.server.operation.duration` point, whatever the transport.

use crate::capture::{CaptureSettings, Redactor};
use crate::direct::{DirectServerSpans, DirectSpans};
use crate::points::{DurationPoints, Side};
use crate::propagation::{parent_context, span_ids};
use crate::semconv::{self, caller_fault, span_name, target_attribute};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, StringValue};
use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::Arc;
use toolyard::proto::{ErrorObject, RequestId};
use toolyard::{Completion, Layer, Observe, Outcome, RequestInfo, SessionInfo};

/// Observes every request a server handles (see the crate docs). Install it with
/// `ServerBuilder::layer`; put it outermost so its span covers the other layers' work.
pub struct ObservabilityLayer {
    tracer: BoxedTracer,
    /// False when no traces are exported (metrics only): no span is built at all.
    spans: bool,
    duration: Arc<DurationPoints>,
    sessions: Histogram<f64>,
    capture: Option<Arc<Redactor>>,
    /// Our own OTLP pipeline's queue, when the spans go there without the SDK's span
    /// (`crate::direct`).
    direct: Option<Arc<DirectServerSpans>>,
}

impl std::fmt::Debug for ObservabilityLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObservabilityLayer")
    }
}

impl ObservabilityLayer {
    /// A layer over the global tracer and meter providers (what [`Telemetry`](crate::Telemetry)
    /// installs).
    pub fn global() -> Self {
        Self::new(
            opentelemetry::global::tracer(crate::SCOPE),
            &opentelemetry::global::meter(crate::SCOPE),
        )
    }

    /// A layer over a tracer and a meter of your own (tests, several pipelines).
    pub fn new(tracer: BoxedTracer, meter: &Meter) -> Self {
        ObservabilityLayer {
            tracer,
            spans: true,
            duration: Arc::new(DurationPoints::new(
                semconv::duration_histogram(
                    meter,
                    semconv::SERVER_DURATION,
                    "Duration of MCP requests as handled by the server",
                ),
                Side::Server,
            )),
            sessions: semconv::duration_histogram(
                meter,
                semconv::SESSION_DURATION,
                "Duration of MCP sessions as observed by the server",
            ),
            capture: None,
            direct: None,
        }
    }

    /// Writes the spans into our OTLP processor's queue without the SDK's span object
    /// (see `crate::direct`); only for the pipeline [`Telemetry`](crate::Telemetry) installs.
    #[must_use]
    pub(crate) fn with_direct_spans(mut self, direct: Arc<DirectSpans>) -> Self {
        self.direct = Some(Arc::new(DirectServerSpans::new(
            direct,
            self.duration.clone(),
            self.capture.clone(),
        )));
        self
    }

    /// Records durations only, building no span (when no traces are exported): a span over a
    /// no-op tracer still costs its name, its attributes and its context per request. The
    /// caller's own trace context is handed on to the handler as it came.
    #[must_use]
    pub fn without_spans(mut self) -> Self {
        self.spans = false;
        self
    }

    /// Also puts `tools/call` arguments and results on the span, redacted and capped as
    /// `settings` say (see [`CaptureSettings`]); nothing is captured when it captures nothing.
    #[must_use]
    pub fn with_capture(mut self, settings: &CaptureSettings) -> Self {
        self.capture = settings.is_on().then(|| Arc::new(Redactor::new(settings)));
        if let Some(direct) = self.direct.take() {
            self = self.with_direct_spans(direct.spans().clone());
        }
        self
    }
}

/// `client.address` as text. A connection's requests all come from one address, so the
/// text of the last one seen on this thread is kept and shared rather than formatted (and
/// allocated) per request.
fn address_text(ip: IpAddr) -> StringValue {
    thread_local! {
        static LAST: RefCell<Option<(IpAddr, StringValue)>> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((seen, text)) if *seen == ip => text.clone(),
            _ => {
                let text = StringValue::from(Arc::<str>::from(ip.to_string()));
                *last = Some((ip, text.clone()));
                text
            }
        }
    })
}

/// `jsonrpc.request.id`: a string id shared as it is, a number written without `core::fmt`.
fn id_text(id: &RequestId) -> StringValue {
    match id {
        RequestId::Number(n) => StringValue::from(itoa::Buffer::new().format(*n).to_owned()),
        RequestId::String(s) => StringValue::from(s.clone()),
    }
}

/// An attribute's value as [`request_attributes`] gives it: borrowed from the request where
/// it can be, so each way of writing a span takes it as it needs it (the SDK's span as an
/// `opentelemetry::Value` sharing the request's strings, the direct path as text).
pub(crate) enum Attr<'a> {
    Static(&'static str),
    Shared(&'a Arc<str>),
    Value(StringValue),
    /// A JSON-RPC id that is a number: its text.
    IdNumber(i64),
    Int(i64),
}

impl Attr<'_> {
    fn into_value(self) -> opentelemetry::Value {
        match self {
            Attr::Static(s) => s.into(),
            Attr::Shared(s) => StringValue::from(s.clone()).into(),
            Attr::Value(v) => v.into(),
            Attr::IdNumber(n) => id_text(&RequestId::Number(n)).into(),
            Attr::Int(i) => i.into(),
        }
    }
}

/// The attributes of a request's SERVER span, in the order the span carries them: one list
/// for both ways a span is written (the SDK's span, [`crate::direct`]). Those a
/// connection's requests share come first ([`shared_attributes`]), then the request's own
/// ([`own_attributes`]), so the direct path writes the first part once per connection.
pub(crate) fn request_attributes<'a>(
    info: &'a RequestInfo,
    capture: Option<&Redactor>,
    mut put: impl FnMut(&'static str, Attr<'a>),
) {
    shared_attributes(info, &mut put);
    own_attributes(info, capture, put);
}

/// The attributes that follow from a request's method, revision, session and peer only:
/// the same for every `tools/call` of a connection.
pub(crate) fn shared_attributes<'a>(
    info: &'a RequestInfo,
    mut put: impl FnMut(&'static str, Attr<'a>),
) {
    put(semconv::MCP_METHOD_NAME, Attr::Shared(&info.method));
    if &*info.method == "tools/call" {
        put(semconv::GEN_AI_OPERATION_NAME, Attr::Static("execute_tool"));
    }
    if let Some(v) = &info.protocol_version {
        put(semconv::MCP_PROTOCOL_VERSION, Attr::Static(v.as_str()));
    }
    // Legacy sessions only: modern requests have none.
    if let Some(session) = &info.session_id {
        put(semconv::MCP_SESSION_ID, Attr::Shared(session));
    }
    if let Some(peer) = &info.peer {
        put(semconv::NETWORK_TRANSPORT, Attr::Static(peer.transport));
        if let Some(protocol) = peer.protocol {
            put(semconv::NETWORK_PROTOCOL_NAME, Attr::Static(protocol));
        }
        if let Some(a) = peer.address {
            put(semconv::CLIENT_ADDRESS, Attr::Value(address_text(a.ip())));
            put(semconv::CLIENT_PORT, Attr::Int(i64::from(a.port())));
        }
        if let Some(m) = &peer.messaging {
            put(semconv::MESSAGING_SYSTEM, Attr::Static(m.system));
            put(
                semconv::MESSAGING_DESTINATION_NAME,
                Attr::Shared(&m.destination),
            );
            if let Some(group) = &m.consumer_group {
                put(semconv::MESSAGING_CONSUMER_GROUP_NAME, Attr::Shared(group));
            }
        }
    }
}

/// The attributes of the request itself: its id, its target, its captured arguments.
pub(crate) fn own_attributes<'a>(
    info: &'a RequestInfo,
    capture: Option<&Redactor>,
    mut put: impl FnMut(&'static str, Attr<'a>),
) {
    put(
        semconv::JSONRPC_REQUEST_ID,
        match &info.id {
            RequestId::Number(n) => Attr::IdNumber(*n),
            RequestId::String(s) => Attr::Shared(s),
        },
    );
    if let (Some(key), Some(t)) = (target_attribute(&info.method), &info.target) {
        put(key, Attr::Shared(t));
    }
    if let (Some(r), Some(args)) = (capture, &info.arguments) {
        if r.arguments && &*info.method == "tools/call" {
            put(
                semconv::GEN_AI_TOOL_CALL_ARGUMENTS,
                Attr::Value(r.render(args).into()),
            );
        }
    }
}

/// What an outcome adds to a SERVER span: `error.type`, `rpc.response.status_code`, and
/// its status (a caller's fault is no error of the server's).
pub(crate) fn outcome_attributes(
    outcome: &Outcome,
    mut put: impl FnMut(&'static str, StringValue),
) -> Status {
    match outcome {
        Outcome::Ok | Outcome::InputRequired => Status::Unset,
        Outcome::ToolError => {
            put(semconv::ERROR_TYPE, semconv::TOOL_ERROR.into());
            Status::error("the tool reported an error")
        }
        Outcome::Error(code) => {
            let text = StringValue::from(code.to_string());
            put(semconv::ERROR_TYPE, text.clone());
            put(semconv::RPC_RESPONSE_STATUS_CODE, text);
            if caller_fault(*code) {
                Status::Unset
            } else {
                Status::error(format!("JSON-RPC error {code}"))
            }
        }
        Outcome::Cancelled => {
            put(semconv::ERROR_TYPE, "cancelled".into());
            Status::Unset
        }
    }
}

impl Layer for ObservabilityLayer {
    fn start(&self, info: &RequestInfo) -> Result<Observe, ErrorObject> {
        if !self.spans {
            // Durations only: `finish` reads all it needs off the request. The caller's own
            // trace context reaches the handler as it came, as a span would have parented.
            return Ok(Observe::Outcome);
        }
        let method: &str = &info.method;
        let target = info.target.as_deref();
        // The span parents on the `_meta` context (SEP-414) and links the transport's own (an
        // HTTP `traceparent` header, a NATS one); with no `_meta` context it parents on the
        // transport's.
        let transport = info
            .transport_trace
            .as_deref()
            .filter(|t| t.traceparent.is_some())
            .map(|t| parent_context(t.traceparent.as_deref(), t.tracestate.as_deref()))
            .filter(|cx| cx.span().span_context().is_valid());
        let (parent, link) = match (&info.traceparent, transport) {
            (Some(tp), transport) => (
                parent_context(Some(tp), info.tracestate.as_deref()),
                transport,
            ),
            (None, Some(transport)) => (transport, None),
            (None, None) => (Context::new(), None),
        };
        let link = link
            .map(|cx| cx.span().span_context().clone())
            .filter(|sc| sc != parent.span().span_context());
        if let Some(direct) = &self.direct {
            return Ok(Observe::Completion(Box::new(direct.start(&parent, link))));
        }
        // The request's own strings are shared (`Arc<str>`), not copied, and the revision
        // is a `&'static str`: the span path allocates as little as it can (one list, sized
        // for every attribute a request can have).
        let mut attributes = Vec::with_capacity(10);
        request_attributes(info, self.capture.as_deref(), |key, value| {
            attributes.push(KeyValue::new(key, value.into_value()));
        });
        let mut builder = self
            .tracer
            .span_builder(span_name(method, target))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes);
        if let Some(sc) = link {
            builder = builder.with_links(vec![opentelemetry::trace::Link::with_context(sc)]);
        }
        let span = builder.start_with_context(&self.tracer, &parent);
        Ok(Observe::Completion(Box::new(ServerSpan {
            span,
            duration: self.duration.clone(),
            capture: self.capture.clone().filter(|r| r.results),
        })))
    }

    fn finish(&self, info: &RequestInfo, outcome: &Outcome) {
        self.duration.record(info, outcome);
    }

    fn captures_payloads(&self) -> bool {
        self.capture.is_some()
    }

    fn session_ended(&self, info: &SessionInfo) {
        let mut point = vec![KeyValue::new(
            semconv::MCP_PROTOCOL_VERSION,
            info.protocol_version.as_str().to_owned(),
        )];
        if let Some(peer) = &info.peer {
            point.push(KeyValue::new(semconv::NETWORK_TRANSPORT, peer.transport));
        }
        self.sessions
            .record(info.started.elapsed().as_secs_f64(), &point);
    }
}

struct ServerSpan {
    span: BoxedSpan,
    duration: Arc<DurationPoints>,
    /// Set when results are captured.
    capture: Option<Arc<Redactor>>,
}

impl Completion for ServerSpan {
    // Its ids: written as text only if the handler's request reads them.
    fn span_context(&self) -> Option<(toolyard::SpanIds, Option<String>)> {
        span_ids(self.span.span_context())
    }

    fn finish_with_response(
        mut self: Box<Self>,
        info: &RequestInfo,
        outcome: &Outcome,
        response: &[u8],
    ) {
        if let Some(r) = &self.capture {
            if &*info.method == "tools/call" {
                if let Some(result) = r.render_result(response) {
                    self.span
                        .set_attribute(KeyValue::new(semconv::GEN_AI_TOOL_CALL_RESULT, result));
                }
            }
        }
        self.finish(info, outcome);
    }

    fn finish(self: Box<Self>, info: &RequestInfo, outcome: &Outcome) {
        let ServerSpan {
            mut span, duration, ..
        } = *self;
        duration.record(info, outcome);
        let status = outcome_attributes(outcome, |key, value| {
            span.set_attribute(KeyValue::new(key, value));
        });
        if status != Status::Unset {
            span.set_status(status);
        }
        span.end();
    }
}
