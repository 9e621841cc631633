//! Running the tool calls of one model turn: each call is resolved to its connection and MCP
//! tool, its arguments parsed, and (if the tool is not read-only) confirmed, one at a time, so
//! a person is never asked two things at once; then the calls run concurrently, at most
//! `max_parallel` at a time, and their results come back in the model's order. Whatever goes
//! wrong with one call (an unknown function, bad JSON, a refusal, a transport error) becomes
//! that call's result, so the model can correct itself; only cancellation ends the batch, and
//! dropping the in-flight calls makes the MCP client send `notifications/cancelled`.

use super::hooks::{AgentEvent, AgentHooks, PendingCall};
use crate::feedback::result_text;
use crate::llm::ToolCall;
use crate::observe::{self, Observed, Operation, SharedObserver, TraceContext};
use crate::toolbox::{ToolInfo, Toolbox};
use futures_util::StreamExt;
use serde_json::Value;
use std::time::Duration;
use toolyard_client::RequestOptions;
use tracing::Instrument;

/// What one call comes to: the text the model gets.
pub(crate) struct Outcome {
    pub(crate) id: String,
    pub(crate) text: String,
}

enum Prepared<'a> {
    Run {
        id: String,
        info: &'a ToolInfo,
        arguments: Value,
    },
    Answer(Outcome),
}

/// The settings a batch runs with.
pub(crate) struct Batch<'a> {
    pub(crate) toolbox: &'a Toolbox,
    pub(crate) hooks: &'a AgentHooks,
    pub(crate) max_parallel: usize,
    pub(crate) timeout: Option<Duration>,
    /// Reports each call as an `execute_tool` span under `parent` (the run's).
    pub(crate) observer: Option<&'a SharedObserver>,
    pub(crate) parent: Option<&'a TraceContext>,
}

impl Batch<'_> {
    /// Runs `calls`; the outcomes are in the same order.
    pub(crate) async fn run(&self, calls: &[ToolCall]) -> Vec<Outcome> {
        let mut prepared = Vec::with_capacity(calls.len());
        for call in calls {
            prepared.push(self.prepare(call).await);
        }
        futures_util::stream::iter(prepared)
            .map(|p| self.execute(p))
            .buffered(self.max_parallel.max(1))
            .collect()
            .await
    }

    fn failed(&self, call: &ToolCall, server: &str, tool: &str, text: String) -> Prepared<'static> {
        self.hooks.emit(&AgentEvent::ToolResult {
            id: call.id.clone(),
            server: server.to_owned(),
            tool: tool.to_owned(),
            is_error: true,
            text: text.clone(),
            result: None,
        });
        Prepared::Answer(Outcome {
            id: call.id.clone(),
            text,
        })
    }

    async fn prepare(&self, call: &ToolCall) -> Prepared<'_> {
        let name = &call.function.name;
        let Some(info) = self.toolbox.resolve(name) else {
            let known: Vec<&str> = self
                .toolbox
                .tools()
                .iter()
                .map(|t| t.function.as_str())
                .collect();
            return self.failed(
                call,
                "",
                name,
                format!(
                    "Error: there is no tool `{name}`; the tools are: {}",
                    known.join(", ")
                ),
            );
        };
        let arguments = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(v @ Value::Object(_)) => v,
            Ok(Value::Null) => Value::Object(Default::default()),
            Ok(other) => {
                return self.failed(
                    call,
                    &info.server,
                    &info.tool.name,
                    format!("Error: the arguments must be a JSON object, not {other}"),
                )
            }
            Err(e) => {
                return self.failed(
                    call,
                    &info.server,
                    &info.tool.name,
                    format!("Error: the arguments are not valid JSON ({e})"),
                )
            }
        };
        if !info.read_only() {
            if let Some(confirm) = &self.hooks.confirm {
                let pending = PendingCall {
                    server: info.server.clone(),
                    tool: info.tool.name.clone(),
                    arguments: arguments.clone(),
                };
                if !confirm(pending).await {
                    return self.failed(
                        call,
                        &info.server,
                        &info.tool.name,
                        "Error: the user declined this tool call".to_owned(),
                    );
                }
            }
        }
        Prepared::Run {
            id: call.id.clone(),
            info,
            arguments,
        }
    }

    async fn execute(&self, prepared: Prepared<'_>) -> Outcome {
        let (id, info, arguments) = match prepared {
            Prepared::Answer(o) => return o,
            Prepared::Run {
                id,
                info,
                arguments,
            } => (id, info, arguments),
        };
        self.hooks.emit(&AgentEvent::ToolCall {
            id: id.clone(),
            server: info.server.clone(),
            tool: info.tool.name.clone(),
            arguments: arguments.clone(),
        });
        let mut options = RequestOptions::default();
        if let Some(t) = self.timeout {
            options = options.timeout(t);
        }
        if self.hooks.on_event.is_some() {
            let hooks = self.hooks.clone();
            let (server, tool) = (info.server.clone(), info.tool.name.clone());
            options = options.on_progress(move |p| {
                hooks.emit(&AgentEvent::Progress {
                    server: server.clone(),
                    tool: tool.clone(),
                    params: p.clone(),
                });
            });
        }
        let observed = Observed::start(
            self.observer,
            &Operation::ExecuteTool {
                tool: &info.tool.name,
                call_id: &id,
                description: info.tool.description.as_deref(),
                server: &info.server,
            },
            self.parent,
        );
        // The MCP request carries the span's context, so its own CLIENT span (and the
        // server's spans) are its children.
        if let Some(cx) = observed.context() {
            options.meta = Some(cx.to_meta());
        }
        // The GenAI `execute_tool` span of this call, for `tracing` subscribers.
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", info.tool.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %info.tool.name,
            gen_ai.tool.call.id = %id,
            mcp.server = %info.server,
        );
        let outcome = match self.toolbox.client(&info.server) {
            Some(client) => {
                client
                    .call_tool_with(&info.tool.name, arguments, &options)
                    .instrument(span)
                    .await
            }
            None => Err(toolyard_client::ClientError::Closed),
        };
        let error_type = match &outcome {
            Ok(r) if r.failed() => Some("tool_error"),
            Ok(_) => None,
            Err(e) => Some(e.kind()),
        };
        observed.finish(&observe::Outcome {
            error_type,
            ..observe::Outcome::default()
        });
        let (text, is_error, result) = match outcome {
            Ok(result) => (result_text(&result), result.failed(), Some(result)),
            Err(e) => (format!("Error: the call failed: {e}"), true, None),
        };
        self.hooks.emit(&AgentEvent::ToolResult {
            id: id.clone(),
            server: info.server.clone(),
            tool: info.tool.name.clone(),
            is_error,
            text: text.clone(),
            result,
        });
        Outcome { id, text }
    }
}
