//! Observable handlers, for embedders who wrap their own: each wraps a definition's handler
//! in an INTERNAL span (`execute_tool {name}` for a tool, per the GenAI conventions;
//! `resources/read {uri}`, `prompts/get {name}`) whose parent is the request's trace context
//! ([`RequestContext::traceparent`](toolyard::RequestContext::traceparent): the server span
//! when the [`ObservabilityLayer`](crate::ObservabilityLayer) is installed, else what the
//! caller sent).

use crate::propagation::parent_context;
use crate::semconv;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};
use opentelemetry::KeyValue;
use std::sync::Arc;
use toolyard::proto::CallToolResult;
use toolyard::{BoxFuture, HandlerError, PromptDef, RequestContext, ResourceDef, ToolDef};

/// Runs `fut` in an INTERNAL span `name` under the request's trace context: a tool result
/// `failed` marks the span `tool_error`; an error sets the span's status (and, with
/// `tag_errors`, `error.type`).
fn in_span<T: Send + 'static>(
    tracer: &BoxedTracer,
    name: String,
    attributes: Vec<KeyValue>,
    ctx: &RequestContext,
    fut: BoxFuture<Result<T, HandlerError>>,
    failed: fn(&T) -> bool,
    tag_errors: bool,
) -> BoxFuture<Result<T, HandlerError>> {
    let mut span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent_context(ctx.traceparent(), ctx.tracestate()));
    Box::pin(async move {
        let result = fut.await;
        match &result {
            Ok(r) if failed(r) => {
                span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, semconv::TOOL_ERROR));
                span.set_status(Status::error("the tool reported an error"));
            }
            Ok(_) => {}
            Err(e) => {
                if tag_errors {
                    span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, "_OTHER"));
                }
                span.set_status(Status::error(e.to_string()));
            }
        }
        span.end();
        result
    })
}

/// Wraps a tool's handler in an `execute_tool {name}` span.
#[derive(Debug)]
pub struct ObservableToolHandler;

impl ObservableToolHandler {
    /// `tool` with its handler observed by the global tracer.
    pub fn wrap(tool: ToolDef) -> ToolDef {
        Self::wrap_with(tool, Arc::new(opentelemetry::global::tracer(crate::SCOPE)))
    }

    /// `tool` with its handler observed by `tracer`.
    pub fn wrap_with(tool: ToolDef, tracer: Arc<BoxedTracer>) -> ToolDef {
        let name = tool.tool().name.clone();
        tool.map_handler(move |inner| {
            Arc::new(move |ctx, args| {
                let attributes = vec![
                    KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "execute_tool"),
                    KeyValue::new(semconv::GEN_AI_TOOL_NAME, name.clone()),
                ];
                let fut = inner(ctx.clone(), args);
                in_span(
                    &tracer,
                    format!("execute_tool {name}"),
                    attributes,
                    &ctx,
                    fut,
                    CallToolResult::failed,
                    true,
                )
            })
        })
    }
}

/// Wraps a resource's reader in a `resources/read {uri}` span.
#[derive(Debug)]
pub struct ObservableResourceHandler;

impl ObservableResourceHandler {
    /// `resource` with its reader observed by the global tracer.
    pub fn wrap(resource: ResourceDef) -> ResourceDef {
        let tracer = Arc::new(opentelemetry::global::tracer(crate::SCOPE));
        resource.map_reader(move |inner| {
            Arc::new(move |ctx, request| {
                let name = format!("resources/read {}", request.uri);
                let attributes = vec![KeyValue::new(
                    semconv::MCP_RESOURCE_URI,
                    request.uri.clone(),
                )];
                let fut = inner(ctx.clone(), request);
                in_span(&tracer, name, attributes, &ctx, fut, |_| false, false)
            })
        })
    }
}

/// Wraps a prompt's producer in a `prompts/get {name}` span.
#[derive(Debug)]
pub struct ObservablePromptHandler;

impl ObservablePromptHandler {
    /// `prompt` with its producer observed by the global tracer.
    pub fn wrap(prompt: PromptDef, name: &str) -> PromptDef {
        let tracer = Arc::new(opentelemetry::global::tracer(crate::SCOPE));
        let name = name.to_owned();
        prompt.map_producer(move |inner| {
            Arc::new(move |ctx, args| {
                let attributes = vec![KeyValue::new(semconv::GEN_AI_PROMPT_NAME, name.clone())];
                let fut = inner(ctx.clone(), args);
                in_span(
                    &tracer,
                    format!("prompts/get {name}"),
                    attributes,
                    &ctx,
                    fut,
                    |_| false,
                    false,
                )
            })
        })
    }
}
