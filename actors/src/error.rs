//! The error a handler (tool, prompt, resource reader) returns, and how it maps to the wire.

use crate::context::InputError;
use std::borrow::Cow;
use toolyard_proto::ErrorObject;

/// A handler's failure.
///
/// For tools, [`HandlerError::Failed`] and [`HandlerError::InvalidArguments`] become results
/// with `isError: true` (the model sees them and may retry); [`HandlerError::Protocol`]
/// becomes a JSON-RPC error. For prompts and resources every failure is a JSON-RPC error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    /// The arguments do not fit the input schema; the message names the bad field.
    #[error("Invalid arguments: {0}")]
    InvalidArguments(Cow<'static, str>),
    /// The operation failed.
    #[error("{0}")]
    Failed(Cow<'static, str>),
    /// A protocol-level error to answer with as is.
    #[error("{0}")]
    Protocol(ErrorObject),
    /// Asking the client for input did not give an answer (see [`InputError`]).
    #[error(transparent)]
    Input(#[from] InputError),
}

/// The error type of tools.
pub type ToolError = HandlerError;

impl HandlerError {
    /// A failure with a message.
    pub fn failed(message: impl Into<Cow<'static, str>>) -> Self {
        HandlerError::Failed(message.into())
    }
    /// An argument error with a message naming the field.
    pub fn invalid_arguments(message: impl Into<Cow<'static, str>>) -> Self {
        HandlerError::InvalidArguments(message.into())
    }
}

impl From<ErrorObject> for HandlerError {
    fn from(e: ErrorObject) -> Self {
        HandlerError::Protocol(e)
    }
}

impl From<String> for HandlerError {
    fn from(s: String) -> Self {
        HandlerError::Failed(s.into())
    }
}

impl From<&'static str> for HandlerError {
    fn from(s: &'static str) -> Self {
        HandlerError::Failed(s.into())
    }
}

impl From<std::io::Error> for HandlerError {
    fn from(e: std::io::Error) -> Self {
        HandlerError::Failed(e.to_string().into())
    }
}

impl From<serde_json::Error> for HandlerError {
    fn from(e: serde_json::Error) -> Self {
        HandlerError::Failed(e.to_string().into())
    }
}
