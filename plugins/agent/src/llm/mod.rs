//! The LLM half: a thin client for OpenAI-compatible chat completions (OpenAI, Azure OpenAI,
//! vLLM, Ollama, llama.cpp, LM Studio), written on the tree's own reqwest rather than taken
//! from an SDK so the tree keeps one HTTP stack and the streamed tool calls of real servers,
//! which strict SDK types reject, are assembled tolerantly (see `assemble`).

mod assemble;
mod chat;
mod client;
mod endpoint;
mod error;
mod retry;
mod sse;

pub use chat::{
    ChatRequest, ChatResponse, ContentPart, FinishReason, FunctionCall, FunctionTool, ImageUrl,
    InputAudio, Message, ToolCall, ToolChoice, Usage, UserContent,
};
pub use client::{LlmClient, LlmOptions, MaxTokensField};
pub use endpoint::{Credential, Endpoint, UrlShape, AZURE_DEFAULT_API_VERSION, OPENAI_BASE_URL};
pub use error::{ApiError, LlmError};
