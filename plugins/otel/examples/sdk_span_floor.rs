//! The floor under a traced request: the OpenTelemetry SDK's own work for spans like the
//! SERVER span the server makes per `tools/call` (its name, its semconv attributes, a
//! remote parent), started and ended on this thread through the global tracer, as
//! `ObservabilityLayer` does, and handed to a span processor that drops each one as it ends
//! (where ours encodes it: `otlp::processor`). What the server's tracing costs beyond this
//! and the encoding is ours to cut; this much is not, short of leaving the SDK.
//!
//! ```text
//! sdk_span_floor SPANS
//! ```
//!
//! `benches/callgrind.sh span-floor` counts its instructions per span. (Up to stop 39 the
//! spans went through the SDK's batch processor, as the server's did: 4 271 instructions a
//! span, 1 545 of them the batch processor's on its thread.)

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanProcessor};

/// Drops each span as it ends: the floor has no encoding, no queue and no network in it.
#[derive(Debug)]
struct Discard;

impl SpanProcessor for Discard {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        drop(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn main() {
    let spans: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Discard)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let tracer = opentelemetry::global::tracer("toolyard");
    let parent = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128),
        SpanId::from(0x00f0_67aa_0ba9_02b7_u64),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ));
    let method: std::sync::Arc<str> = "tools/call".into();
    let tool: std::sync::Arc<str> = "echo".into();
    for id in 0..spans {
        // The attributes a stdio `tools/call` span carries (see `server.rs`).
        let attributes = vec![
            KeyValue::new("mcp.method.name", method.clone()),
            KeyValue::new("jsonrpc.request.id", id.to_string()),
            KeyValue::new("mcp.protocol.version", "2025-06-18"),
            KeyValue::new("mcp.session.id", "0f3c"),
            KeyValue::new("gen_ai.tool.name", tool.clone()),
            KeyValue::new("network.transport", "pipe"),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
        ];
        let mut span = tracer
            .span_builder(format!("{method} {tool}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        opentelemetry::trace::Span::end(&mut span);
    }
    drop(provider.shutdown());
}
