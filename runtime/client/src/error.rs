//! What a client call can fail with: one small type, each variant a distinct cause the
//! caller may handle differently.

use super::transport::TransportError;
use std::time::Duration;
use toolyard_proto::ErrorObject;

/// A client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The transport failed (process exited, connection refused, malformed output).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// No answer within the request timeout (or the hard maximum progress cannot extend).
    #[error("`{method}` timed out after {after:?}")]
    Timeout {
        /// The method.
        method: String,
        /// How long we waited.
        after: Duration,
    },
    /// The server broke the protocol (an unreadable result, an unexpected answer).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The handshake (`server/discover` or `initialize`) failed.
    #[error("initialization failed: {0}")]
    Initialization(String),
    /// A tool answered with `isError: true` (from [`Client::call_tool_ok`](super::Client::call_tool_ok)).
    #[error("tool `{name}` failed: {message}")]
    ToolCall {
        /// The tool.
        name: String,
        /// The text of its error content.
        message: String,
    },
    /// The server does not have this method (-32601).
    #[error("the server has no method `{0}`")]
    MethodNotFound(String),
    /// Credentials were refused or could not be obtained.
    #[error("authorization failed: {0}")]
    Auth(String),
    /// The server answered with a JSON-RPC error.
    #[error("server error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// The server kept asking for input beyond the configured number of rounds.
    #[error("the server asked for input more than {0} times")]
    TooManyRounds(usize),
}

impl ClientError {
    /// The error a JSON-RPC error response stands for.
    pub(crate) fn from_rpc(method: &str, error: ErrorObject) -> Self {
        if error.code == toolyard_proto::error::code::METHOD_NOT_FOUND {
            ClientError::MethodNotFound(method.to_owned())
        } else {
            ClientError::Rpc(error)
        }
    }

    /// A short, stable name of the failure's kind (`timeout`, `transport`, ...): the
    /// `error.type` of telemetry.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Transport(_) => "transport",
            ClientError::Timeout { .. } => "timeout",
            ClientError::Protocol(_) => "protocol",
            ClientError::Initialization(_) => "initialization",
            ClientError::ToolCall { .. } => "tool_error",
            ClientError::MethodNotFound(_) => "method_not_found",
            ClientError::Auth(_) => "auth",
            ClientError::Rpc(_) => "rpc",
            ClientError::Closed => "closed",
            ClientError::TooManyRounds(_) => "too_many_rounds",
        }
    }

    /// The JSON-RPC error object, when the server sent one.
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            ClientError::Rpc(e) => Some(e),
            _ => None,
        }
    }
}
