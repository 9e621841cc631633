//! The server's SERVER spans written straight into the OTLP batch, with no span object of
//! the SDK's in between.
//!
//! Why: through the SDK, a request's span is a boxed `Span` built by a `dyn` tracer, a list
//! of `KeyValue`s, a `SpanData` moved out at its end and dropped after it is written: 5 260
//! of the 5 550 instructions full tracing added to a traced `tools/call` over stdio
//! (`benches/callgrind.sh stdio-full`, stop 42), three times the 15% the issue allows. Here
//! a request's span keeps its ids and its links until it ends (it runs from the request's
//! acceptance, `RequestInfo::started`, to its end: the duration the histogram records), and
//! is then written as protobuf from the request's own fields (the attributes of
//! `server::request_attributes`, the one list both paths write; those a connection's requests
//! share written once per connection and copied), into the queue of our
//! OTLP/HTTP processor (`otlp::processor::SpanSink`): same batches, limits, counts,
//! flushes and shutdown as the SDK's spans.
//!
//! When: only where [`Telemetry`](crate::Telemetry) installed that processor, whose
//! provider is built with the SDK's default configuration. [`DirectSpans::new`] takes the
//! sampler and id generator from that same configuration (`Config::default()` reads the
//! same `OTEL_TRACES_SAMPLER`/`_ARG`), so a request is sampled as the SDK would sample it. An
//! embedder's own tracer ([`ObservabilityLayer::new`](crate::ObservabilityLayer::new)) keeps
//! the SDK's span, with every processor it has. The sampler is asked without the span's
//! name and attributes: the samplers those variables choose read neither.
//!
//! The test beside this file decodes what both paths write for the same requests and
//! compares every field but the ids and times.

use crate::capture::Redactor;
use crate::otlp::{write_span_attribute, AttrValue, SpanEncoder, SpanHead, SpanSink};
use crate::points::DurationPoints;
use crate::propagation::span_ids;
use crate::semconv::{target_attribute, GEN_AI_TOOL_CALL_RESULT};
use crate::server::{outcome_attributes, own_attributes, shared_attributes, Attr};
use crate::wall_clock::unix_nanos_at;
use opentelemetry::trace::{Link, SpanContext, SpanKind, TraceContextExt, TraceFlags};
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::trace::{IdGenerator, SamplingDecision, ShouldSample};
use std::cell::RefCell;
use std::sync::Arc;
use toolyard::proto::ProtocolVersion;
use toolyard::{Completion, Moment, Outcome, Peer, RequestInfo};

/// See the module documentation.
pub(crate) struct DirectSpans {
    sink: SpanSink,
    sampler: Box<dyn ShouldSample>,
    ids: Box<dyn IdGenerator>,
    scope: InstrumentationScope,
}

impl std::fmt::Debug for DirectSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirectSpans")
    }
}

impl DirectSpans {
    /// Spans written into `sink`, sampled and numbered as a provider built with the SDK's
    /// default configuration would (see the module documentation).
    pub(crate) fn new(sink: SpanSink) -> DirectSpans {
        let config = opentelemetry_sdk::trace::Config::default();
        DirectSpans {
            sink,
            sampler: config.sampler,
            ids: config.id_generator,
            scope: InstrumentationScope::builder(crate::SCOPE).build(),
        }
    }
}

/// A layer's direct spans with what their ends record besides (its histogram, its capture
/// settings): one `Arc` a request holds until its end, where three were cloned and dropped
/// (two atomic operations each) per traced request.
pub(crate) struct DirectServerSpans {
    spans: Arc<DirectSpans>,
    duration: Arc<DurationPoints>,
    capture: Option<Arc<Redactor>>,
}

impl DirectServerSpans {
    pub(crate) fn new(
        spans: Arc<DirectSpans>,
        duration: Arc<DurationPoints>,
        capture: Option<Arc<Redactor>>,
    ) -> DirectServerSpans {
        DirectServerSpans {
            spans,
            duration,
            capture,
        }
    }

    /// The spans these are written with (to pair them with other settings).
    pub(crate) fn spans(&self) -> &Arc<DirectSpans> {
        &self.spans
    }

    /// A request's span, begun now under `parent` and linking `link`: what the SDK's tracer
    /// does for a SERVER span (`SdkTracer::build_with_context`), without the span.
    pub(crate) fn start(
        self: &Arc<Self>,
        parent: &Context,
        link: Option<SpanContext>,
    ) -> DirectServerSpan {
        let spans = &self.spans;
        let span_id = spans.ids.new_span_id();
        let parent_span = parent.span();
        let psc = parent_span.span_context();
        let parent_valid = psc.is_valid();
        let trace_id = if parent_valid {
            psc.trace_id()
        } else {
            spans.ids.new_trace_id()
        };
        let link_of = link.clone().map(|sc| [Link::with_context(sc)]);
        let links: &[Link] = link_of.as_ref().map_or(&[], |l| l.as_slice());
        let sampling =
            spans
                .sampler
                .should_sample(Some(parent), trace_id, "", &SpanKind::Server, &[], links);
        let parent_flags = if parent_valid {
            psc.trace_flags()
        } else {
            TraceFlags::default()
        };
        let (flags, sampled) = match sampling.decision {
            SamplingDecision::RecordAndSample => (parent_flags.with_sampled(true), true),
            // Recorded but not sampled: our processor drops such a span at its end.
            SamplingDecision::RecordOnly => (parent_flags.with_sampled(false), false),
            SamplingDecision::Drop => (TraceFlags::default(), false),
        };
        DirectServerSpan {
            spans: self.clone(),
            context: SpanContext::new(trace_id, span_id, flags, false, sampling.trace_state),
            parent: parent_valid.then(|| psc.clone()),
            link,
            sampled,
        }
    }
}

/// A request's span until it ends (see the module documentation).
pub(crate) struct DirectServerSpan {
    spans: Arc<DirectServerSpans>,
    context: SpanContext,
    parent: Option<SpanContext>,
    link: Option<SpanContext>,
    sampled: bool,
}

impl Completion for DirectServerSpan {
    fn span_context(&self) -> Option<(toolyard::SpanIds, Option<String>)> {
        span_ids(&self.context)
    }

    fn finish_with_response(
        self: Box<Self>,
        info: &RequestInfo,
        outcome: &Outcome,
        response: &[u8],
    ) {
        let result = match &self.spans.capture {
            Some(r) if r.results && &*info.method == "tools/call" => r.render_result(response),
            _ => None,
        };
        self.end(info, outcome, result);
    }

    fn finish(self: Box<Self>, info: &RequestInfo, outcome: &Outcome) {
        self.end(info, outcome, None);
    }
}

impl DirectServerSpan {
    fn end(self: Box<Self>, info: &RequestInfo, outcome: &Outcome, result: Option<String>) {
        // The span covers the request from its acceptance (`info.started`) to now: the
        // duration the histogram records. Two clock reads in all, both monotonic: the end's
        // wall-clock time is this thread's anchor's (`wall_clock`).
        let now = Moment::now();
        let elapsed = now.saturating_duration_since(info.started);
        self.spans.duration.record_elapsed(info, outcome, elapsed);
        if !self.sampled {
            return;
        }
        let end = unix_nanos_at(now);
        let method: &str = &info.method;
        let name: &[&str] = match (&info.target, target_attribute(method)) {
            (Some(target), Some(_)) => &[method, " ", target],
            _ => &[method],
        };
        // Written outside the queue's lock into this thread's buffer, copied in under it.
        let buf = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let mut span = SpanEncoder::new(
            buf,
            &SpanHead {
                context: &self.context,
                parent: self.parent.as_ref(),
                name,
                kind: SpanKind::Server,
                start: end.saturating_sub(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)),
                end,
            },
        );
        SHARED.with(|slot| {
            let mut slot = slot.borrow_mut();
            let shared = match &mut *slot {
                Some(s) if s.is_for(info) => s,
                slot => slot.insert(SharedAttributes::of(info)),
            };
            span.written_attributes(&shared.written);
        });
        let mut put = |key: &'static str, value: Attr<'_>| {
            write_attr(&mut |k, v| span.attribute(k, v), key, value);
        };
        own_attributes(info, self.spans.capture.as_deref(), &mut put);
        if let Some(result) = result {
            put(GEN_AI_TOOL_CALL_RESULT, Attr::Value(result.into()));
        }
        let status = outcome_attributes(outcome, |key, value| put(key, Attr::Value(value)));
        let body = span.finish(self.link.as_slice(), &status);
        let spans = &self.spans.spans;
        spans.sink.push(&spans.scope, &body);
        SCRATCH.with(|s| *s.borrow_mut() = body);
    }
}

thread_local! {
    /// The buffer a span is written into before it is copied into the batch: one per
    /// thread, kept from span to span.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The shared attributes of the last span this thread wrote: the next request of the
    /// same connection (the same method, revision, session and peer) copies them.
    static SHARED: RefCell<Option<SharedAttributes>> = const { RefCell::new(None) };
}

/// A request's [`shared_attributes`], written, and what they were written from. Writing
/// them (method, operation, revision, transport: four attributes over stdio) was ~500 of
/// the ~3 500 instructions full tracing adds to a `tools/call` over stdio; checking that
/// they are still the same and copying them is a tenth of that.
struct SharedAttributes {
    method: Arc<str>,
    version: Option<ProtocolVersion>,
    session: Option<Arc<str>>,
    peer: Option<Arc<Peer>>,
    written: Vec<u8>,
}

impl SharedAttributes {
    fn of(info: &RequestInfo) -> SharedAttributes {
        let mut written = Vec::new();
        shared_attributes(info, |key, value| {
            write_attr(
                &mut |k, v| write_span_attribute(&mut written, k, v),
                key,
                value,
            );
        });
        SharedAttributes {
            method: info.method.clone(),
            version: info.protocol_version,
            session: info.session_id.clone(),
            peer: info.peer.clone(),
            written,
        }
    }

    /// Written from what `info` has.
    fn is_for(&self, info: &RequestInfo) -> bool {
        fn same<T: PartialEq + ?Sized>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            }
        }
        self.version == info.protocol_version
            && *self.method == *info.method
            && same(&self.session, &info.session_id)
            && same(&self.peer, &info.peer)
    }
}

/// One attribute as [`request_attributes`](crate::server::request_attributes) gives it,
/// handed to `write` as the encoder takes it.
fn write_attr(write: &mut impl FnMut(&str, AttrValue<'_>), key: &'static str, value: Attr<'_>) {
    match value {
        Attr::Static(s) => write(key, AttrValue::Str(s)),
        Attr::Shared(s) => write(key, AttrValue::Str(s)),
        Attr::Value(v) => write(key, AttrValue::Str(v.as_str())),
        Attr::IdNumber(n) => write(key, AttrValue::Str(itoa::Buffer::new().format(n))),
        Attr::Int(i) => write(key, AttrValue::Int(i)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ReqwestOnTokio;
    use crate::otlp::{EncodingSpanProcessor, HttpSpanSender, Limits};
    use crate::spans::SpanCounts;
    use crate::{CaptureSettings, ObservabilityLayer};
    use opentelemetry::global::BoxedTracer;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use opentelemetry_sdk::metrics::SdkMeterProvider;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use prost::Message as _;
    use serde_json::json;
    use std::time::Duration;
    use toolyard::{tool_fn, HandlerError, ServerBuilder};
    use toolyard_testkit::RawClient;

    /// A processor that holds what it is given (nothing is sent in the test's time) and the
    /// handle to read it back.
    fn processor() -> (EncodingSpanProcessor, SpanSink) {
        let client = Arc::new(ReqwestOnTokio::new(tokio::runtime::Handle::current()).unwrap());
        let sender = HttpSpanSender::new(client, Some("http://127.0.0.1:9")).unwrap();
        let limits = Limits {
            max_queue: 10_000,
            max_batch: 10_000,
            delay: Duration::from_secs(3600),
        };
        let processor =
            EncodingSpanProcessor::new(sender, limits, Arc::new(SpanCounts::default())).unwrap();
        let sink = processor.sink();
        (processor, sink)
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        #[allow(dead_code)]
        text: Option<String>,
    }

    /// A server with `layer` and two tools: `ok` answers, `fails` fails.
    async fn server_with(layer: ObservabilityLayer) -> toolyard::Server {
        ServerBuilder::new("s", "1")
            .layer(Arc::new(layer))
            .tool(tool_fn("ok", "answers", |_c, _a: Args| async { Ok("fine") }).unwrap())
            .tool(
                tool_fn("fails", "fails", |_c, _a: Args| async {
                    Err::<String, _>(HandlerError::failed("it broke"))
                })
                .unwrap(),
            )
            .start()
            .await
            .unwrap()
    }

    /// The spans `sink` holds, in order (all of them under our one scope), once the last
    /// has had a moment to end: a span ends as its answer is written.
    async fn written_spans(sink: &SpanSink) -> Vec<Span> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let body = sink.take_request();
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        let scopes: Vec<_> = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .collect();
        assert_eq!(scopes.len(), 1);
        assert_eq!(scopes[0].scope.as_ref().unwrap().name, crate::SCOPE);
        scopes[0].spans.clone()
    }

    /// The same requests through a server with `layer`; the spans written, in order.
    async fn spans_of(layer: ObservabilityLayer, sink: &SpanSink) -> Vec<Span> {
        let server = server_with(layer).await;
        let client = RawClient::connect(&server).await.unwrap();
        client.initialize(json!({})).await.unwrap();
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let meta = json!({"traceparent": parent, "tracestate": "vendor=1"});
        let calls = [
            (
                "tools/call",
                json!({"name": "ok", "arguments": {"text": "hi", "token": "secret"}, "_meta": meta}),
            ),
            ("tools/call", json!({"name": "ok", "arguments": {}})),
            (
                "tools/call",
                json!({"name": "fails", "arguments": {}, "_meta": meta}),
            ),
            // Unknown tool, bad arguments: the caller's fault (no error status).
            ("tools/call", json!({"name": "nope", "arguments": {}})),
            (
                "tools/call",
                json!({"name": "ok", "arguments": {"text": 5}}),
            ),
            ("tools/list", json!({})),
            ("resources/read", json!({"uri": "file:///nowhere"})),
            ("ping", json!({})),
            // Not sampled by its parent: no span on either path.
            (
                "tools/call",
                json!({"name": "ok", "arguments": {},
                "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}),
            ),
        ];
        for (method, params) in calls {
            let _ = client.request(method, params).await;
        }
        // A string id, and a result longer than a short attribute.
        let long = "x".repeat(300);
        let _ = client
            .request_with_id(
                toolyard::proto::RequestId::String("call-7".into()),
                "tools/call",
                json!({"name": "ok", "arguments": {"text": long}}),
            )
            .await;
        written_spans(sink).await
    }

    fn attributes(span: &Span) -> Vec<(String, String)> {
        span.attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => format!("string {s}"),
                    Some(any_value::Value::IntValue(i)) => format!("int {i}"),
                    other => format!("{other:?}"),
                };
                // Each server has a session of its own.
                let value = if kv.key == "mcp.session.id" {
                    "a session".to_owned()
                } else {
                    value
                };
                (kv.key.clone(), value)
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_direct_path_writes_the_spans_the_sdks_span_writes() {
        let capture = CaptureSettings {
            arguments: true,
            results: true,
            ..CaptureSettings::default()
        };
        let meter = SdkMeterProvider::default().meter("test");
        let (sdk_processor, sdk_sink) = processor();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(sdk_processor)
            .build();
        let tracer = || BoxedTracer::new(Box::new(provider.tracer(crate::SCOPE)));
        let through_sdk = ObservabilityLayer::new(tracer(), &meter).with_capture(&capture);
        let (direct_processor, direct_sink) = processor();
        let direct = ObservabilityLayer::new(tracer(), &meter)
            .with_capture(&capture)
            .with_direct_spans(Arc::new(DirectSpans::new(direct_sink.clone())));
        let expected = spans_of(through_sdk, &sdk_sink).await;
        let written = spans_of(direct, &direct_sink).await;
        let names = |spans: &[Span]| spans.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&written), names(&expected));
        // Every request but the unsampled one (and `ping`, which no layer sees).
        assert_eq!(
            names(&written),
            [
                "tools/call ok",
                "tools/call ok",
                "tools/call fails",
                "tools/call nope",
                "tools/call ok",
                "tools/list",
                "resources/read file:///nowhere",
                "tools/call ok"
            ]
        );
        for (got, want) in written.iter().zip(&expected) {
            assert_eq!(got.name, want.name);
            assert_eq!(got.kind, want.kind, "{}", want.name);
            assert_eq!(attributes(got), attributes(want), "{}", want.name);
            assert_eq!(got.status, want.status, "{}", want.name);
            assert_eq!(got.links, want.links, "{}", want.name);
            assert_eq!(got.flags, want.flags, "{}", want.name);
            assert_eq!(got.trace_state, want.trace_state, "{}", want.name);
            assert_eq!(got.parent_span_id, want.parent_span_id, "{}", want.name);
            assert_eq!(got.events, want.events, "{}", want.name);
            assert_eq!(got.dropped_attributes_count, want.dropped_attributes_count);
            assert_eq!(got.span_id.len(), 8);
            assert!(got.end_time_unix_nano >= got.start_time_unix_nano);
            // Under the caller's trace, or in one of its own.
            if want.parent_span_id.is_empty() {
                assert_ne!(got.trace_id, want.trace_id);
            } else {
                assert_eq!(got.trace_id, want.trace_id);
            }
        }
        // What the checks compare is there to compare.
        let ok = &written[0];
        assert_eq!(ok.name, "tools/call ok");
        assert!(attributes(ok)
            .iter()
            .any(|(k, _)| k == "gen_ai.tool.call.arguments"));
        assert!(attributes(ok)
            .iter()
            .any(|(k, _)| k == "gen_ai.tool.call.result"));
        assert!(written
            .iter()
            .any(|s| s.status.as_ref().is_some_and(|st| st.code == 2)));
        drop(direct_processor);
        provider.shutdown().unwrap();
    }

    /// The shared attributes a thread keeps from span to span are written again when the
    /// next request comes from a connection that differs: two connections of two revisions,
    /// their calls alternating on one thread, each carry their own revision.
    #[tokio::test(flavor = "current_thread")]
    async fn alternating_connections_on_one_thread_each_keep_their_own_revision() {
        let meter = SdkMeterProvider::default().meter("test");
        let (_processor, sink) = processor();
        let provider = SdkTracerProvider::builder().build();
        let layer = ObservabilityLayer::new(
            BoxedTracer::new(Box::new(provider.tracer(crate::SCOPE))),
            &meter,
        )
        .with_direct_spans(Arc::new(DirectSpans::new(sink.clone())));
        let server = server_with(layer).await;
        let (a, b) = (
            RawClient::connect(&server).await.unwrap(),
            RawClient::connect(&server).await.unwrap(),
        );
        a.initialize(json!({})).await.unwrap();
        b.request(
            "initialize",
            json!({"protocolVersion": "2025-03-26", "capabilities": {},
                "clientInfo": {"name": "b", "version": "1"}}),
        )
        .await
        .unwrap();
        b.notify("notifications/initialized", json!({})).unwrap();
        for client in [&a, &b, &a, &b] {
            client
                .request("tools/call", json!({"name": "ok", "arguments": {}}))
                .await
                .unwrap();
        }
        let revisions: Vec<String> = written_spans(&sink)
            .await
            .iter()
            .map(|span| {
                let revision = span
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "mcp.protocol.version");
                match revision.and_then(|kv| kv.value.as_ref()?.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    other => panic!("no revision: {other:?}"),
                }
            })
            .collect();
        assert_eq!(
            revisions,
            ["2025-11-25", "2025-03-26", "2025-11-25", "2025-03-26"]
        );
    }
}
