//! How an agent run talks to its caller rather than to the model: what it reports as it goes
//! ([`AgentEvent`]) and the confirmation a tool call that changes things needs. (Questions
//! tools ask, elicitation and sampling, go to the handlers the connections were made with,
//! see [`ToolHandlers`](crate::ToolHandlers): they are for the person or program running the
//! agent, never for the model, which would happily make up a password.)

use serde_json::Value;
use std::sync::Arc;
use toolyard_proto::{BoxFuture, CallToolResult, ProgressNotificationParams};

use crate::llm::Usage;

/// Something that happened during a run, in order.
#[derive(Debug, Clone)]
pub enum AgentEvent {
    /// A turn (one model request) starts; 1-based.
    TurnStarted(usize),
    /// A server's tools changed and were listed again: this many are on offer now.
    ToolsChanged(usize),
    /// A piece of the model's answer.
    Text(String),
    /// The model called a tool; it is about to run (after confirmation, if needed).
    ToolCall {
        /// The call's id.
        id: String,
        /// The connection.
        server: String,
        /// The MCP tool.
        tool: String,
        /// The arguments.
        arguments: Value,
    },
    /// A tool call finished (or could not be made); `text` is what the model is told.
    ToolResult {
        /// The call's id.
        id: String,
        /// The connection (empty when the model named no known tool).
        server: String,
        /// The MCP tool (the function name when unknown).
        tool: String,
        /// Whether it failed.
        is_error: bool,
        /// What the model is told.
        text: String,
        /// The MCP result, when there is one.
        result: Option<CallToolResult>,
    },
    /// A running tool reported progress.
    Progress {
        /// The connection.
        server: String,
        /// The MCP tool.
        tool: String,
        /// The notification.
        params: ProgressNotificationParams,
    },
    /// Tokens one model request used.
    Usage(Usage),
}

/// A call of a tool that is not marked read-only (`readOnlyHint`), waiting for the caller's
/// go-ahead.
#[derive(Debug, Clone)]
pub struct PendingCall {
    /// The connection.
    pub server: String,
    /// The MCP tool.
    pub tool: String,
    /// The arguments.
    pub arguments: Value,
}

/// Receives every [`AgentEvent`].
pub type EventCallback = Arc<dyn Fn(&AgentEvent) + Send + Sync>;
/// Decides whether a tool call that is not read-only may run.
pub type ConfirmCallback = Arc<dyn Fn(PendingCall) -> BoxFuture<bool> + Send + Sync>;

/// The caller's side of a run.
#[derive(Clone, Default)]
pub struct AgentHooks {
    /// Every event.
    pub on_event: Option<EventCallback>,
    /// Asked before each call of a tool that is not read-only; without it every call runs.
    pub confirm: Option<ConfirmCallback>,
}

impl std::fmt::Debug for AgentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHooks")
            .field("on_event", &self.on_event.is_some())
            .field("confirm", &self.confirm.is_some())
            .finish()
    }
}

impl AgentHooks {
    pub(crate) fn emit(&self, event: &AgentEvent) {
        if let Some(f) = &self.on_event {
            f(event);
        }
    }
}
