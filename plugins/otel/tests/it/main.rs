//! toolyard-otel against a real in-process server and client, with the SDK's in-memory
//! exporters: span names, kinds, attributes, status and parents, and histogram points.

use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use std::sync::Arc;
use toolyard::client::{ClientBuilder, ProtocolChoice};
use toolyard::proto::Implementation;
use toolyard::{tool_fn, MemoryTransport, ServerBuilder};
use toolyard::{HttpCallObserver, HttpCallOutcome, OutgoingHttpCall};
use toolyard_otel::{
    CaptureSettings, ClientObserver, HttpClientObserver, ObservabilityLayer, ObservableToolHandler,
};
use toolyard_testkit::RawClient;

struct Pipeline {
    spans: InMemorySpanExporter,
    tracers: SdkTracerProvider,
    metrics: InMemoryMetricExporter,
    meters: SdkMeterProvider,
}

impl Pipeline {
    fn new() -> Self {
        let spans = InMemorySpanExporter::default();
        let metrics = InMemoryMetricExporter::default();
        Pipeline {
            tracers: SdkTracerProvider::builder()
                .with_simple_exporter(spans.clone())
                .build(),
            meters: SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics.clone()).build())
                .build(),
            spans,
            metrics,
        }
    }

    fn tracer(&self) -> BoxedTracer {
        BoxedTracer::new(Box::new(self.tracers.tracer("test")))
    }

    fn layer(&self) -> ObservabilityLayer {
        ObservabilityLayer::new(self.tracer(), &self.meters.meter("test"))
    }

    /// A server with [`whoami`] and this pipeline's layer.
    async fn whoami_server(&self) -> toolyard::Server {
        ServerBuilder::new("s", "1")
            .layer(Arc::new(self.layer()))
            .tool(whoami())
            .start()
            .await
            .unwrap()
    }

    fn observer(&self) -> ClientObserver {
        ClientObserver::new(self.tracer(), &self.meters.meter("test"))
    }

    fn finished(&self) -> Vec<SpanData> {
        self.spans.get_finished_spans().unwrap()
    }

    /// `(attributes, count)` of every point of the histogram `name`.
    fn points(&self, name: &str) -> Vec<(Vec<(String, String)>, u64)> {
        self.meters.force_flush().unwrap();
        let mut out = Vec::new();
        for rm in self.metrics.get_finished_metrics().unwrap() {
            for sm in rm.scope_metrics() {
                for m in sm.metrics().filter(|m| m.name() == name) {
                    if let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() {
                        for p in h.data_points() {
                            let attrs = p
                                .attributes()
                                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                                .collect();
                            out.push((attrs, p.count()));
                        }
                    }
                }
            }
        }
        out
    }
}

/// Whether `points` has one of `count` points that carries each of `attributes`.
fn has_point(
    points: &[(Vec<(String, String)>, u64)],
    count: u64,
    attributes: &[(&str, &str)],
) -> bool {
    points.iter().any(|(a, n)| {
        *n == count
            && attributes
                .iter()
                .all(|(k, v)| a.contains(&((*k).to_owned(), (*v).to_owned())))
    })
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// A tool that answers with the trace context its handler runs under.
fn whoami() -> toolyard::ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct None_ {}
    tool_fn(
        "whoami",
        "the handler's traceparent",
        |ctx, _: None_| async move { Ok(ctx.traceparent().unwrap_or_default().to_owned()) },
    )
    .unwrap()
}

fn text(v: &Value) -> String {
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_server_span_follows_the_conventions_and_parents_what_the_handler_calls_out_to() {
    let p = Pipeline::new();
    let server = p.whoami_server().await;
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let caller_span = "b7ad6b7169203331";
    let result = client
        .request(
            "tools/call",
            json!({"name": "whoami", "arguments": {},
                   "_meta": {"traceparent": format!("00-{trace}-{caller_span}-01"),
                             "tracestate": "vendor=1"}}),
        )
        .await
        .unwrap();
    let spans = p.finished();
    let span = spans
        .iter()
        .find(|s| s.name == "tools/call whoami")
        .expect("the span");
    assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Server);
    assert_eq!(span.span_context.trace_id().to_string(), trace);
    assert_eq!(span.parent_span_id.to_string(), caller_span);
    assert_eq!(attr(span, "mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr(span, "gen_ai.tool.name").as_deref(), Some("whoami"));
    assert_eq!(
        attr(span, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert!(
        attr(span, "mcp.session.id").is_none(),
        "stdio-like connections have no session"
    );
    // The handler runs under the server span: what it sends on carries that span.
    assert_eq!(
        text(&result),
        format!("00-{trace}-{}-01", span.span_context.span_id())
    );
    let points = p.points("mcp.server.operation.duration");
    assert!(
        has_point(
            &points,
            1,
            &[
                ("gen_ai.tool.name", "whoami"),
                ("mcp.method.name", "tools/call")
            ]
        ),
        "{points:?}"
    );
}

#[tokio::test]
async fn a_tool_error_is_an_error_span_with_error_type_tool_error() {
    let p = Pipeline::new();
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Empty {}
    let server = ServerBuilder::new("s", "1")
        .layer(Arc::new(p.layer()))
        .tool(
            tool_fn("boom", "fails", |_ctx, _: Empty| async move {
                Err::<String, _>(toolyard::ToolError::failed("no"))
            })
            .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let _ = client
        .request("tools/call", json!({"name": "boom", "arguments": {}}))
        .await
        .unwrap();
    let spans = p.finished();
    let span = spans.iter().find(|s| s.name == "tools/call boom").unwrap();
    assert_eq!(attr(span, "error.type").as_deref(), Some("tool_error"));
    assert!(matches!(
        span.status,
        opentelemetry::trace::Status::Error { .. }
    ));
}

#[tokio::test]
async fn the_request_id_attribute_is_the_ids_text_whether_a_number_or_a_string() {
    let p = Pipeline::new();
    let server = p.whoami_server().await;
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let call = json!({"name": "whoami", "arguments": {}});
    for id in [
        toolyard::proto::RequestId::Number(-9_007_199_254_740_993),
        toolyard::proto::RequestId::String("call-7".into()),
        toolyard::proto::RequestId::Number(i64::MAX),
    ] {
        client
            .request_with_id(id, "tools/call", call.clone())
            .await
            .unwrap();
    }
    let mut ids: Vec<String> = p
        .finished()
        .iter()
        .filter_map(|s| attr(s, "jsonrpc.request.id"))
        .collect();
    ids.sort();
    assert_eq!(ids, ["-9007199254740993", "9223372036854775807", "call-7"]);
}

#[tokio::test]
async fn a_client_request_is_a_client_span_whose_context_the_server_receives_in_meta() {
    let p = Pipeline::new();
    let server = ServerBuilder::new("s", "1")
        .tool(whoami())
        .start()
        .await
        .unwrap();
    for protocol in [ProtocolChoice::Auto, ProtocolChoice::Modern] {
        let client = ClientBuilder::new(Implementation::new("c", "1"))
            .protocol(protocol)
            .observe(Arc::new(p.observer()))
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let result = client.call_tool("whoami", json!({})).await.unwrap();
        let seen = match &result.content[0] {
            toolyard::proto::ContentBlock::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        };
        let spans = p.finished();
        let span = spans
            .iter()
            .rev()
            .find(|s| s.name == "tools/call whoami")
            .expect("the client span");
        assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(
            seen,
            format!(
                "00-{}-{}-01",
                span.span_context.trace_id(),
                span.span_context.span_id()
            ),
            "the server got the client span's context in _meta"
        );
        client.close().await;
    }
    assert!(!p.points("mcp.client.operation.duration").is_empty());
}

#[tokio::test]
async fn an_observable_tool_handler_is_an_execute_tool_span_inside_the_server_span() {
    let p = Pipeline::new();
    let server = ServerBuilder::new("s", "1")
        .layer(Arc::new(p.layer()))
        .tool(ObservableToolHandler::wrap_with(
            whoami(),
            Arc::new(p.tracer()),
        ))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let _ = client
        .request("tools/call", json!({"name": "whoami", "arguments": {}}))
        .await
        .unwrap();
    let spans = p.finished();
    let server_span = spans
        .iter()
        .find(|s| s.name == "tools/call whoami")
        .unwrap();
    let inner = spans
        .iter()
        .find(|s| s.name == "execute_tool whoami")
        .unwrap();
    assert_eq!(inner.span_kind, opentelemetry::trace::SpanKind::Internal);
    assert_eq!(inner.parent_span_id, server_span.span_context.span_id());
    assert_eq!(
        inner.span_context.trace_id(),
        server_span.span_context.trace_id()
    );
}

/// A tool that echoes its arguments, credentials included.
fn echo() -> toolyard::ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        user: String,
        password: String,
        note: String,
    }
    tool_fn("echo", "echoes", |_ctx, a: Args| async move {
        Ok(format!("{} {} {}", a.user, a.password, a.note))
    })
    .unwrap()
}

async fn call_echo(layer: ObservabilityLayer) {
    let server = ServerBuilder::new("s", "1")
        .layer(Arc::new(layer))
        .tool(echo())
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments":
                {"user": "ann", "password": "pw-123", "note": "key cfg-secret-9 inside"}}),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn tool_arguments_and_results_are_not_captured_by_default() {
    let p = Pipeline::new();
    call_echo(p.layer()).await;
    let spans = p.finished();
    let span = spans.iter().find(|s| s.name == "tools/call echo").unwrap();
    assert!(attr(span, "gen_ai.tool.call.arguments").is_none());
    assert!(attr(span, "gen_ai.tool.call.result").is_none());
}

#[tokio::test]
async fn captured_arguments_and_results_are_redacted_and_capped() {
    let p = Pipeline::new();
    let capture = CaptureSettings {
        arguments: true,
        results: true,
        max_bytes: 120,
        redact_keys: Vec::new(),
        redact_values: vec!["cfg-secret-9".into()],
    };
    call_echo(p.layer().with_capture(&capture)).await;
    let spans = p.finished();
    let span = spans.iter().find(|s| s.name == "tools/call echo").unwrap();
    let args = attr(span, "gen_ai.tool.call.arguments").expect("arguments captured");
    let args: Value = serde_json::from_str(&args).unwrap();
    assert_eq!(args["user"], "ann");
    assert_eq!(args["password"], "[REDACTED]");
    assert_eq!(args["note"], "key [REDACTED] inside");
    let result = attr(span, "gen_ai.tool.call.result").expect("result captured");
    // The tool echoed the password into its text: the key rule cannot see it there, but the
    // configured secret is cut out, and the whole is capped.
    assert!(
        result.contains("ann pw-123 key [REDACTED] inside"),
        "{result}"
    );
    assert!(!result.contains("cfg-secret-9"), "{result}");
    assert!(result.len() <= 120 + 30, "{result}");
}

#[tokio::test]
async fn a_legacy_session_that_ends_is_a_session_duration_point() {
    let p = Pipeline::new();
    let server = p.whoami_server().await;
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client.close();
    // The connection stops asynchronously: wait for its point.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let points = p.points("mcp.server.session.duration");
        if let Some((attrs, count)) = points.first() {
            assert_eq!(*count, 1);
            assert!(
                attrs
                    .iter()
                    .any(|(k, v)| k == "mcp.protocol.version" && v.starts_with("20")),
                "{attrs:?}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no session point");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A `tracing` subscriber like the binary's: a WARN filter in front of the log export.
fn log_pipeline() -> (
    opentelemetry_sdk::logs::InMemoryLogExporter,
    opentelemetry_sdk::logs::SdkLoggerProvider,
    tracing::subscriber::DefaultGuard,
) {
    use tracing_subscriber::layer::SubscriberExt as _;
    let exporter = opentelemetry_sdk::logs::InMemoryLogExporter::default();
    let provider = opentelemetry_sdk::logs::SdkLoggerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::WARN)
        .with(toolyard_otel::LogExport::with_provider(&provider));
    (
        exporter,
        provider,
        tracing::subscriber::set_default(subscriber),
    )
}

/// A tool that logs: a warning with a field, an INFO line the filter keeps out, and a line
/// of the HTTP stack's (never exported: sending it would log more).
fn chatty() -> toolyard::ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct None_ {}
    tool_fn("chatty", "logs", |_ctx, _: None_| async move {
        tokio::task::yield_now().await;
        tracing::info!("filtered out");
        tracing::warn!(target: "hyper_util::client", "the exporter's own line");
        tracing::warn!(answer = 42, "chatty ran");
        Ok("done")
    })
    .unwrap()
}

#[tokio::test]
async fn a_log_line_in_a_handler_is_a_log_record_with_the_server_spans_trace_and_span_ids() {
    use opentelemetry::logs::{AnyValue, Severity};
    use opentelemetry::trace::TraceFlags;
    let p = Pipeline::new();
    let (logs, provider, _subscriber) = log_pipeline();
    let server = ServerBuilder::new("s", "1")
        .layer(Arc::new(p.layer()))
        .tool(chatty())
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let unsampled = "4bf92f3577b34da6a3ce929d0e0e4736";
    for (t, flags) in [(trace, "01"), (unsampled, "00")] {
        client
            .request(
                "tools/call",
                json!({"name": "chatty", "arguments": {},
                       "_meta": {"traceparent": format!("00-{t}-b7ad6b7169203331-{flags}")}}),
            )
            .await
            .unwrap();
    }
    tracing::warn!("outside any request");
    provider.force_flush().unwrap();
    let records = logs.get_emitted_logs().unwrap();
    let bodies: Vec<String> = records
        .iter()
        .map(|r| match r.record.body() {
            Some(AnyValue::String(s)) => s.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        bodies,
        ["chatty ran", "chatty ran", "outside any request"],
        "only what passed the filter, and none of the exporter's own lines"
    );
    let spans = p.finished();
    let server_span = spans
        .iter()
        .find(|s| s.name == "tools/call chatty")
        .expect("the sampled call's server span");
    let joined = records[0].record.trace_context().expect("a trace context");
    assert_eq!(joined.trace_id.to_string(), trace);
    assert_eq!(joined.trace_id, server_span.span_context.trace_id());
    assert_eq!(
        joined.span_id,
        server_span.span_context.span_id(),
        "the record's span is the request's server span"
    );
    assert_eq!(joined.trace_flags, Some(TraceFlags::SAMPLED));
    assert_eq!(records[0].record.severity_number(), Some(Severity::Warn));
    assert_eq!(records[0].record.severity_text(), Some("WARN"));
    assert!(
        records[0]
            .record
            .attributes_iter()
            .any(|(k, v)| k.as_str() == "answer" && *v == AnyValue::Int(42)),
        "the event's fields are attributes"
    );
    let not_sampled = records[1].record.trace_context().expect("a trace context");
    assert_eq!(not_sampled.trace_id.to_string(), unsampled);
    assert_eq!(
        not_sampled.trace_flags,
        Some(TraceFlags::default()),
        "an unsampled trace's records say so"
    );
    assert!(
        records[2].record.trace_context().is_none(),
        "no request, no trace context"
    );
}

#[tokio::test]
async fn a_layer_without_spans_records_durations_and_hands_the_callers_context_on() {
    let p = Pipeline::new();
    let server = ServerBuilder::new("s", "1")
        .layer(Arc::new(p.layer().without_spans()))
        .tool(whoami())
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let result = client
        .request(
            "tools/call",
            json!({"name": "whoami", "arguments": {}, "_meta": {"traceparent": caller}}),
        )
        .await
        .unwrap();
    // No span of ours: the handler runs in the caller's context as it came.
    assert!(p.finished().is_empty(), "{:?}", p.finished());
    assert_eq!(text(&result), caller);
    let points = p.points("mcp.server.operation.duration");
    assert!(
        has_point(
            &points,
            1,
            &[
                ("gen_ai.tool.name", "whoami"),
                ("mcp.method.name", "tools/call")
            ]
        ),
        "{points:?}"
    );
}

#[tokio::test]
async fn an_observer_without_spans_records_client_durations_and_sends_no_context_of_its_own() {
    let p = Pipeline::new();
    let server = ServerBuilder::new("s", "1")
        .tool(whoami())
        .start()
        .await
        .unwrap();
    let client = ClientBuilder::new(Implementation::new("c", "1"))
        .observe(Arc::new(p.observer().without_spans()))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    for _ in 0..2 {
        let result = client.call_tool("whoami", json!({})).await.unwrap();
        // No span of ours, so no trace context of ours in `_meta`.
        let seen = match &result.content[0] {
            toolyard::proto::ContentBlock::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(seen, "");
    }
    let missing = client.call_tool("nope", json!({})).await;
    assert!(missing.is_err());
    client.close().await;
    assert!(p.finished().is_empty(), "{:?}", p.finished());
    let points = p.points("mcp.client.operation.duration");
    assert!(
        points.iter().any(|(a, n)| *n == 2
            && a.len() == 2
            && a.contains(&("gen_ai.tool.name".into(), "whoami".into()))
            && a.contains(&("mcp.method.name".into(), "tools/call".into()))),
        "{points:?}"
    );
    assert!(
        has_point(
            &points,
            1,
            &[
                ("gen_ai.tool.name", "nope"),
                ("error.type", "-32602"),
                ("rpc.response.status_code", "-32602")
            ]
        ),
        "{points:?}"
    );
}

fn http_call<'a>(url: &'a str, traceparent: Option<&'a str>) -> OutgoingHttpCall<'a> {
    OutgoingHttpCall {
        method: "GET",
        url,
        traceparent,
        tracestate: traceparent.map(|_| "vendor=1"),
    }
}

#[tokio::test]
async fn an_http_call_is_a_client_span_under_the_requests_span_whose_context_it_carries() {
    let p = Pipeline::new();
    let observer = HttpClientObserver::new(p.tracer(), &p.meters.meter("test"));
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let request_span = "b7ad6b7169203331";
    let tp = format!("00-{trace}-{request_span}-01");
    let url = "https://u:pw@api.example.com/v1/items?key=s3cret&q=x";
    let call = observer
        .start(&http_call(url, Some(&tp)))
        .expect("observed");
    let (sent, state) = call.trace_context().expect("the call's own context");
    call.finish(HttpCallOutcome::Status(503));
    let spans = p.finished();
    let [span] = &spans[..] else {
        panic!("one span: {spans:?}")
    };
    assert_eq!(span.name, "GET");
    assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Client);
    assert_eq!(span.span_context.trace_id().to_string(), trace);
    assert_eq!(span.parent_span_id.to_string(), request_span);
    // The call carries the span's context, and the request's trace state with it.
    assert_eq!(
        sent,
        format!("00-{trace}-{}-01", span.span_context.span_id())
    );
    assert_eq!(state.as_deref(), Some("vendor=1"));
    for (key, value) in [
        ("http.request.method", "GET"),
        ("server.address", "api.example.com"),
        ("server.port", "443"),
        (
            "url.full",
            "https://REDACTED:REDACTED@api.example.com/v1/items?key=REDACTED&q=REDACTED",
        ),
        ("http.response.status_code", "503"),
        ("error.type", "503"),
    ] {
        assert_eq!(attr(span, key).as_deref(), Some(value), "{key}");
    }
    assert!(
        matches!(span.status, opentelemetry::trace::Status::Error { .. }),
        "{:?}",
        span.status
    );

    // An answer under 400 is no error; no answer at all is one, named by its kind.
    let ok = observer.start(&http_call("http://localhost:8080/", None));
    ok.expect("observed").finish(HttpCallOutcome::Status(200));
    let failed = observer.start(&http_call("http://localhost:8080/", None));
    failed
        .expect("observed")
        .finish(HttpCallOutcome::Failed("connect"));
    let spans = p.finished();
    let ok = &spans[1];
    assert_eq!(ok.status, opentelemetry::trace::Status::Unset);
    assert_eq!(attr(ok, "error.type"), None);
    assert_eq!(attr(ok, "server.port").as_deref(), Some("8080"));
    assert_eq!(ok.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    let failed = &spans[2];
    assert_eq!(attr(failed, "error.type").as_deref(), Some("connect"));
    assert_eq!(attr(failed, "http.response.status_code"), None);

    let points = p.points("http.client.request.duration");
    let point = |status: Option<&str>, error: Option<&str>, host: &str| {
        points.iter().any(|(a, n)| {
            *n == 1
                && a.contains(&("http.request.method".into(), "GET".into()))
                && a.contains(&("server.address".into(), host.into()))
                && status
                    .is_none_or(|s| a.contains(&("http.response.status_code".into(), s.into())))
                && error.is_none_or(|e| a.contains(&("error.type".into(), e.into())))
                && !a.iter().any(|(k, _)| k == "url.full")
        })
    };
    assert!(
        point(Some("503"), Some("503"), "api.example.com"),
        "{points:?}"
    );
    assert!(point(Some("200"), None, "localhost"), "{points:?}");
    assert!(point(None, Some("connect"), "localhost"), "{points:?}");
}

#[tokio::test]
async fn an_http_call_observer_without_spans_records_durations_and_gives_no_context() {
    let p = Pipeline::new();
    let observer = HttpClientObserver::new(p.tracer(), &p.meters.meter("test")).without_spans();
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let call = observer
        .start(&http_call("http://localhost:9/", Some(tp)))
        .expect("observed");
    assert_eq!(
        call.trace_context(),
        None,
        "the request's own context goes on"
    );
    call.finish(HttpCallOutcome::Status(404));
    assert!(p.finished().is_empty());
    let points = p.points("http.client.request.duration");
    assert!(
        has_point(
            &points,
            1,
            &[("http.response.status_code", "404"), ("error.type", "404")]
        ),
        "{points:?}"
    );
}

#[tokio::test]
async fn a_request_over_the_in_memory_transport_is_an_inproc_server_span_and_point() {
    let p = Pipeline::new();
    let server = p.whoami_server().await;
    let client = ClientBuilder::new(Implementation::new("c", "1"))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    client.call_tool("whoami", json!({})).await.unwrap();
    client.close().await;
    let spans = p.finished();
    let span = spans
        .iter()
        .find(|s| s.name == "tools/call whoami")
        .expect("the server span");
    assert_eq!(attr(span, "network.transport").as_deref(), Some("inproc"));
    assert_eq!(attr(span, "network.protocol.name"), None);
    assert_eq!(attr(span, "client.address"), None);
    let points = p.points("mcp.server.operation.duration");
    assert!(
        points.iter().any(
            |(a, _)| a.contains(&("gen_ai.tool.name".into(), "whoami".into()))
                && a.contains(&("network.transport".into(), "inproc".into()))
        ),
        "{points:?}"
    );
}
