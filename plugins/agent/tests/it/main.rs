//! The agent crate's integration tests: the chat-completions client against a scripted fake
//! OpenAI-compatible server, and the agent loop against it and real MCP servers.
#![allow(
    clippy::needless_pass_by_value,
    reason = "test helpers take what they check by value"
)]

mod agent_loop;
mod fake;
mod llm;
mod sampling;
