//! What an agent run can fail with. Tool failures are not here: the model is told about
//! them and carries on; these are the failures that end a run.

use crate::llm::LlmError;
use toolyard_client::ClientError;

/// An agent run (or building its toolbox) failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// The model could not be asked.
    #[error(transparent)]
    Llm(LlmError),
    /// The configuration is wrong (no servers, duplicate names, a bad protocol version).
    #[error("agent configuration: {0}")]
    Config(String),
    /// A server could not be reached.
    #[error("cannot connect to `{server}`: {source}")]
    Connect {
        /// The connection.
        server: String,
        /// Why.
        source: ClientError,
    },
    /// A server's tools could not be listed.
    #[error("cannot list the tools of `{server}`: {source}")]
    ListTools {
        /// The connection.
        server: String,
        /// Why.
        source: ClientError,
    },
    /// More tools than one request may carry.
    #[error(
        "{count} tools are more than the {limit} a chat request may carry: name the ones the \
         agent may use in an allow-list ([agent] tools = [\"server/tool\", \"server/*\", ...])"
    )]
    TooManyTools {
        /// How many there are (after the allow-list).
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// An allow-list entry names no tool (a typo would otherwise silently drop a tool).
    #[error("the allow-list entry `{0}` matches no tool")]
    UnmatchedAllowEntry(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl From<LlmError> for AgentError {
    fn from(e: LlmError) -> Self {
        match e {
            LlmError::Cancelled => AgentError::Cancelled,
            other => AgentError::Llm(other),
        }
    }
}

impl AgentError {
    /// A short, low-cardinality name of the failure (the `error.type` of a run's span).
    pub fn kind(&self) -> String {
        match self {
            AgentError::Llm(e) => e.kind(),
            AgentError::Config(_) => "config".to_owned(),
            AgentError::Connect { .. } => "connect".to_owned(),
            AgentError::ListTools { .. } => "list_tools".to_owned(),
            AgentError::TooManyTools { .. } => "too_many_tools".to_owned(),
            AgentError::UnmatchedAllowEntry(_) => "unmatched_allow_entry".to_owned(),
            AgentError::Cancelled => "cancelled".to_owned(),
        }
    }
}
