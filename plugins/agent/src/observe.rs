//! The agent's observability seam: a [`GenAiObserver`] is told of every GenAI operation
//! (an agent run, each chat completion, each tool call the agent makes) with the attributes
//! the OpenTelemetry GenAI semantic conventions ask for, and returns a span of its own whose
//! W3C trace context the operations inside it carry.
//!
//! The crate does not depend on OpenTelemetry: an embedder (the `toolyard agent` command,
//! through toolyard-otel) implements the trait over its tracer, the way toolyard-client's
//! `RequestObserver` keeps the MCP client free of it. Without an observer nothing is
//! recorded and nothing is paid but an `Option` check.
//!
//! The shape of a run's trace:
//!
//! ```text
//! invoke_agent toolyard            INTERNAL  (one per Agent::run)
//! ├── chat gpt-4o                  CLIENT    (one per model request)
//! ├── execute_tool echo            INTERNAL  (one per tool call run)
//! │   └── tools/call echo          CLIENT    (the MCP client's own span, via `_meta`)
//! └── chat gpt-4o
//! ```

use crate::llm::Usage;
use std::sync::Arc;

/// A W3C trace context: what a child operation is parented on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `traceparent`.
    pub traceparent: String,
    /// `tracestate`, when not empty.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context a request's `_meta` carries (SEP-414), if any.
    pub fn from_meta(meta: Option<&serde_json::Map<String, serde_json::Value>>) -> Option<Self> {
        let meta = meta?;
        let traceparent = meta.get("traceparent")?.as_str()?.to_owned();
        let tracestate = meta
            .get("tracestate")
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Some(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// As `_meta` members.
    pub fn to_meta(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut meta = serde_json::Map::new();
        meta.insert("traceparent".into(), self.traceparent.clone().into());
        if let Some(state) = &self.tracestate {
            meta.insert("tracestate".into(), state.clone().into());
        }
        meta
    }
}

/// A GenAI operation about to start.
#[derive(Debug, Clone, Copy)]
pub enum Operation<'a> {
    /// An agent run, `invoke_agent {agent}`: the parent of its chats and tool calls.
    InvokeAgent {
        /// `gen_ai.agent.name`.
        agent: &'a str,
        /// `gen_ai.provider.name` of its model.
        provider: &'a str,
        /// `gen_ai.request.model`.
        model: &'a str,
    },
    /// A chat completion, `chat {model}` (a CLIENT span).
    Chat {
        /// `gen_ai.provider.name`: `openai` or `azure.ai.openai`.
        provider: &'a str,
        /// `gen_ai.request.model`.
        model: &'a str,
        /// `server.address`: the endpoint's host.
        server_address: Option<&'a str>,
        /// `server.port`.
        server_port: Option<u16>,
        /// Whether the answer is streamed.
        stream: bool,
        /// `gen_ai.request.max_tokens`.
        max_tokens: Option<u64>,
        /// `gen_ai.request.temperature`.
        temperature: Option<f64>,
        /// `gen_ai.request.stop_sequences`.
        stop_sequences: &'a [String],
    },
    /// A tool call the agent runs, `execute_tool {tool}`.
    ExecuteTool {
        /// `gen_ai.tool.name` (the MCP tool's name).
        tool: &'a str,
        /// `gen_ai.tool.call.id`.
        call_id: &'a str,
        /// `gen_ai.tool.description`.
        description: Option<&'a str>,
        /// The connection that owns the tool.
        server: &'a str,
    },
}

impl Operation<'_> {
    /// `gen_ai.operation.name`.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::InvokeAgent { .. } => "invoke_agent",
            Operation::Chat { .. } => "chat",
            Operation::ExecuteTool { .. } => "execute_tool",
        }
    }

    /// The span name the conventions give it: `{operation} {model, tool or agent}`.
    pub fn span_name(&self) -> String {
        let what = match self {
            Operation::InvokeAgent { agent, .. } => agent,
            Operation::Chat { model, .. } => model,
            Operation::ExecuteTool { tool, .. } => tool,
        };
        format!("{} {what}", self.name())
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome<'a> {
    /// `gen_ai.response.model`.
    pub response_model: Option<&'a str>,
    /// `gen_ai.response.id`.
    pub response_id: Option<&'a str>,
    /// `gen_ai.response.finish_reasons`, as the server said them (`stop`, `tool_calls`...).
    pub finish_reasons: Vec<&'a str>,
    /// `gen_ai.usage.input_tokens` / `output_tokens`.
    pub usage: Option<Usage>,
    /// `error.type`, when it failed: an HTTP status (`429`), `timeout`, `truncated`,
    /// `cancelled`..., or `tool_error` for a tool result with `isError`.
    pub error_type: Option<&'a str>,
}

/// Sees every GenAI operation (see the module docs).
pub trait GenAiObserver: Send + Sync + 'static {
    /// Called as `operation` starts, under `parent` (`None`: a trace of its own); the span
    /// returned is finished with the outcome.
    fn start(&self, operation: &Operation<'_>, parent: Option<&TraceContext>)
        -> Box<dyn GenAiSpan>;
}

/// One observed operation.
pub trait GenAiSpan: Send {
    /// The context operations inside this one are parented on.
    fn context(&self) -> Option<TraceContext>;
    /// Called once with the outcome.
    fn finish(self: Box<Self>, outcome: &Outcome<'_>);
}

/// A shared observer.
pub type SharedObserver = Arc<dyn GenAiObserver>;

/// A started span, or nothing when no observer is installed; finishing is the caller's.
pub(crate) struct Observed(Option<Box<dyn GenAiSpan>>);

impl Observed {
    /// Nothing observed.
    pub(crate) fn none() -> Self {
        Observed(None)
    }

    pub(crate) fn start(
        observer: Option<&SharedObserver>,
        operation: &Operation<'_>,
        parent: Option<&TraceContext>,
    ) -> Self {
        Observed(observer.map(|o| o.start(operation, parent)))
    }

    pub(crate) fn context(&self) -> Option<TraceContext> {
        self.0.as_ref().and_then(|s| s.context())
    }

    pub(crate) fn finish(mut self, outcome: &Outcome<'_>) {
        if let Some(s) = self.0.take() {
            s.finish(outcome);
        }
    }
}

impl Drop for Observed {
    /// An operation whose future was dropped (its run was cancelled) still ends its span.
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.finish(&Outcome {
                error_type: Some("cancelled"),
                ..Outcome::default()
            });
        }
    }
}
