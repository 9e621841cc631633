//! The agent loop: ask the model with every tool on offer, run the tools it calls on the MCP
//! connections that own them, hand the results back, and repeat until the model answers
//! without calling tools, or `max_turns` is reached.
//!
//! Some servers end a turn that called tools with `finish_reason: "stop"`, so the loop goes
//! by the calls it assembled, not by the finish reason. The conversation is the caller's
//! `Vec<Message>`: each turn appends the assistant message and one `tool` message per call,
//! in the model's order, so an interactive session simply keeps passing the same history.
//! Before each model request the tools are listed again if a server said they changed.

mod calls;
mod hooks;

pub use hooks::{AgentEvent, AgentHooks, ConfirmCallback, EventCallback, PendingCall};

use crate::error::AgentError;
use crate::llm::{ChatRequest, FinishReason, LlmClient, Message, ToolChoice, Usage};
use crate::observe::{Observed, Operation, Outcome, TraceContext};
use crate::toolbox::Toolbox;
use calls::Batch;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `gen_ai.agent.name` of the runs' spans.
const AGENT_NAME: &str = "toolyard";

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The model (for Azure's deployments URL, the deployment decides).
    pub model: String,
    /// Sent first in every request, not kept in the history.
    pub system_prompt: Option<String>,
    /// Model requests per run at most (default 8).
    pub max_turns: usize,
    /// Tool calls running at once at most (default 4).
    pub max_parallel_calls: usize,
    /// Stream the model's answers (default true).
    pub stream: bool,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Tokens per answer at most.
    pub max_tokens: Option<u64>,
    /// A tool call's timeout, instead of the connection's.
    pub tool_timeout: Option<Duration>,
}

impl AgentOptions {
    /// Options for `model`, with the defaults.
    pub fn new(model: impl Into<String>) -> Self {
        AgentOptions {
            model: model.into(),
            system_prompt: None,
            max_turns: 8,
            max_parallel_calls: 4,
            stream: true,
            temperature: None,
            max_tokens: None,
            tool_timeout: None,
        }
    }
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The model answered without calling tools, for this reason.
    Finished(FinishReason),
    /// `max_turns` model requests were made and the model still called tools.
    MaxTurns,
}

/// What a run came to.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The model's last text.
    pub text: Option<String>,
    /// Model requests made.
    pub turns: usize,
    /// Tokens used over all of them (as far as the server reported).
    pub usage: Usage,
    /// Why the run ended.
    pub stop: StopReason,
}

/// A model plus the tools of some MCP connections.
#[derive(Debug, Clone)]
pub struct Agent {
    llm: LlmClient,
    /// Replaced when a server's tools change.
    toolbox: Arc<Mutex<Arc<Toolbox>>>,
    options: AgentOptions,
    hooks: AgentHooks,
}

impl Agent {
    /// An agent asking `llm`, with the tools of `toolbox`.
    pub fn new(llm: LlmClient, toolbox: Toolbox, options: AgentOptions) -> Self {
        Agent {
            llm,
            toolbox: Arc::new(Mutex::new(Arc::new(toolbox))),
            options,
            hooks: AgentHooks::default(),
        }
    }

    /// With these hooks (events, confirmations).
    pub fn with_hooks(mut self, hooks: AgentHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The tools on offer.
    pub fn toolbox(&self) -> Arc<Toolbox> {
        self.toolbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The toolbox, listed again first if a server said its tools changed.
    async fn current_toolbox(&self) -> Result<Arc<Toolbox>, AgentError> {
        let current = self.toolbox();
        if !current.tools_changed() {
            return Ok(current);
        }
        let fresh = Arc::new(current.refresh().await?);
        *self.toolbox.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        self.hooks
            .emit(&AgentEvent::ToolsChanged(fresh.tools().len()));
        Ok(fresh)
    }

    /// Runs the loop on `history` (which ends with the user's message), appending what the
    /// model says and what the tools answer. Cancelling `cancel` stops the model request
    /// and the tool calls in flight (the servers are told), and returns
    /// [`AgentError::Cancelled`]; the history then holds the turns that were completed, and
    /// calls that were cancelled have the result `Error: cancelled by the user`.
    ///
    /// With an observer on the LLM client ([`LlmClient::with_observer`]) the run is an
    /// `invoke_agent toolyard` span, the parent of each model request's `chat` span and each
    /// tool call's `execute_tool` span (whose context the MCP request carries in `_meta`).
    pub async fn run(
        &self,
        history: &mut Vec<Message>,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, AgentError> {
        let observed = Observed::start(
            self.llm.observer(),
            &Operation::InvokeAgent {
                agent: AGENT_NAME,
                provider: self.llm.endpoint().provider_name(),
                model: &self.options.model,
            },
            None,
        );
        let parent = observed.context();
        let outcome = self.run_inner(history, cancel, parent.as_ref()).await;
        match &outcome {
            Ok(o) => {
                let reason = match &o.stop {
                    StopReason::Finished(f) => f.as_str(),
                    StopReason::MaxTurns => Some("max_turns"),
                };
                observed.finish(&Outcome {
                    finish_reasons: reason.into_iter().collect(),
                    usage: Some(o.usage),
                    ..Outcome::default()
                });
            }
            Err(e) => {
                let kind = e.kind();
                observed.finish(&Outcome {
                    error_type: Some(&kind),
                    ..Outcome::default()
                });
            }
        }
        outcome
    }

    async fn run_inner(
        &self,
        history: &mut Vec<Message>,
        cancel: &CancellationToken,
        parent: Option<&TraceContext>,
    ) -> Result<RunOutcome, AgentError> {
        let mut usage = Usage::default();
        for turn in 1..=self.options.max_turns {
            self.hooks.emit(&AgentEvent::TurnStarted(turn));
            let toolbox = self.current_toolbox().await?;
            let functions = toolbox.functions();
            let batch = Batch {
                toolbox: &toolbox,
                hooks: &self.hooks,
                max_parallel: self.options.max_parallel_calls,
                timeout: self.options.tool_timeout,
                observer: self.llm.observer(),
                parent,
            };
            let mut messages = Vec::with_capacity(history.len() + 1);
            if let Some(system) = &self.options.system_prompt {
                messages.push(Message::system(system.clone()));
            }
            messages.extend(history.iter().cloned());
            let request = ChatRequest {
                model: self.options.model.clone(),
                messages,
                tool_choice: (!functions.is_empty()).then_some(ToolChoice::Auto),
                tools: functions,
                max_tokens: self.options.max_tokens,
                temperature: self.options.temperature,
                parent: parent.cloned(),
                ..ChatRequest::default()
            };
            let answer = if self.options.stream {
                let hooks = &self.hooks;
                self.llm
                    .stream(&request, cancel, &mut |t| {
                        hooks.emit(&AgentEvent::Text(t.to_owned()));
                    })
                    .await?
            } else {
                let a = self.llm.complete(&request, cancel).await?;
                if let Some(t) = &a.content {
                    self.hooks.emit(&AgentEvent::Text(t.clone()));
                }
                a
            };
            if let Some(u) = answer.usage {
                usage += u;
                self.hooks.emit(&AgentEvent::Usage(u));
            }
            history.push(answer.to_message());
            if answer.tool_calls.is_empty() {
                return Ok(RunOutcome {
                    text: answer.content,
                    turns: turn,
                    usage,
                    stop: StopReason::Finished(answer.finish_reason),
                });
            }
            let outcomes = tokio::select! {
                () = cancel.cancelled() => {
                    // Every call still gets its result, so the history stays a valid
                    // conversation to continue.
                    for call in &answer.tool_calls {
                        history.push(Message::tool(call.id.clone(), "Error: cancelled by the user"));
                    }
                    return Err(AgentError::Cancelled);
                }
                outcomes = batch.run(&answer.tool_calls) => outcomes,
            };
            for o in outcomes {
                history.push(Message::tool(o.id, o.text));
            }
            if turn == self.options.max_turns {
                return Ok(RunOutcome {
                    text: answer.content,
                    turns: turn,
                    usage,
                    stop: StopReason::MaxTurns,
                });
            }
        }
        Ok(RunOutcome {
            text: None,
            turns: 0,
            usage,
            stop: StopReason::MaxTurns,
        })
    }
}
