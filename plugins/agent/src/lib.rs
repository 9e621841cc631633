//! Toolyard's agent side: the LLM half on top of the MCP half.
//!
//! - [`llm`]: an OpenAI-compatible chat-completions client (OpenAI, Azure OpenAI, any
//!   compatible server), streamed or not, with retries, timeouts and cancellation.
//! - [`Agent`]: the tool-calling loop over MCP connections ([`Toolbox`], from `[[clients]]`
//!   entries, a `ClientRegistry` or named clients), with events and confirmations going to the
//!   caller through [`AgentHooks`] and tools' questions to [`ToolHandlers`].
//! - [`LlmSampler`]: answers servers' `sampling/createMessage` with the model, within an
//!   allow-list of models and a per-server token budget, after a review hook.
//!
//! ```no_run
//! use toolyard_agent::llm::{Endpoint, LlmClient, LlmOptions, Message};
//! use toolyard_agent::{Agent, AgentOptions, CancellationToken, ToolHandlers, Toolbox};
//!
//! # async fn run(servers: Vec<toolyard_client::ClientEntry>) -> Result<(), Box<dyn std::error::Error>> {
//! let llm = LlmClient::new(Endpoint::openai("sk-..."), LlmOptions::default())?;
//! let me = toolyard_proto::Implementation::new("my-agent", "1.0");
//! let toolbox = Toolbox::connect(&servers, me, &ToolHandlers::default(), &[]).await?;
//! let agent = Agent::new(llm, toolbox, AgentOptions::new("gpt-4o-mini"));
//! let mut history = vec![Message::user("What is 2 + 3?")];
//! let outcome = agent.run(&mut history, &CancellationToken::new()).await?;
//! println!("{}", outcome.text.unwrap_or_default());
//! # Ok(())
//! # }
//! ```
//!
//! The crate depends on `toolyard-client` (the MCP connections the agent calls tools on),
//! never the other way round: the MCP client stays free of any LLM dependency.

mod agent;
pub mod config;
mod connect;
mod error;
mod feedback;
pub mod llm;
pub mod names;
mod observe;
mod sampling;
pub mod schema;
mod toolbox;

pub use agent::{
    Agent, AgentEvent, AgentHooks, AgentOptions, ConfirmCallback, EventCallback, PendingCall,
    RunOutcome, StopReason,
};
pub use connect::ToolHandlers;
pub use error::AgentError;
pub use feedback::result_text;
pub use observe::{GenAiObserver, GenAiSpan, Operation, Outcome, SharedObserver, TraceContext};
pub use sampling::{LlmSampler, Review, ReviewHook, SamplerConfig, REJECTED};
/// Cancels a run (re-exported: it is part of this crate's API).
pub use tokio_util::sync::CancellationToken;
pub use toolbox::{ToolInfo, Toolbox, MAX_TOOLS};
